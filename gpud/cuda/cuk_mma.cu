/* cuk_mma.cu — F16 / BF16 GEMV and GEMM on mma.sync (design and numerics: cuk_mma.h).
 *
 * Fragment mapping. A 64-element chunk of K is four k16 tiles. Thread (g = lane / 4, t = lane % 4)
 * of a warp loads elements [16t, 16t + 16) of the chunk — two 16-byte words — of its rows g and
 * g + 8 of the 16-row tile, and the same elements of token g's activation row. Word pair 2i, 2i + 1
 * of those 8 words feeds k16 tile i: word 2i sits in the mma's k slots (2t, 2t + 1), word 2i + 1 in
 * (2t + 8, 2t + 9), for A (rows) and B (tokens) alike. The mma then sums a permutation of the
 * chunk's products; the permutation depends on nothing but the position in K.
 *
 * Order of the sums, for one (row, token): for each K range r (cuk_mma.h), acc = 0, then for each of
 * its chunks in ascending order and each of the chunk's k16 tiles in order: acc = mma(A, B_hi, acc),
 * acc = mma(A, B_lo, acc); then s = acc_0, s = s + acc_r for r = 1..KS−1 (an empty range adds +0);
 * the output is s · (1 / scale). Both kernels below do exactly that. */
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
#define MM_WARPS 4    /* row tiles per prefill block (64 rows) */
#define MM_TOKB 272   /* bytes per token of a staged chunk: hi 128, lo 128, 16 of padding (no bank conflicts) */

static int launched(void)
{
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : -(int)e;
}

static cudaStream_t S(void *st) { return (cudaStream_t)st; }

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

extern "C" size_t cuk_mma_x_row_bytes(int64_t n_in) { return (size_t)(4 * n_in + 16); }

/* ---- the activation split: x·s = hi + lo ---- */

template <bool BF> __device__ static inline uint16_t to_h(float v);
template <> __device__ inline uint16_t to_h<false>(float v) { return __half_as_ushort(__float2half_rn(v)); }
template <> __device__ inline uint16_t to_h<true>(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }
template <bool BF> __device__ static inline float from_h(uint16_t h);
template <> __device__ inline float from_h<false>(uint16_t h) { return __half2float(__ushort_as_half(h)); }
template <> __device__ inline float from_h<true>(uint16_t h) { return __bfloat162float(__ushort_as_bfloat16(h)); }

/* One block per token: the scale from the row's largest magnitude (a function of the row alone),
 * then hi = round(x·s), lo = round(x·s − hi). Row layout: hi [K], lo [K] (16-bit), 1 / s (f32). */
template <bool BF>
__global__ void __launch_bounds__(256) k_split_x(const float *__restrict__ x, int64_t K, uint8_t *__restrict__ xh,
                                                 int64_t xs)
{
    __shared__ float wm[8];
    const float *xr = x + (int64_t)blockIdx.x * K;
    uint8_t *row = xh + (int64_t)blockIdx.x * xs;
    float m = 0.0f;
    for (int64_t i = threadIdx.x; i < K; i += 256)
        m = fmaxf(m, fabsf(xr[i]));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((threadIdx.x & 31) == 0)
        wm[threadIdx.x >> 5] = m;
    __syncthreads();
    m = wm[0];
#pragma unroll
    for (int w = 1; w < 8; w++)
        m = fmaxf(m, wm[w]);
    int p = 0;
    if (m > 0.0f && m <= 3.4e38f) { /* max · 2^p in [2^14, 2^15) */
        int ex;
        frexpf(m, &ex);
        p = 15 - ex;
        p = p > 100 ? 100 : p < -100 ? -100 : p;
    }
    const float s = ldexpf(1.0f, p);
    uint16_t *hi = (uint16_t *)row, *lo = hi + K;
    for (int64_t i = threadIdx.x; i < K; i += 256) {
        const float v = __fmul_rn(xr[i], s);
        const uint16_t h = to_h<BF>(v);
        hi[i] = h;
        lo[i] = to_h<BF>(__fsub_rn(v, from_h<BF>(h)));
    }
    if (threadIdx.x == 0)
        *(float *)(row + 4 * K) = ldexpf(1.0f, -p);
}

