/* cuk_mma_dev.cuh — the mma.sync helpers of the F16 / BF16 products, one definition for cuk_mma.cu
 * (GEMV / GEMM) and cuk_mmv.cu (the streamed decode kernel, which must give cuk_mma.cu's decode bits
 * operation for operation): the activation split x = hi + lo (or hi alone: the f16 mode, template
 * parameter LO false), the m16n8k16 mma and the fragment words,
 * the outputs (struct mout and its epilogues) and the cp.async wrappers. Everything is static / a
 * template, so each object compiles its own copy of the same code. Included by each .cu after
 * cuk_mma.h and model.h (the CUK_* modes, PI_ACT_*) and after it defines CH (elements of K per chunk). */
#ifndef CUK_MMA_DEV_CUH
#define CUK_MMA_DEV_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#ifndef CH
#error "define CH (elements of K per chunk) before including cuk_mma_dev.cuh"
#endif

#include "cuk_launch.cuh" /* launched, S */
#include "cuk_act_dev.cuh" /* glu */

/* ---- the activation split: x = hi + lo ---- */

template <bool BF> struct H2;
template <> struct H2<false> { /* f16 pairs */
    __device__ static uint32_t pack(float a, float b)
    {
        const __half2 h = __floats2half2_rn(a, b);
        return *(const uint32_t *)&h;
    }
    __device__ static float2 unpack(uint32_t w) { return __half22float2(*(const __half2 *)&w); }
};
template <> struct H2<true> { /* bf16 pairs */
    __device__ static uint32_t pack(float a, float b)
    {
        const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
        return *(const uint32_t *)&h;
    }
    __device__ static float2 unpack(uint32_t w) { return __bfloat1622float2(*(const __nv_bfloat162 *)&w); }
};

/* 4 floats → 2 hi words and (LO) 2 lo words (the lower element in the low half). LO false: the f16
 * mode (cuk_mma.h, PINFER_CUDA_MMA_ACT=f16), x rounded once, lo left 0 and never multiplied. */
template <bool BF, bool LO>
__device__ static inline void split4(float4 v, uint32_t *hi, uint32_t *lo)
{
    hi[0] = H2<BF>::pack(v.x, v.y), hi[1] = H2<BF>::pack(v.z, v.w);
    if constexpr (LO) {
        const float2 a = H2<BF>::unpack(hi[0]), b = H2<BF>::unpack(hi[1]);
        lo[0] = H2<BF>::pack(__fsub_rn(v.x, a.x), __fsub_rn(v.y, a.y));
        lo[1] = H2<BF>::pack(__fsub_rn(v.z, b.x), __fsub_rn(v.w, b.y));
    } else
        lo[0] = lo[1] = 0;
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

/* The four k16 tiles of one chunk: A words of rows g (ag) and g + 8 (ah), B words hi (bh), lo (bl;
 * LO false: not read, one mma a tile). */
template <bool BF, bool LO>
__device__ static inline void mma_chunk(float *acc, const uint4 *ag, const uint4 *ah, const uint4 *bh, const uint4 *bl)
{
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t a0 = wd(ag, 2 * i), a1 = wd(ah, 2 * i), a2 = wd(ag, 2 * i + 1), a3 = wd(ah, 2 * i + 1);
        mma<BF>(acc, a0, a1, a2, a3, wd(bh, 2 * i), wd(bh, 2 * i + 1));
        if constexpr (LO)
            mma<BF>(acc, a0, a1, a2, a3, wd(bl, 2 * i), wd(bl, 2 * i + 1));
    }
}

/* ---- outputs ---- */

/* cuk_mmv.cu's struct mvo extends this with its NORM fields */
struct mout {
    void *y;
    float *y1, *y2;
    int64_t n0, n1;
    float thr;
    int kind;
    const int32_t *idx, *cnt;
    int64_t idx_stride;
    bool compact;
    int pf; /* k_mma_mv: chunks a warp fetches into L2 before pdl_wait() (cuk_mma.cu's pdl_pf) */
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

/* the GLU of list position j (row rr) for token tok */
template <bool IDX>
__device__ static inline void emit_glu(const mout &o, int64_t n_out, int64_t j, int64_t tok, float g, float u)
{
    const int64_t rr = IDX && !o.compact ? o.idx[tok * o.idx_stride + j] : j; /* compact: no list read */
    ((float *)o.y)[tok * (IDX ? o.idx_stride : n_out) + (o.compact ? j : rr)] = glu(o.kind, g, u);
}

/* ---- cp.async ---- */

__device__ static inline void cp16(void *smem, const void *gp, int n)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gp), "r"(n));
}
__device__ static inline void cp_commit(void) { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ static inline void cp_wait(void) { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/* the element of chunk c where thread t's 16-byte word h starts */
__host__ __device__ static inline int64_t elem(int c, int t, int h) { return (int64_t)c * CH + 32 * h + 8 * t; }

#endif
