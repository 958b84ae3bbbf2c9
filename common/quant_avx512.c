/* quant_avx512.c — AVX-512 kernels (F, BW, VL, DQ, VNNI, with F16C/FMA): the float types, Q8_0, Q4_0
 * and the K-quants Q4_K, Q5_K, Q6_K. This file alone is compiled with those flags; nothing here runs
 * before quant_init() has checked cpuid, so it is only reached through the table that
 * quant_avx512_install() patches (a copy of the AVX2 table: the types not named here keep their AVX2
 * kernels) and through quant_avx512_gemv_rows().
 *
 * Invariance: a row's dot is the same bits through the single-row vec_dot and through the
 * multi-row GEMV, which only prepares what depends on the activation once per call (its scales as
 * f32, its quants in the order the weights unpack in, the offset corrections as int32 lanes): the
 * prepared values are the very integers and floats the single-row kernel computes on the fly, and both
 * run one body (row_q8_0 / row_q4_0 ... with or without a prepared activation), so the float
 * operations and their order are the same. The K-quant dots do the reference's integer sums exactly
 * and its float operations per super-block in its order: they equal the scalar reference bit for bit
 * (as the AVX2 ones do). The AXPYs and dequantizers do the reference's float operation per element.
 *
 * Integer dots: vpdpbusd takes an unsigned operand; Q8_0 weights are made unsigned by adding 128
 * (x ^ 0x80), Q4_0 nibbles already are, and the offset comes back as an int32 correction per lane,
 * c = -off * Σy over the lane's four bytes (exact). The K-quants use vpmaddubsw (pairs to int16:
 * at most 2 * 63 * 128) and vpdpwssd against the sub-block scales.
 *
 * BF16: vdpbf16ps would round the f32 activation to bf16 (an error far above float rounding, and one
 * the oracle does not make); bf16 weights widen exactly with a shift instead, and the GEMV is bound
 * by the weights' bytes either way. */
#if defined(PI_AVX512_EMULATE)
#include "quant_avx512_emu.h"
#define quant_avx512_install quant_avx512emu_install
#define quant_avx512_gemv_rows quant_avx512emu_gemv_rows
#define quant_avx512_gemm_rows quant_avx512emu_gemm_rows
#else
#include <immintrin.h>
#endif
#include "quant_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define F32_PER_VEC 16    /* floats in a __m512 */
#define UNROLL 4          /* independent accumulators: covers FMA latency x throughput */
#define F32_PER_ITER (F32_PER_VEC * UNROLL)
#define BF16_SHIFT 16
#define NIBBLE 0x0f
#define Q8_0_OFFSET 128   /* q + 128 is unsigned: vpdpbusd's first operand */
#define Q4_0_OFFSET 8
#define F16_RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define CACHE_LINE 64
#define CHUNKS (QK_K / 32)
#ifndef PREFETCH_BYTES
#define PREFETCH_BYTES 3072 /* as quant_avx2.c: weights this far ahead */
#endif
#define GEMV_MAX_BLOCKS 2048 /* 32-element blocks of a prepared activation: rows up to 65536 */

/* ---- reductions: explicit halvings, so that every build (and the emulation) adds in one order -- */

static inline float hsum_f32x8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float hsum_f32x16(__m512 v)
{
    const __m256 lo = _mm512_castps512_ps256(v);
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    return hsum_f32x8(_mm256_add_ps(lo, hi));
}

static inline int32_t hsum_i32x8(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

static inline int32_t hsum_i32x16(__m512i v)
{
    return hsum_i32x8(_mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)));
}

static inline __m512i zext256(__m256i v)
{
    return _mm512_inserti64x4(_mm512_setzero_si512(), v, 0);
}

/* [lo | hi] from two 32-byte halves */
static inline __m512i join256(const void *lo, const void *hi)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)lo)),
                              _mm256_loadu_si256((const __m256i *)hi), 1);
}

static inline __mmask16 tail_mask(int64_t r)
{
    return (__mmask16)((1u << r) - 1u);
}

/* ---- float types ----------------------------------------------------------------------------- */

static inline __m512 load16_f32(const void *p, int64_t i) { return _mm512_loadu_ps((const float *)p + i); }
static inline __m512 load16_f16(const void *p, int64_t i)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const pi_f16 *)p + i)));
}
/* bf16 is the top half of an f32: widen to 32 bits and shift into place (exact) */
static inline __m512 load16_bf16(const void *p, int64_t i)
{
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const pi_bf16 *)p + i)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, BF16_SHIFT));
}
/* the first popcount(m) elements, zeros after */
static inline __m512 loadm_f32(const void *p, int64_t i, __mmask16 m) { return _mm512_maskz_loadu_ps(m, (const float *)p + i); }
static inline __m512 loadm_f16(const void *p, int64_t i, __mmask16 m)
{
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const pi_f16 *)p + i));
}
static inline __m512 loadm_bf16(const void *p, int64_t i, __mmask16 m)
{
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const pi_bf16 *)p + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, BF16_SHIFT));
}

