/* test_ngl — whole-layer placement (-ngl, engine/backend_ngl.c) without a GPU: the composite backend
 * with the CPU backend standing in for the device half runs the first N layers on one backend and
 * the rest + the output on another, handing x over once a step; for every N in 1..n_layer-1 the
 * logits of a prompt (in one step and in steps of 3 tokens) and of decode steps are bitwise those
 * of the in-process engine — the hand-over moves x unchanged and each layer runs the same kernels.
 * Opening it for N outside 1..n_layer-1 is refused. (On the GPU machine test_hybrid runs it with the
 * CUDA backend.)
 *
 * usage: test_ngl MODEL.gguf */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "eval.h"
#include "pi_err.h"
#include "testutil.h"

#define N_TOK 10
#define N_PROMPT 6

static int run(struct eval *e, struct pi_batch_buf *bb, const int32_t *toks, int32_t n, int32_t pos, int32_t step,
               float *logits)
{
    for (int32_t done = 0; done < n; done += step) {
        const int32_t B = n - done < step ? n - done : step;
        batch_buf_clear(bb);
        for (int32_t i = 0; i < B; i++)
            batch_buf_add(bb, toks[done + i], pos + done + i, 0, done + i == n - 1);
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
        SKIP("usage: test_ngl MODEL.gguf");
    struct pi_model *m = NULL;
    REQUIRE(model_load(&m, argv[1]) == 0, "load %s: %s", argv[1], pi_errmsg());
    const int32_t V = m->hp.n_vocab, L = m->hp.n_layer;
    int32_t toks[N_TOK];
    for (int i = 0; i < N_TOK; i++)
        toks[i] = (int32_t)((i * 197 + 11) % V);
    /* the reference: the in-process engine, prompt then one token a step */
    struct pi_ctx *c = NULL;
    struct pi_ctx_params cp = { .n_ctx = 32, .n_batch = 8, .n_threads = 2 };
    CHECK_OK(ctx_new(&c, m, &cp));
    float *want = malloc((size_t)N_TOK * V * sizeof *want), *got = malloc((size_t)V * sizeof *got);
    CHECK_OK(ctx_eval(c, toks, N_PROMPT, 0, want + (size_t)(N_PROMPT - 1) * V, false));
    for (int t = N_PROMPT; t < N_TOK; t++)
        CHECK_OK(ctx_eval(c, toks + t, 1, t, want + (size_t)t * V, false));
    ctx_free(c);

    struct be_params bp = { .n_ctx = 32, .n_seq = 1, .n_batch = 8, .n_threads = 2, .cache_type = BE_CACHE_F32 };
    struct be *b = NULL;
    for (int bad = 0; bad < 2; bad++) {
        bp.n_gpu_layers = bad ? L : 0;
        CHECK(be_ngl_open_on(&b, m, &bp, &be_cpu_ops) == -PI_E_INVAL, "-ngl %d of %d layers refused", bp.n_gpu_layers,
              L);
    }
    for (int32_t n = 1; n < L; n++) {
        for (int step = 3; step <= 8; step += 5) {
            bp.n_gpu_layers = n;
            CHECK_OK(be_ngl_open_on(&b, m, &bp, &be_cpu_ops));
            if (!b)
                continue;
            struct eval e;
            struct pi_batch_buf bb;
            const struct eval_params ep = { .n_batch = 8 };
            CHECK_OK(eval_init(&e, m, &be_ngl_ops, b, &ep));
            CHECK_OK(batch_buf_init(&bb, 8));
            CHECK_OK(run(&e, &bb, toks, N_PROMPT, 0, step, got));
            CHECK(memcmp(got, want + (size_t)(N_PROMPT - 1) * V, (size_t)V * sizeof *got) == 0,
                  "-ngl %d, steps of %d: prompt logits differ from the engine's", n, step);
            for (int t = N_PROMPT; t < N_TOK; t++) {
                CHECK_OK(run(&e, &bb, toks + t, 1, t, 1, got));
                CHECK(memcmp(got, want + (size_t)t * V, (size_t)V * sizeof *got) == 0,
                      "-ngl %d: position %d logits differ from the engine's", n, t);
            }
            batch_buf_fini(&bb);
            eval_fini(&e);
            be_ngl_ops.close(b);
            b = NULL;
        }
    }
    free(want);
    free(got);
    model_free(m);
    return tu_finish("ngl");
}
