/* test_cuda_ops — the CUDA executor's steps (gpud/cuda/cudev.h) against the CPU engine.
 *
 * Random PowerInfer-layout models (pwri_testmodel: F32 attention, FFN weights of each GPU type,
 * ffn_down and ffn_down_t, a random predictor), and each step compared with the CPU kernels of
 * backend_cpu.c / ffn_split.c / predictor.c by normalized MSE ‖gpu − cpu‖² / ‖cpu‖²:
 *   embed (exact), attention (layer 0, f32 and f16 caches), predictor masks (agreement), the dense
 *   FFN and the sparse FFN over a given mask, whole-model logits for a prompt + decode steps through
 *   the GEMV path, the CUDA-graph decode step's greedy id; batch invariance: a token's logits are
 *   bitwise the same alone and batched with other sequences' tokens, and a 16-token prefill (the
 *   tiled GEMM kernels) the same as the same tokens chunked or one at a time, dense and sparse; the
 *   benchmarks' cuBLAS prefill within tolerance. Programmatic dependent launch (on for this test): a
 *   decode-shaped chain of every decode kernel on a stream of its own, eagerly and as a replayed
 *   graph, bitwise the same chain on the legacy stream (plain order). A 300-token prompt over ten
 *   32-cell chunks (the tiled prompt attention against the split-K decode attention): one batch =
 *   chunked = token by token = beside another sequence in one batch, bitwise, both caches, and close
 *   to the CPU. Then the embedded tiny model (models/): greedy tokens agree with the
 *   CPU backend, teacher-forced, wherever the CPU's top-2 margin exceeds the tolerance.
 *
 * Thresholds: float weight types differ from the CPU only in summation order (NMSE ≤ 1e-8); the
 * CPU's Q8_0/Q4_0 kernels quantize the activation to Q8_0 (≈ 2^-8 relative per element), the GPU
 * keeps it f32, hence 1e-3; an f16 KV cache rounds K and V to 11 bits (1e-4). In the f16 mode
 * (cuk_mma.h: F16's default; PINFER_CUDA_MMA_ACT=split turns it off) the F16 products round their
 * activation to f16 once: each product's NMSE is then ≈ E[δ²] ≤ u² = 2^-22 (test_cuda_mma derives
 * and checks it); a dense FFN rounds twice on its way (x into gate/up, the activation into down),
 * so ACT16_TOL = 2^-20 = 4 u² for an FFN step (10× for logits, as for the other types), and the
 * sparse path is judged as the Q types' (a rounding flips predictor decisions near the threshold, moving whole neurons).
 *
 * usage: test_cuda_ops [TINY_MODEL.gguf]   exits 77 when no CUDA device is present (or the build has
 * no CUDA backend: PI_CUDA_NOT_BUILT) */
#ifdef PI_CUDA_NOT_BUILT
#include "testutil.h"
int main(void) { SKIP("built without the CUDA backend (meson -Dcuda=auto|enabled with the toolkit)"); }
#else
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "cudev.h"
#include "cuk.h"
#include "cuk_hand.h"
#include "cuk_mma.h"
#include "cuk_mmv.h"
#include "cuk_topk.h"
#include "sampling.h"
#include "ffn_split.h"
#include "backend.h"
#include "batch.h"
#include "eval.h"
#include "pi_err.h"
#include "predictor.h"
#include "pwri_testmodel.h"
#include "quant.h"
#include "quant_blocks.h"
#include "testutil.h"
#include "threadpool.h"

static double nmse(const float *a, const float *b, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = (double)a[i] - b[i];
        if (isnan(a[i]))
            return INFINITY;
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return den > 0 ? num / den : num;
}

static int argmax_f(const float *l, int n, float *margin)
{
    int best = 0, second = -1;
    for (int i = 1; i < n; i++)
        if (l[i] > l[best])
            best = i;
    for (int i = 0; i < n; i++)
        if (i != best && (second < 0 || l[i] > l[second]))
            second = i;
    if (margin)
        *margin = second >= 0 ? l[best] - l[second] : INFINITY;
    return best;
}

static struct pi_model *make_model(uint32_t type, const char *path, struct pwri_cfg *c)
{
    *c = (struct pwri_cfg){ .arch = "llama", .pwri = true, .n_embd = 256, .n_layer = 2, .n_ff = 512, .n_head = 4,
                            .n_head_kv = 2, .head_dim = 64, .ffn_type = type, .down = true, .down_t = true,
                            .pred = PRED_RANDOM };
    struct pwri_weights w;
    pwri_make(c, &w, 1000 + type);
    pwri_write(path, c, &w);
    pwri_free(c, &w);
    struct pi_model *m = NULL;
    REQUIRE(model_load(&m, path) == 0, "load %s: %s", path, pi_errmsg());
    return m;
}

#define NP 5 /* prompt */
#define ND 3 /* decode steps */

#define ACT16_TOL (1.0 / 1048576.0) /* 2^-20: the f16 mode's FFN step (the head of this file) */

