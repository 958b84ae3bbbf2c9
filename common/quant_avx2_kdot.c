/* quant_avx2_kdot.c — the AVX2 dots of Q4_K, Q5_K and Q6_K (the types of Q4_K_M / Q5_K_M files)
 * against Q8_K, and their multi-row GEMV. Compiled with -mavx2 -mfma -mf16c like quant_avx2.c and
 * only reached after cpuid said yes (quant_avx2_kdot_install patches the AVX2 table).
 *
 * Bitwise the reference: per super-block the integer sums Σ_sub sc Σ q y and Σ_sub m Σ y are exact
 * (vpmaddubsw pairs, at most 2 * 63 * 128, then vpmaddwd against the sub-block scales), and the two
 * float operations per super-block are the reference's, in its order. Against quant_avx2_kquants.c's
 * generic bodies these keep the unpacked quants in registers, decode the packed 6-bit scales with a
 * few 32-bit word operations instead of per-scale bit picking, and take the min and offset sums from
 * the activation's bsums with one vpmaddwd. The multi-row GEMV runs four rows per pass over the
 * activation (its quants and sums loaded once for all four, the tails as lanes of one vector); a
 * row's bits do not depend on that. The
 * activation's quantizer (Q8_K) is here too, byte for byte the reference's. */
#include "quant_internal.h"

#include <immintrin.h>
#include <stdlib.h>
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

/* Up to KROWS rows are dotted against one activation at once: the activation's quants are loaded
 * once for all of them, and the per-super-block tail of every row (the horizontal integer sums, the
 * f16 scales, the reference's float operations) runs with the rows as lanes of one vector — the
 * same operations on each lane as the reference does on its row, so a row's bits do not depend on
 * the rows beside it (lanes past nr compute zeros and are dropped). */
#define KROWS 4

/* [Σ a0, Σ a1, Σ a2, Σ a3] of four int32x8 vectors (exact integer sums, any order) */
static inline __m128i hsum4_i32x8(const __m256i *a)
{
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(a[0], a[1]), _mm256_hadd_epi32(a[2], a[3]));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* sumf += (d dy) isum - (dmin dy) msum, lane by lane: the reference's per-super-block expression */
static inline __m128 k_tail(__m128 sumf, __m128 d, __m128 dmin, float dy, __m128i isum, __m128 msum)
{
    const __m128 vy = _mm_set1_ps(dy);
    const __m128 t = _mm_sub_ps(_mm_mul_ps(_mm_mul_ps(d, vy), _mm_cvtepi32_ps(isum)), _mm_mul_ps(_mm_mul_ps(dmin, vy), msum));
    return _mm_add_ps(sumf, t);
}

static inline __m128 f16x4(pi_f16 a, pi_f16 b, pi_f16 c, pi_f16 d)
{
    return _mm_cvtph_ps(_mm_setr_epi16((short)a, (short)b, (short)c, (short)d, 0, 0, 0, 0));
}

/* ---- Q4_K / Q5_K ------------------------------------------------------------------------------ */

/* nr <= KROWS rows' super-block against one activation super-block; q5: Q5_K (5th bits in qh).
 * xb[r] for r >= nr repeat row 0 (only their f16 scales are read). */