template <bool BF>
static int split_x(const float *x, int64_t K, int B, void *xh, cudaStream_t st)
{
    k_split_x<BF><<<(unsigned)B, 256, 0, st>>>(x, K, (uint8_t *)xh, (int64_t)cuk_mma_x_row_bytes(K));
    return launched();
}

/* ---- the mma and the fragments ---- */

template <bool BF>
__device__ static inline void mma(float *c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                  uint32_t b1)
{
    if constexpr (BF)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* word k (0..7) of a thread's 32 bytes held as two uint4 */
__device__ static inline uint32_t wd(const uint4 *p, int k)
{
    const uint4 v = p[k >> 2];
    return (k & 3) == 0 ? v.x : (k & 3) == 1 ? v.y : (k & 3) == 2 ? v.z : v.w;
}

/* The four k16 tiles of one chunk: A words of rows g (ag) and g + 8 (ah), B words hi (bh), lo (bl). */
template <bool BF>
__device__ static inline void mma_chunk(float *acc, const uint4 *ag, const uint4 *ah, const uint4 *bh, const uint4 *bl)
{
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t a0 = wd(ag, 2 * i), a1 = wd(ah, 2 * i), a2 = wd(ag, 2 * i + 1), a3 = wd(ah, 2 * i + 1);
        mma<BF>(acc, a0, a1, a2, a3, wd(bh, 2 * i), wd(bh, 2 * i + 1));
        mma<BF>(acc, a0, a1, a2, a3, wd(bl, 2 * i), wd(bl, 2 * i + 1));
    }
}

__device__ static inline uint4 ld16(const uint8_t *p, bool ok) { return ok ? __ldg((const uint4 *)p) : make_uint4(0, 0, 0, 0); }

__host__ __device__ static inline void kranges(int64_t K, int *nk, int *cpr)
{
    *nk = (int)((K + CH - 1) / CH);
    *cpr = (*nk + KS - 1) / KS;
}

/* ---- outputs ---- */

struct mout {
    void *y;
    float *y1, *y2;
    int64_t n0, n1;
    float thr;
    int kind;
    const int32_t *idx, *cnt;
    int64_t idx_stride;
    bool compact;
};

template <int MODE>
__device__ static inline void emit(const mout &o, int64_t n_out, int64_t r, int64_t tok, float v)
{
    const int64_t at = tok * n_out + r;
    if (MODE == CUK_SPLIT3) { /* rows [0, n0) → y, [n0, n0 + n1) → y1, the rest → y2 */
        if (r < o.n0)
            ((float *)o.y)[tok * o.n0 + r] = v;
        else if (r < o.n0 + o.n1)
            o.y1[tok * o.n1 + r - o.n0] = v;
        else
            o.y2[tok * (n_out - o.n0 - o.n1) + r - o.n0 - o.n1] = v;
    } else if (MODE == CUK_SET)
        ((float *)o.y)[at] = v;
    else if (MODE == CUK_ADD)
        ((float *)o.y)[at] = __fadd_rn(((float *)o.y)[at], v);
    else if (MODE == CUK_RELU)
        ((float *)o.y)[at] = v > 0.0f ? v : 0.0f;
    else
        ((uint8_t *)o.y)[at] = v >= o.thr;
}

__device__ static inline float glu_f(int kind, float g, float u)
{
    if (kind == PI_ACT_SWIGLU)
        return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
    if (kind == PI_ACT_REGLU)
        return g > 0.0f ? __fmul_rn(g, u) : 0.0f;
    return (g > 0.0f && u > 0.0f) ? __fmul_rn(g, u) : 0.0f;
}