#define ELEM_f32 4 /* bytes per element, for the prefetch address */
#define ELEM_f16 2
#define ELEM_bf16 2

/* s = Σ x[i]*y[i]: UNROLL accumulators, then 16-wide, then one masked step; the GEMV runs this per
 * row, so it is the batch path's arithmetic too */
#define VEC_DOT_F(T)                                                                               \
    static void T##_vec_dot_avx512(int64_t n, float *s, const void *x, const void *vy)            \
    {                                                                                              \
        const float *y = vy;                                                                       \
        __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();                             \
        __m512 acc2 = _mm512_setzero_ps(), acc3 = _mm512_setzero_ps();                             \
        int64_t i = 0;                                                                             \
        for (; i + F32_PER_ITER <= n; i += F32_PER_ITER) {                                         \
            for (int k = 0; k < F32_PER_ITER * ELEM_##T; k += CACHE_LINE)                          \
                _mm_prefetch((const char *)x + i * ELEM_##T + PREFETCH_BYTES + k, _MM_HINT_T0);    \
            acc0 = _mm512_fmadd_ps(load16_##T(x, i), _mm512_loadu_ps(y + i), acc0);                \
            acc1 = _mm512_fmadd_ps(load16_##T(x, i + 16), _mm512_loadu_ps(y + i + 16), acc1);      \
            acc2 = _mm512_fmadd_ps(load16_##T(x, i + 32), _mm512_loadu_ps(y + i + 32), acc2);      \
            acc3 = _mm512_fmadd_ps(load16_##T(x, i + 48), _mm512_loadu_ps(y + i + 48), acc3);      \
        }                                                                                          \
        for (; i + F32_PER_VEC <= n; i += F32_PER_VEC)                                             \
            acc0 = _mm512_fmadd_ps(load16_##T(x, i), _mm512_loadu_ps(y + i), acc0);                \
        if (i < n) {                                                                               \
            const __mmask16 m = tail_mask(n - i);                                                  \
            acc1 = _mm512_fmadd_ps(loadm_##T(x, i, m), _mm512_maskz_loadu_ps(m, y + i), acc1);     \
        }                                                                                          \
        *s = hsum_f32x16(_mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));     \
    }

VEC_DOT_F(f32)
VEC_DOT_F(f16)
VEC_DOT_F(bf16)

/* y[i] += a * x[i]: one FMA per element, as the reference */
#define AXPY_F(T)                                                                                  \
    static void T##_axpy_avx512(int64_t n, float *y, float a, const void *x)                       \
    {                                                                                              \
        const __m512 va = _mm512_set1_ps(a);                                                       \
        int64_t i = 0;                                                                             \
        for (; i + F32_PER_VEC <= n; i += F32_PER_VEC)                                             \
            _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, load16_##T(x, i), _mm512_loadu_ps(y + i))); \
        if (i < n) {                                                                               \
            const __mmask16 m = tail_mask(n - i);                                                  \
            _mm512_mask_storeu_ps(y + i, m,                                                        \
                                  _mm512_fmadd_ps(va, loadm_##T(x, i, m), _mm512_maskz_loadu_ps(m, y + i))); \
        }                                                                                          \
    }

AXPY_F(f32)
AXPY_F(f16)
AXPY_F(bf16)

/* dst[i] = f32(src[i]), exact: the row gather (embeddings, dequantized rows) */
#define TO_FLOAT_F(T)                                                                              \
    static void T##_to_float_avx512(const void *src, float *dst, int64_t n)                        \
    {                                                                                              \
        int64_t i = 0;                                                                             \
        for (; i + F32_PER_VEC <= n; i += F32_PER_VEC)                                             \
            _mm512_storeu_ps(dst + i, load16_##T(src, i));                                         \
        if (i < n) {                                                                               \
            const __mmask16 m = tail_mask(n - i);                                                  \
            _mm512_mask_storeu_ps(dst + i, m, loadm_##T(src, i, m));                               \
        }                                                                                          \
    }

TO_FLOAT_F(f16)
TO_FLOAT_F(bf16)

/* dst[i] = f16(src[i]), round to nearest even (vcvtps2ph), as the reference */
static void f16_from_float_avx512(const float *src, void *vdst, int64_t n)
{
    pi_f16 *dst = vdst;
    int64_t i = 0;
    for (; i + F32_PER_VEC <= n; i += F32_PER_VEC)
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtps_ph(_mm512_loadu_ps(src + i), F16_RNE));
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        _mm256_mask_storeu_epi16(dst + i, m, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i), F16_RNE));
    }
}

/* ---- Q8_0 and Q4_0: two blocks per 512-bit vector ---------------------------------------------
 *
 * A pair of blocks (b, b+1) is one vector of 64 weight bytes against 64 activation bytes:
 *  - Q8_0: weights [x_b | x_b+1] + 128, activation [y_b | y_b+1]; lanes 0-7 are block b.
 *  - Q4_0: the 32 packed bytes [qs_b | qs_b+1] unpack (low nibbles, high nibbles) to
 *    [b 0..15 | b+1 0..15 | b 16..31 | b+1 16..31]: the activation is shuffled to that order;
 *    lanes 0-3 and 8-11 are block b.
 * The pair's int32 lanes times a scale vector (dx dy of the lane's block) accumulate into one of two
 * f32 accumulators (pairs alternate). An odd last block runs as a pair whose second block is zero. */

struct act512 {
    int8_t *qs;  /* per pair, in the weights' order; 64-byte aligned */
    int32_t *c;  /* per pair, -off * Σy per lane; 64-byte aligned */
    float *dy;   /* activation scale per block */
};

/* bytes of one prepared activation of nb blocks (pairs rounded up), laid out in buf by act_bind */
static size_t act_bytes(int64_t nb)
{
    const size_t pairs = (size_t)(nb + 1) / 2;
    return pairs * 2 * 64 + ((size_t)nb * sizeof(float) + 63) / 64 * 64;
}

static void act_bind(struct act512 *a, char *buf, int64_t nb)
{
    const size_t pairs = (size_t)(nb + 1) / 2;
    a->qs = (int8_t *)buf;
    a->c = (int32_t *)(buf + pairs * 64);
    a->dy = (float *)(buf + pairs * 128);
}

#define ACT_MAX_BYTES (GEMV_MAX_BLOCKS / 2 * 128 + GEMV_MAX_BLOCKS * 4)

/* activation pair (b, b+1) as 64 bytes in natural order; a lone last block: zeros after it */
static inline __m512i q8_pair_y(const struct block_q8_0 *y, bool two)
{
    return two ? join256(y[0].qs, y[1].qs) : zext256(_mm256_loadu_si256((const __m256i *)y[0].qs));
}

/* [b lo | b+1 lo | b hi | b+1 hi] (128-bit quarters) from [b lo | b hi | b+1 lo | b+1 hi] */
static inline __m512i q4_order(__m512i v)
{
    return _mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(3, 1, 2, 0));
}

/* -off * Σy over each lane's four bytes */
static inline __m512i offset_corr(__m512i yv, int off)
{
    const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)off), yv);
    return _mm512_sub_epi32(_mm512_setzero_si512(), s);
}

/* Q8_0 weights of a pair + 128 */
static inline __m512i q8_pair_x(const struct block_q8_0 *x, bool two)
{
    const __m512i v = two ? join256(x[0].qs, x[1].qs) : zext256(_mm256_loadu_si256((const __m256i *)x[0].qs));
    const __m512i u = _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
    return two ? u : zext256(_mm512_castsi512_si256(u)); /* a missing block stays 0, not 128 */
}

/* Q4_0 nibbles of a pair, unsigned, in [b lo | b+1 lo | b hi | b+1 hi] order */
static inline __m512i q4_pair_x(const struct block_q4_0 *x, bool two)
{
    const __m128i b0 = _mm_loadu_si128((const __m128i *)x[0].qs);
    const __m128i b1 = two ? _mm_loadu_si128((const __m128i *)x[1].qs) : _mm_setzero_si128();
    const __m256i t = _mm256_inserti128_si256(_mm256_castsi128_si256(b0), b1, 1);
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(t), _mm256_srli_epi16(t, 4), 1);
    return _mm512_and_si512(v, _mm512_set1_epi8(NIBBLE));
}

#define Q8_PAIR_MASK 0xff00 /* lanes of block b+1 in a Q8_0 pair */
#define Q4_PAIR_MASK 0xf0f0 /* in a Q4_0 pair */

/* dx dy of each lane's block */
static inline __m512 pair_scale(float s0, float s1, __mmask16 second)
{
    return _mm512_mask_blend_ps(second, _mm512_set1_ps(s0), _mm512_set1_ps(s1));
}

/* One Q8_0 or Q4_0 row against a Q8_0 activation: a prepared one (pa, from act_prepare) or y read
 * on the fly; both give the same lanes, scales and order, so the same bits. */
static inline __attribute__((always_inline)) float row_q80q40(bool q4, const void *vx, const struct block_q8_0 *y,
                                                             const struct act512 *pa, int64_t nb)
{
    const struct block_q8_0 *x8 = vx;
    const struct block_q4_0 *x4 = vx;
    const size_t bsize = q4 ? sizeof *x4 : sizeof *x8;
    const __mmask16 second = q4 ? Q4_PAIR_MASK : Q8_PAIR_MASK;
    __m512 acc[2] = { _mm512_setzero_ps(), _mm512_setzero_ps() };
    for (int64_t b = 0; b < nb; b += 2) {
        const bool two = b + 1 < nb;
        const char *xb = (const char *)vx + (size_t)b * bsize;
        for (size_t k = 0; k < 2 * bsize; k += CACHE_LINE)
            _mm_prefetch(xb + PREFETCH_BYTES + k, _MM_HINT_T0);
        __m512i yv, c;
        float dy0, dy1;
        if (pa) {
            yv = _mm512_load_si512((const void *)(pa->qs + b * QK8_0));
            c = _mm512_load_si512((const void *)(pa->c + b / 2 * F32_PER_VEC));
            dy0 = pa->dy[b];
            dy1 = two ? pa->dy[b + 1] : 0.0f;
        } else {
            yv = q8_pair_y(&y[b], two);
            if (q4)
                yv = q4_order(yv);
            c = offset_corr(yv, q4 ? Q4_0_OFFSET : Q8_0_OFFSET);
            dy0 = _cvtsh_ss(y[b].d);
            dy1 = two ? _cvtsh_ss(y[b + 1].d) : 0.0f;
        }
        const __m512i xv = q4 ? q4_pair_x(&x4[b], two) : q8_pair_x(&x8[b], two);
        const __m512i isum = _mm512_dpbusd_epi32(c, xv, yv);
        const float dx0 = _cvtsh_ss(q4 ? x4[b].d : x8[b].d);
        const float dx1 = two ? _cvtsh_ss(q4 ? x4[b + 1].d : x8[b + 1].d) : 0.0f;
        const __m512 s = pair_scale(dx0 * dy0, dx1 * dy1, second);
        acc[(b / 2) & 1] = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(isum), acc[(b / 2) & 1]);
    }
    return hsum_f32x16(_mm512_add_ps(acc[0], acc[1]));
}

/* The GEMM tile's body: one weight row against nt <= GEMM_TOKENS prepared activations, each weight
 * pair unpacked once for all of them; per token exactly row_q80q40's operations (so each result is
 * that row's GEMV and vec_dot value, bit for bit). */
#define GEMM_TOKENS 4
static inline __attribute__((always_inline)) void rows_q80q40(bool q4, int nt, const void *vx,
                                                             const struct act512 *const *pa, int64_t nb, float *out)
{
    const struct block_q8_0 *x8 = vx;
    const struct block_q4_0 *x4 = vx;
    const size_t bsize = q4 ? sizeof *x4 : sizeof *x8;
    const __mmask16 second = q4 ? Q4_PAIR_MASK : Q8_PAIR_MASK;
    __m512 acc[GEMM_TOKENS][2];
    for (int t = 0; t < nt; t++)
        acc[t][0] = acc[t][1] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b += 2) {
        const bool two = b + 1 < nb;
        const char *xb = (const char *)vx + (size_t)b * bsize;
        for (size_t k = 0; k < 2 * bsize; k += CACHE_LINE)
            _mm_prefetch(xb + PREFETCH_BYTES + k, _MM_HINT_T0);
        const __m512i xv = q4 ? q4_pair_x(&x4[b], two) : q8_pair_x(&x8[b], two);
        const float dx0 = _cvtsh_ss(q4 ? x4[b].d : x8[b].d);
        const float dx1 = two ? _cvtsh_ss(q4 ? x4[b + 1].d : x8[b + 1].d) : 0.0f;
        for (int t = 0; t < nt; t++) {
            const __m512i yv = _mm512_load_si512((const void *)(pa[t]->qs + b * QK8_0));
            const __m512i c = _mm512_load_si512((const void *)(pa[t]->c + b / 2 * F32_PER_VEC));
            const float dy0 = pa[t]->dy[b], dy1 = two ? pa[t]->dy[b + 1] : 0.0f;
            const __m512i isum = _mm512_dpbusd_epi32(c, xv, yv);
            const __m512 s = pair_scale(dx0 * dy0, dx1 * dy1, second);
            acc[t][(b / 2) & 1] = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(isum), acc[t][(b / 2) & 1]);
        }
    }
    for (int t = 0; t < nt; t++)
        out[t] = hsum_f32x16(_mm512_add_ps(acc[t][0], acc[t][1]));
}

