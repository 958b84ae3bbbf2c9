/* cuk_gemv.cu — the products on the CUDA cores (interface: cuk.h): the GEMV of every weight type, its
 * prefill tiling, the one-launch products of one token (q1: the activation quantized in the block),
 * the GLU (gate and up together, the activation applied), and the Q8 activation rows the Q types dot.
 *
 * Memory-bound decode kernels: one warp per output row, each lane loads whole 16-byte words of the
 * weight row (a "lane block": 4 f32, 8 f16/bf16, or 32 elements of a quantized type after repacking,
 * cuk_traits.cuh)
 * and dots them with up to 8 tokens' f32 activations, so a weight row is read once per launch for
 * all of them. Every multiply-add is an explicit fmaf in a fixed order, so a token's result does
 * not depend on how many other tokens share the launch (no compiler re-association either). */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

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
#include "cuk_hand_dev.cuh"

#define GEMV_ROWS 4 /* warps (rows) per 128-thread block */
#define GEMV_MAX_NB 8
/* A/B knobs of the one-token products (compile-time; bench_kern on the H200): lane blocks of a
 * 32-element type in flight per lane and row (GEMV_QU), rows per warp of a tall matrix (GEMV_R1).
 * Measured 2026-12-02 (n4): GEMV_QU 4 and GEMV_R1 4 within ±4 % of 2 on every Q4_0 product. */
#ifndef GEMV_QU
#define GEMV_QU 2
#endif
#ifndef GEMV_R1
#define GEMV_R1 2
#endif

#include "cuk_launch.cuh"
#include "cuk_traits.cuh"
#include "cuk_pdl.cuh" /* the decode chain's launches: pdl_launch, pdl_wait / pdl_trigger in the kernels */
#include "cuk_lane_dev.cuh"
#include "cuk_act_dev.cuh" /* glu */

/* ---- GEMV ---- */

/* A token's activation for lane block b, loaded once and dotted with R rows: f32 [n_in] for float
 * types; for Q types int8 [n_in] then float2 (d, d·Σq) [n_in/32]. */
template <class T, bool Q = T::QX> struct XV;
template <class T> struct XV<T, false> {
    float4 f[T::E / 4];
};
template <class T> struct XV<T, true> {
    uint4 q[2];
    float2 d;
};

template <class T, bool SH = false>
__device__ static inline void x_load(const uint8_t *__restrict__ xr, int64_t n_in, int64_t b, XV<T> &xv)
{
    if constexpr (T::QX && SH) { /* k_gemv_q1: the row its block quantized into shared memory */
        const uint4 *xp = (const uint4 *)(xr + b * 32);
        xv.q[0] = xp[0], xv.q[1] = xp[1];
        xv.d = ((const float2 *)(xr + n_in))[b];
    } else if constexpr (T::QX) {
        const uint4 *xp = (const uint4 *)(xr + b * 32);
        xv.q[0] = __ldg(xp), xv.q[1] = __ldg(xp + 1);
        xv.d = __ldg((const float2 *)(xr + n_in) + b);
    } else {
        const float4 *xp = (const float4 *)((const float *)xr + b * T::E);
#pragma unroll
        for (int k = 0; k < T::E / 4; k++)
            xv.f[k] = __ldg(xp + k);
    }
}

/* The float types' fmaf chain over a lane block already dequantized (w, E floats): dot_x's, and
 * the kernels' that dequantize a block once for every token of the launch. */
template <class T>
__device__ static inline float dot_w(const float *w, const XV<T> &xv, float acc)
{
#pragma unroll
    for (int k = 0; k < T::E / 4; k++) {
        acc = __fmaf_rn(w[4 * k], xv.f[k].x, acc);
        acc = __fmaf_rn(w[4 * k + 1], xv.f[k].y, acc);
        acc = __fmaf_rn(w[4 * k + 2], xv.f[k].z, acc);
        acc = __fmaf_rn(w[4 * k + 3], xv.f[k].w, acc);
    }
    return acc;
}

/* acc += dot(lane block, x) in a fixed order: float types Σ_e w_e x_e as an fmaf chain; Q types the
 * integer block dot of the quantized activation, scaled once. */
template <class T>
__device__ static inline float dot_x(const uint4 *qq, const typename T::S &s, const XV<T> &xv, float acc)
{
    if constexpr (T::QX) {
        return T::dot(qq, s, xv.q, xv.d, acc);
    } else {
        float w[T::E];
        T::deq(qq, w);
        return dot_w<T>(w, xv, acc);
    }
}

/* acc[r][t] op= lane block u of row r · x_t for the tokens t < nt: Q types dot each token's
 * quantized activation; float types dequantize each row's block once and reuse it for every token
 * (the conversions are not repeated per token). The same per-(row, token) order either way. */
template <class T, int NB, int R, int U, bool SH = false>
__device__ static inline void dot_block(const uint4 (*qq)[U][T::NQ], const typename T::S (*s)[U], int u, int64_t b,
                                        const uint8_t *__restrict__ x, int64_t xs, int64_t n_in, int nt,
                                        float (*acc)[NB])
{
    if constexpr (T::QX) {
#pragma unroll
        for (int t = 0; t < NB; t++)
            if (t < nt) {
                XV<T> xv;
                x_load<T, SH>(x + t * xs, n_in, b, xv);
#pragma unroll
                for (int r = 0; r < R; r++)
                    acc[r][t] = dot_x<T>(qq[r][u], s[r][u], xv, acc[r][t]);
            }
    } else {
        float w[R][T::E];
#pragma unroll
        for (int r = 0; r < R; r++)
            T::deq(qq[r][u], w[r]);
#pragma unroll
        for (int t = 0; t < NB; t++)
            if (t < nt) {
                XV<T> xv;
                x_load<T>(x + t * xs, n_in, b, xv);
#pragma unroll
                for (int r = 0; r < R; r++)
                    acc[r][t] = dot_w<T>(w[r], xv, acc[r][t]);
            }
    }
}

/* acc[r][t] = dot(row r, x_t) for R rows and t < nt (NB compile-time bound), reduced over the warp
 * (all lanes get it). The R rows' words are in flight together and each activation word is loaded
 * once for all of them; each (row, token) sum runs in the same order whatever R, NB and nt are. */
template <class T, int NB, int R, bool SH = false>
__device__ static inline void dot_rows(const uint8_t *const *qrow, const uint8_t *const *drow, int64_t nb,
                                       const uint8_t *__restrict__ x, int64_t xs, int64_t n_in, int nt, int lane,
                                       float (*acc)[NB])
{
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NB; t++)
            acc[r][t] = 0.0f;
    /* lane blocks in flight per lane and row (fewer for many rows: registers); a lane's blocks are
     * summed in ascending order whatever U is */
    enum { U = T::E == 32 ? (R > 4 ? 1 : GEMV_QU) : (R > 4 ? 2 : 4) };
    int64_t b = lane;
    for (; b + 32 * (U - 1) < nb; b += 32 * U) {
        uint4 qq[R][U][T::NQ];
        typename T::S s[R][U];
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int u = 0; u < U; u++)
                load_lb<T>(qrow[r], drow[r], nb, b + 32 * u, qq[r][u], &s[r][u]);
