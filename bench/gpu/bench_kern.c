/* bench_kern — the decode step's one-token products (and sampling's top-k) alone: time per launch and
 * GB/s against the HBM read floor of the same run, for the shapes of the 7B files and for row counts
 * around them (whether a product's time follows its bytes or the number of tile rounds on the SMs).
 *
 *   bench_kern [--reps N] [--only NAME]
 *
 * Each case launches its kernel N times back to back on one stream (PDL-chained as in a decode
 * step), each launch on another copy of the weights from a pool larger than L2, and reports the
 * median of 5 timed batches of N. One JSON line per case. */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuk.h"
#include "cuk_hand.h"
#include "cuk_mma.h"
#include "cuk_mmv.h"
#include "cuk_topk.h"
#include "model.h"
#include "quant.h"

#define POOL_BYTES (1536ull << 20)

static uint8_t *pool;
static cudaStream_t st;
static float *x, *y, *act, *nw, *xn;
static int32_t *idx, *cnt;

static int cmp_f(const void *a, const void *b)
{
    const float p = *(const float *)a, q = *(const float *)b;
    return p < q ? -1 : p > q;
}

/* weight copy number i of n_bytes (whole copies fit in the pool, rotated) */
static void *copy_at(size_t n_bytes, int i)
{
    const size_t copies = POOL_BYTES / n_bytes;
    return pool + (size_t)(i % (int)copies) * n_bytes;
}

enum kind {
    K_GLU_NORM, K_GLU_IDX, K_SPLIT3_NORM, K_GEMV_ADD, K_GEMV_MASK, K_MMV_ADD, K_GEMV_RELU, K_HAND_ADD, K_HAND_OUT,
    K_HAND_BITS, K_FC1_HAND, K_TOPK
};

struct kcase {
    const char *name;
    enum kind kind;
    int64_t n_in, n_out, active; /* active: rows listed for K_GLU_IDX; K_TOPK: k of n_out, active rows */
    uint32_t type;               /* 0: F16; else a Q type (its activation quantized in the product's launches) */
};

static void *xq; /* the Q types' quantized activation rows */
/* K_TOPK: TOPK_ROWS rows of TOPK_N logits like a model's (a bell of values, a few far above), topk's ids,
 * values and scratch */
#define TOPK_ROWS 8
#define TOPK_N 32000
static float *lg, *tv;
static int32_t *ti;
static void *tpart;
/* the hand-off's host side (pinned, mapped): h and masks out, the cold share and its key in */
static uint8_t *host_h, *host_mask;
static uint64_t *host_bits;
static float *host_y;
static uint64_t *host_key, *host_rel;

/* bytes of one weight: F16 rows, or a Q type's quants and scales (w.d after w.q) */
static size_t w_bytes(uint32_t type, int64_t n_in, int64_t n_out)
{
    return type == PI_TYPE_F16 ? (size_t)n_in * (size_t)n_out * 2
                               : cuk_w_qbytes(type, n_in, n_out) + cuk_w_dbytes(type, n_in, n_out);
}

static struct cuk_w w_at(uint32_t type, int64_t n_in, int64_t n_out, uint8_t *at)
{
    struct cuk_w w = { type, n_in, n_out, at, NULL };
    if (type != PI_TYPE_F16)
        w.d = at + cuk_w_qbytes(type, n_in, n_out);
    return w;
}

