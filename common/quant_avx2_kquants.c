/* quant_avx2_kquants.c — AVX2 kernels of the 256-element super-block types (Q2_K..Q6_K, IQ4_XS)
 * and of the newer 32-element types (Q4_1, Q5_0, Q5_1, IQ4_NL). Compiled with -mavx2 -mfma -mf16c
 * like quant_avx2.c, and only reached through the table quant_avx2_kquants_install() patches after
 * cpuid said yes.
 *
 * One body per operation over a per-type unpack, as in the references: each type's unpack turns a
 * super-block into 8 vectors of 32 int8 quants in element order (plus its integer sub-block scales
 * and mins); the dot then runs vpmaddubsw/vpmaddwd against the Q8_K quants and the sub-block
 * scales, so its integer sum per super-block is exactly the reference's (the products fit int16
 * pairs: |q| <= 127, |y| <= 127; the scaled sums fit int32), and the two float operations per
 * super-block are done in the reference's order: the AVX2 dot equals the reference bit for bit.
 * AXPY and dequantize do the reference's float operations per element (one FMA, one multiply and one
 * subtraction), so they too equal it bit for bit. */
#include "quant_internal.h"

#include <immintrin.h>
#include <string.h>

#define NIBBLE 0x0f
#define CHUNKS (QK_K / 32) /* 32-quant vectors per super-block */
#define SUB16 16
#define Q3_NMAX 4
#define Q6_NMAX 32
#define IQ4_XS_SCALE_OFF 32
#define Q3_SCALE_NMAX 32
#define CACHE_LINE 64
#ifndef PREFETCH_BYTES
#define PREFETCH_BYTES 3072 /* as quant_avx2.c: weights this far ahead */
#endif

/* A super-block unpacked: q[c] holds elements 32c..32c+31; sc/m per sub-block (len 16 or 32). */
struct kvec {
    __m256i q[CHUNKS];
    float d, dmin;
    int len;
    int16_t sc[QK_K / SUB16];
    int16_t m[QK_K / SUB16];
    bool nonneg; /* all quants >= 0: the unsigned operand of vpmaddubsw needs no sign trick */
};

static inline __m256i nib_lo(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(NIBBLE)); }
static inline __m256i nib_hi(__m256i v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(NIBBLE)); }
/* (v >> s) & mask per byte (the 16-bit shift's spill-over from the next byte is masked off) */
static inline __m256i bits(__m256i v, int s, int mask)
{
    return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(s)), _mm256_set1_epi8((char)mask));
}

static inline __m256i load256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* 16 bytes of nibbles -> 32 bytes [low nibbles | high nibbles] */
static inline __m256i nib_split128(const uint8_t *p)
{
    const __m128i b = _mm_loadu_si128((const __m128i *)p);
    const __m128i m = _mm_set1_epi8(NIBBLE);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m), _mm_and_si128(b, m));
}

