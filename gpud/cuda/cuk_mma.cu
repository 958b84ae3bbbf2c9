/* cuk_mma.cu — F16 / BF16 GEMV and GEMM on mma.sync (design and numerics: cuk_mma.h).
 *
 * Fragment mapping. A 64-element chunk of K is four k16 tiles. Thread (g = lane / 4, t = lane % 4)
 * of a warp loads elements [8t, 8t + 8) and [32 + 8t, 40 + 8t) of the chunk — two 16-byte words, so
 * that each load instruction reads 64 contiguous bytes of each of 8 rows — of its rows g and g + 8
 * of the 16-row tile, and the same elements of token g's activation row. Word pair 2i, 2i + 1 of
 * those 8 32-bit words feeds k16 tile i: word 2i sits in the mma's k slots (2t, 2t + 1), word 2i + 1
 * in (2t + 8, 2t + 9), for A (rows) and B (tokens) alike. The mma then sums a permutation of the
 * chunk's products; the permutation depends on nothing but the position in K.
 *
 * Order of the sums, for one (row, token): for each K range r (cuk_mma.h), acc = 0, then for each of
 * its chunks in ascending order and each of the chunk's k16 tiles in order: acc = mma(A, B_hi, acc),
 * acc = mma(A, B_lo, acc) (the f16 mode: B_hi only); then s = acc_0, s = s + acc_r for r = 1..KS−1
 * (an empty range adds +0); that is the output. The kernels below do exactly that.
 *
 * The activation's hi = round(x), lo = round(x − hi) (f16 or bf16, round to nearest even): the
 * decode kernel converts the f32 row as it loads it (no launch of its own), the prefill kernel reads
 * it converted once per op by k_split_x; the same roundings, so the same bits. Template parameter LO:
 * true = the split (BF16 always, F16 with PINFER_CUDA_MMA_ACT=split), false = the f16 mode (cuk_mma.h;
 * F16's default): hi only, one mma a k16 tile, and the prefill scratch and stages hold hi only.
 * Every kernel takes the same LO for a type, so the bits agree across them in either mode. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "cuk_mma.h"
#include "model.h"
#include "quant.h"
}

#define KS CUK_MMA_KS
#define CH 64         /* elements of K per chunk */
#define MV_THREADS (KS * 32)
#define MM_TILE_DEFAULT 0   /* mm_tile(): the split's */
#define MM_TILE_DEFAULT16 7 /* the f16 mode's */
#define GM_MIN_B 64      /* k_mma_gm for batches larger than this */
#define MV_U_DEFAULT 2    /* mv_u() */
/* bytes per token of k_mma_mm's staged chunk: hi 128, lo 128 (LO) and 64 of padding (no bank conflicts:
 * tokens g and g + 1 of a quarter warp's 16-byte loads 64 bytes apart modulo 128) */
#define MM_TOKB(LO) ((LO) ? 320 : 192)

#include "cuk_mma_dev.cuh" /* launched and S (cuk_launch.cuh), H2, split4, mma, wd, mma_chunk, mout and its epilogues, cp.async, elem */
#include "cuk_pdl.cuh"


extern "C" bool cuk_mma_type(uint32_t type) { return type == PI_TYPE_F16 || type == PI_TYPE_BF16; }

extern "C" bool cuk_mma_on(uint32_t type)
{
    static int on = -1; /* read once: a decode graph must not change kernels between captures */
    if (on < 0) {
        const char *e = getenv("PINFER_CUDA_MMA");
        on = !(e && strcmp(e, "0") == 0);
    }
    return on && cuk_mma_type(type);
}

extern "C" bool cuk_mma_act16(uint32_t type)
{
    static int on = -1; /* read once, as PINFER_CUDA_MMA */
    if (on < 0) {
        const char *e = getenv("PINFER_CUDA_MMA_ACT");
        on = !(e && strcmp(e, "split") == 0); /* the f16 mode unless the split is asked for */
    }
    return on && type == PI_TYPE_F16;
}

extern "C" size_t cuk_mma_x_row_bytes(int64_t n_in) { return (size_t)(4 * n_in + 16); }

/* ---- the activation split: x = hi + lo ---- */

/* x (B, K) f32 → rows of xs bytes: hi [K], lo [K] (16-bit; LO false: hi only); 4 elements a thread */
template <bool BF, bool LO>
__global__ void k_split_x(const float *__restrict__ x, int64_t K, uint8_t *__restrict__ xh, int64_t xs)
{
    CUK_TRACE_BLOCK(CUK_F_k_split_x);
    const int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (i >= K)
        return;
    const float4 v = *(const float4 *)(x + (int64_t)blockIdx.y * K + i);
    uint32_t hi[2], lo[2];
    split4<BF, LO>(v, hi, lo);
    uint32_t *row = (uint32_t *)(xh + (int64_t)blockIdx.y * xs);
    row[i / 2] = hi[0], row[i / 2 + 1] = hi[1];
    if constexpr (LO)
        row[(K + i) / 2] = lo[0], row[(K + i) / 2 + 1] = lo[1];
}