#pragma unroll
        for (int u = 0; u < U; u++)
            dot_block<T, NB, R, U, SH>(qq, s, u, b + 32 * u, x, xs, n_in, nt, acc);
    }
    for (; b < nb; b += 32) {
        uint4 qq[R][1][T::NQ];
        typename T::S s[R][1];
#pragma unroll
        for (int r = 0; r < R; r++)
            load_lb<T>(qrow[r], drow[r], nb, b, qq[r][0], &s[r][0]);
        dot_block<T, NB, R, 1, SH>(qq, s, 0, b, x, xs, n_in, nt, acc);
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NB; t++)
            acc[r][t] = warp_sum(acc[r][t]);
}

/* Rows per warp of the GEMV: two for a single token and a tall matrix (twice the bytes in flight,
 * the activation loaded once for both), else one (batches: registers; 4096-row matrices: enough
 * warps to fill the GPU only with one row each). Batches of more than GEMV_MAX_NB tokens (prefill)
 * run the same kernel as a GEMM: WideR rows per warp times 8 tokens, the token groups on the
 * grid's x (fastest) axis so that the groups reading the same rows run together and share them in
 * L2. A (row, token) sum is the same bits whichever of these shapes computed it. */
#define GEMV_R2_MIN_ROWS 8192
/* rows per warp of the prefill tiling: 8 for float types (the activation loads shared by more rows:
 * d16 pp512 +5 % over 4), 4 for Q types (their dp4a dot needs the registers: d4 −11 % with 8);
 * measured 2026-12-01, bench/gpu/NOTES.md run 12 */
template <class T> struct WideR {
    enum { R = T::QX ? 4 : 8 };
};

/* The N rows' bytes (quants, then scales) fetched into L2 by a warp, lane l every 32nd 128-byte line
 * from l: the prologue of the Q types' products before pdl_wait() (cuk_pdl.cuh). */
template <class T, int N>
__device__ static inline void pf_rows(const uint8_t *const *qr, const uint8_t *const *dr, int64_t nb, int lane)
{
    const int64_t qb = nb * (16 * T::NQ), db = T::HAS_D ? (int64_t)T::sbytes(nb) : 0;
#pragma unroll
    for (int i = 0; i < N; i++) {
        for (int64_t o = (int64_t)lane * 128; o < qb; o += 32 * 128)
            pdl_prefetch(qr[i] + o);
        for (int64_t o = (int64_t)lane * 128; o < db; o += 32 * 128)
            pdl_prefetch(dr[i] + o);
    }
}

/* output r of token t (MODE: cuk.h's enum cuk_mode) */
template <int MODE>
__device__ static inline void gemv_store(void *y, float thr, float *y1, float *y2, int64_t n0, int64_t n1,
                                         int64_t n_out, int64_t t, int64_t r, float v)
{
    const int64_t o = t * n_out + r;
    if (MODE == CUK_SPLIT3) { /* rows [0, n0) → y, [n0, n0 + n1) → y1, the rest → y2 */
        if (r < n0)
            ((float *)y)[t * n0 + r] = v;
        else if (r < n0 + n1)
            y1[t * n1 + r - n0] = v;
        else
            y2[t * (n_out - n0 - n1) + r - n0 - n1] = v;
    } else if (MODE == CUK_SET)
        ((float *)y)[o] = v;
    else if (MODE == CUK_ADD)
        ((float *)y)[o] += v;
    else if (MODE == CUK_RELU)
        ((float *)y)[o] = v > 0.0f ? v : 0.0f;
    else
        ((uint8_t *)y)[o] = v >= thr;
}

template <class T, int NB, int MODE, int R, bool TG_X>
__global__ void __launch_bounds__(128) k_gemv(const uint8_t *__restrict__ q, const uint8_t *__restrict__ d,
                                              int64_t n_in, int64_t n_out, const uint8_t *__restrict__ x, int64_t xs,
                                              void *y, float thr, int B, float *y1, float *y2, int64_t n0, int64_t n1)
{
    CUK_TRACE_BLOCK(CUK_F_k_gemv);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t r0 = ((int64_t)(TG_X ? blockIdx.y : blockIdx.x) * GEMV_ROWS + warp) * R;
    const int t0 = (int)(TG_X ? blockIdx.x : blockIdx.y) * NB, nt = B - t0 < NB ? B - t0 : NB;
    if (r0 >= n_out)
        return;
    const int64_t nb = n_in / T::E;
    const uint8_t *qr[R], *dr[R];
#pragma unroll
    for (int i = 0; i < R; i++) { /* a row past the end repeats the last one, and is not stored */
        const int64_t r = r0 + i < n_out ? r0 + i : n_out - 1;
        qr[i] = q + r * nb * (16 * T::NQ);
        dr[i] = T::HAS_D ? d + r * T::sbytes(nb) : nullptr;
    }
    pf_rows<T, R>(qr, dr, nb, lane); /* the weights on their way before the activation can be read */
    pdl_wait();
    pdl_trigger();
    float acc[R][NB];
    dot_rows<T, NB, R>(qr, dr, nb, x + (int64_t)t0 * xs, xs, n_in, nt, lane, acc);
    if (lane)
        return;
#pragma unroll
    for (int i = 0; i < R; i++) {
        const int64_t r = r0 + i;
        if (r >= n_out)
            break;
#pragma unroll
        for (int tl = 0; tl < NB; tl++) {
            if (tl >= nt)
                break;
            gemv_store<MODE>(y, thr, y1, y2, n0, n1, n_out, t0 + tl, r, acc[i][tl]);
        }
    }
}

/* A warp's 32 values (lane l: element 32 blk + l of a row of n_in) → int8 with (d, d·Σq) in row, the
 * CPU's Q8_0 rounding (d stored as f16): both producers of the Q types' activation rows (k_quant_x,
 * k_norm_quant_x) quantize through this one sequence of operations. */