/* the GLU of list position j (row rr) for token tok */
template <bool IDX>
__device__ static inline void emit_glu(const mout &o, int64_t n_out, int64_t j, int64_t tok, float g, float u)
{
    const int64_t rr = IDX ? o.idx[tok * o.idx_stride + j] : j;
    ((float *)o.y)[tok * (IDX ? o.idx_stride : n_out) + (o.compact ? j : rr)] = glu_f(o.kind, g, u);
}

__device__ static inline float x_inv_scale(const uint8_t *xh, int64_t xs, int64_t K, int64_t tok)
{
    return *(const float *)(xh + tok * xs + 4 * K);
}

/* ---- decode: B ≤ 8, one 16-row tile per block, the K ranges on its KS warps ---- */

/* acc[m] += the chunks [c0, c1) of the rows rp[m][0..1] · token row xr (NULL: a padding column) */
template <bool BF, int NM, int U>
__device__ static inline void mv_range(const uint8_t *const (*rp)[2], int64_t K, int c0, int c1,
                                       const uint8_t *xr, int t, float (*acc)[4])
{
    for (int c = c0; c < c1; c += U) {
        uint4 a[U][NM][2][2], bh[U][2], bl[U][2];
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int64_t e = (int64_t)(c + u) * CH + 16 * t + 8 * h;
                const bool ok = c + u < c1 && e + 8 <= K;
#pragma unroll
                for (int m = 0; m < NM; m++) {
                    a[u][m][0][h] = ld16(rp[m][0] + 2 * e, ok);
                    a[u][m][1][h] = ld16(rp[m][1] + 2 * e, ok);
                }
                bh[u][h] = ld16(xr + 2 * e, ok && xr);
                bl[u][h] = ld16(xr + 2 * K + 2 * e, ok && xr);
            }
#pragma unroll
        for (int u = 0; u < U; u++)
            if (c + u < c1)
#pragma unroll
                for (int m = 0; m < NM; m++)
                    mma_chunk<BF>(acc[m], a[u][m][0], a[u][m][1], bh[u], bl[u]);
    }
}

/* NM 1: rows of w0 (MODE's epilogue); NM 2: gate w0 and up w1 rows (GLU). IDX: blockIdx.y is a token
 * and the tile's rows are its listed rows o.idx[tok][j] (j < o.cnt[tok]). */
template <bool BF, int MODE, int NM, bool IDX>
__global__ void __launch_bounds__(MV_THREADS) k_mma_mv(const uint8_t *__restrict__ w0, const uint8_t *__restrict__ w1,
                                                       int64_t K, int64_t n_out, const uint8_t *__restrict__ xh,
                                                       int64_t xs, int B, mout o)
{
    __shared__ float red[KS][NM * 4][32];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int tok0 = IDX ? (int)blockIdx.y : (int)blockIdx.y * 8, ntok = IDX ? 1 : (B - tok0 < 8 ? B - tok0 : 8);
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
    const uint8_t *xr = g < ntok ? xh + (int64_t)(tok0 + g) * xs : nullptr;
    int nk, cpr;
    kranges(K, &nk, &cpr);
    const int c0 = warp * cpr < nk ? warp * cpr : nk, c1 = c0 + cpr < nk ? c0 + cpr : nk;
    float acc[NM][4];
#pragma unroll
    for (int m = 0; m < NM; m++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            acc[m][i] = 0.0f;
    mv_range<BF, NM, NM == 1 ? 4 : 2>(rp, K, c0, c1, xr, t, acc);
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
        const float inv = x_inv_scale(xh, xs, K, tok);
        if constexpr (NM == 2)
            emit_glu<IDX>(o, n_out, j, tok, __fmul_rn(s[0][i], inv), __fmul_rn(s[1][i], inv));
        else
            emit<MODE>(o, n_out, j, tok, __fmul_rn(s[0][i], inv));
    }
}

/* ---- prefill: B > 8, blocks of MM_WARPS row tiles × NT·8 tokens, the K ranges one after the other ---- */