/* the activation-only parts of row_q80q40, once per GEMV call */
static void act_prepare(bool q4, struct act512 *a, const struct block_q8_0 *y, int64_t nb)
{
    for (int64_t b = 0; b < nb; b += 2) {
        const bool two = b + 1 < nb;
        __m512i yv = q8_pair_y(&y[b], two);
        if (q4)
            yv = q4_order(yv);
        _mm512_store_si512((void *)(a->qs + b * QK8_0), yv);
        _mm512_store_si512((void *)(a->c + b / 2 * F32_PER_VEC), offset_corr(yv, q4 ? Q4_0_OFFSET : Q8_0_OFFSET));
        a->dy[b] = _cvtsh_ss(y[b].d);
        if (two)
            a->dy[b + 1] = _cvtsh_ss(y[b + 1].d);
    }
}

static void q8_0_vec_dot_avx512(int64_t n, float *s, const void *vx, const void *vy)
{
    *s = row_q80q40(false, vx, vy, NULL, n / QK8_0);
}

static void q4_0_vec_dot_avx512(int64_t n, float *s, const void *vx, const void *vy)
{
    *s = row_q80q40(true, vx, vy, NULL, n / QK4_0);
}

/* y[j] += (a * d) * q[j] per block (one FMA per element, as the reference) */
static void q8_0_axpy_avx512(int64_t n, float *y, float a, const void *vx)
{
    const struct block_q8_0 *x = vx;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const __m512 s = _mm512_set1_ps(a * _cvtsh_ss(x[i].d));
        float *yb = y + i * QK8_0;
        for (int k = 0; k < QK8_0; k += F32_PER_VEC) {
            const __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(x[i].qs + k))));
            _mm512_storeu_ps(yb + k, _mm512_fmadd_ps(s, q, _mm512_loadu_ps(yb + k)));
        }
    }
}