template <int N>
__device__ static inline void q8_warp_store_n(const float *v, uint8_t *row, int64_t n_in, const int64_t *blk, int lane)
{
    /* N blocks side by side (their shuffles in flight together), each block's operations as for one */
    float amax[N];
#pragma unroll
    for (int k = 0; k < N; k++)
        amax[k] = fabsf(v[k]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
        for (int k = 0; k < N; k++)
            amax[k] = fmaxf(amax[k], __shfl_xor_sync(0xffffffffu, amax[k], o));
    float dd[N];
    int qv[N], sum[N];
#pragma unroll
    for (int k = 0; k < N; k++) {
        dd[k] = amax[k] / 127.0f;
        const float id = dd[k] > 0.0f ? 1.0f / dd[k] : 0.0f;
        sum[k] = qv[k] = __float2int_rn(v[k] * id);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
        for (int k = 0; k < N; k++)
            sum[k] += __shfl_xor_sync(0xffffffffu, sum[k], o);
#pragma unroll
    for (int k = 0; k < N; k++) {
        row[blk[k] * 32 + lane] = (uint8_t)(int8_t)qv[k];
        if (lane == 0) {
            const float dh = __half2float(__float2half_rn(dd[k]));
            ((float2 *)(row + n_in))[blk[k]] = make_float2(dh, dh * (float)sum[k]);
        }
    }
}

__device__ static inline void q8_warp_store(float v, uint8_t *row, int64_t n_in, int64_t blk, int lane)
{
    q8_warp_store_n<1>(&v, row, n_in, &blk, lane);
}

/* Q types: x (nt rows of n_in) → int8 blocks with (d, d·Σq), a warp a block (q8_warp_store). */
__global__ void k_quant_x(const float *__restrict__ x, int64_t n_in, uint8_t *__restrict__ out, int64_t xs)
{
    CUK_TRACE_BLOCK(CUK_F_k_quant_x);
    pdl_enter();
    const int tok = blockIdx.y, lane = threadIdx.x & 31;
    const int64_t blk = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    if (blk >= n_in / 32)
        return;
    q8_warp_store(x[(int64_t)tok * n_in + blk * 32 + lane], out + (int64_t)tok * xs, n_in, blk, lane);
}

/* RMSNorm (cuk_rmsnorm's operations, a block of 256 threads) and k_quant_x's quantization of the
 * normalized row in one kernel: the bits of the two launches, one launch. Block (x, token y)
 * quantizes the row's 32-element blocks 8x .. 8x + 7, a warp each, as k_quant_x spreads them; each
 * block computes the row's sum of squares itself (the same operations in every block: the same
 * scale), which costs a 16 KB read from L2 instead of a launch and a round trip. */
__global__ void __launch_bounds__(256) k_norm_quant_x(const float *__restrict__ x, const float *__restrict__ w,
                                                     int64_t n_in, float eps, uint8_t *__restrict__ out, int64_t xs)
{
    CUK_TRACE_BLOCK(CUK_F_k_norm_quant_x);
    __shared__ float sh[32];
    const int tok = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t blk = (int64_t)blockIdx.x * 8 + warp;
    const float wi = blk < n_in / 32 ? w[blk * 32 + lane] : 0.0f; /* a weight: read before the wait */
    pdl_enter();
    const float *xr = x + (int64_t)tok * n_in;
    float v[NORM_RB];
    float ss = sumsq_strided(xr, n_in, threadIdx.x, blockDim.x, v);
    ss = block_sum(ss, sh);
    const float scale = 1.0f / sqrtf(ss / (float)n_in + eps);
    uint8_t *row = out + (int64_t)tok * xs;
    if (blk < n_in / 32)
        q8_warp_store(__fmul_rn(__fmul_rn(xr[blk * 32 + lane], scale), wi) /* cuk_rmsnorm's xn[i] */, row, n_in, blk,
                      lane);
}

/* ---- one token, a 32-element Q type: the activation quantized by the product's own blocks ----
 *
 * In the decode chain every Q product was two launches: k_quant_x (or k_norm_quant_x) and k_gemv,
 * and a launch boundary costs ~2.7 µs there (bench_kern, H200 2026-12-02: a 256 × 256 Q4_0 product
 * 5.4 µs, an F16 one in one launch 2.8). k_gemv's 128-thread blocks cannot quantize the row
 * themselves (1 500 blocks each quantizing 4096 elements lost 5-12 %), so this kernel has few, large
 * blocks — Q1_CTAS_PER_SM of Q1_THREADS a SM at most — that each quantize the row into shared memory
 * once (k_quant_x's or k_norm_quant_x's operations, the same bits), then stream their rows with
 * k_gemv's dot (dot_rows: a row's sum in the same order). Block c's warp w takes the R-row units
 * c + G (w + Q1_WARPS k), so every block gets the same number of units ±1. */
struct split3 {
    float *y1, *y2;
    int64_t n0, n1;
};

/* h handed out by the predictor's first product (cuk_gemv_hand_h): its input x (n bytes) into h, then
 * *key = seq, all in mapped host memory; h NULL: none */
struct q1_hand {
    uint8_t *h;
    int64_t n;
    uint64_t *key;
    uint64_t seq;
    int extra; /* set by the launch: one more block than the rows need, which hands x out */
};

#define Q1_THREADS 512
#define Q1_WARPS (Q1_THREADS / 32)
#ifndef Q1_CTAS_PER_SM
#define Q1_CTAS_PER_SM 1 /* blocks an SM: one leaves room for the next product's blocks (PDL) */
#endif
#define Q1_QN 4 /* quantization blocks a warp handles side by side */

template <class T, int R>
__device__ static inline void q1_rows(const uint8_t *q, const uint8_t *d, int64_t nb, int64_t n_out, int64_t unit,
                                      const uint8_t **qr, const uint8_t **dr)
{
#pragma unroll
    for (int i = 0; i < R; i++) { /* a row past the end repeats the last one, and is not stored */
        const int64_t r = unit * R + i < n_out ? unit * R + i : n_out - 1;
        qr[i] = q + r * nb * (16 * T::NQ);
        dr[i] = T::HAS_D ? d + r * T::sbytes(nb) : nullptr;
    }
}

/* The token's row into shared memory as the two-launch path's first launch writes it: k_quant_x's
 * operations, or (NORM) k_norm_quant_x's — its sum of squares over 256 threads and then its 8 warps
 * in order, the normalized element, the quantization; Q1_QN blocks a warp at once. Ends with the
 * block's barrier. */
template <bool NORM>
__device__ static inline void q1_quantize(const float *__restrict__ x, const float *__restrict__ nw, float eps,
                                          int64_t n_in, uint8_t *xq, int warp, int lane)
{
    float scale = 1.0f;
    if constexpr (NORM) { /* k_norm_quant_x's sum of squares: 256 threads, then its 8 warps in order */
        __shared__ float sh[8];
        float ss = 0.0f; /* single loads, not sumsq_strided's batches: batched here, d4 lost 1.1 % (H100, t6) */
        if (threadIdx.x < 256)
            for (int64_t i = threadIdx.x; i < n_in; i += 256)
                ss = __fmaf_rn(x[i], x[i], ss);
        ss = warp_sum(ss);
        if (lane == 0 && warp < 8)
            sh[warp] = ss;
        __syncthreads();
        float s = 0.0f;
        for (int i = 0; i < 8; i++)
            s += sh[i];
        scale = 1.0f / sqrtf(s / (float)n_in + eps);
    }
    const int64_t nblk = n_in / 32;
    for (int64_t b0 = warp; b0 < nblk; b0 += (int64_t)Q1_WARPS * Q1_QN) {
        /* Q1_QN blocks of this warp at once (a partial group repeats its last block: the same store) */
        float v[Q1_QN];
        int64_t blk[Q1_QN];
#pragma unroll
        for (int k = 0; k < Q1_QN; k++) {
            const int64_t b = b0 + (int64_t)Q1_WARPS * k;
            blk[k] = b < nblk ? b : blk[k > 0 ? k - 1 : 0];
            const int64_t i = blk[k] * 32 + lane;
            v[k] = NORM ? __fmul_rn(__fmul_rn(x[i], scale), nw[i]) /* cuk_rmsnorm's xn[i] */ : x[i];
        }
        q8_warp_store_n<Q1_QN>(v, xq, n_in, blk, lane);
    }
    __syncthreads();
}

template <class T, int MODE, int R, bool NORM>
__global__ void __launch_bounds__(Q1_THREADS, Q1_CTAS_PER_SM)
    k_gemv_q1(const uint8_t *__restrict__ q, const uint8_t *__restrict__ d, int64_t n_in, int64_t n_out,
              const float *__restrict__ x, const float *__restrict__ nw, float eps, void *y, float thr, float *y1,
              float *y2, int64_t n0, int64_t n1, q1_hand hh)
{
    CUK_TRACE_BLOCK(CUK_F_k_gemv_q1);
    extern __shared__ uint4 q1_sh[]; /* the token's int8 row, then (d, d·Σq) per 32 elements: prep_x's layout */
    uint8_t *xq = (uint8_t *)q1_sh;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    /* hh.extra: the last block only hands x out (the others take the units), so fc1's rows do not
     * wait for it (a block doing both made fc1 2 µs longer, H200 2026-12-03) */
    const bool hand_block = hh.h && hh.extra && blockIdx.x == gridDim.x - 1;
    const int64_t G = (int64_t)gridDim.x - (hh.h && hh.extra ? 1 : 0);
    const int64_t nb = n_in / T::E, units = (n_out + R - 1) / R, step = G * Q1_WARPS;
    int64_t unit = hand_block ? units : blockIdx.x + G * warp;
    const uint8_t *qr[R], *dr[R];
    if (unit < units) { /* the first unit's weights on their way before the activation can be read */
        q1_rows<T, R>(q, d, nb, n_out, unit, qr, dr);
        pf_rows<T, R>(qr, dr, nb, lane);
    }
    pdl_wait();
    pdl_trigger();
    if (hand_block) {
        put_bytes(hh.h, (const uint8_t *)x, hh.n);
        put_key(hh.key, hh.seq);
        return;
    }
    q1_quantize<NORM>(x, nw, eps, n_in, xq, warp, lane);
    for (; unit < units; unit += step) {
        q1_rows<T, R>(q, d, nb, n_out, unit, qr, dr);
        if (unit + step < units) { /* the next unit's weights into L2 while this one streams */
            const uint8_t *qn[R], *dn[R];
            q1_rows<T, R>(q, d, nb, n_out, unit + step, qn, dn);
            pf_rows<T, R>(qn, dn, nb, lane);
        }
        float acc[R][1];
        dot_rows<T, 1, R, true>(qr, dr, nb, xq, 0, n_in, 1, lane, acc);
        if (lane)
            continue;
#pragma unroll
        for (int i = 0; i < R; i++)
            if (unit * R + i < n_out)
                gemv_store<MODE>(y, thr, y1, y2, n0, n1, n_out, 0, unit * R + i, acc[i][0]);
    }
    if (hh.h && !hh.extra && blockIdx.x == gridDim.x - 1) { /* no block to spare: the last, after its rows */
        put_bytes(hh.h, (const uint8_t *)x, hh.n);
        put_key(hh.key, hh.seq);
    }
}

/* PINFER_CUDA_Q1=0: the two launches everywhere (A/B benchmarks); else (default) one launch for the
 * dense products. The GLU over a gathered row list keeps the two: as one launch it lost s4 1.3 % (H200,
 * 2026-12-02 n6) and 3.0 % (H100, 2026-12-05, with k_norm_quant_x's weight read before its wait), so
 * that form was removed. Read once (a decode graph must not change kernels between captures). */
static bool q1_on(void)
{
    static const bool on = env_on_unless_0("PINFER_CUDA_Q1");
    return on;
}

/* PINFER_CUDA_Q1_SKIP: products that keep the two launches even where one would do, for A/B
 * benchmarks of one product at a time: letters q (the norm + q/k/v), r (fc1, RELU), m (fc2, MASK), g
 * (the GLU); read once, as q1_on */
static bool q1_skip(char product)
{
    static const char *skip = nullptr;
    static bool read = false;
    if (!read) {
        skip = getenv("PINFER_CUDA_Q1_SKIP");
        read = true;
    }
    return skip && strchr(skip, product);
}

template <class T> static constexpr bool q1_type() { return T::QX && T::GQ == 32; }

/* shared memory of a q1 block: the int8 row and its (d, d·Σq) per 32 elements */
static size_t q1_smem(int64_t n_in) { return (size_t)((n_in + n_in / 32 * 8 + 15) / 16 * 16); }

/* the q1 kernels apply: one token, a 32-element Q type, a row that fits in shared memory */
static bool q1_fits(int B, const struct cuk_w *w) { return B == 1 && q1_on() && w->n_in % 32 == 0 && q1_smem(w->n_in) <= 48 * 1024; }

template <class T, int MODE, int R, bool NORM>
static int q1_launch_r(const struct cuk_w *w, const float *x, const float *nw, float eps, void *y, float thr,
                       const struct split3 *sp, cudaStream_t st, const q1_hand *hh)
{
    const int64_t units = (w->n_out + R - 1) / R, blocks = (units + Q1_WARPS - 1) / Q1_WARPS,
                  most = (int64_t)Q1_CTAS_PER_SM * cuk_sm_count();
    const size_t smem = q1_smem(w->n_in);
    q1_hand h = hh ? *hh : q1_hand{ nullptr, 0, nullptr, 0, 0 };
    int64_t grid = blocks < most ? blocks : most;
    if (h.h && grid < most) /* a block of its own for the hand-out, on an SM the rows leave free */
        grid++, h.extra = 1;
    pdl_launch(k_gemv_q1<T, MODE, R, NORM>, dim3((unsigned)grid), dim3(Q1_THREADS), smem, st, (const uint8_t *)w->q,
               (const uint8_t *)w->d, w->n_in, w->n_out, x, nw, eps, y, thr, sp ? sp->y1 : nullptr,
               sp ? sp->y2 : nullptr, sp ? sp->n0 : (int64_t)0, sp ? sp->n1 : (int64_t)0, h);
    return launched();
}

/* rows per warp as k_gemv takes them for one token (GEMV_R1 for a tall matrix, else 1) */
template <class T, int MODE, bool NORM>
static int q1_launch_m(const struct cuk_w *w, const float *x, const float *nw, float eps, void *y, float thr,
                       const struct split3 *sp, cudaStream_t st, const q1_hand *hh = nullptr)
{
    return w->n_out >= GEMV_R2_MIN_ROWS ? q1_launch_r<T, MODE, GEMV_R1, NORM>(w, x, nw, eps, y, thr, sp, st, hh)
                                        : q1_launch_r<T, MODE, 1, NORM>(w, x, nw, eps, y, thr, sp, st, hh);
}

/* the one-launch product of one token; 1 where it does not apply (the caller takes the two) */
template <class T, bool NORM>
static int q1_gemv(const struct cuk_w *w, const float *x, const float *nw, float eps, int B, void *y, int mode,
                   float thr, const struct split3 *sp, cudaStream_t st, const q1_hand *hh = nullptr)
{
    if constexpr (!q1_type<T>())
        return 1;
    else {
        if (!q1_fits(B, w))
            return 1;
        if constexpr (NORM) /* the norm comes with q, k and v only */
            return mode == CUK_SPLIT3 && !q1_skip('q') ? q1_launch_m<T, CUK_SPLIT3, true>(w, x, nw, eps, y, thr, sp, st)
                                                       : 1;
        /* Without the norm, only the predictor's products (fc1 RELU, fc2 MASK): measured on the H200
         * (bench_kern, 2026-12-02) fc1 6.4-7.7 → 4.5 µs and fc2 6.4-7.7 → 5.7, but wo (ADD, 4096 rows)
         * 6.5-8.1 → 7.9 and down (ADD, 11 008 columns to quantize) 13.1 → 17.6: with one block an SM
         * each warp streams its rows one after the other where k_gemv's 128-thread blocks run them
         * side by side, and down's 344 quantization blocks take each warp 6 rounds. */
        switch (mode) {
        case CUK_RELU: return q1_skip('r') ? 1 : q1_launch_m<T, CUK_RELU, false>(w, x, nw, eps, y, thr, sp, st, hh);
        case CUK_MASK: return q1_skip('m') ? 1 : q1_launch_m<T, CUK_MASK, false>(w, x, nw, eps, y, thr, sp, st, hh);
        default: return 1;
        }
    }
}

/* Super-block types (Q2_K..Q6_K, IQ4_XS): x → int8 as the CPU's Q8_K, so that both backends dot
 * the same integers: per 256 elements the one of largest |x| (the first of equals) gives
 * iscale = -127 / max, q = round-to-even(iscale x) (at most 127), d = 1 / iscale in f32; the same
 * layout as k_quant_x, every 32-block's (d, d·Σq) with its super-block's d. One warp per
 * super-block; lane l holds elements l + 32 k (k < 8). */
__global__ void k_quant_x8k(const float *__restrict__ x, int64_t n_in, uint8_t *__restrict__ out, int64_t xs)
{
    CUK_TRACE_BLOCK(CUK_F_k_quant_x8k);
    pdl_enter();
    const int tok = blockIdx.y, lane = threadIdx.x & 31;
    const int64_t sb = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    if (sb >= n_in / 256)
        return;
    const float *xr = x + (int64_t)tok * n_in + sb * 256;
    float v[8], amax = 0.0f, mx = 0.0f;
    int idx = 0x7fffffff;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        v[k] = xr[lane + 32 * k];
        const float ax = fabsf(v[k]);
        if (ax > amax)
            amax = ax, mx = v[k], idx = lane + 32 * k;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) { /* (amax desc, index asc): every lane ends with the first maximum */
        const float oa = __shfl_xor_sync(0xffffffffu, amax, o), om = __shfl_xor_sync(0xffffffffu, mx, o);
        const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
        if (oa > amax || (oa == amax && oi < idx))
            amax = oa, mx = om, idx = oi;
    }
    uint8_t *row = out + (int64_t)tok * xs;
    const float iscale = amax > 0.0f ? __fdiv_rn(-127.0f, mx) : 0.0f;
    const float d = amax > 0.0f ? __fdiv_rn(1.0f, iscale) : 0.0f;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const int t = amax > 0.0f ? __float2int_rn(__fmul_rn(iscale, v[k])) : 0, q = t < 127 ? t : 127;
        row[sb * 256 + lane + 32 * k] = (uint8_t)(int8_t)q;
        int sum = q;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (lane == 0)
            ((float2 *)(row + n_in))[sb * 8 + k] = make_float2(d, d * (float)sum);
    }
}