static inline __attribute__((always_inline)) void k45_super(bool q5, int nr, const void *const *xb,
                                                           const struct block_q8_K *y, __m128 *sumf)
{
    __m256i acc[KROWS], scall[KROWS];
    __m128i mp[KROWS];
    /* Σy per 32 (chunk order) as int16 (|Σ| <= 32 * 128): one vpmaddwd against the 8 mins gives the
     * min sum's 4 pair sums */
    const __m256i ys32 = _mm256_madd_epi16(load256(y->bsums), _mm256_set1_epi16(1));
    const __m128i ys16 = _mm_packs_epi32(_mm256_castsi256_si128(ys32), _mm256_extracti128_si256(ys32, 1));
    for (int r = 0; r < KROWS; r++) {
        acc[r] = _mm256_setzero_si256();
        mp[r] = _mm_setzero_si128();
        scall[r] = _mm256_setzero_si256();
    }
    for (int r = 0; r < nr; r++) {
        const uint8_t *scales = q5 ? ((const struct block_q5_K *)xb[r])->scales : ((const struct block_q4_K *)xb[r])->scales;
        uint64_t sc, m;
        k45_scales8(scales, &sc, &m);
        scall[r] = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
        mp[r] = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)m)), ys16);
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
    const __m128i isum = hsum4_i32x8(acc);
    const __m128i msum = _mm_hadd_epi32(_mm_hadd_epi32(mp[0], mp[1]), _mm_hadd_epi32(mp[2], mp[3]));
#define K45_F(r, f) (q5 ? ((const struct block_q5_K *)xb[r])->f : ((const struct block_q4_K *)xb[r])->f)
    const __m128 d = f16x4(K45_F(0, d), K45_F(1, d), K45_F(2, d), K45_F(3, d));
    const __m128 dmin = f16x4(K45_F(0, dmin), K45_F(1, dmin), K45_F(2, dmin), K45_F(3, dmin));
#undef K45_F
    *sumf = k_tail(*sumf, d, dmin, y->d, isum, _mm_cvtepi32_ps(msum));
}

/* ---- Q6_K ------------------------------------------------------------------------------------- */

static inline __attribute__((always_inline)) void q6_super(int nr, const void *const *xb, const struct block_q8_K *y,
                                                          __m128 *sumf)
{
    __m256i acc[KROWS], sch[KROWS];
    const __m256i bsums = load256(y->bsums);
    for (int r = 0; r < KROWS; r++)
        acc[r] = _mm256_setzero_si256();
    for (int r = 0; r < nr; r++) {
        const struct block_q6_K *b = xb[r];
        const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
        /* the quants are stored + 32: start from -32 Σ_j sc_j Σy_j (16-element sub-blocks); the
         * int32 sums wrap as a ring, so their total is the reference's exact isum */
        acc[r] = _mm256_sub_epi32(acc[r], _mm256_slli_epi32(_mm256_madd_epi16(s16, bsums), 5));
    }
    const __m256i three = _mm256_set1_epi8(3), nib = _mm256_set1_epi8(NIBBLE);
    for (int h = 0; h < 2; h++) {
        for (int r = 0; r < nr; r++) /* the 8 scales of this half (sub-blocks 8h..8h+7) as words */
            sch[r] = _mm256_broadcastsi128_si256(
                _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(((const struct block_q6_K *)xb[r])->scales + 8 * h))));
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
                acc[r] = chunk_dot(acc[r], q, yv, _mm256_shuffle_epi8(sch[r], idx));
            }
        }
    }
    const __m128i isum = hsum4_i32x8(acc);
#define Q6_D(r) (((const struct block_q6_K *)xb[r])->d)
    const __m128 d = f16x4(Q6_D(0), Q6_D(1), Q6_D(2), Q6_D(3));
#undef Q6_D
    /* the reference's expression, whose min term (dmin = 0, msum = 0) is a signed zero */
    *sumf = k_tail(*sumf, d, _mm_setzero_ps(), y->d, isum, _mm_setzero_ps());
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

/* nr <= KROWS rows (x[0..nr)) against one activation of nsb super-blocks; each row's weights are
 * prefetched pf bytes ahead of where it reads. A single row streams: PREFETCH_BYTES ahead in itself.
 * Four rows read side by side: a fixed distance would land in the next row, which another lane is
 * reading already (measured 2-3x slower from memory than the two-row version, 1 thread, dev box),
 * so the GEMV prefetches the same offset one pass ahead, in the row KROWS further on. */