/* y[j] += (a * d) * (nibble - 8): the 16 bytes widened once give elements 0..15 (low nibbles) and
 * 16..31 (high nibbles) */
static void q4_0_axpy_avx512(int64_t n, float *y, float a, const void *vx)
{
    const struct block_q4_0 *x = vx;
    const __m512i nib = _mm512_set1_epi32(NIBBLE), off = _mm512_set1_epi32(Q4_0_OFFSET);
    for (int64_t i = 0; i < n / QK4_0; i++) {
        const __m512 s = _mm512_set1_ps(a * _cvtsh_ss(x[i].d));
        float *yb = y + i * QK4_0;
        const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)x[i].qs));
        const __m512 lo = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(b, nib), off));
        const __m512 hi = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(b, 4), off));
        _mm512_storeu_ps(yb, _mm512_fmadd_ps(s, lo, _mm512_loadu_ps(yb)));
        _mm512_storeu_ps(yb + 16, _mm512_fmadd_ps(s, hi, _mm512_loadu_ps(yb + 16)));
    }
}

/* x[j] = q[j] * d (a multiply, as the reference) */
static void q8_0_to_float_avx512(const void *src, float *dst, int64_t n)
{
    const struct block_q8_0 *x = src;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const __m512 d = _mm512_set1_ps(_cvtsh_ss(x[i].d));
        for (int k = 0; k < QK8_0; k += F32_PER_VEC) {
            const __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(x[i].qs + k))));
            _mm512_storeu_ps(dst + i * QK8_0 + k, _mm512_mul_ps(q, d));
        }
    }
}

