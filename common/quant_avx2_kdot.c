/* quant_avx2_kdot.c — the AVX2 dots of Q4_K, Q5_K and Q6_K (the types of Q4_K_M / Q5_K_M files)
 * against Q8_K, and their multi-row GEMV. Compiled with -mavx2 -mfma -mf16c like quant_avx2.c and
 * only reached after cpuid said yes (quant_avx2_kdot_install patches the AVX2 table).
 *
 * Bitwise the reference: per super-block the integer sums Σ_sub sc Σ q y and Σ_sub m Σ y are exact
 * (vpmaddubsw pairs, at most 2 * 63 * 128, then vpmaddwd against the sub-block scales), and the two
 * float operations per super-block are the reference's, in its order. Against quant_avx2_kquants.c's
 * generic bodies these keep the unpacked quants in registers, decode the packed 6-bit scales with a
 * few 32-bit word operations instead of per-scale bit picking, and take the min and offset sums from
 * the activation's bsums with one vpmaddwd. The multi-row GEMV runs two rows per pass over the
 * activation (its quants and sums loaded once for both); a row's bits do not depend on that. The
 * activation's quantizer (Q8_K) is here too, byte for byte the reference's. */
#include "quant_internal.h"

#include <immintrin.h>
#include <string.h>

#define NIBBLE 0x0f
#define CHUNKS (QK_K / 32)
#define Q6_OFFSET 32
#define CACHE_LINE 64
#define SCALE_MASK6 0x3f3f3f3fu
#define SCALE_LO4 0x0f0f0f0fu
#define SCALE_HI2 0x30303030u
#ifndef PREFETCH_BYTES
#define PREFETCH_BYTES 3072 /* as quant_avx2.c: weights this far ahead */
#endif

static inline __m256i load256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

static inline int32_t hsum_i32x8(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

/* The 12 scale bytes of Q4_K/Q5_K as 8 scales and 8 mins (bytes, in sub-block order): for j < 4,
 * sc = q[j] & 63 and m = q[j+4] & 63; for j >= 4 the low 4 bits come from q[j+4] (sc: low nibble,
 * m: high nibble) and the high 2 from bits 6-7 of q[j-4] (sc) or q[j] (m), as the reference unpacks. */
static inline void k45_scales8(const uint8_t *q, uint64_t *sc, uint64_t *m)
{
    uint32_t w0, w1, w2;
    memcpy(&w0, q, 4);
    memcpy(&w1, q + 4, 4);
    memcpy(&w2, q + 8, 4);
    const uint32_t sc_lo = w0 & SCALE_MASK6, m_lo = w1 & SCALE_MASK6;
    const uint32_t sc_hi = (w2 & SCALE_LO4) | ((w0 >> 2) & SCALE_HI2);
    const uint32_t m_hi = ((w2 >> 4) & SCALE_LO4) | ((w1 >> 2) & SCALE_HI2);
    *sc = sc_lo | (uint64_t)sc_hi << 32;
    *m = m_lo | (uint64_t)m_hi << 32;
}

/* vpshufb indices: word w of a 128-bit lane into all 8 words of the lane (per lane of a ymm) */
static inline __m256i word_bcast_idx(int w_lane0, int w_lane1)
{
    const __m128i a = _mm_set1_epi16((short)((2 * w_lane0) | ((2 * w_lane0 + 1) << 8)));
    const __m128i b = _mm_set1_epi16((short)((2 * w_lane1) | ((2 * w_lane1 + 1) << 8)));
    return _mm256_set_m128i(b, a);
}

/* Σ_c sc_c Σ (q_c y_c) for one chunk, added to acc: vpmaddubsw then vpmaddwd with the scale words */
static inline __m256i chunk_dot(__m256i acc, __m256i q, __m256i y, __m256i scv)
{
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), scv));
}

/* ---- Q4_K / Q5_K ------------------------------------------------------------------------------ */

