/* cuk_mmv.cu — F16 / BF16 decode products on mma.sync, streamed (design and bits: cuk_mmv.h).
 *
 * A block of CUK_MMA_KS warps per SM (or two: mv_launch); warp w owns K range w (cuk_mma.h) of every
 * tile the block computes (tiles blockIdx.x, + gridDim.x, ...). Its work is the flat list of (tile, chunk) items;
 * item p is copied by cp.async into stage p % S of a per-thread ring in shared memory S − 1 items
 * before it is used: thread (g, t) copies exactly the 16-byte words that cuk_mma.cu's decode kernel
 * loads into its registers (rows g and g + 8 of the tile, elements [8t, 8t + 8) and [32 + 8t, 40 + 8t)
 * of the chunk, and token g's f32 activation there; split or, in the f16 mode, rounded once as there),
 * so no thread reads another's words and no
 * barrier is needed inside the stream (where a product runs one block an SM, a warp's items come
 * instead as tensor-map boxes into a stage of its own: "the ring filled by the tensor-copy engine"
 * below). At a tile's end each warp leaves its range's four
 * accumulators in shared memory; after one barrier a warp (rotating) adds the ranges in range order
 * and writes the outputs, while the rings already hold the next tile's first chunks. */
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <mutex>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "cuk.h"
#include "cuk_mma.h"
#include "cuk_mmv.h"
#include "model.h"
#include "quant.h"
}

#define KS CUK_MMA_KS
#define CH 64 /* elements of K per chunk, as cuk_mma.cu */
#define NTH (KS * 32)

/* the arithmetic of cuk_mma.cu's decode kernel, operation for operation: the same helpers */
#include "cuk_compact_dev.cuh" /* mask_scan: a raw mask listed by the gathered product's blocks */
#include "cuk_mma_dev.cuh"
#include "cuk_pdl.cuh"

extern "C" int cuk_mmv_level(void)
{
    static int lv = -1; /* read once: a decode graph must not change kernels between captures */
    if (lv < 0) {
        const char *e = getenv("PINFER_CUDA_MMV");
        lv = e && (*e == '0' || *e == '1') && !e[1] ? *e - '0' : 2;
    }
    return lv;
}

extern "C" bool cuk_mmv_on(void) { return cuk_mmv_level() > 0; }

/* ---- outputs: cuk_mma.cu's struct mout and epilogues (cuk_mma_dev.cuh), plus NORM's fields ---- */

struct mvo : mout {
    const float *nw; /* NORM: the RMSNorm weight, and its eps */
    float eps;
    /* IDX from a raw mask (cuk_norm_glu_mask): token b's row of n_out mask bytes at mask + b · n_out;
     * each block lists it itself, keeps its share of the rows and writes that share of the list to
     * list[b · idx_stride + j], and block 0 the count to list_n[b] (idx and cnt unused) */
    const uint8_t *mask;
    int32_t *list, *list_n;
    bool y_early; /* CUK_ADD: y's rows read at the tile's start (mv_launch_s) */
};
/* a block's share of a raw mask's list, in shared memory: at most this many rows a block */
#define MV_LIST_CAP 256

/* ---- the streamed kernel ---- */

/* stages of the ring: S × NM · 4 words a thread (one block an SM: S 8 / 5, 128 / 160 KiB); the
 * block's one token row (normalized for NORM) sits in shared memory after the ring */
constexpr int deep_s(int nm) { return nm == 2 ? 5 : 8; }
template <int NM, int S = deep_s(NM)> struct Ring {
    enum { SLOTS = NM * 4 };
    static constexpr size_t bytes = (size_t)S * SLOTS * NTH * 16;
};
/* the ring's bytes: the cp.async ring's, or (TM > 0) the 8 warps' S stages of NM boxes of TM chunks ×
 * 16 rows */
template <int NM, int S, int TM> __host__ __device__ constexpr size_t ring_bytes(void)
{
    return TM ? (size_t)KS * S * NM * 16 * TM * CH * 2 : Ring<NM, S>::bytes;
}
#define MMV_SMEM_MAX (208 * 1024) /* dynamic bytes: the opt-in 227 KiB less the static red[], sh[] and the mbarriers */

/* ---- the ring filled by the tensor-copy engine (TM > 0: PINFER_CUDA_MMV_TMA) ----
 * Why: the products stream at 0.71-0.79 of the HBM read floor with the cp.async ring at any depth,
 * while the same bytes loaded straight into registers reach 0.83-0.90 (bench/gpu/NOTES.md, "The
 * one-token F16 products alone"). Here one lane of each warp copies the warp's K range of the tile's
 * 16 rows, TM chunks of it an item, as one 2D box of a tensor map (rows beyond the matrix and
 * columns beyond K come as zeros) into the warp's stage, and an mbarrier a stage counts the bytes
 * in; the lanes then read their words as before. (One 1D bulk copy a row was measured first: 128 or
 * 256 bytes a copy streamed at 0.45-0.68 of the floor, bound by the copies' count.) A row's TM × 128
 * bytes sit contiguous, so rows g and g + 1 (one quarter-warp) would read the same banks: odd rows
 * read their two words in the other order. The values in each thread's registers are the cp.async
 * ring's: the same bits. */
__device__ static inline uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ static inline void mbar_init(uint64_t *b, uint32_t n)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(b)), "r"(n) : "memory");
}
__device__ static inline void mbar_expect(uint64_t *b, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(b)), "r"(bytes) : "memory");
}
__device__ static inline void mbar_wait(uint64_t *b, uint32_t parity)
{
    uint32_t ok;
    do
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(ok)
                     : "r"(smem_u32(b)), "r"(parity)
                     : "memory");
    while (!ok);
}
/* the box of map m at column x, row y into dst; its bytes counted on b */
__device__ static inline void box_copy(void *dst, const CUtensorMap *m, int x, int y, uint64_t *b)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
                     smem_u32(dst)),
                 "l"((uint64_t)m), "r"(x), "r"(y), "r"(smem_u32(b))
                 : "memory");
}
typedef CUresult (*tmap_encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                   const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
/* the driver's cuTensorMapEncodeTiled (no link to libcuda), or NULL where the driver has none */
static tmap_encode_fn tmap_fn(void)
{
    static tmap_encode_fn fn = [] {
        cudaDriverEntryPointQueryResult q;
        void *f = nullptr;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess)
            f = nullptr;
        return (tmap_encode_fn)f;
    }();
    return fn;
}

