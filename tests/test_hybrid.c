/* test_hybrid — hybrid GPU + CPU under a VRAM budget, on the GPU machine (exits 77 without a device
 * or without the CUDA backend built):
 *
 *   the calibrated tiny model (a PWRI file from pictl calibrate) split by placements — three
 *   neurons per layer (the hottest), and the split solver's at three budgets between the plan's
 *   fixed bytes and the whole model — runs through the evaluator with the CUDA backend holding only
 *   the placed neurons (compacted rows) and the host computing the others from the mapped weights;
 *   its greedy tokens, teacher-forced on the all-CPU run's tokens, agree with the all-CPU sparse run
 *   wherever the CPU's top-2 margin exceeds the GPU's rounding (MARGIN), and the free-running greedy
 *   tokens are reported; prompts run in steps of ≤ 8 tokens (the GEMV) and of 12 (the same kernels
 *   tiled: a restarted gpud's replay prefills this way; until 2026-12-01 a compact layer sent such
 *   steps to cuBLAS, which gpud never creates);
 *
 *   -ngl (backend_ngl.c): the first half of the layers whole on the device, the rest and the output
 *   on the host, dense and sparse, against the same CPU runs;
 *
 *   the device memory the backend allocated equals the VRAM plan (engine/vram_plan.c) kind by kind
 *   (weights, hot rows, predictors, KV cache, scratch), and cudaMemGetInfo's used bytes exceed
 *   context + arenas by less than the plan's driver reserve.
 *
 * One JSON line per case on stdout (budget, plan, measured bytes, tokens agreed).
 *
 * usage: test_hybrid CALIBRATED.gguf */
#ifndef PI_HAVE_CUDA_BACKEND
#include "testutil.h"
int main(void) { SKIP("built without the CUDA backend (meson -Dcuda=auto|enabled with the toolkit)"); }
#else
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cudev.h"
#include "eval.h"
#include "pi_err.h"
#include "split.h"
#include "testutil.h"
#include "threadpool.h"
#include "vram_plan.h"

#define N_PROMPT 12
#define N_GEN 48
#define N_CTX 128
#define MARGIN 0.05f /* logits: the GPU's F16/f32 rounding moves a logit by < 1e-2 on this model */

static int argmax_m(const float *l, int n, float *margin)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[best])
            best = i;
    float second = -INFINITY;
    for (int i = 0; i < n; i++)
        if (i != best && l[i] > second)
            second = l[i];
    *margin = l[best] - second;
    return best;
}

/* toks[0..n) at positions pos.. of sequence 0, steps of at most step tokens; logits of the last */
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

struct ref {
    int32_t toks[N_PROMPT + N_GEN]; /* prompt, then the CPU's greedy tokens */
    float margin[N_GEN];            /* the CPU's top-2 margin at each generated token */
};

static void cpu_reference(const struct pi_model *m, bool sparse, struct ref *r)
{
    const int32_t V = m->hp.n_vocab;
    for (int i = 0; i < N_PROMPT; i++)
        r->toks[i] = (int32_t)((i * 131 + 7) % V);
    struct pi_ctx *c = NULL;
    struct pi_ctx_params cp = { .n_ctx = N_CTX, .n_batch = 16, .n_threads = 2, .sparse = sparse };
    CHECK_OK(ctx_new(&c, m, &cp));
    float *l = malloc((size_t)V * sizeof *l);
    CHECK_OK(ctx_eval(c, r->toks, N_PROMPT, 0, l, false));
    for (int t = 0; t < N_GEN; t++) {
        r->toks[N_PROMPT + t] = argmax_m(l, V, &r->margin[t]);
        if (t + 1 < N_GEN)
            CHECK_OK(ctx_eval(c, &r->toks[N_PROMPT + t], 1, N_PROMPT + t, l, false));
    }
    free(l);
    ctx_free(c);
}

static const char *mib(uint64_t b, char *buf)
{
    snprintf(buf, 32, "%.3f", (double)b / (1 << 20));
    return buf;
}

/* One placement: the CUDA backend with on_device (ngl > 0: the -ngl backend with the first ngl
 * layers on the device), prompt in steps of `step`, then decode. */
