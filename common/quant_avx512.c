/* quant_avx512.c — AVX-512 kernels (F, BW, VL, DQ, VNNI, VBMI, with F16C/FMA): Q4_0 (dot, dense and
 * gathered GEMV, GEMM tile, AXPYs) and the Q6_K dot. This file alone is compiled
 * with those flags; nothing here runs before quant_init() has checked cpuid, so it is only reached
 * through the table that quant_avx512_install() patches (a copy of the AVX2 table: the types not named
 * here keep their AVX2 kernels, and quant.c then takes the AVX2 unit's multi-row paths for them) and
 * through the entry points below. The float types and Q8_0 keep their AVX2 kernels at this level: the
 * GEMV of those is bound by the weights' bytes either way, and the AVX2 unit has their gathers and
 * multi-row AXPYs (the sparse FFN's paths).
 *
 * Invariance: a row's dot is the same bits through the single-row vec_dot and through the
 * multi-row GEMV, which only prepares what depends on the activation once per call (its quants in the
 * order the weights unpack in, the offset corrections as int32 lanes, its scales per lane): the
 * prepared values are the very integers and floats the single-row kernel computes on the fly, and both
 * run one body (q4_rows, with or without a prepared activation), so the float operations and their
 * order are the same. The Q6_K dot does the reference's integer sums exactly and its float
 * operations per super-block in its order: it equals the scalar reference bit for bit (as the AVX2
 * one does). The AXPYs and dequantizers do the reference's float operation per element.
 *
 * Integer dots: vpdpbusd takes an unsigned operand; Q4_0 nibbles are, and the offset comes back as
 * an int32 correction per lane, c = -8 * Σy over the lane's bytes (exact). Q6_K uses vpmaddubsw
 * (pairs to int16: at most 2 * 63 * 128) and vpdpwssd against the sub-block scales. */
#if defined(PI_AVX512_EMULATE)
#include "quant_avx512_emu.h"
#define quant_avx512_install quant_avx512emu_install
#define quant_avx512_gemv_rows quant_avx512emu_gemv_rows
#define quant_avx512_gemm_rows quant_avx512emu_gemm_rows
#define quant_avx512_gemv_gather quant_avx512emu_gemv_gather
#define quant_avx512_gather_act_bytes quant_avx512emu_gather_act_bytes
#define quant_avx512_gather_act_prepare quant_avx512emu_gather_act_prepare
#define quant_avx512_axpy_rows quant_avx512emu_axpy_rows
#define quant_avx512_axpy_rows_add quant_avx512emu_axpy_rows_add
#define quant_avx512_has_axpy_rows_add quant_avx512emu_has_axpy_rows_add
#else
#include <immintrin.h>
#endif
#include "quant_internal.h"
#include "quant_prefetch.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define F32_PER_VEC 16    /* floats in a __m512 */
#define NIBBLE 0x0f
#define Q4_0_OFFSET 8
#define CACHE_LINE 64
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

/* ---- Q4_0: eight blocks a step ------------------------------------------------------------------
 *
 * Eight Q4_0 blocks are 144 contiguous bytes. Three 64-byte loads (at 0, 64 and 80) and byte permutes
 * (VBMI's vpermt2b) give the eight scales, each repeated over its block's four int32 lanes, and the
 * packed nibbles as two vectors of four blocks [qs_b | qs_b+1 | qs_b+2 | qs_b+3], whose low nibbles are
 * elements 0..15 of each block and high nibbles elements 16..31. The activation is prepared in that
 * order (A: elements 0..15 of four blocks, B: 16..31), with the offset correction -8 Σy over each
 * lane's eight bytes as the dot's starting int32 and its block scale repeated per lane. Per four
 * blocks: two vpdpbusd (exact: |lane| <= 8 * 15 * 128 + 8 * 8 * 128), one conversion, one FMA with
 * dx dy. A step costs the weights 3 loads, 3 permutes, 6 nibble operations and 2 scale conversions,
 * and each token 4 vpdpbusd, 2 multiplies, 2 conversions and 2 FMAs: ~30 µops for 8 blocks, against
 * ~75 for the AVX2 kernel's (and ~80 for the two-block pairs this replaced, which on the GPU host's
 * Xeon decoded at 0.5-0.75x AVX2). The single dot, the multi-row GEMV (dense or gathered) and the GEMM
 * tile run one body (q4_rows) on the same prepared values: a row has the same bits in all of them. */