/* the Q types' int8 row or the F16/BF16 tensor-core kernels' split row (cuk_mma.h), whichever is larger */
extern "C" size_t cuk_xq_row_bytes(int64_t n_in)
{
    const size_t q8 = (size_t)((n_in + n_in / 32 * 8 + 15) / 16 * 16), h = cuk_mma_x_row_bytes(n_in);
    return q8 > h ? q8 : h;
}

/* The activation rows as the kernels of type T read them: f32 as is, or quantized into xq. */
template <class T>
static int prep_x(const float *x, int64_t n_in, int nt, void *xq, const uint8_t **xr, int64_t *xs, cudaStream_t st)
{
    if constexpr (T::QX) {
        if (!xq)
            return -(int)cudaErrorInvalidValue;
        *xs = (int64_t)cuk_xq_row_bytes(n_in);
        if constexpr (T::GQ == 256) /* the CPU dots these types against Q8_K */
            pdl_launch(k_quant_x8k, dim3((unsigned)((n_in / 256 + 7) / 8), (unsigned)nt), dim3(256), 0, st, x, n_in,
                       (uint8_t *)xq, *xs);
        else
            pdl_launch(k_quant_x, dim3((unsigned)((n_in / 32 + 7) / 8), (unsigned)nt), dim3(256), 0, st, x, n_in,
                       (uint8_t *)xq, *xs);
        *xr = (const uint8_t *)xq;
        return launched();
    } else {
        *xr = (const uint8_t *)x;
        *xs = n_in * (int64_t)sizeof(float);
        return 0;
    }
}

