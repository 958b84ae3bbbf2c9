/* test_vram_plan — the CUDA backend's VRAM plan (engine/vram_plan.c) and the split solver over it,
 * without a GPU:
 *  - tensor bytes per type by hand (f32/f16 rows, Q8_0/Q4_0 quant + scale arrays, each aligned to
 *    256), unsupported types and widths give 0;
 *  - a small PowerInfer model's plan by kind, by hand: weights (embeddings, output, stacked q/k/v,
 *    wo, norms, the whole FFN), predictors, the f16 and f32 KV caches for n_ctx × n_seq, scratch
 *    growing by the cuBLAS workspace above 8 tokens a step;
 *  - compacted hot rows: k neurons of a layer cost their three row arrays and ids, aligned; a layer
 *    with no neuron costs nothing, a full one its whole FFN;
 *  - whole-layer placement: token_embd with layer 0, output with the last layer, KV per layer;
 *    vram_max_layers is the largest N that fits;
 *  - the solver for 64 budgets from the fixed bytes to fixed + every neuron's bytes: the exact plan never exceeds
 *    the budget, the neurons placed never decrease as the budget grows, and the budget left over
 *    is less than one more neuron wherever some neuron is still off the device; below the fixed
 *    bytes it falls back to whole layers;
 *  - a Q4_0 FFN: a neuron's bytes (gate, up, down_t rows of 36 bytes + its id).
 * On the GPU machine tests/test_hybrid.c checks that cudev allocates exactly these numbers. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model.h"
#include "pi_err.h"
#include "pwri_testmodel.h"
#include "quant.h"
#include "split.h"
#include "testutil.h"
#include "vram_plan.h"

#define L 3
#define F 96
#define E 64
#define N_CTX 40

static uint64_t al(uint64_t n) { return (n + 255) / 256 * 256; }

static struct pwri_cfg cfg(uint32_t ffn_type)
{
    return (struct pwri_cfg){ .arch = "llama", .pwri = true, .n_embd = E, .n_layer = L, .n_ff = F, .n_head = 4,
                              .n_head_kv = 2, .head_dim = 16, .ffn_type = ffn_type, .down_t = true,
                              .pred = PRED_RANDOM, .act_freq = true };
}

static struct pi_model *make(const char *path, const struct pwri_cfg *c, struct pwri_weights *w)
{
    pwri_make(c, w, 11);
    pwri_write(path, c, w);
    struct pi_model *m = NULL;
    int rc = model_load(&m, path);
    REQUIRE(rc == 0, "load %s: %s", path, pi_errmsg());
    return m;
}

static void test_tensor_bytes(void)
{
    CHECK(vram_tensor_bytes(PI_TYPE_F32, 64, 3) == al(64 * 4 * 3), "f32");
    CHECK(vram_tensor_bytes(PI_TYPE_F16, 64, 96) == 12288, "f16 64x96: %llu",
          (unsigned long long)vram_tensor_bytes(PI_TYPE_F16, 64, 96));
    CHECK(vram_tensor_bytes(PI_TYPE_BF16, 8, 1) == 256, "bf16 one short row rounds to 256");
    /* Q4_0 64 x 3: quants 2 blocks x 16 bytes x 3 rows = 96 -> 256, scales 2 x 2 x 3 = 12 -> 256 */
    CHECK(vram_tensor_bytes(PI_TYPE_Q4_0, 64, 3) == 512, "q4_0: %llu",
          (unsigned long long)vram_tensor_bytes(PI_TYPE_Q4_0, 64, 3));
    /* Q8_0 4096 x 11008: quants 4096 x 11008, scales 128 x 2 x 11008 */
    CHECK(vram_tensor_bytes(PI_TYPE_Q8_0, 4096, 11008) == al(4096ull * 11008) + al(128ull * 2 * 11008), "q8_0 7B");
    /* Q4_K 256 x 4: quants 8 lane blocks x 16 bytes x 4 rows = 512; side per row 8 x (scale, min) + one
     * super-block's (d, dmin) = 20 -> 32 bytes, x 4 = 128 -> 256 (cuk_traits.cuh) */
    CHECK(vram_tensor_bytes(PI_TYPE_Q4_K, 256, 4) == 512 + 256, "q4_k: %llu",
          (unsigned long long)vram_tensor_bytes(PI_TYPE_Q4_K, 256, 4));
    CHECK(vram_tensor_bytes(PI_TYPE_Q4_K, 128, 4) == 0, "a row of 128 is not whole Q4_K super-blocks");
    CHECK(vram_tensor_bytes(PI_TYPE_Q8_K, 256, 4) == 0, "q8_k is no weight type");
    CHECK(vram_tensor_bytes(PI_TYPE_Q4_0, 48, 4) == 0, "a row of 48 is not whole Q4_0 blocks");
    CHECK(vram_default_budget(VRAM_FREE_MARGIN / 2) == 0 &&
              vram_default_budget((uint64_t)10 << 30) == ((uint64_t)10 << 30) - VRAM_FREE_MARGIN,
          "default budget: free minus the margin");
}

