/* quant_avx2.c — AVX2/FMA/F16C kernels. This file alone is compiled with -mavx2 -mfma -mf16c; nothing
 * here may run before quant_init() has checked cpuid, so it is only reached through the traits
 * table that quant_avx2_install() patches.
 *
 * GEMV should be memory-bound: the float dots keep several independent FMA accumulators so that the
 * FMA latency (4-5 cycles) never stalls the loads; the quant dots follow ggml's integer tricks, and
 * quant_avx2_gemv_rows (bottom) adds a multi-row path that prepares the activation once per call.
 * The Q8_0/Q4_0 single-row dots run the multi-row path's row body on an unprepared activation, so a
 * row has the same bits alone and in a batch (the invariance rule).
 * The activation quantizer (q8_0 from_float) produces exactly the bytes of the scalar reference. */
#include "quant_internal.h"
#include "quant_prefetch.h"

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define F32_PER_VEC 8     /* floats in a __m256 */
#define UNROLL 4          /* independent accumulators: covers FMA latency x throughput */
#define F32_PER_ITER (F32_PER_VEC * UNROLL)
#define BF16_SHIFT 16
#define Q8_0_MAX 127.0f
#define Q4_0_OFFSET 8
#define NIBBLE 0x0f
#define F16_RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define TRUNC (_MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC)
#define CACHE_LINE 64

static inline float hsum_f32x8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float hmax_f32x8(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

static inline float f16_to_f32(pi_f16 h)
{
    return _cvtsh_ss(h);
}

/* Loads 8 elements of a row as floats: one function per float type, so that one templated loop
 * (VEC_DOT_F below) serves all three. */
static inline __m256 load8_f32(const void *p, int64_t i)
{
    return _mm256_loadu_ps((const float *)p + i);
}

static inline __m256 load8_f16(const void *p, int64_t i)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const pi_f16 *)p + i)));
}

/* bf16 is the top half of an f32: widen to 32 bits and shift into place */
static inline __m256 load8_bf16(const void *p, int64_t i)
{
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const pi_bf16 *)p + i)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, BF16_SHIFT));
}

#define ELEM_f32 4 /* bytes per element, for the prefetch address */
#define ELEM_f16 2
#define ELEM_bf16 2

static inline float elem_f32(const void *p, int64_t i) { return ((const float *)p)[i]; }
static inline float elem_f16(const void *p, int64_t i) { return _cvtsh_ss(((const pi_f16 *)p)[i]); }
static inline float elem_bf16(const void *p, int64_t i)
{
    uint32_t u = (uint32_t)((const pi_bf16 *)p)[i] << BF16_SHIFT;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}


/* s = Σ x[i]*y[i], x of type T, y f32; UNROLL accumulators, then 8-wide, then a scalar tail; the
 * single dot and the dense GEMV's rows (which prefetch into the next row) */
#define VEC_DOT_F(T)                                                                               \
    static inline __attribute__((always_inline)) void T##_dot_body(int64_t n, float *s, const void *x, \
                                                                    const void *vy, enum prefetch_reach reach, \
                                                                    const char *pf)                \
    {                                                                                              \
        const float *y = vy;                                                                       \
        __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();                             \
        __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();                             \
        int64_t i = 0;                                                                             \
        for (; i + F32_PER_ITER <= n; i += F32_PER_ITER) {                                         \
            for (int k = 0; k < F32_PER_ITER * ELEM_##T; k += CACHE_LINE)                          \
                prefetch_ahead(x, (size_t)(i * ELEM_##T + k), (size_t)(n * ELEM_##T), reach, pf);  \
            acc0 = _mm256_fmadd_ps(load8_##T(x, i), _mm256_loadu_ps(y + i), acc0);                 \
            acc1 = _mm256_fmadd_ps(load8_##T(x, i + 8), _mm256_loadu_ps(y + i + 8), acc1);         \
            acc2 = _mm256_fmadd_ps(load8_##T(x, i + 16), _mm256_loadu_ps(y + i + 16), acc2);       \
            acc3 = _mm256_fmadd_ps(load8_##T(x, i + 24), _mm256_loadu_ps(y + i + 24), acc3);       \
        }                                                                                          \
        for (; i + F32_PER_VEC <= n; i += F32_PER_VEC)                                             \
            acc0 = _mm256_fmadd_ps(load8_##T(x, i), _mm256_loadu_ps(y + i), acc0);                 \
        float sum = hsum_f32x8(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3))); \
        for (; i < n; i++)                                                                         \
            sum += elem_##T(x, i) * y[i];                                                          \
        *s = sum;                                                                                  \
    }                                                                                              \
    static void T##_vec_dot_avx2(int64_t n, float *s, const void *x, const void *vy)              \
    {                                                                                              \
        T##_dot_body(n, s, x, vy, VEC_DOT_REACH, NULL);                                            \
    }

VEC_DOT_F(f32)
VEC_DOT_F(f16)
VEC_DOT_F(bf16)

static void f32_to_float_avx2(const void *src, float *dst, int64_t n)
{
    memcpy(dst, src, (size_t)n * sizeof(float));
}

/* dst[i] = f32(src[i]), exact */
static void f16_to_float_avx2(const void *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + F32_PER_VEC <= n; i += F32_PER_VEC)
        _mm256_storeu_ps(dst + i, load8_f16(src, i));
    for (; i < n; i++)
        dst[i] = elem_f16(src, i);
}

static void bf16_to_float_avx2(const void *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + F32_PER_VEC <= n; i += F32_PER_VEC)
        _mm256_storeu_ps(dst + i, load8_bf16(src, i));
    for (; i < n; i++)
        dst[i] = elem_bf16(src, i);
}

/* dst[i] = f16(src[i]), round to nearest even (vcvtps2ph) */
static void f16_from_float_avx2(const float *src, void *vdst, int64_t n)
{
    pi_f16 *dst = vdst;
    int64_t i = 0;
    for (; i + F32_PER_VEC <= n; i += F32_PER_VEC)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), F16_RNE));
    for (; i < n; i++)
        dst[i] = (pi_f16)_cvtss_sh(src[i], F16_RNE);
}

/* roundf(v): half away from zero, exactly as the scalar reference (vroundps only offers ties-to-even) */
static inline __m256 round_half_away(__m256 v)
{
    const __m256 sign_mask = _mm256_set1_ps(-0.0f);
    __m256 t = _mm256_round_ps(v, TRUNC);
    __m256 frac = _mm256_andnot_ps(sign_mask, _mm256_sub_ps(v, t)); /* |v - trunc(v)|, exact */
    __m256 up = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(v, sign_mask)); /* copysign(1, v) */
    return _mm256_add_ps(t, _mm256_and_ps(up, one));
}