/* x[j] = (nibble - 8) * d */
static void q4_0_to_float_avx512(const void *src, float *dst, int64_t n)
{
    const struct block_q4_0 *x = src;
    const __m512i nib = _mm512_set1_epi32(NIBBLE), off = _mm512_set1_epi32(Q4_0_OFFSET);
    for (int64_t i = 0; i < n / QK4_0; i++) {
        const __m512 d = _mm512_set1_ps(_cvtsh_ss(x[i].d));
        const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)x[i].qs));
        _mm512_storeu_ps(dst + i * QK4_0, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(b, nib), off)), d));
        _mm512_storeu_ps(dst + i * QK4_0 + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(b, 4), off)), d));
    }
}

/* ---- K-quants: Q4_K, Q5_K, Q6_K against Q8_K, bitwise the reference ----------------------------
 *
 * Per super-block the integer sum Σ_sub sc Σ q y is computed exactly (vpmaddubsw pairs, then
 * vpdpwssd against the scales spread over the words of their sub-block), the min / offset sum from
 * the activation's bsums, and then the reference's float expression. Q4_K/Q5_K quants unpack per
 * 64 bytes to [chunk c | chunk c+2] (low nibbles) and [c+1 | c+3] (high), so the activation is read
 * in that order; Q6_K's unpack in element order. */