template <bool BF, bool LO>
static int split_x(const float *x, int64_t K, int B, void *xh, cudaStream_t st)
{
    k_split_x<BF, LO><<<dim3((unsigned)((K / 4 + 255) / 256), (unsigned)B), 256, 0, st>>>(
        x, K, (uint8_t *)xh, (int64_t)cuk_mma_x_row_bytes(K));
    return launched();
}

/* ---- the mma and the fragments: cuk_mma_dev.cuh ---- */

__device__ static inline uint4 ld16(const uint8_t *p, bool ok) { return ok ? __ldg((const uint4 *)p) : make_uint4(0, 0, 0, 0); }

__host__ __device__ static inline void kranges(int64_t K, int *nk, int *cpr)
{
    *nk = (int)((K + CH - 1) / CH);
    *cpr = (*nk + KS - 1) / KS;
}

/* ---- decode: B ≤ 8, one 16-row tile per block, the K ranges on its KS warps ---- */

/* the weight words of chunks c .. c + U − 1 (those below c1) of the rows rp[m][0..1] */
template <int NM, int U>
__device__ static inline void mv_load_a(uint4 (*a)[NM][2][2], const uint8_t *const (*rp)[2], int64_t K, int c, int c1,
                                        int t)
{
#pragma unroll
    for (int u = 0; u < U; u++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int64_t e = elem(c + u, t, h);
            const bool ok = c + u < c1 && e + 8 <= K;
#pragma unroll
            for (int m = 0; m < NM; m++) {
                a[u][m][0][h] = ld16(rp[m][0] + 2 * e, ok);
                a[u][m][1][h] = ld16(rp[m][1] + 2 * e, ok);
            }
        }
}

/* acc[m] += the chunks [c0, c1) of the rows rp[m][0..1] · token row xr (f32, split here; NULL: a
 * padding column). The first U chunks' weights are loaded before pdl_wait() (they do not depend on
 * the previous kernel; cuk_pdl.cuh), and pf chunks after them fetched into L2; x only after it. */