/* d = amax/127, q = roundf(x * (1/d)): byte-identical to q8_0_from_float_ref */
static void q8_0_from_float_avx2(const float *src, void *dst, int64_t n)
{
    struct block_q8_0 *b = dst;
    const __m256 sign_mask = _mm256_set1_ps(-0.0f);
    /* vpackssdw/vpacksswb interleave 128-bit lanes; this puts the 32 bytes back in element order */
    const __m256i unshuffle = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const float *x = src + i * QK8_0;
        __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
        __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign_mask, v0), _mm256_andnot_ps(sign_mask, v1)),
                                 _mm256_max_ps(_mm256_andnot_ps(sign_mask, v2), _mm256_andnot_ps(sign_mask, v3)));
        const float amax = hmax_f32x8(m);
        const float d = amax / Q8_0_MAX;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = (pi_f16)_cvtss_sh(d, F16_RNE);
        const __m256 vid = _mm256_set1_ps(id);
        __m256i i0 = _mm256_cvtps_epi32(round_half_away(_mm256_mul_ps(v0, vid)));
        __m256i i1 = _mm256_cvtps_epi32(round_half_away(_mm256_mul_ps(v1, vid)));
        __m256i i2 = _mm256_cvtps_epi32(round_half_away(_mm256_mul_ps(v2, vid)));
        __m256i i3 = _mm256_cvtps_epi32(round_half_away(_mm256_mul_ps(v3, vid)));
        __m256i q = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
        q = _mm256_permutevar8x32_epi32(q, unshuffle);
        _mm256_storeu_si256((__m256i *)b[i].qs, q);
    }
}

/* ---- AXPY: y += a * x, the sparse FFN's down_t rows ------------------------------------------
 * No software prefetch here: the rows of active neurons are scattered, and a prefetch past the end
 * of a row would fetch lines of a neuron that is most likely inactive. Every update is one FMA, as
 * in the scalar reference, so both produce the same bits. */

/* y[i] += a * x[i], x of type T */
#define AXPY_F(T)                                                                                  \
    static void T##_axpy_avx2(int64_t n, float *y, float a, const void *x)                         \
    {                                                                                              \
        const __m256 va = _mm256_set1_ps(a);                                                       \
        int64_t i = 0;                                                                             \
        for (; i + F32_PER_ITER <= n; i += F32_PER_ITER)                                           \
            for (int k = 0; k < F32_PER_ITER; k += F32_PER_VEC)                                    \
                _mm256_storeu_ps(y + i + k,                                                        \
                                 _mm256_fmadd_ps(va, load8_##T(x, i + k), _mm256_loadu_ps(y + i + k))); \
        for (; i + F32_PER_VEC <= n; i += F32_PER_VEC)                                             \
            _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, load8_##T(x, i), _mm256_loadu_ps(y + i))); \
        for (; i < n; i++)                                                                         \
            y[i] = fmaf(a, elem_##T(x, i), y[i]);                                                  \
    }

AXPY_F(f32)
AXPY_F(f16)
AXPY_F(bf16)

/* The int8 → f32 widenings load straight from the block (vpmovsxbd/vpmovzxbd with a memory operand):
 * one shuffle-port uop per 8 lanes, where widening a register costs extracts and byte shifts too. */

/* y[0..8) += s * f32(v), v 8 int32 lanes */
static inline void axpy8(float *y, __m256 s, __m256i v)
{
    _mm256_storeu_ps(y, _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(v), _mm256_loadu_ps(y)));
}

/* y[j] += (a * d) * q[j] per block */
static void q8_0_axpy_avx2(int64_t n, float *y, float a, const void *vx)
{
    const struct block_q8_0 *x = vx;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const __m256 s = _mm256_set1_ps(a * f16_to_f32(x[i].d));
        float *yb = y + i * QK8_0;
        for (int k = 0; k < QK8_0; k += F32_PER_VEC)
            axpy8(yb + k, s, _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(x[i].qs + k))));
    }
}

/* y[j] += (a * d) * (nibble - 8) per block: bytes 0..7 widened once give elements 0..7 (low
 * nibbles) and 16..23 (high nibbles), bytes 8..15 elements 8..15 and 24..31 */
static void q4_0_axpy_avx2(int64_t n, float *y, float a, const void *vx)
{
    const struct block_q4_0 *x = vx;
    const __m256i nib = _mm256_set1_epi32(NIBBLE), off = _mm256_set1_epi32(Q4_0_OFFSET);
    for (int64_t i = 0; i < n / QK4_0; i++) {
        const __m256 s = _mm256_set1_ps(a * f16_to_f32(x[i].d));
        float *yb = y + i * QK4_0;
        for (int k = 0; k < QK4_0 / 2; k += F32_PER_VEC) {
            const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(x[i].qs + k)));
            axpy8(yb + k, s, _mm256_sub_epi32(_mm256_and_si256(b, nib), off));
            axpy8(yb + QK4_0 / 2 + k, s, _mm256_sub_epi32(_mm256_srli_epi32(b, 4), off));
        }
    }
}

/* ---- multi-row AXPY: y += Σ_k a[k] x_k over a few rows at a time ---------------------------------
 * A chunk of y (one block) stays in registers while AXPY_CHUNK rows are added into it, each element's
 * FMAs in row order: the same operations, in the same order, as one axpy call per row, with y loaded
 * and stored once per chunk instead of once per row. init: y starts at zero, as after a memset (the
 * first chunk then adds into a zero register instead of loading y). The rows after the chunk are
 * fetched while it is computed, a line at a time as the chunk advances through its block. */
#define AXPY_CHUNK 4


/* acc[c] (the block's elements 8c..8c+7) += (a * d) * (nibble - 8) for Q4_0 block x: one FMA per
 * element, as q4_0_axpy_avx2 */
static inline void q4_0_block_fma_sc(__m256 acc[4], const struct block_q4_0 *x, __m256 sc, __m256i nib, __m256i off)
{
    for (int h = 0; h < 2; h++) { /* bytes 8h..8h+7: elements 8h.. (low) and 16+8h.. (high) */
        const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(x->qs + 8 * h)));
        acc[h] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(b, nib), off)), acc[h]);
        acc[2 + h] =
            _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(b, 4), off)), acc[2 + h]);
    }
}

static inline void q4_0_block_fma(__m256 acc[4], const struct block_q4_0 *x, float a, __m256i nib, __m256i off)
{
    q4_0_block_fma_sc(acc, x, _mm256_set1_ps(a * f16_to_f32(x->d)), nib, off);
}