/* B ≤ NB tokens: one token group, rows on x. wide: ⌈B / NB⌉ groups on x, WideR rows per warp. */
template <class T, int NB>
static int gemv_launch(const struct cuk_w *w, const uint8_t *x, int64_t xs, int B, void *y, int mode, float thr,
                       const struct split3 *sp, bool wide, cudaStream_t st)
{
    constexpr int R2 = NB == 1 ? GEMV_R1 : 1;
    const bool two = R2 > 1 && w->n_out >= GEMV_R2_MIN_ROWS;
    constexpr int WR = WideR<T>::R;
    const int64_t per_block = GEMV_ROWS * (wide ? WR : two ? R2 : 1);
    const unsigned rows = (unsigned)((w->n_out + per_block - 1) / per_block), groups = (unsigned)((B + NB - 1) / NB);
    const uint8_t *q = (const uint8_t *)w->q;
    const uint8_t *d = (const uint8_t *)w->d;
    float *y1 = sp ? sp->y1 : nullptr, *y2 = sp ? sp->y2 : nullptr;
    const int64_t n0 = sp ? sp->n0 : 0, n1 = sp ? sp->n1 : 0;
#define GEMV_L(M)                                                                                                      \
    do {                                                                                                               \
        if constexpr (NB == GEMV_MAX_NB) { /* only the 8-token kernel is tiled */                                   \
            if (wide)                                                                                                  \
                pdl_launch(k_gemv<T, NB, M, WR, true>, dim3(groups, rows), dim3(128), 0, st, q, d, w->n_in, w->n_out, \
                           x, xs, y, thr, B, y1, y2, n0, n1);                                                  \
        }                                                                                                              \
        if (wide)                                                                                                      \
            break;                                                                                                     \
        if (two)                                                                                                       \
            pdl_launch(k_gemv<T, NB, M, R2, false>, dim3(rows, groups), dim3(128), 0, st, q, d, w->n_in, w->n_out, x, \
                       xs, y, thr, B, y1, y2, n0, n1);                                                         \
        else                                                                                                           \
            pdl_launch(k_gemv<T, NB, M, 1, false>, dim3(rows, groups), dim3(128), 0, st, q, d, w->n_in, w->n_out, x,  \
                       xs, y, thr, B, y1, y2, n0, n1);                                                         \
    } while (0)
    switch (mode) {
    case CUK_SET: GEMV_L(CUK_SET); break;
    case CUK_ADD: GEMV_L(CUK_ADD); break;
    case CUK_RELU: GEMV_L(CUK_RELU); break;
    case CUK_MASK: GEMV_L(CUK_MASK); break;
    default: GEMV_L(CUK_SPLIT3); break;
    }
#undef GEMV_L
    return launched();
}