static void test_plan(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/f16.gguf", dir);
    const struct pwri_cfg c = cfg(PI_TYPE_F16);
    struct pwri_weights w;
    struct pi_model *m = make(path, &c, &w);
    const uint64_t V = (uint64_t)w.n_vocab, R = (uint64_t)w.rank, f32 = 4, f16 = 2, KV = 32, Q = 64;
    const uint64_t ffn = 3 * al(E * F * f16);
    const uint64_t layer = al(E * (Q + 2 * KV) * f32) /* q, k, v stacked */ + al(Q * E * f32) /* wo */ +
                           2 * al(E * f32) /* norms */;
    const uint64_t embd = al(E * V * f32), out = al(V * E * f32) + al(E * f32);
    const uint64_t pred = L * (al(E * R * f32) + al(R * F * f32));
    const int32_t S = 3;
    const uint64_t kv16 = (uint64_t)L * 2 * al((uint64_t)S * N_CTX * KV * f16);
    struct vram_params vp = { .n_ctx = N_CTX, .n_seq = S, .n_batch = 8, .reserve = 1000 };
    struct vram_plan p;
    CHECK_OK(vram_plan_make(m, &vp, NULL, &p));
    CHECK(p.weights == embd + out + L * (layer + ffn), "weights %llu, by hand %llu", (unsigned long long)p.weights,
          (unsigned long long)(embd + out + L * (layer + ffn)));
    CHECK(p.pred == pred && p.kv == kv16 && p.hot == 0 && p.reserve == 1000, "pred %llu/%llu kv %llu/%llu hot %llu",
          (unsigned long long)p.pred, (unsigned long long)pred, (unsigned long long)p.kv, (unsigned long long)kv16,
          (unsigned long long)p.hot);
    CHECK(p.fixed == p.weights + p.pred + p.kv + p.scratch + p.reserve && p.total == p.fixed + p.hot &&
              p.neurons == L * F && p.n_gpu_layers == L && !p.whole_layers,
          "sums");
    CHECK(p.scratch == vram_scratch_bytes(m, &vp) && p.scratch > 0, "scratch");
    vp.kv_f32 = true;
    CHECK(vram_kv_bytes(m, &vp, L) == 2 * kv16, "f32 cache is twice the f16 one");
    vp.kv_f32 = false;
    /* above 8 tokens a step the batch-invariant kernels need only the larger per-token buffers; the
     * benchmarks' cuBLAS prefill adds its workspace and the f16 activations (no Q weight to dequantize) */
    struct vram_params vb = vp;
    vb.n_batch = 9;
    const uint64_t s8 = vram_scratch_bytes(m, &vp), s9 = vram_scratch_bytes(m, &vb);
    CHECK(s9 > s8 && s9 < s8 + 64 * 1024, "scratch 8 -> 9 tokens: %llu -> %llu", (unsigned long long)s8,
          (unsigned long long)s9);
    vb.blas_prefill = true;
    const uint64_t s9b = vram_scratch_bytes(m, &vb);
    CHECK(s9b > s9 + VRAM_BLAS_WS && s9b < s9 + VRAM_BLAS_WS + 64 * 1024, "cuBLAS scratch at 9 tokens: %llu -> %llu",
          (unsigned long long)s9, (unsigned long long)s9b);

    /* compacted rows: 5 neurons of layer 0, none of layer 1, all of layer 2 */
    uint8_t on[L * F];
    memset(on, 0, sizeof on);
    for (int i = 0; i < 5; i++)
        on[i * 7] = 1;
    memset(on + 2 * F, 1, F);
    struct vram_plan h;
    CHECK_OK(vram_plan_make(m, &vp, on, &h));
    /* three row arrays, the ids, the cold table: a bit per neuron in 64-bit words */
    const uint64_t tab = al((F + 63) / 64 * 8);
    CHECK(vram_cold_table_bytes(m) == (F + 63) / 64 * 8, "cold table %llu bytes",
          (unsigned long long)vram_cold_table_bytes(m));
    const uint64_t hot5 = 3 * al(5 * E * f16) + al(5 * 4) + tab;
    CHECK(h.hot == hot5 && vram_hot_bytes(m, 0, 5) == hot5, "hot bytes of 5 neurons %llu, by hand %llu",
          (unsigned long long)h.hot, (unsigned long long)hot5);
    CHECK(h.weights == embd + out + L * layer + ffn && h.neurons == 5 + F && h.total == h.fixed + hot5,
          "a full layer holds its whole FFN, an empty one nothing");
    CHECK(vram_hot_bytes(m, 1, 0) == 0 && vram_hot_bytes(m, 1, F) == ffn, "0 and n_ff neurons");
    CHECK(vram_neuron_bytes(m, 0) == 3 * E * f16 + 4 && vram_hot_slack(m, 0) == 4 * 255 + tab,
          "neuron bytes, slack (the padding and the cold table)");
    for (int64_t k = 1; k < F; k++)
        CHECK(vram_hot_bytes(m, 0, k) <= (uint64_t)k * vram_neuron_bytes(m, 0) + vram_hot_slack(m, 0) &&
                  vram_hot_bytes(m, 0, k) >= (uint64_t)k * vram_neuron_bytes(m, 0),
              "k=%lld: hot bytes within the slack", (long long)k);

    /* whole layers */
    struct vram_params wl = vp;
    wl.whole_layers = true;
    struct vram_plan g[L + 1];
    for (int n = 0; n <= L; n++) {
        wl.n_gpu_layers = n;
        CHECK_OK(vram_plan_make(m, &wl, on, &g[n])); /* the placement is ignored */
        const uint64_t want = (n > 0 ? embd : 0) + (n == L ? out : 0) + (uint64_t)n * (layer + ffn);
        CHECK(g[n].weights == want && g[n].kv == kv16 / L * (uint64_t)n && g[n].pred == pred / L * (uint64_t)n &&
                  g[n].neurons == (int64_t)n * F && g[n].whole_layers && g[n].n_gpu_layers == n,
              "-ngl %d: weights %llu, by hand %llu", n, (unsigned long long)g[n].weights, (unsigned long long)want);
    }
    CHECK(g[L].total == p.total, "-ngl all = every neuron placed");
    CHECK(vram_max_layers(m, &vp, g[2].total) == 2 && vram_max_layers(m, &vp, g[2].total - 1) == 1 &&
              vram_max_layers(m, &vp, g[1].total - 1) == 0 && vram_max_layers(m, &vp, UINT64_MAX) == L,
          "vram_max_layers");

    /* the solver over the plan */
    const uint64_t fixed = split_fixed_bytes(m, &vp);
    int64_t last = -1;
    uint8_t idx[L * F];
    for (int k = 0; k <= 64; k++) {
        const uint64_t b = fixed + (uint64_t)L * F * vram_neuron_bytes(m, 0) * (uint64_t)k / 64;
        struct split_report r;
        CHECK_OK(split_solve(m, &vp, b, idx, &r));
        struct vram_plan chk;
        CHECK_OK(vram_plan_make(m, &vp, idx, &chk));
        CHECK(chk.total <= b && chk.total == r.plan.total && r.fixed_fits, "budget %llu: plan %llu",
              (unsigned long long)b, (unsigned long long)chk.total);
        CHECK(r.neurons >= last, "budget %llu: %lld neurons after %lld", (unsigned long long)b, (long long)r.neurons,
              (long long)last);
        last = r.neurons;
        if (r.neurons < L * F)
            CHECK(b - fixed - r.neuron_bytes < vram_neuron_bytes(m, 0), "budget %llu: a neuron would still fit",
                  (unsigned long long)b);
        CHECK(r.covered >= 0 && r.covered <= 1, "coverage %g", r.covered);
        split_report_fini(&r);
    }
    CHECK(last == L * F, "fixed + every neuron's bytes place every neuron: %lld", (long long)last);
    struct split_report r;
    CHECK_OK(split_solve(m, &vp, g[2].total, idx, &r));
    CHECK(!r.fixed_fits && r.n_gpu_layers == 2 && r.neurons == 2 * F && r.plan.total <= g[2].total &&
              idx[0] && idx[2 * F - 1] && !idx[2 * F],
          "below the fixed bytes: whole-layer fallback to 2 layers (got %d)", r.n_gpu_layers);
    split_report_fini(&r);
    model_free(m);
    pwri_free((struct pwri_cfg *)&c, &w);
    unlink(path);

    /* Q4_0 FFN rows: 2 blocks of 16 quant bytes + 2 scales of 2 bytes = 36 bytes per row */
    snprintf(path, sizeof path, "%s/q4.gguf", dir);
    const struct pwri_cfg c4 = cfg(PI_TYPE_Q4_0);
    m = make(path, &c4, &w);
    const uint64_t tab4 = al((uint64_t)(m->hp.n_ff + 63) / 64 * 8);
    CHECK(vram_neuron_bytes(m, 0) == 3 * 36 + 4 && vram_hot_slack(m, 0) == 7 * 255 + tab4, "q4_0 neuron %llu",
          (unsigned long long)vram_neuron_bytes(m, 0));
    CHECK(vram_hot_bytes(m, 0, 10) == 3 * (al(10 * 32) + al(10 * 4)) + al(40) + tab4, "q4_0 10 hot rows");
    model_free(m);
    pwri_free((struct pwri_cfg *)&c4, &w);
    unlink(path);
}

int main(void)
{
    char dir[] = "/tmp/pinfer-vramplanXXXXXX";
    REQUIRE(mkdtemp(dir), "mkdtemp");
    test_tensor_bytes();
    test_plan(dir);
    rmdir(dir);
    return tu_finish("vram_plan");
}