#define Q4_STEP 8                                           /* blocks a step */
#define Q4_STEP_BYTES (Q4_STEP * (int)sizeof(struct block_q4_0)) /* 144 */
#define Q4_ACT_STEP 512 /* prepared bytes a step: A0 B0 A1 B1 (64 each), C0 C1 (16 int32 each), dy (32 f32) */
#define GEMM_TOKENS 4   /* activations a weight step is unpacked once for (the GEMM tile) */

/* each block's scale (bytes 18k, 18k+1 of [x | x+64]) repeated over its 4 lanes */
static const uint8_t Q4_IDX_D[64] __attribute__((aligned(64))) = {
      0,   1,   0,   1,   0,   1,   0,   1,  18,  19,  18,  19,  18,  19,  18,  19,
     36,  37,  36,  37,  36,  37,  36,  37,  54,  55,  54,  55,  54,  55,  54,  55,
     72,  73,  72,  73,  72,  73,  72,  73,  90,  91,  90,  91,  90,  91,  90,  91,
    108, 109, 108, 109, 108, 109, 108, 109, 126, 127, 126, 127, 126, 127, 126, 127,
};
/* blocks 0-3's 16 quant bytes (18k+2 ..) of [x | x+64] */
static const uint8_t Q4_IDX_Q0[64] __attribute__((aligned(64))) = {
      2,   3,   4,   5,   6,   7,   8,   9,  10,  11,  12,  13,  14,  15,  16,  17,
     20,  21,  22,  23,  24,  25,  26,  27,  28,  29,  30,  31,  32,  33,  34,  35,
     38,  39,  40,  41,  42,  43,  44,  45,  46,  47,  48,  49,  50,  51,  52,  53,
     56,  57,  58,  59,  60,  61,  62,  63,  64,  65,  66,  67,  68,  69,  70,  71,
};
/* blocks 4-7's of [x+64 | x+80] (bytes 74.. of the step) */
static const uint8_t Q4_IDX_Q1[64] __attribute__((aligned(64))) = {
     10,  11,  12,  13,  14,  15,  16,  17,  18,  19,  20,  21,  22,  23,  24,  25,
     28,  29,  30,  31,  32,  33,  34,  35,  36,  37,  38,  39,  40,  41,  42,  43,
     46,  47,  48,  49,  50,  51,  52,  53,  54,  55,  56,  57,  58,  59,  60,  61,
    112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127,
};
/* the 8 scales once (bytes 0-15) of [x | x+64] */
static const uint8_t Q4_IDX_DC[64] __attribute__((aligned(64))) = {
      0,   1,  18,  19,  36,  37,  54,  55,  72,  73,  90,  91, 108, 109, 126, 127,
};

static inline __m512i load_idx(const uint8_t *idx)
{
    return _mm512_load_si512((const void *)idx);
}

/* The first m blocks of a step (m < Q4_STEP: a row's last, short step) in a zeroed step: the blocks
 * after them have scale 0 and quants 0, so they add nothing, in every path alike. */
static inline const uint8_t *q4_short_step(const void *x, int m, uint8_t *buf)
{
    memset(buf, 0, Q4_STEP_BYTES);
    memcpy(buf, x, (size_t)m * sizeof(struct block_q4_0));
    return buf;
}

/* A step's weights unpacked: nibbles of blocks 0-3 (lo[0], hi[0]) and 4-7 (lo[1], hi[1]), dx per lane */
struct q4_step_w {
    __m512i lo[2], hi[2];
    __m512 dx[2];
};