/* the tensor map of an n_rows × K F16 / BF16 matrix at w, boxes of tm chunks × 16 rows */
static int tmap_encode(CUtensorMap *m, const uint8_t *w, int64_t K, int64_t n_rows, bool bf, int tm)
{
    const cuuint64_t dim[2] = { (cuuint64_t)K, (cuuint64_t)n_rows }, stride[1] = { (cuuint64_t)K * 2 };
    const cuuint32_t box[2] = { (cuuint32_t)(tm * CH), 16 }, es[2] = { 1, 1 };
    const CUresult r = tmap_fn()(m, bf ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, (void *)w,
                                 dim, stride, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? 0 : -(int)cudaErrorInvalidValue;
}

/* PINFER_CUDA_MMV_TMA: 0 the cp.async ring everywhere; 1 the tensor boxes for every dense product; 2
 * (default) the boxes where the product runs one block an SM — gate + up (boxes of a chunk a matrix,
 * S 5), q/k/v (two chunks, S 4; a stage more where mmv_deeper says), down (one chunk, S 10: mmv_deep)
 * — and the cp.async ring where it runs two (wo, fc2: short
 * streams, where two blocks hide the chunk wait; the boxes at one block lost 7 % / 22 % there). Read
 * once (a captured graph must not change kernels). */
static int mmv_tma(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("PINFER_CUDA_MMV_TMA");
        v = e && e[0] >= '0' && e[0] <= '2' && !e[1] ? e[0] - '0' : 2;
        if (!tmap_fn()) /* a driver without tensor maps: the cp.async ring */
            v = 0;
    }
    return v;
}

/* Blocks of the streamed kernel an SM: one with the deep ring, or two, each with a shallower ring
 * (where both fit): twice the warps to hide each chunk's wait, and an SM whose block is done can
 * start the next product's block while the other still runs. The tiles are the same, each computed
 * in the same order: the bits do not depend on it. Measured (bench_kern, H200, 2026-12-02): two win
 * where a warp streams few chunks — wo 10.98 → 10.52 µs, the predictor's fc2 8.11 → 6.72 — and lose
 * where it streams many (q/k/v 28.4 → 29.5, gate/up 54.1 → 54.4 at a 2-stage ring: gate + up keep one
 * block; down, 44 chunks, the same); a gathered product's tile count is on the device (one block).
 * PINFER_CUDA_MMV_BPS=1 / 2 forces one / two (one-matrix products, where both fit); default (auto):
 * two where a warp's chunks over the block's share of the tiles number at most MMV_BPS2_ITEMS. Read
 * once. */
#define MMV_BPS2_ITEMS 16
static int mmv_bps(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("PINFER_CUDA_MMV_BPS");
        v = e && (*e == '1' || *e == '2') && !e[1] ? *e - '0' : 0;
    }
    return v;
}

/* The rings one stage deeper where they fit — the tensor boxes: one matrix 5 stages of two chunks,
 * gate + up 6 of one; two blocks an SM: 5 stages — measured per product (H200, 2026-12-03 call d2,
 * bench_kern): gate + up 46.9 → 46.1 µs, q/k/v 26.9 → 26.7, wo 10.6 → 10.2 faster, but down 25.7 →
 * 26.0 (K 11 008) and fc2 6.7 → 7.3 (2 chunks a warp a tile) slower. PINFER_CUDA_MMV_TS: 0 the
 * shallower rings, 1 deeper wherever it fits, 2 (default) deeper for rows of at most 4 096 elements
 * of which a warp streams at least 4 chunks a tile. Read once. */
static int mmv_ts(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("PINFER_CUDA_MMV_TS");
        v = e && e[0] >= '0' && e[0] <= '2' && !e[1] ? e[0] - '0' : 2;
    }
    return v;
}
/* A long-row product that adds into y (down: K 11 008) on one block an SM with a ring of one-chunk
 * boxes as deep as fits (10 stages, else 8) instead of two-chunk boxes, 4 or 5 stages: more requests
 * of a warp in flight, each smaller. Measured (H200, 2026-12-04, calls q3 and q4): bench_kern's down
 * 24.39 → 24.07 µs (0.831 → 0.847 of the floor); d16 in three interleaved rounds 272.98 tok/s against
 * 271.58 off (+0.5 %) and 272.09 on the tree before (+0.3 %). The same ring lost for wo (rows of
 * 4 096, whose two blocks an SM sit beside the attention and issue half its weights before their
 * wait: −2.3 %) and for q/k/v and the output (~−0.3 %); wo's two blocks on tensor boxes (one chunk, 5
 * stages) lost too (wo 9.40 → 10.44 µs, s16 −1.2 %). PINFER_CUDA_MMV_DEEP=0 turns it off (read once). */
static bool mmv_deep(int64_t K)
{
    static const bool on = env_on_unless_0("PINFER_CUDA_MMV_DEEP");
    return on && K > 4096;
}

/* PINFER_CUDA_MMV_Y_EARLY=0: CUK_ADD reads y at the sum (the load at the tile's end), else at the
 * tile's start (read once) */
static bool mmv_y_early(void)
{
    static const bool on = env_on_unless_0("PINFER_CUDA_MMV_Y_EARLY");
    return on;
}

static bool mmv_deeper(int64_t K)
{
    const int64_t cpr = ((K + CH - 1) / CH + KS - 1) / KS;
    return mmv_ts() == 1 || (mmv_ts() == 2 && K <= 4096 && cpr >= 4);
}

/* cuk_lane_dev.cuh's block_sum for a block of NTH threads, for norm_row's one call a launch: the warp
 * butterfly, then the warps in order */
__device__ static float block_sum(float v, float *sh)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0)
        sh[warp] = v;
    __syncthreads();
    float s = 0.0f;
    for (int i = 0; i < NTH / 32; i++)
        s += sh[i];
    return s; /* no barrier after: sh is norm_row's, written once a launch */
}

