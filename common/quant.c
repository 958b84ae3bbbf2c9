/* quant.c — the type traits table, the scalar reference kernels, f16/bf16 conversion and the run-time
 * choice between the reference kernels and the AVX2 ones (quant_avx2.c).
 *
 * The reference kernels follow ggml's *_ref functions operation for operation, so that a tensor
 * quantized here is byte-identical to one quantized by ggml, and a dot product has the same math. */
#include "quant.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(PI_HAVE_AVX2_UNIT)
#include <cpuid.h>
#endif

/* ---- f16 / bf16 <-> f32 ------------------------------------------------------------------------ */

#define F32_SIGN 0x80000000u
#define F32_ABS 0x7fffffffu
#define F32_EXP_INF 0x7f800000u  /* exponent all ones */
#define F32_QUIET 0x00400000u    /* top mantissa bit: quiet NaN */
#define F32_MANT_BITS 23
#define F16_SIGN 0x8000u
#define F16_EXP_MASK 0x1fu
#define F16_MANT_MASK 0x3ffu
#define F16_MANT_BITS 10
#define F16_INF 0x7c00u
#define F16_QUIET 0x0200u
#define F16_IMPLICIT 0x400u      /* the hidden bit of a normal half mantissa */
#define F16_SUBNORMAL_EXP 113    /* f32 biased exponent of 2^-14, the smallest normal half (127-15+1) */
#define F32_TO_F16_REBIAS 0x38000000u /* (127 - 15) << 23: f32 exponent bias minus f16 bias */
#define F32_F16_DROP 13          /* mantissa bits dropped from f32 to f16 */
#define F32_F16_ROUND_HALF 0x1000u /* half an f16 ulp in the dropped bits */
#define F32_MIN_NORMAL_F16 0x38800000u /* 2^-14 as f32 bits: below it the half is subnormal */
#define F32_HALF_OVERFLOW 0x477ff000u  /* 65520 = halfway between 65504 (max half) and 2^16: rounds to inf */
#define F32_HALF_UNDERFLOW 0x33000000u /* 2^-25: at or below it the half rounds to zero (tie to even) */
#define F32_IMPLICIT 0x800000u
#define F32_SUBNORMAL_SHIFT_BASE 126 /* m * 2^(e-150) * 2^24 = m >> (126 - e) */
#define BF16_SHIFT 16
#define BF16_ROUND_BIAS 0x7fffu  /* below half a bf16 ulp: with the lsb of the kept part, ties go to even */
#define BF16_QUIET 0x0040u

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Exact: every half is a float. A signalling NaN comes back quiet, as F16C's vcvtph2ps does, so the
 * scalar and the AVX2 paths agree bit for bit. */
float pi_f16_to_f32(pi_f16 h)
{
    uint32_t sign = (uint32_t)(h & F16_SIGN) << BF16_SHIFT;
    uint32_t exp = (h >> F16_MANT_BITS) & F16_EXP_MASK;
    uint32_t mant = h & F16_MANT_MASK;

    if (exp == F16_EXP_MASK) {
        if (mant == 0)
            return bits_f32(sign | F32_EXP_INF);
        return bits_f32(sign | F32_EXP_INF | F32_QUIET | (mant << F32_F16_DROP));
    }
    if (exp == 0) {
        if (mant == 0)
            return bits_f32(sign);
        /* subnormal half = mant * 2^-24: normalize so that the hidden bit is set */
        uint32_t e = F16_SUBNORMAL_EXP;
        while (!(mant & F16_IMPLICIT)) {
            mant <<= 1;
            e--;
        }
        mant &= F16_MANT_MASK;
        return bits_f32(sign | (e << F32_MANT_BITS) | (mant << F32_F16_DROP));
    }
    return bits_f32(sign | ((exp << F32_MANT_BITS) + F32_TO_F16_REBIAS) | (mant << F32_F16_DROP));
}

/* IEEE round to nearest even, with subnormal halves, overflow to inf, and NaN kept NaN (quieted, top
 * payload bits kept: what F16C's vcvtps2ph does). */
pi_f16 pi_f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x & F32_SIGN) >> BF16_SHIFT);
    x &= F32_ABS;

    if (x >= F32_EXP_INF) {
        if (x == F32_EXP_INF)
            return sign | F16_INF;
        return (pi_f16)(sign | F16_INF | F16_QUIET | ((x >> F32_F16_DROP) & F16_MANT_MASK));
    }
    if (x >= F32_HALF_OVERFLOW)
        return sign | F16_INF;
    if (x < F32_MIN_NORMAL_F16) {
        if (x <= F32_HALF_UNDERFLOW)
            return sign;
        /* result = round(|f| * 2^24) as a subnormal mantissa; may round up into the smallest normal,
         * whose encoding (0x400) follows on naturally */
        uint32_t e = x >> F32_MANT_BITS;
        uint32_t m = (x & (F32_IMPLICIT - 1)) | F32_IMPLICIT;
        uint32_t shift = F32_SUBNORMAL_SHIFT_BASE - e;
        uint32_t r = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1)))
            r++;
        return (pi_f16)(sign | r);
    }
    x -= F32_TO_F16_REBIAS;
    uint32_t r = x >> F32_F16_DROP;
    uint32_t rem = x & ((1u << F32_F16_DROP) - 1);
    if (rem > F32_F16_ROUND_HALF || (rem == F32_F16_ROUND_HALF && (r & 1)))
        r++; /* a carry into the exponent is the correct next binade (or inf) */
    return (pi_f16)(sign | r);
}

float pi_bf16_to_f32(pi_bf16 h)
{
    return bits_f32((uint32_t)h << BF16_SHIFT);
}

