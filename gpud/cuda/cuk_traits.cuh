/* cuk_traits.cuh — the block-type traits of the CUDA-core templated kernels (one GEMV, GLU, AXPY,
 * get_rows, dequant and repack template for every weight type; no copy of a kernel per type).
 *
 * A lane block is what one lane loads at a time: E elements held in NQ 16-byte words of the
 * repacked quants, plus side data (scales, mins, high bits) from the row's side array ("d"),
 * sbytes(nb) bytes per row of nb lane blocks. Every trait has:
 *   S                    the side data of one lane block, as side() loads it
 *   sbytes(nb)           side bytes per row (host and device)
 *   side(srow, nb, b, s) load lane block b's side data from its row's side array
 *   deqs(q, s, o)        the E values, scaled (get_rows, dequant to f16)
 *   axpy(q, s, a, acc)   acc[e] += a · value_e (the sparse down projection)
 * and the types that dot a Q8-quantized activation (QX: 32 int8 per block with (d, d·Σq), as the
 * CPU's kernels do) dot(q, s, xq, xd, acc): acc plus the lane block's dot with one activation block,
 * its integer part as dp4a. The GGUF types other than F32/F16/BF16/Q8_0/Q4_0 have GQ/GB (elements
 * and bytes of a GGUF block) and repack(blk, qrow, srow, nb, g): GGUF block g of a row → its lane
 * blocks, a lossless re-encoding (each value is the CPU's dequantized value).
 *
 * The device layouts, per 32-element lane block (N4: byte j = element j | element j+16 << 4):
 *   Q4_1   q N4            side half2 (d, m)
 *   Q5_0   q N4 low bits   side u32 5th bits (bit j = element j), then half d
 *   Q5_1   q N4 low bits   side u32 5th bits, then half2 (d, m)
 *   IQ4_NL q N4 indices    side half d
 *   Q4_K   q N4            side uchar2 (scale, min), then per super-block half2 (d, dmin)
 *   Q5_K   q N4 low bits   side u32 5th bits, uchar2 (scale, min), per super-block half2 (d, dmin)
 *   Q6_K   q N4 low bits   side uint2 high 2-bit pairs (element j at bits 2j of word j / 16), char2
 *                          scales of the two 16-element sub-blocks, per super-block half d
 *   IQ4_XS q N4 indices    side char (scale - 32), per super-block half d
 *   Q2_K   q: words x, y the 2-bit quants (byte k of the 8: elements k, k+8, k+16, k+24 at bits
 *          0, 2, 4, 6), z the two sub-blocks' scale bytes (scale | min << 4), w unused; side per
 *          super-block half2 (d, dmin)
 *   Q3_K   q: x, y the low 2 bits as Q2_K, z the high bits (bit j = element j), w char2 scales
 *          (already minus 32); side per super-block half d
 * Side rows are padded to 16 bytes (and the per-super-block parts count ceil(nb / 8), so every
 * quantized type has a side array: cudev takes that as "quantized"). Q2_K/Q3_K spend 4 bits a weight
 * (GGUF 2.6/3.4): the lane block's quants and scales in its one word. engine/vram_plan.c mirrors
 * these sizes. Every encoding is lossless: deqs gives the CPU's to_float bit for bit. */
#ifndef PI_CUK_TRAITS_CUH
#define PI_CUK_TRAITS_CUH

#ifndef CUK_TRAITS_EMU /* a host build of the traits alone supplies these (a test of the encodings) */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#endif

#include <stdint.h>

extern "C" {
#include "quant.h"
#include "quant_blocks.h"
}
/* ---- block-type traits: NQ 16-byte words hold E elements (times a scale when HAS_D) ---- */

/* The five first types: the lane block's values are deq() times one f16 scale per lane block (Q8_0,
 * Q4_0: HAS_D) or times 1 (float types). */
