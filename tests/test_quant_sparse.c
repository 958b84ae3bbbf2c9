/* test_quant_sparse — the sparse FFN over 256-element super-block types (files written by pictl
 * quantize from the tiny model): runs over ffn_down are cut at the type's sub-blocks (16/32
 * neurons), not widened to 256:
 *  - a split at whole 256-neuron blocks: hot + cold = dense within 1e-5 (the Q8_K activation
 *    scales see the same values);
 *  - a split in alternating 32-neuron blocks: each part equals an f64 reference of the same neurons
 *    over the dequantized weights and the Q8_K-quantized activations that part used, and the bytes
 *    counted for ffn_down are the part's share (half), not the whole matrix;
 *  - hot + cold against dense within the activations' Q8_K rounding (a 256-block's scale depends on
 *    which of its neurons are in the part).
 * usage: test_quant_sparse MODEL.gguf... */
#include "ffn_split.h"
#include "model.h"
#include "ops.h"
#include "pi_err.h"
#include "quant.h"
#include "threadpool.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define B 2
#define Q8K_TOL 2e-2 /* relative: activations rounded to 8 bits with different block maxima */

static double rel(const float *a, const float *b, int64_t n)
{
    double md = 0, mr = 0;
    for (int64_t i = 0; i < n; i++) {
        md = fmax(md, fabs((double)a[i] - b[i]));
        mr = fmax(mr, fabs((double)b[i]));
    }
    return md / (mr > 0 ? mr : 1);
}

static void dense_ffn(struct pi_pool *pool, const struct pi_model *m, int layer, const float *xn, float *y, float *act)
{
    const struct pi_layer *l = &m->layers[layer];
    const int64_t F = m->hp.n_ff;
    float *u = malloc((size_t)B * F * sizeof *u);
    struct ops_scratch s = { 0 };
    ops_matmul(pool, &s, &l->ffn_gate, xn, act, B);
    ops_matmul(pool, &s, &l->ffn_up, xn, u, B);
    for (int64_t i = 0; i < B * F; i++)
        act[i] = model_glu(m->hp.act, act[i], u[i]);
    ops_matmul(pool, &s, &l->ffn_down, act, y, B);
    ops_scratch_fini(&s);
    free(u);
}

/* f64: y[b, e] = Σ_{i in sel} down[e, i] · q8k(act_sel)[b, i], act_sel = act with neurons outside sel 0 */
static void ref_part(const struct pi_model *m, int layer, const float *act, const uint8_t *sel, uint8_t want, double *y)
{
    const struct pi_tensor *d = &m->layers[layer].ffn_down;
    const int64_t E = m->hp.n_embd, F = m->hp.n_ff;
    const struct pi_type_traits *dt = quant_traits_ref(d->type), *vt = quant_traits_ref(dt->vec_dot_type);
    float *row = malloc((size_t)F * sizeof *row), *a = malloc((size_t)F * sizeof *a), *aq = malloc((size_t)F * sizeof *aq);
    uint8_t *q = malloc(quant_row_size(dt->vec_dot_type, F));
    for (int32_t t = 0; t < B; t++) {
        for (int64_t i = 0; i < F; i++)
            a[i] = sel[i] == want ? act[(size_t)t * F + i] : 0.0f;
        vt->from_float(a, q, F);
        vt->to_float(q, aq, F);
        for (int64_t e = 0; e < E; e++) {
            dt->to_float((const char *)d->data + (size_t)e * d->row_bytes, row, F);
            double s = 0;
            for (int64_t i = 0; i < F; i++)
                if (sel[i] == want)
                    s += (double)row[i] * aq[i];
            y[(size_t)t * E + e] = s;
        }
    }
    free(row), free(a), free(aq), free(q);
}