static void k4_scale_min(int j, const uint8_t *q, int16_t *sc, int16_t *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (int16_t)((q[j + 4] & NIBBLE) | ((q[j - 4] >> 6) << 4));
        *m = (int16_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

static inline void q2_K_unpack(const void *vb, struct kvec *u)
{
    const struct block_q2_K *b = vb;
    u->d = _cvtsh_ss(b->d);
    u->dmin = _cvtsh_ss(b->dmin);
    u->len = SUB16;
    u->nonneg = true;
    for (int j = 0; j < QK_K / SUB16; j++) {
        u->sc[j] = b->scales[j] & NIBBLE;
        u->m[j] = b->scales[j] >> 4;
    }
    for (int h = 0; h < 2; h++) { /* element 128h + 32j + l: bits 2j of qs[32h + l] */
        const __m256i v = load256(b->qs + 32 * h);
        for (int j = 0; j < 4; j++)
            u->q[4 * h + j] = bits(v, 2 * j, 3);
    }
}

static inline void q3_K_unpack(const void *vb, struct kvec *u)
{
    const struct block_q3_K *b = vb;
    u->d = _cvtsh_ss(b->d);
    u->dmin = 0.0f;
    u->len = SUB16;
    u->nonneg = false;
    for (int j = 0; j < QK_K / SUB16; j++) {
        int lo = j < 8 ? b->scales[j] & NIBBLE : b->scales[j - 8] >> 4;
        u->sc[j] = (int16_t)((lo | (((b->scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - Q3_SCALE_NMAX);
        u->m[j] = 0;
    }
    const __m256i hm = load256(b->hmask);
    for (int h = 0; h < 2; h++) {
        const __m256i v = load256(b->qs + 32 * h);
        for (int j = 0; j < 4; j++) {
            const int c = 4 * h + j; /* element 32c + l: high bit is bit c of hmask[l]; clear = -4 */
            const __m256i hi = bits(hm, c, 1);
            const __m256i sub = _mm256_slli_epi16(_mm256_xor_si256(hi, _mm256_set1_epi8(1)), 2);
            u->q[c] = _mm256_sub_epi8(bits(v, 2 * j, 3), sub);
        }
    }
}

static inline void k45_scales(pi_f16 d, pi_f16 dmin, const uint8_t *scales, struct kvec *u)
{
    u->d = _cvtsh_ss(d);
    u->dmin = _cvtsh_ss(dmin);
    u->len = 32;
    u->nonneg = true;
    for (int j = 0; j < CHUNKS; j++)
        k4_scale_min(j, scales, &u->sc[j], &u->m[j]);
}

static inline void q4_K_unpack(const void *vb, struct kvec *u)
{
    const struct block_q4_K *b = vb;
    k45_scales(b->d, b->dmin, b->scales, u);
    for (int g = 0; g < 4; g++) {
        const __m256i v = load256(b->qs + 32 * g);
        u->q[2 * g] = nib_lo(v);
        u->q[2 * g + 1] = nib_hi(v);
    }
}

static inline void q5_K_unpack(const void *vb, struct kvec *u)
{
    const struct block_q5_K *b = vb;
    k45_scales(b->d, b->dmin, b->scales, u);
    const __m256i qh = load256(b->qh);
    for (int g = 0; g < 4; g++) {
        const __m256i v = load256(b->qs + 32 * g);
        u->q[2 * g] = _mm256_or_si256(nib_lo(v), _mm256_slli_epi16(bits(qh, 2 * g, 1), 4));
        u->q[2 * g + 1] = _mm256_or_si256(nib_hi(v), _mm256_slli_epi16(bits(qh, 2 * g + 1, 1), 4));
    }
}

static inline void q6_K_unpack(const void *vb, struct kvec *u)
{
    const struct block_q6_K *b = vb;
    u->d = _cvtsh_ss(b->d);
    u->dmin = 0.0f;
    u->len = SUB16;
    u->nonneg = false;
    for (int j = 0; j < QK_K / SUB16; j++) {
        u->sc[j] = b->scales[j];
        u->m[j] = 0;
    }
    const __m256i off = _mm256_set1_epi8(Q6_NMAX);
    for (int h = 0; h < 2; h++) {
        const __m256i l0 = load256(b->ql + 64 * h), l1 = load256(b->ql + 64 * h + 32);
        const __m256i qh = load256(b->qh + 32 * h);
        const __m256i lo[4] = { nib_lo(l0), nib_lo(l1), nib_hi(l0), nib_hi(l1) };
        for (int k = 0; k < 4; k++)
            u->q[4 * h + k] = _mm256_sub_epi8(_mm256_or_si256(lo[k], _mm256_slli_epi16(bits(qh, 2 * k, 3), 4)), off);
    }
}

static inline void iq4_xs_unpack(const void *vb, struct kvec *u)
{
    const struct block_iq4_xs *b = vb;
    u->d = _cvtsh_ss(b->d);
    u->dmin = 0.0f;
    u->len = 32;
    u->nonneg = false;
    for (int j = 0; j < CHUNKS; j++) {
        u->sc[j] = (int16_t)((((b->scales_l[j / 2] >> (4 * (j % 2))) & NIBBLE) | (((b->scales_h >> (2 * j)) & 3) << 4)) -
                             IQ4_XS_SCALE_OFF);
        u->m[j] = 0;
    }
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)quant_iq4nl_values));
    for (int c = 0; c < CHUNKS; c++)
        u->q[c] = _mm256_shuffle_epi8(table, nib_split128(b->qs + 16 * c));
}

static inline int32_t hsum_i32x8(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

typedef void (*kvec_unpack_fn)(const void *blk, struct kvec *u);

/* Up to two rows against one Q8_K activation: each row's operations in one order whatever nr is (so its bits), the activation's quants loaded once per super-block for both. */
static inline __attribute__((always_inline)) void kvec_rows(int64_t n, int nr, const void *const *vx, const void *vy,
                                                            float *s, size_t bsize, kvec_unpack_fn unpack)
{
    const struct block_q8_K *y = vy;
    struct kvec u;
    float sumf[2] = { 0.0f, 0.0f };
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i qy[CHUNKS];
        for (int c = 0; c < CHUNKS; c++)
            qy[c] = load256(y[i].qs + 32 * c);
        for (int r = 0; r < nr; r++) {
            const char *xb = (const char *)vx[r] + (size_t)i * bsize;
            for (size_t k = 0; k < bsize; k += CACHE_LINE)
                _mm_prefetch(xb + PREFETCH_BYTES + k, _MM_HINT_T0);
            unpack(xb, &u);
            __m256i acc = _mm256_setzero_si256();
            for (int c = 0; c < CHUNKS; c++) {
                const __m256i p16 = u.nonneg ? _mm256_maddubs_epi16(u.q[c], qy[c])
                                             : _mm256_maddubs_epi16(_mm256_sign_epi8(u.q[c], u.q[c]),
                                                                    _mm256_sign_epi8(qy[c], u.q[c]));
                const __m256i scv = u.len == 32 ? _mm256_set1_epi16(u.sc[c])
                                                : _mm256_set_m128i(_mm_set1_epi16(u.sc[2 * c + 1]),
                                                                   _mm_set1_epi16(u.sc[2 * c]));
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p16, scv));
            }
            const int32_t isum = hsum_i32x8(acc);
            int32_t msum = 0;
            const int per = u.len / SUB16;
            for (int sb = 0; sb < QK_K / u.len; sb++) {
                int32_t ys = 0;
                for (int k = 0; k < per; k++)
                    ys += y[i].bsums[sb * per + k];
                msum += u.m[sb] * ys;
            }
            sumf[r] += (u.d * y[i].d) * (float)isum - (u.dmin * y[i].d) * (float)msum;
        }
    }
    for (int r = 0; r < nr; r++)
        s[r] = sumf[r];
}

/* s = Σ_superblocks (dx dy) isum - (dmin dy) msum, with isum = Σ_sub sc Σ qx qy exact (see top):
 * the multi-row body with one row, so a row's bits are the same through either */
static inline void kvec_vec_dot(int64_t n, float *s, const void *vx, const void *vy, size_t bsize,
                                kvec_unpack_fn unpack)
{
    const void *rows[1] = { vx };
    kvec_rows(n, 1, rows, vy, s, bsize, unpack);
}

/* rows [r0, r1) two at a time (the last one alone) */
static inline __attribute__((always_inline)) void kvec_gemv(const void *W, size_t row_bytes, int64_t n,
                                                            const void *x_vd, float *y, int64_t r0, int64_t r1,
                                                            size_t bsize, kvec_unpack_fn unpack)
{
    const uint8_t *w = W;
    int64_t r = r0;
    for (; r + 1 < r1; r += 2) {
        const void *rows[2] = { w + (size_t)r * row_bytes, w + (size_t)(r + 1) * row_bytes };
        kvec_rows(n, 2, rows, x_vd, y + r, bsize, unpack);
    }
    if (r < r1) {
        const void *rows[1] = { w + (size_t)r * row_bytes };
        kvec_rows(n, 1, rows, x_vd, y + r, bsize, unpack);
    }
}

/* y[e] = fma(a d sc, q, y[e]) - a dmin m, per sub-block (the reference's operations) */
static inline void kvec_axpy(int64_t n, float *y, float a, const void *vx, size_t bsize, kvec_unpack_fn unpack)
{
    struct kvec u;
    _Alignas(32) int8_t q[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++) {
        unpack((const char *)vx + (size_t)i * bsize, &u);
        for (int c = 0; c < CHUNKS; c++)
            _mm256_store_si256((__m256i *)(q + 32 * c), u.q[c]);
        for (int sb = 0; sb < QK_K / u.len; sb++) {
            const __m256 s = _mm256_set1_ps(a * (u.d * (float)u.sc[sb]));
            const __m256 t = _mm256_set1_ps(a * (u.dmin * (float)u.m[sb]));
            float *yb = y + i * QK_K + sb * u.len;
            const int8_t *qb = q + sb * u.len;
            for (int k = 0; k < u.len; k += 8) {
                const __m256 qf = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(qb + k))));
                _mm256_storeu_ps(yb + k, _mm256_sub_ps(_mm256_fmadd_ps(s, qf, _mm256_loadu_ps(yb + k)), t));
            }
        }
    }
}