template <bool BF, bool LO, int NM, int U>
__device__ static inline void mv_range(const uint8_t *const (*rp)[2], int64_t K, int c0, int c1,
                                       const float *xr, int t, int pf, float (*acc)[4])
{
    uint4 a[U][NM][2][2];
    mv_load_a<NM, U>(a, rp, K, c0, c1, t);
    const int pe = c0 + U + pf < c1 ? c0 + U + pf : c1;
    for (int c = c0 + U + t; c < pe; c += 4) /* lane (g, t): rows g and g + 8, every 4th chunk from t */
#pragma unroll
        for (int m = 0; m < NM; m++) {
            pdl_prefetch(rp[m][0] + 2 * elem(c, 0, 0));
            pdl_prefetch(rp[m][1] + 2 * elem(c, 0, 0));
        }
    pdl_wait();
    pdl_trigger();
    for (int c = c0; c < c1; c += U) {
        float4 xv[U][2][2];
        if (c != c0)
            mv_load_a<NM, U>(a, rp, K, c, c1, t);
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int64_t e = elem(c + u, t, h);
                const bool xo = c + u < c1 && e + 8 <= K && xr;
                xv[u][h][0] = xo ? __ldg((const float4 *)(xr + e)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                xv[u][h][1] = xo ? __ldg((const float4 *)(xr + e + 4)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
#pragma unroll
        for (int u = 0; u < U; u++)
            if (c + u < c1) {
                uint32_t hw[8], lw[8];
#pragma unroll
                for (int h = 0; h < 2; h++)
#pragma unroll
                    for (int q = 0; q < 2; q++)
                        split4<BF, LO>(xv[u][h][q], hw + 4 * h + 2 * q, lw + 4 * h + 2 * q);
                const uint4 bh[2] = { make_uint4(hw[0], hw[1], hw[2], hw[3]), make_uint4(hw[4], hw[5], hw[6], hw[7]) };
                const uint4 bl[2] = { make_uint4(lw[0], lw[1], lw[2], lw[3]), make_uint4(lw[4], lw[5], lw[6], lw[7]) };
#pragma unroll
                for (int m = 0; m < NM; m++)
                    mma_chunk<BF, LO>(acc[m], a[u][m][0], a[u][m][1], bh, bl);
            }
    }
}

/* NM 1: rows of w0 (MODE's epilogue); NM 2: gate w0 and up w1 rows (GLU). IDX: blockIdx.y is a token
 * and the tile's rows are its listed rows o.idx[tok][j] (j < o.cnt[tok]). */
template <bool BF, bool LO, int MODE, int NM, bool IDX, int U>
__global__ void __launch_bounds__(MV_THREADS, U == 2 ? 2 : 1) k_mma_mv(const uint8_t *__restrict__ w0, const uint8_t *__restrict__ w1,
                                                       int64_t K, int64_t n_out, const float *__restrict__ x, int B,
                                                       mout o)
{
    CUK_TRACE_BLOCK(CUK_F_k_mma_mv);
    __shared__ float red[KS][NM * 4][32];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int tok0 = IDX ? (int)blockIdx.y : (int)blockIdx.y * 8, ntok = IDX ? 1 : (B - tok0 < 8 ? B - tok0 : 8);
    if constexpr (IDX)
        pdl_wait(); /* the listed rows are the previous kernel's output */
    const int64_t n = IDX && o.cnt ? o.cnt[tok0] : n_out, j0 = (int64_t)blockIdx.x * 16;
    if (j0 >= n)
        return; /* the whole block */
    const int64_t jg = j0 + g < n ? j0 + g : n - 1, jh = j0 + g + 8 < n ? j0 + g + 8 : n - 1;
    const int64_t rg = IDX ? o.idx[tok0 * o.idx_stride + jg] : jg, rh = IDX ? o.idx[tok0 * o.idx_stride + jh] : jh;
    const uint8_t *rp[NM][2];
#pragma unroll
    for (int m = 0; m < NM; m++) {
        const uint8_t *w = m ? w1 : w0;
        rp[m][0] = w + rg * K * 2, rp[m][1] = w + rh * K * 2;
    }
    const float *xr = g < ntok ? x + (int64_t)(tok0 + g) * K : nullptr;
    int nk, cpr;
    kranges(K, &nk, &cpr);
    const int c0 = warp * cpr < nk ? warp * cpr : nk, c1 = c0 + cpr < nk ? c0 + cpr : nk;
    float acc[NM][4];
#pragma unroll
    for (int m = 0; m < NM; m++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            acc[m][i] = 0.0f;
    mv_range<BF, LO, NM, U>(rp, K, c0, c1, xr, t, o.pf, acc);
#pragma unroll
    for (int m = 0; m < NM; m++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            red[warp][m * 4 + i][lane] = acc[m][i];
    __syncthreads();
    if (warp)
        return;
    float s[NM][4];
#pragma unroll
    for (int m = 0; m < NM; m++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            s[m][i] = red[0][m * 4 + i][lane];
#pragma unroll
            for (int w = 1; w < KS; w++)
                s[m][i] = __fadd_rn(s[m][i], red[w][m * 4 + i][lane]);
        }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int64_t j = j0 + g + (i >= 2 ? 8 : 0);
        const int tl = 2 * t + (i & 1);
        if (j >= n || tl >= ntok)
            continue;
        const int64_t tok = tok0 + tl;
        if constexpr (NM == 2)
            emit_glu<IDX>(o, n_out, j, tok, s[0][i], s[1][i]);
        else
            emit<MODE>(o, n_out, j, tok, s[0][i]);
    }
}

/* ---- prefill: B > 8, blocks of W row tiles × NT·8 tokens, the K ranges one after the other ---- */

template <int NM>
__device__ static inline void mm_load_a(uint4 (*a)[2][2], const uint8_t *const (*rp)[2], int64_t K, int c, int t)
{
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int64_t e = elem(c, t, h);
        const bool ok = e + 8 <= K;
#pragma unroll
        for (int m = 0; m < NM; m++) {
            a[m][0][h] = ld16(rp[m][0] + 2 * e, ok);
            a[m][1][h] = ld16(rp[m][1] + 2 * e, ok);
        }
    }
}

template <bool BF, bool LO, int MODE, int NM, int NT, int W, int MINB>
__global__ void __launch_bounds__(W * 32, MINB) k_mma_mm(const uint8_t *__restrict__ w0, const uint8_t *__restrict__ w1,
                                                         int64_t K, int64_t n_out, const uint8_t *__restrict__ xh,
                                                         int64_t xs, int B, mout o)
{
    CUK_TRACE_BLOCK_DYN(CUK_F_k_mma_mm); /* its static shared memory can be the whole 48 KiB (cuk_trace.cuh) */
    constexpr int TOKB = MM_TOKB(LO), PARTS = LO ? 16 : 8; /* 16-byte words a staged token */
    __shared__ __align__(16) uint8_t sb[2][NT * 8][TOKB];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int tok0 = (int)blockIdx.x * NT * 8;
    const int64_t j0 = ((int64_t)blockIdx.y * W + warp) * 16;
    /* a tile past the end computes its last row again and stores nothing: every warp takes part in
     * the staging and the barriers */
    const int64_t jg = j0 + g < n_out ? j0 + g : n_out - 1, jh = j0 + g + 8 < n_out ? j0 + g + 8 : n_out - 1;
    const uint8_t *rp[NM][2];
#pragma unroll
    for (int m = 0; m < NM; m++) {
        const uint8_t *w = m ? w1 : w0;
        rp[m][0] = w + jg * K * 2, rp[m][1] = w + jh * K * 2;
    }
    int nk, cpr;
    kranges(K, &nk, &cpr);
    /* token rows of chunk c into stage s: 16 words per token (8 hi, 8 lo; LO false: 8 hi), zero past
     * B or K */
    auto fill = [&](int s, int c) {
        for (int q = threadIdx.x; q < NT * 8 * PARTS; q += W * 32) {
            /* shifts and masks: a signed q / PARTS, q % PARTS is not reduced to them (+149 PTX lines) */
            const int tl = q >> (LO ? 4 : 3), part = q & (PARTS - 1), h8 = part & 7;
            const int64_t e = (int64_t)c * CH + 8 * h8, tok = tok0 + tl;
            const bool ok = tok < B && e + 8 <= K;
            const uint8_t *src = ok ? xh + tok * xs + (part >= 8 ? 2 * K : 0) + 2 * e : xh;
            cp16(&sb[s][tl][(part >= 8 ? 128 : 0) + 16 * h8], src, ok ? 16 : 0);
        }
    };
    uint4 a[NM][2][2], an[NM][2][2];
    float acc[NM][NT][4], sum[NM][NT][4];
#pragma unroll
    for (int m = 0; m < NM; m++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                acc[m][j][i] = 0.0f, sum[m][j][i] = 0.0f;
    mm_load_a<NM>(a, rp, K, 0, t);
    fill(0, 0);
    cp_commit();
    int done = 0; /* K ranges added into sum */
    for (int c = 0; c < nk; c++) {
        const bool more = c + 1 < nk;
        if (more)
            fill((c + 1) & 1, c + 1);
        cp_commit();
        if (more)
            mm_load_a<NM>(an, rp, K, c + 1, t);
        cp_wait<1>();
        __syncthreads();
        const uint8_t *st = &sb[c & 1][0][0];
#pragma unroll
        for (int j = 0; j < NT; j++) {
            const uint8_t *tb = st + (j * 8 + g) * TOKB + 16 * t; /* elements 8t.., 32 + 8t.. */
            const uint4 bh[2] = { *(const uint4 *)tb, *(const uint4 *)(tb + 64) };
            uint4 bl[2] = { make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0) };
            if constexpr (LO)
                bl[0] = *(const uint4 *)(tb + 128), bl[1] = *(const uint4 *)(tb + 192);
#pragma unroll
            for (int m = 0; m < NM; m++)
                mma_chunk<BF, LO>(acc[m][j], a[m][0], a[m][1], bh, bl);
        }
        if ((c + 1) % cpr == 0 || !more) { /* the end of a K range */
#pragma unroll
            for (int m = 0; m < NM; m++)
#pragma unroll
                for (int j = 0; j < NT; j++)
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        sum[m][j][i] = done ? __fadd_rn(sum[m][j][i], acc[m][j][i]) : acc[m][j][i];
                        acc[m][j][i] = 0.0f;
                    }
            done++;
        }
        __syncthreads(); /* the stage is refilled by the next iteration */
        if (more)
#pragma unroll
            for (int m = 0; m < NM; m++)
#pragma unroll
                for (int r = 0; r < 2; r++)
#pragma unroll
                    for (int h = 0; h < 2; h++)
                        a[m][r][h] = an[m][r][h];
    }
    for (; done < KS; done++) /* the empty ranges' +0, as the decode kernel adds them */
#pragma unroll
        for (int m = 0; m < NM; m++)
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    sum[m][j][i] = __fadd_rn(sum[m][j][i], 0.0f);
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int64_t r = j0 + g + (i >= 2 ? 8 : 0);
            const int64_t tok = tok0 + j * 8 + 2 * t + (i & 1);
            if (r >= n_out || tok >= B)
                continue;
            if constexpr (NM == 2)
                emit_glu<false>(o, n_out, r, tok, sum[0][j][i], sum[1][j][i]);
            else
                emit<MODE>(o, n_out, r, tok, sum[0][j][i]);
        }
}