/* sc[k][b] = a[k] · d of block i0 + b of row k, for the nr rows and the (up to) Q4_SC_BLOCKS blocks
 * from i0 on (of nb): one half-to-float conversion and one multiply for 8 blocks of a row, the same
 * products as q4_0_block_fma's scalar ones; lanes past the row repeat its last block (no read past
 * it) */
#define Q4_SC_BLOCKS 8
static inline void q4_0_scales(const void *const *rows, const float *a, int nr, int64_t i0, int64_t nb,
                               float (*sc)[Q4_SC_BLOCKS])
{
    const int nbk = nb - i0 < Q4_SC_BLOCKS ? (int)(nb - i0) : Q4_SC_BLOCKS;
    int at[Q4_SC_BLOCKS];
    for (int b = 0; b < Q4_SC_BLOCKS; b++)
        at[b] = b < nbk ? b : nbk - 1;
    for (int k = 0; k < nr; k++) {
        const struct block_q4_0 *x = (const struct block_q4_0 *)rows[k] + i0;
        const __m256 d = _mm256_cvtph_ps(_mm_setr_epi16((short)x[at[0]].d, (short)x[at[1]].d, (short)x[at[2]].d,
                                                        (short)x[at[3]].d, (short)x[at[4]].d, (short)x[at[5]].d,
                                                        (short)x[at[6]].d, (short)x[at[7]].d));
        _mm256_store_ps(sc[k], _mm256_mul_ps(_mm256_set1_ps(a[k]), d));
    }
}

/* acc[c] += (a * d) * q[8c..8c+7] for Q8_0 block x, as q8_0_axpy_avx2 */
static inline void q8_0_block_fma(__m256 acc[4], const struct block_q8_0 *x, float a)
{
    const __m256 sc = _mm256_set1_ps(a * f16_to_f32(x->d));
    for (int c = 0; c < 4; c++)
        acc[c] = _mm256_fmadd_ps(
            sc, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(x->qs + 8 * c)))), acc[c]);
}

static void q4_0_axpy_rows_avx2(int64_t n, float *y, const float *a, const void *const *rows, int nr, bool init)
{
    const __m256i nib = _mm256_set1_epi32(NIBBLE), off = _mm256_set1_epi32(Q4_0_OFFSET);
    for (int k0 = 0; k0 < nr; k0 += AXPY_CHUNK) {
        const int k1 = k0 + AXPY_CHUNK < nr ? k0 + AXPY_CHUNK : nr;
        const int p1 = k1 + AXPY_CHUNK < nr ? k1 + AXPY_CHUNK : nr; /* the next chunk, prefetched */
        const bool zero = init && k0 == 0;
        if (k0 == 0)
            for (int k = 0; k < k1; k++)
                prefetch_row_head(rows[k], quant_row_size(PI_TYPE_Q4_0, n));
        const int64_t nb = n / QK4_0;
        _Alignas(32) float sc[AXPY_CHUNK][Q4_SC_BLOCKS];
        for (int64_t i = 0; i < nb; i++) {
            if (i % Q4_SC_BLOCKS == 0)
                q4_0_scales(rows + k0, a + k0, k1 - k0, i, nb, sc);
            const size_t at = (size_t)i * sizeof(struct block_q4_0);
            if (at % CACHE_LINE < sizeof(struct block_q4_0)) /* this block starts a new line */
                prefetch_line_of(rows, k1, p1, at - at % CACHE_LINE);
            float *yb = y + i * QK4_0;
            __m256 acc[4];
            for (int c = 0; c < 4; c++)
                acc[c] = zero ? _mm256_setzero_ps() : _mm256_loadu_ps(yb + c * F32_PER_VEC);
            for (int k = k0; k < k1; k++)
                q4_0_block_fma_sc(acc, (const struct block_q4_0 *)rows[k] + i,
                                  _mm256_broadcast_ss(&sc[k - k0][i % Q4_SC_BLOCKS]), nib, off);
            for (int c = 0; c < 4; c++)
                _mm256_storeu_ps(yb + c * F32_PER_VEC, acc[c]);
        }
    }
}

static void q8_0_axpy_rows_avx2(int64_t n, float *y, const float *a, const void *const *rows, int nr, bool init)
{
    for (int k0 = 0; k0 < nr; k0 += AXPY_CHUNK) {
        const int k1 = k0 + AXPY_CHUNK < nr ? k0 + AXPY_CHUNK : nr;
        const int p1 = k1 + AXPY_CHUNK < nr ? k1 + AXPY_CHUNK : nr;
        const bool zero = init && k0 == 0;
        if (k0 == 0)
            for (int k = 0; k < k1; k++)
                prefetch_row_head(rows[k], quant_row_size(PI_TYPE_Q8_0, n));
        for (int64_t i = 0; i < n / QK8_0; i++) {
            const size_t at = (size_t)i * sizeof(struct block_q8_0);
            if (at % CACHE_LINE < sizeof(struct block_q8_0))
                prefetch_line_of(rows, k1, p1, at - at % CACHE_LINE);
            float *yb = y + i * QK8_0;
            __m256 acc[4];
            for (int c = 0; c < 4; c++)
                acc[c] = zero ? _mm256_setzero_ps() : _mm256_loadu_ps(yb + c * F32_PER_VEC);
            for (int k = k0; k < k1; k++)
                q8_0_block_fma(acc, (const struct block_q8_0 *)rows[k] + i, a[k]);
            for (int c = 0; c < 4; c++)
                _mm256_storeu_ps(yb + c * F32_PER_VEC, acc[c]);
        }
    }
}