/* x[e] = (d sc) q - dmin m: a multiply and a subtraction, not fused, as the reference */
static inline void kvec_to_float(const void *src, float *dst, int64_t n, size_t bsize, kvec_unpack_fn unpack)
{
    struct kvec u;
    _Alignas(32) int8_t q[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++) {
        unpack((const char *)src + (size_t)i * bsize, &u);
        for (int c = 0; c < CHUNKS; c++)
            _mm256_store_si256((__m256i *)(q + 32 * c), u.q[c]);
        for (int sb = 0; sb < QK_K / u.len; sb++) {
            const __m256 dl = _mm256_set1_ps(u.d * (float)u.sc[sb]);
            const __m256 ml = _mm256_set1_ps(u.dmin * (float)u.m[sb]);
            for (int k = 0; k < u.len; k += 8) {
                const __m256 qf = _mm256_cvtepi32_ps(
                    _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(q + sb * u.len + k))));
                _mm256_storeu_ps(dst + i * QK_K + sb * u.len + k, _mm256_sub_ps(_mm256_mul_ps(dl, qf), ml));
            }
        }
    }
}

#define KVEC_KERNELS(T)                                                                            \
    static void T##_vec_dot_avx2(int64_t n, float *s, const void *x, const void *y)                \
    {                                                                                              \
        kvec_vec_dot(n, s, x, y, sizeof(struct block_##T), T##_unpack);                            \
    }                                                                                              \
    static void T##_axpy_avx2(int64_t n, float *y, float a, const void *x)                         \
    {                                                                                              \
        kvec_axpy(n, y, a, x, sizeof(struct block_##T), T##_unpack);                               \
    }                                                                                              \
    static void T##_to_float_avx2(const void *src, float *dst, int64_t n)                          \
    {                                                                                              \
        kvec_to_float(src, dst, n, sizeof(struct block_##T), T##_unpack);                          \
    }                                                                                              \
    /* unused for Q4_K/Q5_K/Q6_K: quant_avx2_kdot.c has their multi-row GEMV */                 \
    __attribute__((unused)) static void T##_gemv_avx2(const void *W, size_t rb, int64_t n, const void *x, float *y, \
                                                      int64_t r0, int64_t r1)                      \
    {                                                                                              \
        kvec_gemv(W, rb, n, x, y, r0, r1, sizeof(struct block_##T), T##_unpack);                   \
    }

KVEC_KERNELS(q2_K)
KVEC_KERNELS(q3_K)
KVEC_KERNELS(q4_K)
KVEC_KERNELS(q5_K)
KVEC_KERNELS(q6_K)
KVEC_KERNELS(iq4_xs)

/* ---- the newer 32-element types against a Q8_0 activation -------------------------------------
 * value = q d + m; the integer sums per block are exact, the float accumulation runs in 8 lanes
 * (as the Q4_0 kernel in quant_avx2.c), so the dot equals the reference within float rounding. */

struct v32 {
    __m256i q;
    float d, m; /* m = -0 for the types without a min (see quant_ref.c) */
    bool nonneg;
};

static inline __m256i q5_high_bits(const uint8_t qh4[4])
{
    /* bit j of qh -> 0x10 in byte j: broadcast the 32 bits, pick byte j/8 into byte j, test bit j%8 */
    uint32_t qh;
    memcpy(&qh, qh4, sizeof qh);
    const __m256i sel = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                         2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), sel);
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

static inline void q4_1_v(const void *vb, struct v32 *u)
{
    const struct block_q4_1 *b = vb;
    u->q = nib_split128(b->qs);
    u->d = _cvtsh_ss(b->d);
    u->m = _cvtsh_ss(b->m);
    u->nonneg = true;
}

static inline void q5_0_v(const void *vb, struct v32 *u)
{
    const struct block_q5_0 *b = vb;
    u->q = _mm256_sub_epi8(_mm256_or_si256(nib_split128(b->qs), q5_high_bits(b->qh)), _mm256_set1_epi8(16));
    u->d = _cvtsh_ss(b->d);
    u->m = -0.0f;
    u->nonneg = false;
}

static inline void q5_1_v(const void *vb, struct v32 *u)
{
    const struct block_q5_1 *b = vb;
    u->q = _mm256_or_si256(nib_split128(b->qs), q5_high_bits(b->qh));
    u->d = _cvtsh_ss(b->d);
    u->m = _cvtsh_ss(b->m);
    u->nonneg = true;
}

static inline void iq4_nl_v(const void *vb, struct v32 *u)
{
    const struct block_iq4_nl *b = vb;
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)quant_iq4nl_values));
    u->q = _mm256_shuffle_epi8(table, nib_split128(b->qs));
    u->d = _cvtsh_ss(b->d);
    u->m = -0.0f;
    u->nonneg = false;
}

typedef void (*v32_unpack_fn)(const void *blk, struct v32 *u);

static inline void v32_vec_dot(int64_t n, float *s, const void *vx, const void *vy, size_t bsize, v32_unpack_fn unpack)
{
    const struct block_q8_0 *y = vy;
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    __m256 acc = _mm256_setzero_ps();
    struct v32 u;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        unpack((const char *)vx + (size_t)i * bsize, &u);
        const __m256i qy = load256(y[i].qs);
        const __m256i p16 = u.nonneg ? _mm256_maddubs_epi16(u.q, qy)
                                     : _mm256_maddubs_epi16(_mm256_sign_epi8(u.q, u.q), _mm256_sign_epi8(qy, u.q));
        const float dy = _cvtsh_ss(y[i].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(u.d * dy), _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones16)), acc);
        if (u.m != 0.0f) {
            const __m256i ys = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, qy), ones16);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(u.m * dy), _mm256_cvtepi32_ps(ys), acc);
        }
    }
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    *s = _mm_cvtss_f32(h);
}

