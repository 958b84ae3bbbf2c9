/* quant_ref.c — the scalar reference kernels of the float types and of the 32-element block types
 * (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL), and their rows of the reference traits table.
 *
 * The quantizers follow ggml's operation for operation (the same float expressions in the same
 * order, the same rounding helpers), so that a tensor quantized here is byte-identical to one
 * quantized by llama.cpp; tests/test_quant_fixture checks that against bytes llama.cpp produced.
 * The newer 32-element types share one dequantize / dot / AXPY body over a per-type unpack of a
 * block into integers, a scale and a min. */
#include "quant_internal.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* ---- scalar reference kernels ---------------------------------------------------------------- */

#define Q8_0_MAX 127      /* (1 << 7) - 1: largest q8_0 magnitude */
#define Q4_0_NEG_MAX (-8) /* the largest-magnitude value maps to q = 0, i.e. -8 after the offset */
#define Q4_0_OFFSET 8     /* stored nibble = q + 8 */
#define Q4_0_ROUND 8.5f   /* offset + 0.5: the int8 cast then truncates to the nearest */
#define Q4_0_QMAX 15
#define NIBBLE 0x0f

static void f32_to_float_ref(const void *src, float *dst, int64_t n)
{
    memcpy(dst, src, (size_t)n * sizeof(float));
}

static void f32_from_float_ref(const float *src, void *dst, int64_t n)
{
    memcpy(dst, src, (size_t)n * sizeof(float));
}

/* s = Σ x[i]*y[i], accumulated in double (as ggml's scalar path) so it is a tight reference */
static void f32_vec_dot_ref(int64_t n, float *s, const void *vx, const void *vy)
{
    const float *x = vx, *y = vy;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)x[i] * (double)y[i];
    *s = (float)sum;
}

static void f16_to_float_ref(const void *src, float *dst, int64_t n)
{
    const pi_f16 *x = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = pi_f16_to_f32(x[i]);
}

static void f16_from_float_ref(const float *src, void *dst, int64_t n)
{
    pi_f16 *y = dst;
    for (int64_t i = 0; i < n; i++)
        y[i] = pi_f32_to_f16(src[i]);
}

/* s = Σ f16(x[i]) * y[i] */
static void f16_vec_dot_ref(int64_t n, float *s, const void *vx, const void *vy)
{
    const pi_f16 *x = vx;
    const float *y = vy;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)pi_f16_to_f32(x[i]) * (double)y[i];
    *s = (float)sum;
}

static void bf16_to_float_ref(const void *src, float *dst, int64_t n)
{
    const pi_bf16 *x = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = pi_bf16_to_f32(x[i]);
}

static void bf16_from_float_ref(const float *src, void *dst, int64_t n)
{
    pi_bf16 *y = dst;
    for (int64_t i = 0; i < n; i++)
        y[i] = pi_f32_to_bf16(src[i]);
}

/* s = Σ bf16(x[i]) * y[i] */
static void bf16_vec_dot_ref(int64_t n, float *s, const void *vx, const void *vy)
{
    const pi_bf16 *x = vx;
    const float *y = vy;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)pi_bf16_to_f32(x[i]) * (double)y[i];
    *s = (float)sum;
}

/* x[i] = q[i] * d */
static void q8_0_to_float_ref(const void *src, float *dst, int64_t n)
{
    const struct block_q8_0 *b = src;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        float d = pi_f16_to_f32(b[i].d);
        for (int j = 0; j < QK8_0; j++)
            dst[i * QK8_0 + j] = b[i].qs[j] * d;
    }
}

