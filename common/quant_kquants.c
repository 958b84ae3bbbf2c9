/* quant_kquants.c — the 256-element super-block types: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, and
 * Q8_K, the activation type their dot products take. Scalar reference kernels and their rows of the
 * reference traits table.
 *
 * The quantizers reproduce ggml's reference quantizers (quantize_row_*_ref, the ones llama-quantize
 * runs without an importance matrix) operation for operation — the same scale searches, the same
 * float expressions in the same order, the same rounding — so their bytes are llama.cpp's; the
 * fixture test checks it. Dequantize, dot and AXPY share one body over a per-type unpack of a
 * super-block into integer quants and integer sub-block scales/mins:
 *     value[e] = (d * sc[e / len]) * q[e] - dmin * m[e / len]
 * (for the types without mins, dmin = m = 0 and the subtraction of +0 changes no bit). */
#include "quant_internal.h"

#include <math.h>
#include <string.h>

#define NIBBLE 0x0f
#define GROUP_MAX_EPS 1e-15f /* below this maximum a group is all zero (ggml's threshold) */
#define SUB16 16             /* elements per sub-block of Q2_K, Q3_K, Q6_K (and per Q8_K sum) */
#define SUB32 32             /* elements per sub-block of Q4_K, Q5_K, IQ4_XS */
#define Q2_MAX 3             /* 2-bit quants 0..3 */
#define Q3_NMAX 4            /* 3-bit quants -4..3 */
#define Q4_MAX 15
#define Q5_MAX 31
#define Q6_NMAX 32           /* 6-bit quants -32..31 */
#define SCALE4_MAX 15.0f     /* Q2_K: 4-bit sub-scales and sub-mins */
#define SCALE6_MAX 63        /* Q4_K/Q5_K: 6-bit sub-scales and sub-mins */
#define Q3_SCALE_NMAX 32     /* Q3_K: 6-bit signed sub-scales -32..31, stored + 32 */
#define Q6_SCALE_DIV (-128.0f) /* Q6_K: the largest sub-scale becomes -128 (int8 scales) */
#define Q6_SCALE_MAX 127
#define Q8_K_MAX 127.0f      /* ggml uses -127/max (not -128) for Q8_K */
#define IQ4_XS_SCALE_OFF 32

/* ---- scale searches (ggml's make_qx_quants, make_q3_quants, make_qkx2_quants) ---------------- */