static void test_type(uint32_t type)
{
    const char *tn = quant_traits(type)->name;
    const bool qt = type != PI_TYPE_F32 && type != PI_TYPE_F16 && type != PI_TYPE_BF16;
    const bool a16 = cuk_mma_act16(type), rounded = qt || a16; /* the GPU's or the CPU's activations rounded */
    const double tol = a16 ? ACT16_TOL : qt ? 1e-3 : 1e-8;
    char path[64];
    snprintf(path, sizeof path, "/tmp/test_cuda_ops_%d_%s.gguf", (int)getpid(), tn);
    struct pwri_cfg cfg;
    struct pi_model *m = make_model(type, path, &cfg);
    const struct pi_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, F = hp->n_ff;
    const int32_t V = hp->n_vocab;
    int32_t toks[16];
    for (int i = 0; i < 16; i++)
        toks[i] = (int32_t)((i * 37 + 5 + type) % V);

    /* the CPU backend's steps are the reference for the layer-level checks */
    struct be *c = NULL;
    const struct be_params cbp = { .n_ctx = 64, .n_seq = 1, .n_batch = 16, .n_threads = 2, .cache_type = BE_CACHE_F32 };
    CHECK_OK(be_cpu_ops.open(&c, m, &cbp));
    REQUIRE(c, "%s: cpu backend", tn);
    struct pi_ctx_params cp = { .n_ctx = 64, .n_batch = 16, .n_threads = 2 };
    struct cudev *d = NULL, *d16 = NULL;
    struct cudev_params dp = { .n_ctx = 64, .n_seq = 3, .n_batch = 16, .kv_f32 = true, .blas_prefill = true };
    CHECK_OK(cudev_open(&d, m, &dp));
    dp.kv_f32 = false;
    dp.blas_prefill = false;
    CHECK_OK(cudev_open(&d16, m, &dp));
    REQUIRE(d && d16, "%s: cudev_open", tn);
    CHECK(cudev_sparse_ok(d), "%s: predictors not uploaded", tn);

    float *want = malloc((size_t)16 * (E > V ? E : V) * sizeof(float));
    float *got = malloc((size_t)16 * (E > V ? E : V) * sizeof(float));
    int32_t pos[16], seq[16];
    for (int i = 0; i < 16; i++)
        pos[i] = i, seq[i] = 0;

    const struct pi_batch pb = { .n = NP, .tok = toks, .pos = pos, .seq = seq };
    /* embed: exact */
    CHECK_OK(be_cpu_ops.embed(c, &pb));
    CHECK_OK(cudev_batch(d, NP, toks, pos, seq));
    CHECK_OK(cudev_embed(d, NP));
    CHECK_OK(cudev_get_x(d, NP, got));
    CHECK(memcmp(got, be_cpu_x(c), (size_t)NP * E * sizeof(float)) == 0, "%s: embeddings differ", tn);

    /* attention, layer 0, both caches */
    CHECK_OK(be_cpu_ops.attn(c, 0, &pb));
    CHECK_OK(cudev_attn(d, 0, NP));
    CHECK_OK(cudev_get_x(d, NP, got));
    double e = nmse(got, be_cpu_x(c), NP * E);
    CHECK(e <= 1e-8, "%s: attention (f32 cache) nmse %.3g", tn, e);
    CHECK_OK(cudev_batch(d16, NP, toks, pos, seq));
    CHECK_OK(cudev_embed(d16, NP));
    CHECK_OK(cudev_attn(d16, 0, NP));
    CHECK_OK(cudev_get_x(d16, NP, got));
    e = nmse(got, be_cpu_x(c), NP * E);
    CHECK(e <= 1e-4, "%s: attention (f16 cache) nmse %.3g", tn, e);

    /* predictor on h = x: masks agree */
    struct pi_pool *pool = NULL;
    CHECK_OK(pool_new(&pool, 2));
    struct ops_scratch ps = { 0 };
    uint8_t *mc = malloc((size_t)NP * F), *mg = malloc((size_t)NP * F);
    CHECK_OK(pred_eval(pool, &ps, &m->layers[0], be_cpu_x(c), NP, hp->sparse_threshold, mc, NULL));
    CHECK_OK(cudev_predict(d, 0, NP));
    CHECK_OK(cudev_get_mask(d, NP, mg));
    int64_t diff = 0, on = 0;
    for (int64_t i = 0; i < NP * F; i++)
        diff += mc[i] != mg[i], on += mc[i] != 0;
    CHECK(diff <= NP * F / 500, "%s: predictor masks differ in %lld of %lld (%lld on)", tn, (long long)diff,
          (long long)(NP * F), (long long)on);
    CHECK(on > 0 && on < NP * F, "%s: degenerate predictor (%lld on)", tn, (long long)on);

    /* sparse FFN over the CPU's mask, one token (its own mask = the union) */
    struct ffn_runs runs = { 0 };
    struct ffn_scratch fs = { 0 };
    uint8_t *sel = malloc((size_t)F);
    memset(sel, 1, (size_t)F);
    float *xn = malloc((size_t)E * sizeof(float)), *y = malloc((size_t)E * sizeof(float));
    float *x0 = malloc((size_t)NP * E * sizeof(float));
    memcpy(x0, be_cpu_x(c), (size_t)NP * E * sizeof(float));
    CHECK_OK(ffn_runs_build(&runs, sel, 1, mc, 1, F));
    ops_rmsnorm(xn, x0, m->layers[0].ffn_norm.data, E, hp->norm_eps);
    CHECK_OK(ffn_partial(pool, &fs, m, (struct pi_layer_weights[]){ model_layer_weights(m, 0) }, xn, 1, &runs, NULL, y, NULL));
    for (int64_t i = 0; i < E; i++)
        want[i] = x0[i] + y[i];
    CHECK_OK(cudev_set_mask(d, 1, mc));
    CHECK_OK(cudev_ffn(d, 0, 1, true, false));
    CHECK_OK(cudev_get_x(d, 1, got));
    e = nmse(got, want, E);
    CHECK(e <= tol, "%s: sparse FFN nmse %.3g", tn, e);

    /* whole model: prompt then decode steps, GEMV path, dense and sparse */
    for (int sparse = 0; sparse < 2; sparse++) {
        struct pi_ctx *cs = NULL;
        struct pi_ctx_params cps = cp;
        cps.sparse = sparse;
        CHECK_OK(ctx_new(&cs, m, &cps));
        for (int t = 0; t <= ND; t++) {
            const int32_t n = t ? 1 : NP, p = t ? NP + t - 1 : 0;
            CHECK_OK(ctx_eval(cs, toks + p, n, p, want, false));
            int32_t id = -1, id2 = -1;
            CHECK_OK(cudev_eval(d, toks + p, n, p, 0, sparse, got, &id));
            e = nmse(got, want, V);
            if (!sparse || !rounded) {
                CHECK(e <= (sparse ? 1e-3 : tol * 10), "%s %s: logits at %d nmse %.3g", tn,
                      sparse ? "sparse" : "dense", p, e);
            } else {
                /* Q types, sparse: the CPU and GPU differ in rounding (≈ 1e-4 per product), and a
                 * predictor decision near the threshold that flips moves a whole neuron: the greedy
                 * token must agree where the CPU's margin is clear, the logits stay close */
                float margin;
                const int cpu = argmax_f(want, V, &margin), gpu = argmax_f(got, V, NULL);
                CHECK(margin < 0.05f || cpu == gpu, "%s sparse: greedy token at %d: gpu %d, cpu %d (margin %.3g)",
                      tn, p, gpu, cpu, margin);
                CHECK(e <= 5e-2, "%s sparse: logits at %d nmse %.3g", tn, p, e);
            }
            CHECK(id == argmax_f(got, V, NULL), "%s: device argmax %d", tn, id);
            if (t) { /* the graph step of the same token in seq 1, which has seen the same tokens */
                CHECK_OK(cudev_eval(d, toks, p, 0, 1, sparse, NULL, NULL));
                CHECK_OK(cudev_step(d, toks[p], p, 1, sparse, &id2));
                CHECK(id2 == id, "%s: graph step id %d, eval id %d", tn, id2, id);
                /* the graph ending in the 5 best (be_cuda's step_top) = the eager step's topk, bitwise */
                int32_t tid[2][5];
                float tv[2][5];
                CHECK_OK(cudev_eval(d, toks, p, 0, 1, sparse, NULL, NULL));
                const int32_t seq1 = 1;
                CHECK_OK(cudev_step_top(d, 1, &toks[p], &p, &seq1, sparse, 5, tid[0], tv[0]));
                CHECK_OK(cudev_eval(d, toks + p, 1, p, 1, sparse, NULL, NULL));
                CHECK_OK(cudev_topk(d, 1, 0, 5, tid[1], tv[1]));
                CHECK(!memcmp(tid[0], tid[1], sizeof tid[0]) && !memcmp(tv[0], tv[1], sizeof tv[0]) && tid[0][0] == id,
                      "%s %s: graph top 5 (%d %.9g) differ from the eager step's (%d %.9g)", tn,
                      sparse ? "sparse" : "dense", tid[0][0], tv[0][0], tid[1][0], tv[1][0]);
            }
        }
        ctx_free(cs);
    }

    /* prefill: a batch of 16 > CUDEV_GEMV_MAX (the tiled GEMM kernels) = the same tokens in chunks
     * of 8 and 8, 5 and 11, and one at a time, bitwise, dense and sparse; the benchmarks' cuBLAS
     * prefill (f16 activations into the GEMM) within tolerance of it */
    for (int sparse = 0; sparse < 2; sparse++) {
        const int32_t splits[][3] = { { 16, 0, 0 }, { 8, 8, 0 }, { 5, 11, 0 }, { 3, 9, 4 } };
        float *ref = malloc((size_t)V * sizeof *ref);
        for (size_t k = 0; k < sizeof splits / sizeof splits[0]; k++) {
            for (int32_t i = 0, p0 = 0; i < 3 && splits[k][i]; p0 += splits[k][i], i++)
                CHECK_OK(cudev_eval(d, toks + p0, splits[k][i], p0, 2, sparse, k ? got : ref, NULL));
            if (k)
                CHECK(memcmp(got, ref, (size_t)V * sizeof *got) == 0,
                      "%s %s: 16-token prefill split %d+%d+%d differs from one batch of 16", tn,
                      sparse ? "sparse" : "dense", splits[k][0], splits[k][1], splits[k][2]);
        }
        float *one = malloc((size_t)V * sizeof *one);
        for (int32_t p0 = 0; p0 < 16; p0++)
            CHECK_OK(cudev_eval(d, toks + p0, 1, p0, 2, sparse, one, NULL));
        CHECK(memcmp(one, ref, (size_t)V * sizeof *one) == 0, "%s %s: 16-token prefill differs from 16 single steps",
              tn, sparse ? "sparse" : "dense");
        CHECK_OK(cudev_blas_prefill(d, true));
        CHECK_OK(cudev_eval(d, toks, 16, 0, 2, sparse, got, NULL));
        CHECK_OK(cudev_blas_prefill(d, false));
        e = nmse(got, ref, V);
        /* sparse: the f16-rounded activations flip predictor decisions near the threshold, and a
         * flipped neuron moves its whole contribution (Q types: 2.7e-2 seen), as in the whole-model
         * check above */
        CHECK(e <= (sparse ? (rounded ? 5e-2 : 1e-3) : 1e-4 + tol),
              "%s %s: cuBLAS prefill logits against the own kernels: nmse %.3g", tn, sparse ? "sparse" : "dense", e);
        free(ref), free(one);
    }

    /* batch invariance: the same token alone and batched with other sequences, bitwise */
    for (int sparse = 0; sparse < 2; sparse++) {
        const int32_t P = 6;
        CHECK_OK(cudev_eval(d16, toks, P, 0, 0, sparse, NULL, NULL));
        CHECK_OK(cudev_eval(d16, toks, P, 0, 1, sparse, NULL, NULL));
        CHECK_OK(cudev_eval(d16, toks + 3, 2, 0, 2, sparse, NULL, NULL));
        int32_t bt[3] = { toks[P], toks[9], toks[P] }, bp[3] = { P, 2, P }, bs[3] = { 0, 2, 1 };
        CHECK_OK(cudev_batch(d16, 1, bt, bp, bs));
        CHECK_OK(cudev_embed(d16, 1));
        for (int l = 0; l < hp->n_layer; l++) {
            CHECK_OK(cudev_attn(d16, l, 1));
            if (sparse)
                CHECK_OK(cudev_predict(d16, l, 1));
            CHECK_OK(cudev_ffn(d16, l, 1, sparse, false));
        }
        CHECK_OK(cudev_output(d16, 1, 0, want));
        /* batch: seq 2's token, then seq 1's copy of seq 0's */
        CHECK_OK(cudev_batch(d16, 2, bt + 1, bp + 1, bs + 1));
        CHECK_OK(cudev_embed(d16, 2));
        for (int l = 0; l < hp->n_layer; l++) {
            CHECK_OK(cudev_attn(d16, l, 2));
            if (sparse)
                CHECK_OK(cudev_predict(d16, l, 2));
            CHECK_OK(cudev_ffn(d16, l, 2, sparse, false));
        }
        CHECK_OK(cudev_output(d16, 2, 0, got));
        CHECK(memcmp(want, got + V, (size_t)V * sizeof(float)) == 0, "%s %s: logits alone and batched differ", tn,
              sparse ? "sparse" : "dense");
    }

    struct cudev_mem mem;
    cudev_mem(d, &mem);
    CHECK(mem.weights > 0 && mem.scratch > 0 && mem.kv > 0, "%s: memory accounting", tn);
    printf("cuda %s: weights %llu, kv %llu, scratch %llu, context %llu bytes\n", tn,
           (unsigned long long)mem.weights, (unsigned long long)mem.kv, (unsigned long long)mem.scratch,
           (unsigned long long)mem.context);

    cudev_close(d);
    cudev_close(d16);
    be_cpu_ops.close(c);
    pool_free(pool);
    ops_scratch_fini(&ps);
    ffn_runs_fini(&runs);
    ffn_scratch_fini(&fs);
    free(want), free(got), free(mc), free(mg), free(sel), free(xn), free(y), free(x0);
    model_free(m);
    unlink(path);
}

/* A prompt of LP tokens over ten chunks of 32 KV cells (the attention's merge across chunks, the
 * tiled prompt kernel's tiles of 32 tokens at several positions): its last token's logits bitwise
 * the same as one batch, in chunks of other sizes (some through the split-K kernel: 8 tokens or
 * fewer), token by token (the decode kernel), and in a batch with another sequence's tokens (a tile
 * holding both); and close to the CPU backend. Both cache types. FFN weights of type ffn_type: F32,
 * and F16 (the tensor-core kernels for every chunk size: decode ≤ 8 tokens, prefill above; in the
 * f16 mode as in the split one). */