/* d = amax/127, q = round(x/d) (half away from zero): ggml's quantize_row_q8_0_ref */
static void q8_0_from_float_ref(const float *src, void *dst, int64_t n)
{
    struct block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const float *x = src + i * QK8_0;
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / Q8_0_MAX;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = pi_f32_to_f16(d);
        for (int j = 0; j < QK8_0; j++)
            b[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

/* s = Σ_blocks dx*dy * Σ qx*qy (integer sum within a block) */
static void q8_0_vec_dot_ref(int64_t n, float *s, const void *vx, const void *vy)
{
    const struct block_q8_0 *x = vx, *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int sumi = 0;
        for (int j = 0; j < QK8_0; j++)
            sumi += x[i].qs[j] * y[i].qs[j];
        sumf += sumi * (pi_f16_to_f32(x[i].d) * pi_f16_to_f32(y[i].d));
    }
    *s = sumf;
}

/* x[j] = (nibble - 8) * d; element j in the low nibble of byte j, element j+16 in the high one */
static void q4_0_to_float_ref(const void *src, float *dst, int64_t n)
{
    const struct block_q4_0 *b = src;
    for (int64_t i = 0; i < n / QK4_0; i++) {
        float d = pi_f16_to_f32(b[i].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            dst[i * QK4_0 + j] = ((b[i].qs[j] & NIBBLE) - Q4_0_OFFSET) * d;
            dst[i * QK4_0 + j + QK4_0 / 2] = ((b[i].qs[j] >> 4) - Q4_0_OFFSET) * d;
        }
    }
}

/* d = max/-8 (max: the signed value of largest magnitude), q = min(15, (int8)(x/d + 8.5)):
 * ggml's quantize_row_q4_0_ref */
static void q4_0_from_float_ref(const float *src, void *dst, int64_t n)
{
    struct block_q4_0 *b = dst;
    for (int64_t i = 0; i < n / QK4_0; i++) {
        const float *x = src + i * QK4_0;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK4_0; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        const float d = max / Q4_0_NEG_MAX;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = pi_f32_to_f16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            int8_t q0 = (int8_t)(x[j] * id + Q4_0_ROUND);
            int8_t q1 = (int8_t)(x[j + QK4_0 / 2] * id + Q4_0_ROUND);
            uint8_t u0 = (uint8_t)(q0 < Q4_0_QMAX ? q0 : Q4_0_QMAX);
            uint8_t u1 = (uint8_t)(q1 < Q4_0_QMAX ? q1 : Q4_0_QMAX);
            b[i].qs[j] = (uint8_t)(u0 | (u1 << 4));
        }
    }
}

/* s = Σ_blocks dx*dy * Σ (qx-8)*qy, qy from a q8_0 row */
static void q4_0_vec_dot_ref(int64_t n, float *s, const void *vx, const void *vy)
{
    const struct block_q4_0 *x = vx;
    const struct block_q8_0 *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK4_0; i++) {
        int sumi0 = 0, sumi1 = 0;
        for (int j = 0; j < QK4_0 / 2; j++) {
            const int v0 = (x[i].qs[j] & NIBBLE) - Q4_0_OFFSET;
            const int v1 = (x[i].qs[j] >> 4) - Q4_0_OFFSET;
            sumi0 += v0 * y[i].qs[j];
            sumi1 += v1 * y[i].qs[j + QK4_0 / 2];
        }
        sumf += (sumi0 + sumi1) * pi_f16_to_f32(x[i].d) * pi_f16_to_f32(y[i].d);
    }
    *s = sumf;
}

/* ---- AXPY (y += a * x), the sparse FFN's down_t rows: one fmaf per element (see quant.h) ------ */

/* y[i] += a * x[i] */
static void f32_axpy_ref(int64_t n, float *y, float a, const void *vx)
{
    const float *x = vx;
    for (int64_t i = 0; i < n; i++)
        y[i] = fmaf(a, x[i], y[i]);
}

/* y[i] += a * f16(x[i]) */
static void f16_axpy_ref(int64_t n, float *y, float a, const void *vx)
{
    const pi_f16 *x = vx;
    for (int64_t i = 0; i < n; i++)
        y[i] = fmaf(a, pi_f16_to_f32(x[i]), y[i]);
}

/* y[i] += a * bf16(x[i]) */
static void bf16_axpy_ref(int64_t n, float *y, float a, const void *vx)
{
    const pi_bf16 *x = vx;
    for (int64_t i = 0; i < n; i++)
        y[i] = fmaf(a, pi_bf16_to_f32(x[i]), y[i]);
}