static int launch(const struct kcase *c, int i)
{
    const uint32_t type = c->type ? c->type : PI_TYPE_F16;
    const size_t wb = w_bytes(type, c->n_in, c->n_out);
    struct cuk_w w;
    switch (c->kind) {
    case K_GLU_NORM:
    case K_GLU_IDX: {
        uint8_t *at = copy_at(2 * wb, i);
        w = w_at(type, c->n_in, c->n_out, at);
        struct cuk_w u = w_at(type, c->n_in, c->n_out, at + wb);
        const bool gathered = c->kind == K_GLU_IDX;
        return cuk_norm_glu(&w, &u, x, nw, 1e-6f, 1, xn, act, PI_ACT_REGLU, gathered ? idx : NULL,
                            gathered ? cnt : NULL, c->n_out, gathered, xq, st);
    }
    case K_SPLIT3_NORM:
        w = w_at(type, c->n_in, c->n_out, copy_at(wb, i));
        return cuk_norm_gemv_split3(&w, x, nw, 1e-6f, 1, xn, y, c->n_out / 3, y + c->n_out / 3, c->n_out / 3,
                                    y + 2 * (c->n_out / 3), xq, st);
    case K_GEMV_ADD:
        w = w_at(type, c->n_in, c->n_out, copy_at(wb, i));
        return cuk_gemv(&w, x, 1, y, CUK_ADD, 0.0f, xq, st);
    case K_GEMV_RELU:
        w = w_at(type, c->n_in, c->n_out, copy_at(wb, i));
        return cuk_gemv(&w, x, 1, y, CUK_RELU, 0.0f, xq, st);
    case K_HAND_ADD: /* the key is there already: the poll's first round sees it */
        return cuk_hand_add(y, act, host_y, host_key, host_y, host_rel, 1, c->n_out, st);
    case K_HAND_OUT:
        return cuk_hand_out(y, c->n_out * 4, (const uint8_t *)act, c->n_in, host_h, host_mask, NULL, host_key + 1,
                            1 + i, st);
    case K_HAND_BITS: { /* h went out before (fc1's kernel): the masks and the cold bits, c->active hot */
        const struct cuk_cold cold = { .cold_tab = (const uint64_t *)idx, .n_hot = c->active, .n_ff = c->n_in,
                                       .bits = host_bits };
        return cuk_hand_out(y, 0, (const uint8_t *)act, c->n_in, host_h, host_mask, &cold, host_key + 1, 1 + i, st);
    }
    case K_FC1_HAND: /* fc1 handing its input out first (hybrid's early h) */
        w = w_at(type, c->n_in, c->n_out, copy_at(wb, i));
        return cuk_gemv_hand_h(&w, x, 1, y, CUK_RELU, 0.0f, host_h, c->n_in * 4, host_key + 3, 1 + i, st);
    case K_MMV_ADD: /* the streamed kernel (cuk_mmv.h) called directly (cuk_gemv takes it too at PINFER_CUDA_MMV=2) */
        w = w_at(type, c->n_in, c->n_out, copy_at(wb, i));
        return cuk_mmv_gemv(&w, x, 1, y, CUK_ADD, 0.0f, NULL, NULL, 0, 0, st);
    case K_GEMV_MASK:
        w = w_at(type, c->n_in, c->n_out, copy_at(wb, i));
        return cuk_gemv(&w, x, 1, act, CUK_MASK, 0.0f, xq, st);
    case K_TOPK:
        return cuk_topk(lg, (int)c->active, c->n_out, (int)c->n_in, ti, tv, tpart, st);
    }
    return -1;
}

static int run_case(const struct kcase *c, int reps, double hbm_gbs)
{
    if (c->kind == K_HAND_BITS) { /* the cold table (in idx's memory) of hot ids every 4th neuron */
        int32_t *h = malloc((size_t)c->active * sizeof *h);
        uint64_t *tab = malloc((size_t)(c->n_in + 63) / 64 * 8);
        for (int64_t j = 0; j < c->active; j++)
            h[j] = (int32_t)(4 * j);
        cuk_cold_table(h, c->active, c->n_in, tab);
        cudaMemcpy(idx, tab, (size_t)(c->n_in + 63) / 64 * 8, cudaMemcpyHostToDevice);
        free(h), free(tab);
    }
    if (c->kind == K_GLU_IDX) { /* the listed rows: every 10th, as a ~10 % active mask */
        int32_t *h = malloc((size_t)c->n_out * sizeof *h);
        int32_t n = 0;
        for (int64_t r = 0; r < c->n_out && n < c->active; r += c->n_out / c->active)
            h[n++] = (int32_t)r;
        cudaMemcpy(idx, h, (size_t)n * sizeof *h, cudaMemcpyHostToDevice);
        cudaMemcpy(cnt, &n, sizeof n, cudaMemcpyHostToDevice);
        free(h);
    }
    int rc = launch(c, 0);
    if (rc || cudaStreamSynchronize(st) != cudaSuccess) {
        fprintf(stderr, "bench_kern: %s: launch failed (%d)\n", c->name, rc);
        return 1;
    }
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float ms[5];
    for (int b = 0; b < 5; b++) {
        cudaEventRecord(e0, st);
        for (int i = 0; i < reps; i++)
            launch(c, b * reps + i + 1);
        cudaEventRecord(e1, st);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&ms[b], e0, e1);
    }
    qsort(ms, 5, sizeof ms[0], cmp_f);
    const double us = 1e3 * ms[2] / reps;
    const int64_t rows = c->kind == K_GLU_IDX ? c->active : c->n_out;
    const double bytes = c->kind == K_TOPK ? (double)c->active * (double)c->n_out * 4 /* the logits read */
                                           : (double)w_bytes(c->type ? c->type : PI_TYPE_F16, c->n_in, rows) *
                                                 (c->kind == K_GLU_NORM || c->kind == K_GLU_IDX ? 2 : 1);
    printf("{\"case\":\"%s\",\"n_in\":%lld,\"rows\":%lld,\"tiles\":%lld,\"us\":%.2f,\"MB\":%.1f,\"GBs\":%.0f,"
           "\"of_floor\":%.3f,\"floor_us\":%.2f}\n",
           c->name, (long long)c->n_in, (long long)rows, (long long)((rows + 15) / 16), us, bytes / 1e6,
           bytes / us / 1e3, bytes / us / 1e3 / hbm_gbs, bytes / hbm_gbs / 1e3);
    fflush(stdout);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return 0;
}