#define LP 300
static void test_long_prompt(uint32_t ffn_type)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/test_cuda_ops_%d_long.gguf", (int)getpid());
    struct pwri_cfg cfg;
    struct pi_model *m = make_model(ffn_type, path, &cfg);
    const double tol32 = cuk_mma_act16(ffn_type) ? 10 * ACT16_TOL : 1e-6; /* the f32 cache's, against the CPU */
    const int32_t V = m->hp.n_vocab;
    int32_t toks[LP], pos[LP], seq[LP], bt[LP];
    for (int i = 0; i < LP; i++)
        toks[i] = (int32_t)((i * 7919 + 11) % V);
    float *want = malloc((size_t)V * sizeof *want), *ref = malloc((size_t)V * sizeof *ref);
    float *got = malloc((size_t)LP * V * sizeof *got);
    struct pi_ctx *cs = NULL;
    const struct pi_ctx_params cp = { .n_ctx = 320, .n_batch = 64, .n_threads = 2 };
    CHECK_OK(ctx_new(&cs, m, &cp));
    CHECK_OK(ctx_eval(cs, toks, LP, 0, want, false));
    for (int f16 = 0; f16 < 2; f16++) {
        char kn[48];
        snprintf(kn, sizeof kn, "%s weights, %s cache", quant_traits(ffn_type)->name, f16 ? "f16" : "f32");
        struct cudev *d = NULL;
        const struct cudev_params dp = { .n_ctx = 320, .n_seq = 2, .n_batch = LP, .kv_f32 = !f16 };
        CHECK_OK(cudev_open(&d, m, &dp));
        REQUIRE(d, "long prompt: cudev_open");
        CHECK_OK(cudev_eval(d, toks, LP, 0, 0, false, ref, NULL));
        const double e = nmse(ref, want, V);
        CHECK(e <= (f16 ? 1e-3 : tol32), "long prompt, %s: logits against the CPU nmse %.3g", kn, e);
        static const int32_t splits[][5] = { { 150, 150 }, { 8, 100, 5, 187 }, { 33, 31, 64, 100, 72 } };
        for (size_t k = 0; k < sizeof splits / sizeof *splits; k++) {
            for (int32_t i = 0, p0 = 0; i < 5 && splits[k][i]; p0 += splits[k][i], i++)
                CHECK_OK(cudev_eval(d, toks + p0, splits[k][i], p0, 1, false, got, NULL));
            CHECK(memcmp(got, ref, (size_t)V * sizeof *got) == 0, "long prompt, %s: split %zu differs from one batch",
                  kn, k);
        }
        for (int32_t p0 = 0; p0 < LP; p0++)
            CHECK_OK(cudev_eval(d, toks + p0, 1, p0, 1, false, got, NULL));
        CHECK(memcmp(got, ref, (size_t)V * sizeof *got) == 0, "long prompt, %s: token by token differs", kn);
        /* seq 1 holds the prompt now: a batch of its last 70 tokens, then seq 0's last 90 */
        int32_t n = 0;
        for (int32_t p = LP - 70; p < LP; p++, n++)
            bt[n] = toks[p], pos[n] = p, seq[n] = 1;
        for (int32_t p = LP - 90; p < LP; p++, n++)
            bt[n] = toks[p], pos[n] = p, seq[n] = 0;
        CHECK_OK(cudev_batch(d, n, bt, pos, seq));
        CHECK_OK(cudev_embed(d, n));
        for (int l = 0; l < m->hp.n_layer; l++) {
            CHECK_OK(cudev_attn(d, l, n));
            CHECK_OK(cudev_ffn(d, l, n, false, false));
        }
        CHECK_OK(cudev_output(d, n, 0, got));
        CHECK(memcmp(got + (size_t)69 * V, ref, (size_t)V * sizeof *got) == 0 &&
                  memcmp(got + (size_t)(n - 1) * V, ref, (size_t)V * sizeof *got) == 0,
              "long prompt, %s: two sequences in one batch differ from the prompt alone", kn);
        cudev_close(d);
    }
    ctx_free(cs);
    free(want), free(ref), free(got);
    model_free(m);
    unlink(path);
}

/* The tiny model: greedy, teacher-forced by the CPU's own tokens. */
static void test_tiny(const char *path)
{
    struct pi_model *m = NULL;
    if (model_load(&m, path)) {
        CHECK(0, "load %s: %s", path, pi_errmsg());
        return;
    }
    const int32_t V = m->hp.n_vocab, N = 48;
    struct pi_ctx *c = NULL;
    struct pi_ctx_params cp = { .n_ctx = 128, .n_batch = 16, .n_threads = 2 };
    CHECK_OK(ctx_new(&c, m, &cp));
    struct cudev *d = NULL;
    struct cudev_params dp = { .n_ctx = 128, .n_seq = 1, .n_batch = 16 };
    CHECK_OK(cudev_open(&d, m, &dp));
    if (!c || !d)
        return;
    float *lc = malloc((size_t)V * sizeof(float)), *lg = malloc((size_t)V * sizeof(float));
    int32_t tok = 1, checked = 0, agree = 0;
    for (int32_t p = 0; p < N; p++) {
        CHECK_OK(ctx_eval(c, &tok, 1, p, lc, false));
        int32_t id = -1;
        CHECK_OK(cudev_step(d, tok, p, 0, false, &id));
        float margin;
        const int32_t want = argmax_f(lc, V, &margin);
        if (margin > 1e-2f) {
            checked++;
            agree += id == want;
            CHECK(id == want, "tiny: position %d: gpu %d, cpu %d (margin %.3g)", p, id, want, margin);
        }
        tok = want;
    }
    printf("cuda tiny model: %d of %d greedy tokens checked agree\n", agree, checked);
    CHECK(checked >= N / 2, "tiny: only %d positions had a clear margin", checked);
    free(lc), free(lg);
    cudev_close(d);
    ctx_free(c);
    model_free(m);
}

/* The device's top-k = samp_best on rows made to break it: a coarse grid (ties everywhere), banned
 * tokens (-inf), NaN, signed zeros, an all-banned row, a row of equal values, a vocabulary of
 * 152 064 (qwen2) and one smaller than the thread count. */
static void test_topk(void)
{
    static const int64_t ns[] = { 32000, 152064, 5000, 700 };
    static const int ks[] = { 1, 2, 40, CUK_TOPK_MAX };
    const int B = 6;
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++) {
        const int64_t n = ns[a];
        float *rows = malloc((size_t)B * (size_t)n * sizeof *rows);
        int32_t *ids = malloc((size_t)B * CUK_TOPK_MAX * sizeof *ids), want_ids[CUK_TOPK_MAX];
        float *vals = malloc((size_t)B * CUK_TOPK_MAX * sizeof *vals), want_vals[CUK_TOPK_MAX];
        uint64_t r = 0x9e3779b97f4a7c15ull + (uint64_t)n;
        for (int b = 0; b < B; b++)
            for (int64_t i = 0; i < n; i++) {
                r = r * 6364136223846793005ull + 1442695040888963407ull;
                const float u = (float)(r >> 40) / (float)(1u << 24);
                float *x = &rows[(size_t)b * n + i];
                switch (b) {
                case 0: *x = u * 20.0f - 10.0f; break;                    /* distinct */
                case 1: *x = floorf(u * 6.0f) - 3.0f; break;              /* ties */
                case 2: *x = u < 0.9f ? -INFINITY : floorf(u * 40.0f); break;
                case 3: *x = i % 5 == 0 ? NAN : (i % 5 == 1 ? -0.0f : (i % 5 == 2 ? 0.0f : -u)); break;
                case 4: *x = -INFINITY; break;
                default: *x = 1.5f; break;
                }
            }
        for (size_t c = 0; c < sizeof ks / sizeof *ks; c++) {
            const int k = ks[c];
            CHECK_OK(cuk_topk_host(rows, B, n, k, ids, vals));
            for (int b = 0; b < B; b++) {
                samp_best(rows + (size_t)b * n, (int32_t)n, k, want_ids, want_vals);
                CHECK(!memcmp(ids + (size_t)b * k, want_ids, (size_t)k * sizeof *ids) &&
                          !memcmp(vals + (size_t)b * k, want_vals, (size_t)k * sizeof *vals),
                      "device top %d of row kind %d (n %lld): first id %d, want %d", k, b, (long long)n,
                      ids[(size_t)b * k], want_ids[0]);
            }
        }
        free(rows), free(ids), free(vals);
    }
}

/* cuk_mmv.cu's streamed F16 / BF16 decode kernels (what cuk_gemv / cuk_glu run for B ≤ 8) against
 * cuk_mma.cu's decode kernel and its prefill kernel, bitwise: every mode, 1 / 3 / 8 tokens, the GLU
 * dense and over gathered rows; shapes that give a streamed block several tiles (n_out > 16 × the
 * SM count), a K range that is empty (K 200), K not a multiple of the 64-element chunk, a short last
 * range (K 11008). */