/* y = fma(a d, q, y + a m) per block, the reference's operations */
static inline void v32_axpy(int64_t n, float *y, float a, const void *vx, size_t bsize, v32_unpack_fn unpack)
{
    struct v32 u;
    _Alignas(32) int8_t q[32];
    for (int64_t i = 0; i < n / 32; i++) {
        unpack((const char *)vx + (size_t)i * bsize, &u);
        _mm256_store_si256((__m256i *)q, u.q);
        const __m256 s = _mm256_set1_ps(a * u.d), c = _mm256_set1_ps(a * u.m);
        for (int k = 0; k < 32; k += 8) {
            const __m256 qf = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(q + k))));
            float *yb = y + i * 32 + k;
            _mm256_storeu_ps(yb, _mm256_fmadd_ps(s, qf, _mm256_add_ps(_mm256_loadu_ps(yb), c)));
        }
    }
}

/* x = q d + m, a multiply then an addition (not fused) */
static inline void v32_to_float(const void *src, float *dst, int64_t n, size_t bsize, v32_unpack_fn unpack)
{
    struct v32 u;
    _Alignas(32) int8_t q[32];
    for (int64_t i = 0; i < n / 32; i++) {
        unpack((const char *)src + (size_t)i * bsize, &u);
        _mm256_store_si256((__m256i *)q, u.q);
        const __m256 d = _mm256_set1_ps(u.d), m = _mm256_set1_ps(u.m);
        for (int k = 0; k < 32; k += 8) {
            const __m256 qf = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(q + k))));
            _mm256_storeu_ps(dst + i * 32 + k, _mm256_add_ps(_mm256_mul_ps(qf, d), m));
        }
    }
}