static inline __attribute__((always_inline)) void q4_unpack(const uint8_t *x, struct q4_step_w *w)
{
    const __m512i l0 = _mm512_loadu_si512((const void *)x), l1 = _mm512_loadu_si512((const void *)(x + 64));
    const __m512i l2 = _mm512_loadu_si512((const void *)(x + 80));
    const __m512i d = _mm512_permutex2var_epi8(l0, load_idx(Q4_IDX_D), l1);
    const __m512i q[2] = { _mm512_permutex2var_epi8(l0, load_idx(Q4_IDX_Q0), l1),
                           _mm512_permutex2var_epi8(l1, load_idx(Q4_IDX_Q1), l2) };
    const __m512i m = _mm512_set1_epi8(NIBBLE);
    for (int h = 0; h < 2; h++) {
        w->lo[h] = _mm512_and_si512(q[h], m);
        w->hi[h] = _mm512_and_si512(_mm512_srli_epi16(q[h], 4), m);
    }
    w->dx[0] = _mm512_cvtph_ps(_mm512_castsi512_si256(d));
    w->dx[1] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(d, 1));
}

/* One step of the activation prepared: m <= Q4_STEP blocks of y (the rest zero) into out
 * (Q4_ACT_STEP bytes, 64-byte aligned) */
static void q4_act_step(const struct block_q8_0 *y, int m, int8_t *out)
{
    _Alignas(64) int8_t ab[4][64];
    float d[Q4_STEP] = { 0 };
    memset(ab, 0, sizeof ab);
    for (int k = 0; k < m; k++) {
        memcpy(&ab[2 * (k / 4)][16 * (k % 4)], y[k].qs, QK8_0 / 2);
        memcpy(&ab[2 * (k / 4) + 1][16 * (k % 4)], y[k].qs + QK8_0 / 2, QK8_0 / 2);
        d[k] = _cvtsh_ss(y[k].d);
    }
    int32_t *c = (int32_t *)(out + 256);
    float *dy = (float *)(out + 384);
    const __m512i eight = _mm512_set1_epi8(Q4_0_OFFSET);
    for (int h = 0; h < 2; h++) {
        const __m512i a = _mm512_load_si512((const void *)ab[2 * h]), b = _mm512_load_si512((const void *)ab[2 * h + 1]);
        _mm512_store_si512((void *)(out + 128 * h), a);
        _mm512_store_si512((void *)(out + 128 * h + 64), b);
        const __m512i s = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), eight, a), eight, b);
        _mm512_store_si512((void *)(c + 16 * h), _mm512_sub_epi32(_mm512_setzero_si512(), s));
    }
    for (int l = 0; l < 2 * F32_PER_VEC; l++)
        dy[l] = d[l / 4];
}

static int64_t q4_steps(int64_t nb)
{
    return (nb + Q4_STEP - 1) / Q4_STEP;
}

static void q4_act_prepare(int8_t *act, const struct block_q8_0 *y, int64_t nb)
{
    for (int64_t s = 0; s < q4_steps(nb); s++) {
        const int m = nb - s * Q4_STEP < Q4_STEP ? (int)(nb - s * Q4_STEP) : Q4_STEP;
        q4_act_step(y + s * Q4_STEP, m, act + s * Q4_ACT_STEP);
    }
}

/* out[t] = row x · activation t for nt <= GEMM_TOKENS prepared activations act[t] (each q4_steps(nb)
 * steps), or for nt = 1 and act NULL the activation y prepared here a step at a time (the same
 * values: the single dot). Prefetch as the AVX2 rows: reach and pf (quant_prefetch.h). */