static inline __attribute__((always_inline)) void kdot_rows(enum kdot_type kt, int nr, const char *const *x,
                                                           const struct block_q8_K *y, int64_t nsb, float *out,
                                                           size_t pf)
{
    const size_t bsize = kt == KD_Q4_K ? sizeof(struct block_q4_K)
                         : kt == KD_Q5_K ? sizeof(struct block_q5_K) : sizeof(struct block_q6_K);
    __m128 sumf = _mm_setzero_ps();
    for (int64_t i = 0; i < nsb; i++) {
        const void *xb[KROWS];
        for (int r = 0; r < KROWS; r++) {
            xb[r] = x[r < nr ? r : 0] + (size_t)i * bsize;
            if (r < nr && pf)
                for (size_t k = 0; k < bsize; k += CACHE_LINE)
                    _mm_prefetch((const char *)xb[r] + pf + k, _MM_HINT_T0);
        }
        if (kt == KD_Q6_K)
            q6_super(nr, xb, &y[i], &sumf);
        else
            k45_super(kt == KD_Q5_K, nr, xb, &y[i], &sumf);
    }
    _Alignas(16) float s[KROWS];
    _mm_store_ps(s, sumf);
    for (int r = 0; r < nr; r++)
        out[r] = s[r];
}

/* Rows per GEMV pass, per type: the two-row pass (its prefetch 3 KB ahead in each row) or KROWS.
 * Three interleaved rounds on the GPU host's 16 cores (docs/BENCHMARKS.md, "K-quant GEMV rows per
 * pass") had q4_K at 57 / 76 / 74 GB/s with two rows against 43 / 61 / 58 with four, q5_K 64 / 63 / 63
 * against 58 / 53 / 71, q6_K 68 / 66 / 67 against 67 / 74 / 76: each type takes its faster pass.
 * PINFER_KDOT_ROWS=2 or 4 forces one for every type (A/B runs). Set once by the install (under
 * quant_init's once), read-only after; the bits are the same either way. */
static int kdot_pass_rows[] = { [KD_Q4_K] = 2, [KD_Q5_K] = 2, [KD_Q6_K] = KROWS };

#define KDOT(T, KT)                                                                                \
    static void T##_vec_dot_avx2k(int64_t n, float *s, const void *vx, const void *vy)             \
    {                                                                                              \
        const char *x[1] = { vx };                                                                 \
        kdot_rows(KT, 1, x, vy, n / QK_K, s, PREFETCH_BYTES);                                      \
    }                                                                                              \
    static void T##_gemv_avx2k(const uint8_t *w, size_t row_bytes, int64_t n, const void *y, float *out, \
                               int64_t r0, int64_t r1)                                             \
    {                                                                                              \
        const char *x[KROWS];                                                                      \
        int64_t r = r0;                                                                            \
        if (kdot_pass_rows[KT] == 2)                                                               \
            for (; r + 2 <= r1; r += 2) {                                                          \
                x[0] = (const char *)w + (size_t)r * row_bytes;                                    \
                x[1] = x[0] + row_bytes;                                                           \
                kdot_rows(KT, 2, x, y, n / QK_K, out + r, PREFETCH_BYTES);                         \
            }                                                                                      \
        for (; r + KROWS <= r1; r += KROWS) {                                                      \
            for (int k = 0; k < KROWS; k++)                                                        \
                x[k] = (const char *)w + (size_t)(r + k) * row_bytes;                              \
            kdot_rows(KT, KROWS, x, y, n / QK_K, out + r, KROWS * row_bytes);                      \
        }                                                                                          \
        for (; r < r1; r++) {                                                                      \
            x[0] = (const char *)w + (size_t)r * row_bytes;                                        \
            kdot_rows(KT, 1, x, y, n / QK_K, out + r, PREFETCH_BYTES);                             \
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
    const char *e = getenv("PINFER_KDOT_ROWS");
    if (e && (atoi(e) == 2 || atoi(e) == KROWS))
        for (size_t k = 0; k < sizeof kdot_pass_rows / sizeof kdot_pass_rows[0]; k++)
            kdot_pass_rows[k] = atoi(e);
}