static double hbm_floor(void)
{
    unsigned long long *sink;
    cudaMalloc((void **)&sink, sizeof *sink);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float best = 1e30f;
    for (int r = 0; r < 5; r++) {
        cudaEventRecord(e0, st);
        cuk_read_bench(pool, POOL_BYTES, sink, st);
        cudaEventRecord(e1, st);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        best = ms < best ? ms : best;
    }
    cudaFree(sink);
    return (double)POOL_BYTES / best / 1e6;
}

int main(int argc, char **argv)
{
    int reps = 40;
    const char *only = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--only"))
            only = argv[i + 1];
        else {
            fprintf(stderr, "bench_kern: unknown option '%s' (--reps N, --only NAME)\n", argv[i]);
            return 2;
        }
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        fprintf(stderr, "bench_kern: no CUDA device\n");
        return 77;
    }
    if (cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess ||
        cudaMalloc((void **)&pool, POOL_BYTES) != cudaSuccess || cudaMalloc((void **)&x, 65536 * 4) != cudaSuccess ||
        cudaMalloc((void **)&y, 65536 * 4) != cudaSuccess || cudaMalloc((void **)&act, 65536 * 4) != cudaSuccess ||
        cudaMalloc((void **)&nw, 65536 * 4) != cudaSuccess || cudaMalloc((void **)&xn, 65536 * 4) != cudaSuccess ||
        cudaMalloc((void **)&idx, 65536 * 4) != cudaSuccess || cudaMalloc(&xq, 65536 * 4) != cudaSuccess ||
        cudaMalloc((void **)&cnt, 4) != cudaSuccess) {
        fprintf(stderr, "bench_kern: device allocation failed\n");
        return 1;
    }
    if (cudaHostAlloc((void **)&host_h, 65536 * 4, cudaHostAllocMapped) != cudaSuccess ||
        cudaHostAlloc((void **)&host_mask, 65536, cudaHostAllocMapped) != cudaSuccess ||
        cudaHostAlloc((void **)&host_y, 65536 * 4, cudaHostAllocMapped) != cudaSuccess ||
        cudaHostAlloc((void **)&host_bits, 8192, cudaHostAllocMapped) != cudaSuccess ||
        cudaHostAlloc((void **)&host_key, 64, cudaHostAllocMapped) != cudaSuccess) {
        fprintf(stderr, "bench_kern: pinned host allocation failed\n");
        return 1;
    }
    if (cudaMalloc((void **)&lg, (size_t)TOPK_ROWS * TOPK_N * 4) != cudaSuccess ||
        cudaMalloc((void **)&ti, TOPK_ROWS * CUK_TOPK_MAX * 4) != cudaSuccess ||
        cudaMalloc((void **)&tv, TOPK_ROWS * CUK_TOPK_MAX * 4) != cudaSuccess ||
        cudaMalloc(&tpart, cuk_topk_scratch_bytes(TOPK_ROWS, TOPK_N) + 1) != cudaSuccess) {
        fprintf(stderr, "bench_kern: device allocation failed\n");
        return 1;
    }
    {
        float *hl = malloc((size_t)TOPK_ROWS * TOPK_N * 4);
        uint64_t r = 0x9e3779b97f4a7c15ull;
        for (int i = 0; i < TOPK_ROWS * TOPK_N; i++) {
            float v = 0.0f; /* four uniforms: a bell around 0, and one logit in 500 lifted by 8 */
            for (int j = 0; j < 4; j++) {
                r = r * 6364136223846793005ull + 1442695040888963407ull;
                v += (float)(r >> 40) / (float)(1u << 24) * 4.0f - 2.0f;
            }
            hl[i] = v + (i % 500 == 7 ? 8.0f : 0.0f);
        }
        cudaMemcpy(lg, hl, (size_t)TOPK_ROWS * TOPK_N * 4, cudaMemcpyHostToDevice);
        free(hl);
    }
    memset(host_y, 0, 65536 * 4);
    host_key[0] = 1, host_key[1] = 0, host_key[2] = 0, host_key[3] = 0;
    host_rel = host_key + 2;
    /* small f16 values everywhere (0x2c00-ish bit patterns: ~0.06), x and the norm weight 1.0 */
    cudaMemset(pool, 0x2c, POOL_BYTES);
    float *h = malloc(65536 * 4);
    for (int i = 0; i < 65536; i++)
        h[i] = 1.0f;
    cudaMemcpy(x, h, 65536 * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(nw, h, 65536 * 4, cudaMemcpyHostToDevice);
    free(h);
    const double hbm = hbm_floor();
    printf("{\"case\":\"hbm_read\",\"GBs\":%.0f}\n", hbm);
    static const struct kcase cases[] = {
        { "gateup_10560", K_GLU_NORM, 4096, 10560, 0, 0 }, /* 660 tiles: 5 rounds of 132 */
        { "gateup_11008", K_GLU_NORM, 4096, 11008, 0, 0 }, /* the 7B's 688: 5.21 */
        { "gateup_11616", K_GLU_NORM, 4096, 11616, 0, 0 }, /* 726: 5.5 */
        { "gateup_12672", K_GLU_NORM, 4096, 12672, 0, 0 }, /* 792: 6 */
        { "qkv_12288", K_SPLIT3_NORM, 4096, 12288, 0, 0 }, /* 768: 5.82 */
        { "qkv_12672", K_SPLIT3_NORM, 4096, 12672, 0, 0 }, /* 792: 6 */
        { "wo_4096", K_GEMV_ADD, 4096, 4096, 0, 0 },       /* 256: 1.94 (cuk_mma's kernel) */
        { "wo_4096_mmv", K_MMV_ADD, 4096, 4096, 0, 0 },
        { "down_11008", K_GEMV_ADD, 11008, 4096, 0, 0 },
        { "down_11008_mmv", K_MMV_ADD, 11008, 4096, 0, 0 },
        { "fc2_11008", K_GEMV_MASK, 1024, 11008, 0, 0 },
        { "gathered_1100", K_GLU_IDX, 4096, 11008, 1100, 0 },
        { "gathered_2200", K_GLU_IDX, 4096, 11008, 2200, 0 },
        /* the Q4_0 decode chain (d4, s4, hybrid s4): each product with its activation's quantization */
        { "q4_qkv_12288", K_SPLIT3_NORM, 4096, 12288, 0, PI_TYPE_Q4_0 },
        { "q4_wo_4096", K_GEMV_ADD, 4096, 4096, 0, PI_TYPE_Q4_0 },
        { "q4_gateup_11008", K_GLU_NORM, 4096, 11008, 0, PI_TYPE_Q4_0 },
        { "q4_down_11008", K_GEMV_ADD, 11008, 4096, 0, PI_TYPE_Q4_0 },
        { "q4_fc1_1024", K_GEMV_RELU, 4096, 1024, 0, PI_TYPE_Q4_0 },
        { "q4_fc2_11008", K_GEMV_MASK, 1024, 11008, 0, PI_TYPE_Q4_0 },
        { "q4_tiny_256", K_GEMV_ADD, 256, 256, 0, PI_TYPE_Q4_0 }, /* the fixed cost of a quantize + product */
        { "f16_tiny_256", K_GEMV_ADD, 256, 256, 0, 0 },
        /* the hybrid hand-off's two kernels in the chain (n_out: the row, n_in: the mask's bytes) */
        { "hand_add_4096", K_HAND_ADD, 0, 4096, 0, 0 },
        { "hand_out_4096", K_HAND_OUT, 11008, 4096, 0, 0 },
        { "hand_out_bits_11008", K_HAND_BITS, 11008, 4096, 2752, 0 }, /* the masks and bits only, 1/4 hot */
        { "q4_fc1_hand_h", K_FC1_HAND, 4096, 1024, 0, PI_TYPE_Q4_0 },
        /* sampling's candidates on the device (n_in: k; active: rows): greedy, llama.cpp's top 40, the most */
        { "topk1_32000", K_TOPK, 1, TOPK_N, 1, 0 },
        { "topk40_32000", K_TOPK, 40, TOPK_N, 1, 0 },
        { "topk64_32000", K_TOPK, CUK_TOPK_MAX, TOPK_N, 1, 0 },
        { "topk40_32000_b8", K_TOPK, 40, TOPK_N, TOPK_ROWS, 0 },
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (!only || strstr(cases[i].name, only))
            bad |= run_case(&cases[i], reps, hbm);
    return bad;
}