/* y[j] += (a * d) * q[j] per block */
static void q8_0_axpy_ref(int64_t n, float *y, float a, const void *vx)
{
    const struct block_q8_0 *x = vx;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const float s = a * pi_f16_to_f32(x[i].d);
        float *yb = y + i * QK8_0;
        for (int j = 0; j < QK8_0; j++)
            yb[j] = fmaf(s, (float)x[i].qs[j], yb[j]);
    }
}

/* y[j] += (a * d) * (nibble - 8) per block; element j low nibble of byte j, j+16 its high nibble */
static void q4_0_axpy_ref(int64_t n, float *y, float a, const void *vx)
{
    const struct block_q4_0 *x = vx;
    for (int64_t i = 0; i < n / QK4_0; i++) {
        const float s = a * pi_f16_to_f32(x[i].d);
        float *yb = y + i * QK4_0;
        for (int j = 0; j < QK4_0 / 2; j++) {
            yb[j] = fmaf(s, (float)((x[i].qs[j] & NIBBLE) - Q4_0_OFFSET), yb[j]);
            yb[j + QK4_0 / 2] = fmaf(s, (float)((x[i].qs[j] >> 4) - Q4_0_OFFSET), yb[j + QK4_0 / 2]);
        }
    }
}

/* ---- Q4_1, Q5_0, Q5_1, IQ4_NL: one body over a per-type unpack ---------------------------------- */

#define Q5_0_OFFSET 16    /* stored 5-bit value = q + 16 */
#define Q5_0_NEG_MAX (-16)
#define Q5_0_ROUND 16.5f  /* offset + 0.5, then a truncating cast, as Q4_0 */
#define Q5_QMAX 31
#define Q4_1_QMAX 15
#define HALF_UP 0.5f      /* + 0.5 then truncate: the unsigned types round half up */
#define IQ4_NTRY 7        /* scale candidates either side of the first guess (what llama-quantize uses) */
#define IQ4_SUB 32        /* elements per sub-block (and per IQ4_NL block) */
#define GROUP_MAX_EPS 1e-15f /* below this block maximum the block is all zero (ggml's threshold) */

const int8_t quant_iq4nl_values[16] = IQ4_NL_VALUES;

/* A 32-element block as integers: value[j] = q[j] * d + m. Types without a min use m = -0.0f,
 * which leaves every product unchanged (x + -0 = x for every x, -0 included), so dequantized bytes
 * equal ggml's, whose formula for them has no addition at all. */
struct blk32 {
    float d, m;
    int8_t q[32];
};

typedef void (*blk32_unpack_fn)(const void *blk, struct blk32 *u);

static void q4_1_unpack(const void *vb, struct blk32 *u)
{
    const struct block_q4_1 *b = vb;
    u->d = pi_f16_to_f32(b->d);
    u->m = pi_f16_to_f32(b->m);
    for (int j = 0; j < QK4_1 / 2; j++) {
        u->q[j] = (int8_t)(b->qs[j] & NIBBLE);
        u->q[j + QK4_1 / 2] = (int8_t)(b->qs[j] >> 4);
    }
}

/* bit j of qh is the 5th bit of element j */
static void q5_unpack_qs(const uint8_t qh4[4], const uint8_t *qs, int offset, int8_t *q)
{
    uint32_t qh;
    memcpy(&qh, qh4, sizeof qh);
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)(((qs[j] & NIBBLE) | (((qh >> j) & 1) << 4)) - offset);
        q[j + 16] = (int8_t)(((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - offset);
    }
}

static void q5_0_unpack(const void *vb, struct blk32 *u)
{
    const struct block_q5_0 *b = vb;
    u->d = pi_f16_to_f32(b->d);
    u->m = -0.0f;
    q5_unpack_qs(b->qh, b->qs, Q5_0_OFFSET, u->q);
}