/* Up to two rows' super-block i against one activation super-block; q5: Q5_K (5th bits in qh) */
static inline __attribute__((always_inline)) void k45_super(bool q5, int nr, const void *const *xb,
                                                           const struct block_q8_K *y, float *sumf)
{
    __m256i acc[2], scall[2], mv[2];
    const __m256i ones16 = _mm256_set1_epi16(1);
    const __m256i ys32 = _mm256_madd_epi16(load256(y->bsums), ones16); /* Σy per 32 (chunk order) */
    for (int r = 0; r < nr; r++) {
        const uint8_t *scales = q5 ? ((const struct block_q5_K *)xb[r])->scales : ((const struct block_q4_K *)xb[r])->scales;
        uint64_t sc, m;
        k45_scales8(scales, &sc, &m);
        scall[r] = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
        mv[r] = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m));
        acc[r] = _mm256_setzero_si256();
    }
    for (int g = 0; g < CHUNKS / 2; g++) {
        const __m256i y0 = load256(y->qs + 64 * g), y1 = load256(y->qs + 64 * g + 32);
        const __m256i i0 = word_bcast_idx(2 * g, 2 * g), i1 = word_bcast_idx(2 * g + 1, 2 * g + 1);
        for (int r = 0; r < nr; r++) {
            const uint8_t *qs = q5 ? ((const struct block_q5_K *)xb[r])->qs : ((const struct block_q4_K *)xb[r])->qs;
            const __m256i v = load256(qs + 32 * g);
            __m256i lo = _mm256_and_si256(v, _mm256_set1_epi8(NIBBLE));
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(NIBBLE));
            if (q5) { /* chunk c's 5th bit: bit c of qh[l] */
                const __m256i qh = load256(((const struct block_q5_K *)xb[r])->qh);
                const __m256i one = _mm256_set1_epi8(1);
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * g), one), 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * g + 1), one), 4));
            }
            acc[r] = chunk_dot(acc[r], lo, y0, _mm256_shuffle_epi8(scall[r], i0));
            acc[r] = chunk_dot(acc[r], hi, y1, _mm256_shuffle_epi8(scall[r], i1));
        }
    }
    for (int r = 0; r < nr; r++) {
        const int32_t isum = hsum_i32x8(acc[r]);
        const int32_t msum = hsum_i32x8(_mm256_mullo_epi32(mv[r], ys32));
        const pi_f16 dh = q5 ? ((const struct block_q5_K *)xb[r])->d : ((const struct block_q4_K *)xb[r])->d;
        const pi_f16 mh = q5 ? ((const struct block_q5_K *)xb[r])->dmin : ((const struct block_q4_K *)xb[r])->dmin;
        const float d = _cvtsh_ss(dh), dmin = _cvtsh_ss(mh);
        sumf[r] += (d * y->d) * (float)isum - (dmin * y->d) * (float)msum;
    }
}

/* ---- Q6_K ------------------------------------------------------------------------------------- */