static inline __attribute__((always_inline)) void q4_rows(const void *vx, int nt, const int8_t *const *act,
                                                         const struct block_q8_0 *y, int64_t nb, float *out,
                                                         enum prefetch_reach reach, const char *pf)
{
    const uint8_t *x = vx;
    const size_t row = (size_t)nb * sizeof(struct block_q4_0);
    __m512 acc[GEMM_TOKENS][2];
    for (int t = 0; t < nt; t++)
        acc[t][0] = acc[t][1] = _mm512_setzero_ps();
    _Alignas(64) int8_t own[Q4_ACT_STEP];
    _Alignas(64) uint8_t tail[Q4_STEP_BYTES];
    for (int64_t s = 0; s < q4_steps(nb); s++) {
        const int m = nb - s * Q4_STEP < Q4_STEP ? (int)(nb - s * Q4_STEP) : Q4_STEP;
        const size_t at = (size_t)s * Q4_STEP_BYTES;
        for (size_t k = 0; k < Q4_STEP_BYTES; k += CACHE_LINE)
            prefetch_ahead((const char *)x, at + k, row, reach, pf);
        struct q4_step_w w;
        q4_unpack(m == Q4_STEP ? x + at : q4_short_step(x + at, m, tail), &w);
        for (int t = 0; t < nt; t++) {
            const int8_t *p;
            if (act) {
                p = act[t] + s * Q4_ACT_STEP;
            } else {
                q4_act_step(y + s * Q4_STEP, m, own);
                p = own;
            }
            const int32_t *c = (const int32_t *)(p + 256);
            const float *dy = (const float *)(p + 384);
            for (int h = 0; h < 2; h++) {
                __m512i i = _mm512_load_si512((const void *)(c + 16 * h));
                i = _mm512_dpbusd_epi32(i, w.lo[h], _mm512_load_si512((const void *)(p + 128 * h)));
                i = _mm512_dpbusd_epi32(i, w.hi[h], _mm512_load_si512((const void *)(p + 128 * h + 64)));
                const __m512 sc = _mm512_mul_ps(w.dx[h], _mm512_load_ps(dy + 16 * h));
                acc[t][h] = _mm512_fmadd_ps(sc, _mm512_cvtepi32_ps(i), acc[t][h]);
            }
        }
    }
    for (int t = 0; t < nt; t++)
        out[t] = hsum_f32x16(_mm512_add_ps(acc[t][0], acc[t][1]));
}

static void q4_0_vec_dot_avx512(int64_t n, float *s, const void *vx, const void *vy)
{
    q4_rows(vx, 1, NULL, vy, n / QK4_0, s, VEC_DOT_REACH, NULL);
}

/* rows [r0, r1) against nt prepared activations: row r at w + r * row_bytes, or at rowp[r] (a gather:
 * each row's prefetch stays inside it, and the rows ahead are fetched along this one) */
static inline __attribute__((always_inline)) void q4_rows_range(const uint8_t *w, size_t row_bytes,
                                                               const void *const *rowp, int64_t nb, int nt,
                                                               const int8_t *const *act, float *Y, size_t y_stride,
                                                               int64_t r0, int64_t r1)
{
    for (int64_t r = r0; r < r1; r++) {
        float out[GEMM_TOKENS];
        const void *x = rowp ? rowp[r] : (const void *)(w + (size_t)r * row_bytes);
        const char *pf = rowp ? gather_prefetch(rowp, r, r0, r1, row_bytes) : NULL;
        q4_rows(x, nt, act, NULL, nb, out, rowp ? PF_ROW : PF_PAST, pf);
        for (int t = 0; t < nt; t++)
            Y[(size_t)t * y_stride + (size_t)r] = out[t];
    }
}

/* ---- Q4_0 multi-row AXPYs: the sparse FFN's down_t rows ------------------------------------------
 * Every element gets the reference's one FMA per row, y = fma(a · d, q - 8, y), in row order (the
 * single-row axpy is one row of it): q - 8 as a float comes from one permute of a 16-float table
 * by the nibble (vpermps reads an index's low 4 bits, so the high nibble needs only a shift), and the
 * rows' a · d from one permute of 8 blocks' bytes, one conversion and one multiply. */
#define AXPY_CHUNK 4    /* rows whose FMAs a block of y takes in registers, as the AVX2 kernels */
#define AXPY_SC_ROWS 64 /* rows_add's rows with their scales made 8 blocks at a time; one at a time beyond */