template <class D> struct Scaled {
    struct S {
        float d;
    };
    __host__ __device__ static constexpr int64_t sbytes(int64_t nb) { return D::HAS_D ? 2 * nb : 0; }
    __device__ static void side(const uint8_t *srow, int64_t nb, int64_t b, S &s)
    {
        (void)nb;
        s.d = D::HAS_D ? __half2float(((const __half *)srow)[b]) : 1.0f;
    }
    __device__ static float dot(const uint4 *q, const S &s, const uint4 *x, float2 xd, float acc)
    {
        return __fmaf_rn(s.d, D::dotq(q, x, xd), acc);
    }
    __device__ static void deqs(const uint4 *q, const S &s, float *o)
    {
        D::deq(q, o);
#pragma unroll
        for (int e = 0; e < D::E; e++)
            o[e] = o[e] * s.d;
    }
    __device__ static void axpy(const uint4 *q, const S &s, float a, float *acc)
    {
        float w[D::E];
        D::deq(q, w);
        const float as = a * s.d; /* the scale folded first, as the CPU's axpy kernels do */
#pragma unroll
        for (int e = 0; e < D::E; e++)
            acc[e] = __fmaf_rn(as, w[e], acc[e]);
    }
};

struct TF32 : Scaled<TF32> {
    enum { E = 4, NQ = 1, HAS_D = 0, QX = 0, GQ = E, GB = 0 };
    __device__ static void deq(const uint4 *q, float *o)
    {
        o[0] = __uint_as_float(q[0].x), o[1] = __uint_as_float(q[0].y);
        o[2] = __uint_as_float(q[0].z), o[3] = __uint_as_float(q[0].w);
    }
};

__device__ static inline float h_lo(uint32_t w) { return __half2float(__ushort_as_half((unsigned short)(w & 0xffff))); }
__device__ static inline float h_hi(uint32_t w) { return __half2float(__ushort_as_half((unsigned short)(w >> 16))); }

struct TF16 : Scaled<TF16> {
    enum { E = 8, NQ = 1, HAS_D = 0, QX = 0, GQ = E, GB = 0 };
    __device__ static void deq(const uint4 *q, float *o)
    {
        const uint32_t w[4] = { q[0].x, q[0].y, q[0].z, q[0].w };
#pragma unroll
        for (int i = 0; i < 4; i++)
            o[2 * i] = h_lo(w[i]), o[2 * i + 1] = h_hi(w[i]);
    }
};