static inline __attribute__((always_inline)) void q6_super(int nr, const void *const *xb, const struct block_q8_K *y,
                                                          float *sumf)
{
    __m256i acc[2], sclo[2], schi[2];
    int32_t corr[2];
    const __m256i bsums = load256(y->bsums);
    for (int r = 0; r < nr; r++) {
        const struct block_q6_K *b = xb[r];
        const __m128i s8 = _mm_loadu_si128((const __m128i *)b->scales);
        const __m256i s16 = _mm256_cvtepi8_epi16(s8);
        corr[r] = hsum_i32x8(_mm256_madd_epi16(s16, bsums)); /* Σ_j sc_j Σy_j over 16-element sub-blocks */
        sclo[r] = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(s16));      /* scales 0..7 */
        schi[r] = _mm256_broadcastsi128_si256(_mm256_extracti128_si256(s16, 1)); /* 8..15 */
        acc[r] = _mm256_setzero_si256();
    }
    const __m256i three = _mm256_set1_epi8(3), nib = _mm256_set1_epi8(NIBBLE);
    for (int h = 0; h < 2; h++) {
        for (int quarter = 0; quarter < 4; quarter++) {
            const int c = 4 * h + quarter; /* chunk: sub-blocks 2c (lane 0 words) and 2c+1 (lane 1) */
            const __m256i yv = load256(y->qs + 32 * c);
            const __m256i idx = word_bcast_idx((2 * c) % 8, (2 * c + 1) % 8);
            for (int r = 0; r < nr; r++) {
                const struct block_q6_K *b = xb[r];
                const __m256i l = load256(b->ql + 64 * h + 32 * (quarter & 1));
                const __m256i lo = quarter < 2 ? _mm256_and_si256(l, nib) : _mm256_and_si256(_mm256_srli_epi16(l, 4), nib);
                const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(load256(b->qh + 32 * h), 2 * quarter), three);
                const __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(hb, 4));
                acc[r] = chunk_dot(acc[r], q, yv, _mm256_shuffle_epi8(c < 4 ? sclo[r] : schi[r], idx));
            }
        }
    }
    for (int r = 0; r < nr; r++) {
        const int32_t isum = hsum_i32x8(acc[r]) - Q6_OFFSET * corr[r];
        const float d = _cvtsh_ss(((const struct block_q6_K *)xb[r])->d), dmin = 0.0f;
        const int32_t msum = 0; /* the reference's expression, whose min term is zero for Q6_K */
        sumf[r] += (d * y->d) * (float)isum - (dmin * y->d) * (float)msum;
    }
}

/* ---- the activation: Q8_K, byte for byte the reference ----------------------------------------
 * max = the first element of largest magnitude (its sign kept), iscale = -127 / max, q = min(127,
 * round-to-nearest-even(iscale x)) (vcvtps2dq rounds so, as the reference's magic-number addition
 * does for |v| < 2^22), the sums of every 16 quants, d = 1 / iscale; an all-zero block is zeros. */
#define Q8_K_MAX 127.0f

static void q8_K_from_float_avx2(const float *x, void *dst, int64_t n)
{
    struct block_q8_K *yb = dst;
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        struct block_q8_K *y = &yb[i];
        __m256 m = _mm256_setzero_ps();
        for (int j = 0; j < QK_K; j += 8)
            m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + j), absmask));
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        const float amax = _mm_cvtss_f32(h);
        if (!(amax > 0.0f)) { /* the reference's !amax (NaN blocks are garbage in both) */
            memset(y, 0, sizeof *y);
            continue;
        }
        float max = 0.0f;
        const __m256 va = _mm256_set1_ps(amax);
        for (int j = 0; j < QK_K; j += 8) {
            const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x + j), absmask), va, _CMP_EQ_OQ));
            if (hit) {
                max = x[j + __builtin_ctz((unsigned)hit)];
                break;
            }
        }
        const float iscale = -Q8_K_MAX / max;
        const __m256 vs = _mm256_set1_ps(iscale);
        const __m256i lim = _mm256_set1_epi32(127);
        for (int j = 0; j < QK_K; j += 32) {
            __m256i q[4];
            for (int k = 0; k < 4; k++)
                q[k] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(vs, _mm256_loadu_ps(x + j + 8 * k))), lim);
            /* packs interleave 128-bit lanes; the permute restores element order */
            const __m256i p16a = _mm256_packs_epi32(q[0], q[1]), p16b = _mm256_packs_epi32(q[2], q[3]);
            const __m256i p8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16a, p16b),
                                                           _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i *)(y->qs + j), p8);
            /* sums of 16: widen to int16 in order, then pairs, then horizontal */
            const __m256i w0 = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(p8));
            const __m256i w1 = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(p8, 1));
            const __m256i s0 = _mm256_madd_epi16(w0, _mm256_set1_epi16(1)), s1 = _mm256_madd_epi16(w1, _mm256_set1_epi16(1));
            y->bsums[j / 16] = (int16_t)hsum_i32x8(s0);
            y->bsums[j / 16 + 1] = (int16_t)hsum_i32x8(s1);
        }
        y->d = 1 / iscale;
    }
}