static int clampi(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* Symmetric quants l in [-nmax, nmax) with weights x^2: start from the scale that puts the signed
 * maximum on -nmax, then try 18 nearby scales ±0.1..0.9 and keep the one with the best weighted
 * least-squares fit. L gets l + nmax; returns the scale. (make_qx_quants, rmse_type 1, no qw) */
static float qx_quants(int n, int nmax, const float *x, int8_t *L)
{
    float max = 0.0f, amax = 0.0f;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = -nmax / max;
    float sumlx = 0.0f, suml2 = 0.0f;
    for (int i = 0; i < n; i++) {
        int l = clampi(quant_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0)
            continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0.0f;
        for (int i = 0; i < n; i++) {
            int l = clampi(quant_nearest_int(iscale * x[i]), -nmax, nmax - 1);
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + clampi(quant_nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Symmetric quants for Q3_K: the first guess as above, then up to 5 passes that move single quants
 * where that improves the weighted fit (weights x^2). L gets l + nmax; an all-zero group gets L = 0
 * (no offset: what ggml leaves there). (make_q3_quants, do_rmse) */
static float q3_quants(int n, int nmax, const float *x, int8_t *L)
{
    float max = 0.0f, amax = 0.0f;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    const float iscale = -nmax / max;
    float sumlx = 0.0f, suml2 = 0.0f;
    for (int i = 0; i < n; i++) {
        int l = clampi(quant_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                int new_l = clampi(quant_nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed)
            break;
    }
    for (int i = 0; i < n; i++)
        L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Asymmetric quants l in [0, nmax] for x = scale * l - min (min >= 0 returned in *the_min): start
 * from (max - min)/nmax, then try nstep+1 scales (rmin + rdelta*is + nmax)/(max - min), each with
 * its weighted least-squares scale and min, keeping the smallest weighted error (squared, or
 * absolute with use_mad). (make_qkx2_quants) */
static float qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                         uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad)
{
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min)
            min = x[i];
        if (x[i] > max)
            max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0)
        min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.0f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        int l = quant_nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)clampi(l, 0, nmax);
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += weights[i] * diff;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(quant_nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* The reference searches over the nsub sub-blocks of one super-block, one after the other. */
static void qkx2_search_ref(int nsub, int len, int nmax, const float *x, const float *w, uint8_t *L, float *scales,
                            float *mins, float rmin, float rdelta, int nstep, bool use_mad)
{
    uint8_t Laux[SUB32];
    for (int j = 0; j < nsub; j++)
        scales[j] = qkx2_quants(len, nmax, x + len * j, w + len * j, L + len * j, &mins[j], Laux, rmin, rdelta, nstep,
                                use_mad);
}

static void qx_search_ref(int nsub, int len, int nmax, const float *x, int8_t *L, float *scales)
{
    for (int j = 0; j < nsub; j++)
        scales[j] = qx_quants(len, nmax, x + len * j, L + len * j);
}

const struct quant_ksearch quant_ksearch_ref = { qkx2_search_ref, qx_search_ref };

/* ---- quantizers ------------------------------------------------------------------------------- */

/* 2-bit values, byte l of each 32-byte group: elements l, l+32, l+64, l+96 of the 128 (Q2_K, Q3_K) */
static void pack_2bit(const uint8_t *L, uint8_t *qs)
{
    for (int j = 0; j < QK_K; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

void quant_q2_K_quantize(const struct quant_ksearch *srch, const float *x, void *dst, int64_t n)
{
    struct block_q2_K *y = dst;
    uint8_t L[QK_K];
    float weights[QK_K], mins[QK_K / SUB16], scales[QK_K / SUB16];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max_scale = 0, max_min = 0;
        for (int l = 0; l < QK_K; l++)
            weights[l] = fabsf(x[l]);
        srch->qkx2(QK_K / SUB16, SUB16, Q2_MAX, x, weights, L, scales, mins, -0.5f, 0.1f, 15, true);
        for (int j = 0; j < QK_K / SUB16; j++) {
            if (scales[j] > max_scale)
                max_scale = scales[j];
            if (mins[j] > max_min)
                max_min = mins[j];
        }
        if (max_scale > 0) {
            float iscale = SCALE4_MAX / max_scale;
            for (int j = 0; j < QK_K / SUB16; j++)
                y[i].scales[j] = (uint8_t)quant_nearest_int(iscale * scales[j]);
            y[i].d = pi_f32_to_f16(max_scale / SCALE4_MAX);
        } else {
            memset(y[i].scales, 0, sizeof y[i].scales);
            y[i].d = pi_f32_to_f16(0.0f);
        }
        if (max_min > 0) {
            float iscale = SCALE4_MAX / max_min;
            for (int j = 0; j < QK_K / SUB16; j++)
                y[i].scales[j] |= (uint8_t)(quant_nearest_int(iscale * mins[j]) << 4);
            y[i].dmin = pi_f32_to_f16(max_min / SCALE4_MAX);
        } else {
            y[i].dmin = pi_f32_to_f16(0.0f);
        }
        for (int j = 0; j < QK_K / SUB16; j++) {
            const float d = pi_f16_to_f32(y[i].d) * (y[i].scales[j] & NIBBLE);
            if (!d)
                continue;
            const float dm = pi_f16_to_f32(y[i].dmin) * (y[i].scales[j] >> 4);
            for (int ii = 0; ii < SUB16; ii++)
                L[SUB16 * j + ii] = (uint8_t)clampi(quant_nearest_int((x[SUB16 * j + ii] + dm) / d), 0, Q2_MAX);
        }
        pack_2bit(L, y[i].qs);
    }
}

/* Q3_K's 16 six-bit scales in 12 bytes: low nibbles of scales 0..7 in bytes 0..7, of 8..15 in
 * their high nibbles; the top 2 bits of scale j in bits 2*(j/4) of byte 8 + j%4 */
static int q3_K_scale(const uint8_t *s, int j)
{
    int lo = j < 8 ? s[j] & NIBBLE : s[j - 8] >> 4;
    return (lo | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - Q3_SCALE_NMAX;
}

static void q3_K_from_float_ref(const float *x, void *dst, int64_t n)
{
    struct block_q3_K *y = dst;
    int8_t L[QK_K];
    float scales[QK_K / SUB16];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < QK_K / SUB16; j++) {
            scales[j] = q3_quants(SUB16, Q3_NMAX, x + SUB16 * j, L + SUB16 * j);
            float scale = fabsf(scales[j]);
            if (scale > amax) {
                amax = scale;
                max_scale = scales[j];
            }
        }
        memset(y[i].scales, 0, sizeof y[i].scales);
        if (max_scale) {
            float iscale = -(float)Q3_SCALE_NMAX / max_scale;
            for (int j = 0; j < QK_K / SUB16; j++) {
                int8_t l = (int8_t)quant_nearest_int(iscale * scales[j]);
                l = (int8_t)(clampi(l, -Q3_SCALE_NMAX, Q3_SCALE_NMAX - 1) + Q3_SCALE_NMAX);
                if (j < 8)
                    y[i].scales[j] = (uint8_t)(l & NIBBLE);
                else
                    y[i].scales[j - 8] |= (uint8_t)((l & NIBBLE) << 4);
                l = (int8_t)(l >> 4);
                y[i].scales[j % 4 + 8] |= (uint8_t)(l << (2 * (j / 4)));
            }
            y[i].d = pi_f32_to_f16(1 / iscale);
        } else {
            y[i].d = pi_f32_to_f16(0.0f);
        }
        for (int j = 0; j < QK_K / SUB16; j++) {
            float d = pi_f16_to_f32(y[i].d) * q3_K_scale(y[i].scales, j);
            if (!d)
                continue;
            for (int ii = 0; ii < SUB16; ii++)
                L[SUB16 * j + ii] = (int8_t)(clampi(quant_nearest_int(x[SUB16 * j + ii] / d), -Q3_NMAX, Q3_NMAX - 1) + Q3_NMAX);
        }
        /* the high bit of element j goes to bit j/32 of hmask[j%32] */
        memset(y[i].hmask, 0, sizeof y[i].hmask);
        uint8_t Lu[QK_K];
        for (int j = 0; j < QK_K; j++) {
            int l = L[j];
            if (l > 3) {
                y[i].hmask[j % (QK_K / 8)] |= (uint8_t)(1u << (j / (QK_K / 8)));
                l -= 4;
            }
            Lu[j] = (uint8_t)l;
        }
        pack_2bit(Lu, y[i].qs);
    }
}

/* Q4_K/Q5_K's 8 six-bit scales and mins in 12 bytes (ggml's get_scale_min_k4): j < 4 in the low 6
 * bits of bytes j (scale) and j+4 (min); j >= 4 low nibbles in byte j+4, top 2 bits in the top bits
 * of bytes j-4 (scale) and j (min) */
static void k4_scale_min(int j, const uint8_t *q, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & NIBBLE) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Q4_K/Q5_K common part: per sub-block of 32 the asymmetric scale search with weights
 * av_x + |x|, then 6-bit sub-scales/mins, then the quants again against the rounded scales. */
static void k45_quantize(const struct quant_ksearch *srch, const float *x, int qmax, float rmin, int nstep,
                         pi_f16 *dh, pi_f16 *dminh, uint8_t *scales, uint8_t *L)
{
    float weights[QK_K], mins[QK_K / SUB32], sc[QK_K / SUB32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QK_K / SUB32; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < SUB32; l++)
            sum_x2 += x[SUB32 * j + l] * x[SUB32 * j + l];
        float av_x = sqrtf(sum_x2 / SUB32);
        for (int l = 0; l < SUB32; l++)
            weights[SUB32 * j + l] = av_x + fabsf(x[SUB32 * j + l]);
    }
    srch->qkx2(QK_K / SUB32, SUB32, qmax, x, weights, L, sc, mins, rmin, 0.1f, nstep, false);
    for (int j = 0; j < QK_K / SUB32; j++) {
        if (sc[j] > max_scale)
            max_scale = sc[j];
        if (mins[j] > max_min)
            max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? SCALE6_MAX / max_scale : 0.0f;
    float inv_min = max_min > 0 ? SCALE6_MAX / max_min : 0.0f;
    for (int j = 0; j < QK_K / SUB32; j++) {
        /* the uint8 conversion then the min: as ggml (a negative scale would wrap, then clamp) */
        uint8_t ls = (uint8_t)quant_nearest_int(inv_scale * sc[j]);
        uint8_t lm = (uint8_t)quant_nearest_int(inv_min * mins[j]);
        ls = ls < SCALE6_MAX ? ls : SCALE6_MAX;
        lm = lm < SCALE6_MAX ? lm : SCALE6_MAX;
        if (j < 4) {
            scales[j] = ls;
            scales[j + 4] = lm;
        } else {
            scales[j + 4] = (uint8_t)((ls & NIBBLE) | ((lm & NIBBLE) << 4));
            scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
            scales[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *dh = pi_f32_to_f16(max_scale / SCALE6_MAX);
    *dminh = pi_f32_to_f16(max_min / SCALE6_MAX);
    for (int j = 0; j < QK_K / SUB32; j++) {
        int s, m;
        k4_scale_min(j, scales, &s, &m);
        const float d = pi_f16_to_f32(*dh) * s;
        if (!d)
            continue;
        const float dm = pi_f16_to_f32(*dminh) * m;
        for (int ii = 0; ii < SUB32; ii++)
            L[SUB32 * j + ii] = (uint8_t)clampi(quant_nearest_int((x[SUB32 * j + ii] + dm) / d), 0, qmax);
    }
}

void quant_q4_K_quantize(const struct quant_ksearch *srch, const float *x, void *dst, int64_t n)
{
    struct block_q4_K *y = dst;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        k45_quantize(srch, x, Q4_MAX, -1.0f, 20, &y[i].d, &y[i].dmin, y[i].scales, L);
        /* byte l of each 32: elements l (low nibble) and l + 32 (high) of the 64 */
        uint8_t *q = y[i].qs;
        for (int j = 0; j < QK_K; j += 64, q += 32)
            for (int l = 0; l < 32; l++)
                q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
    }
}

void quant_q5_K_quantize(const struct quant_ksearch *srch, const float *x, void *dst, int64_t n)
{
    struct block_q5_K *y = dst;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        k45_quantize(srch, x, Q5_MAX, -0.5f, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
        memset(y[i].qh, 0, sizeof y[i].qh);
        uint8_t *ql = y[i].qs;
        uint8_t m1 = 1, m2 = 2;
        for (int g = 0; g < QK_K; g += 64, ql += 32) {
            for (int j = 0; j < 32; j++) {
                int l1 = L[g + j], l2 = L[g + j + 32];
                if (l1 > Q4_MAX) {
                    l1 -= 16;
                    y[i].qh[j] |= m1;
                }
                if (l2 > Q4_MAX) {
                    l2 -= 16;
                    y[i].qh[j] |= m2;
                }
                ql[j] = (uint8_t)(l1 | (l2 << 4));
            }
            m1 = (uint8_t)(m1 << 2);
            m2 = (uint8_t)(m2 << 2);
        }
    }
}

void quant_q6_K_quantize(const struct quant_ksearch *srch, const float *x, void *dst, int64_t n)
{
    struct block_q6_K *y = dst;
    int8_t L[QK_K];
    float scales[QK_K / SUB16];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        srch->qx(QK_K / SUB16, SUB16, Q6_NMAX, x, L, scales);
        for (int ib = 0; ib < QK_K / SUB16; ib++) {
            const float scale = scales[ib];
            const float abs_scale = fabsf(scale);
            if (abs_scale > max_abs_scale) {
                max_abs_scale = abs_scale;
                max_scale = scale;
            }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        float iscale = Q6_SCALE_DIV / max_scale;
        y[i].d = pi_f32_to_f16(1 / iscale);
        for (int ib = 0; ib < QK_K / SUB16; ib++) {
            int l = quant_nearest_int(iscale * scales[ib]);
            y[i].scales[ib] = (int8_t)(l < Q6_SCALE_MAX ? l : Q6_SCALE_MAX);
        }
        for (int j = 0; j < QK_K / SUB16; j++) {
            float d = pi_f16_to_f32(y[i].d) * y[i].scales[j];
            if (!d)
                continue;
            for (int ii = 0; ii < SUB16; ii++)
                L[SUB16 * j + ii] = (int8_t)(clampi(quant_nearest_int(x[SUB16 * j + ii] / d), -Q6_NMAX, Q6_NMAX - 1) + Q6_NMAX);
        }
        uint8_t *ql = y[i].ql, *qh = y[i].qh;
        for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; l++) {
                const int q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
                ql[l] = (uint8_t)((q1 & NIBBLE) | ((q3 & NIBBLE) << 4));
                ql[l + 32] = (uint8_t)((q2 & NIBBLE) | ((q4 & NIBBLE) << 4));
                qh[l] = (uint8_t)((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
            }
        }
    }
}

static void q2_K_from_float_ref(const float *x, void *dst, int64_t n)
{
    quant_q2_K_quantize(&quant_ksearch_ref, x, dst, n);
}

static void q4_K_from_float_ref(const float *x, void *dst, int64_t n)
{
    quant_q4_K_quantize(&quant_ksearch_ref, x, dst, n);
}

static void q5_K_from_float_ref(const float *x, void *dst, int64_t n)
{
    quant_q5_K_quantize(&quant_ksearch_ref, x, dst, n);
}

static void q6_K_from_float_ref(const float *x, void *dst, int64_t n)
{
    quant_q6_K_quantize(&quant_ksearch_ref, x, dst, n);
}

static void iq4_xs_from_float_ref(const float *x, void *dst, int64_t n)
{
    struct block_iq4_xs *y = dst;
    for (int64_t i = 0; i < n / QK_K; i++)
        quant_iq4_quantize(QK_K, x + i * QK_K, &y[i].d, y[i].qs, &y[i].scales_h, y[i].scales_l);
}

/* d = max/-127 (the signed value of largest magnitude), q = min(127, round(x/d)), the sums of every
 * 16 quants: ggml's quantize_row_q8_K_ref (an all-zero block: d = 0, quants and sums 0) */
static void q8_K_from_float_ref(const float *x, void *dst, int64_t n)
{
    struct block_q8_K *y = dst;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max = 0, amax = 0;
        for (int j = 0; j < QK_K; j++) {
            float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -Q8_K_MAX / max;
        for (int j = 0; j < QK_K; j++) {
            int v = quant_nearest_int(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < QK_K / SUB16; j++) {
            int sum = 0;
            for (int ii = 0; ii < SUB16; ii++)
                sum += y[i].qs[j * SUB16 + ii];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

static void q8_K_to_float_ref(const void *src, float *dst, int64_t n)
{
    const struct block_q8_K *x = src;
    for (int64_t i = 0; i < n / QK_K; i++)
        for (int j = 0; j < QK_K; j++)
            dst[i * QK_K + j] = x[i].d * x[i].qs[j];
}

/* ---- unpack: a super-block as integers --------------------------------------------------------- */

struct kblk {
    float d, dmin;
    int len;         /* elements per sub-block: 16 or 32 */
    int sc[QK_K / SUB16];
    int m[QK_K / SUB16];
    int8_t q[QK_K];
};

typedef void (*kblk_unpack_fn)(const void *blk, struct kblk *u);

/* 2-bit field of element e (Q2_K/Q3_K layout, see pack_2bit) */
static int q2_field(const uint8_t *qs, int e)
{
    return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

static void q2_K_unpack(const void *vb, struct kblk *u)
{
    const struct block_q2_K *b = vb;
    u->d = pi_f16_to_f32(b->d);
    u->dmin = pi_f16_to_f32(b->dmin);
    u->len = SUB16;
    for (int j = 0; j < QK_K / SUB16; j++) {
        u->sc[j] = b->scales[j] & NIBBLE;
        u->m[j] = b->scales[j] >> 4;
    }
    for (int e = 0; e < QK_K; e++)
        u->q[e] = (int8_t)q2_field(b->qs, e);
}

static void q3_K_unpack(const void *vb, struct kblk *u)
{
    const struct block_q3_K *b = vb;
    u->d = pi_f16_to_f32(b->d);
    u->dmin = 0.0f;
    u->len = SUB16;
    for (int j = 0; j < QK_K / SUB16; j++) {
        u->sc[j] = q3_K_scale(b->scales, j);
        u->m[j] = 0;
    }
    for (int e = 0; e < QK_K; e++) {
        int hi = (b->hmask[e % 32] >> (e / 32)) & 1;
        u->q[e] = (int8_t)(q2_field(b->qs, e) - (hi ? 0 : Q3_NMAX));
    }
}

static void k45_unpack_scales(pi_f16 d, pi_f16 dmin, const uint8_t *scales, struct kblk *u)
{
    u->d = pi_f16_to_f32(d);
    u->dmin = pi_f16_to_f32(dmin);
    u->len = SUB32;
    for (int j = 0; j < QK_K / SUB32; j++)
        k4_scale_min(j, scales, &u->sc[j], &u->m[j]);
}

static void q4_K_unpack(const void *vb, struct kblk *u)
{
    const struct block_q4_K *b = vb;
    k45_unpack_scales(b->d, b->dmin, b->scales, u);
    for (int e = 0; e < QK_K; e++) {
        uint8_t byte = b->qs[32 * (e / 64) + e % 32];
        u->q[e] = (int8_t)((e % 64) < 32 ? byte & NIBBLE : byte >> 4);
    }
}

static void q5_K_unpack(const void *vb, struct kblk *u)
{
    const struct block_q5_K *b = vb;
    k45_unpack_scales(b->d, b->dmin, b->scales, u);
    for (int e = 0; e < QK_K; e++) {
        uint8_t byte = b->qs[32 * (e / 64) + e % 32];
        int lo = (e % 64) < 32 ? byte & NIBBLE : byte >> 4;
        int hi = (b->qh[e % 32] >> (e / 32)) & 1; /* bit 2g for the first 32 of group g, 2g+1 next */
        u->q[e] = (int8_t)(lo | (hi << 4));
    }
}

static void q6_K_unpack(const void *vb, struct kblk *u)
{
    const struct block_q6_K *b = vb;
    u->d = pi_f16_to_f32(b->d);
    u->dmin = 0.0f;
    u->len = SUB16;
    for (int j = 0; j < QK_K / SUB16; j++) {
        u->sc[j] = b->scales[j];
        u->m[j] = 0;
    }
    for (int e = 0; e < QK_K; e++) {
        const int h = e / 128, r = e % 128, l = r % 32, quarter = r / 32;
        const uint8_t lb = b->ql[64 * h + l + 32 * (quarter & 1)];
        const int lo = quarter < 2 ? lb & NIBBLE : lb >> 4;
        const int hi = (b->qh[32 * h + l] >> (2 * quarter)) & 3;
        u->q[e] = (int8_t)((lo | (hi << 4)) - Q6_NMAX);
    }
}

static void iq4_xs_unpack(const void *vb, struct kblk *u)
{
    const struct block_iq4_xs *b = vb;
    u->d = pi_f16_to_f32(b->d);
    u->dmin = 0.0f;
    u->len = SUB32;
    for (int j = 0; j < QK_K / SUB32; j++) {
        u->sc[j] = (((b->scales_l[j / 2] >> (4 * (j % 2))) & NIBBLE) | (((b->scales_h >> (2 * j)) & 3) << 4)) -
                   IQ4_XS_SCALE_OFF;
        u->m[j] = 0;
    }
    for (int e = 0; e < QK_K; e++) {
        uint8_t byte = b->qs[16 * (e / 32) + e % 16];
        u->q[e] = quant_iq4nl_values[(e % 32) < 16 ? byte & NIBBLE : byte >> 4];
    }
}

/* ---- the shared bodies ---------------------------------------------------------------------------- */

/* x[e] = (d sc) q - dmin m, per sub-block */
static inline void kblk_to_float(const void *src, float *dst, int64_t n, size_t bsize, kblk_unpack_fn unpack)
{
    struct kblk u;
    for (int64_t i = 0; i < n / QK_K; i++) {
        unpack((const char *)src + (size_t)i * bsize, &u);
        for (int s = 0; s < QK_K / u.len; s++) {
            const float dl = u.d * (float)u.sc[s], ml = u.dmin * (float)u.m[s];
            for (int k = 0; k < u.len; k++)
                dst[i * QK_K + s * u.len + k] = dl * (float)u.q[s * u.len + k] - ml;
        }
    }
}

/* s = Σ_superblocks (dx dy) Σ_sub sc Σ qx qy - (dmin dy) Σ_sub m Σ qy, y a q8_K row; the sums
 * within a super-block are exact integers (at most 2^28), the AVX2 kernels compute the same ones */
static inline void kblk_vec_dot(int64_t n, float *s, const void *vx, const void *vy, size_t bsize,
                                kblk_unpack_fn unpack)
{
    const struct block_q8_K *y = vy;
    struct kblk u;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        unpack((const char *)vx + (size_t)i * bsize, &u);
        int32_t isum = 0, msum = 0;
        for (int sb = 0; sb < QK_K / u.len; sb++) {
            int32_t p = 0;
            for (int k = 0; k < u.len; k++)
                p += u.q[sb * u.len + k] * y[i].qs[sb * u.len + k];
            isum += u.sc[sb] * p;
            int32_t ysum = 0;
            for (int k = 0; k < u.len / SUB16; k++)
                ysum += y[i].bsums[sb * (u.len / SUB16) + k];
            msum += u.m[sb] * ysum;
        }
        sumf += (u.d * y[i].d) * (float)isum - (u.dmin * y[i].d) * (float)msum;
    }
    *s = sumf;
}

/* s = the dot over elements [i0, i1) (multiples of the sub-block length): the sub-blocks inside
 * the range only, with kblk_vec_dot's operations (over [0, n) it is kblk_vec_dot bit for bit) */
static inline void kblk_vec_dot_sub(int64_t i0, int64_t i1, float *s, const void *vx, const void *vy, size_t bsize,
                                    kblk_unpack_fn unpack)
{
    const struct block_q8_K *y = vy;
    struct kblk u;
    float sumf = 0.0f;
    for (int64_t i = i0 / QK_K; i < (i1 + QK_K - 1) / QK_K; i++) {
        unpack((const char *)vx + (size_t)i * bsize, &u);
        int32_t isum = 0, msum = 0;
        for (int sb = 0; sb < QK_K / u.len; sb++) {
            const int64_t e = i * QK_K + (int64_t)sb * u.len;
            if (e < i0 || e >= i1)
                continue;
            int32_t p = 0;
            for (int k = 0; k < u.len; k++)
                p += u.q[sb * u.len + k] * y[i].qs[sb * u.len + k];
            isum += u.sc[sb] * p;
            int32_t ysum = 0;
            for (int k = 0; k < u.len / SUB16; k++)
                ysum += y[i].bsums[sb * (u.len / SUB16) + k];
            msum += u.m[sb] * ysum;
        }
        sumf += (u.d * y[i].d) * (float)isum - (u.dmin * y[i].d) * (float)msum;
    }
    *s = sumf;
}

/* y[e] += a ((d sc) q - dmin m) as y = fma(a d sc, q, y) - a dmin m, per sub-block */
static inline void kblk_axpy(int64_t n, float *y, float a, const void *vx, size_t bsize, kblk_unpack_fn unpack)
{
    struct kblk u;
    for (int64_t i = 0; i < n / QK_K; i++) {
        unpack((const char *)vx + (size_t)i * bsize, &u);
        for (int sb = 0; sb < QK_K / u.len; sb++) {
            const float s = a * (u.d * (float)u.sc[sb]), t = a * (u.dmin * (float)u.m[sb]);
            float *yb = y + i * QK_K + sb * u.len;
            for (int k = 0; k < u.len; k++)
                yb[k] = fmaf(s, (float)u.q[sb * u.len + k], yb[k]) - t;
        }
    }
}

#define KBLK_KERNELS(T)                                                                            \
    static void T##_to_float_ref(const void *src, float *dst, int64_t n)                           \
    {                                                                                              \
        kblk_to_float(src, dst, n, sizeof(struct block_##T), T##_unpack);                          \
    }                                                                                              \
    static void T##_vec_dot_ref(int64_t n, float *s, const void *x, const void *y)                 \
    {                                                                                              \
        kblk_vec_dot(n, s, x, y, sizeof(struct block_##T), T##_unpack);                            \
    }                                                                                              \
    static void T##_axpy_ref(int64_t n, float *y, float a, const void *x)                          \
    {                                                                                              \
        kblk_axpy(n, y, a, x, sizeof(struct block_##T), T##_unpack);                               \
    }                                                                                              \
    static void T##_vec_dot_sub_ref(int64_t i0, int64_t i1, float *s, const void *x, const void *y) \
    {                                                                                              \
        kblk_vec_dot_sub(i0, i1, s, x, y, sizeof(struct block_##T), T##_unpack);                   \
    }

KBLK_KERNELS(q2_K)
KBLK_KERNELS(q3_K)
KBLK_KERNELS(q4_K)
KBLK_KERNELS(q5_K)
KBLK_KERNELS(q6_K)
KBLK_KERNELS(iq4_xs)

/* Q8_K · Q8_K: only for tests and completeness (no file stores Q8_K) */
static void q8_K_vec_dot_ref(int64_t n, float *s, const void *vx, const void *vy)
{
    const struct block_q8_K *x = vx, *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int32_t p = 0;
        for (int k = 0; k < QK_K; k++)
            p += x[i].qs[k] * y[i].qs[k];
        sumf += (x[i].d * y[i].d) * (float)p;
    }
    *s = sumf;
}

static void q8_K_axpy_ref(int64_t n, float *y, float a, const void *vx)
{
    const struct block_q8_K *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float s = a * x[i].d;
        for (int k = 0; k < QK_K; k++)
            y[i * QK_K + k] = fmaf(s, (float)x[i].qs[k], y[i * QK_K + k]);
    }
}

void quant_kquants_fill(struct pi_type_traits *traits, size_t count)
{
    if (count < PI_TYPE_COUNT)
        return;
    const struct {
        enum pi_type type;
        const char *name;
        size_t size;
        pi_to_float_fn to_float;
        pi_from_float_fn from_float;
        pi_vec_dot_fn vec_dot;
        pi_axpy_fn axpy;
        int sub;
        pi_vec_dot_sub_fn vec_dot_sub;
    } rows[] = {
        { PI_TYPE_Q2_K, "q2_K", sizeof(struct block_q2_K), q2_K_to_float_ref, q2_K_from_float_ref, q2_K_vec_dot_ref, q2_K_axpy_ref, SUB16, q2_K_vec_dot_sub_ref },
        { PI_TYPE_Q3_K, "q3_K", sizeof(struct block_q3_K), q3_K_to_float_ref, q3_K_from_float_ref, q3_K_vec_dot_ref, q3_K_axpy_ref, SUB16, q3_K_vec_dot_sub_ref },
        { PI_TYPE_Q4_K, "q4_K", sizeof(struct block_q4_K), q4_K_to_float_ref, q4_K_from_float_ref, q4_K_vec_dot_ref, q4_K_axpy_ref, SUB32, q4_K_vec_dot_sub_ref },
        { PI_TYPE_Q5_K, "q5_K", sizeof(struct block_q5_K), q5_K_to_float_ref, q5_K_from_float_ref, q5_K_vec_dot_ref, q5_K_axpy_ref, SUB32, q5_K_vec_dot_sub_ref },
        { PI_TYPE_Q6_K, "q6_K", sizeof(struct block_q6_K), q6_K_to_float_ref, q6_K_from_float_ref, q6_K_vec_dot_ref, q6_K_axpy_ref, SUB16, q6_K_vec_dot_sub_ref },
        { PI_TYPE_IQ4_XS, "iq4_xs", sizeof(struct block_iq4_xs), iq4_xs_to_float_ref, iq4_xs_from_float_ref, iq4_xs_vec_dot_ref, iq4_xs_axpy_ref, SUB32, iq4_xs_vec_dot_sub_ref },
        { PI_TYPE_Q8_K, "q8_K", sizeof(struct block_q8_K), q8_K_to_float_ref, q8_K_from_float_ref, q8_K_vec_dot_ref, q8_K_axpy_ref, QK_K, NULL },
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        traits[rows[i].type] = (struct pi_type_traits){ rows[i].name, QK_K, rows[i].size, true, PI_TYPE_Q8_K,
                                                        rows[i].to_float, rows[i].from_float, rows[i].vec_dot,
                                                        rows[i].axpy, rows[i].sub, rows[i].vec_dot_sub };
}