/* the 8 six-bit scales and mins of Q4_K/Q5_K, as in the reference */
static inline void k4_scales(const uint8_t *q, int16_t sc[8], int16_t m[8])
{
    for (int j = 0; j < 4; j++) {
        sc[j] = q[j] & 63;
        m[j] = q[j + 4] & 63;
    }
    for (int j = 4; j < 8; j++) {
        sc[j] = (int16_t)((q[j + 4] & NIBBLE) | ((q[j - 4] >> 6) << 4));
        m[j] = (int16_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* word lanes of zmm k (k = 0..3) of a Q4_K/Q5_K super-block: chunks (c, c+2) with c = 0, 1, 4, 5 */
static const int k45_chunk[4] = { 0, 1, 4, 5 };

/* sc[c0] over words 0-15, sc[c0 + 2] over 16-31 */
static inline __m512i k45_scale_words(__m512i sc16, int c0)
{
    const __m512i idx = _mm512_mask_blend_epi16(0xffff0000u, _mm512_set1_epi16((short)c0), _mm512_set1_epi16((short)(c0 + 2)));
    return _mm512_permutexvar_epi16(idx, sc16);
}

/* activation bytes of zmm k in the weights' order: [y 32c0.. | y 32(c0+2)..] */
static inline __m512i k45_y(const struct block_q8_K *y, int c0)
{
    return join256(y->qs + 32 * c0, y->qs + 32 * (c0 + 2));
}

/* The prepared K activation: quants in the weights' order (Q4_K/Q5_K), per-32 sums of bsums. */
#define GEMV_MAX_SUPER (GEMV_MAX_BLOCKS / (QK_K / QK8_0))
struct kact512 {
    _Alignas(64) int8_t qs[GEMV_MAX_SUPER * QK_K];
    int32_t ys32[GEMV_MAX_SUPER * CHUNKS]; /* Σy per 32 elements */
};

/* one Q4_K (hbits: Q5_K with its qh) super-block's integer sums */
static inline __attribute__((always_inline)) float k45_block(bool q5, const void *vb, const struct block_q8_K *y,
                                                            const struct kact512 *pa, int64_t i)
{
    const struct block_q4_K *b4 = vb;
    const struct block_q5_K *b5 = vb;
    const uint8_t *qs = q5 ? b5->qs : b4->qs;
    const uint8_t *scales = q5 ? b5->scales : b4->scales;
    int16_t sc[8], m[8];
    k4_scales(scales, sc, m);
    const __m512i sc16 = zext256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)sc)));
    const __m512i qh = q5 ? _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b5->qh)) : _mm512_setzero_si512();
    __m512i acc = _mm512_setzero_si512();
    for (int k = 0; k < 4; k++) {
        const int c0 = k45_chunk[k];
        const __m512i raw = _mm512_loadu_si512((const void *)(qs + 64 * (k / 2)));
        __m512i q = (k & 1) ? _mm512_srli_epi16(raw, 4) : raw;
        q = _mm512_and_si512(q, _mm512_set1_epi8(NIBBLE));
        if (q5) {
            /* chunk c's 5th bit is bit c of qh[l]: shift each half by its chunk, keep bit 0, move to 4 */
            const __m512i cnt = _mm512_mask_blend_epi16(0xffff0000u, _mm512_set1_epi16((short)c0), _mm512_set1_epi16((short)(c0 + 2)));
            const __m512i hb = _mm512_and_si512(_mm512_srlv_epi16(qh, cnt), _mm512_set1_epi8(1));
            q = _mm512_or_si512(q, _mm512_slli_epi16(hb, 4));
        }
        const __m512i yv = pa ? _mm512_load_si512((const void *)(pa->qs + i * QK_K + 64 * k)) : k45_y(&y[i], c0);
        acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(q, yv), k45_scale_words(sc16, c0));
    }
    const int32_t isum = hsum_i32x16(acc);
    int32_t msum = 0;
    for (int j = 0; j < CHUNKS; j++) {
        const int32_t ys = pa ? pa->ys32[i * CHUNKS + j] : y[i].bsums[2 * j] + y[i].bsums[2 * j + 1];
        msum += m[j] * ys;
    }
    const float d = _cvtsh_ss(q5 ? b5->d : b4->d), dmin = _cvtsh_ss(q5 ? b5->dmin : b4->dmin);
    return (d * y[i].d) * (float)isum - (dmin * y[i].d) * (float)msum;
}

static inline __attribute__((always_inline)) float row_k45(bool q5, const void *vx, const struct block_q8_K *y,
                                                          const struct kact512 *pa, int64_t nsb)
{
    const size_t bsize = q5 ? sizeof(struct block_q5_K) : sizeof(struct block_q4_K);
    float sumf = 0.0f;
    for (int64_t i = 0; i < nsb; i++) {
        const char *xb = (const char *)vx + (size_t)i * bsize;
        for (size_t k = 0; k < bsize; k += CACHE_LINE)
            _mm_prefetch(xb + PREFETCH_BYTES + k, _MM_HINT_T0);
        sumf += k45_block(q5, xb, y, pa, i);
    }
    return sumf;
}

static void kact_prepare(struct kact512 *a, const struct block_q8_K *y, int64_t nsb)
{
    for (int64_t i = 0; i < nsb; i++) {
        for (int k = 0; k < 4; k++)
            _mm512_store_si512((void *)(a->qs + i * QK_K + 64 * k), k45_y(&y[i], k45_chunk[k]));
        for (int j = 0; j < CHUNKS; j++)
            a->ys32[i * CHUNKS + j] = y[i].bsums[2 * j] + y[i].bsums[2 * j + 1];
    }
}

static void q4_K_vec_dot_avx512(int64_t n, float *s, const void *vx, const void *vy)
{
    *s = row_k45(false, vx, vy, NULL, n / QK_K);
}