static uint64_t mmv_rng = 0x2545f4914f6cdd1dull;
static float mmv_rand(void)
{
    mmv_rng ^= mmv_rng << 13, mmv_rng ^= mmv_rng >> 7, mmv_rng ^= mmv_rng << 17;
    return (float)((double)(mmv_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void *mmv_dev(size_t n)
{
    void *p = NULL;
    REQUIRE(cudaMalloc(&p, n) == cudaSuccess, "cudaMalloc %zu", n);
    return p;
}

static int mmv_diff(const void *da, const void *db, size_t n)
{
    uint8_t *a = malloc(n), *b = malloc(n);
    REQUIRE(a && b, "out of memory");
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess, "sync: %s", cudaGetErrorString(cudaGetLastError()));
    REQUIRE(cudaMemcpy(a, da, n, cudaMemcpyDeviceToHost) == cudaSuccess, "copy down");
    REQUIRE(cudaMemcpy(b, db, n, cudaMemcpyDeviceToHost) == cudaSuccess, "copy down");
    const int r = memcmp(a, b, n) != 0;
    free(a), free(b);
    return r;
}

static void test_mmv(void)
{
    if (!cuk_mmv_on()) {
        printf("mmv: PINFER_CUDA_MMV=0, the streamed kernels are off\n");
        return;
    }
    static const int64_t shapes[][2] = { { 4096, 4261 }, { 11008, 700 }, { 200, 4500 }, { 1032, 2300 } }; /* K, n */
    enum { BX = 9 };
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t K = shapes[si][0], N = shapes[si][1];
        float *x = malloc((size_t)(BX * K) * sizeof *x);
        uint16_t *hw = malloc((size_t)(K * N) * 2);
        int32_t *idx = malloc((size_t)(8 * N) * sizeof *idx), cnt[8];
        REQUIRE(x && hw && idx, "out of memory");
        for (int b = 0; b < BX; b++) {
            const float mag = b == 2 ? 0.0f : powf(10.0f, (float)(b % 5) - 2.0f);
            for (int64_t i = 0; i < K; i++)
                x[(int64_t)b * K + i] = mag * mmv_rand();
        }
        for (int b = 0; b < 8; b++) { /* token b: every (b % 3 + 2)-th row, token 6 none */
            cnt[b] = 0;
            for (int64_t r = 0; r < N && b != 6; r++)
                if (r % (b % 3 + 2) == b % 2)
                    idx[(int64_t)b * N + cnt[b]++] = (int32_t)r;
        }
        float *dx = mmv_dev((size_t)(BX * K) * sizeof(float));
        void *xh = mmv_dev((size_t)BX * cuk_mma_x_row_bytes(K) + cuk_xq_row_bytes(K) * BX);
        const size_t yb = (size_t)(BX * N) * sizeof(float);
        float *ya = mmv_dev(yb), *yb_ = mmv_dev(yb);
        int32_t *didx = mmv_dev((size_t)(8 * N) * sizeof(int32_t)), *dcnt = mmv_dev(sizeof cnt);
        REQUIRE(cudaMemcpy(dx, x, (size_t)(BX * K) * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess, "up");
        REQUIRE(cudaMemcpy(didx, idx, (size_t)(8 * N) * sizeof(int32_t), cudaMemcpyHostToDevice) == cudaSuccess, "up");
        REQUIRE(cudaMemcpy(dcnt, cnt, sizeof cnt, cudaMemcpyHostToDevice) == cudaSuccess, "up");
        static const uint32_t wt[] = { PI_TYPE_F16, PI_TYPE_BF16 };
        for (int ti = 0; ti < 2; ti++) {
            const uint32_t type = wt[ti];
            struct cuk_w w[2];
            for (int m = 0; m < 2; m++) {
                for (int64_t i = 0; i < K * N; i++)
                    hw[i] = type == PI_TYPE_F16 ? pi_f32_to_f16(mmv_rand()) : pi_f32_to_bf16(mmv_rand());
                w[m] = (struct cuk_w){ .type = type, .n_in = K, .n_out = N, .q = mmv_dev((size_t)(K * N) * 2) };
                REQUIRE(cudaMemcpy(w[m].q, hw, (size_t)(K * N) * 2, cudaMemcpyHostToDevice) == cudaSuccess, "up");
            }
            const char *tn = type == PI_TYPE_F16 ? "f16" : "bf16";
            /* the prefill kernel (9 tokens) against the streamed kernel, each token alone */
            CHECK_OK(cuk_mma_gemv(&w[0], dx, BX, ya, CUK_SET, 0.0f, NULL, NULL, 0, 0, xh, NULL));
            for (int b = 0; b < 8; b++)
                CHECK_OK(cuk_mmv_gemv(&w[0], dx + (int64_t)b * K, 1, yb_ + (int64_t)b * N, CUK_SET, 0.0f, NULL, NULL,
                                      0, 0, NULL));
            CHECK(!mmv_diff(ya, yb_, (size_t)(8 * N) * sizeof(float)), "mmv %s %lldx%lld: 8 tokens != prefill kernel",
                  tn, (long long)N, (long long)K);
            const size_t ob = (size_t)N * sizeof(float);
            for (int mode = CUK_SET; mode <= CUK_SPLIT3; mode++) { /* one token: cuk_mma's decode kernel */
                if (mode == CUK_ADD) /* onto the same y */
                    REQUIRE(cudaMemset(ya, 0x3c, ob) == cudaSuccess && cudaMemset(yb_, 0x3c, ob) == cudaSuccess,
                            "memset");
                const int64_t n0 = N / 3, n1 = N / 4;
                CHECK_OK(cuk_mma_gemv(&w[0], dx, 1, ya, mode, 0.1f, ya + n0, ya + n0 + n1, n0, n1, xh, NULL));
                CHECK_OK(cuk_mmv_gemv(&w[0], dx, 1, yb_, mode, 0.1f, yb_ + n0, yb_ + n0 + n1, n0, n1, NULL));
                CHECK(!mmv_diff(ya, yb_, mode == CUK_MASK ? (size_t)N : ob),
                      "mmv %s %lldx%lld mode %d: streamed != cuk_mma", tn, (long long)N, (long long)K, mode);
            }
            static const int bs[] = { 1, 3, 8 };
            for (int bi = 0; bi < 3; bi++) {
                const int B = bs[bi];
                const size_t gb = (size_t)(B * N) * sizeof(float);
                for (int kind = PI_ACT_SWIGLU; kind <= PI_ACT_DRELU; kind++)
                    for (int g = B == 1 ? 0 : 1; g < 3; g++) { /* dense (one token), gathered compact, scattered */
                        const int32_t *gi = g ? didx : NULL, *gc = g ? dcnt : NULL;
                        REQUIRE(cudaMemset(ya, 0xff, gb) == cudaSuccess && cudaMemset(yb_, 0xff, gb) == cudaSuccess,
                                "memset");
                        CHECK_OK(cuk_mma_glu(&w[0], &w[1], dx, B, ya, kind, gi, gc, N, g == 1, xh, NULL));
                        CHECK_OK(cuk_mmv_glu(&w[0], &w[1], dx, B, yb_, kind, gi, gc, N, g == 1, NULL));
                        CHECK(!mmv_diff(ya, yb_, gb), "mmv %s %lldx%lld B=%d glu %d (%s): streamed != cuk_mma", tn,
                              (long long)N, (long long)K, B, kind, g == 0 ? "dense" : g == 1 ? "compact" : "scattered");
                    }
            }
            /* the RMSNorm fused into the product (one token) = cuk_rmsnorm, then cuk_mma's kernels */
            float *nwh = malloc((size_t)K * sizeof *nwh);
            REQUIRE(nwh, "out of memory");
            for (int64_t i = 0; i < K; i++)
                nwh[i] = 1.0f + 0.5f * mmv_rand();
            float *nw = mmv_dev((size_t)K * sizeof(float)), *xn = mmv_dev((size_t)(BX * K) * sizeof(float));
            REQUIRE(cudaMemcpy(nw, nwh, (size_t)K * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess, "up");
            for (int b = 0; b < 3; b++) { /* tokens 0, 1 and 2 (all zero) */
                const float *xb = dx + (int64_t)b * K;
                const int64_t n0 = N / 3, n1 = N / 4;
                CHECK_OK(cuk_rmsnorm(xn, xb, nw, 1, K, K, 1e-5f, NULL));
                CHECK_OK(cuk_mma_gemv(&w[0], xn, 1, ya, CUK_SPLIT3, 0.0f, ya + n0, ya + n0 + n1, n0, n1, xh, NULL));
                CHECK_OK(cuk_norm_gemv_split3(&w[0], xb, nw, 1e-5f, 1, xn + K, yb_, n0, yb_ + n0, n1, yb_ + n0 + n1,
                                              xh, NULL));
                CHECK(!mmv_diff(ya, yb_, (size_t)N * sizeof(float)), "mmv %s %lldx%lld: norm + split3 (token %d) != "
                      "rmsnorm then cuk_mma", tn, (long long)N, (long long)K, b);
                for (int g = 0; g < 2; g++) { /* dense, gathered (token b's list) */
                    const int32_t *gi = g ? didx + (int64_t)b * N : NULL, *gc = g ? dcnt + b : NULL;
                    REQUIRE(cudaMemset(ya, 0xff, (size_t)N * 4) == cudaSuccess &&
                                cudaMemset(yb_, 0xff, (size_t)N * 4) == cudaSuccess, "memset");
                    CHECK_OK(cuk_rmsnorm(xn, xb, nw, 1, K, K, 1e-5f, NULL));
                    CHECK_OK(cuk_mma_glu(&w[0], &w[1], xn, 1, ya, PI_ACT_SWIGLU, gi, gc, N, g == 1, xh, NULL));
                    CHECK_OK(cuk_norm_glu(&w[0], &w[1], xb, nw, 1e-5f, 1, xn + K, yb_, PI_ACT_SWIGLU, gi, gc, N, g == 1,
                                          xh, NULL));
                    CHECK(!mmv_diff(ya, yb_, (size_t)N * sizeof(float)), "mmv %s %lldx%lld: norm + glu (token %d, %s) "
                          "!= rmsnorm then cuk_mma", tn, (long long)N, (long long)K, b, g ? "gathered" : "dense");
                }
                /* token b's list as a raw mask (any non-zero byte; aligned and at an odd offset), listed by
                 * the gathered kernel itself = its list, count and activations from cuk_mma's compact GLU */
                for (int off = 0; off < 4; off += 3) {
                    uint8_t *mh = calloc((size_t)N + 16, 1);
                    int32_t *lh = malloc((size_t)N * sizeof *lh), nh = -1;
                    REQUIRE(mh && lh, "out of memory");
                    for (int32_t j = 0; j < cnt[b]; j++)
                        mh[off + idx[(int64_t)b * N + j]] = (uint8_t)(j % 3 + 1);
                    uint8_t *dm = mmv_dev((size_t)N + 16);
                    int32_t *dl = mmv_dev((size_t)N * 4), *dn = mmv_dev(4);
                    REQUIRE(cudaMemcpy(dm, mh, (size_t)N + 16, cudaMemcpyHostToDevice) == cudaSuccess, "up");
                    REQUIRE(cudaMemset(ya, 0xff, (size_t)N * 4) == cudaSuccess &&
                                cudaMemset(yb_, 0xff, (size_t)N * 4) == cudaSuccess, "memset");
                    CHECK_OK(cuk_rmsnorm(xn, xb, nw, 1, K, K, 1e-5f, NULL));
                    CHECK_OK(cuk_mma_glu(&w[0], &w[1], xn, 1, ya, PI_ACT_REGLU, didx + (int64_t)b * N, dcnt + b, N, true,
                                         xh, NULL));
                    CHECK(cuk_norm_glu_mask(&w[0], &w[1], xb, nw, 1e-5f, 2, yb_, PI_ACT_REGLU, dm + off, dl, dn, N,
                                            NULL) == 1, "mmv %s: the mask-listing GLU took two tokens", tn);
                    CHECK_OK(cuk_norm_glu_mask(&w[0], &w[1], xb, nw, 1e-5f, 1, yb_, PI_ACT_REGLU, dm + off, dl, dn, N,
                                               NULL));
                    REQUIRE(cudaMemcpy(lh, dl, (size_t)N * 4, cudaMemcpyDeviceToHost) == cudaSuccess &&
                                cudaMemcpy(&nh, dn, 4, cudaMemcpyDeviceToHost) == cudaSuccess, "down");
                    CHECK(nh == cnt[b] && !memcmp(lh, idx + (int64_t)b * N, (size_t)cnt[b] * 4),
                          "mmv %s %lldx%lld: the mask listed by the GLU (token %d, offset %d): %d rows, want %d", tn,
                          (long long)N, (long long)K, b, off, nh, cnt[b]);
                    CHECK(!mmv_diff(ya, yb_, (size_t)N * sizeof(float)), "mmv %s %lldx%lld: norm + glu of a raw mask "
                          "(token %d, offset %d) != rmsnorm then cuk_mma's compact", tn, (long long)N, (long long)K, b,
                          off);
                    cudaFree(dm), cudaFree(dl), cudaFree(dn);
                    free(mh), free(lh);
                }
            }
            cudaFree(nw), cudaFree(xn);
            free(nwh);
            cudaFree(w[0].q), cudaFree(w[1].q);
        }
        printf("mmv %lld x %lld: streamed = cuk_mma bitwise checked\n", (long long)N, (long long)K);
        cudaFree(dx), cudaFree(xh), cudaFree(ya), cudaFree(yb_), cudaFree(didx), cudaFree(dcnt);
        free(x), free(hw), free(idx);
    }
}

/* ---- programmatic dependent launch (gpud/cuda/cuk_pdl.cuh) ---- */

/* A decode-shaped net of random weights on the device: per layer RMSNorm + q/k/v, RoPE + attention
 * over the layer's f16 cache, wo added to x, then the FFN added to x — dense (norm + gate/up, down)
 * on even layers, sparse on odd ones (predictor fc1 → fc2 mask → compaction → norm + gathered
 * gate/up → AXPY over down_t) —, then the output norm, product and argmax: every kernel of the
 * decode graph, in its order. */
enum { PDL_L = 4, PDL_E = 512, PDL_HD = 128, PDL_NH = 4, PDL_F = 1376, PDL_R = 64, PDL_V = 1000, PDL_CTX = 64 };

struct pdl_net {
    struct cuk_w qkv[PDL_L], wo[PDL_L], gate[PDL_L], up[PDL_L], down[PDL_L], down_t[PDL_L], fc1[PDL_L], fc2[PDL_L];
    struct cuk_w out;
    float *an[PDL_L], *fn[PDL_L], *on; /* the norms' weights (E) */
    struct cuk_attn_geom geom;
    void *kc[PDL_L], *vc[PDL_L];
    float *inv;
    float *x, *xn, *q, *k, *v, *att, *apart, *act, *p1, *part, *logits; /* scratch */
    uint8_t *mask;
    int32_t *idx, *cnt, *pos, *seq, *ids;
    void *xq;
};

/* n_out rows of raw GGUF blocks of type (rb bytes a row) uploaded and repacked as cuk_repack lays them */
static struct cuk_w dev_weight(uint32_t type, const uint8_t *raw, size_t rb, int64_t n_in, int64_t n_out)
{
    struct cuk_w w = { .type = type, .n_in = n_in, .n_out = n_out };
    w.q = mmv_dev(cuk_w_qbytes(type, n_in, n_out));
    const size_t db = cuk_w_dbytes(type, n_in, n_out);
    w.d = db ? mmv_dev(db) : NULL;
    void *draw = mmv_dev(rb * (size_t)n_out);
    REQUIRE(cudaMemcpy(draw, raw, rb * (size_t)n_out, cudaMemcpyHostToDevice) == cudaSuccess, "up");
    CHECK_OK(cuk_repack(&w, draw, 0, n_out, NULL));
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess, "repack");
    cudaFree(draw);
    return w;
}

/* a (n_out, n_in) weight of type with values in [-a, a), uploaded and repacked */
static struct cuk_w pdl_weight(uint32_t type, int64_t n_in, int64_t n_out, float a)
{
    const struct pi_type_traits *tt = quant_traits(type);
    REQUIRE(tt && n_in % tt->blck_size == 0, "type %u", type);
    const size_t rb = (size_t)(n_in / tt->blck_size) * tt->type_size;
    float *row = malloc((size_t)n_in * sizeof *row);
    uint8_t *raw = malloc(rb * (size_t)n_out);
    REQUIRE(row && raw, "out of memory");
    for (int64_t r = 0; r < n_out; r++) {
        for (int64_t i = 0; i < n_in; i++)
            row[i] = a * mmv_rand();
        tt->from_float(row, raw + (size_t)r * rb, n_in);
    }
    const struct cuk_w w = dev_weight(type, raw, rb, n_in, n_out);
    free(row), free(raw);
    return w;
}

static float *pdl_norm_w(void)
{
    float h[PDL_E];
    for (int i = 0; i < PDL_E; i++)
        h[i] = 1.0f + 0.25f * mmv_rand();
    float *d = mmv_dev(sizeof h);
    REQUIRE(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice) == cudaSuccess, "up");
    return d;
}

static void pdl_net_init(struct pdl_net *n, uint32_t type)
{
    memset(n, 0, sizeof *n);
    const int64_t Q = PDL_NH * PDL_HD;
    const float a = 1.0f / sqrtf((float)PDL_E);
    for (int l = 0; l < PDL_L; l++) {
        n->qkv[l] = pdl_weight(type, PDL_E, 3 * Q, a);
        n->wo[l] = pdl_weight(type, Q, PDL_E, a);
        n->gate[l] = pdl_weight(type, PDL_E, PDL_F, a);
        n->up[l] = pdl_weight(type, PDL_E, PDL_F, a);
        n->down[l] = pdl_weight(type, PDL_F, PDL_E, 1.0f / sqrtf((float)PDL_F));
        n->down_t[l] = pdl_weight(type, PDL_E, PDL_F, 1.0f / sqrtf((float)PDL_F));
        n->fc1[l] = pdl_weight(type, PDL_E, PDL_R, a);
        n->fc2[l] = pdl_weight(type, PDL_R, PDL_F, 1.0f / sqrtf((float)PDL_R));
        n->an[l] = pdl_norm_w(), n->fn[l] = pdl_norm_w();
        const size_t cb = (size_t)PDL_CTX * Q * 2;
        n->kc[l] = mmv_dev(cb), n->vc[l] = mmv_dev(cb);
    }
    n->out = pdl_weight(type, PDL_E, PDL_V, a);
    n->on = pdl_norm_w();
    n->geom = (struct cuk_attn_geom){ .n_head = PDL_NH, .n_head_kv = PDL_NH, .head_dim = PDL_HD, .rope_dim = PDL_HD,
                                      .rope_mode = OPS_ROPE_NORM, .rope_theta = 10000.0f, .n_ctx = PDL_CTX,
                                      .n_seq = 1, .f16 = true };
    float inv[PDL_HD / 2];
    for (int i = 0; i < PDL_HD / 2; i++)
        inv[i] = 1.0f / powf(10000.0f, (float)(2 * i) / (float)PDL_HD);
    n->inv = mmv_dev(sizeof inv);
    REQUIRE(cudaMemcpy(n->inv, inv, sizeof inv, cudaMemcpyHostToDevice) == cudaSuccess, "up");
    n->x = mmv_dev(PDL_E * 4), n->xn = mmv_dev(PDL_E * 4 * 2);
    n->q = mmv_dev((size_t)Q * 4), n->k = mmv_dev((size_t)Q * 4), n->v = mmv_dev((size_t)Q * 4);
    n->att = mmv_dev((size_t)Q * 4), n->apart = mmv_dev(cuk_attn_part_floats(&n->geom, 1) * 4);
    n->act = mmv_dev(PDL_F * 4), n->p1 = mmv_dev(PDL_R * 4), n->part = mmv_dev(cuk_axpy_part_floats(PDL_F, PDL_E, 1) * 4);
    n->logits = mmv_dev(PDL_V * 4), n->mask = mmv_dev(PDL_F);
    n->idx = mmv_dev(PDL_F * 4), n->cnt = mmv_dev(4), n->pos = mmv_dev(4), n->seq = mmv_dev(4), n->ids = mmv_dev(4);
    n->xq = mmv_dev(cuk_xq_row_bytes(PDL_F) + cuk_mma_x_row_bytes(PDL_F));
    REQUIRE(cudaMemset(n->seq, 0, 4) == cudaSuccess, "memset");
    /* the attention's arrival counters start at zero (cuk_attn_part_floats) */
    REQUIRE(cudaMemset(n->apart, 0, cuk_attn_part_floats(&n->geom, 1) * 4) == cudaSuccess, "memset");
}

static void pdl_net_free(struct pdl_net *n)
{
    struct cuk_w *ws[] = { n->qkv, n->wo, n->gate, n->up, n->down, n->down_t, n->fc1, n->fc2 };
    for (int l = 0; l < PDL_L; l++) {
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            cudaFree(ws[i][l].q), cudaFree(ws[i][l].d);
        cudaFree(n->an[l]), cudaFree(n->fn[l]), cudaFree(n->kc[l]), cudaFree(n->vc[l]);
    }
    cudaFree(n->out.q), cudaFree(n->out.d), cudaFree(n->on), cudaFree(n->inv);
    void *sc[] = { n->x, n->xn, n->q, n->k, n->v, n->att, n->apart, n->act, n->p1, n->part, n->logits, n->mask,
                   n->idx, n->cnt, n->pos, n->seq, n->ids, n->xq };
    for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++)
        cudaFree(sc[i]);
}