template <class T>
static int gemv_prepared(const struct cuk_w *w, const uint8_t *xr, int64_t xs, int B, void *y, int mode, float thr,
                         const struct split3 *sp, cudaStream_t st);

/* Every token's activation prepared at once (xq holds B rows), then one launch. */
template <class T>
static int gemv_t(const struct cuk_w *w, const float *x, int B, void *y, int mode, float thr, void *xq,
                  const struct split3 *sp, cudaStream_t st)
{
    if (B < 1)
        return 0;
    int rc = q1_gemv<T, false>(w, x, nullptr, 0.0f, B, y, mode, thr, sp, st);
    if (rc <= 0) /* one launch: done (or failed) */
        return rc;
    const uint8_t *xr;
    int64_t xs;
    rc = prep_x<T>(x, w->n_in, B, xq, &xr, &xs, st);
    if (rc)
        return rc;
    return gemv_prepared<T>(w, xr, xs, B, y, mode, thr, sp, st);
}

/* the launch on activations already prepared (prep_x's layout) */
template <class T>
static int gemv_prepared(const struct cuk_w *w, const uint8_t *xr, int64_t xs, int B, void *y, int mode, float thr,
                         const struct split3 *sp, cudaStream_t st)
{
    return B == 1   ? gemv_launch<T, 1>(w, xr, xs, B, y, mode, thr, sp, false, st)
           : B == 2 ? gemv_launch<T, 2>(w, xr, xs, B, y, mode, thr, sp, false, st)
           : B <= 4 ? gemv_launch<T, 4>(w, xr, xs, B, y, mode, thr, sp, false, st)
                    : gemv_launch<T, GEMV_MAX_NB>(w, xr, xs, B, y, mode, thr, sp, B > GEMV_MAX_NB, st);
}

extern "C" int cuk_gemv(const struct cuk_w *w, const float *x, int B, void *y, enum cuk_mode mode, float thr, void *xq,
                        void *st)
{
    if (mode == CUK_SPLIT3)
        return -(int)cudaErrorInvalidValue;
    if (cuk_mma_on(w->type)) { /* F16 / BF16: the tensor-core kernels (decode: streamed, the same bits) */
        if (B == 1 && cuk_mmv_level() >= 2 && cuk_mmv_fits(w, 1))
            return cuk_mmv_gemv(w, x, B, y, mode, thr, nullptr, nullptr, 0, 0, st);
        return cuk_mma_gemv(w, x, B, y, mode, thr, nullptr, nullptr, 0, 0, xq, st);
    }
    CUK_DISPATCH(w->type, return gemv_t<T>(w, x, B, y, mode, thr, xq, nullptr, S(st)));
    return 0;
}

extern "C" int cuk_gemv_hand_h(const struct cuk_w *w, const float *x, int B, void *y, enum cuk_mode mode, float thr,
                               void *h, int64_t n_h, uint64_t *key, uint64_t seq, void *st)
{
    if (mode != CUK_RELU && mode != CUK_MASK)
        return 1;
    const q1_hand hh = { (uint8_t *)h, n_h, key, seq, 0 };
    int rc = 1;
    CUK_DISPATCH_OR(w->type, return 1,
                    rc = q1_gemv<T, false>(w, x, nullptr, 0.0f, B, y, mode, thr, nullptr, S(st), &hh));
    return rc;
}

extern "C" int cuk_gemv_split3(const struct cuk_w *w, const float *x, int B, float *y0, int64_t n0, float *y1,
                               int64_t n1, float *y2, void *xq, void *st)
{
    if (cuk_mma_on(w->type)) {
        if (B == 1 && cuk_mmv_level() >= 2 && cuk_mmv_fits(w, 1))
            return cuk_mmv_gemv(w, x, B, y0, CUK_SPLIT3, 0.0f, y1, y2, n0, n1, st);
        return cuk_mma_gemv(w, x, B, y0, CUK_SPLIT3, 0.0f, y1, y2, n0, n1, xq, st);
    }
    const struct split3 sp = { y1, y2, n0, n1 };
    CUK_DISPATCH(w->type, return gemv_t<T>(w, x, B, y0, CUK_SPLIT3, 0.0f, xq, &sp, S(st)));
    return 0;
}

/* ---- gated FFN rows ---- */

/* Dense (idx NULL): warp w's J neurons j for a group of up to NB tokens (B in all). Indexed: token
 * (group) blockIdx.y, its j-th listed row (NB 1, J 1). TG_X: the token groups on x, as the wide
 * GEMV has them. Each (neuron, token) gate and up sum is the same bits in every shape. */