/* ---- prefill, tiled: blocks of WM·MT·16 rows × WN·NT·8 tokens, ST-stage cp.async pipeline ---- */

/* The same products in the same order as k_mma_mv / k_mma_mm (the order paragraph at the top),
 * staged for a whole block: each stage holds one 64-element chunk of the block's weight rows
 * (128 bytes a row) and of its tokens' hi and lo rows (256 bytes a token), copied with cp.async ST−1
 * chunks ahead of the one being multiplied. Each warp multiplies MT 16-row tiles (of each of the NM
 * matrices) by NT 8-token tiles from shared memory; a thread's 16-byte loads are the words the
 * fragment mapping gives it (elements 32h + 8t.. of rows g and g + 8, of token g), so no ldmatrix
 * and no repacking: the row position inside the mma (r mod 16) and the token column (tok mod 8) are
 * those of the other kernels, and each K range is accumulated from 0 and added in range order in
 * registers. Bank conflicts: a quarter warp's LDS.128 reads two rows' 64 bytes at the same offsets,
 * so odd rows (tokens) store their 16-byte units with the halves of the 128-byte row swapped
 * (unit u at u ^ 4). */
#define GM_AROW 128 /* bytes of a staged weight row (one chunk) */
#define GM_BTOK(LO) ((LO) ? 256 : 128) /* bytes of a staged token: hi 128, lo 128 (LO) */

__device__ static inline int gm_sw(int row, int u) { return (u ^ ((row & 1) << 2)) * 16; }

template <bool LO, int NM, int WM, int WN, int MT, int NT, int ST> struct gm_shape {
    static constexpr int threads = WM * WN * 32;
    static constexpr int rows = WM * MT * 16;  /* weight rows per block (of each matrix) */
    static constexpr int toks = WN * NT * 8;   /* tokens per block */
    static constexpr int a_bytes = NM * rows * GM_AROW;
    static constexpr int btok = GM_BTOK(LO);
    static constexpr int stage = a_bytes + toks * btok;
    static constexpr int smem = ST * stage;
};