/* float(k - 8) for k = 0..15 */
static inline __m512 q4_values(void)
{
    return _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
}

/* sc[k][b] = a[k] · d of block i0 + b of row k for the nr rows and the up to Q4_STEP blocks from i0 on
 * (of nb; lanes past the row 0) */
static inline void q4_axpy_scales(const void *const *rows, const float *a, int nr, int64_t i0, int64_t nb,
                                  float (*sc)[Q4_STEP])
{
    const int m = nb - i0 < Q4_STEP ? (int)(nb - i0) : Q4_STEP;
    _Alignas(64) uint8_t tail[Q4_STEP_BYTES];
    for (int k = 0; k < nr; k++) {
        const uint8_t *x = (const uint8_t *)((const struct block_q4_0 *)rows[k] + i0);
        if (m < Q4_STEP)
            x = q4_short_step(x, m, tail);
        const __m512i d = _mm512_permutex2var_epi8(_mm512_loadu_si512((const void *)x), load_idx(Q4_IDX_DC),
                                                   _mm512_loadu_si512((const void *)(x + 64)));
        const __m256 dx = _mm256_cvtph_ps(_mm512_castsi512_si128(d));
        _mm256_store_ps(sc[k], _mm256_mul_ps(_mm256_set1_ps(a[k]), dx));
    }
}

/* acc[0] (elements 0..15) and acc[1] (16..31) += s · (q - 8) for block x */
static inline __attribute__((always_inline)) void q4_block_fma(__m512 acc[2], const struct block_q4_0 *x, __m512 s,
                                                              __m512 vals)
{
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)x->qs));
    acc[0] = _mm512_fmadd_ps(s, _mm512_permutexvar_ps(b, vals), acc[0]);
    acc[1] = _mm512_fmadd_ps(s, _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), vals), acc[1]);
}

static void q4_0_axpy_rows_avx512(int64_t n, float *y, const float *a, const void *const *rows, int nr, bool init)
{
    const __m512 vals = q4_values();
    const int64_t nb = n / QK4_0;
    const size_t row = (size_t)nb * sizeof(struct block_q4_0);
    for (int k0 = 0; k0 < nr; k0 += AXPY_CHUNK) {
        const int k1 = k0 + AXPY_CHUNK < nr ? k0 + AXPY_CHUNK : nr;
        const int p1 = k1 + AXPY_CHUNK < nr ? k1 + AXPY_CHUNK : nr; /* the next chunk, prefetched */
        const bool zero = init && k0 == 0;
        if (k0 == 0)
            for (int k = 0; k < k1; k++)
                prefetch_row_head(rows[k], row);
        _Alignas(32) float sc[AXPY_CHUNK][Q4_STEP];
        for (int64_t i = 0; i < nb; i++) {
            if (i % Q4_STEP == 0)
                q4_axpy_scales(rows + k0, a + k0, k1 - k0, i, nb, sc);
            const size_t at = (size_t)i * sizeof(struct block_q4_0);
            if (at % CACHE_LINE < sizeof(struct block_q4_0)) /* this block starts a new line */
                prefetch_line_of(rows, k1, p1, at - at % CACHE_LINE);
            float *yb = y + i * QK4_0;
            __m512 acc[2];
            for (int c = 0; c < 2; c++)
                acc[c] = zero ? _mm512_setzero_ps() : _mm512_loadu_ps(yb + c * F32_PER_VEC);
            for (int k = k0; k < k1; k++)
                q4_block_fma(acc, (const struct block_q4_0 *)rows[k] + i, _mm512_set1_ps(sc[k - k0][i % Q4_STEP]), vals);
            for (int c = 0; c < 2; c++)
                _mm512_storeu_ps(yb + c * F32_PER_VEC, acc[c]);
        }
    }
}

/* the single-row AXPY: one row of the multi-row one (the same operations per element) */
static void q4_0_axpy_avx512(int64_t n, float *y, float a, const void *vx)
{
    q4_0_axpy_rows_avx512(n, y, &a, &vx, 1, false);
}