/* Up to two rows against one activation: each row's operations are v32_vec_dot's in its order
 * (so its bits), the activation block's quants, scale and sum loaded once for both. */
static inline __attribute__((always_inline)) void v32_rows(int64_t n, int nr, const void *const *vx, const void *vy,
                                                           float *s, size_t bsize, v32_unpack_fn unpack)
{
    const struct block_q8_0 *y = vy;
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    __m256 acc[2] = { _mm256_setzero_ps(), _mm256_setzero_ps() };
    struct v32 u;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const __m256i qy = load256(y[i].qs);
        const float dy = _cvtsh_ss(y[i].d);
        for (int r = 0; r < nr; r++) {
            unpack((const char *)vx[r] + (size_t)i * bsize, &u);
            const __m256i p16 = u.nonneg ? _mm256_maddubs_epi16(u.q, qy)
                                         : _mm256_maddubs_epi16(_mm256_sign_epi8(u.q, u.q), _mm256_sign_epi8(qy, u.q));
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(u.d * dy), _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones16)),
                                     acc[r]);
            if (u.m != 0.0f) {
                const __m256i ys = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, qy), ones16);
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(u.m * dy), _mm256_cvtepi32_ps(ys), acc[r]);
            }
        }
    }
    for (int r = 0; r < nr; r++) {
        __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc[r]), _mm256_extractf128_ps(acc[r], 1));
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        h = _mm_add_ss(h, _mm_movehdup_ps(h));
        s[r] = _mm_cvtss_f32(h);
    }
}

