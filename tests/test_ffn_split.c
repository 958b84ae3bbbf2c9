/* test_ffn_split — the FFN computed as the sum of partial FFNs over disjoint neuron subsets (gpud's
 * hot share + cpud's cold share) equals the dense FFN: within 1e-5 for splits in whole blocks at
 * every type, and for arbitrary splits at float types; masks restrict the neurons computed. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ffn_split.h"
#include "model.h"
#include "ops.h"
#include "pi_err.h"
#include "quant.h"
#include "threadpool.h"
#include "testutil.h"

#define B 3

static double rel(const float *a, const float *b, int64_t n)
{
    double md = 0, mr = 0;
    for (int64_t i = 0; i < n; i++) {
        md = fmax(md, fabs((double)a[i] - b[i]));
        mr = fmax(mr, fabs((double)b[i]));
    }
    return md / (mr > 0 ? mr : 1);
}

static void dense_ffn(struct pi_pool *pool, const struct pi_model *m, int layer, const float *xn, float *y)
{
    const struct pi_layer *l = &m->layers[layer];
    const int64_t F = m->hp.n_ff;
    float *g = malloc((size_t)B * F * sizeof *g), *u = malloc((size_t)B * F * sizeof *u);
    struct ops_scratch s = { 0 };
    ops_matmul(pool, &s, &l->ffn_gate, xn, g, B);
    ops_matmul(pool, &s, &l->ffn_up, xn, u, B);
    for (int64_t i = 0; i < B * F; i++)
        g[i] = model_glu(m->hp.act, g[i], u[i]);
    ops_matmul(pool, &s, &l->ffn_down, g, y, B);
    ops_scratch_fini(&s);
    free(g);
    free(u);
}

static void check_file(const char *path, bool exact_any_split)
{
    struct pi_model *m = NULL;
    int rc = model_load(&m, path);
    REQUIRE(rc == 0, "load %s: %s", path, pi_errmsg());
    struct pi_pool *pool = NULL;
    CHECK_OK(pool_new(&pool, 2));
    const int64_t E = m->hp.n_embd, F = m->hp.n_ff;
    float *xn = malloc((size_t)B * E * sizeof *xn), *yd = malloc((size_t)B * E * sizeof *yd),
          *y1 = malloc((size_t)B * E * sizeof *y1), *y2 = malloc((size_t)B * E * sizeof *y2);
    uint8_t *sel = malloc((size_t)F), *mask = malloc((size_t)B * F);
    srand(3);
    for (int64_t i = 0; i < B * E; i++)
        xn[i] = (float)rand() / RAND_MAX * 2 - 1;
    struct ffn_runs r0 = { 0 }, r1 = { 0 };
    struct ffn_scratch s = { 0 };
    for (int layer = 0; layer < m->hp.n_layer; layer += 2) {
        dense_ffn(pool, m, layer, xn, yd);
        for (int variant = 0; variant < 3; variant++) {
            /* 0: first half in blocks; 1: alternating blocks of 32; 2: random neurons */
            if (variant == 2 && !exact_any_split)
                continue;
            for (int64_t i = 0; i < F; i++)
                sel[i] = variant == 0 ? i < F / 2 : variant == 1 ? (i / 32) % 2 : rand() % 2;
            CHECK_OK(ffn_runs_build(&r0, sel, 1, NULL, 0, F));
            CHECK_OK(ffn_runs_build(&r1, sel, 0, NULL, 0, F));
            CHECK(r0.n_neurons + r1.n_neurons == F, "runs cover %lld + %lld of %lld neurons",
                  (long long)r0.n_neurons, (long long)r1.n_neurons, (long long)F);
            uint64_t b0, b1;
            CHECK_OK(ffn_partial(pool, &s, m, (struct pi_layer_weights[]){ model_layer_weights(m, layer) }, xn, B, &r0, NULL, y1, &b0));
            CHECK_OK(ffn_partial(pool, &s, m, (struct pi_layer_weights[]){ model_layer_weights(m, layer) }, xn, B, &r1, NULL, y2, &b1));
            for (int64_t i = 0; i < B * E; i++)
                y1[i] += y2[i];
            double d = rel(y1, yd, B * E);
            CHECK(d < 1e-5, "%s layer %d split %d: hot+cold differs from dense by %.3g", path, layer, variant, d);
            CHECK(b0 > 0 && b1 > 0, "bytes read must be counted");
        }
        /* a mask that activates nothing computes nothing */
        memset(sel, 1, (size_t)F);
        memset(mask, 0, (size_t)B * F);
        CHECK_OK(ffn_runs_build(&r0, sel, 1, mask, B, F));
        CHECK(r0.n == 0, "an empty mask must give no runs");
        CHECK_OK(ffn_partial(pool, &s, m, (struct pi_layer_weights[]){ model_layer_weights(m, layer) }, xn, B, &r0, NULL, y1, NULL));
        CHECK(y1[0] == 0.0f && y1[B * E - 1] == 0.0f, "no neurons → zero output");
        /* mask rows are OR-ed across the batch */
        mask[5] = 1;
        mask[(B - 1) * F + 100] = 1;
        CHECK_OK(ffn_runs_build(&r0, sel, 1, mask, B, F));
        CHECK(r0.n == 2 && r0.run[0][0] == 5 && r0.run[1][0] == 100 && r0.n_neurons == 2, "mask union runs");
    }
    ffn_runs_fini(&r0);
    ffn_runs_fini(&r1);
    ffn_scratch_fini(&s);
    free(xn), free(yd), free(y1), free(y2), free(sel), free(mask);
    pool_free(pool);
    model_free(m);
}

