/* test_backend_ops — every backend be_names() lists, through the evaluator, against the in-process
 * engine: with a placement that leaves half of some layers' neurons to the host, the logits equal
 * ctx_eval's; a sequence's logits in steps shared with another sequence equal its logits alone
 * (bitwise on the CPU backend). Every backend runs the same checks — llama.cpp's test-backend-ops
 * habit.
 *
 * usage: test_backend_ops MODEL.gguf */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "eval.h"
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

/* Tokens toks[0..n) of sequence seq at positions pos.. through the evaluator, in steps of at most
 * step tokens; logits of the last one. */
static int run_seq(struct eval *e, struct pi_batch_buf *bb, const int32_t *toks, int32_t n, int32_t pos, int32_t seq,
                   int32_t step, float *logits)
{
    for (int32_t done = 0; done < n; done += step) {
        const int32_t B = n - done < step ? n - done : step;
        batch_buf_clear(bb);
        for (int32_t i = 0; i < B; i++)
            batch_buf_add(bb, toks[done + i], pos + done + i, seq, done + i == n - 1);
        const struct pi_batch b = batch_view(bb);
        int rc = eval_batch(e, &b, done + B == n ? logits : NULL);
        if (rc)
            return rc;
    }
    return 0;
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

    struct pi_pool *host = NULL;
    CHECK_OK(pool_new(&host, 2));
    uint8_t *place = malloc((size_t)m->hp.n_layer * F);
    for (int l = 0; l < m->hp.n_layer; l++) /* even layers half on the device, odd layers all */
        memcpy(place + (size_t)l * F, sel, (size_t)F), memset(place + (size_t)l * F, 1, l % 2 ? (size_t)F : 0);
    for (const char *const *nm = be_names(); *nm; nm++)
    for (int ct = BE_CACHE_F32; ct <= BE_CACHE_F16; ct++) {
        const struct be_ops *ops = be_find(*nm);
        /* an f16 KV cache rounds K and V: the logits move by ~1e-3 of their range */
        const double tol = ct == BE_CACHE_F16 ? 2e-2 : 1e-5;
        const char *cname = ct == BE_CACHE_F16 ? "f16" : "f32";
        REQUIRE(ops, "be_find(%s)", *nm);
        struct be *b = NULL;
        struct be_params bp = { .n_ctx = 64, .n_seq = 3, .n_batch = 8, .n_threads = 2, .on_device = place,
                                .cache_type = (enum be_cache_type)ct };
        const int orc = ops->open(&b, m, &bp);
        if (orc == -PI_E_UNSUPPORTED && strcmp(ops->name, "cpu")) { /* e.g. cuda built, no device here */
            printf("backend %s: cannot run here (%s), skipped\n", ops->name, pi_errmsg());
            continue;
        }
        CHECK_OK(orc);
        CHECK(ops->n_ctx(b) == 64 && ops->n_seq(b) == 3, "%s: n_ctx %d n_seq %d", ops->name, ops->n_ctx(b),
              ops->n_seq(b));
        struct eval e;
        struct pi_batch_buf bb;
        const struct eval_params ep = { .n_batch = 8, .on_device = place, .pool = host };
        CHECK_OK(eval_init(&e, m, ops, b, &ep));
        CHECK_OK(batch_buf_init(&bb, 8));
        /* sequence 1: a placement that leaves half of even layers to the host = ctx_eval */
        CHECK_OK(run_seq(&e, &bb, toks, N_PREFILL, 0, 1, 8, got));
        double d = rel(got, want + (size_t)(N_PREFILL - 1) * V, V);
        CHECK(d < tol, "%s (%s cache): prefill logits differ from ctx_eval by %.3g", ops->name, cname, d);
        for (int t = N_PREFILL; t < N_TOK; t++) {
            CHECK_OK(run_seq(&e, &bb, toks + t, 1, t, 1, 8, got));
            d = rel(got, want + (size_t)t * V, V);
            CHECK(d < tol, "%s (%s cache): position %d logits differ from ctx_eval by %.3g", ops->name, cname, t, d);
        }
        struct be_mem mem = { 0 };
        ops->mem(b, &mem);
        CHECK(mem.kv > 0, "%s: KV cache bytes reported", ops->name);
        printf("backend %s, %s cache: logits of %d positions match ctx_eval within %g (KV %.2f MiB)\n", ops->name,
               cname, N_TOK - N_PREFILL + 1, tol, (double)mem.kv / (1 << 20));

        /* batch invariance: sequence 0 alone, one token a step, then sequences 0 and 2 interleaved
         * in shared steps with other tokens: sequence 0's logits are bitwise the same */
        float *alone = malloc((size_t)N_TOK * V * sizeof *alone), *mixed = malloc((size_t)4 * V * sizeof *mixed);
        CHECK_OK(ops->seq_clear(b, 0));
        for (int t = 0; t < N_TOK; t++)
            CHECK_OK(run_seq(&e, &bb, toks + t, 1, t, 0, 1, alone + (size_t)t * V));
        CHECK_OK(ops->seq_clear(b, 0));
        CHECK_OK(ops->seq_clear(b, 2));
        /* step 1: seq 0 prompt (5 tokens, logits of the last) + seq 2's first 3 tokens */
        batch_buf_clear(&bb);
        for (int t = 0; t < 5; t++)
            batch_buf_add(&bb, toks[t], t, 0, t == 4);
        for (int t = 0; t < 3; t++)
            batch_buf_add(&bb, toks[N_TOK - 1 - t], t, 2, t == 2);
        struct pi_batch st = batch_view(&bb);
        CHECK_OK(eval_batch(&e, &st, mixed)); /* rows: seq 0 pos 4, seq 2 pos 2 */
        d = rel(mixed, alone + (size_t)4 * V, V);
        const bool exact = !strcmp(ops->name, "cpu");
        CHECK(exact ? memcmp(mixed, alone + (size_t)4 * V, (size_t)V * sizeof *mixed) == 0 : d < 1e-5,
              "%s: seq 0 pos 4 in a mixed step differs from alone by %.3g", ops->name, d);
        /* step 2: seq 2 pos 3 then seq 0 pos 5..6, all with logits */
        batch_buf_clear(&bb);
        batch_buf_add(&bb, toks[N_TOK - 4], 3, 2, true);
        batch_buf_add(&bb, toks[5], 5, 0, true);
        batch_buf_add(&bb, toks[6], 6, 0, true);
        st = batch_view(&bb);
        CHECK_OK(eval_batch(&e, &st, mixed));
        for (int t = 5; t <= 6; t++) {
            const float *row = mixed + (size_t)(t - 4) * V;
            d = rel(row, alone + (size_t)t * V, V);
            CHECK(exact ? memcmp(row, alone + (size_t)t * V, (size_t)V * sizeof *row) == 0 : d < 1e-5,
                  "%s: seq 0 pos %d in a mixed step differs from alone by %.3g", ops->name, t, d);
        }
        printf("backend %s, %s cache: a sequence's logits in mixed batches = alone (%s)\n", ops->name, cname,
               exact ? "bitwise" : "within 1e-5");
        free(alone), free(mixed);
        batch_buf_fini(&bb);
        eval_fini(&e);
        ops->close(b);
    }
    pool_free(host);
    free(place);
    ctx_free(c);
    free(want), free(got), free(sel);
    model_free(m);
    return tu_finish("backend_ops");
}