__device__ static inline uint32_t w4(const uint4 &v, int k) { return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w; }

template <bool BF, bool LO, int MODE, int NM, int WM, int WN, int MT, int NT, int ST, int MINB>
__global__ void __launch_bounds__(WM * WN * 32, MINB)
    k_mma_gm(const uint8_t *__restrict__ w0, const uint8_t *__restrict__ w1, int64_t K, int64_t n_out,
             const uint8_t *__restrict__ xh, int64_t xs, int B, mout o)
{
    CUK_TRACE_BLOCK(CUK_F_k_mma_gm);
    using SH = gm_shape<LO, NM, WM, WN, MT, NT, ST>;
    extern __shared__ __align__(16) uint8_t gsm[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int wm = warp % WM, wn = warp / WM;
    const int tok0 = (int)blockIdx.x * SH::toks;
    const int64_t r0 = (int64_t)blockIdx.y * SH::rows;
    int nk, cpr;
    kranges(K, &nk, &cpr);
    /* chunk c into stage s; zeros past n_out, B or K (the stored outputs never read them) */
    auto fill = [&](int s, int c) {
        uint8_t *as = gsm + s * SH::stage, *bs = as + SH::a_bytes;
        for (int q = threadIdx.x; q < NM * SH::rows * 8; q += SH::threads) {
            const int row = q >> 3, u = q & 7, m = row / SH::rows;
            const int64_t r = r0 + (row - m * SH::rows), e = (int64_t)c * CH + 8 * u;
            const bool ok = r < n_out && e + 8 <= K;
            const uint8_t *src = ok ? (m ? w1 : w0) + r * K * 2 + 2 * e : w0;
            cp16(as + row * GM_AROW + gm_sw(row, u), src, ok ? 16 : 0);
        }
        for (int q = threadIdx.x; q < SH::toks * (LO ? 16 : 8); q += SH::threads) {
            const int tl = LO ? q >> 4 : q >> 3, part = LO ? (q >> 3) & 1 : 0, u = q & 7;
            const int64_t e = (int64_t)c * CH + 8 * u, tok = tok0 + tl;
            const bool ok = tok < B && e + 8 <= K;
            const uint8_t *src = ok ? xh + tok * xs + part * 2 * K + 2 * e : xh;
            cp16(bs + tl * SH::btok + part * 128 + gm_sw(tl, u), src, ok ? 16 : 0);
        }
    };
    float acc[NM][MT][NT][4], sum[NM][MT][NT][4];
#pragma unroll
    for (int m = 0; m < NM; m++)
#pragma unroll
        for (int a = 0; a < MT; a++)
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    acc[m][a][j][i] = 0.0f, sum[m][a][j][i] = 0.0f;
#pragma unroll
    for (int s = 0; s < ST - 1; s++) {
        if (s < nk)
            fill(s, s);
        cp_commit();
    }
    int done = 0; /* K ranges added into sum */
    for (int c = 0; c < nk; c++) {
        cp_wait<ST - 2>(); /* chunk c has landed (this thread's copies) */
        __syncthreads();   /* everyone's copies, and everyone is done with chunk c − 1's stage */
        if (c + ST - 1 < nk)
            fill((c + ST - 1) % ST, c + ST - 1);
        cp_commit();
        const uint8_t *as = gsm + (c % ST) * SH::stage, *bs = as + SH::a_bytes;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int u = 4 * h + t;
            uint4 a[NM][MT][2];
#pragma unroll
            for (int m = 0; m < NM; m++)
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int rh = 0; rh < 2; rh++) {
                        const int row = m * SH::rows + (wm * MT + mt) * 16 + g + 8 * rh;
                        a[m][mt][rh] = *(const uint4 *)(as + row * GM_AROW + gm_sw(row, u));
                    }
#pragma unroll
            for (int j = 0; j < NT; j++) {
                const int tl = (wn * NT + j) * 8 + g;
                const uint8_t *tb = bs + tl * SH::btok + gm_sw(tl, u);
                const uint4 bh = *(const uint4 *)tb, bl = LO ? *(const uint4 *)(tb + 128) : make_uint4(0, 0, 0, 0);
#pragma unroll
                for (int i2 = 0; i2 < 2; i2++) /* k16 tile 2h + i2: words 2·i2, 2·i2 + 1 */
#pragma unroll
                    for (int m = 0; m < NM; m++)
#pragma unroll
                        for (int mt = 0; mt < MT; mt++) {
                            const uint32_t a0 = w4(a[m][mt][0], 2 * i2), a1 = w4(a[m][mt][1], 2 * i2),
                                           a2 = w4(a[m][mt][0], 2 * i2 + 1), a3 = w4(a[m][mt][1], 2 * i2 + 1);
                            mma<BF>(acc[m][mt][j], a0, a1, a2, a3, w4(bh, 2 * i2), w4(bh, 2 * i2 + 1));
                            if constexpr (LO)
                                mma<BF>(acc[m][mt][j], a0, a1, a2, a3, w4(bl, 2 * i2), w4(bl, 2 * i2 + 1));
                        }
            }
        }
        if ((c + 1) % cpr == 0 || c + 1 == nk) { /* the end of a K range */
#pragma unroll
            for (int m = 0; m < NM; m++)
#pragma unroll
                for (int a = 0; a < MT; a++)
#pragma unroll
                    for (int j = 0; j < NT; j++)
#pragma unroll
                        for (int i = 0; i < 4; i++) {
                            sum[m][a][j][i] = done ? __fadd_rn(sum[m][a][j][i], acc[m][a][j][i]) : acc[m][a][j][i];
                            acc[m][a][j][i] = 0.0f;
                        }
            done++;
        }
    }
    cp_wait<0>();
    for (; done < KS; done++) /* the empty ranges' +0, as the decode kernel adds them */