template <class T, int NB, int J, bool TG_X>
__global__ void __launch_bounds__(128) k_glu(const uint8_t *__restrict__ gq, const uint8_t *__restrict__ gd,
                                             const uint8_t *__restrict__ uq, const uint8_t *__restrict__ ud,
                                             int64_t n_in, int64_t n_out, const uint8_t *__restrict__ x, int64_t xs,
                                             float *act, int kind, const int32_t *__restrict__ idx,
                                             const int32_t *__restrict__ cnt, int64_t idx_stride, bool compact, int B)
{
    CUK_TRACE_BLOCK(CUK_F_k_glu);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t j0 = ((int64_t)(TG_X ? blockIdx.y : blockIdx.x) * GEMV_ROWS + warp) * J;
    const int grp = (int)(TG_X ? blockIdx.x : blockIdx.y);
    const int tok = idx ? grp : grp * NB, nt = idx ? 1 : (B - tok < NB ? B - tok : NB);
    if (idx)
        pdl_wait(); /* the listed rows are the previous kernel's output */
    const int64_t n = idx && cnt ? cnt[tok] : n_out;
    if (j0 >= n)
        return;
    const uint8_t *xt = x + (int64_t)tok * xs;
    const int64_t nb = n_in / T::E;
    const uint8_t *qr[2 * J], *dr[2 * J];
    int64_t rr[J];
#pragma unroll
    for (int i = 0; i < J; i++) { /* a neuron past the end repeats the last one, and is not stored */
        const int64_t j = j0 + i < n ? j0 + i : n - 1;
        const int64_t r = idx ? idx[tok * idx_stride + j] : j, rq = r * nb * (16 * T::NQ);
        rr[i] = r;
        qr[2 * i] = gq + rq, qr[2 * i + 1] = uq + rq;
        const int64_t rd = r * T::sbytes(nb);
        dr[2 * i] = T::HAS_D ? gd + rd : nullptr, dr[2 * i + 1] = T::HAS_D ? ud + rd : nullptr;
    }
    pf_rows<T, 2 * J>(qr, dr, nb, lane);
    pdl_wait();
    pdl_trigger();
    float acc[2 * J][NB];
    dot_rows<T, NB, 2 * J>(qr, dr, nb, xt, xs, n_in, nt, lane, acc);
    if (lane)
        return;
#pragma unroll
    for (int i = 0; i < J; i++) {
        const int64_t j = j0 + i;
        if (j >= n)
            break;
#pragma unroll
        for (int t = 0; t < NB; t++) {
            if (t >= nt)
                break;
            const int64_t row = (int64_t)(tok + t) * (idx ? idx_stride : n_out);
            act[row + (compact ? j : rr[i])] = glu(kind, acc[2 * i][t], acc[2 * i + 1][t]);
        }
    }
}

#define GLU_WIDE_J 2 /* neurons per warp in the wide (prefill) launch */

template <class T>
static int glu_prepared(const struct cuk_w *g, const struct cuk_w *u, const uint8_t *xr, int64_t xs, int B, float *act,
                        int kind, const int32_t *idx, const int32_t *cnt, int64_t idx_stride, bool compact,
                        cudaStream_t st);

template <class T>
static int glu_t(const struct cuk_w *g, const struct cuk_w *u, const float *x, int B, float *act, int kind,
                 const int32_t *idx, const int32_t *cnt, int64_t idx_stride, bool compact, void *xq, cudaStream_t st)
{
    const uint8_t *xr;
    int64_t xs;
    if (B < 1)
        return 0;
    int rc = prep_x<T>(x, g->n_in, B, xq, &xr, &xs, st);
    if (rc)
        return rc;
    return glu_prepared<T>(g, u, xr, xs, B, act, kind, idx, cnt, idx_stride, compact, st);
}

template <class T>
static int glu_prepared(const struct cuk_w *g, const struct cuk_w *u, const uint8_t *xr, int64_t xs, int B, float *act,
                        int kind, const int32_t *idx, const int32_t *cnt, int64_t idx_stride, bool compact,
                        cudaStream_t st)
{
    const uint8_t *gq = (const uint8_t *)g->q, *uq = (const uint8_t *)u->q;
    const uint8_t *gd = (const uint8_t *)g->d, *ud = (const uint8_t *)u->d;
    const unsigned gx = (unsigned)((g->n_out + GEMV_ROWS - 1) / GEMV_ROWS);
    if (idx) {
        pdl_launch(k_glu<T, 1, 1, false>, dim3(gx, (unsigned)B), dim3(128), 0, st, gq, gd, uq, ud, g->n_in, g->n_out, xr,
                   xs, act, kind, idx, cnt, idx_stride, compact, B);
        return launched();
    }
#define GLU_L(NB)                                                                                                      \
    pdl_launch(k_glu<T, NB, 1, false>, dim3(gx, 1), dim3(128), 0, st, gq, gd, uq, ud, g->n_in, g->n_out, xr, xs, act, \
               kind, (const int32_t *)nullptr, (const int32_t *)nullptr, (int64_t)0, false, B)
    if (B == 1)
        GLU_L(1);
    else if (B == 2)
        GLU_L(2);
    else if (B <= 4)
        GLU_L(4);
    else if (B <= GEMV_MAX_NB)
        GLU_L(GEMV_MAX_NB);
    else {
        const unsigned rows = (unsigned)((g->n_out + GEMV_ROWS * GLU_WIDE_J - 1) / (GEMV_ROWS * GLU_WIDE_J));
        pdl_launch(k_glu<T, GEMV_MAX_NB, GLU_WIDE_J, true>, dim3((unsigned)((B + GEMV_MAX_NB - 1) / GEMV_MAX_NB), rows),
                   dim3(128), 0, st, gq, gd, uq, ud, g->n_in, g->n_out, xr, xs, act, kind, (const int32_t *)nullptr,
                   (const int32_t *)nullptr, (int64_t)0, false, B);
    }
#undef GLU_L
    return launched();
}

extern "C" int cuk_glu(const struct cuk_w *gate, const struct cuk_w *up, const float *x, int B, float *act,
                       int act_kind, const int32_t *idx, const int32_t *cnt, int64_t idx_stride, bool compact,
                       void *xq, void *st)
{
    if (gate->type != up->type || gate->n_in != up->n_in || gate->n_out != up->n_out)
        return -(int)cudaErrorInvalidValue;
    if (cuk_mma_on(gate->type)) {
        if (((idx && B <= 8) || (B == 1 && cuk_mmv_level() >= 2)) && cuk_mmv_fits(gate, 2))
            return cuk_mmv_glu(gate, up, x, B, act, act_kind, idx, cnt, idx_stride, compact, st);
        return cuk_mma_glu(gate, up, x, B, act, act_kind, idx, cnt, idx_stride, compact, xq, st);
    }
    CUK_DISPATCH(gate->type, return glu_t<T>(gate, up, x, B, act, act_kind, idx, cnt, idx_stride, compact, xq, S(st)));
    return 0;
}