/* one token through the net (x and pos already on the device) */
static int pdl_step(struct pdl_net *n, void *st)
{
    const int64_t Q = PDL_NH * PDL_HD;
    const float eps = 1e-5f;
    int rc = 0;
    for (int l = 0; l < PDL_L && !rc; l++) {
        rc = cuk_norm_gemv_split3(&n->qkv[l], n->x, n->an[l], eps, 1, n->xn, n->q, Q, n->k, Q, n->v, n->xq, st);
        rc = rc ? rc : cuk_rope_attn(&n->geom, n->q, n->k, n->v, n->pos, n->seq, n->kc[l], n->vc[l], n->inv, n->att,
                                     n->apart, 1, -1, &n->wo[l], st);
        rc = rc ? rc : cuk_gemv(&n->wo[l], n->att, 1, n->x, CUK_ADD, 0.0f, n->xq, st);
        if (l % 2 == 0) {
            rc = rc ? rc : cuk_norm_glu(&n->gate[l], &n->up[l], n->x, n->fn[l], eps, 1, n->xn, n->act, PI_ACT_SWIGLU,
                                        NULL, NULL, PDL_F, false, n->xq, st);
            rc = rc ? rc : cuk_gemv(&n->down[l], n->act, 1, n->x, CUK_ADD, 0.0f, n->xq, st);
        } else {
            rc = rc ? rc : cuk_gemv(&n->fc1[l], n->x, 1, n->p1, CUK_RELU, 0.0f, n->xq, st);
            rc = rc ? rc : cuk_gemv(&n->fc2[l], n->p1, 1, n->mask, CUK_MASK, 0.0f, n->xq, st);
            /* as cudev_ffn: the gathered gate/up lists the mask itself where it can (its blocks
             * normalize x, wo's output, before their wait), else the compaction first */
            int lm = rc ? rc
                        : cuk_norm_glu_mask(&n->gate[l], &n->up[l], n->x, n->fn[l], eps, 1, n->act, PI_ACT_SWIGLU,
                                            n->mask, n->idx, n->cnt, PDL_F, st);
            if (lm > 0) {
                rc = cuk_compact(n->mask, 1, PDL_F, n->idx, n->cnt, st);
                rc = rc ? rc : cuk_norm_glu(&n->gate[l], &n->up[l], n->x, n->fn[l], eps, 1, n->xn, n->act,
                                            PI_ACT_SWIGLU, n->idx, n->cnt, PDL_F, true, n->xq, st);
            } else
                rc = lm;
            rc = rc ? rc : cuk_axpy_rows(&n->down_t[l], n->act, 1, n->idx, n->cnt, PDL_F, n->part, n->x, true, st);
        }
    }
    rc = rc ? rc : cuk_rmsnorm(n->xn, n->x, n->on, 1, PDL_E, PDL_E, eps, st);
    rc = rc ? rc : cuk_gemv(&n->out, n->xn, 1, n->logits, CUK_SET, 0.0f, n->xq, st);
    return rc ? rc : cuk_argmax(n->logits, 1, PDL_V, n->ids, st);
}