/* The token's row into shared memory with its loads in flight together, a batch of XB (NORM) or XC
 * (float4s, plain copy) a thread: one L2 round trip at K = 4096 and at down's 11 008. The element
 * loop it replaces (e += NTH, unrolled by 4) waited on an L2 round trip every 4 elements a thread —
 * 11 at down's K, 8 for the norm at 4096. Measured (H200, 2026-12-03, bench_kern): down 27.5 → 25.8 µs
 * (0.73 → 0.78 of the read floor), q/k/v 27.2 → 26.9; wo and gate + up unchanged (there the row was
 * in before the ring's first stages); d16 255.4 → 258.4 tok/s in the same rounds. */
#define XB 16
#define XC 12

/* cuk_rmsnorm's operations: thread tid's sum of squares over e = tid, tid + NTH, … in that order,
 * block_sum, then xs[e] = (x[e] · scale) · w[e]; wv: w of the first batch, loaded before the wait.
 * A row of at most XB · NTH elements (4 096: every norm of a 7B layer) stays in the thread's
 * registers until the scale is known and goes to shared memory once, normalized; a longer one is
 * stored as read, then rescaled in place. */
__device__ static void norm_row(const float *__restrict__ xt, const float *__restrict__ nw, const float (&wv)[XB],
                                float eps, int64_t K, float *xs)
{
    __shared__ float sh[NTH / 32];
    const int tid = threadIdx.x;
    const bool one = K <= (int64_t)XB * NTH;
    float ss = 0.0f, v[XB];
    for (int64_t b0 = 0; b0 < K; b0 += (int64_t)XB * NTH) {
#pragma unroll
        for (int u = 0; u < XB; u++) {
            const int64_t e = b0 + tid + (int64_t)u * NTH;
            v[u] = e < K ? __ldcg(xt + e) : 0.0f; /* around L1: read before the wait by the listing kernel */
        }
#pragma unroll
        for (int u = 0; u < XB; u++) {
            const int64_t e = b0 + tid + (int64_t)u * NTH;
            if (e < K) {
                ss = __fmaf_rn(v[u], v[u], ss);
                if (!one)
                    xs[e] = v[u];
            }
        }
    }
    ss = block_sum(ss, sh);
    const float scale = 1.0f / sqrtf(ss / (float)K + eps);
    if (one) {
#pragma unroll
        for (int u = 0; u < XB; u++) {
            const int64_t e = tid + (int64_t)u * NTH;
            if (e < K)
                xs[e] = __fmul_rn(__fmul_rn(v[u], scale), wv[u]);
        }
        return;
    }
    for (int64_t b0 = 0; b0 < K; b0 += (int64_t)XB * NTH) {
        float w[XB];
#pragma unroll
        for (int u = 0; u < XB; u++) {
            const int64_t e = b0 + tid + (int64_t)u * NTH;
            w[u] = b0 == 0 ? wv[u] : e < K ? nw[e] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < XB; u++) {
            const int64_t e = b0 + tid + (int64_t)u * NTH;
            if (e < K) /* each thread rewrites only the elements it stored: no barrier between */
                xs[e] = __fmul_rn(__fmul_rn(xs[e], scale), w[u]);
        }
    }
}

/* the norm weights of the row's first XB · NTH elements, thread tid's, for norm_row: read before the
 * wait (no kernel writes them) */
__device__ static inline void norm_w_head(const float *__restrict__ nw, int64_t K, float (&wv)[XB])
{
    const int tid = threadIdx.x;
#pragma unroll
    for (int u = 0; u < XB; u++)
        wv[u] = tid + u * NTH < K ? nw[tid + u * NTH] : 0.0f;
}

