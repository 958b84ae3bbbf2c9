/* cuk_traits.cuh — the block-type traits of cuk.cu's templated kernels (one GEMV, GLU, AXPY,
 * get_rows and dequant template for every weight type; no copy of a kernel per type).
 *
 * A trait says how a lane block (E elements: NQ 16-byte words of the repacked quants, times a scale
 * when HAS_D) dequantizes (deq) and, for the types that dot a Q8-quantized activation (QX), how it
 * dots one 32-element activation block (dotq). CUK_DISPATCH runs a statement with T = the traits
 * of a runtime type. Included by cuk.cu only (device code). */
#ifndef PI_CUK_TRAITS_CUH
#define PI_CUK_TRAITS_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdint.h>

extern "C" {
#include "quant.h"
}
/* ---- block-type traits: NQ 16-byte words hold E elements (times a scale when HAS_D) ---- */

struct TF32 {
    enum { E = 4, NQ = 1, HAS_D = 0, QX = 0 };
    __device__ static void deq(const uint4 *q, float *o)
    {
        o[0] = __uint_as_float(q[0].x), o[1] = __uint_as_float(q[0].y);
        o[2] = __uint_as_float(q[0].z), o[3] = __uint_as_float(q[0].w);
    }
};

__device__ static inline float h_lo(uint32_t w) { return __half2float(__ushort_as_half((unsigned short)(w & 0xffff))); }
__device__ static inline float h_hi(uint32_t w) { return __half2float(__ushort_as_half((unsigned short)(w >> 16))); }

struct TF16 {
    enum { E = 8, NQ = 1, HAS_D = 0, QX = 0 };
    __device__ static void deq(const uint4 *q, float *o)
    {
        const uint32_t w[4] = { q[0].x, q[0].y, q[0].z, q[0].w };
#pragma unroll
        for (int i = 0; i < 4; i++)
            o[2 * i] = h_lo(w[i]), o[2 * i + 1] = h_hi(w[i]);
    }
};

struct TBF16 {
    enum { E = 8, NQ = 1, HAS_D = 0, QX = 0 };
    __device__ static void deq(const uint4 *q, float *o)
    {
        const uint32_t w[4] = { q[0].x, q[0].y, q[0].z, q[0].w };
#pragma unroll
        for (int i = 0; i < 4; i++)
            o[2 * i] = __uint_as_float(w[i] << 16), o[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
};

/* Q types dot a Q8-quantized activation (QX): 32 int8 per block with (d, d·Σq), as the CPU's
 * kernels do; the block's integer dot product is 8 dp4a. */
__device__ static inline int dp4a(uint32_t a, uint32_t b, int c) { return __dp4a((int)a, (int)b, c); }

struct TQ8 {
    enum { E = 32, NQ = 2, HAS_D = 1, QX = 1 };
    __device__ static float dotq(const uint4 *q, const uint4 *x, float2 xd)
    {
        int s = 0;
        s = dp4a(q[0].x, x[0].x, s), s = dp4a(q[0].y, x[0].y, s), s = dp4a(q[0].z, x[0].z, s), s = dp4a(q[0].w, x[0].w, s);
        s = dp4a(q[1].x, x[1].x, s), s = dp4a(q[1].y, x[1].y, s), s = dp4a(q[1].z, x[1].z, s), s = dp4a(q[1].w, x[1].w, s);
        return __fmul_rn(xd.x, (float)s);
    }
    __device__ static void deq(const uint4 *q, float *o)
    {
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const uint32_t w[4] = { q[k].x, q[k].y, q[k].z, q[k].w };
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    o[16 * k + 4 * i + j] = (float)(int8_t)((w[i] >> (8 * j)) & 0xff);
        }
    }
};

struct TQ4 {
    enum { E = 32, NQ = 1, HAS_D = 1, QX = 1 };
    __device__ static float dotq(const uint4 *q, const uint4 *x, float2 xd)
    {
        const uint32_t w[4] = { q[0].x, q[0].y, q[0].z, q[0].w };
        const uint32_t lo[4] = { x[0].x, x[0].y, x[0].z, x[0].w }, hi[4] = { x[1].x, x[1].y, x[1].z, x[1].w };
        int s = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            s = dp4a(w[i] & 0x0f0f0f0fu, lo[i], s);
            s = dp4a((w[i] >> 4) & 0x0f0f0f0fu, hi[i], s);
        }
        /* Σ (q - 8) x = Σ q x - 8 Σ x, as explicit roundings: no contraction into an fma that
         * could differ between the kernel's instantiations */
        return __fsub_rn(__fmul_rn(xd.x, (float)s), __fmul_rn(8.0f, xd.y));
    }
    __device__ static void deq(const uint4 *q, float *o)
    {
        const uint32_t w[4] = { q[0].x, q[0].y, q[0].z, q[0].w };
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const uint32_t byte = (w[i] >> (8 * j)) & 0xff;
                o[4 * i + j] = (float)(int)(byte & 0xf) - 8.0f;
                o[16 + 4 * i + j] = (float)(int)(byte >> 4) - 8.0f;
            }
    }
};

/* Run the statement with T = the traits of a runtime type; an unsupported type is an error. */
#define CUK_DISPATCH(type, ...)                                                                   \
    switch (type) {                                                                                \
    case PI_TYPE_F32: { typedef TF32 T; __VA_ARGS__; } break;                                             \
    case PI_TYPE_F16: { typedef TF16 T; __VA_ARGS__; } break;                                             \
    case PI_TYPE_BF16: { typedef TBF16 T; __VA_ARGS__; } break;                                           \
    case PI_TYPE_Q8_0: { typedef TQ8 T; __VA_ARGS__; } break;                                             \
    case PI_TYPE_Q4_0: { typedef TQ4 T; __VA_ARGS__; } break;                                             \
    default: return -(int)cudaErrorInvalidValue;                                                   \
    }

#endif