#pragma unroll
        for (int m = 0; m < NM; m++)
#pragma unroll
            for (int a = 0; a < MT; a++)
#pragma unroll
                for (int j = 0; j < NT; j++)
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        sum[m][a][j][i] = __fadd_rn(sum[m][a][j][i], 0.0f);
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int64_t r = r0 + (wm * MT + mt) * 16 + g + (i >= 2 ? 8 : 0);
                const int64_t tok = tok0 + (wn * NT + j) * 8 + 2 * t + (i & 1);
                if (r >= n_out || tok >= B)
                    continue;
                if constexpr (NM == 2)
                    emit_glu<false>(o, n_out, r, tok, sum[0][mt][j][i], sum[1][mt][j][i]);
                else
                    emit<MODE>(o, n_out, r, tok, sum[0][mt][j][i]);
            }
}

template <bool BF, bool LO, int MODE, int NM, int WM, int WN, int MT, int NT, int ST, int MINB>
static void gm_launch(const uint8_t *w0, const uint8_t *w1, int64_t K, int64_t n_out, const void *xh, int B,
                      const mout &o, cudaStream_t st)
{
    using SH = gm_shape<LO, NM, WM, WN, MT, NT, ST>;
    static bool attr; /* over 48 KiB of dynamic shared memory needs the opt-in, once per kernel */
    if (!attr) {
        cudaFuncSetAttribute(k_mma_gm<BF, LO, MODE, NM, WM, WN, MT, NT, ST, MINB>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             SH::smem);
        attr = true;
    }
    const unsigned groups = (unsigned)((B + SH::toks - 1) / SH::toks), rows = (unsigned)((n_out + SH::rows - 1) / SH::rows);
    k_mma_gm<BF, LO, MODE, NM, WM, WN, MT, NT, ST, MINB><<<dim3(groups, rows), SH::threads, SH::smem, st>>>(
        w0, w1, K, n_out, (const uint8_t *)xh, (int64_t)cuk_mma_x_row_bytes(K), B, o);
}

/* ---- launchers ---- */

/* The prefill tiling (the bits do not depend on it). k_mma_mm: row tiles W per block (each block
 * stages its NT·8 tokens' chunk once for all of them) and token tiles NT; k_mma_gm: blocks of
 * rows × tokens, both operands staged, for batches of more than GM_MIN_B tokens (smaller ones take
 * tiling 0). PINFER_CUDA_MMA_TILE picks one (benchmarks):
 *   0: plain W 4, NT 8; GLU W 4, NT 4      1: plain W 8, NT 8; GLU W 8, NT 4
 *   2: plain W 8, NT 8; GLU W 4, NT 8
 *   3: k_mma_gm, 8 warps of 64 rows × 32 tokens: 128 × 128 a block, GLU 64 rows of each × 128 (144 KiB)
 *   4: k_mma_gm, 4 warps of 64 × 32: 128 × 64, GLU 64 of each × 64 (96 KiB: two blocks an SM)
 *   5: k_mma_gm, 8 warps of 32 × 32: 128 × 64, GLU 64 of each × 64 (96 KiB, ≤ 128 registers: two
 *      blocks, 16 warps an SM)
 *   6: k_mma_gm, 16 warps of 32 × 32: 128 × 128, GLU 64 of each × 128 (144 KiB, 16 warps an SM)
 *   7: the f16 mode only (half the staged bytes a token): plain W 4, NT 16; GLU W 4, NT 8 (48 and
 *      24 KiB of static shared memory); in the split mode tiling 0
 * Measured on the H200 (pp512 d16, bench/gpu/NOTES.md, two runs): 0 5 586 / 5 604, 3 5 283, 4 5 383,
 * 5 5 374, 6 5 084 tok/s — tiling 0 stays the split's default. The f16 mode's is 7: 11 296–11 317
 * against tiling 0's 8 306–8 325 tok/s (3 interleaved rounds, 2026-12-02; NOTES.md "f16
 * activations"). */
/* Chunks in flight per warp of the decode kernel (the bits do not depend on it): 2 (≤ 128 registers,
 * 2 blocks of 8 warps an SM) or 4 (1 block); PINFER_CUDA_MMA_U=2|4 (benchmarks). */
static int mv_u(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("PINFER_CUDA_MMA_U");
        v = e && !strcmp(e, "4") ? 4 : e && !strcmp(e, "2") ? 2 : MV_U_DEFAULT;
    }
    return v;
}