/* the runs of a set given as bits (the device's cold bits, one token) = the runs of the same set
 * from a selector and a mask, for sizes around the 64-neuron words and densities from empty to full */
static void check_runs_from_bits(void)
{
    static const int64_t sizes[] = { 1, 63, 64, 65, 127, 128, 200, 11008 };
    static const int dens[] = { 0, 3, 50, 97, 100 };
    /* sel: 1 = placed elsewhere, for 3 of 4 neurons or none (then long runs cross the word boundaries,
     * and at 100 % one is still open at n_ff) */
    static const int cold_every[] = { 4, 1 };
    struct ffn_runs ra = { 0 }, rb = { 0 };
    srand(11);
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (size_t ci = 0; ci < sizeof cold_every / sizeof cold_every[0]; ci++)
            for (size_t di = 0; di < sizeof dens / sizeof dens[0]; di++) {
                const int64_t F = sizes[si], W = (F + 63) / 64;
                uint8_t *sel = malloc((size_t)F), *mask = malloc((size_t)F);
                uint64_t *bits = malloc((size_t)W * sizeof *bits);
                memset(bits, 0xa5, (size_t)W * sizeof *bits); /* bits past F are set: they must not count */
                for (int64_t w = 0; w < W; w++)
                    for (int k = 0; k < 64 && 64 * w + k < F; k++)
                        bits[w] &= ~(1ull << k);
                for (int64_t i = 0; i < F; i++) {
                    sel[i] = (uint8_t)(rand() % cold_every[ci] != 0);
                    mask[i] = (uint8_t)(rand() % 100 < dens[di]);
                    if (!sel[i] && mask[i])
                        bits[i / 64] |= 1ull << (i % 64);
                }
                CHECK_OK(ffn_runs_build(&ra, sel, 0, mask, 1, F));
                CHECK_OK(ffn_runs_from_bits(&rb, bits, F));
                /* both against the runs found neuron by neuron */
                int32_t n_ref = 0, bad = 0;
                int64_t nn_ref = 0;
                for (int64_t i = 0; i < F; i++) {
                    const bool on = !sel[i] && mask[i], prev = i > 0 && !sel[i - 1] && mask[i - 1];
                    if (on && !prev) {
                        int64_t e = i;
                        while (e < F && !sel[e] && mask[e])
                            e++;
                        bad += n_ref >= ra.n || ra.run[n_ref][0] != i || ra.run[n_ref][1] != e - i;
                        n_ref++, nn_ref += e - i;
                    }
                }
                CHECK(!bad && ra.n == n_ref && ra.n_neurons == nn_ref,
                      "runs from the mask = neuron by neuron (n_ff %lld, %d %%: %d / %d runs, %d wrong)", (long long)F,
                      dens[di], ra.n, n_ref, bad);
                bool same = ra.n == rb.n && ra.n_neurons == rb.n_neurons;
                for (int32_t k = 0; same && k < ra.n; k++)
                    same = ra.run[k][0] == rb.run[k][0] && ra.run[k][1] == rb.run[k][1];
                CHECK(same, "runs from bits = runs from the mask (n_ff %lld, %d %%: %d / %d runs)", (long long)F,
                      dens[di], rb.n, ra.n);
                free(sel), free(mask), free(bits);
            }
    ffn_runs_fini(&ra);
    ffn_runs_fini(&rb);
}

int main(int argc, char **argv)
{
    check_runs_from_bits();
    if (argc < 2)
        SKIP("usage: test_ffn_split F16.gguf [QUANT.gguf...]");
    for (int a = 1; a < argc; a++)
        check_file(argv[a], a == 1);
    return tu_finish("ffn_split");
}