__device__ static inline void cp16(void *smem, const void *gp, int n)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gp), "r"(n));
}
__device__ static inline void cp_commit(void) { asm volatile("cp.async.commit_group;\n" ::); }
__device__ static inline void cp_wait1(void) { asm volatile("cp.async.wait_group 1;\n" ::); }

template <int NM>
__device__ static inline void mm_load_a(uint4 (*a)[2][2], const uint8_t *const (*rp)[2], int64_t K, int c, int t)
{
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int64_t e = (int64_t)c * CH + 16 * t + 8 * h;
        const bool ok = e + 8 <= K;
#pragma unroll
        for (int m = 0; m < NM; m++) {
            a[m][0][h] = ld16(rp[m][0] + 2 * e, ok);
            a[m][1][h] = ld16(rp[m][1] + 2 * e, ok);
        }
    }
}

template <bool BF, int MODE, int NM, int NT>
__global__ void __launch_bounds__(MM_WARPS * 32) k_mma_mm(const uint8_t *__restrict__ w0, const uint8_t *__restrict__ w1,
                                                         int64_t K, int64_t n_out, const uint8_t *__restrict__ xh,
                                                         int64_t xs, int B, mout o)
{
    __shared__ __align__(16) uint8_t sb[2][NT * 8][MM_TOKB];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int tok0 = (int)blockIdx.x * NT * 8;
    const int64_t j0 = ((int64_t)blockIdx.y * MM_WARPS + warp) * 16;
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
    /* token rows of chunk c into stage s: 16 words per token (8 hi, 8 lo), zero past B or K */
    auto fill = [&](int s, int c) {
        for (int q = threadIdx.x; q < NT * 8 * 16; q += MM_WARPS * 32) {
            const int tl = q >> 4, part = q & 15, h8 = part & 7;
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
        cp_wait1();
        __syncthreads();
        const uint8_t *st = &sb[c & 1][0][0];
#pragma unroll
        for (int j = 0; j < NT; j++) {
            const uint8_t *tb = st + (j * 8 + g) * MM_TOKB + 32 * t;
            const uint4 bh[2] = { *(const uint4 *)tb, *(const uint4 *)(tb + 16) };
            const uint4 bl[2] = { *(const uint4 *)(tb + 128), *(const uint4 *)(tb + 144) };
#pragma unroll
            for (int m = 0; m < NM; m++)
                mma_chunk<BF>(acc[m][j], a[m][0], a[m][1], bh, bl);
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
            const float inv = x_inv_scale(xh, xs, K, tok);
            if constexpr (NM == 2)
                emit_glu<false>(o, n_out, r, tok, __fmul_rn(sum[0][j][i], inv), __fmul_rn(sum[1][j][i], inv));
            else
                emit<MODE>(o, n_out, r, tok, __fmul_rn(sum[0][j][i], inv));
        }
}

/* ---- launchers ---- */

#define MM_NT 8     /* tokens / 8 per prefill block: plain products */
#define MM_NT_GLU 4 /* GLU (two accumulator sets): fewer, for the registers */

template <bool BF, int MODE, int NM, bool IDX>
static int launch(const uint8_t *w0, const uint8_t *w1, int64_t K, int64_t n_out, const uint8_t *xh, int B,
                  const mout &o, cudaStream_t st)
{
    const int64_t xs = (int64_t)cuk_mma_x_row_bytes(K);
    const unsigned tiles = (unsigned)((n_out + 15) / 16);
    if constexpr (IDX)
        k_mma_mv<BF, MODE, NM, true><<<dim3(tiles, (unsigned)B), MV_THREADS, 0, st>>>(w0, w1, K, n_out, xh, xs, B, o);
    else if (B <= 8)
        k_mma_mv<BF, MODE, NM, false><<<dim3(tiles, 1), MV_THREADS, 0, st>>>(w0, w1, K, n_out, xh, xs, B, o);
    else {
        constexpr int NT = NM == 2 ? MM_NT_GLU : MM_NT;
        const unsigned groups = (unsigned)((B + NT * 8 - 1) / (NT * 8)), rows = (tiles + MM_WARPS - 1) / MM_WARPS;
        k_mma_mm<BF, MODE, NM, NT><<<dim3(groups, rows), MM_WARPS * 32, 0, st>>>(w0, w1, K, n_out, xh, xs, B, o);
    }
    return launched();
}

template <bool BF>
static int gemv_b(const struct cuk_w *w, int B, const mout &o, int mode, const uint8_t *xh, cudaStream_t st)
{
    const uint8_t *q = (const uint8_t *)w->q;
    switch (mode) {
    case CUK_SET: return launch<BF, CUK_SET, 1, false>(q, nullptr, w->n_in, w->n_out, xh, B, o, st);
    case CUK_ADD: return launch<BF, CUK_ADD, 1, false>(q, nullptr, w->n_in, w->n_out, xh, B, o, st);
    case CUK_RELU: return launch<BF, CUK_RELU, 1, false>(q, nullptr, w->n_in, w->n_out, xh, B, o, st);
    case CUK_MASK: return launch<BF, CUK_MASK, 1, false>(q, nullptr, w->n_in, w->n_out, xh, B, o, st);
    case CUK_SPLIT3: return launch<BF, CUK_SPLIT3, 1, false>(q, nullptr, w->n_in, w->n_out, xh, B, o, st);
    default: return -(int)cudaErrorInvalidValue;
    }
}

extern "C" int cuk_mma_gemv(const struct cuk_w *w, const float *x, int B, void *y, int mode, float thr, float *y1,
                            float *y2, int64_t n0, int64_t n1, void *xh, void *st)
{
    if (!cuk_mma_type(w->type) || !xh || w->n_in % 8)
        return -(int)cudaErrorInvalidValue;
    if (B < 1)
        return 0;
    const bool bf = w->type == PI_TYPE_BF16;
    int rc = bf ? split_x<true>(x, w->n_in, B, xh, S(st)) : split_x<false>(x, w->n_in, B, xh, S(st));
    if (rc)
        return rc;
    mout o = {};
    o.y = y, o.y1 = y1, o.y2 = y2, o.n0 = n0, o.n1 = n1, o.thr = thr;
    return bf ? gemv_b<true>(w, B, o, mode, (const uint8_t *)xh, S(st))
              : gemv_b<false>(w, B, o, mode, (const uint8_t *)xh, S(st));
}

extern "C" int cuk_mma_glu(const struct cuk_w *gate, const struct cuk_w *up, const float *x, int B, float *act,
                           int act_kind, const int32_t *idx, const int32_t *cnt, int64_t idx_stride, bool compact,
                           void *xh, void *st)
{
    if (!cuk_mma_type(gate->type) || gate->type != up->type || gate->n_in != up->n_in || gate->n_out != up->n_out ||
        !xh || gate->n_in % 8)
        return -(int)cudaErrorInvalidValue;
    if (B < 1)
        return 0;
    const bool bf = gate->type == PI_TYPE_BF16;
    int rc = bf ? split_x<true>(x, gate->n_in, B, xh, S(st)) : split_x<false>(x, gate->n_in, B, xh, S(st));
    if (rc)
        return rc;
    mout o = {};
    o.y = act, o.kind = act_kind, o.idx = idx, o.cnt = cnt, o.idx_stride = idx_stride, o.compact = compact;
    const uint8_t *g = (const uint8_t *)gate->q, *u = (const uint8_t *)up->q, *xr = (const uint8_t *)xh;
    if (idx)
        return bf ? launch<true, CUK_SET, 2, true>(g, u, gate->n_in, gate->n_out, xr, B, o, S(st))
                  : launch<false, CUK_SET, 2, true>(g, u, gate->n_in, gate->n_out, xr, B, o, S(st));
    return bf ? launch<true, CUK_SET, 2, false>(g, u, gate->n_in, gate->n_out, xr, B, o, S(st))
              : launch<false, CUK_SET, 2, false>(g, u, gate->n_in, gate->n_out, xr, B, o, S(st));
}