__device__ static void copy_row(const float *__restrict__ xt, int64_t K, float *xs)
{
    const int tid = threadIdx.x;
    if (K % 4 || ((uintptr_t)xt & 15)) {
        for (int64_t e = tid; e < K; e += NTH)
            xs[e] = xt[e];
        return;
    }
    const int64_t K4 = K / 4;
    for (int64_t b0 = 0; b0 < K4; b0 += (int64_t)XC * NTH) {
        float4 v[XC];
#pragma unroll
        for (int u = 0; u < XC; u++) {
            const int64_t i = b0 + tid + (int64_t)u * NTH;
            v[u] = i < K4 ? ((const float4 *)xt)[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int u = 0; u < XC; u++) {
            const int64_t i = b0 + tid + (int64_t)u * NTH;
            if (i < K4)
                ((float4 *)xs)[i] = v[u];
        }
    }
}

/* NM 1: rows of w0 (MODE's epilogue); NM 2: gate w0 and up w1 rows (GLU). One token a block: IDX,
 * token blockIdx.y and its listed rows o.idx[tok][j] (j < o.cnt[tok]); else B = 1. The token's row
 * is copied (NORM: normalized) into shared memory once, the tiles stream the weights only. */
template <bool BF, bool LO, int MODE, int NM, bool IDX, bool NORM, int S, int BPS, int TM = 0, bool MSK = false>
__global__ void __launch_bounds__(NTH, BPS) k_mmv(const uint8_t *__restrict__ w0, const uint8_t *__restrict__ w1,
                                                  int64_t K, int64_t n_out, const float *__restrict__ x, int B, mvo o,
                                                  const __grid_constant__ CUtensorMap tm0,
                                                  const __grid_constant__ CUtensorMap tm1)
{
    CUK_TRACE_BLOCK(CUK_F_k_mmv);
    constexpr int SLOTS = Ring<NM, S>::SLOTS;
    static_assert(S >= 2, "the ring needs a stage beside the one in use");
    /* TM: a warp's stage is NM × 16 rows × TM chunks (TM × 128 bytes a row), warp w's S stages
     * together; the same bytes as the cp.async ring when S · TM is its S */
    constexpr int TMI = TM ? TM : 1, TSTAGE = NM * 16 * TMI * CH * 2;
    extern __shared__ __align__(1024) uint4 ring[]; /* [S][SLOTS][NTH] (TM: [KS][S][TSTAGE bytes]), then the token's row, K floats */
    __shared__ float red[2][KS][NM * 4][32];
    __shared__ uint64_t bar[TM ? KS : 1][TM ? S : 1];
    static_assert(!(IDX && TM), "a tensor map's boxes are whole tiles of consecutive rows");
    static_assert(!MSK || IDX, "a raw mask lists rows");
    __shared__ int32_t lst[MSK ? MV_LIST_CAP : 1], wsum[MSK ? 33 : 1]; /* MSK: the block's share of the list; its scan */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int tok0 = IDX ? (int)blockIdx.y : 0, ntok = IDX ? 1 : B;
    float *xs = (float *)((uint8_t *)ring + ring_bytes<NM, S, TM>());
    const float *xt = x + (int64_t)tok0 * K;
    if constexpr (MSK && NORM) { /* x is no output of the kernel just before (cuk_mmv.h): normalized
                                  * before the wait, off the chain that the mask starts */
        float wv[XB];
        norm_w_head(o.nw, K, wv);
        norm_row(xt, o.nw, wv, o.eps, K, xs);
    }
    if constexpr (IDX)
        pdl_wait(); /* the listed rows (or the mask) are the previous kernel's output */
    mask_scan<NTH> ms; /* MSK: the row listed by this block */
    const int64_t n = [&]() -> int64_t {
        if constexpr (MSK) {
            ms.count(o.mask + (int64_t)tok0 * n_out, n_out, wsum);
            return ms.n;
        } else
            return IDX && o.cnt ? o.cnt[tok0] : n_out;
    }();
    /* the block's tiles: dense, tiles blockIdx.x, + gridDim.x, ... of n rows; IDX, the listed rows
     * [r0, r1) of an even split of the count over the grid, in tiles of 16 from r0 (rows past r1
     * padded: zeros, not loaded). Why: one tile a block left a sparse step's ~70 tiles on half the
     * SMs, each streaming 256 KB; split evenly, each of 132 SMs streams ~9 rows. A row's output
     * comes from its own row of the tile only (the other rows are other outputs of the mma), so any
     * tiling gives the same bits. */
    const int64_t r0 = IDX ? (int64_t)blockIdx.x * n / gridDim.x : 0,
                  r1 = IDX ? ((int64_t)blockIdx.x + 1) * n / gridDim.x : n;
    const int64_t ntiles = IDX ? (r1 - r0 + 15) / 16 : (n + 15) / 16;
    if constexpr (MSK) { /* the block's rows of the list, ranks [r0, r1), into shared memory and out */
        int32_t *lo = o.list + (int64_t)tok0 * o.idx_stride;
        ms.emit(r0, r1, [&](int64_t r, int64_t i) { lst[r - r0] = (int32_t)i, lo[r] = (int32_t)i; });
        if (blockIdx.x == 0 && tid == 0)
            o.list_n[tok0] = (int32_t)n;
        __syncthreads();
    }
    if (IDX ? ntiles == 0 : (int64_t)blockIdx.x >= ntiles)
        return; /* the whole block */
    const int nt_blk = IDX ? (int)ntiles : (int)((ntiles - (int64_t)blockIdx.x + gridDim.x - 1) / gridDim.x);
    auto tile_j0 = [&](int it) {
        return IDX ? r0 + (int64_t)it * 16 : ((int64_t)blockIdx.x + (int64_t)it * gridDim.x) * 16;
    };
    const int nk = (int)((K + CH - 1) / CH), cpr = (nk + KS - 1) / KS;
    const int c0 = warp * cpr < nk ? warp * cpr : nk, c1 = c0 + cpr < nk ? c0 + cpr : nk, nw = c1 - c0;
    const bool xg = g < ntok; /* this thread's token column is the token (not padding) */
    const int ipt = (nw + TMI - 1) / TMI, total = nt_blk * ipt; /* items a tile (TM chunks an item, else one), a block */

    /* the producer: item p = chunk pc of the block's tile number pit */
    int p = 0, pit = 0, pc = c0;
    const uint8_t *rp[NM][2];
    bool rv[2] = { true, true }; /* IDX: rows g and g + 8 of the tile are listed rows of the block */
    auto rows = [&](int it) {
        const int64_t j0 = tile_j0(it);
        const int64_t jg = j0 + g < r1 ? j0 + g : r1 - 1, jh = j0 + g + 8 < r1 ? j0 + g + 8 : r1 - 1;
        if constexpr (IDX)
            rv[0] = j0 + g < r1, rv[1] = j0 + g + 8 < r1;
        const int64_t rg = !IDX ? jg : MSK ? lst[jg - r0] : o.idx[tok0 * o.idx_stride + jg],
                      rh = !IDX ? jh : MSK ? lst[jh - r0] : o.idx[tok0 * o.idx_stride + jh];
#pragma unroll
        for (int m = 0; m < NM; m++) {
            const uint8_t *w = m ? w1 : w0;
            rp[m][0] = w + rg * K * 2, rp[m][1] = w + rh * K * 2;
        }
    };
    uint8_t *tring = (uint8_t *)ring + (size_t)warp * S * TSTAGE;
    auto produce_tma = [&]() {
        if (p < total) {
            const int st = p % S, pe = pc + TM < c1 ? pc + TM : c1;
            const int j0 = (int)tile_j0(pit);
            __syncwarp(); /* every lane has read the stage (item p − S) */
            if (lane == 0) {
                asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
                mbar_expect(&bar[warp][st], (uint32_t)TSTAGE);
                box_copy(tring + (size_t)st * TSTAGE, &tm0, pc * CH, j0, &bar[warp][st]);
                if constexpr (NM == 2)
                    box_copy(tring + (size_t)st * TSTAGE + TSTAGE / 2, &tm1, pc * CH, j0, &bar[warp][st]);
            }
            if ((pc = pe) == c1)
                pc = c0, pit++;
        }
        p++;
    };
    auto produce = [&]() {
        if constexpr (TM) {
            produce_tma();
            return;
        }
        if (p < total) {
            uint4 *st = ring + (size_t)(p % S) * SLOTS * NTH + tid;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int64_t e = elem(pc, t, h);
                const bool ok = e + 8 <= K;
#pragma unroll
                for (int m = 0; m < NM; m++)
#pragma unroll
                    for (int r = 0; r < 2; r++)
                        cp16(st + ((m * 2 + r) * 2 + h) * NTH, ok && rv[r] ? rp[m][r] + 2 * e : rp[m][r],
                             ok && rv[r] ? 16 : 0);
            }
            if (++pc == c1) {
                pc = c0, pit++;
                if (pit < nt_blk)
                    rows(pit);
            }
        }
        cp_commit(); /* one group per item, empty past the end: wait_group counts stay uniform */
        p++;
    };

    if constexpr (TM) {
        if (lane == 0)
            for (int k = 0; k < S; k++)
                mbar_init(&bar[warp][k], 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        __syncwarp();
    } else if (nw > 0)
        rows(0);
#pragma unroll
    for (int s = 0; s < S - 1; s++)
        produce();
    constexpr bool NORM_HERE = NORM && !MSK; /* MSK normalized before its first wait */
    float wv[XB];
    if constexpr (NORM_HERE)
        norm_w_head(o.nw, K, wv);
    /* the first S − 1 items of weights are in flight: now the activation (the previous kernel's) */
    pdl_wait();
    pdl_trigger();
    if constexpr (NORM_HERE)
        norm_row(xt, o.nw, wv, o.eps, K, xs);
    else if constexpr (!NORM)
        copy_row(xt, K, xs);
    __syncthreads();
    int i = 0, buf = 0;
    for (int it = 0; it < nt_blk; it++, buf ^= 1) {
        float acc[NM][4];
#pragma unroll
        for (int m = 0; m < NM; m++)
#pragma unroll
            for (int k = 0; k < 4; k++)
                acc[m][k] = 0.0f;
        /* CUK_ADD (one token): the emitting warp's lanes t == 0 read y's two rows now, so that the
         * sum at the tile's end waits on no load — at a product's end that L2 round trip was on the
         * chain (the last blocks' emit); the same y values (no other block writes these rows) */
        float yv[2] = { 0.0f, 0.0f };
        if constexpr (MODE == CUK_ADD)
            if (o.y_early && warp == it % KS && t == 0 && ntok == 1) {
                const int64_t j0 = tile_j0(it);
                yv[0] = j0 + g < r1 ? ((const float *)o.y)[tok0 * n_out + j0 + g] : 0.0f;
                yv[1] = j0 + g + 8 < r1 ? ((const float *)o.y)[tok0 * n_out + j0 + g + 8] : 0.0f;
            }
        for (int k = 0; k < nw; k++, i++) {
            uint4 a[NM][2][2];
            if constexpr (TM) {
                const int sub = k % TM, q = it * ipt + k / TM; /* item q, its chunk sub */
                if (sub == 0) {
                    mbar_wait(&bar[warp][q % S], (uint32_t)(q / S) & 1u);
                    produce(); /* item q + S − 1, into the stage item q − 1 left */
                }
                const uint8_t *sb = tring + (size_t)(q % S) * TSTAGE + (size_t)sub * CH * 2 + 16 * t;
                const int odd = g & 1;
#pragma unroll
                for (int m = 0; m < NM; m++)
#pragma unroll
                    for (int r = 0; r < 2; r++) {
                        const uint8_t *rb = sb + (size_t)(m * 16 + g + 8 * r) * TM * CH * 2;
                        const uint4 v0 = *(const uint4 *)(rb + (odd ? 64 : 0)), v1 = *(const uint4 *)(rb + (odd ? 0 : 64));
                        a[m][r][0] = odd ? v1 : v0; /* past K: the box's zeros, as cp16's */
                        a[m][r][1] = odd ? v0 : v1;
                    }
            } else {
                cp_wait<S - 2>(); /* item i has landed */
                const uint4 *st = ring + (size_t)(i % S) * SLOTS * NTH + tid;
#pragma unroll
                for (int m = 0; m < NM; m++)
#pragma unroll
                    for (int r = 0; r < 2; r++)
#pragma unroll
                        for (int h = 0; h < 2; h++)
                            a[m][r][h] = st[((m * 2 + r) * 2 + h) * NTH];
            }
            float4 xv[2][2];
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int q = 0; q < 2; q++) {
                    const int64_t e = elem(c0 + k, t, h);
                    xv[h][q] = xg && e + 8 <= K ? *(const float4 *)(xs + e + 4 * q)
                                                : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                }
            if constexpr (!TM)
                produce(); /* item i + S − 1, into the stage item i − 1 left */
            uint32_t hw[8], lw[8];
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int q = 0; q < 2; q++)
                    split4<BF, LO>(xv[h][q], hw + 4 * h + 2 * q, lw + 4 * h + 2 * q);
            const uint4 bh[2] = { make_uint4(hw[0], hw[1], hw[2], hw[3]), make_uint4(hw[4], hw[5], hw[6], hw[7]) };
            const uint4 bl[2] = { make_uint4(lw[0], lw[1], lw[2], lw[3]), make_uint4(lw[4], lw[5], lw[6], lw[7]) };
#pragma unroll
            for (int m = 0; m < NM; m++)
                mma_chunk<BF, LO>(acc[m], a[m][0], a[m][1], bh, bl);
        }
#pragma unroll
        for (int m = 0; m < NM; m++)
#pragma unroll
            for (int k = 0; k < 4; k++)
                red[buf][warp][m * 4 + k][lane] = acc[m][k];
        __syncthreads(); /* red[buf] is rewritten two tiles on, after the next barrier */
        if (warp != it % KS)
            continue;
        float s[NM][4];
#pragma unroll
        for (int m = 0; m < NM; m++)
#pragma unroll
            for (int k = 0; k < 4; k++) {
                s[m][k] = red[buf][0][m * 4 + k][lane];
#pragma unroll
                for (int w = 1; w < KS; w++)
                    s[m][k] = __fadd_rn(s[m][k], red[buf][w][m * 4 + k][lane]);
            }
        const int64_t j0 = tile_j0(it);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int64_t j = j0 + g + (k >= 2 ? 8 : 0);
            const int tl = 2 * t + (k & 1);
            if (j >= r1 || tl >= ntok)
                continue;
            const int64_t tok = tok0 + tl;
            if constexpr (NM == 2)
                emit_glu<IDX>(o, n_out, j, tok, s[0][k], s[1][k]);
            else if (MODE == CUK_ADD && o.y_early && ntok == 1) /* k 0 / 2: rows g / g + 8 of token 0 */
                ((float *)o.y)[tok * n_out + j] = __fadd_rn(yv[k >> 1], s[0][k]);
            else
                emit<MODE>(o, n_out, j, tok, s[0][k]);
        }
    }
}