/* Chunks a warp of the decode kernel fetches into L2 before pdl_wait(), after the U it loads
 * (PINFER_CUDA_PDL_PF, default 0; the bits do not depend on it): the prologue that the previous
 * kernel's tail can hide (cuk_pdl.cuh). */
static int pdl_pf(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("PINFER_CUDA_PDL_PF");
        v = e ? atoi(e) : 0;
        v = v < 0 ? 0 : v;
    }
    return v;
}

static int mm_tile(bool lo)
{
    static int v = -2; /* -1: not set */
    if (v == -2) {
        const char *e = getenv("PINFER_CUDA_MMA_TILE");
        v = e && *e >= '0' && *e <= '7' ? *e - '0' : -1;
    }
    return v >= 0 ? v : lo ? MM_TILE_DEFAULT : MM_TILE_DEFAULT16;
}

template <bool BF, bool LO, int MODE, int NM, int NT, int W, int MINB>
static void mm_launch(const uint8_t *w0, const uint8_t *w1, int64_t K, int64_t n_out, const void *xh, int B,
                      const mout &o, cudaStream_t st)
{
    const unsigned tiles = (unsigned)((n_out + 15) / 16);
    const unsigned groups = (unsigned)((B + NT * 8 - 1) / (NT * 8)), rows = (tiles + W - 1) / W;
#ifdef CUK_TRACE /* the block's trace slot in dynamic shared memory, beyond the 48 KiB static (cuk_trace.cuh) */
    static const cudaError_t tr_attr = cudaFuncSetAttribute(k_mma_mm<BF, LO, MODE, NM, NT, W, MINB>,
                                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                            (int)CUK_TRACE_DYN_BYTES);
    (void)tr_attr;
#endif
    k_mma_mm<BF, LO, MODE, NM, NT, W, MINB><<<dim3(groups, rows), W * 32, CUK_TRACE_DYN_BYTES, st>>>(
        w0, w1, K, n_out, (const uint8_t *)xh, (int64_t)cuk_mma_x_row_bytes(K), B, o);
}

/* B ≤ 8 tokens, or one per block (IDX): the decode kernel on x as it is; more: split once, then the
 * prefill kernel */
template <bool BF, bool LO, int MODE, int NM, bool IDX>
static int launch(const uint8_t *w0, const uint8_t *w1, int64_t K, int64_t n_out, const float *x, void *xh, int B,
                  const mout &o, cudaStream_t st)
{
    const unsigned tiles = (unsigned)((n_out + 15) / 16);
    if (IDX || B <= 8) {
        const dim3 grid(tiles, IDX ? (unsigned)B : 1u);
        mout op = o;
        op.pf = pdl_pf();
        if (mv_u() == 4)
            pdl_launch(k_mma_mv<BF, LO, MODE, NM, IDX, 4>, grid, dim3(MV_THREADS), 0, st, w0, w1, K, n_out, x, B, op);
        else
            pdl_launch(k_mma_mv<BF, LO, MODE, NM, IDX, 2>, grid, dim3(MV_THREADS), 0, st, w0, w1, K, n_out, x, B, op);
        return launched();
    }
    if (!xh)
        return -(int)cudaErrorInvalidValue;
    const int rc = split_x<BF, LO>(x, K, B, xh, st);
    if (rc)
        return rc;
    const int v = mm_tile(LO);
    if (v >= 3 && v <= 6 && B > GM_MIN_B) { /* the tiled pipeline (k_mma_gm) */
        if constexpr (NM == 2) {
            if (v == 3)
                gm_launch<BF, LO, MODE, NM, 2, 4, 2, 4, 3, 1>(w0, w1, K, n_out, xh, B, o, st);
            else if (v == 4)
                gm_launch<BF, LO, MODE, NM, 2, 2, 2, 4, 3, 1>(w0, w1, K, n_out, xh, B, o, st);
            else if (v == 5)
                gm_launch<BF, LO, MODE, NM, 4, 2, 1, 4, 3, 2>(w0, w1, K, n_out, xh, B, o, st);
            else
                gm_launch<BF, LO, MODE, NM, 4, 4, 1, 4, 3, 1>(w0, w1, K, n_out, xh, B, o, st);
        } else {
            if (v == 3)
                gm_launch<BF, LO, MODE, NM, 2, 4, 4, 4, 3, 1>(w0, w1, K, n_out, xh, B, o, st);
            else if (v == 4)
                gm_launch<BF, LO, MODE, NM, 2, 2, 4, 4, 3, 1>(w0, w1, K, n_out, xh, B, o, st);
            else if (v == 5)
                gm_launch<BF, LO, MODE, NM, 4, 2, 2, 4, 3, 2>(w0, w1, K, n_out, xh, B, o, st);
            else
                gm_launch<BF, LO, MODE, NM, 4, 4, 2, 4, 3, 1>(w0, w1, K, n_out, xh, B, o, st);
        }
        return launched();
    }
    if constexpr (!LO) { /* twice the tokens a block: as many staged bytes as the split's tiling 0 */
        if (v == 7) {
            if constexpr (NM == 2)
                mm_launch<BF, LO, MODE, NM, 8, 4, 1>(w0, w1, K, n_out, xh, B, o, st);
            else
                mm_launch<BF, LO, MODE, NM, 16, 4, 1>(w0, w1, K, n_out, xh, B, o, st);
            return launched();
        }
    }
    if constexpr (NM == 2) {
        if (v == 0 || v >= 3)
            mm_launch<BF, LO, MODE, NM, 4, 4, 1>(w0, w1, K, n_out, xh, B, o, st);
        else if (v == 1)
            mm_launch<BF, LO, MODE, NM, 4, 8, 1>(w0, w1, K, n_out, xh, B, o, st);
        else
            mm_launch<BF, LO, MODE, NM, 8, 4, 1>(w0, w1, K, n_out, xh, B, o, st);
    } else {
        if (v == 0 || v >= 3)
            mm_launch<BF, LO, MODE, NM, 8, 4, 1>(w0, w1, K, n_out, xh, B, o, st);
        else if (v == 1)
            mm_launch<BF, LO, MODE, NM, 8, 8, 1>(w0, w1, K, n_out, xh, B, o, st);
        else
            mm_launch<BF, LO, MODE, NM, 8, 8, 1>(w0, w1, K, n_out, xh, B, o, st);
    }
    return launched();
}