static void check_file(const char *path)
{
    struct pi_model *m = NULL;
    REQUIRE(model_load(&m, path) == 0, "load %s: %s", path, pi_errmsg());
    struct pi_pool *pool = NULL;
    CHECK_OK(pool_new(&pool, 2));
    const int64_t E = m->hp.n_embd, F = m->hp.n_ff;
    float *xn = malloc((size_t)B * E * sizeof *xn), *yd = malloc((size_t)B * E * sizeof *yd);
    float *y1 = malloc((size_t)B * E * sizeof *y1), *y2 = malloc((size_t)B * E * sizeof *y2);
    float *act = malloc((size_t)B * F * sizeof *act);
    double *yr = malloc((size_t)B * E * sizeof *yr);
    uint8_t *sel = malloc((size_t)F);
    srand(5);
    for (int64_t i = 0; i < B * E; i++)
        xn[i] = (float)rand() / RAND_MAX * 2 - 1;
    struct ffn_runs r0 = { 0 }, r1 = { 0 };
    struct ffn_scratch s = { 0 };
    int checked = 0;
    for (int layer = 0; layer < m->hp.n_layer; layer++) {
        const struct pi_tensor *d = &m->layers[layer].ffn_down;
        const struct pi_type_traits *dt = quant_traits(d->type);
        if (dt->blck_size != QK_K)
            continue; /* this layer's down is not a super-block type (a mixture's other type) */
        checked++;
        dense_ffn(pool, m, layer, xn, yd, act);
        for (int variant = 0; variant < 2; variant++) {
            for (int64_t i = 0; i < F; i++)
                sel[i] = variant == 0 ? (i / QK_K) % 2 : (i / 32) % 2;
            CHECK_OK(ffn_runs_build(&r0, sel, 1, NULL, 0, F));
            CHECK_OK(ffn_runs_build(&r1, sel, 0, NULL, 0, F));
            uint64_t b0 = 0, b1 = 0;
            CHECK_OK(ffn_partial(pool, &s, m, (struct pi_layer_weights[]){ model_layer_weights(m, layer) }, xn, B, &r0, NULL, y1, &b0));
            ref_part(m, layer, act, sel, 1, yr);
            float *yrf = malloc((size_t)B * E * sizeof *yrf);
            for (int64_t i = 0; i < B * E; i++)
                yrf[i] = (float)yr[i];
            CHECK(rel(y1, yrf, B * E) < 1e-4, "%s layer %d variant %d: part vs f64 reference %.3g", path, layer,
                  variant, rel(y1, yrf, B * E));
            free(yrf);
            CHECK_OK(ffn_partial(pool, &s, m, (struct pi_layer_weights[]){ model_layer_weights(m, layer) }, xn, B, &r1, NULL, y2, &b1));
            const uint64_t gu = (uint64_t)(F / 2) * (m->layers[layer].ffn_gate.row_bytes + m->layers[layer].ffn_up.row_bytes);
            const uint64_t down_half = (uint64_t)E * d->row_bytes / 2;
            CHECK(b0 == gu + down_half && b1 == gu + down_half, "%s layer %d variant %d: bytes %llu / %llu, want %llu",
                  path, layer, variant, (unsigned long long)b0, (unsigned long long)b1,
                  (unsigned long long)(gu + down_half));
            for (int64_t i = 0; i < B * E; i++)
                y1[i] += y2[i];
            const double dd = rel(y1, yd, B * E);
            if (variant == 0)
                CHECK(dd < 1e-5, "%s layer %d: whole-block split differs from dense by %.3g", path, layer, dd);
            else
                CHECK(dd < Q8K_TOL, "%s layer %d: 32-neuron split differs from dense by %.3g", path, layer, dd);
        }
    }
    CHECK(checked > 0, "%s: no layer with a super-block ffn_down", path);
    ffn_runs_fini(&r0), ffn_runs_fini(&r1);
    ffn_scratch_fini(&s);
    free(xn), free(yd), free(y1), free(y2), free(act), free(yr), free(sel);
    pool_free(pool);
    model_free(m);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        SKIP("no model given");
    for (int a = 1; a < argc; a++)
        check_file(argv[a]);
    return tu_finish("test_quant_sparse");
}