static int dev_attr(cudaDeviceAttr a)
{
    int dev = 0, v = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&v, a, dev);
    return v;
}

/* shared memory of an SM (228 KiB on H100 / H200), 1 KiB of it reserved per block */
static size_t sm_smem(void)
{
    static size_t n = 0;
    if (!n)
        n = (size_t)dev_attr(cudaDevAttrMaxSharedMemoryPerMultiprocessor);
    return n;
}

/* The maps made so far: a map is a function of its key (the address, the shape, the box, the type), so
 * a hit is right even for memory freed and reused; eager launches (the hybrid's layers, prefill) do
 * not encode a map each time. Full: encode without keeping. */
struct tmap_slot {
    const uint8_t *w;
    int64_t K, n_rows;
    int tm;
    bool bf;
    CUtensorMap m;
};
#define TMAP_SLOTS 1024
static int tmap_get(CUtensorMap *m, const uint8_t *w, int64_t K, int64_t n_rows, bool bf, int tm)
{
    static tmap_slot slot[TMAP_SLOTS];
    static std::mutex mu;
    std::lock_guard<std::mutex> lock(mu);
    const size_t h0 = ((uintptr_t)w >> 8) * 0x9E3779B97F4A7C15ull >> 54; /* 10 bits */
    for (size_t k = 0; k < TMAP_SLOTS; k++) {
        tmap_slot &s = slot[(h0 + k) % TMAP_SLOTS];
        if (s.w == w && s.K == K && s.n_rows == n_rows && s.tm == tm && s.bf == bf) {
            *m = s.m;
            return 0;
        }
        if (!s.w) {
            const int rc = tmap_encode(&s.m, w, K, n_rows, bf, tm);
            if (rc)
                return rc;
            s.w = w, s.K = K, s.n_rows = n_rows, s.tm = tm, s.bf = bf;
            *m = s.m;
            return 0;
        }
    }
    return tmap_encode(m, w, K, n_rows, bf, tm);
}