static void q5_1_unpack(const void *vb, struct blk32 *u)
{
    const struct block_q5_1 *b = vb;
    u->d = pi_f16_to_f32(b->d);
    u->m = pi_f16_to_f32(b->m);
    q5_unpack_qs(b->qh, b->qs, 0, u->q);
}

static void iq4_nl_unpack(const void *vb, struct blk32 *u)
{
    const struct block_iq4_nl *b = vb;
    u->d = pi_f16_to_f32(b->d);
    u->m = -0.0f;
    for (int j = 0; j < QK4_NL / 2; j++) {
        u->q[j] = quant_iq4nl_values[b->qs[j] & NIBBLE];
        u->q[j + QK4_NL / 2] = quant_iq4nl_values[b->qs[j] >> 4];
    }
}

/* x[j] = q[j] * d + m */
static inline void blk32_to_float(const void *src, float *dst, int64_t n, size_t bsize, blk32_unpack_fn unpack)
{
    struct blk32 u;
    for (int64_t i = 0; i < n / 32; i++) {
        unpack((const char *)src + (size_t)i * bsize, &u);
        for (int j = 0; j < 32; j++)
            dst[i * 32 + j] = (float)u.q[j] * u.d + u.m;
    }
}

/* s = Σ_blocks (dx dy) Σ qx qy + (mx dy) Σ qy, y a q8_0 row (integer sums within a block) */
static inline void blk32_vec_dot(int64_t n, float *s, const void *vx, const void *vy, size_t bsize,
                                 blk32_unpack_fn unpack)
{
    const struct block_q8_0 *y = vy;
    struct blk32 u;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        unpack((const char *)vx + (size_t)i * bsize, &u);
        int sumi = 0, sumy = 0;
        for (int j = 0; j < 32; j++) {
            sumi += u.q[j] * y[i].qs[j];
            sumy += y[i].qs[j];
        }
        const float dy = pi_f16_to_f32(y[i].d);
        sumf += (float)sumi * (u.d * dy) + (u.m * dy) * (float)sumy;
    }
    *s = sumf;
}

/* y[j] += a * (q[j] d + m) as y[j] = fma(a d, q[j], y[j] + a m), per block */
static inline void blk32_axpy(int64_t n, float *y, float a, const void *vx, size_t bsize, blk32_unpack_fn unpack)
{
    struct blk32 u;
    for (int64_t i = 0; i < n / 32; i++) {
        unpack((const char *)vx + (size_t)i * bsize, &u);
        const float s = a * u.d, c = a * u.m;
        float *yb = y + i * 32;
        for (int j = 0; j < 32; j++)
            yb[j] = fmaf(s, (float)u.q[j], yb[j] + c);
    }
}