template <bool BF, bool LO>
static int gemv_b(const struct cuk_w *w, const float *x, int B, const mout &o, int mode, void *xh, cudaStream_t st)
{
    const uint8_t *q = (const uint8_t *)w->q;
    switch (mode) {
    case CUK_SET: return launch<BF, LO, CUK_SET, 1, false>(q, nullptr, w->n_in, w->n_out, x, xh, B, o, st);
    case CUK_ADD: return launch<BF, LO, CUK_ADD, 1, false>(q, nullptr, w->n_in, w->n_out, x, xh, B, o, st);
    case CUK_RELU: return launch<BF, LO, CUK_RELU, 1, false>(q, nullptr, w->n_in, w->n_out, x, xh, B, o, st);
    case CUK_MASK: return launch<BF, LO, CUK_MASK, 1, false>(q, nullptr, w->n_in, w->n_out, x, xh, B, o, st);
    case CUK_SPLIT3: return launch<BF, LO, CUK_SPLIT3, 1, false>(q, nullptr, w->n_in, w->n_out, x, xh, B, o, st);
    default: return -(int)cudaErrorInvalidValue;
    }
}

extern "C" int cuk_mma_gemv(const struct cuk_w *w, const float *x, int B, void *y, int mode, float thr, float *y1,
                            float *y2, int64_t n0, int64_t n1, void *xh, void *st)
{
    if (!cuk_mma_type(w->type) || w->n_in % 8)
        return -(int)cudaErrorInvalidValue;
    if (B < 1)
        return 0;
    mout o = {};
    o.y = y, o.y1 = y1, o.y2 = y2, o.n0 = n0, o.n1 = n1, o.thr = thr;
    return w->type == PI_TYPE_BF16   ? gemv_b<true, true>(w, x, B, o, mode, xh, S(st))
           : cuk_mma_act16(w->type) ? gemv_b<false, false>(w, x, B, o, mode, xh, S(st))
                                    : gemv_b<false, true>(w, x, B, o, mode, xh, S(st));
}

template <bool BF, bool LO>
static int glu_t(const uint8_t *g, const uint8_t *u, int64_t K, int64_t N, const float *x, void *xh, int B, const mout &o,
                 bool idx, cudaStream_t st)
{
    return idx ? launch<BF, LO, CUK_SET, 2, true>(g, u, K, N, x, xh, B, o, st)
               : launch<BF, LO, CUK_SET, 2, false>(g, u, K, N, x, xh, B, o, st);
}

extern "C" int cuk_mma_glu(const struct cuk_w *gate, const struct cuk_w *up, const float *x, int B, float *act,
                           int act_kind, const int32_t *idx, const int32_t *cnt, int64_t idx_stride, bool compact,
                           void *xh, void *st)
{
    if (!cuk_mma_type(gate->type) || gate->type != up->type || gate->n_in != up->n_in || gate->n_out != up->n_out ||
        gate->n_in % 8)
        return -(int)cudaErrorInvalidValue;
    if (B < 1)
        return 0;
    mout o = {};
    o.y = act, o.kind = act_kind, o.idx = idx, o.cnt = cnt, o.idx_stride = idx_stride, o.compact = compact;
    const uint8_t *g = (const uint8_t *)gate->q, *u = (const uint8_t *)up->q;
    const int64_t K = gate->n_in, N = gate->n_out;
    if (gate->type == PI_TYPE_BF16)
        return glu_t<true, true>(g, u, K, N, x, xh, B, o, idx != nullptr, S(st));
    return cuk_mma_act16(gate->type) ? glu_t<false, false>(g, u, K, N, x, xh, B, o, idx != nullptr, S(st))
                                     : glu_t<false, true>(g, u, K, N, x, xh, B, o, idx != nullptr, S(st));
}

/* this object's copy of the trace ring's pointers (cuk_trace.cuh; a CUK_TRACE build only) */
CUK_TRACE_SETTER(cuk_mma_trace_set)