static void q5_K_vec_dot_avx512(int64_t n, float *s, const void *vx, const void *vy)
{
    *s = row_k45(true, vx, vy, NULL, n / QK_K);
}

#define Q6_OFFSET 32
/* Q6_K: per 128 elements h, 64 bytes of ql give [e 0..31 | 32..63] (low nibbles) and [64..95 |
 * 96..127] (high), the 32 bytes of qh their bits 4-5 (bit pair k for quarter k); quants 0..63 are
 * unsigned and the -32 comes back as 32 Σ sc Σy from the bsums. */
static void q6_K_vec_dot_avx512(int64_t n, float *s, const void *vx, const void *vy)
{
    const struct block_q6_K *x = vx;
    const struct block_q8_K *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const struct block_q6_K *b = &x[i];
        for (size_t k = 0; k < sizeof *b; k += CACHE_LINE)
            _mm_prefetch((const char *)b + PREFETCH_BYTES + k, _MM_HINT_T0);
        const __m256i sc256 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
        const __m512i sc16 = zext256(sc256);
        __m512i acc = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            const __m512i l = _mm512_loadu_si512((const void *)(b->ql + 64 * h));
            const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qh + 32 * h)));
            for (int k = 0; k < 2; k++) { /* quarters 2k, 2k+1 of this 128 */
                const __m512i lo = _mm512_and_si512(k ? _mm512_srli_epi16(l, 4) : l, _mm512_set1_epi8(NIBBLE));
                const __m512i cnt = _mm512_mask_blend_epi16(0xffff0000u, _mm512_set1_epi16((short)(4 * k)),
                                                            _mm512_set1_epi16((short)(4 * k + 2)));
                const __m512i hb = _mm512_and_si512(_mm512_srlv_epi16(qh, cnt), _mm512_set1_epi8(3));
                const __m512i q = _mm512_or_si512(lo, _mm512_slli_epi16(hb, 4));
                const int e0 = 128 * h + 64 * k; /* sub-blocks e0/16 .. e0/16 + 3 */
                const __m512i yv = _mm512_loadu_si512((const void *)(y[i].qs + e0));
                /* words 0-7: sub-block e0/16, 8-15: +1, ... */
                const __m512i idx = _mm512_add_epi16(_mm512_set1_epi16((short)(e0 / 16)),
                                                     _mm512_srli_epi16(_mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16,
                                                                                        15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 3));
                acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(q, yv), _mm512_permutexvar_epi16(idx, sc16));
            }
        }
        const int32_t corr = hsum_i32x8(_mm256_madd_epi16(sc256, _mm256_loadu_si256((const __m256i *)y[i].bsums)));
        const int32_t isum = hsum_i32x16(acc) - Q6_OFFSET * corr;
        const float d = _cvtsh_ss(b->d), dmin = 0.0f;
        const int32_t msum = 0;
        sumf += (d * y[i].d) * (float)isum - (dmin * y[i].d) * (float)msum;
    }
    *s = sumf;
}

/* ---- the multi-row GEMV ------------------------------------------------------------------------ */

bool quant_avx512_gemv_rows(uint32_t type, const void *W, size_t row_bytes, int64_t n, const void *x_vd,
                            float *y, int64_t r0, int64_t r1)
{
    const uint8_t *w = W;
    if (type == PI_TYPE_Q4_0 || type == PI_TYPE_Q8_0) {
        const int64_t nb = n / QK8_0;
        if (nb > GEMV_MAX_BLOCKS)
            return false;
        _Alignas(64) char buf[ACT_MAX_BYTES]; /* 136 KiB on the stack: threads have megabytes */
        struct act512 act;
        act_bind(&act, buf, nb);
        const bool q4 = type == PI_TYPE_Q4_0;
        act_prepare(q4, &act, x_vd, nb);
        for (int64_t r = r0; r < r1; r++)
            y[r] = q4 ? row_q80q40(true, w + (size_t)r * row_bytes, x_vd, &act, nb)
                      : row_q80q40(false, w + (size_t)r * row_bytes, x_vd, &act, nb);
        return true;
    }
    if (type == PI_TYPE_Q4_K || type == PI_TYPE_Q5_K) {
        const int64_t nsb = n / QK_K;
        if (nsb > GEMV_MAX_SUPER)
            return false;
        struct kact512 kact; /* 72 KiB */
        kact_prepare(&kact, x_vd, nsb);
        for (int64_t r = r0; r < r1; r++)
            y[r] = type == PI_TYPE_Q5_K ? row_k45(true, w + (size_t)r * row_bytes, x_vd, &kact, nsb)
                                        : row_k45(false, w + (size_t)r * row_bytes, x_vd, &kact, nsb);
        return true;
    }
    return false;
}

/* The GEMM tile: rows [r0, r1) against B activations, all prepared once per call (on the heap), then
 * tiles of GEMM_ROW_TILE rows (which stay in L1/L2 while every token passes) against GEMM_TOKENS
 * tokens at a time (each weight pair unpacked once for them). */