static void run_case(const struct pi_model *m, const char *name, const uint8_t *place, uint64_t budget, bool sparse,
                     int32_t step, const struct ref *r, struct pi_pool *host, int32_t ngl)
{
    const int32_t V = m->hp.n_vocab;
    const int32_t n_batch = 16;
    const struct be_ops *ops = ngl > 0 ? &be_ngl_ops : be_find("cuda");
    REQUIRE(ops, "be_find(cuda)");
    struct be_params bp = { .n_ctx = N_CTX, .n_seq = 1, .n_batch = n_batch, .n_threads = 2,
                            .on_device = ngl > 0 ? NULL : place, .cache_type = BE_CACHE_F16, .n_gpu_layers = ngl };
    struct be *b = NULL;
    CHECK_OK(ops->open(&b, m, &bp));
    if (!b)
        return;
    /* the allocator against the plan */
    const struct vram_params vp = { .n_ctx = N_CTX, .n_seq = 1, .n_batch = n_batch, .reserve = VRAM_RESERVE,
                                    .whole_layers = ngl > 0, .n_gpu_layers = ngl };
    struct vram_plan pl;
    CHECK_OK(vram_plan_make(m, &vp, ngl > 0 ? NULL : place, &pl));
    struct be_mem mem = { 0 };
    ops->mem(b, &mem);
    CHECK(mem.weights == pl.weights && mem.hot == pl.hot && mem.pred == pl.pred && mem.kv == pl.kv &&
              mem.scratch == pl.scratch,
          "%s: allocated weights %llu hot %llu pred %llu kv %llu scratch %llu, plan %llu %llu %llu %llu %llu", name,
          (unsigned long long)mem.weights, (unsigned long long)mem.hot, (unsigned long long)mem.pred,
          (unsigned long long)mem.kv, (unsigned long long)mem.scratch, (unsigned long long)pl.weights,
          (unsigned long long)pl.hot, (unsigned long long)pl.pred, (unsigned long long)pl.kv,
          (unsigned long long)pl.scratch);
    const uint64_t arenas = mem.weights + mem.hot + mem.pred + mem.kv + mem.scratch;
    const int64_t extra_open = (int64_t)mem.device_used - (int64_t)(mem.context + arenas);
    CHECK(extra_open < (int64_t)pl.reserve, "%s: %lld bytes in use beyond context + arenas at open (reserve %llu)",
          name, (long long)extra_open, (unsigned long long)pl.reserve);
    if (budget)
        CHECK(pl.total <= budget, "%s: plan %llu exceeds the budget %llu", name, (unsigned long long)pl.total,
              (unsigned long long)budget);

    struct eval e;
    struct pi_batch_buf bb;
    const struct eval_params ep = { .n_batch = n_batch, .sparse = sparse, .on_device = ngl > 0 ? NULL : place,
                                    .pool = host };
    CHECK_OK(eval_init(&e, m, ops, b, &ep));
    CHECK_OK(batch_buf_init(&bb, n_batch));
    float *l = malloc((size_t)V * sizeof *l);
    /* teacher-forced on the CPU's tokens */
    int agree = 0, checked = 0, free_ok = 1;
    CHECK_OK(run(&e, &bb, r->toks, N_PROMPT, 0, step, l));
    for (int t = 0; t < N_GEN; t++) {
        float mg;
        const int got = argmax_m(l, V, &mg);
        if (got != r->toks[N_PROMPT + t])
            free_ok = 0; /* the free-running greedy run would leave the CPU's path here */
        if (r->margin[t] > MARGIN) {
            checked++;
            agree += got == r->toks[N_PROMPT + t];
            CHECK(got == r->toks[N_PROMPT + t], "%s: token %d: gpu %d, cpu %d (cpu margin %.3g)", name, t, got,
                  r->toks[N_PROMPT + t], r->margin[t]);
        }
        if (t + 1 < N_GEN)
            CHECK_OK(run(&e, &bb, &r->toks[N_PROMPT + t], 1, N_PROMPT + t, 1, l));
    }
    ops->mem(b, &mem);
    const int64_t extra_run = (int64_t)mem.device_used - (int64_t)(mem.context + arenas);
    CHECK(extra_run < (int64_t)pl.reserve, "%s: %lld bytes in use beyond context + arenas after the run", name,
          (long long)extra_run);
    char a[32], bq[32], c3[32], d4[32], e5[32], f6[32], g7[32];
    printf("{\"case\":\"%s\",\"sparse\":%s,\"step\":%d,\"budget_mib\":%s,\"plan_mib\":%s,\"hot_neurons\":%lld,"
           "\"of\":%lld,\"weights_mib\":%s,\"hot_mib\":%s,\"kv_mib\":%s,\"context_mib\":%s,\"extra_open_b\":%lld,"
           "\"extra_run_b\":%lld,\"agree\":%d,\"checked\":%d,\"greedy_equal\":%s}\n",
           name, sparse ? "true" : "false", step, mib(budget, a), mib(pl.total, bq), (long long)mem.hot_neurons,
           (long long)pl.neurons_all, mib(mem.weights, c3), mib(mem.hot, d4), mib(mem.kv, e5), mib(mem.context, f6),
           (long long)extra_open, (long long)extra_run, agree, checked, free_ok ? "true" : "false");
    (void)g7;
    CHECK(checked >= N_GEN / 2, "%s: only %d positions had a clear margin", name, checked);
    free(l);
    batch_buf_fini(&bb);
    eval_fini(&e);
    ops->close(b);
}