/* ---- RMSNorm + product for the Q types: the norm and the activation's quantization in one launch ----
 * (d4 decode on the H200, 2026-12-02, same call: 454 tok/s against 377 with k_rmsnorm's one block a
 * token and the quantizer as two launches: the two were ~14 µs of every layer's chain) */

template <class T> static constexpr bool normq_ok() { return T::QX && T::GQ == 32; }

static int norm_quant(const float *x, const float *nw, float eps, int B, int64_t n_in, void *xq, int64_t *xs,
                      cudaStream_t st)
{
    *xs = (int64_t)cuk_xq_row_bytes(n_in);
    pdl_launch(k_norm_quant_x, dim3((unsigned)((n_in / 32 + 7) / 8), (unsigned)B), dim3(256), 0, st, x, nw, n_in, eps,
               (uint8_t *)xq, *xs);
    return launched();
}

extern "C" int cuk_normq_split3(const struct cuk_w *w, const float *x, const float *norm_w, float eps, int B, float *y0,
                                int64_t n0, float *y1, int64_t n1, float *y2, void *xq, void *st)
{
    bool ok = false;
    CUK_DISPATCH_OR(w->type, return 1, ok = normq_ok<T>());
    if (!ok || !xq || B < 1 || w->n_in % 32)
        return 1;
    const struct split3 sp = { y1, y2, n0, n1 };
    int rc = 1;
    CUK_DISPATCH(w->type, rc = q1_gemv<T, true>(w, x, norm_w, eps, B, y0, CUK_SPLIT3, 0.0f, &sp, S(st)));
    if (rc <= 0) /* one launch: done (or failed) */
        return rc;
    int64_t xs;
    rc = norm_quant(x, norm_w, eps, B, w->n_in, xq, &xs, S(st));
    if (rc)
        return rc;
    CUK_DISPATCH(w->type, if constexpr (normq_ok<T>()) return gemv_prepared<T>(w, (const uint8_t *)xq, xs, B, y0,
                                                                                  CUK_SPLIT3, 0.0f, &sp, S(st)));
    return 1;
}

/* The norm, the quantization and the gate / up rows of one token in one launch (cuk_normq_glu's two,
 * the same bits: k_glu's dot of each row, its glu()), neuron j = unit. */
template <class T>
__global__ void __launch_bounds__(Q1_THREADS, Q1_CTAS_PER_SM)
    k_glu_q1(const uint8_t *__restrict__ gq, const uint8_t *__restrict__ gd, const uint8_t *__restrict__ uq,
             const uint8_t *__restrict__ ud, int64_t n_in, int64_t n_out, const float *__restrict__ x,
             const float *__restrict__ nw, float eps, float *act, int kind)
{
    CUK_TRACE_BLOCK(CUK_F_k_glu_q1);
    extern __shared__ uint4 q1_sh[];
    uint8_t *xq = (uint8_t *)q1_sh;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t nb = n_in / T::E, step = (int64_t)gridDim.x * Q1_WARPS;
    int64_t j = blockIdx.x + (int64_t)gridDim.x * warp;
    auto rows = [&](int64_t r, const uint8_t **qr, const uint8_t **dr) {
        const int64_t rq = r * nb * (16 * T::NQ), rd = r * T::sbytes(nb);
        qr[0] = gq + rq, qr[1] = uq + rq;
        dr[0] = T::HAS_D ? gd + rd : nullptr, dr[1] = T::HAS_D ? ud + rd : nullptr;
    };
    const uint8_t *qr[2], *dr[2];
    if (j < n_out) {
        rows(j, qr, dr);
        pf_rows<T, 2>(qr, dr, nb, lane);
    }
    pdl_wait();
    pdl_trigger();
    q1_quantize<true>(x, nw, eps, n_in, xq, warp, lane);
    for (; j < n_out; j += step) {
        rows(j, qr, dr);
        if (j + step < n_out) {
            const uint8_t *qn[2], *dn[2];
            rows(j + step, qn, dn);
            pf_rows<T, 2>(qn, dn, nb, lane);
        }
        float acc[2][1];
        dot_rows<T, 1, 2, true>(qr, dr, nb, xq, 0, n_in, 1, lane, acc);
        if (lane == 0)
            act[j] = glu(kind, acc[0][0], acc[1][0]);
    }
}

/* cuk_normq_glu for one token's dense rows in one launch; 1 where it does not apply */
template <class T>
static int q1_glu(const struct cuk_w *g, const struct cuk_w *u, const float *x, const float *nw, float eps, int B,
                  float *act, int kind, cudaStream_t st)
{
    if constexpr (!q1_type<T>())
        return 1;
    else {
        if (!q1_fits(B, g) || q1_skip('g'))
            return 1;
        const int64_t most = (int64_t)Q1_CTAS_PER_SM * cuk_sm_count(), blocks = (g->n_out + Q1_WARPS - 1) / Q1_WARPS;
        pdl_launch(k_glu_q1<T>, dim3((unsigned)(blocks < most ? blocks : most)), dim3(Q1_THREADS), q1_smem(g->n_in),
                   st, (const uint8_t *)g->q, (const uint8_t *)g->d, (const uint8_t *)u->q, (const uint8_t *)u->d,
                   g->n_in, g->n_out, x, nw, eps, act, kind);
        return launched();
    }
}

extern "C" int cuk_normq_glu(const struct cuk_w *gate, const struct cuk_w *up, const float *x, const float *norm_w,
                             float eps, int B, float *act, int act_kind, const int32_t *idx, const int32_t *cnt,
                             int64_t idx_stride, bool compact, void *xq, void *st)
{
    bool ok = false;
    CUK_DISPATCH_OR(gate->type, return 1, ok = normq_ok<T>());
    if (!ok || !xq || B < 1 || gate->n_in % 32 || gate->type != up->type || gate->n_in != up->n_in ||
        gate->n_out != up->n_out)
        return 1;
    int rc = 1;
    if (!idx) /* a gathered row list keeps the two launches (q1_on) */
        CUK_DISPATCH(gate->type, rc = q1_glu<T>(gate, up, x, norm_w, eps, B, act, act_kind, S(st)));
    if (rc <= 0) /* one launch: done (or failed) */
        return rc;
    int64_t xs;
    rc = norm_quant(x, norm_w, eps, B, gate->n_in, xq, &xs, S(st));
    if (rc)
        return rc;
    CUK_DISPATCH(gate->type, if constexpr (normq_ok<T>()) return glu_prepared<T>(gate, up, (const uint8_t *)xq, xs, B,
                                                                                    act, act_kind, idx, cnt,
                                                                                    idx_stride, compact, S(st)));
    return 1;
}
/* this object's copy of the trace ring's pointers (cuk_trace.cuh; a CUK_TRACE build only) */
CUK_TRACE_SETTER(cuk_gemv_trace_set)
