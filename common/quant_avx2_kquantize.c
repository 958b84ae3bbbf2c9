/* quant_avx2_kquantize.c — the scale searches of the K-quant quantizers (Q2_K, Q4_K, Q5_K, Q6_K)
 * eight sub-blocks to a vector. Compiled with -mavx2 -mfma -mf16c like the other AVX2 files and only
 * installed after cpuid said yes.
 *
 * ggml's searches (make_qkx2_quants, make_qx_quants) try 16 to 21 candidate scales per sub-block of
 * 16 or 32 values, each a pass of sequential float sums: about nine tenths of a K-quant file's
 * quantization time, and a sequential sum cannot be vectorized along the sub-block without changing
 * its rounding. The sub-blocks of a super-block are independent, though: lane j of every vector here
 * is sub-block j, and does exactly the float operations of the reference on it, in the same order
 * (a multiply, then an add — no FMA; the comparisons as the reference's branches, as blends), so
 * its scales, mins and quants are the reference's bit for bit. The rest of each quantizer (the
 * sub-block weights, the 6-bit scales, the final quants, the packing) is the reference's own code
 * in quant_kquants.c, called with this search. test_quant (every level's quantizer = the
 * reference's bytes) and test_quant_types (edge cases) check it, test_quant_fixture against
 * llama.cpp's bytes. */
#include "quant_internal.h"

#include <immintrin.h>
#include <string.h>

#define LANES 8
#define LEN_MAX 32 /* the longest sub-block (Q4_K, Q5_K) */
#define GROUP_MAX_EPS 1e-15f /* as quant_kquants.c: below this maximum a group is all zero */

/* quant_nearest_int on each lane, the same integer operations */
static inline __m256i v_nearest(__m256 f)
{
    const __m256i i = _mm256_castps_si256(_mm256_add_ps(f, _mm256_set1_ps(QUANT_ROUND_MAGIC)));
    return _mm256_sub_epi32(_mm256_and_si256(i, _mm256_set1_epi32(QUANT_ROUND_MANT)),
                            _mm256_set1_epi32(QUANT_ROUND_BIAS));
}

static inline __m256i v_clamp(__m256i v, int lo, int hi)
{
    return _mm256_max_epi32(_mm256_min_epi32(v, _mm256_set1_epi32(hi)), _mm256_set1_epi32(lo));
}

static inline __m256 v_abs(__m256 v)
{
    return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
}

/* t[i * LANES + j] = x[(j * len) + i]: lane j is sub-block j */
static void transpose_in(const float *x, int len, float *t)
{
    for (int j = 0; j < LANES; j++)
        for (int i = 0; i < len; i++)
            t[i * LANES + j] = x[j * len + i];
}