struct TBF16 : Scaled<TBF16> {
    enum { E = 8, NQ = 1, HAS_D = 0, QX = 0, GQ = E, GB = 0 };
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

struct TQ8 : Scaled<TQ8> {
    enum { E = 32, NQ = 2, HAS_D = 1, QX = 1, GQ = E, GB = 0 };
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

struct TQ4 : Scaled<TQ4> {
    enum { E = 32, NQ = 1, HAS_D = 1, QX = 1, GQ = E, GB = 0 };
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

/* ---- the GGUF types repacked at upload (see the layouts at the top) ---- */

__device__ static inline uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
__device__ static inline uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
__device__ static inline float f16b(uint32_t bits) { return __half2float(__ushort_as_half((unsigned short)bits)); }
/* 4 bits → bit 0 of each byte (the four partial products do not overlap) */
__device__ static inline uint32_t spread4(uint32_t x) { return ((x & 15u) * 0x00204081u) & 0x01010101u; }
/* four 2-bit fields of a byte → bits 0-1 of each byte */
__device__ static inline uint32_t spread2(uint32_t y)
{
    return (y & 3u) | ((y & 0xcu) << 6) | ((y & 0x30u) << 12) | ((y & 0xc0u) << 18);
}
/* the 4 activation words of elements 16k..16k+15 */
__device__ static inline uint32_t xw(const uint4 *x, int i)
{
    const uint4 v = x[i >> 2];
    const int k = i & 3;
    return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w;
}
__device__ static inline uint32_t qw(const uint4 &v, int k) { return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w; }

/* The N4 word i (0..7) of a lane block: elements 4i..4i+3, one per byte, 0..15. */
__device__ static inline uint32_t n4(const uint4 *q, int i)
{
    const uint32_t w = qw(q[0], i & 3);
    return i < 4 ? w & 0x0f0f0f0fu : (w >> 4) & 0x0f0f0f0fu;
}

/* IQ4: four indices (one per byte) → their four int8 grid values, by two byte permutes of the
 * 16-byte table and a select on each index's bit 3. */
__host__ __device__ static constexpr uint32_t iq4_word(int k)
{
    constexpr int8_t iq4_grid[16] = IQ4_NL_VALUES;
    return (uint32_t)(uint8_t)iq4_grid[4 * k] | ((uint32_t)(uint8_t)iq4_grid[4 * k + 1] << 8) |
           ((uint32_t)(uint8_t)iq4_grid[4 * k + 2] << 16) | ((uint32_t)(uint8_t)iq4_grid[4 * k + 3] << 24);
}
__device__ static inline uint32_t iq4_lut(uint32_t idx)
{
    const uint32_t t = idx | (idx >> 4), sel = ((t & 0xffu) | ((t >> 8) & 0xff00u)) & 0x7777u;
    const uint32_t lo = __byte_perm(iq4_word(0), iq4_word(1), sel), hi = __byte_perm(iq4_word(2), iq4_word(3), sel);
    const uint32_t m = ((idx >> 3) & 0x01010101u) * 0xffu;
    return (lo & ~m) | (hi & m);
}

/* Σ over the lane block of (quant word i) · (activation word i), quant words from F (signed or
 * unsigned bytes that dp4a reads as signed: every quant here is < 128). */
template <class F> __device__ static inline int dot8(const uint4 *x, F f)
{
    int s = 0;
#pragma unroll
    for (int i = 0; i < 8; i++)
        s = dp4a(f(i), xw(x, i), s);
    return s;
}
/* the same over words [4k, 4k + 4): one 16-element half */
template <class F> __device__ static inline int dot4(const uint4 *x, int k, F f)
{
    int s = 0;
#pragma unroll
    for (int i = 4 * k; i < 4 * k + 4; i++)
        s = dp4a(f(i), xw(x, i), s);
    return s;
}

/* The element values of a lane block from its integer quants: o[e] = val(e) with qi(i) the word
 * of elements 4i..4i+3 (as int8 bytes). */
template <class F> __device__ static inline void bytes8(float *o, F qi)
{
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const uint32_t w = qi(i);
#pragma unroll
        for (int j = 0; j < 4; j++)
            o[4 * i + j] = (float)(int8_t)((w >> (8 * j)) & 0xff);
    }
}

/* repack helpers: the N4 word of 32 quants q[0..32) (each < 16) */
__device__ static inline void put_n4(uint8_t *dst, const uint8_t *q)
{
    for (int k = 0; k < 16; k++)
        dst[k] = (uint8_t)((q[k] & 15) | ((q[k + 16] & 15) << 4));
}
__device__ static inline void put16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }
__device__ static inline void put32(uint8_t *p, uint32_t v)
{
    for (int k = 0; k < 4; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}
/* Q2_K/Q3_K's two words of 2-bit fields of 32 quants */
__device__ static inline void put_2bit(uint8_t *dst, const uint8_t *q)
{
    for (int k = 0; k < 8; k++)
        dst[k] = (uint8_t)((q[k] & 3) | ((q[k + 8] & 3) << 2) | ((q[k + 16] & 3) << 4) | ((q[k + 24] & 3) << 6));
}
/* their word i (0..7): elements 4i..4i+3 */
__device__ static inline uint32_t two_bit(const uint4 *q, int i)
{
    return ((i & 1 ? q[0].y : q[0].x) >> (2 * (i >> 1))) & 0x03030303u;
}
/* bits 4i..4i+3 of h, each to bit `at` of its byte */
__device__ static inline uint32_t hbits(uint32_t h, int i, int at) { return spread4(h >> (4 * i)) << at; }

/* the generic parts of the types whose values are deqs(): axpy over them */
template <class D> struct Deq {
    template <class SS> __device__ static void axpy(const uint4 *q, const SS &s, float a, float *acc)
    {
        float w[D::E];
        D::deqs(q, s, w);
#pragma unroll
        for (int e = 0; e < D::E; e++)
            acc[e] = __fmaf_rn(a, w[e], acc[e]);
    }
};

/* values (d q + m): Q4_1, Q5_1 (u unsigned quants) */
struct TQ4_1 : Deq<TQ4_1> {
    enum { E = 32, NQ = 1, HAS_D = 1, QX = 1, GQ = 32, GB = 20 };
    struct S {
        float d, m;
    };
    __host__ __device__ static constexpr int64_t sbytes(int64_t nb) { return (4 * nb + 15) / 16 * 16; }
    __device__ static void side(const uint8_t *sr, int64_t nb, int64_t b, S &s)
    {
        (void)nb;
        const uint32_t v = __ldg((const unsigned int *)sr + b);
        s.d = f16b(v & 0xffff), s.m = f16b(v >> 16);
    }
    __device__ static float dot(const uint4 *q, const S &s, const uint4 *x, float2 xd, float acc)
    {
        const int p = dot8(x, [&](int i) { return n4(q, i); });
        return __fmaf_rn(s.d, __fmul_rn(xd.x, (float)p), __fmaf_rn(s.m, xd.y, acc));
    }
    __device__ static void deqs(const uint4 *q, const S &s, float *o)
    {
        bytes8(o, [&](int i) { return n4(q, i); });
#pragma unroll
        for (int e = 0; e < E; e++)
            o[e] = __fadd_rn(__fmul_rn(s.d, o[e]), s.m);
    }
    __device__ static void repack(const uint8_t *blk, uint8_t *qr, uint8_t *sr, int64_t nb, int64_t g)
    {
        (void)nb;
        for (int k = 0; k < 16; k++)
            qr[16 * g + k] = blk[4 + k];
        for (int k = 0; k < 4; k++)
            sr[4 * g + k] = blk[k];
    }
};

/* Q5_0: d (q5 - 16); Q5_1: d q5 + m (MIN) */
template <bool MIN> struct TQ5x : Deq<TQ5x<MIN>> {
    enum { E = 32, NQ = 1, HAS_D = 1, QX = 1, GQ = 32, GB = MIN ? 24 : 22 };
    struct S {
        float d, m;
        uint32_t h;
    };
    __host__ __device__ static constexpr int64_t sbytes(int64_t nb) { return ((MIN ? 8 : 6) * nb + 15) / 16 * 16; }
    __device__ static void side(const uint8_t *sr, int64_t nb, int64_t b, S &s)
    {
        s.h = __ldg((const unsigned int *)sr + b);
        if (MIN) {
            const uint32_t v = __ldg((const unsigned int *)(sr + 4 * nb) + b);
            s.d = f16b(v & 0xffff), s.m = f16b(v >> 16);
        } else {
            s.d = __half2float(__ldg((const __half *)(sr + 4 * nb) + b)), s.m = 0.0f;
        }
    }
    __device__ static uint32_t q5(const uint4 *q, const S &s, int i)
    {
        const uint32_t u = n4(q, i) | hbits(s.h, i, 4);
        return MIN ? u : __vsub4(u, 0x10101010u);
    }
    __device__ static float dot(const uint4 *q, const S &s, const uint4 *x, float2 xd, float acc)
    {
        const int p = dot8(x, [&](int i) { return q5(q, s, i); });
        if (MIN)
            return __fmaf_rn(s.d, __fmul_rn(xd.x, (float)p), __fmaf_rn(s.m, xd.y, acc));
        return __fmaf_rn(s.d, __fmul_rn(xd.x, (float)p), acc);
    }
    __device__ static void deqs(const uint4 *q, const S &s, float *o)
    {
        bytes8(o, [&](int i) { return q5(q, s, i); });
#pragma unroll
        for (int e = 0; e < E; e++)
            o[e] = MIN ? __fadd_rn(__fmul_rn(s.d, o[e]), s.m) : __fmul_rn(s.d, o[e]);
    }
    __device__ static void repack(const uint8_t *blk, uint8_t *qr, uint8_t *sr, int64_t nb, int64_t g)
    {
        const int o = MIN ? 8 : 6; /* qs after d (m) and qh */
        for (int k = 0; k < 16; k++)
            qr[16 * g + k] = blk[o + k];
        for (int k = 0; k < 4; k++)
            sr[4 * g + k] = blk[o - 4 + k];
        for (int k = 0; k < (MIN ? 4 : 2); k++)
            sr[4 * nb + (MIN ? 4 : 2) * g + k] = blk[k];
    }
};
typedef TQ5x<false> TQ5_0;
typedef TQ5x<true> TQ5_1;

/* IQ4_NL: d grid[q]; IQ4_XS (XS): d (scale - 32) grid[q], 8 lane blocks to a super-block */
template <bool XS> struct TIQ4 : Deq<TIQ4<XS>> {
    enum { E = 32, NQ = 1, HAS_D = 1, QX = 1, GQ = XS ? 256 : 32, GB = XS ? 136 : 18 };
    struct S {
        float d;
    };
    __host__ __device__ static constexpr int64_t sbytes(int64_t nb)
    {
        return ((XS ? nb + 2 * ((nb + 7) / 8) : 2 * nb) + 15) / 16 * 16;
    }
    __device__ static void side(const uint8_t *sr, int64_t nb, int64_t b, S &s)
    {
        if (XS) /* d (scale - 32): exact in f32 (11 by 6 bits) */
            s.d = __half2float(__ldg((const __half *)(sr + nb) + b / 8)) * (float)(int8_t)__ldg(sr + b);
        else
            s.d = __half2float(__ldg((const __half *)sr + b));
    }
    __device__ static float dot(const uint4 *q, const S &s, const uint4 *x, float2 xd, float acc)
    {
        (void)xd;
        const int p = dot8(x, [&](int i) { return iq4_lut(n4(q, i)); });
        return __fmaf_rn(s.d, __fmul_rn(xd.x, (float)p), acc);
    }
    __device__ static void deqs(const uint4 *q, const S &s, float *o)
    {
        bytes8(o, [&](int i) { return iq4_lut(n4(q, i)); });
#pragma unroll
        for (int e = 0; e < E; e++)
            o[e] = __fmul_rn(s.d, o[e]);
    }
    __device__ static void repack(const uint8_t *blk, uint8_t *qr, uint8_t *sr, int64_t nb, int64_t g)
    {
        if (!XS) {
            for (int k = 0; k < 16; k++)
                qr[16 * g + k] = blk[2 + k];
            sr[2 * g] = blk[0], sr[2 * g + 1] = blk[1];
            return;
        }
        const uint32_t sh = rd16(blk + 2);
        for (int j = 0; j < 8; j++) { /* sub-block j's 16 bytes are already N4 */
            const int64_t b = 8 * g + j;
            for (int k = 0; k < 16; k++)
                qr[16 * b + k] = blk[8 + 16 * j + k];
            const int ls = ((blk[4 + j / 2] >> (4 * (j % 2))) & 15) | (((sh >> (2 * j)) & 3) << 4);
            sr[b] = (uint8_t)(int8_t)(ls - 32);
        }
        sr[nb + 2 * g] = blk[0], sr[nb + 2 * g + 1] = blk[1];
    }
};
typedef TIQ4<false> TIQ4_NL;
typedef TIQ4<true> TIQ4_XS;

/* Q4_K/Q5_K's scale and min of sub-block j (ggml's get_scale_min_k4 layout) */
__device__ static inline void k4_sm(const uint8_t *q, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63, *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Q4_K, Q5_K (H: the 5th bit): (d sc) q - (dmin m) per 32-element sub-block = lane block */
template <bool H> struct TQ45K : Deq<TQ45K<H>> {
    enum { E = 32, NQ = 1, HAS_D = 1, QX = 1, GQ = 256, GB = H ? 176 : 144 };
    struct S {
        float d, m;
        uint32_t h;
    };
    enum { SM = H ? 4 : 0 }; /* the (scale, min) bytes after the 5th bits */
    __host__ __device__ static constexpr int64_t sbytes(int64_t nb) { return ((SM + 2) * nb + 4 * ((nb + 7) / 8) + 15) / 16 * 16; }
    __device__ static void side(const uint8_t *sr, int64_t nb, int64_t b, S &s)
    {
        s.h = H ? __ldg((const unsigned int *)sr + b) : 0u;
        const uint16_t sm = __ldg((const unsigned short *)(sr + SM * nb) + b);
        const uint32_t dd = __ldg((const unsigned int *)(sr + (SM + 2) * nb) + b / 8);
        /* d sc and dmin m: exact in f32 (11 by 6 bits), as the CPU's dl and ml */
        s.d = f16b(dd & 0xffff) * (float)(sm & 0xff), s.m = f16b(dd >> 16) * (float)(sm >> 8);
    }
    __device__ static uint32_t qi(const uint4 *q, const S &s, int i) { return H ? n4(q, i) | hbits(s.h, i, 4) : n4(q, i); }
    __device__ static float dot(const uint4 *q, const S &s, const uint4 *x, float2 xd, float acc)
    {
        const int p = dot8(x, [&](int i) { return qi(q, s, i); });
        return __fmaf_rn(s.d, __fmul_rn(xd.x, (float)p), __fmaf_rn(-s.m, xd.y, acc));
    }
    __device__ static void deqs(const uint4 *q, const S &s, float *o)
    {
        bytes8(o, [&](int i) { return qi(q, s, i); });
#pragma unroll
        for (int e = 0; e < E; e++)
            o[e] = __fsub_rn(__fmul_rn(s.d, o[e]), s.m);
    }
    __device__ static void repack(const uint8_t *blk, uint8_t *qr, uint8_t *sr, int64_t nb, int64_t g)
    {
        const uint8_t *scales = blk + 4, *qh = blk + 16, *qs = blk + (H ? 48 : 16);
        for (int j = 0; j < 8; j++) {
            const int64_t b = 8 * g + j;
            uint8_t q[32];
            uint32_t h = 0;
            for (int l = 0; l < 32; l++) {
                const uint8_t byte = qs[32 * (j / 2) + l];
                q[l] = j % 2 ? byte >> 4 : byte & 15;
                if (H)
                    h |= (uint32_t)((qh[l] >> j) & 1) << l;
            }
            put_n4(qr + 16 * b, q);
            if (H)
                put32(sr + 4 * b, h);
            int sc, m;
            k4_sm(scales, j, &sc, &m);
            sr[SM * nb + 2 * b] = (uint8_t)sc, sr[SM * nb + 2 * b + 1] = (uint8_t)m;
        }
        for (int k = 0; k < 4; k++)
            sr[(SM + 2) * nb + 4 * g + k] = blk[k];
    }
};
typedef TQ45K<false> TQ4_K;
typedef TQ45K<true> TQ5_K;

/* Q6_K: d sc_k (q6 - 32), two 16-element sub-blocks k to a lane block */
struct TQ6_K : Deq<TQ6_K> {
    enum { E = 32, NQ = 1, HAS_D = 1, QX = 1, GQ = 256, GB = 210 };
    struct S {
        float d;
        uint32_t h0, h1;
        int sc0, sc1;
    };
    __host__ __device__ static constexpr int64_t sbytes(int64_t nb) { return (10 * nb + 2 * ((nb + 7) / 8) + 15) / 16 * 16; }
    __device__ static void side(const uint8_t *sr, int64_t nb, int64_t b, S &s)
    {
        const uint2 h = __ldg((const uint2 *)sr + b);
        const uint16_t sc = __ldg((const unsigned short *)(sr + 8 * nb) + b);
        s.h0 = h.x, s.h1 = h.y;
        s.sc0 = (int8_t)(sc & 0xff), s.sc1 = (int8_t)(sc >> 8);
        s.d = __half2float(__ldg((const __half *)(sr + 10 * nb) + b / 8));
    }
    __device__ static uint32_t qi(const uint4 *q, const S &s, int i)
    {
        const uint32_t hb = ((i < 4 ? s.h0 : s.h1) >> (8 * (i & 3))) & 0xffu;
        return __vsub4(n4(q, i) | (spread2(hb) << 4), 0x20202020u);
    }
    __device__ static float dot(const uint4 *q, const S &s, const uint4 *x, float2 xd, float acc)
    {
        const int p0 = dot4(x, 0, [&](int i) { return qi(q, s, i); });
        const int p1 = dot4(x, 1, [&](int i) { return qi(q, s, i); });
        return __fmaf_rn(s.d, __fmul_rn(xd.x, (float)(s.sc0 * p0 + s.sc1 * p1)), acc);
    }
    __device__ static void deqs(const uint4 *q, const S &s, float *o)
    {
        bytes8(o, [&](int i) { return qi(q, s, i); });
        const float d0 = s.d * (float)s.sc0, d1 = s.d * (float)s.sc1;
#pragma unroll
        for (int e = 0; e < E; e++)
            o[e] = __fmul_rn(e < 16 ? d0 : d1, o[e]);
    }
    __device__ static void repack(const uint8_t *blk, uint8_t *qr, uint8_t *sr, int64_t nb, int64_t g)
    {
        const uint8_t *ql = blk, *qh = blk + 128;
        const int8_t *scales = (const int8_t *)(blk + 192);
        for (int j = 0; j < 8; j++) {
            const int64_t b = 8 * g + j;
            const int hh = j / 4, quarter = j % 4;
            uint8_t q[32];
            uint32_t h[2] = { 0, 0 };
            for (int l = 0; l < 32; l++) {
                const uint8_t lb = ql[64 * hh + l + 32 * (quarter & 1)];
                q[l] = quarter < 2 ? lb & 15 : lb >> 4;
                h[l / 16] |= (uint32_t)((qh[32 * hh + l] >> (2 * quarter)) & 3) << (2 * (l % 16));
            }
            put_n4(qr + 16 * b, q);
            put32(sr + 8 * b, h[0]), put32(sr + 8 * b + 4, h[1]);
            sr[8 * nb + 2 * b] = (uint8_t)scales[2 * j], sr[8 * nb + 2 * b + 1] = (uint8_t)scales[2 * j + 1];
        }
        sr[10 * nb + 2 * g] = blk[208], sr[10 * nb + 2 * g + 1] = blk[209];
    }
};

/* Q2_K: d sc_k q - dmin m_k; Q3_K: d sc_k (q3 - 4); two 16-element sub-blocks k to a lane block,
 * the quants and sub-block scales in the lane block's word, per super-block d (and dmin) in the side */
template <bool Q3> struct TQ23K : Deq<TQ23K<Q3>> {
    enum { E = 32, NQ = 1, HAS_D = 1, QX = 1, GQ = 256, GB = Q3 ? 110 : 84 };
    struct S {
        float d, dmin;
    };
    __host__ __device__ static constexpr int64_t sbytes(int64_t nb) { return ((Q3 ? 2 : 4) * ((nb + 7) / 8) + 15) / 16 * 16; }
    __device__ static void side(const uint8_t *sr, int64_t nb, int64_t b, S &s)
    {
        (void)nb;
        if (Q3) {
            s.d = __half2float(__ldg((const __half *)sr + b / 8)), s.dmin = 0.0f;
        } else {
            const uint32_t v = __ldg((const unsigned int *)sr + b / 8);
            s.d = f16b(v & 0xffff), s.dmin = f16b(v >> 16);
        }
    }
    __device__ static uint32_t qi(const uint4 *q, int i)
    {
        return Q3 ? __vsub4(two_bit(q, i) | hbits(q[0].z, i, 2), 0x04040404u) : two_bit(q, i);
    }
    /* sub-block k's scale and min (Q2_K: the scale byte in z; Q3_K: the int8 in w) */
    __device__ static int sc(const uint4 *q, int k)
    {
        return Q3 ? (int)(int8_t)((q[0].w >> (8 * k)) & 0xff) : (int)((q[0].z >> (8 * k)) & 15);
    }
    __device__ static int mn(const uint4 *q, int k) { return Q3 ? 0 : (int)((q[0].z >> (8 * k + 4)) & 15); }
    __device__ static float dot(const uint4 *q, const S &s, const uint4 *x, float2 xd, float acc)
    {
        const int p0 = dot4(x, 0, [&](int i) { return qi(q, i); });
        const int p1 = dot4(x, 1, [&](int i) { return qi(q, i); });
        const int isum = sc(q, 0) * p0 + sc(q, 1) * p1;
        if (Q3)
            return __fmaf_rn(s.d, __fmul_rn(xd.x, (float)isum), acc);
        const int x0 = dot4(x, 0, [](int) { return 0x01010101u; }), x1 = dot4(x, 1, [](int) { return 0x01010101u; });
        const int msum = mn(q, 0) * x0 + mn(q, 1) * x1;
        return __fmaf_rn(xd.x, __fmaf_rn(s.d, (float)isum, -__fmul_rn(s.dmin, (float)msum)), acc);
    }
    __device__ static void deqs(const uint4 *q, const S &s, float *o)
    {
        bytes8(o, [&](int i) { return qi(q, i); });
        float dl[2], ml[2];
#pragma unroll
        for (int k = 0; k < 2; k++) /* as the CPU's dl = d sc, ml = dmin m */
            dl[k] = s.d * (float)sc(q, k), ml[k] = s.dmin * (float)mn(q, k);
#pragma unroll
        for (int e = 0; e < E; e++)
            o[e] = __fsub_rn(__fmul_rn(dl[e / 16], o[e]), ml[e / 16]);
    }
    __device__ static void repack(const uint8_t *blk, uint8_t *qr, uint8_t *sr, int64_t nb, int64_t g)
    {
        (void)nb;
        const uint8_t *hmask = blk, *qs = blk + (Q3 ? 32 : 16), *scb = Q3 ? blk + 96 : blk;
        for (int j = 0; j < 8; j++) {
            const int64_t b = 8 * g + j;
            uint8_t q[32];
            uint32_t h = 0;
            for (int l = 0; l < 32; l++) {
                const int e = 32 * j + l;
                q[l] = (uint8_t)((qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3);
                if (Q3)
                    h |= (uint32_t)((hmask[l] >> j) & 1) << l;
            }
            uint8_t *w = qr + 16 * b;
            put_2bit(w, q);
            for (int k = 8; k < 16; k++)
                w[k] = 0;
            if (Q3) {
                put32(w + 8, h);
                for (int k = 0; k < 2; k++) {
                    const int jj = 2 * j + k, lo = jj < 8 ? scb[jj] & 15 : scb[jj - 8] >> 4;
                    w[12 + k] = (uint8_t)(int8_t)((lo | (((scb[8 + jj % 4] >> (2 * (jj / 4))) & 3) << 4)) - 32);
                }
            } else {
                w[8] = scb[2 * j], w[9] = scb[2 * j + 1];
            }
        }
        for (int k = 0; k < (Q3 ? 2 : 4); k++)
            sr[(Q3 ? 2 : 4) * g + k] = blk[Q3 ? 108 + k : 80 + k];
    }
};
typedef TQ23K<false> TQ2_K;
typedef TQ23K<true> TQ3_K;

/* Run the statement with T = the traits of a runtime type; otherwise FAIL. */
#define CUK_DISPATCH_OR(type, FAIL, ...)                                                                             \
    switch (type) {                                                                                                  \
    case PI_TYPE_F32: { typedef TF32 T; __VA_ARGS__; } break;                                                        \
    case PI_TYPE_F16: { typedef TF16 T; __VA_ARGS__; } break;                                                        \
    case PI_TYPE_BF16: { typedef TBF16 T; __VA_ARGS__; } break;                                                      \
    case PI_TYPE_Q8_0: { typedef TQ8 T; __VA_ARGS__; } break;                                                        \
    case PI_TYPE_Q4_0: { typedef TQ4 T; __VA_ARGS__; } break;                                                        \
    case PI_TYPE_Q4_1: { typedef TQ4_1 T; __VA_ARGS__; } break;                                                      \
    case PI_TYPE_Q5_0: { typedef TQ5_0 T; __VA_ARGS__; } break;                                                      \
    case PI_TYPE_Q5_1: { typedef TQ5_1 T; __VA_ARGS__; } break;                                                      \
    case PI_TYPE_IQ4_NL: { typedef TIQ4_NL T; __VA_ARGS__; } break;                                                  \
    case PI_TYPE_Q2_K: { typedef TQ2_K T; __VA_ARGS__; } break;                                                      \
    case PI_TYPE_Q3_K: { typedef TQ3_K T; __VA_ARGS__; } break;                                                      \
    case PI_TYPE_Q4_K: { typedef TQ4_K T; __VA_ARGS__; } break;                                                      \
    case PI_TYPE_Q5_K: { typedef TQ5_K T; __VA_ARGS__; } break;                                                      \
    case PI_TYPE_Q6_K: { typedef TQ6_K T; __VA_ARGS__; } break;                                                      \
    case PI_TYPE_IQ4_XS: { typedef TIQ4_XS T; __VA_ARGS__; } break;                                                  \
    default: FAIL;                                                                                                   \
    }
/* ... and an unsupported type is an error of the launcher */
#define CUK_DISPATCH(type, ...) CUK_DISPATCH_OR(type, return -(int)cudaErrorInvalidValue, __VA_ARGS__)

#endif