pi_bf16 pi_f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & F32_ABS) > F32_EXP_INF)
        return (pi_bf16)((x >> BF16_SHIFT) | BF16_QUIET); /* truncating could turn a NaN into inf */
    return (pi_bf16)((x + BF16_ROUND_BIAS + ((x >> BF16_SHIFT) & 1)) >> BF16_SHIFT);
}

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

/* ---- traits tables --------------------------------------------------------------------------- */

static const struct pi_type_traits traits_ref[PI_TYPE_COUNT] = {
    [PI_TYPE_F32] = { "f32", 1, sizeof(float), true, PI_TYPE_F32,
                      f32_to_float_ref, f32_from_float_ref, f32_vec_dot_ref, f32_axpy_ref },
    [PI_TYPE_F16] = { "f16", 1, sizeof(pi_f16), true, PI_TYPE_F32,
                      f16_to_float_ref, f16_from_float_ref, f16_vec_dot_ref, f16_axpy_ref },
    [PI_TYPE_BF16] = { "bf16", 1, sizeof(pi_bf16), true, PI_TYPE_F32,
                       bf16_to_float_ref, bf16_from_float_ref, bf16_vec_dot_ref, bf16_axpy_ref },
    [PI_TYPE_Q8_0] = { "q8_0", QK8_0, sizeof(struct block_q8_0), true, PI_TYPE_Q8_0,
                       q8_0_to_float_ref, q8_0_from_float_ref, q8_0_vec_dot_ref, q8_0_axpy_ref },
    [PI_TYPE_Q4_0] = { "q4_0", QK4_0, sizeof(struct block_q4_0), true, PI_TYPE_Q8_0,
                       q4_0_to_float_ref, q4_0_from_float_ref, q4_0_vec_dot_ref, q4_0_axpy_ref },
    [PI_TYPE_I32] = { "i32", 1, sizeof(int32_t), false, PI_TYPE_I32, NULL, NULL, NULL, NULL },
};

/* The kernels in use: a copy of traits_ref with the AVX2 kernels patched in by quant_init(). Written
 * once under pthread_once, read-only afterwards. */
static struct pi_type_traits traits_fast[PI_TYPE_COUNT];
static pthread_once_t quant_once = PTHREAD_ONCE_INIT;
static bool quant_avx2_active;
/* A switch between two correct kernel sets, so relaxed loads suffice: a thread that sees the old
 * value just uses the other, equally valid, table. */
static atomic_bool quant_scalar;

#if defined(PI_HAVE_AVX2_UNIT)
/* F16C from cpuid (leaf 1, ecx bit 29): clang before 15 has no "f16c" for __builtin_cpu_supports. */
static bool cpu_has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#endif

static void quant_init_once(void)
{
    memcpy(traits_fast, traits_ref, sizeof traits_fast);
#if defined(PI_HAVE_AVX2_UNIT)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c()) {
        quant_avx2_install(traits_fast, PI_TYPE_COUNT);
        quant_avx2_active = true;
    }
#endif
    const char *env = getenv("PINFER_SCALAR");
    if (env && strcmp(env, "1") == 0)
        atomic_store_explicit(&quant_scalar, true, memory_order_relaxed);
}

void quant_init(void)
{
    pthread_once(&quant_once, quant_init_once);
}

void quant_use_scalar(bool scalar)
{
    quant_init(); /* so that a later first init cannot override this with the environment's value */
    atomic_store_explicit(&quant_scalar, scalar, memory_order_relaxed);
}

const struct pi_type_traits *quant_traits_ref(uint32_t type)
{
    if (type >= PI_TYPE_COUNT || traits_ref[type].name == NULL)
        return NULL;
    return &traits_ref[type];
}

const struct pi_type_traits *quant_traits(uint32_t type)
{
    if (type >= PI_TYPE_COUNT || traits_ref[type].name == NULL)
        return NULL;
    quant_init();
    if (atomic_load_explicit(&quant_scalar, memory_order_relaxed))
        return &traits_ref[type];
    return &traits_fast[type];
}

bool quant_has_avx2(void)
{
    quant_init();
    return quant_avx2_active && !atomic_load_explicit(&quant_scalar, memory_order_relaxed);
}

int quant_type_from_name(const char *name)
{
    if (name == NULL)
        return -1;
    for (int t = 0; t < PI_TYPE_COUNT; t++)
        if (traits_ref[t].name && strcmp(traits_ref[t].name, name) == 0)
            return t;
    return -1;
}

size_t quant_row_size(uint32_t type, int64_t n)
{
    const struct pi_type_traits *t = quant_traits_ref(type);
    if (t == NULL || n < 0 || n % t->blck_size != 0)
        return 0;
    return (size_t)(n / t->blck_size) * t->type_size;
}

/* y[r] = W[r,:] · x for r in [r0, r1) */
void quant_gemv_rows(uint32_t type, const void *W, size_t row_bytes, int64_t n, const void *x_vd,
                     float *y, int64_t r0, int64_t r1)
{
    const struct pi_type_traits *t = quant_traits(type);
    if (t == NULL || t->vec_dot == NULL) {
        /* The loader rejects such tensors; if one slips through, poison the output rather than crash. */
        for (int64_t r = r0; r < r1; r++)
            y[r] = NAN;
        return;
    }
#if defined(PI_HAVE_AVX2_UNIT)
    if (t == &traits_fast[type] && quant_avx2_active &&
        quant_avx2_gemv_rows(type, W, row_bytes, n, x_vd, y, r0, r1))
        return;
#endif
    const pi_vec_dot_fn dot = t->vec_dot;
    const char *w = W;
    for (int64_t r = r0; r < r1; r++)
        dot(n, &y[r], w + (size_t)r * row_bytes, x_vd);
}