/* make_qkx2_quants on 8 sub-blocks (quant_kquants.c's qkx2_quants, line for line) */
static inline __attribute__((always_inline)) void qkx2_group(int len, int nmax, const float *x, const float *w, uint8_t *L, float *scales, float *mins,
                       float rmin, float rdelta, int nstep, bool use_mad)
{
    _Alignas(32) float xt[LEN_MAX * LANES], wt[LEN_MAX * LANES];
    __m256i Lb[LEN_MAX], La[LEN_MAX];
    transpose_in(x, len, xt);
    transpose_in(w, len, wt);
#define X(i) _mm256_load_ps(xt + (i) * LANES)
#define W(i) _mm256_load_ps(wt + (i) * LANES)
    const __m256 zero = _mm256_setzero_ps();
    __m256 vmin = X(0), vmax = X(0), sum_w = W(0);
    __m256 sum_x = _mm256_mul_ps(sum_w, X(0));
    for (int i = 1; i < len; i++) {
        vmin = _mm256_min_ps(X(i), vmin); /* x < min ? x : min */
        vmax = _mm256_max_ps(X(i), vmax); /* x > max ? x : max */
        sum_w = _mm256_add_ps(sum_w, W(i));
        sum_x = _mm256_add_ps(sum_x, _mm256_mul_ps(W(i), X(i)));
    }
    vmin = _mm256_blendv_ps(vmin, zero, _mm256_cmp_ps(vmin, zero, _CMP_GT_OQ)); /* if (min > 0) min = 0 */
    const __m256 min0 = vmin;
    const __m256 flat = _mm256_cmp_ps(vmax, vmin, _CMP_EQ_OQ);
    __m256 iscale = _mm256_div_ps(_mm256_set1_ps((float)nmax), _mm256_sub_ps(vmax, vmin));
    __m256 scale = _mm256_div_ps(_mm256_set1_ps(1.0f), iscale);
    __m256 best_error = zero;
    for (int i = 0; i < len; i++) {
        Lb[i] = v_clamp(v_nearest(_mm256_mul_ps(iscale, _mm256_sub_ps(X(i), vmin))), 0, nmax);
        __m256 diff = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(scale, _mm256_cvtepi32_ps(Lb[i])), vmin), X(i));
        diff = use_mad ? v_abs(diff) : _mm256_mul_ps(diff, diff);
        best_error = _mm256_add_ps(best_error, _mm256_mul_ps(W(i), diff));
    }
    for (int is = 0; is <= nstep; is++) {
        /* the reference's scalar expression over max - min, min as the last accepted candidate left it */
        const float num = rmin + rdelta * is + nmax;
        iscale = _mm256_div_ps(_mm256_set1_ps(num), _mm256_sub_ps(vmax, vmin));
        __m256 sum_l = zero, sum_l2 = zero, sum_xl = zero;
        for (int i = 0; i < len; i++) {
            La[i] = v_clamp(v_nearest(_mm256_mul_ps(iscale, _mm256_sub_ps(X(i), vmin))), 0, nmax);
            const __m256 l = _mm256_cvtepi32_ps(La[i]);
            const __m256 wl = _mm256_mul_ps(W(i), l);
            sum_l = _mm256_add_ps(sum_l, wl);
            sum_l2 = _mm256_add_ps(sum_l2, _mm256_mul_ps(wl, l));
            sum_xl = _mm256_add_ps(sum_xl, _mm256_mul_ps(wl, X(i)));
        }
        const __m256 D = _mm256_sub_ps(_mm256_mul_ps(sum_w, sum_l2), _mm256_mul_ps(sum_l, sum_l));
        const __m256 dpos = _mm256_cmp_ps(D, zero, _CMP_GT_OQ);
        if (!_mm256_movemask_ps(dpos))
            continue;
        __m256 this_scale = _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(sum_w, sum_xl), _mm256_mul_ps(sum_x, sum_l)), D);
        __m256 this_min = _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(sum_l2, sum_x), _mm256_mul_ps(sum_l, sum_xl)), D);
        const __m256 mpos = _mm256_cmp_ps(this_min, zero, _CMP_GT_OQ);
        this_min = _mm256_blendv_ps(this_min, zero, mpos);
        this_scale = _mm256_blendv_ps(this_scale, _mm256_div_ps(sum_xl, sum_l2), mpos);
        __m256 cur_error = zero;
        for (int i = 0; i < len; i++) {
            __m256 diff = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(this_scale, _mm256_cvtepi32_ps(La[i])), this_min),
                                        X(i));
            diff = use_mad ? v_abs(diff) : _mm256_mul_ps(diff, diff);
            cur_error = _mm256_add_ps(cur_error, _mm256_mul_ps(W(i), diff));
        }
        const __m256 upd = _mm256_and_ps(dpos, _mm256_cmp_ps(cur_error, best_error, _CMP_LT_OQ));
        const __m256i updi = _mm256_castps_si256(upd);
        for (int i = 0; i < len; i++)
            Lb[i] = _mm256_blendv_epi8(Lb[i], La[i], updi);
        best_error = _mm256_blendv_ps(best_error, cur_error, upd);
        scale = _mm256_blendv_ps(scale, this_scale, upd);
        vmin = _mm256_blendv_ps(vmin, this_min, upd);
    }