template <bool BF, bool LO, int MODE, int NM, bool IDX, bool NORM, int S, int BPS, int TM = 0, bool MSK = false>
static int mv_launch_s(const uint8_t *w0, const uint8_t *w1, int64_t K, int64_t n_out, const float *x, int B,
                       const mvo &o, cudaStream_t st)
{
    static const cudaError_t attr = [] {
        cudaError_t e = cudaFuncSetAttribute(k_mmv<BF, LO, MODE, NM, IDX, NORM, S, BPS, TM, MSK>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, MMV_SMEM_MAX);
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(k_mmv<BF, LO, MODE, NM, IDX, NORM, S, BPS, TM, MSK>,
                                     cudaFuncAttributePreferredSharedMemoryCarveout, (int)cudaSharedmemCarveoutMaxShared);
        return e;
    }();
    if (attr != cudaSuccess)
        return -(int)attr;
    const size_t smem = ring_bytes<NM, S, TM>() + (size_t)K * sizeof(float);
    if (smem > MMV_SMEM_MAX)
        return -(int)cudaErrorInvalidValue;
    const int64_t tiles = (n_out + 15) / 16, blocks = (int64_t)BPS * cuk_sm_count();
    const unsigned gx = (unsigned)(tiles < blocks ? tiles : blocks);
    mvo oy = o;
    oy.y_early = MODE == CUK_ADD && mmv_y_early();
    CUtensorMap m0, m1;
    memset(&m0, 0, sizeof m0), memset(&m1, 0, sizeof m1);
    if constexpr (TM > 0) {
        int rc = tmap_get(&m0, w0, K, n_out, BF, TM);
        if (!rc && NM == 2)
            rc = tmap_get(&m1, w1, K, n_out, BF, TM);
        if (rc)
            return rc;
    }
    pdl_launch(k_mmv<BF, LO, MODE, NM, IDX, NORM, S, BPS, TM, MSK>, dim3(gx, IDX ? (unsigned)B : 1u), dim3(NTH), smem, st, w0, w1,
               K, n_out, x, B, oy, m0, m1);
    return launched();
}

/* a block's shared memory besides the dynamic bytes: red[] (and NORM's sh[]), the boxes' mbarriers, a
 * gathered product's list share and scan (NM 2), and the SM's 1 KiB */
template <int NM> static constexpr size_t mv_static(void)
{
    return (size_t)2 * KS * NM * 4 * 32 * 4 + 64 + (size_t)KS * deep_s(1) * 8 /* the boxes' mbarriers, at most */ +
           (NM == 2 ? (MV_LIST_CAP + 33) * 4 : 0) + 1024;
}

/* one matrix: two blocks an SM (mmv_bps) with the deepest ring that lets both fit; else (and for
 * gate + up) the one deep block */
