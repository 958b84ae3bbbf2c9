/* quant_half.c — f16 and bf16 <-> f32 conversion, exact IEEE rounding (the scalar reference that
 * F16C's vcvtps2ph/vcvtph2ps must match bit for bit). */
#include "quant.h"

#include <string.h>

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