#undef X
#undef W
    /* a flat sub-block (max == min) returned at once in the reference: quants 0, scale 0, its min */
    scale = _mm256_blendv_ps(scale, zero, flat);
    vmin = _mm256_blendv_ps(vmin, min0, flat);
    _mm256_storeu_ps(scales, scale);
    _mm256_storeu_ps(mins, _mm256_xor_ps(vmin, _mm256_set1_ps(-0.0f))); /* *the_min = -min */
    _Alignas(32) int32_t lt[LANES];
    const int flat_bits = _mm256_movemask_ps(flat);
    for (int i = 0; i < len; i++) {
        _mm256_store_si256((__m256i *)lt, Lb[i]);
        for (int j = 0; j < LANES; j++)
            L[j * len + i] = (uint8_t)(flat_bits >> j & 1 ? 0 : lt[j]);
    }
}

static void qkx2_search_avx2(int nsub, int len, int nmax, const float *x, const float *w, uint8_t *L, float *scales,
                             float *mins, float rmin, float rdelta, int nstep, bool use_mad)
{
    /* the lengths as constants, so that the compiler unrolls the passes (Q2_K 16, Q4_K/Q5_K 32) */
    for (int g = 0; g < nsub; g += LANES) {
        if (len == 16)
            qkx2_group(16, nmax, x + g * len, w + g * len, L + g * len, scales + g, mins + g, rmin, rdelta, nstep,
                       use_mad);
        else
            qkx2_group(LEN_MAX, nmax, x + g * len, w + g * len, L + g * len, scales + g, mins + g, rmin, rdelta,
                       nstep, use_mad);
    }
}