template <bool BF, bool LO, int MODE, int NM, bool IDX, bool NORM, bool MSK = false>
static int mv_launch(const uint8_t *w0, const uint8_t *w1, int64_t K, int64_t n_out, const float *x, int B,
                     const mvo &o, cudaStream_t st)
{
    const int tma = IDX ? 0 : mmv_tma(); /* a gathered product's rows are no tensor map's boxes */
    if constexpr (NM == 1 && !IDX && MODE == CUK_ADD && !NORM)
        if (tma && mmv_deep(K)) {
            const size_t row = (size_t)K * sizeof(float);
            if (ring_bytes<1, 10, 1>() + row <= MMV_SMEM_MAX)
                return mv_launch_s<BF, LO, MODE, NM, IDX, NORM, 10, 1, 1>(w0, w1, K, n_out, x, B, o, st);
            if (ring_bytes<1, 8, 1>() + row <= MMV_SMEM_MAX)
                return mv_launch_s<BF, LO, MODE, NM, IDX, NORM, 8, 1, 1>(w0, w1, K, n_out, x, B, o, st);
        }
    if constexpr (NM == 1) {
        const size_t row = (size_t)K * sizeof(float);
        auto two_fit = [&](size_t ring) { return 2 * (ring + row + mv_static<NM>()) <= sm_smem(); };
        bool two = mmv_bps() == 2;
        if (!mmv_bps() && !IDX) {
            const int64_t tiles = (n_out + 15) / 16, sms = cuk_sm_count(), nk = (K + CH - 1) / CH;
            two = tiles > sms && (tiles + sms - 1) / sms * ((nk + KS - 1) / KS) <= MMV_BPS2_ITEMS;
        }
        if (tma != 1 && two && mmv_deeper(K) && two_fit(Ring<1, 5>::bytes))
            return mv_launch_s<BF, LO, MODE, NM, IDX, NORM, 5, 2>(w0, w1, K, n_out, x, B, o, st);
        if (tma != 1 && two && two_fit(Ring<1, 4>::bytes))
            return mv_launch_s<BF, LO, MODE, NM, IDX, NORM, 4, 2>(w0, w1, K, n_out, x, B, o, st);
        if (tma != 1 && two && two_fit(Ring<1, 3>::bytes))
            return mv_launch_s<BF, LO, MODE, NM, IDX, NORM, 3, 2>(w0, w1, K, n_out, x, B, o, st);
    }
    if constexpr (!IDX)
        if (tma) { /* the deep cp.async ring's bytes, or a stage more (mmv_deeper) */
            constexpr int TMI = NM == 1 ? 2 : 1, SD = NM == 1 ? 5 : 6;
            if (mmv_deeper(K) && ring_bytes<NM, SD, TMI>() + (size_t)K * sizeof(float) <= MMV_SMEM_MAX)
                return mv_launch_s<BF, LO, MODE, NM, IDX, NORM, SD, 1, TMI>(w0, w1, K, n_out, x, B, o, st);
            return mv_launch_s<BF, LO, MODE, NM, IDX, NORM, NM == 1 ? 4 : deep_s(NM), 1, TMI>(w0, w1, K, n_out, x, B, o, st);
        }
    return mv_launch_s<BF, LO, MODE, NM, IDX, NORM, deep_s(NM), 1, 0, MSK>(w0, w1, K, n_out, x, B, o, st);
}

template <bool BF, bool LO, bool NORM>
static int gemv_b(const struct cuk_w *w, const float *x, int B, const mvo &o, int mode, cudaStream_t st)
{
    const uint8_t *q = (const uint8_t *)w->q;
    switch (mode) {
    case CUK_SET: return mv_launch<BF, LO, CUK_SET, 1, false, NORM>(q, nullptr, w->n_in, w->n_out, x, B, o, st);
    case CUK_ADD: return mv_launch<BF, LO, CUK_ADD, 1, false, NORM>(q, nullptr, w->n_in, w->n_out, x, B, o, st);
    case CUK_RELU: return mv_launch<BF, LO, CUK_RELU, 1, false, NORM>(q, nullptr, w->n_in, w->n_out, x, B, o, st);
    case CUK_MASK: return mv_launch<BF, LO, CUK_MASK, 1, false, NORM>(q, nullptr, w->n_in, w->n_out, x, B, o, st);
    case CUK_SPLIT3: return mv_launch<BF, LO, CUK_SPLIT3, 1, false, NORM>(q, nullptr, w->n_in, w->n_out, x, B, o, st);
    default: return -(int)cudaErrorInvalidValue;
    }
}

extern "C" int cuk_mmv_gemv(const struct cuk_w *w, const float *x, int B, void *y, int mode, float thr, float *y1,
                            float *y2, int64_t n0, int64_t n1, void *st)
{
    if (!cuk_mma_type(w->type) || w->n_in % 8 || B != 1)
        return -(int)cudaErrorInvalidValue;
    if (B < 1)
        return 0;
    mvo o = {};
    o.y = y, o.y1 = y1, o.y2 = y2, o.n0 = n0, o.n1 = n1, o.thr = thr;
    const cudaStream_t s = S(st);
    return w->type == PI_TYPE_BF16 ? gemv_b<true, true, false>(w, x, B, o, mode, s)
           : cuk_mma_act16(w->type) ? gemv_b<false, false, false>(w, x, B, o, mode, s)
                                    : gemv_b<false, true, false>(w, x, B, o, mode, s);
}

template <bool BF, bool LO, bool NORM>
static int glu_t(const uint8_t *g, const uint8_t *u, int64_t K, int64_t N, const float *x, int B, const mvo &o, bool idx,
                 cudaStream_t s)
{
    if constexpr (NORM) /* cuk_norm_glu_mask: the rows of o.mask */
        if (o.mask)
            return mv_launch<BF, LO, CUK_SET, 2, true, NORM, true>(g, u, K, N, x, B, o, s);
    return idx ? mv_launch<BF, LO, CUK_SET, 2, true, NORM>(g, u, K, N, x, B, o, s)
               : mv_launch<BF, LO, CUK_SET, 2, false, NORM>(g, u, K, N, x, B, o, s);
}

/* the activation as cuk_mma.cu takes it for this type: split (BF16; F16 by default) or f16 once */
template <bool NORM>
static int glu_b(uint32_t type, const uint8_t *g, const uint8_t *u, int64_t K, int64_t N, const float *x, int B,
                 const mvo &o, bool idx, cudaStream_t s)
{
    return type == PI_TYPE_BF16   ? glu_t<true, true, NORM>(g, u, K, N, x, B, o, idx, s)
           : cuk_mma_act16(type) ? glu_t<false, false, NORM>(g, u, K, N, x, B, o, idx, s)
                                 : glu_t<false, true, NORM>(g, u, K, N, x, B, o, idx, s);
}