/* y += the rows summed from zero per block in registers (quant_axpy_rows_add's contract) */
static void q4_0_axpy_rows_add_avx512(int64_t n, float *y, const float *a, const void *const *rows, int nr)
{
    const __m512 vals = q4_values();
    const int64_t nb = n / QK4_0;
    _Alignas(32) float sc[AXPY_SC_ROWS][Q4_STEP];
    for (int64_t i0 = 0; i0 < nb; i0 += Q4_STEP) {
        const int m = nb - i0 < Q4_STEP ? (int)(nb - i0) : Q4_STEP;
        if (nr <= AXPY_SC_ROWS)
            q4_axpy_scales(rows, a, nr, i0, nb, sc);
        for (int b = 0; b < m; b++) {
            __m512 acc[2] = { _mm512_setzero_ps(), _mm512_setzero_ps() };
            for (int k = 0; k < nr; k++) {
                const struct block_q4_0 *x = (const struct block_q4_0 *)rows[k] + i0 + b;
                const __m512 s = nr <= AXPY_SC_ROWS ? _mm512_set1_ps(sc[k][b]) : _mm512_set1_ps(a[k] * _cvtsh_ss(x->d));
                q4_block_fma(acc, x, s, vals);
            }
            float *yb = y + (i0 + b) * QK4_0;
            for (int c = 0; c < 2; c++)
                _mm512_storeu_ps(yb + c * F32_PER_VEC, _mm512_add_ps(_mm512_loadu_ps(yb + c * F32_PER_VEC), acc[c]));
        }
    }
}

bool quant_avx512_axpy_rows(uint32_t type, int64_t n, float *y, const float *a, const void *const *rows, int nr,
                            bool init)
{
    if (type != PI_TYPE_Q4_0)
        return false;
    q4_0_axpy_rows_avx512(n, y, a, rows, nr, init);
    return true;
}

bool quant_avx512_axpy_rows_add(uint32_t type, int64_t n, float *y, const float *a, const void *const *rows, int nr)
{
    if (type != PI_TYPE_Q4_0)
        return false;
    q4_0_axpy_rows_add_avx512(n, y, a, rows, nr);
    return true;
}