/* ---- rows ------------------------------------------------------------------------------------- */

enum kdot_type { KD_Q4_K, KD_Q5_K, KD_Q6_K };

static inline __attribute__((always_inline)) void kdot_rows(enum kdot_type kt, int nr, const char *const *x,
                                                           const struct block_q8_K *y, int64_t nsb, float *out)
{
    const size_t bsize = kt == KD_Q4_K ? sizeof(struct block_q4_K)
                         : kt == KD_Q5_K ? sizeof(struct block_q5_K) : sizeof(struct block_q6_K);
    float sumf[2] = { 0.0f, 0.0f };
    for (int64_t i = 0; i < nsb; i++) {
        const void *xb[2];
        for (int r = 0; r < nr; r++) {
            xb[r] = x[r] + (size_t)i * bsize;
            for (size_t k = 0; k < bsize; k += CACHE_LINE)
                _mm_prefetch((const char *)xb[r] + PREFETCH_BYTES + k, _MM_HINT_T0);
        }
        if (kt == KD_Q6_K)
            q6_super(nr, xb, &y[i], sumf);
        else
            k45_super(kt == KD_Q5_K, nr, xb, &y[i], sumf);
    }
    for (int r = 0; r < nr; r++)
        out[r] = sumf[r];
}

#define KDOT(T, KT)                                                                                \
    static void T##_vec_dot_avx2k(int64_t n, float *s, const void *vx, const void *vy)             \
    {                                                                                              \
        const char *x[1] = { vx };                                                                 \
        kdot_rows(KT, 1, x, vy, n / QK_K, s);                                                      \
    }                                                                                              \
    static void T##_gemv_avx2k(const uint8_t *w, size_t row_bytes, int64_t n, const void *y, float *out, \
                               int64_t r0, int64_t r1)                                             \
    {                                                                                              \
        int64_t r = r0;                                                                            \
        for (; r + 2 <= r1; r += 2) {                                                              \
            const char *x[2] = { (const char *)w + (size_t)r * row_bytes, (const char *)w + (size_t)(r + 1) * row_bytes }; \
            kdot_rows(KT, 2, x, y, n / QK_K, out + r);                                             \
        }                                                                                          \
        if (r < r1) {                                                                              \
            const char *x[1] = { (const char *)w + (size_t)r * row_bytes };                        \
            kdot_rows(KT, 1, x, y, n / QK_K, out + r);                                             \
        }                                                                                          \
    }

KDOT(q4_K, KD_Q4_K)
KDOT(q5_K, KD_Q5_K)
KDOT(q6_K, KD_Q6_K)

bool quant_avx2_kdot_gemv_rows(uint32_t type, const void *W, size_t row_bytes, int64_t n, const void *x_vd,
                               float *y, int64_t r0, int64_t r1)
{
    switch (type) {
    case PI_TYPE_Q4_K:
        q4_K_gemv_avx2k(W, row_bytes, n, x_vd, y, r0, r1);
        return true;
    case PI_TYPE_Q5_K:
        q5_K_gemv_avx2k(W, row_bytes, n, x_vd, y, r0, r1);
        return true;
    case PI_TYPE_Q6_K:
        q6_K_gemv_avx2k(W, row_bytes, n, x_vd, y, r0, r1);
        return true;
    default:
        return false;
    }
}

void quant_avx2_kdot_install(struct pi_type_traits *traits, size_t count)
{
    if (count < PI_TYPE_COUNT)
        return;
    traits[PI_TYPE_Q4_K].vec_dot = q4_K_vec_dot_avx2k;
    traits[PI_TYPE_Q5_K].vec_dot = q5_K_vec_dot_avx2k;
    traits[PI_TYPE_Q6_K].vec_dot = q6_K_vec_dot_avx2k;
    traits[PI_TYPE_Q8_K].from_float = q8_K_from_float_avx2;
}
