/* test_backend_ops — gpud's backend table against the in-process engine: the layer steps
 * (embed, attn, get_h, ffn_begin / ffn_runs over a hot/cold split / ffn_end with a host cold share,
 * output) give the logits of ctx_eval. Every backend (the CPU one now; CUDA when built) runs the
 * same checks — llama.cpp's test-backend-ops habit.
 *
 * usage: test_backend_ops MODEL.gguf */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "forward.h"
#include "pi_err.h"
#include "threadpool.h"
#include "testutil.h"

#define N_TOK 12
#define N_PREFILL 7
#define SPLIT 0.5

static double rel(const float *a, const float *b, int64_t n)
{
    double md = 0, mr = 0;
    for (int64_t i = 0; i < n; i++) {
        md = fmax(md, fabs((double)a[i] - b[i]));
        mr = fmax(mr, fabs((double)b[i]));
    }
    return md / (mr > 0 ? mr : 1);
}

/* One evaluation through the table; the cold share is computed by a second ffn_runs (as gpud does
 * when cpud is down) for odd layers and handed in as a host array (as cpud's) for even ones. */
static int be_eval(const struct be_ops *ops, struct be *b, const struct pi_model *m, const int32_t *toks, int32_t n,
                   int32_t pos, float *logits, const uint8_t *sel)
{
    const int64_t E = m->hp.n_embd, F = m->hp.n_ff;
    struct ffn_runs hot = { 0 }, cold = { 0 };
    float *h = malloc((size_t)n * E * sizeof *h), *y = malloc((size_t)n * E * sizeof *y);
    struct pi_pool *pool = NULL;
    struct ffn_scratch fs = { 0 };
    float *xn = malloc((size_t)n * E * sizeof *xn);
    int rc = ffn_runs_build(&hot, sel, 1, NULL, 0, F);
    if (!rc)
        rc = ffn_runs_build(&cold, sel, 0, NULL, 0, F);
    if (!rc)
        rc = pool_new(&pool, 2);
    if (!rc)
        rc = ops->embed(b, toks, n);
    for (int l = 0; !rc && l < m->hp.n_layer; l++) {
        if ((rc = ops->attn(b, l, n, pos)) || (rc = ops->get_h(b, n, h)) || (rc = ops->ffn_begin(b, l, n)) ||
            (rc = ops->ffn_runs(b, l, n, &hot, NULL)))
            break;
        if (l % 2) {
            rc = ops->ffn_runs(b, l, n, &cold, NULL);
            if (!rc)
                rc = ops->ffn_end(b, n, NULL);
        } else { /* the host's cold share, from h as cpud computes it */
            ops_rmsnorm_rows(xn, h, m->layers[l].ffn_norm.data, n, E, m->hp.norm_eps);
            rc = ffn_partial(pool, &fs, m, l, xn, n, &cold, y, NULL);
            if (!rc)
                rc = ops->ffn_end(b, n, y);
        }
    }
    if (!rc)
        rc = ops->output(b, n, logits, false);
    ffn_runs_fini(&hot);
    ffn_runs_fini(&cold);
    ffn_scratch_fini(&fs);
    pool_free(pool);
    free(h), free(y), free(xn);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        SKIP("usage: test_backend_ops MODEL.gguf");
    struct pi_model *m = NULL;
    REQUIRE(model_load(&m, argv[1]) == 0, "load %s: %s", argv[1], pi_errmsg());
    const int32_t V = m->hp.n_vocab;
    const int64_t F = m->hp.n_ff;
    int32_t toks[N_TOK];
    for (int i = 0; i < N_TOK; i++)
        toks[i] = (int32_t)((i * 131 + 7) % V);
    uint8_t *sel = malloc((size_t)F);
    for (int64_t i = 0; i < F; i++)
        sel[i] = i < (int64_t)(F * SPLIT) / 32 * 32;

    struct pi_ctx *c = NULL;
    struct pi_ctx_params cp = { .n_ctx = 64, .n_batch = 8, .n_threads = 2 };
    CHECK_OK(ctx_new(&c, m, &cp));
    float *want = malloc((size_t)N_TOK * V * sizeof *want), *got = malloc((size_t)V * sizeof *got);
    CHECK_OK(ctx_eval(c, toks, N_PREFILL, 0, want + (size_t)(N_PREFILL - 1) * V, false));
    for (int t = N_PREFILL; t < N_TOK; t++)
        CHECK_OK(ctx_eval(c, toks + t, 1, t, want + (size_t)t * V, false));

    const char *names[] = { "cpu", "cuda" };
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        const struct be_ops *ops = be_find(names[k]);
        if (!ops) {
            printf("backend %s: not built, skipped\n", names[k]);
            continue;
        }
        struct be *b = NULL;
        struct be_params bp = { .n_ctx = 64, .n_batch = 8, .n_threads = 2 };
        CHECK_OK(ops->open(&b, m, &bp));
        CHECK(ops->n_ctx(b) == 64, "%s: n_ctx %d", ops->name, ops->n_ctx(b));
        CHECK_OK(be_eval(ops, b, m, toks, N_PREFILL, 0, got, sel));
        double d = rel(got, want + (size_t)(N_PREFILL - 1) * V, V);
        CHECK(d < 1e-5, "%s: prefill logits differ from ctx_eval by %.3g", ops->name, d);
        for (int t = N_PREFILL; t < N_TOK; t++) {
            CHECK_OK(be_eval(ops, b, m, toks + t, 1, t, got, sel));
            d = rel(got, want + (size_t)t * V, V);
            CHECK(d < 1e-5, "%s: position %d logits differ from ctx_eval by %.3g", ops->name, t, d);
        }
        printf("backend %s: logits of %d positions match ctx_eval\n", ops->name, N_TOK - N_PREFILL + 1);
        ops->close(b);
    }
    ctx_free(c);
    free(want), free(got), free(sel);
    model_free(m);
    return tu_finish("backend_ops");
}