bool quant_avx512_has_axpy_rows_add(uint32_t type)
{
    return type == PI_TYPE_Q4_0;
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

/* ---- Q6_K against Q8_K, bitwise the reference ------------------------------------------------
 *
 * Per super-block the integer sum Σ_sub sc Σ q y is computed exactly (vpmaddubsw pairs, then
 * vpdpwssd against the scales spread over the words of their sub-block), the offset sum from the
 * activation's bsums, and then the reference's float expression. (Q4_K and Q5_K keep their AVX2 dots
 * at this level: on the GPU host this unit's versions ran their GEMV at 0.27-0.45x the AVX2 ones,
 * 2026-12-03, docs/BENCHMARKS.md.) */

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

/* A prepared Q4_0 activation of nb blocks on the stack (rows up to GEMV_MAX_BLOCKS blocks) */
#define Q4_ACT_MAX_BYTES ((GEMV_MAX_BLOCKS / Q4_STEP) * Q4_ACT_STEP)

size_t quant_avx512_gather_act_bytes(uint32_t type, int64_t n)
{
    const int64_t nb = n / QK4_0;
    return type == PI_TYPE_Q4_0 && nb <= GEMV_MAX_BLOCKS ? (size_t)q4_steps(nb) * Q4_ACT_STEP : 0;
}

void quant_avx512_gather_act_prepare(uint32_t type, int64_t n, const void *x_vd, void *act)
{
    if (quant_avx512_gather_act_bytes(type, n))
        q4_act_prepare(act, x_vd, n / QK4_0);
}

/* Q4_0 rows [r0, r1), dense (rowp NULL: row r at W + r * row_bytes) or gathered, against x_vd prepared
 * here or by the caller (prep) */
static bool q4_gemv(const void *W, size_t row_bytes, const void *const *rowp, int64_t n, const void *x_vd,
                    const void *prep, float *y, int64_t r0, int64_t r1)
{
    const int64_t nb = n / QK4_0;
    if (nb > GEMV_MAX_BLOCKS)
        return false;
    _Alignas(64) int8_t buf[Q4_ACT_MAX_BYTES]; /* 128 KiB on the stack: threads have megabytes */
    const int8_t *act = prep;
    if (!act) {
        q4_act_prepare(buf, x_vd, nb);
        act = buf;
    }
    q4_rows_range(W, row_bytes, rowp, nb, 1, &act, y, 0, r0, r1);
    return true;
}

bool quant_avx512_gemv_gather(uint32_t type, int64_t n, const void *x_vd, const void *act, const void *const *rows,
                              int64_t nrows, float *y)
{
    return type == PI_TYPE_Q4_0 && q4_gemv(NULL, quant_row_size(type, n), rows, n, x_vd, act, y, 0, nrows);
}

bool quant_avx512_gemv_rows(uint32_t type, const void *W, size_t row_bytes, int64_t n, const void *x_vd,
                            float *y, int64_t r0, int64_t r1)
{
    if (type == PI_TYPE_Q4_0)
        return q4_gemv(W, row_bytes, NULL, n, x_vd, NULL, y, r0, r1);
    return false;
}

/* The GEMM tile (Q4_0): rows [r0, r1) against B activations, all prepared once per call (on the
 * heap), then tiles of GEMM_ROW_TILE rows (which stay in L1/L2 while every token passes) against
 * GEMM_TOKENS tokens at a time (each weight step unpacked once for them). */
#define GEMM_ROW_TILE 16
bool quant_avx512_gemm_rows(uint32_t type, const void *W, size_t row_bytes, int64_t n, const void *X_vd,
                            size_t x_stride, int B, float *Y, size_t y_stride, int64_t r0, int64_t r1)
{
    const int64_t nb = n / QK4_0;
    if (type != PI_TYPE_Q4_0 || nb > GEMV_MAX_BLOCKS)
        return false;
    const size_t per = quant_avx512_gather_act_bytes(type, n);
    int8_t *buf = aligned_alloc(64, per * (size_t)B);
    const int8_t **act = malloc((size_t)B * sizeof *act);
    if (!buf || !act) { /* no memory for the prepared activations: the same values one by one */
        free(buf), free(act);
        return false;
    }
    for (int t = 0; t < B; t++) {
        act[t] = buf + (size_t)t * per;
        q4_act_prepare(buf + (size_t)t * per, (const void *)((const char *)X_vd + (size_t)t * x_stride), nb);
    }
    for (int64_t t0 = r0; t0 < r1; t0 += GEMM_ROW_TILE) {
        const int64_t t1 = t0 + GEMM_ROW_TILE < r1 ? t0 + GEMM_ROW_TILE : r1;
        for (int b0 = 0; b0 < B; b0 += GEMM_TOKENS) {
            if (B - b0 >= GEMM_TOKENS)
                q4_rows_range(W, row_bytes, NULL, nb, GEMM_TOKENS, act + b0, Y + (size_t)b0 * y_stride, y_stride, t0, t1);
            else
                for (int t = b0; t < B; t++)
                    q4_rows_range(W, row_bytes, NULL, nb, 1, act + t, Y + (size_t)t * y_stride, y_stride, t0, t1);
        }
    }
    free(buf), free(act);
    return true;
}

void quant_avx512_install(struct pi_type_traits *traits, size_t count)
{
    if (count < PI_TYPE_COUNT)
        return; /* not the table quant.c owns */
    traits[PI_TYPE_Q4_0].to_float = q4_0_to_float_avx512;
    traits[PI_TYPE_Q4_0].vec_dot = q4_0_vec_dot_avx512;
    traits[PI_TYPE_Q4_0].axpy = q4_0_axpy_avx512;
    traits[PI_TYPE_Q6_K].vec_dot = q6_K_vec_dot_avx512;
}