#define GEMM_ROW_TILE 16
static inline __attribute__((always_inline)) void tile_q80q40(bool q4, const uint8_t *w, size_t row_bytes, int64_t nb,
                                                             int nt, const struct act512 *const *pa, float *Y,
                                                             size_t y_stride, int64_t t0, int64_t t1)
{
    for (int64_t r = t0; r < t1; r++) {
        float out[GEMM_TOKENS];
        rows_q80q40(q4, nt, w + (size_t)r * row_bytes, pa, nb, out);
        for (int t = 0; t < nt; t++)
            Y[(size_t)t * y_stride + (size_t)r] = out[t];
    }
}

bool quant_avx512_gemm_rows(uint32_t type, const void *W, size_t row_bytes, int64_t n, const void *X_vd,
                            size_t x_stride, int B, float *Y, size_t y_stride, int64_t r0, int64_t r1)
{
    const int64_t nb = n / QK8_0;
    if ((type != PI_TYPE_Q4_0 && type != PI_TYPE_Q8_0) || nb > GEMV_MAX_BLOCKS)
        return false;
    const bool q4 = type == PI_TYPE_Q4_0;
    const size_t per = act_bytes(nb);
    char *buf = aligned_alloc(64, per * (size_t)B);
    struct act512 *act = malloc((size_t)B * sizeof *act);
    const struct act512 **pa = malloc((size_t)B * sizeof *pa);
    if (!buf || !act || !pa) { /* no memory for the prepared activations: the same values one by one */
        free(buf), free(act), free(pa);
        return false;
    }
    for (int t = 0; t < B; t++) {
        act_bind(&act[t], buf + (size_t)t * per, nb);
        act_prepare(q4, &act[t], (const struct block_q8_0 *)((const char *)X_vd + (size_t)t * x_stride), nb);
        pa[t] = &act[t];
    }
    const uint8_t *w = W;
    for (int64_t t0 = r0; t0 < r1; t0 += GEMM_ROW_TILE) {
        const int64_t t1 = t0 + GEMM_ROW_TILE < r1 ? t0 + GEMM_ROW_TILE : r1;
        for (int b0 = 0; b0 < B; b0 += GEMM_TOKENS) {
            float *Yb = Y + (size_t)b0 * y_stride;
            if (B - b0 >= GEMM_TOKENS) {
                if (q4)
                    tile_q80q40(true, w, row_bytes, nb, GEMM_TOKENS, pa + b0, Yb, y_stride, t0, t1);
                else
                    tile_q80q40(false, w, row_bytes, nb, GEMM_TOKENS, pa + b0, Yb, y_stride, t0, t1);
            } else {
                for (int t = b0; t < B; t++) {
                    if (q4)
                        tile_q80q40(true, w, row_bytes, nb, 1, pa + t, Y + (size_t)t * y_stride, y_stride, t0, t1);
                    else
                        tile_q80q40(false, w, row_bytes, nb, 1, pa + t, Y + (size_t)t * y_stride, y_stride, t0, t1);
                }
            }
        }
    }
    free(buf), free(act), free(pa);
    return true;
}

void quant_avx512_install(struct pi_type_traits *traits, size_t count)
{
    if (count < PI_TYPE_COUNT)
        return; /* not the table quant.c owns */
    traits[PI_TYPE_F32].vec_dot = f32_vec_dot_avx512;
    traits[PI_TYPE_F32].axpy = f32_axpy_avx512;
    traits[PI_TYPE_F16].to_float = f16_to_float_avx512;
    traits[PI_TYPE_F16].from_float = f16_from_float_avx512;
    traits[PI_TYPE_F16].vec_dot = f16_vec_dot_avx512;
    traits[PI_TYPE_F16].axpy = f16_axpy_avx512;
    traits[PI_TYPE_BF16].to_float = bf16_to_float_avx512;
    traits[PI_TYPE_BF16].vec_dot = bf16_vec_dot_avx512;
    traits[PI_TYPE_BF16].axpy = bf16_axpy_avx512;
    traits[PI_TYPE_Q8_0].to_float = q8_0_to_float_avx512;
    traits[PI_TYPE_Q8_0].vec_dot = q8_0_vec_dot_avx512;
    traits[PI_TYPE_Q8_0].axpy = q8_0_axpy_avx512;
    traits[PI_TYPE_Q4_0].to_float = q4_0_to_float_avx512;
    traits[PI_TYPE_Q4_0].vec_dot = q4_0_vec_dot_avx512;
    traits[PI_TYPE_Q4_0].axpy = q4_0_axpy_avx512;
    traits[PI_TYPE_Q4_K].vec_dot = q4_K_vec_dot_avx512;
    traits[PI_TYPE_Q5_K].vec_dot = q5_K_vec_dot_avx512;
    traits[PI_TYPE_Q6_K].vec_dot = q6_K_vec_dot_avx512;
}