extern "C" int cuk_mmv_glu(const struct cuk_w *gate, const struct cuk_w *up, const float *x, int B, float *act,
                           int act_kind, const int32_t *idx, const int32_t *cnt, int64_t idx_stride, bool compact,
                           void *st)
{
    if (!cuk_mma_type(gate->type) || gate->type != up->type || gate->n_in != up->n_in || gate->n_out != up->n_out ||
        gate->n_in % 8 || (!idx && B != 1) || B > 8)
        return -(int)cudaErrorInvalidValue;
    if (B < 1)
        return 0;
    mvo o = {};
    o.y = act, o.kind = act_kind, o.idx = idx, o.cnt = cnt, o.idx_stride = idx_stride, o.compact = compact;
    const uint8_t *g = (const uint8_t *)gate->q, *u = (const uint8_t *)up->q;
    const int64_t K = gate->n_in, N = gate->n_out;
    const cudaStream_t s = S(st);
    return glu_b<false>(gate->type, g, u, K, N, x, B, o, idx != nullptr, s);
}

/* ---- the RMSNorm fused into the product (one token) ---- */

extern "C" size_t cuk_mmv_block_smem(void) { return MMV_SMEM_MAX + mv_static<2>() - 1024; }

extern "C" bool cuk_mmv_fits(const struct cuk_w *w, int nm)
{
    return cuk_mmv_on() && (nm == 2 ? Ring<2>::bytes : Ring<1>::bytes) + (size_t)w->n_in * sizeof(float) <=
                               MMV_SMEM_MAX;
}

static bool norm_fits(const struct cuk_w *w, int B, int nm)
{
    return B == 1 && cuk_mma_on(w->type) && cuk_mmv_fits(w, nm) && w->n_in % 8 == 0;
}

extern "C" int cuk_norm_gemv_split3(const struct cuk_w *w, const float *x, const float *norm_w, float eps, int B,
                                    float *xn, float *y0, int64_t n0, float *y1, int64_t n1, float *y2, void *xq,
                                    void *st)
{
    if (!norm_fits(w, B, 1)) {
        int rc = cuk_normq_split3(w, x, norm_w, eps, B, y0, n0, y1, n1, y2, xq, st);
        if (rc <= 0) /* a Q type: done (or failed) */
            return rc;
        rc = cuk_rmsnorm(xn, x, norm_w, B, w->n_in, w->n_in, eps, st);
        return rc ? rc : cuk_gemv_split3(w, xn, B, y0, n0, y1, n1, y2, xq, st);
    }
    mvo o = {};
    o.y = y0, o.y1 = y1, o.y2 = y2, o.n0 = n0, o.n1 = n1, o.nw = norm_w, o.eps = eps;
    const uint8_t *q = (const uint8_t *)w->q;
    const cudaStream_t s = S(st);
    if (w->type == PI_TYPE_BF16)
        return mv_launch<true, true, CUK_SPLIT3, 1, false, true>(q, nullptr, w->n_in, w->n_out, x, 1, o, s);
    return cuk_mma_act16(w->type) ? mv_launch<false, false, CUK_SPLIT3, 1, false, true>(q, nullptr, w->n_in, w->n_out, x, 1, o, s)
                                  : mv_launch<false, true, CUK_SPLIT3, 1, false, true>(q, nullptr, w->n_in, w->n_out, x, 1, o, s);
}

extern "C" int cuk_norm_glu(const struct cuk_w *gate, const struct cuk_w *up, const float *x, const float *norm_w,
                            float eps, int B, float *xn, float *act, int act_kind, const int32_t *idx,
                            const int32_t *cnt, int64_t idx_stride, bool compact, void *xq, void *st)
{
    if (!norm_fits(gate, B, 2) || gate->type != up->type || gate->n_in != up->n_in || gate->n_out != up->n_out) {
        int rc = cuk_normq_glu(gate, up, x, norm_w, eps, B, act, act_kind, idx, cnt, idx_stride, compact, xq, st);
        if (rc <= 0)
            return rc;
        rc = cuk_rmsnorm(xn, x, norm_w, B, gate->n_in, gate->n_in, eps, st);
        return rc ? rc : cuk_glu(gate, up, xn, B, act, act_kind, idx, cnt, idx_stride, compact, xq, st);
    }
    mvo o = {};
    o.y = act, o.kind = act_kind, o.idx = idx, o.cnt = cnt, o.idx_stride = idx_stride, o.compact = compact;
    o.nw = norm_w, o.eps = eps;
    return glu_b<true>(gate->type, (const uint8_t *)gate->q, (const uint8_t *)up->q, gate->n_in,
                       gate->n_out, x, 1, o, idx != nullptr, S(st));
}

/* PINFER_CUDA_GLU_MASK=0: cuk_norm_glu_mask declines, the caller runs k_compact then cuk_norm_glu (read once) */
static bool glu_mask_on(void)
{
    static const bool on = env_on_unless_0("PINFER_CUDA_GLU_MASK");
    return on;
}

extern "C" int cuk_norm_glu_mask(const struct cuk_w *gate, const struct cuk_w *up, const float *x, const float *norm_w,
                                 float eps, int B, float *act, int act_kind, const uint8_t *mask, int32_t *idx,
                                 int32_t *cnt, int64_t idx_stride, void *st)
{
    const int64_t N = gate->n_out, sms = cuk_sm_count();
    if (!glu_mask_on() || !norm_fits(gate, B, 2) || gate->type != up->type || gate->n_in != up->n_in || N != up->n_out ||
        idx_stride < N || (N + sms - 1) / sms > MV_LIST_CAP || N > mask_scan<NTH>::MAX_LEN)
        return 1; /* not this kernel's: the caller lists the mask (cuk_compact) and calls cuk_norm_glu */
    mvo o = {};
    o.y = act, o.kind = act_kind, o.idx_stride = idx_stride, o.compact = true;
    o.nw = norm_w, o.eps = eps, o.mask = mask, o.list = idx, o.list_n = cnt;
    return glu_b<true>(gate->type, (const uint8_t *)gate->q, (const uint8_t *)up->q, gate->n_in, N, x, 1, o, true,
                       S(st));
}

/* this object's copy of the trace ring's pointers (cuk_trace.cuh; a CUK_TRACE build only) */
CUK_TRACE_SETTER(cuk_mmv_trace_set)