/* the float types: chunks of F32_PER_ITER elements */
#define AXPY_ROWS_F(T)                                                                             \
    static void T##_axpy_rows_avx2(int64_t n, float *y, const float *a, const void *const *rows, int nr, bool init) \
    {                                                                                              \
        for (int k0 = 0; k0 < nr; k0 += AXPY_CHUNK) {                                              \
            const int k1 = k0 + AXPY_CHUNK < nr ? k0 + AXPY_CHUNK : nr;                            \
            const int p1 = k1 + AXPY_CHUNK < nr ? k1 + AXPY_CHUNK : nr;                            \
            const bool zero = init && k0 == 0;                                                     \
            if (k0 == 0)                                                                           \
                for (int k = 0; k < k1; k++)                                                       \
                    prefetch_row_head(rows[k], (size_t)n * ELEM_##T);                              \
            int64_t i = 0;                                                                         \
            for (; i + F32_PER_ITER <= n; i += F32_PER_ITER) {                                     \
                for (int o = 0; o < F32_PER_ITER * ELEM_##T; o += CACHE_LINE)                      \
                    prefetch_line_of(rows, k1, p1, (size_t)(i * ELEM_##T + o));                    \
                __m256 acc[UNROLL];                                                                \
                for (int c = 0; c < UNROLL; c++)                                                   \
                    acc[c] = zero ? _mm256_setzero_ps() : _mm256_loadu_ps(y + i + c * F32_PER_VEC); \
                for (int k = k0; k < k1; k++) {                                                    \
                    const __m256 va = _mm256_set1_ps(a[k]);                                        \
                    for (int c = 0; c < UNROLL; c++)                                               \
                        acc[c] = _mm256_fmadd_ps(va, load8_##T(rows[k], i + c * F32_PER_VEC), acc[c]); \
                }                                                                                  \
                for (int c = 0; c < UNROLL; c++)                                                   \
                    _mm256_storeu_ps(y + i + c * F32_PER_VEC, acc[c]);                             \
            }                                                                                      \
            for (; i < n; i++) {                                                                   \
                float v = zero ? 0.0f : y[i];                                                      \
                for (int k = k0; k < k1; k++)                                                      \
                    v = fmaf(a[k], elem_##T(rows[k], i), v);                                       \
                y[i] = v;                                                                          \
            }                                                                                      \
        }                                                                                          \
    }

AXPY_ROWS_F(f32)
AXPY_ROWS_F(f16)
AXPY_ROWS_F(bf16)

/* ---- y += (Σ_k a[k] x_k), the sum from zero over all the rows, then added to y -------------------
 * Per block of y: an accumulator from zero in registers takes every row's FMAs in row order (as
 * q4_0_axpy_rows_avx2 into a zeroed y: the same products, the same order), then y's block is loaded
 * once and the accumulator added. For a neuron group's few rows over one slice of columns (the sparse
 * FFN by columns, whose caller prefetches the rows): no accumulator buffer is written and read back. */
/* y[0..32) += acc, the four vectors of one block */
static inline void block_add(float *y, const __m256 acc[4])
{
    for (int c = 0; c < 4; c++)
        _mm256_storeu_ps(y + c * F32_PER_VEC, _mm256_add_ps(_mm256_loadu_ps(y + c * F32_PER_VEC), acc[c]));
}

/* rows_add takes its rows' scales from q4_0_scales for up to this many rows (the column slices of the
 * sparse FFN add ~5 rows over 9 blocks), one at a time beyond */
#define AXPY_SC_ROWS 64

static void q4_0_axpy_rows_add_avx2(int64_t n, float *y, const float *a, const void *const *rows, int nr)
{
    const __m256i nib = _mm256_set1_epi32(NIBBLE), off = _mm256_set1_epi32(Q4_0_OFFSET);
    const int64_t nb = n / QK4_0;
    int64_t i = 0;
    if (nr <= AXPY_SC_ROWS) {
        _Alignas(32) float sc[AXPY_SC_ROWS][Q4_SC_BLOCKS];
        for (; i < nb; i += Q4_SC_BLOCKS) {
            const int nbk = nb - i < Q4_SC_BLOCKS ? (int)(nb - i) : Q4_SC_BLOCKS;
            q4_0_scales(rows, a, nr, i, nb, sc);
            for (int b = 0; b < nbk; b++) {
                __m256 acc[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps() };
                for (int k = 0; k < nr; k++)
                    q4_0_block_fma_sc(acc, (const struct block_q4_0 *)rows[k] + i + b, _mm256_broadcast_ss(&sc[k][b]),
                                      nib, off);
                block_add(y + (i + b) * QK4_0, acc);
            }
        }
    }
    for (; i < nb; i++) {
        __m256 acc[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps() };
        for (int k = 0; k < nr; k++)
            q4_0_block_fma(acc, (const struct block_q4_0 *)rows[k] + i, a[k], nib, off);
        block_add(y + i * QK4_0, acc);
    }
}

static void q8_0_axpy_rows_add_avx2(int64_t n, float *y, const float *a, const void *const *rows, int nr)
{
    for (int64_t i = 0; i < n / QK8_0; i++) {
        __m256 acc[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps() };
        for (int k = 0; k < nr; k++)
            q8_0_block_fma(acc, (const struct block_q8_0 *)rows[k] + i, a[k]);
        block_add(y + i * QK8_0, acc);
    }
}

/* the float types: y[i..i + nv * 8) += the rows' columns summed from zero, every row's FMAs in row order
 * (as AXPY_ROWS_F into a zeroed y: va * x + acc, one rounding), nv vectors of accumulators in registers */
#define AXPY_ROWS_ADD_F(T)                                                                         \
    static inline __attribute__((always_inline)) void T##_rows_sum_add(                           \
        float *y, const float *a, const void *const *rows, int nr, int64_t i, int nv)              \
    {                                                                                              \
        __m256 acc[UNROLL];                                                                        \
        for (int c = 0; c < nv; c++)                                                               \
            acc[c] = _mm256_setzero_ps();                                                          \
        for (int k = 0; k < nr; k++) {                                                             \
            const __m256 va = _mm256_set1_ps(a[k]);                                                \
            for (int c = 0; c < nv; c++)                                                           \
                acc[c] = _mm256_fmadd_ps(va, load8_##T(rows[k], i + c * F32_PER_VEC), acc[c]);    \
        }                                                                                          \
        for (int c = 0; c < nv; c++) {                                                             \
            float *yc = y + i + c * F32_PER_VEC;                                                   \
            _mm256_storeu_ps(yc, _mm256_add_ps(_mm256_loadu_ps(yc), acc[c]));                      \
        }                                                                                          \
    }                                                                                              \
    /* F32_PER_ITER columns at a time, then 8, then one (fmaf: the same single rounding as the FMA) */ \
    static void T##_axpy_rows_add_avx2(int64_t n, float *y, const float *a, const void *const *rows, int nr) \
    {                                                                                              \
        int64_t i = 0;                                                                             \
        for (; i + F32_PER_ITER <= n; i += F32_PER_ITER)                                           \
            T##_rows_sum_add(y, a, rows, nr, i, UNROLL);                                           \
        for (; i + F32_PER_VEC <= n; i += F32_PER_VEC)                                             \
            T##_rows_sum_add(y, a, rows, nr, i, 1);                                                \
        for (; i < n; i++) {                                                                       \
            float v = 0.0f;                                                                        \
            for (int k = 0; k < nr; k++)                                                           \
                v = fmaf(a[k], elem_##T(rows[k], i), v);                                           \
            y[i] += v;                                                                             \
        }                                                                                          \
    }

AXPY_ROWS_ADD_F(f16)
AXPY_ROWS_ADD_F(bf16)

typedef void (*axpy_rows_add_fn)(int64_t n, float *y, const float *a, const void *const *rows, int nr);

/* the one list of the types with a register-resident rows-add */
static axpy_rows_add_fn axpy_rows_add_kernel(uint32_t type)
{
    switch (type) {
    case PI_TYPE_Q4_0: return q4_0_axpy_rows_add_avx2;
    case PI_TYPE_Q8_0: return q8_0_axpy_rows_add_avx2;
    case PI_TYPE_F16: return f16_axpy_rows_add_avx2;
    case PI_TYPE_BF16: return bf16_axpy_rows_add_avx2;
    default: return NULL;
    }
}

bool quant_avx2_has_axpy_rows_add(uint32_t type) { return axpy_rows_add_kernel(type) != NULL; }

bool quant_avx2_axpy_rows_add(uint32_t type, int64_t n, float *y, const float *a, const void *const *rows, int nr)
{
    const axpy_rows_add_fn k = axpy_rows_add_kernel(type);
    if (k)
        k(n, y, a, rows, nr);
    return k != NULL;
}

bool quant_avx2_axpy_rows(uint32_t type, int64_t n, float *y, const float *a, const void *const *rows, int nr,
                          bool init)
{
    switch (type) {
    case PI_TYPE_Q4_0: q4_0_axpy_rows_avx2(n, y, a, rows, nr, init); return true;
    case PI_TYPE_Q8_0: q8_0_axpy_rows_avx2(n, y, a, rows, nr, init); return true;
    case PI_TYPE_F32: f32_axpy_rows_avx2(n, y, a, rows, nr, init); return true;
    case PI_TYPE_F16: f16_axpy_rows_avx2(n, y, a, rows, nr, init); return true;
    case PI_TYPE_BF16: bf16_axpy_rows_avx2(n, y, a, rows, nr, init); return true;
    default: return false;
    }
}

/* ---- multi-row GEMV: the activation prepared once per call ----------------------------------
 *
 * Per block the single-row dots above spend as much work on the two f16 scales (load, convert,
 * multiply, broadcast) as on the 32 products. Across the rows of one GEMV the activation is the
 * same, so what depends on it alone is prepared once per call:
 *  - its block scales as f32;
 *  - for q4_0, whose nibbles stay unsigned (Σ (qx-8) qy = Σ qx qy - 8 Σ qy), c = 8 dy Σ qy per block;
 *  - for q4_0, its quants re-laid out per pair of blocks (b, b+1) as A = [y_b 0..15 | y_b+1 0..15],
 *    B = [y_b 16..31 | y_b+1 16..31]: exactly the order in which one 32-byte load of two blocks'
 *    packed nibbles unpacks (low nibbles, high nibbles), so no shuffles are needed per row.
 * Weight scales are converted several blocks at a time, block sums are reduced together with
 * horizontal adds (exact integers) and scaled with one FMA per group. */

#define Q8_GROUP 4              /* q8_0 blocks per scale conversion / reduction */
#define Q4_GROUP 8              /* q4_0 blocks per group: 4 pairs, one 8-lane scale vector */
#define GEMV_MAX_BLOCKS 2048    /* rows up to 65536 elements; longer ones use the vec_dot loop */

struct gemv_act {
    int8_t *qs;  /* q4_0: quants as A/B pairs (see above); 32-byte aligned */
    float *dy;   /* activation scale per block (q4_0: in group lane order) */
    float *cy;   /* q4_0: 8 * dy * Σ qy per block, same order */
};

/* bytes of one prepared activation of nb blocks, and its arrays laid out in buf (32-byte aligned) */
static size_t gemv_act_bytes(int64_t nb)
{
    return ((size_t)nb * (QK8_0 + 2 * sizeof(float)) + 63) / 64 * 64;
}

static void gemv_act_bind(struct gemv_act *a, char *buf, int64_t nb)
{
    a->qs = (int8_t *)buf;
    a->dy = (float *)(buf + (size_t)nb * QK8_0);
    a->cy = a->dy + nb;
}

/* Lane order of a q4_0 group's sums after the reduction in q4_0_row: even blocks, then odd ones. */
static const int q4_lane_block[Q4_GROUP] = { 0, 2, 4, 6, 1, 3, 5, 7 };

static int32_t q8_0_qsum(const struct block_q8_0 *y)
{
    /* Σ qy: vpmaddubsw against ones, then pairs to int32, then across lanes */
    __m256i q = _mm256_loadu_si256((const __m256i *)y->qs);
    __m256i s32 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1));
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

static void gemv_act_prepare_q8_0(struct gemv_act *a, const struct block_q8_0 *y, int64_t nb)
{
    for (int64_t b = 0; b < nb; b++)
        a->dy[b] = f16_to_f32(y[b].d);
}

static void gemv_act_prepare_q4_0(struct gemv_act *a, const struct block_q8_0 *y, int64_t nb)
{
    const int64_t ng = nb / Q4_GROUP;
    for (int64_t g = 0; g < ng; g++) {
        const struct block_q8_0 *yg = y + g * Q4_GROUP;
        for (int k = 0; k < Q4_GROUP; k++) {
            const struct block_q8_0 *yb = &yg[q4_lane_block[k]];
            a->dy[g * Q4_GROUP + k] = f16_to_f32(yb->d);
            a->cy[g * Q4_GROUP + k] = (float)(Q4_0_OFFSET * q8_0_qsum(yb)) * f16_to_f32(yb->d);
        }
        for (int pair = 0; pair < Q4_GROUP / 2; pair++) {
            int8_t *dst = a->qs + (g * Q4_GROUP + 2 * pair) * QK8_0;
            const struct block_q8_0 *b0 = &yg[2 * pair], *b1 = &yg[2 * pair + 1];
            memcpy(dst, b0->qs, QK8_0 / 2);                    /* A: low halves */
            memcpy(dst + QK8_0 / 2, b1->qs, QK8_0 / 2);
            memcpy(dst + QK8_0, b0->qs + QK8_0 / 2, QK8_0 / 2); /* B: high halves */
            memcpy(dst + QK8_0 + QK8_0 / 2, b1->qs + QK8_0 / 2, QK8_0 / 2);
        }
    }
    for (int64_t b = ng * Q4_GROUP; b < nb; b++) { /* tail blocks: natural order, original quants */
        a->dy[b] = f16_to_f32(y[b].d);
        a->cy[b] = (float)(Q4_0_OFFSET * q8_0_qsum(&y[b])) * a->dy[b];
    }
}

/* Σ qx qy of one q4_0 block (qx unsigned 0..15) as 8 int32 partial sums: the tail path */
static inline __m256i q4_0_isum_u(const struct block_q4_0 *x, const struct block_q8_0 *y)
{
    const __m128i packed = _mm_loadu_si128((const __m128i *)x->qs);
    const __m256i qx = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed),
                                        _mm256_set1_epi8(NIBBLE));
    const __m256i p16 = _mm256_maddubs_epi16(qx, _mm256_loadu_si256((const __m256i *)y->qs));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

/* the A/B quants of pair (p, p+1) of a group: prepared, or from the activation itself (the same bytes) */
static inline void q4_0_ab(const struct gemv_act *a, const struct block_q8_0 *y, int64_t b, __m256i *qa, __m256i *qb)
{
    if (a) {
        *qa = _mm256_load_si256((const __m256i *)(a->qs + b * QK8_0));
        *qb = _mm256_load_si256((const __m256i *)(a->qs + b * QK8_0 + QK8_0));
    } else {
        const __m256i y0 = _mm256_loadu_si256((const __m256i *)y[b].qs);
        const __m256i y1 = _mm256_loadu_si256((const __m256i *)y[b + 1].qs);
        *qa = _mm256_permute2x128_si256(y0, y1, 0x20);
        *qb = _mm256_permute2x128_si256(y0, y1, 0x31);
    }
}

/* y_t = Σ_b dx dy_t (Σ qx qy_t) - Σ_b dx cy_t: one q4_0 row against nt <= GEMM_TOKENS q8_0
 * activations y[t], each prepared (a[t]) or not (a == NULL: its scales, sums and A/B order computed
 * here, to the same values); the weights are unpacked once for all nt. The single-row dot (nt = 1,
 * unprepared), the multi-row GEMV (nt = 1, prepared) and the GEMM tile run this one body, and each
 * token's operations do not depend on nt: a row has the same bits in all three. */
#define GEMM_TOKENS 4
static inline __attribute__((always_inline)) void q4_0_rows(const struct block_q4_0 *x, int nt,
                                                           const struct block_q8_0 *const *y,
                                                           const struct gemv_act *const *a, int64_t nb, float *out,
                                                           enum prefetch_reach reach, const char *pf)
{
    __m256 acc[GEMM_TOKENS], corr[GEMM_TOKENS];
    for (int t = 0; t < nt; t++)
        acc[t] = corr[t] = _mm256_setzero_ps();
    const __m256i m = _mm256_set1_epi8(NIBBLE);
    int64_t b = 0;
    for (; b + Q4_GROUP <= nb; b += Q4_GROUP) {
        for (int k = 0; k < Q4_GROUP * (int)sizeof *x; k += CACHE_LINE)
            prefetch_ahead((const char *)x, b * sizeof *x + (size_t)k, (size_t)nb * sizeof *x, reach, pf);
        const __m256 dx = _mm256_cvtph_ps(_mm_setr_epi16(
            (short)x[b].d, (short)x[b + 2].d, (short)x[b + 4].d, (short)x[b + 6].d,
            (short)x[b + 1].d, (short)x[b + 3].d, (short)x[b + 5].d, (short)x[b + 7].d));
        __m256i lo[Q4_GROUP / 2], hi[Q4_GROUP / 2];
        for (int p = 0; p < Q4_GROUP / 2; p++) { /* pair (b + 2p, b + 2p + 1): [low nibbles | high] */
            const __m256i packed = _mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)x[b + 2 * p].qs)),
                _mm_loadu_si128((const __m128i *)x[b + 2 * p + 1].qs), 1);
            lo[p] = _mm256_and_si256(packed, m);
            hi[p] = _mm256_and_si256(_mm256_srli_epi16(packed, 4), m);
        }
        for (int t = 0; t < nt; t++) {
            __m256 dy, cy;
            if (a) {
                dy = _mm256_loadu_ps(a[t]->dy + b);
                cy = _mm256_loadu_ps(a[t]->cy + b);
            } else {
                const struct block_q8_0 *yg = y[t] + b;
                dy = _mm256_cvtph_ps(_mm_setr_epi16(
                    (short)yg[0].d, (short)yg[2].d, (short)yg[4].d, (short)yg[6].d,
                    (short)yg[1].d, (short)yg[3].d, (short)yg[5].d, (short)yg[7].d));
                const __m256i qsum = _mm256_setr_epi32(q8_0_qsum(&yg[0]), q8_0_qsum(&yg[2]), q8_0_qsum(&yg[4]),
                                                       q8_0_qsum(&yg[6]), q8_0_qsum(&yg[1]), q8_0_qsum(&yg[3]),
                                                       q8_0_qsum(&yg[5]), q8_0_qsum(&yg[7]));
                cy = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_slli_epi32(qsum, 3)), dy); /* (8 Σqy) dy */
            }
            const __m256 s = _mm256_mul_ps(dx, dy);
            corr[t] = _mm256_fmadd_ps(dx, cy, corr[t]);
            __m256i v[Q4_GROUP / 2];
            for (int p = 0; p < Q4_GROUP / 2; p++) {
                __m256i qa, qb;
                q4_0_ab(a ? a[t] : NULL, y ? y[t] : NULL, b + 2 * p, &qa, &qb);
                v[p] = _mm256_add_epi16(_mm256_maddubs_epi16(lo[p], qa), _mm256_maddubs_epi16(hi[p], qb));
            }
            /* lanes [b0 b2 b4 b6 | b1 b3 b5 b7]; int16 partials peak at 4 * 7620 = 30480 < 2^15 */
            const __m256i h = _mm256_hadd_epi16(_mm256_hadd_epi16(v[0], v[1]), _mm256_hadd_epi16(v[2], v[3]));
            const __m256i sums = _mm256_madd_epi16(h, _mm256_set1_epi16(1));
            acc[t] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(sums), acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) {
        float sum = hsum_f32x8(acc[t]) - hsum_f32x8(corr[t]);
        for (int64_t k = b; k < nb; k++) {
            const float dxk = f16_to_f32(x[k].d);
            const float dyk = a ? a[t]->dy[k] : f16_to_f32(y[t][k].d);
            const float cyk = a ? a[t]->cy[k] : (float)(Q4_0_OFFSET * q8_0_qsum(&y[t][k])) * dyk;
            const __m256i p = q4_0_isum_u(&x[k], &y[t][k]);
            sum += dxk * dyk * hsum_f32x8(_mm256_cvtepi32_ps(p)) - dxk * cyk;
        }
        out[t] = sum;
    }
}