#define BLK32_KERNELS(T)                                                                           \
    static void T##_to_float_ref(const void *src, float *dst, int64_t n)                           \
    {                                                                                              \
        blk32_to_float(src, dst, n, sizeof(struct block_##T), T##_unpack);                         \
    }                                                                                              \
    static void T##_vec_dot_ref(int64_t n, float *s, const void *x, const void *y)                 \
    {                                                                                              \
        blk32_vec_dot(n, s, x, y, sizeof(struct block_##T), T##_unpack);                           \
    }                                                                                              \
    static void T##_axpy_ref(int64_t n, float *y, float a, const void *x)                          \
    {                                                                                              \
        blk32_axpy(n, y, a, x, sizeof(struct block_##T), T##_unpack);                              \
    }

BLK32_KERNELS(q4_1)
BLK32_KERNELS(q5_0)
BLK32_KERNELS(q5_1)
BLK32_KERNELS(iq4_nl)

/* min and max of a block (ggml starts from ±FLT_MAX) */
static void block_min_max(const float *x, int n, float *mn, float *mx)
{
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < lo)
            lo = x[j];
        if (x[j] > hi)
            hi = x[j];
    }
    *mn = lo;
    *mx = hi;
}

/* d = (max - min)/15, m = min, q = min(15, (int8)((x - min)/d + 0.5)): ggml's quantize_row_q4_1_ref */
static void q4_1_from_float_ref(const float *src, void *dst, int64_t n)
{
    struct block_q4_1 *b = dst;
    for (int64_t i = 0; i < n / QK4_1; i++) {
        const float *x = src + i * QK4_1;
        float min, max;
        block_min_max(x, QK4_1, &min, &max);
        const float d = (max - min) / Q4_1_QMAX;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = pi_f32_to_f16(d);
        b[i].m = pi_f32_to_f16(min);
        for (int j = 0; j < QK4_1 / 2; j++) {
            int8_t q0 = (int8_t)((x[j] - min) * id + HALF_UP);
            int8_t q1 = (int8_t)((x[j + QK4_1 / 2] - min) * id + HALF_UP);
            uint8_t u0 = (uint8_t)(q0 < Q4_1_QMAX ? q0 : Q4_1_QMAX);
            uint8_t u1 = (uint8_t)(q1 < Q4_1_QMAX ? q1 : Q4_1_QMAX);
            b[i].qs[j] = (uint8_t)(u0 | (u1 << 4));
        }
    }
}

/* packs 32 five-bit values: low nibbles as Q4, bit 4 of value j into bit j of qh */
static void q5_pack(const uint8_t v[32], uint8_t qh4[4], uint8_t qs[16])
{
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((v[j] & NIBBLE) | ((v[j + 16] & NIBBLE) << 4));
        qh |= (uint32_t)((v[j] >> 4) & 1) << j;
        qh |= (uint32_t)((v[j + 16] >> 4) & 1) << (j + 16);
    }
    memcpy(qh4, &qh, sizeof qh);
}

/* d = max/-16 (max: the signed value of largest magnitude), q = min(31, (int8)(x/d + 16.5)):
 * ggml's quantize_row_q5_0_ref */
static void q5_0_from_float_ref(const float *src, void *dst, int64_t n)
{
    struct block_q5_0 *b = dst;
    for (int64_t i = 0; i < n / QK5_0; i++) {
        const float *x = src + i * QK5_0;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK5_0; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        const float d = max / Q5_0_NEG_MAX;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = pi_f32_to_f16(d);
        uint8_t v[QK5_0];
        for (int j = 0; j < QK5_0; j++) {
            int8_t q = (int8_t)(x[j] * id + Q5_0_ROUND);
            v[j] = (uint8_t)(q < Q5_QMAX ? q : Q5_QMAX);
        }
        q5_pack(v, b[i].qh, b[i].qs);
    }
}

/* d = (max - min)/31, m = min, q = (uint8)((x - min)/d + 0.5): ggml's quantize_row_q5_1_ref (no
 * clamp there either: the largest value lands on 31) */
static void q5_1_from_float_ref(const float *src, void *dst, int64_t n)
{
    struct block_q5_1 *b = dst;
    for (int64_t i = 0; i < n / QK5_1; i++) {
        const float *x = src + i * QK5_1;
        float min, max;
        block_min_max(x, QK5_1, &min, &max);
        const float d = (max - min) / Q5_QMAX;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = pi_f32_to_f16(d);
        b[i].m = pi_f32_to_f16(min);
        uint8_t v[QK5_1];
        for (int j = 0; j < QK5_1; j++)
            v[j] = (uint8_t)((x[j] - min) * id + HALF_UP);
        q5_pack(v, b[i].qh, b[i].qs);
    }
}

int quant_iq4_best_index(float x)
{
    const int8_t *val = quant_iq4nl_values;
    if (x <= val[0])
        return 0;
    if (x >= val[15])
        return 15;
    int lo = 0, hi = 15; /* bisect: val[lo] <= x < val[hi] */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (x < val[mid])
            hi = mid;
        else
            lo = mid;
    }
    return x - val[hi - 1] < val[hi] - x ? hi - 1 : hi;
}

/* The best scale of one 32-element sub-block for the IQ4 grid, weighted by x^2: start from
 * d = -max/values[0] (the largest magnitude on the grid's end), then try 2*IQ4_NTRY+1 other scales
 * that put the maximum on the neighbouring grid points, keeping the weighted least-squares scale of
 * the best. Writes the indices of the first guess to L; returns the scale (0 for an all-zero block,
 * L untouched). This is the search of ggml's quantize_row_iq4_nl_impl without an importance matrix. */
static float iq4_sub_scale(const float *xb, uint8_t *L)
{
    const int8_t *values = quant_iq4nl_values;
    float weight[IQ4_SUB];
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < IQ4_SUB; j++) {
        weight[j] = xb[j] * xb[j];
        float ax = fabsf(xb[j]);
        if (ax > amax) {
            amax = ax;
            max = xb[j];
        }
    }
    if (amax < GROUP_MAX_EPS)
        return 0.0f;
    float d = -max / values[0];
    float id = 1.0f / d;
    float sumqx = 0.0f, sumq2 = 0.0f;
    for (int j = 0; j < IQ4_SUB; j++) {
        int l = quant_iq4_best_index(id * xb[j]);
        L[j] = (uint8_t)l;
        float q = values[l];
        float w = weight[j];
        sumqx += w * q * xb[j];
        sumq2 += w * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.0f;
    float best = d * sumqx;
    for (int itry = -IQ4_NTRY; itry <= IQ4_NTRY; itry++) {
        id = (float)(itry + values[0]) / max;
        sumqx = sumq2 = 0.0f;
        for (int j = 0; j < IQ4_SUB; j++) {
            float q = values[quant_iq4_best_index(id * xb[j])];
            float w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

#define IQ4_XS_SCALE_MIN (-32) /* six-bit sub-scales, stored + 32 */
#define IQ4_XS_SCALE_MAX 31
#define IQ4_XS_SCALE_DIV (-32.0f) /* d = max_scale / -32: the largest sub-scale becomes -32 */

void quant_iq4_quantize(int n, const float *x, pi_f16 *dh, uint8_t *qs, uint16_t *scales_h, uint8_t *scales_l)
{
    uint8_t L[QK_K];
    float scales[QK_K / IQ4_SUB] = { 0 };
    const int nsub = n / IQ4_SUB;
    float max_scale = 0.0f, amax_scale = 0.0f;
    memset(L, 0, sizeof L);
    for (int ib = 0; ib < nsub; ib++) {
        scales[ib] = iq4_sub_scale(x + ib * IQ4_SUB, L + ib * IQ4_SUB);
        float ad = fabsf(scales[ib]);
        if (ad > amax_scale) {
            amax_scale = ad;
            max_scale = scales[ib];
        }
    }
    if (nsub > 1) {
        /* IQ4_XS: the sub-scales as six-bit multiples of d, then the indices again for each
         * sub-block's rounded scale (d itself unrounded, as ggml) */
        *scales_h = 0;
        const float d = max_scale / IQ4_XS_SCALE_DIV;
        *dh = pi_f32_to_f16(d);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int ib = 0; ib < nsub; ib++) {
            int l = quant_nearest_int(id * scales[ib]);
            l = l < IQ4_XS_SCALE_MIN ? IQ4_XS_SCALE_MIN : l > IQ4_XS_SCALE_MAX ? IQ4_XS_SCALE_MAX : l;
            const float dl = d * (float)l;
            const float idl = dl != 0.0f ? 1.0f / dl : 0.0f;
            for (int j = 0; j < IQ4_SUB; j++)
                L[ib * IQ4_SUB + j] = (uint8_t)quant_iq4_best_index(idl * x[ib * IQ4_SUB + j]);
            l -= IQ4_XS_SCALE_MIN;
            if (ib % 2 == 0)
                scales_l[ib / 2] = (uint8_t)(l & NIBBLE);
            else
                scales_l[ib / 2] |= (uint8_t)((l & NIBBLE) << 4);
            *scales_h |= (uint16_t)((l >> 4) << (2 * ib));
        }
    } else {
        *dh = pi_f32_to_f16(scales[0]);
        const float id = scales[0] != 0.0f ? 1.0f / scales[0] : 0.0f;
        for (int j = 0; j < n; j++)
            L[j] = (uint8_t)quant_iq4_best_index(id * x[j]);
    }
    for (int i = 0; i < n / IQ4_SUB; i++)
        for (int j = 0; j < IQ4_SUB / 2; j++)
            qs[16 * i + j] = (uint8_t)(L[IQ4_SUB * i + j] | (L[IQ4_SUB * i + 16 + j] << 4));
}

/* what llama-quantize writes for IQ4_NL without an importance matrix (ggml's quantize_iq4_nl) */
static void iq4_nl_from_float_ref(const float *src, void *dst, int64_t n)
{
    struct block_iq4_nl *b = dst;
    uint16_t unused_h;
    for (int64_t i = 0; i < n / QK4_NL; i++)
        quant_iq4_quantize(QK4_NL, src + i * QK4_NL, &b[i].d, b[i].qs, &unused_h, NULL);
}

/* ---- the rows of the reference table --------------------------------------------------------- */

void quant_ref_fill(struct pi_type_traits *traits, size_t count)
{
    if (count < PI_TYPE_COUNT)
        return;
    traits[PI_TYPE_F32] = (struct pi_type_traits){ "f32", 1, sizeof(float), true, PI_TYPE_F32,
        f32_to_float_ref, f32_from_float_ref, f32_vec_dot_ref, f32_axpy_ref };
    traits[PI_TYPE_F16] = (struct pi_type_traits){ "f16", 1, sizeof(pi_f16), true, PI_TYPE_F32,
        f16_to_float_ref, f16_from_float_ref, f16_vec_dot_ref, f16_axpy_ref };
    traits[PI_TYPE_BF16] = (struct pi_type_traits){ "bf16", 1, sizeof(pi_bf16), true, PI_TYPE_F32,
        bf16_to_float_ref, bf16_from_float_ref, bf16_vec_dot_ref, bf16_axpy_ref };
    traits[PI_TYPE_Q8_0] = (struct pi_type_traits){ "q8_0", QK8_0, sizeof(struct block_q8_0), true, PI_TYPE_Q8_0,
        q8_0_to_float_ref, q8_0_from_float_ref, q8_0_vec_dot_ref, q8_0_axpy_ref };
    traits[PI_TYPE_Q4_0] = (struct pi_type_traits){ "q4_0", QK4_0, sizeof(struct block_q4_0), true, PI_TYPE_Q8_0,
        q4_0_to_float_ref, q4_0_from_float_ref, q4_0_vec_dot_ref, q4_0_axpy_ref };
    traits[PI_TYPE_Q4_1] = (struct pi_type_traits){ "q4_1", QK4_1, sizeof(struct block_q4_1), true, PI_TYPE_Q8_0,
        q4_1_to_float_ref, q4_1_from_float_ref, q4_1_vec_dot_ref, q4_1_axpy_ref };
    traits[PI_TYPE_Q5_0] = (struct pi_type_traits){ "q5_0", QK5_0, sizeof(struct block_q5_0), true, PI_TYPE_Q8_0,
        q5_0_to_float_ref, q5_0_from_float_ref, q5_0_vec_dot_ref, q5_0_axpy_ref };
    traits[PI_TYPE_Q5_1] = (struct pi_type_traits){ "q5_1", QK5_1, sizeof(struct block_q5_1), true, PI_TYPE_Q8_0,
        q5_1_to_float_ref, q5_1_from_float_ref, q5_1_vec_dot_ref, q5_1_axpy_ref };
    traits[PI_TYPE_IQ4_NL] = (struct pi_type_traits){ "iq4_nl", QK4_NL, sizeof(struct block_iq4_nl), true,
        PI_TYPE_Q8_0, iq4_nl_to_float_ref, iq4_nl_from_float_ref, iq4_nl_vec_dot_ref, iq4_nl_axpy_ref };
    traits[PI_TYPE_I32] = (struct pi_type_traits){ "i32", 1, sizeof(int32_t), false, PI_TYPE_I32,
        NULL, NULL, NULL, NULL };
}