enum { PDL_STEPS = 6 };

/* PDL_STEPS tokens (input rows xs) through the net from an empty cache; each step's logits and id
 * into lg / ids. how: 0 the legacy stream (always plain order), 1 a stream of our own (the PDL
 * attribute when on), 2 that stream replaying one captured graph, as cudev_step does. */
static void pdl_run(struct pdl_net *n, int how, const float *xs, float *lg, int32_t *ids)
{
    cudaStream_t st = NULL;
    cudaGraphExec_t ge = NULL;
    if (how)
        REQUIRE(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) == cudaSuccess, "stream");
    for (int l = 0; l < PDL_L; l++) {
        const size_t cb = (size_t)PDL_CTX * PDL_NH * PDL_HD * 2;
        REQUIRE(cudaMemset(n->kc[l], 0, cb) == cudaSuccess && cudaMemset(n->vc[l], 0, cb) == cudaSuccess, "memset");
    }
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess, "sync");
    if (how == 2) {
        cudaGraph_t g = NULL;
        REQUIRE(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) == cudaSuccess, "capture");
        CHECK_OK(pdl_step(n, st));
        REQUIRE(cudaStreamEndCapture(st, &g) == cudaSuccess, "end capture: %s", cudaGetErrorString(cudaGetLastError()));
        REQUIRE(cudaGraphInstantiate(&ge, g, 0) == cudaSuccess, "instantiate");
        cudaGraphDestroy(g);
    }
    for (int p = 0; p < PDL_STEPS; p++) {
        const int32_t pos = p;
        REQUIRE(cudaMemcpyAsync(n->pos, &pos, 4, cudaMemcpyHostToDevice, st) == cudaSuccess, "up");
        REQUIRE(cudaMemcpyAsync(n->x, xs + (size_t)p * PDL_E, PDL_E * 4, cudaMemcpyHostToDevice, st) == cudaSuccess,
                "up");
        if (how == 2)
            REQUIRE(cudaGraphLaunch(ge, st) == cudaSuccess, "graph launch");
        else
            CHECK_OK(pdl_step(n, st));
        REQUIRE(cudaMemcpyAsync(lg + (size_t)p * PDL_V, n->logits, PDL_V * 4, cudaMemcpyDeviceToHost, st) == cudaSuccess,
                "down");
        REQUIRE(cudaMemcpyAsync(ids + p, n->ids, 4, cudaMemcpyDeviceToHost, st) == cudaSuccess, "down");
        REQUIRE(cudaStreamSynchronize(st) == cudaSuccess, "step %d (how %d): %s", p, how,
                cudaGetErrorString(cudaGetLastError()));
    }
    if (ge)
        cudaGraphExecDestroy(ge);
    if (st)
        cudaStreamDestroy(st);
}

/* The chain on its own stream (with PDL: main turns it on) and as a replayed graph gives the legacy
 * stream's bits, every step; F16 (streamed and mma kernels) and Q8_0 (activation quantizer, the Q
 * products). A missing wait in any kernel would let it read a half-written activation. */
static void test_pdl(void)
{
    static const uint32_t types[] = { PI_TYPE_F16, PI_TYPE_Q8_0 };
    float *xs = malloc((size_t)PDL_STEPS * PDL_E * sizeof *xs);
    float *lg[3];
    int32_t ids[3][PDL_STEPS];
    for (int h = 0; h < 3; h++)
        lg[h] = malloc((size_t)PDL_STEPS * PDL_V * sizeof *lg[h]);
    REQUIRE(xs && lg[0] && lg[1] && lg[2], "out of memory");
    for (size_t i = 0; i < (size_t)PDL_STEPS * PDL_E; i++)
        xs[i] = mmv_rand();
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        struct pdl_net n;
        pdl_net_init(&n, types[ti]);
        for (int h = 0; h < 3; h++)
            pdl_run(&n, h, xs, lg[h], ids[h]);
        for (int h = 1; h < 3; h++) {
            CHECK(!memcmp(lg[0], lg[h], (size_t)PDL_STEPS * PDL_V * sizeof(float)),
                  "pdl type %u: the %s's logits differ from the legacy stream's", types[ti],
                  h == 1 ? "own stream" : "graph");
            CHECK(!memcmp(ids[0], ids[h], sizeof ids[0]), "pdl type %u: ids differ (%s)", types[ti],
                  h == 1 ? "own stream" : "graph");
        }
        bool finite = true;
        for (size_t i = 0; i < (size_t)PDL_STEPS * PDL_V; i++)
            finite = finite && isfinite(lg[0][i]);
        CHECK(finite, "pdl type %u: logits not finite", types[ti]);
        pdl_net_free(&n);
        const char *pdl = getenv("PINFER_CUDA_PDL");
        printf("pdl type %u: %d steps, own stream and graph = legacy stream bitwise checked (PINFER_CUDA_PDL=%s)\n",
               types[ti], PDL_STEPS, pdl ? pdl : "unset: on");
    }
    for (int h = 0; h < 3; h++)
        free(lg[h]);
    free(xs);
}

/* The sparse path's mask compaction and down projection against the host, bitwise: cuk_compact's list
 * and counts = the host's (rows of 700 and 4 500 neurons, so the later tokens' mask rows are not
 * 16-byte aligned; masks of every density, any non-zero byte on), and cuk_axpy_rows = its order
 * written out on the host — per chunk of CUK_AXPY_CHUNK listed rows an fmaf chain in ascending j
 * (a zero activation skipping its row, the activation times the block scale first), then the chunks
 * added in chunk order, onto y or not — for F16 and Q8_0 down_t (float and Q types take different
 * numbers of rows in flight a thread: the same additions), 1, 3 and 8 tokens. */