int main(int argc, char **argv)
{
    char why[160];
    if (!cudev_available(why, sizeof why))
        SKIP("%s", why);
    if (argc < 2)
        SKIP("usage: test_hybrid CALIBRATED.gguf");
    struct pi_model *m = NULL;
    REQUIRE(model_load(&m, argv[1]) == 0, "load %s: %s", argv[1], pi_errmsg());
    REQUIRE(m->hp.powerinfer && m->layers[0].act_freq, "%s is not a calibrated PowerInfer file", argv[1]);
    const int L = m->hp.n_layer;
    const int64_t F = m->hp.n_ff;
    struct pi_pool *host = NULL;
    CHECK_OK(pool_new(&host, 2));
    struct ref rs, rd;
    cpu_reference(m, true, &rs);
    cpu_reference(m, false, &rd);
    uint8_t *place = malloc((size_t)L * (size_t)F);

    /* three neurons per layer: the hottest by act_freq */
    memset(place, 0, (size_t)L * (size_t)F);
    for (int l = 0; l < L; l++)
        for (int k = 0; k < 3; k++) {
            int64_t best = -1;
            for (int64_t i = 0; i < F; i++)
                if (!place[(size_t)l * F + i] && (best < 0 || m->layers[l].act_freq[i] > m->layers[l].act_freq[best]))
                    best = i;
            place[(size_t)l * F + best] = 1;
        }
    run_case(m, "3-per-layer", place, 0, true, 8, &rs, host, 0);
    run_case(m, "3-per-layer-12tok", place, 0, true, 12, &rs, host, 0);
    run_case(m, "3-per-layer-dense", place, 0, false, 8, &rd, host, 0);

    /* the solver at three budgets between the fixed bytes and every neuron */
    const struct vram_params vp = { .n_ctx = N_CTX, .n_seq = 1, .n_batch = 16, .reserve = VRAM_RESERVE };
    const uint64_t fixed = split_fixed_bytes(m, &vp);
    uint64_t all = 0;
    for (int l = 0; l < L; l++)
        all += (uint64_t)F * split_neuron_cost(m, l);
    const double shares[] = { 0.1, 0.5, 0.9 };
    for (int k = 0; k < 3; k++) {
        const uint64_t budget = fixed + (uint64_t)((double)all * shares[k]);
        struct split_report r;
        CHECK_OK(split_solve(m, &vp, budget, place, &r));
        char name[64];
        snprintf(name, sizeof name, "solver-%.0f%%", 100 * shares[k]);
        printf("{\"solver\":\"%s\",\"budget\":%llu,\"neurons\":%lld,\"covered\":%.4f}\n", name,
               (unsigned long long)budget, (long long)r.neurons, r.covered);
        run_case(m, name, place, budget, true, 8, &rs, host, 0);
        split_report_fini(&r);
    }
    run_case(m, "solver-90%-12tok", place, 0, true, 12, &rs, host, 0);
    /* -ngl: half the layers whole on the device, the rest and the output on the host */
    run_case(m, "ngl-half-dense", NULL, 0, false, 8, &rd, host, L / 2);
    run_case(m, "ngl-half-sparse", NULL, 0, true, 12, &rs, host, L / 2);
    free(place);
    pool_free(host);
    model_free(m);
    return tu_finish("hybrid");
}
#endif