/* make_qx_quants (rmse_type 1) on 8 sub-blocks (quant_kquants.c's qx_quants, line for line) */
static inline __attribute__((always_inline)) void qx_group(int len, int nmax, const float *x, int8_t *L, float *scales)
{
    _Alignas(32) float xt[LEN_MAX * LANES];
    __m256i Lb[LEN_MAX], La[LEN_MAX];
    transpose_in(x, len, xt);
#define X(i) _mm256_load_ps(xt + (i) * LANES)
    const __m256 zero = _mm256_setzero_ps();
    __m256 vmax = zero, amax = zero;
    for (int i = 0; i < len; i++) {
        const __m256 ax = v_abs(X(i));
        const __m256 gt = _mm256_cmp_ps(ax, amax, _CMP_GT_OQ);
        amax = _mm256_blendv_ps(amax, ax, gt);
        vmax = _mm256_blendv_ps(vmax, X(i), gt);
    }
    const __m256 tiny = _mm256_cmp_ps(amax, _mm256_set1_ps(GROUP_MAX_EPS), _CMP_LT_OQ);
    __m256 iscale = _mm256_div_ps(_mm256_set1_ps((float)-nmax), vmax);
    __m256 sumlx = zero, suml2 = zero;
    for (int i = 0; i < len; i++) {
        Lb[i] = v_clamp(v_nearest(_mm256_mul_ps(iscale, X(i))), -nmax, nmax - 1);
        const __m256 l = _mm256_cvtepi32_ps(Lb[i]);
        const __m256 w = _mm256_mul_ps(X(i), X(i));
        sumlx = _mm256_add_ps(sumlx, _mm256_mul_ps(_mm256_mul_ps(w, X(i)), l));
        suml2 = _mm256_add_ps(suml2, _mm256_mul_ps(_mm256_mul_ps(w, l), l));
    }
    /* suml2 != 0 ? sumlx / suml2 : 0 (unordered counts as != , as in C) */
    __m256 scale = _mm256_blendv_ps(zero, _mm256_div_ps(sumlx, suml2), _mm256_cmp_ps(suml2, zero, _CMP_NEQ_UQ));
    __m256 best = _mm256_mul_ps(scale, sumlx);
    for (int is = -9; is <= 9; is++) {
        if (is == 0)
            continue;
        const float num = -(nmax + 0.1f * is); /* the reference's scalar expression */
        iscale = _mm256_div_ps(_mm256_set1_ps(num), vmax);
        sumlx = suml2 = zero;
        for (int i = 0; i < len; i++) {
            La[i] = v_clamp(v_nearest(_mm256_mul_ps(iscale, X(i))), -nmax, nmax - 1);
            const __m256 l = _mm256_cvtepi32_ps(La[i]);
            const __m256 w = _mm256_mul_ps(X(i), X(i));
            sumlx = _mm256_add_ps(sumlx, _mm256_mul_ps(_mm256_mul_ps(w, X(i)), l));
            suml2 = _mm256_add_ps(suml2, _mm256_mul_ps(_mm256_mul_ps(w, l), l));
        }
        const __m256 upd = _mm256_and_ps(_mm256_cmp_ps(suml2, zero, _CMP_GT_OQ),
                                         _mm256_cmp_ps(_mm256_mul_ps(sumlx, sumlx), _mm256_mul_ps(best, suml2),
                                                       _CMP_GT_OQ));
        if (!_mm256_movemask_ps(upd))
            continue;
        const __m256i updi = _mm256_castps_si256(upd);
        for (int i = 0; i < len; i++)
            Lb[i] = _mm256_blendv_epi8(Lb[i], La[i], updi);
        scale = _mm256_blendv_ps(scale, _mm256_div_ps(sumlx, suml2), upd);
        best = _mm256_blendv_ps(best, _mm256_mul_ps(scale, sumlx), upd);
    }
#undef X
    /* an all-zero group returned at once in the reference: L = 0 (no offset), scale 0 */
    scale = _mm256_blendv_ps(scale, zero, tiny);
    _mm256_storeu_ps(scales, scale);
    _Alignas(32) int32_t lt[LANES];
    const int tiny_bits = _mm256_movemask_ps(tiny);
    for (int i = 0; i < len; i++) {
        _mm256_store_si256((__m256i *)lt, Lb[i]);
        for (int j = 0; j < LANES; j++)
            L[j * len + i] = (int8_t)(tiny_bits >> j & 1 ? 0 : lt[j] + nmax);
    }
}

static void qx_search_avx2(int nsub, int len, int nmax, const float *x, int8_t *L, float *scales)
{
    for (int g = 0; g < nsub; g += LANES) {
        if (len == 16)
            qx_group(16, nmax, x + g * len, L + g * len, scales + g);
        else
            qx_group(LEN_MAX, nmax, x + g * len, L + g * len, scales + g);
    }
}

static const struct quant_ksearch ksearch_avx2 = { qkx2_search_avx2, qx_search_avx2 };

static void q2_K_from_float_avx2(const float *x, void *dst, int64_t n)
{
    quant_q2_K_quantize(&ksearch_avx2, x, dst, n);
}

static void q4_K_from_float_avx2(const float *x, void *dst, int64_t n)
{
    quant_q4_K_quantize(&ksearch_avx2, x, dst, n);
}

static void q5_K_from_float_avx2(const float *x, void *dst, int64_t n)
{
    quant_q5_K_quantize(&ksearch_avx2, x, dst, n);
}

static void q6_K_from_float_avx2(const float *x, void *dst, int64_t n)
{
    quant_q6_K_quantize(&ksearch_avx2, x, dst, n);
}

void quant_avx2_kquantize_install(struct pi_type_traits *traits, size_t count)
{
    if (count < PI_TYPE_COUNT)
        return;
    traits[PI_TYPE_Q2_K].from_float = q2_K_from_float_avx2;
    traits[PI_TYPE_Q4_K].from_float = q4_K_from_float_avx2;
    traits[PI_TYPE_Q5_K].from_float = q5_K_from_float_avx2;
    traits[PI_TYPE_Q6_K].from_float = q6_K_from_float_avx2;
}