/* Σ qx qy of one q8_0 block as 8 int32 partial sums (sign trick as in mul_sum_i8_pairs) */
static inline __m256i q8_0_isum(const struct block_q8_0 *x, const struct block_q8_0 *y)
{
    const __m256i qx = _mm256_loadu_si256((const __m256i *)x->qs);
    const __m256i qy = _mm256_loadu_si256((const __m256i *)y->qs);
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qy, qx));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

/* four blocks' 8-lane int32 sums -> [b0 b1 b2 b3 | b0 b1 b2 b3] partial totals (exact) */
static inline __m256 reduce4(__m256i p0, __m256i p1, __m256i p2, __m256i p3)
{
    return _mm256_cvtepi32_ps(_mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3)));
}

/* y_t = Σ_b dx dy_t Σ qx qy_t: one q8_0 row against nt <= GEMM_TOKENS q8_0 activations, their
 * scales prepared (a[t]) or not (the same values); one body for the single-row dot, the multi-row
 * GEMV and the GEMM tile, each token's operations independent of nt (as q4_0_rows) */
static inline __attribute__((always_inline)) void q8_0_rows(const struct block_q8_0 *x, int nt,
                                                           const struct block_q8_0 *const *y,
                                                           const struct gemv_act *const *a, int64_t nb, float *out,
                                                           enum prefetch_reach reach, const char *pf)
{
    __m256 acc[GEMM_TOKENS];
    for (int t = 0; t < nt; t++)
        acc[t] = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + Q8_GROUP <= nb; b += Q8_GROUP) {
        for (int k = 0; k < Q8_GROUP * (int)sizeof *x; k += CACHE_LINE)
            prefetch_ahead((const char *)x, b * sizeof *x + (size_t)k, (size_t)nb * sizeof *x, reach, pf);
        const __m128 dx = _mm_cvtph_ps(_mm_setr_epi16((short)x[b].d, (short)x[b + 1].d, (short)x[b + 2].d,
                                                      (short)x[b + 3].d, 0, 0, 0, 0));
        for (int t = 0; t < nt; t++) {
            const struct block_q8_0 *yt = y[t];
            const __m128 dy = a ? _mm_loadu_ps(a[t]->dy + b)
                                : _mm_cvtph_ps(_mm_setr_epi16((short)yt[b].d, (short)yt[b + 1].d, (short)yt[b + 2].d,
                                                              (short)yt[b + 3].d, 0, 0, 0, 0));
            const __m128 s = _mm_mul_ps(dx, dy);
            const __m256 sums = reduce4(q8_0_isum(&x[b], &yt[b]), q8_0_isum(&x[b + 1], &yt[b + 1]),
                                        q8_0_isum(&x[b + 2], &yt[b + 2]), q8_0_isum(&x[b + 3], &yt[b + 3]));
            acc[t] = _mm256_fmadd_ps(_mm256_set_m128(s, s), sums, acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) {
        float sum = hsum_f32x8(acc[t]);
        for (int64_t k = b; k < nb; k++)
            sum += f16_to_f32(x[k].d) * (a ? a[t]->dy[k] : f16_to_f32(y[t][k].d)) *
                   hsum_f32x8(_mm256_cvtepi32_ps(q8_0_isum(&x[k], &y[t][k])));
        out[t] = sum;
    }
}

/* the single-row dots: the GEMV's row bodies without a prepared activation */
static void q8_0_vec_dot_avx2(int64_t n, float *s, const void *vx, const void *vy)
{
    const struct block_q8_0 *y[1] = { vy };
    q8_0_rows(vx, 1, y, NULL, n / QK8_0, s, VEC_DOT_REACH, NULL);
}

static void q4_0_vec_dot_avx2(int64_t n, float *s, const void *vx, const void *vy)
{
    const struct block_q8_0 *y[1] = { vy };
    q4_0_rows(vx, 1, y, NULL, n / QK4_0, s, VEC_DOT_REACH, NULL);
}

static void gemv_act_prepare(uint32_t type, struct gemv_act *a, const struct block_q8_0 *y, int64_t nb)
{
    if (type == PI_TYPE_Q4_0)
        gemv_act_prepare_q4_0(a, y, nb);
    else
        gemv_act_prepare_q8_0(a, y, nb);
}

/* rows [r0, r1) against nt prepared activations (nt a constant where inlined): row r at
 * w + r * row_bytes, or at rowp[r] (a gather; each row's prefetch then stays inside it, and the rows
 * ahead are fetched while this one is computed) */
static inline __attribute__((always_inline)) void rows_prepared(uint32_t type, const uint8_t *w, size_t row_bytes,
                                                               const void *const *rowp, int64_t nb, int nt,
                                                               const struct block_q8_0 *const *y,
                                                               const struct gemv_act *const *a, float *Y,
                                                               size_t y_stride, int64_t r0, int64_t r1)
{
    const enum prefetch_reach reach = rowp ? PF_ROW : PF_PAST;
    for (int64_t r = r0; r < r1; r++) {
        float out[GEMM_TOKENS];
        const void *x = rowp ? rowp[r] : (const void *)(w + (size_t)r * row_bytes);
        const char *pf = rowp ? gather_prefetch(rowp, r, r0, r1, row_bytes) : NULL;
        if (type == PI_TYPE_Q4_0)
            q4_0_rows(x, nt, y, a, nb, out, reach, pf);
        else
            q8_0_rows(x, nt, y, a, nb, out, reach, pf);
        for (int t = 0; t < nt; t++)
            Y[(size_t)t * y_stride + (size_t)r] = out[t];
    }
}

/* the float types' rows, dense (row r at W + r * row_bytes, prefetching into the next) or gathered */
static bool float_rows(uint32_t type, const char *W, size_t row_bytes, const void *const *rowp, int64_t n,
                       const void *x, float *y, int64_t r0, int64_t r1)
{
    const enum prefetch_reach reach = rowp ? PF_ROW : PF_PAST;
    for (int64_t r = r0; r < r1; r++) {
        const void *w = rowp ? rowp[r] : (const void *)(W + (size_t)r * row_bytes);
        const char *pf = rowp ? gather_prefetch(rowp, r, r0, r1, row_bytes) : NULL;
        switch (type) {
        case PI_TYPE_F32: f32_dot_body(n, &y[r], w, x, reach, pf); break;
        case PI_TYPE_F16: f16_dot_body(n, &y[r], w, x, reach, pf); break;
        case PI_TYPE_BF16: bf16_dot_body(n, &y[r], w, x, reach, pf); break;
        default: return false;
        }
    }
    return true;
}

static bool is_float_type(uint32_t type)
{
    return type == PI_TYPE_F32 || type == PI_TYPE_F16 || type == PI_TYPE_BF16;
}

/* one activation against rows [r0, r1), dense (rowp NULL) or gathered: the float types' dots, or the
 * q8_0 / q4_0 rows against the activation prepared once (here, or by the caller: prep); false for the
 * other types */
static bool gemv_one(uint32_t type, const void *W, size_t row_bytes, const void *const *rowp, int64_t n,
                     const void *x_vd, const void *prep, float *y, int64_t r0, int64_t r1)
{
    if (is_float_type(type))
        return float_rows(type, W, row_bytes, rowp, n, x_vd, y, r0, r1);
    const int64_t nb = n / QK8_0;
    if ((type != PI_TYPE_Q4_0 && type != PI_TYPE_Q8_0) || nb > GEMV_MAX_BLOCKS)
        return false;
    struct gemv_act act;
    const struct gemv_act *a[1] = { &act };
    const struct block_q8_0 *ys[1] = { x_vd };
    if (prep) { /* read only: bound to the caller's prepared arrays */
        gemv_act_bind(&act, (char *)prep, nb);
        rows_prepared(type, W, row_bytes, rowp, nb, 1, ys, a, y, 0, r0, r1);
        return true;
    }
    /* 80 KiB on the stack: threads have megabytes, and no allocation per call */
    _Alignas(64) char buf[GEMV_MAX_BLOCKS * (QK8_0 + 2 * sizeof(float))];
    gemv_act_bind(&act, buf, nb);
    gemv_act_prepare(type, &act, x_vd, nb);
    rows_prepared(type, W, row_bytes, rowp, nb, 1, ys, a, y, 0, r0, r1);
    return true;
}

bool quant_avx2_gemv_rows(uint32_t type, const void *W, size_t row_bytes, int64_t n, const void *x_vd,
                          float *y, int64_t r0, int64_t r1)
{
    return gemv_one(type, W, row_bytes, NULL, n, x_vd, NULL, y, r0, r1);
}

bool quant_avx2_gemv_gather(uint32_t type, int64_t n, const void *x_vd, const void *act, const void *const *rows,
                            int64_t nrows, float *y)
{
    return gemv_one(type, NULL, quant_row_size(type, n), rows, n, x_vd, act, y, 0, nrows);
}

size_t quant_avx2_gather_act_bytes(uint32_t type, int64_t n)
{
    const int64_t nb = n / QK8_0;
    return (type == PI_TYPE_Q4_0 || type == PI_TYPE_Q8_0) && nb <= GEMV_MAX_BLOCKS ? gemv_act_bytes(nb) : 0;
}

void quant_avx2_gather_act_prepare(uint32_t type, int64_t n, const void *x_vd, void *act)
{
    struct gemv_act a;
    gemv_act_bind(&a, act, n / QK8_0);
    gemv_act_prepare(type, &a, x_vd, n / QK8_0);
}

/* The GEMM tile: rows [r0, r1) against B activations, all prepared once per call (B x 40 bytes per
 * block, on the heap), then tiles of GEMM_ROW_TILE rows (which stay in L1/L2 while every token
 * passes) against GEMM_TOKENS tokens at a time (each weight pair unpacked once for them). */
#define GEMM_ROW_TILE 16
bool quant_avx2_gemm_rows(uint32_t type, const void *W, size_t row_bytes, int64_t n, const void *X_vd,
                          size_t x_stride, int B, float *Y, size_t y_stride, int64_t r0, int64_t r1)
{
    const int64_t nb = n / QK8_0;
    if ((type != PI_TYPE_Q4_0 && type != PI_TYPE_Q8_0) || nb > GEMV_MAX_BLOCKS)
        return false;
    const size_t per = gemv_act_bytes(nb);
    char *buf = aligned_alloc(64, per * (size_t)B);
    struct gemv_act *act = malloc((size_t)B * sizeof *act);
    const struct gemv_act **a = malloc((size_t)B * sizeof *a);
    const struct block_q8_0 **ys = malloc((size_t)B * sizeof *ys);
    if (!buf || !act || !a || !ys) { /* no memory for the prepared activations: the same values one by one */
        free(buf), free(act), free(a), free(ys);
        return false;
    }
    for (int t = 0; t < B; t++) {
        ys[t] = (const void *)((const char *)X_vd + (size_t)t * x_stride);
        gemv_act_bind(&act[t], buf + (size_t)t * per, nb);
        gemv_act_prepare(type, &act[t], ys[t], nb);
        a[t] = &act[t];
    }
    for (int64_t t0 = r0; t0 < r1; t0 += GEMM_ROW_TILE) {
        const int64_t t1 = t0 + GEMM_ROW_TILE < r1 ? t0 + GEMM_ROW_TILE : r1;
        for (int b0 = 0; b0 < B; b0 += GEMM_TOKENS) {
            float *Yb = Y + (size_t)b0 * y_stride;
            if (B - b0 >= GEMM_TOKENS)
                rows_prepared(type, W, row_bytes, NULL, nb, GEMM_TOKENS, ys + b0, a + b0, Yb, y_stride, t0, t1);
            else
                for (int t = b0; t < B; t++)
                    rows_prepared(type, W, row_bytes, NULL, nb, 1, ys + t, a + t, Y + (size_t)t * y_stride, y_stride, t0, t1);
        }
    }
    free(buf), free(act), free(a), free(ys);
    return true;
}

void quant_avx2_install(struct pi_type_traits *traits, size_t count)
{
    if (count <= PI_TYPE_BF16)
        return; /* not the table quant.c owns */
    traits[PI_TYPE_F32].to_float = f32_to_float_avx2;
    traits[PI_TYPE_F32].vec_dot = f32_vec_dot_avx2;
    traits[PI_TYPE_F16].to_float = f16_to_float_avx2;
    traits[PI_TYPE_F16].from_float = f16_from_float_avx2;
    traits[PI_TYPE_F16].vec_dot = f16_vec_dot_avx2;
    traits[PI_TYPE_BF16].to_float = bf16_to_float_avx2;
    traits[PI_TYPE_BF16].vec_dot = bf16_vec_dot_avx2;
    traits[PI_TYPE_Q8_0].from_float = q8_0_from_float_avx2;
    traits[PI_TYPE_Q8_0].vec_dot = q8_0_vec_dot_avx2;
    traits[PI_TYPE_Q4_0].vec_dot = q4_0_vec_dot_avx2;
    traits[PI_TYPE_F32].axpy = f32_axpy_avx2;
    traits[PI_TYPE_F16].axpy = f16_axpy_avx2;
    traits[PI_TYPE_BF16].axpy = bf16_axpy_avx2;
    traits[PI_TYPE_Q8_0].axpy = q8_0_axpy_avx2;
    traits[PI_TYPE_Q4_0].axpy = q4_0_axpy_avx2;
}