static void test_sparse_axpy(void)
{
    static const int64_t shapes[][2] = { { 512, 700 }, { 1024, 4500 } }; /* n_embd, n_ff */
    static const uint32_t types[] = { PI_TYPE_F16, PI_TYPE_Q8_0 };
    enum { BM = 8 };
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t E = shapes[si][0], F = shapes[si][1];
        uint8_t *mask = malloc((size_t)(BM * F));
        int32_t *hidx = malloc((size_t)(BM * F) * sizeof *hidx), *gidx = malloc((size_t)(BM * F) * sizeof *gidx);
        int32_t hcnt[BM], gcnt[BM];
        float *act = malloc((size_t)(BM * F) * sizeof *act), *y0 = malloc((size_t)(BM * E) * sizeof *y0);
        float *yh = malloc((size_t)(BM * E) * sizeof *yh), *yd = malloc((size_t)(BM * E) * sizeof *yd);
        float *w = malloc((size_t)(F * E) * sizeof *w), *acc = malloc((size_t)E * sizeof *acc);
        REQUIRE(mask && hidx && gidx && act && y0 && yh && yd && w && acc, "out of memory");
        for (int b = 0; b < BM; b++) { /* token 0: ~10 %, 1: none, 2: all, 3: the last 37, others ~6–21 % */
            hcnt[b] = 0;
            for (int64_t i = 0; i < F; i++) {
                const float r = 0.5f + 0.5f * mmv_rand();
                const bool on = b == 1 ? false : b == 2 ? true : b == 3 ? i >= F - 37 : r < (b == 0 ? 0.1f : 0.03f * b);
                mask[(int64_t)b * F + i] = on ? (uint8_t)(1 + (i % 3)) : 0;
                if (on)
                    hidx[(int64_t)b * F + hcnt[b]++] = (int32_t)i;
            }
            for (int64_t j = 0; j < F; j++) /* compact activations, some exactly zero (their rows skipped) */
                act[(int64_t)b * F + j] = j % 7 == 3 ? 0.0f : mmv_rand();
        }
        for (int64_t i = 0; i < BM * E; i++)
            y0[i] = mmv_rand();
        uint8_t *dm = mmv_dev((size_t)(BM * F));
        int32_t *didx = mmv_dev((size_t)(BM * F) * 4), *dcnt = mmv_dev(BM * 4);
        float *dact = mmv_dev((size_t)(BM * F) * 4), *dy = mmv_dev((size_t)(BM * E) * 4);
        float *part = mmv_dev(cuk_axpy_part_floats(F, E, BM) * 4);
        REQUIRE(cudaMemcpy(dm, mask, (size_t)(BM * F), cudaMemcpyHostToDevice) == cudaSuccess &&
                    cudaMemcpy(dact, act, (size_t)(BM * F) * 4, cudaMemcpyHostToDevice) == cudaSuccess, "up");
        CHECK_OK(cuk_compact(dm, BM, F, didx, dcnt, NULL));
        REQUIRE(cudaMemcpy(gidx, didx, (size_t)(BM * F) * 4, cudaMemcpyDeviceToHost) == cudaSuccess &&
                    cudaMemcpy(gcnt, dcnt, sizeof gcnt, cudaMemcpyDeviceToHost) == cudaSuccess, "down");
        for (int b = 0; b < BM; b++)
            CHECK(gcnt[b] == hcnt[b] && !memcmp(gidx + (int64_t)b * F, hidx + (int64_t)b * F, (size_t)hcnt[b] * 4),
                  "compact %lld neurons, token %d: %d listed, want %d", (long long)F, b, gcnt[b], hcnt[b]);
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
            const uint32_t type = types[ti];
            const struct pi_type_traits *tt = quant_traits(type);
            const size_t rb = (size_t)(E / tt->blck_size) * tt->type_size;
            uint8_t *raw = malloc(rb * (size_t)F);
            float *row = malloc((size_t)E * sizeof *row);
            REQUIRE(raw && row, "out of memory");
            for (int64_t r = 0; r < F; r++) { /* raw rows, and each element as the kernel reads it: w, scale s */
                for (int64_t e = 0; e < E; e++)
                    row[e] = 0.05f * mmv_rand();
                tt->from_float(row, raw + (size_t)r * rb, E);
                for (int64_t e = 0; e < E; e++) {
                    if (type == PI_TYPE_F16)
                        w[r * E + e] = pi_f16_to_f32(((const pi_f16 *)(raw + (size_t)r * rb))[e]);
                    else
                        w[r * E + e] = (float)((const struct block_q8_0 *)(raw + (size_t)r * rb))[e / 32].qs[e % 32];
                }
            }
            struct cuk_w dw = dev_weight(type, raw, rb, E, F);
            static const int bs[] = { 1, 3, 8 };
            for (int bi = 0; bi < 3; bi++)
                for (int add = 0; add < 2; add++) {
                    const int B = bs[bi];
                    REQUIRE(cudaMemcpy(dy, y0, (size_t)(B * E) * 4, cudaMemcpyHostToDevice) == cudaSuccess, "up");
                    CHECK_OK(cuk_axpy_rows(&dw, dact, B, didx, dcnt, F, part, dy, add, NULL));
                    for (int b = 0; b < B; b++) {
                        float *yr = yh + (int64_t)b * E;
                        for (int64_t e = 0; e < E; e++)
                            yr[e] = 0.0f;
                        for (int64_t j0 = 0; j0 < hcnt[b]; j0 += CUK_AXPY_CHUNK) {
                            for (int64_t e = 0; e < E; e++)
                                acc[e] = 0.0f;
                            for (int64_t j = j0; j < j0 + CUK_AXPY_CHUNK && j < hcnt[b]; j++) {
                                const float a = act[(int64_t)b * F + j];
                                if (a == 0.0f)
                                    continue;
                                const int64_t r = hidx[(int64_t)b * F + j];
                                for (int64_t e = 0; e < E; e++) {
                                    const float sc = type == PI_TYPE_F16 ? 1.0f
                                                                         : pi_f16_to_f32(((const struct block_q8_0 *)(raw + (size_t)r * rb))[e / 32].d);
                                    const float as = a * sc;
                                    acc[e] = fmaf(as, w[r * E + e], acc[e]);
                                }
                            }
                            for (int64_t e = 0; e < E; e++)
                                yr[e] += acc[e];
                        }
                        for (int64_t e = 0; e < E; e++)
                            yr[e] = add ? y0[(int64_t)b * E + e] + yr[e] : yr[e];
                    }
                    REQUIRE(cudaMemcpy(yd, dy, (size_t)(B * E) * 4, cudaMemcpyDeviceToHost) == cudaSuccess, "down");
                    CHECK(!memcmp(yd, yh, (size_t)(B * E) * 4), "axpy %s %lld x %lld, B=%d add %d: != the host's order",
                          tt->name, (long long)F, (long long)E, B, add);
                }
            cudaFree(dw.q), cudaFree(dw.d);
            free(raw), free(row);
        }
        printf("compact + axpy %lld x %lld: = the host bitwise checked (F16, Q8_0)\n", (long long)F, (long long)E);
        cudaFree(dm), cudaFree(didx), cudaFree(dcnt), cudaFree(dact), cudaFree(dy), cudaFree(part);
        free(mask), free(hidx), free(gidx), free(act), free(y0), free(yh), free(yd), free(w), free(acc);
    }
}

/* The Q types' RMSNorm + quantization in one launch (cuk_normq_split3 / cuk_normq_glu, the decode
 * path's default) = cuk_rmsnorm, then the product quantizing its own input: bitwise, for a token
 * alone and in a batch (each block of k_norm_quant_x computes the row's scale itself), for the
 * q/k/v split and the GLU, dense and over a gathered row list. */
static void test_normq(void)
{
    enum { K = 512, N = 352, B = 3 };
    static const uint32_t types[] = { PI_TYPE_Q8_0, PI_TYPE_Q4_0 };
    float *hx = malloc((size_t)B * K * sizeof *hx);
    int32_t hidx[B * N], hcnt[B];
    REQUIRE(hx, "out of memory");
    for (size_t i = 0; i < (size_t)B * K; i++)
        hx[i] = mmv_rand() * (i % 7 == 0 ? 4.0f : 1.0f);
    for (int b = 0; b < B; b++) { /* token b's list: every (b + 2)th row */
        hcnt[b] = 0;
        for (int j = 0; j < N; j += b + 2)
            hidx[b * N + hcnt[b]++] = j;
    }
    float *x = mmv_dev(sizeof(float) * B * K), *xn = mmv_dev(sizeof(float) * B * K), *nw = pdl_norm_w();
    int32_t *idx = mmv_dev(sizeof hidx), *cnt = mmv_dev(sizeof hcnt);
    void *xq = mmv_dev(cuk_xq_row_bytes(K) * B);
    float *ya = mmv_dev(sizeof(float) * B * N), *yb = mmv_dev(sizeof(float) * B * N);
    REQUIRE(cudaMemcpy(x, hx, sizeof(float) * B * K, cudaMemcpyHostToDevice) == cudaSuccess &&
                cudaMemcpy(idx, hidx, sizeof hidx, cudaMemcpyHostToDevice) == cudaSuccess &&
                cudaMemcpy(cnt, hcnt, sizeof hcnt, cudaMemcpyHostToDevice) == cudaSuccess,
            "up");
    const size_t yn = sizeof(float) * B * N;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const uint32_t type = types[ti];
        /* a K = 512 row has 16 quantization blocks: two blocks of k_norm_quant_x a token */
        struct cuk_w g = pdl_weight(type, K, N, 0.1f), u = pdl_weight(type, K, N, 0.1f);
        for (int nb = 1; nb <= B; nb += B - 1) {
            const int64_t n0 = N / 2, n1 = N / 4;
            REQUIRE(cudaMemset(ya, 0xff, yn) == cudaSuccess && cudaMemset(yb, 0xff, yn) == cudaSuccess, "memset");
            CHECK_OK(cuk_rmsnorm(xn, x, nw, nb, K, K, 1e-5f, NULL));
            CHECK_OK(cuk_gemv_split3(&g, xn, nb, ya, n0, ya + nb * n0, n1, ya + nb * (n0 + n1), xq, NULL));
            const int rc = cuk_normq_split3(&g, x, nw, 1e-5f, nb, yb, n0, yb + nb * n0, n1, yb + nb * (n0 + n1), xq,
                                            NULL);
            CHECK(rc == 0, "normq %s: split3 not taken (%d)", quant_traits(type)->name, rc);
            CHECK(!mmv_diff(ya, yb, sizeof(float) * nb * N), "normq %s B=%d: norm + quant + split3 != rmsnorm then "
                  "the product", quant_traits(type)->name, nb);
            for (int gi = 0; gi < 2; gi++) { /* dense, gathered (compact) */
                const int32_t *li = gi ? idx : NULL, *lc = gi ? cnt : NULL;
                REQUIRE(cudaMemset(ya, 0xff, yn) == cudaSuccess && cudaMemset(yb, 0xff, yn) == cudaSuccess, "memset");
                CHECK_OK(cuk_rmsnorm(xn, x, nw, nb, K, K, 1e-5f, NULL));
                CHECK_OK(cuk_glu(&g, &u, xn, nb, ya, PI_ACT_REGLU, li, lc, N, gi == 1, xq, NULL));
                CHECK(cuk_normq_glu(&g, &u, x, nw, 1e-5f, nb, yb, PI_ACT_REGLU, li, lc, N, gi == 1, xq, NULL) == 0,
                      "normq %s: glu not taken", quant_traits(type)->name);
                CHECK(!mmv_diff(ya, yb, sizeof(float) * nb * N), "normq %s B=%d: norm + quant + glu (%s) != rmsnorm "
                      "then the product", quant_traits(type)->name, nb, gi ? "gathered" : "dense");
            }
        }
        /* the predictor's products, one launch for a token alone (k_gemv_q1 quantizes the row in its
         * own blocks) = the same token first in a batch of B (k_quant_x, then k_gemv) */
        for (int mode = CUK_RELU; mode <= CUK_MASK; mode++) {
            const size_t ob = mode == CUK_MASK ? (size_t)N : sizeof(float) * N;
            REQUIRE(cudaMemset(ya, 0xff, yn) == cudaSuccess && cudaMemset(yb, 0xff, yn) == cudaSuccess, "memset");
            CHECK_OK(cuk_gemv(&g, x, 1, ya, mode, 0.05f, xq, NULL));
            CHECK_OK(cuk_gemv(&g, x, B, yb, mode, 0.05f, xq, NULL));
            CHECK(!mmv_diff(ya, yb, ob), "%s %s: a token alone != the same token in a batch of %d",
                  quant_traits(type)->name, mode == CUK_MASK ? "mask" : "relu", B);
        }
        cudaFree(g.q), cudaFree(g.d), cudaFree(u.q), cudaFree(u.d);
        printf("normq %s: one launch = rmsnorm then the product, the predictor's products alone = batched, "
               "bitwise checked\n", quant_traits(type)->name);
    }
    cudaFree(x), cudaFree(xn), cudaFree(nw), cudaFree(idx), cudaFree(cnt), cudaFree(xq), cudaFree(ya), cudaFree(yb);
    free(hx);
}