/* rows [r0, r1) two at a time (the last one alone) */
static inline __attribute__((always_inline)) void v32_gemv(const void *W, size_t row_bytes, int64_t n, const void *x_vd,
                                                           float *y, int64_t r0, int64_t r1, size_t bsize,
                                                           v32_unpack_fn unpack)
{
    const uint8_t *w = W;
    int64_t r = r0;
    for (; r + 1 < r1; r += 2) {
        const void *rows[2] = { w + (size_t)r * row_bytes, w + (size_t)(r + 1) * row_bytes };
        v32_rows(n, 2, rows, x_vd, y + r, bsize, unpack);
    }
    if (r < r1) {
        const void *rows[1] = { w + (size_t)r * row_bytes };
        v32_rows(n, 1, rows, x_vd, y + r, bsize, unpack);
    }
}

#define V32_KERNELS(T)                                                                             \
    static void T##_vec_dot_avx2(int64_t n, float *s, const void *x, const void *y)                \
    {                                                                                              \
        v32_vec_dot(n, s, x, y, sizeof(struct block_##T), T##_v);                                  \
    }                                                                                              \
    static void T##_axpy_avx2(int64_t n, float *y, float a, const void *x)                         \
    {                                                                                              \
        v32_axpy(n, y, a, x, sizeof(struct block_##T), T##_v);                                     \
    }                                                                                              \
    static void T##_to_float_avx2(const void *src, float *dst, int64_t n)                          \
    {                                                                                              \
        v32_to_float(src, dst, n, sizeof(struct block_##T), T##_v);                                \
    }                                                                                              \
    static void T##_gemv_avx2(const void *W, size_t rb, int64_t n, const void *x, float *y, int64_t r0, int64_t r1) \
    {                                                                                              \
        v32_gemv(W, rb, n, x, y, r0, r1, sizeof(struct block_##T), T##_v);                         \
    }

V32_KERNELS(q4_1)
V32_KERNELS(q5_0)
V32_KERNELS(q5_1)
V32_KERNELS(iq4_nl)

bool quant_avx2_v32_gemv_rows(uint32_t type, const void *W, size_t row_bytes, int64_t n, const void *x_vd, float *y,
                              int64_t r0, int64_t r1)
{
    switch (type) {
    case PI_TYPE_Q4_1: q4_1_gemv_avx2(W, row_bytes, n, x_vd, y, r0, r1); return true;
    case PI_TYPE_Q5_0: q5_0_gemv_avx2(W, row_bytes, n, x_vd, y, r0, r1); return true;
    case PI_TYPE_Q5_1: q5_1_gemv_avx2(W, row_bytes, n, x_vd, y, r0, r1); return true;
    case PI_TYPE_IQ4_NL: iq4_nl_gemv_avx2(W, row_bytes, n, x_vd, y, r0, r1); return true;
    case PI_TYPE_IQ4_XS: iq4_xs_gemv_avx2(W, row_bytes, n, x_vd, y, r0, r1); return true;
    case PI_TYPE_Q2_K: q2_K_gemv_avx2(W, row_bytes, n, x_vd, y, r0, r1); return true;
    case PI_TYPE_Q3_K: q3_K_gemv_avx2(W, row_bytes, n, x_vd, y, r0, r1); return true;
    default: return false;
    }
}

void quant_avx2_kquants_install(struct pi_type_traits *traits, size_t count)
{
    if (count < PI_TYPE_COUNT)
        return;
#define SET(T, NAME)                                                                               \
    do {                                                                                           \
        traits[PI_TYPE_##T].vec_dot = NAME##_vec_dot_avx2;                                         \
        traits[PI_TYPE_##T].axpy = NAME##_axpy_avx2;                                               \
        traits[PI_TYPE_##T].to_float = NAME##_to_float_avx2;                                       \
    } while (0)
    SET(Q2_K, q2_K);
    SET(Q3_K, q3_K);
    SET(Q4_K, q4_K);
    SET(Q5_K, q5_K);
    SET(Q6_K, q6_K);
    SET(IQ4_XS, iq4_xs);
    SET(Q4_1, q4_1);
    SET(Q5_0, q5_0);
    SET(Q5_1, q5_1);
    SET(IQ4_NL, iq4_nl);
#undef SET
}