/* The hybrid hand-off's early parts: fc1's kernel handing its input out first (cuk_gemv_hand_h: the
 * same product, h = x bitwise, then the key), and the hand-out's cold bits (one token's mask less the
 * hot ids) for whole and partial words, all hot and all cold. */
static void test_hand_early(void)
{
    enum { K = 512, N = 352, F = 11008 - 37 };
    float *hx = malloc(sizeof(float) * K);
    uint8_t *hm = malloc(F), *hot_on = malloc(F);
    int32_t *hid = malloc(sizeof(int32_t) * F);
    REQUIRE(hx && hm && hot_on && hid, "out of memory");
    for (int i = 0; i < K; i++)
        hx[i] = mmv_rand();
    float *hh;
    uint64_t *key, *bits;
    uint8_t *hmask;
    REQUIRE(cudaHostAlloc((void **)&hh, sizeof(float) * K, cudaHostAllocMapped) == cudaSuccess &&
                cudaHostAlloc((void **)&key, 64, cudaHostAllocMapped) == cudaSuccess &&
                cudaHostAlloc((void **)&bits, (F + 63) / 64 * 8, cudaHostAllocMapped) == cudaSuccess &&
                cudaHostAlloc((void **)&hmask, F, cudaHostAllocMapped) == cudaSuccess,
            "pinned host memory");
    void *hh_d, *key_d, *bits_d, *hmask_d;
    REQUIRE(cudaHostGetDevicePointer(&hh_d, hh, 0) == cudaSuccess &&
                cudaHostGetDevicePointer(&key_d, key, 0) == cudaSuccess &&
                cudaHostGetDevicePointer(&bits_d, bits, 0) == cudaSuccess &&
                cudaHostGetDevicePointer(&hmask_d, hmask, 0) == cudaSuccess,
            "device addresses");
    float *x = mmv_dev(sizeof(float) * K);
    void *xq = mmv_dev(cuk_xq_row_bytes(K));
    REQUIRE(cudaMemcpy(x, hx, sizeof(float) * K, cudaMemcpyHostToDevice) == cudaSuccess, "up");
    /* N rows: a block of its own hands x out; NB rows: every SM has rows, the last block hands x out
     * after them */
    enum { NB_ROWS = 2200 };
    float *yc = mmv_dev(sizeof(float) * NB_ROWS), *yd = mmv_dev(sizeof(float) * NB_ROWS);
    for (int shape = 0; shape < 2; shape++) {
        const int rows = shape ? NB_ROWS : N;
        struct cuk_w g = pdl_weight(PI_TYPE_Q4_0, K, rows, 0.1f);
        memset(hh, 0, sizeof(float) * K);
        key[0] = 0;
        CHECK_OK(cuk_gemv(&g, x, 1, yc, CUK_RELU, 0.0f, xq, NULL));
        const int rc = cuk_gemv_hand_h(&g, x, 1, yd, CUK_RELU, 0.0f, hh_d, sizeof(float) * K, key_d, 7 + shape, NULL);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess, "sync");
        if (rc == 1) { /* PINFER_CUDA_Q1=0: the two launches, h with the masks */
            CHECK(key[0] == 0, "fc1 hand_h not taken, yet the key was stored");
            printf("hand_h: not taken at this PINFER_CUDA_Q1 level\n");
        } else {
            CHECK(rc == 0, "fc1 hand_h (%d rows) failed (%d)", rows, rc);
            CHECK(key[0] == (uint64_t)(7 + shape), "fc1 hand_h (%d rows): key %llu, expected %d", rows,
                  (unsigned long long)key[0], 7 + shape);
            CHECK(memcmp(hh, hx, sizeof(float) * K) == 0, "fc1 hand_h (%d rows): h != x", rows);
            CHECK(!mmv_diff(yc, yd, sizeof(float) * rows), "fc1 hand_h (%d rows): the product differs from cuk_gemv's",
                  rows);
        }
        cudaFree(g.q), cudaFree(g.d);
    }
    cudaFree(yc), cudaFree(yd);
    /* the cold bits: three hot sets */
    uint8_t *mask = mmv_dev(F);
    uint64_t *tab = mmv_dev((F + 63) / 64 * 8), *htab = malloc((F + 63) / 64 * 8);
    for (int i = 0; i < F; i++)
        hm[i] = (uint8_t)(rand() % 5 == 0 ? 1 + rand() % 3 : 0); /* any non-zero byte is on */
    REQUIRE(cudaMemcpy(mask, hm, F, cudaMemcpyHostToDevice) == cudaSuccess, "up");
    for (int set = 0; set < 3; set++) { /* every third neuron hot, none, all */
        int64_t n_hot = 0;
        for (int i = 0; i < F; i++) {
            hot_on[i] = (uint8_t)(set == 0 ? i % 3 == 1 : set == 2);
            if (hot_on[i])
                hid[n_hot++] = i;
        }
        cuk_cold_table(hid, n_hot, F, htab);
        REQUIRE(cudaMemcpy(tab, htab, (F + 63) / 64 * 8, cudaMemcpyHostToDevice) == cudaSuccess, "up");
        memset(bits, 0xee, (F + 63) / 64 * 8);
        /* the table is only read for a partial hot set (none / all: no table) */
        const bool partial = n_hot > 0 && n_hot < F;
        const struct cuk_cold cold = { .cold_tab = partial ? tab : NULL, .n_hot = n_hot, .n_ff = F, .bits = bits_d };
        CHECK_OK(cuk_hand_out(x, 0, mask, F, hh_d, hmask_d, &cold, key_d, 8 + set, NULL));
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess, "sync");
        int bad = 0;
        for (int i = 0; i < F; i++)
            bad += (int)((bits[i / 64] >> (i % 64)) & 1) != (hm[i] != 0 && !hot_on[i]);
        CHECK(bad == 0 && key[0] == (uint64_t)(8 + set) && memcmp(hmask, hm, F) == 0,
              "hand_out bits (hot set %d): %d neurons wrong, key %llu", set, bad, (unsigned long long)key[0]);
    }
    printf("hand-off: fc1 hands h out first (same product, h = x; with a block of its own and without), the "
           "cold bits of one token checked\n");
    cudaFree(x), cudaFree(xq), cudaFree(mask), cudaFree(tab);
    cudaFreeHost(hh), cudaFreeHost(key), cudaFreeHost(bits), cudaFreeHost(hmask);
    free(hx), free(hm), free(hot_on), free(hid), free(htab);
}

int main(int argc, char **argv)
{
    char why[160];
    if (!cudev_available(why, sizeof why))
        SKIP("%s", why);
    const uint32_t types[] = { PI_TYPE_F32,  PI_TYPE_F16,    PI_TYPE_BF16, PI_TYPE_Q8_0, PI_TYPE_Q4_0,
                               PI_TYPE_Q4_1, PI_TYPE_Q5_0,   PI_TYPE_Q5_1, PI_TYPE_IQ4_NL, PI_TYPE_Q2_K,
                               PI_TYPE_Q3_K, PI_TYPE_Q4_K,   PI_TYPE_Q5_K, PI_TYPE_Q6_K, PI_TYPE_IQ4_XS };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        test_type(types[i]);
    test_long_prompt(PI_TYPE_F32);
    test_long_prompt(PI_TYPE_F16);
    test_topk();
    test_mmv();
    test_pdl();
    test_sparse_axpy();
    test_normq();
    test_hand_early();
    if (argc > 1)
        test_tiny(argv[1]);
    return tu_finish("cuda_ops");
}
#endif
