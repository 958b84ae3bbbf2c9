/* quant_internal.h — what the quant files share and nothing else sees: the functions that fill the
 * reference traits table (one per file that owns types) and the rounding helper of ggml's
 * quantizers. */
#ifndef PI_QUANT_INTERNAL_H
#define PI_QUANT_INTERNAL_H

#include "quant.h"

#include <string.h>

/* quant_ref.c: F32, F16, BF16 and the 32-element block types (Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 IQ4_NL). */
void quant_ref_fill(struct pi_type_traits *traits, size_t count);
/* quant_kquants.c: Q2_K..Q6_K, Q8_K, IQ4_XS. */
void quant_kquants_fill(struct pi_type_traits *traits, size_t count);
/* quant_avx2_kquants.c (AVX2 flags; only after cpuid, as quant_avx2_install): the kernels of the
 * K-quants, IQ4_XS, Q4_1, Q5_0, Q5_1, IQ4_NL. */
void quant_avx2_kquants_install(struct pi_type_traits *traits, size_t count);
/* quant_avx2_kdot.c (AVX2 flags; only after cpuid): the Q4_K/Q5_K/Q6_K dots, bitwise the reference,
 * and their multi-row GEMV (false, computing nothing, for the other types). */
void quant_avx2_kdot_install(struct pi_type_traits *traits, size_t count);
bool quant_avx2_kdot_gemv_rows(uint32_t type, const void *W, size_t row_bytes, int64_t n, const void *x_vd,
                               float *y, int64_t r0, int64_t r1);
/* quant_avx2_kquants.c: the two-row GEMV of Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, Q2_K and Q3_K (false,
 * computing nothing, for the other types; Q4_K/Q5_K/Q6_K are quant_avx2_kdot's) */
bool quant_avx2_v32_gemv_rows(uint32_t type, const void *W, size_t row_bytes, int64_t n, const void *x_vd, float *y,
                              int64_t r0, int64_t r1);

/* The scale searches of the K-quant quantizers, over the nsub sub-blocks (len elements each) of one
 * super-block at once. quant_kquants.c has the reference (ggml's searches, one sub-block after the
 * other) and the quantizers around them; quant_avx2_kquantize.c does the same float operations
 * eight sub-blocks to a vector, so the bytes are the same.
 *  qkx2: ggml's make_qkx2_quants per sub-block with weights w: L gets quants 0..nmax, scales[j] the
 *        scale and mins[j] the negated min (>= 0).
 *  qx:   ggml's make_qx_quants (rmse_type 1, weights x^2): L gets l + nmax, scales[j] the scale. */
struct quant_ksearch {
    void (*qkx2)(int nsub, int len, int nmax, const float *x, const float *w, uint8_t *L, float *scales, float *mins,
                 float rmin, float rdelta, int nstep, bool use_mad);
    void (*qx)(int nsub, int len, int nmax, const float *x, int8_t *L, float *scales);
};
extern const struct quant_ksearch quant_ksearch_ref;
/* The quantizers of those types (n a multiple of 256) over a search. */
void quant_q2_K_quantize(const struct quant_ksearch *srch, const float *x, void *dst, int64_t n);
void quant_q4_K_quantize(const struct quant_ksearch *srch, const float *x, void *dst, int64_t n);
void quant_q5_K_quantize(const struct quant_ksearch *srch, const float *x, void *dst, int64_t n);
void quant_q6_K_quantize(const struct quant_ksearch *srch, const float *x, void *dst, int64_t n);
/* quant_avx2_kquantize.c (AVX2 flags; only after cpuid): those four quantizers over the vector search. */
void quant_avx2_kquantize_install(struct pi_type_traits *traits, size_t count);

/* Round to nearest, ties to even, for |f| < 2^22: adding 1.5 * 2^23 leaves the integer in the low
 * mantissa bits (the float addition does the rounding). The quantizers use this rounding (not
 * roundf) because ggml's do, so that their bytes agree; out-of-range inputs give garbage, not UB. */
#define QUANT_ROUND_MAGIC 12582912.0f /* 1.5 * 2^23 */
#define QUANT_ROUND_MANT 0x007fffff
#define QUANT_ROUND_BIAS 0x00400000
static inline int quant_nearest_int(float f)
{
    float v = f + QUANT_ROUND_MAGIC;
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & QUANT_ROUND_MANT) - QUANT_ROUND_BIAS;
}

/* The IQ4 value grid (quant_blocks.h), and the index of its value nearest to x (ties to the upper
 * one unless strictly closer to the lower), as ggml's quantizers pick it. */
extern const int8_t quant_iq4nl_values[16];
int quant_iq4_best_index(float x);

/* The IQ4_NL/IQ4_XS block quantizer (quant_ref.c), shared by both types: n elements (32 for
 * IQ4_NL, 256 for IQ4_XS) in sub-blocks of 32, writing d, qs and (IQ4_XS) the six-bit sub-scales. */
void quant_iq4_quantize(int n, const float *x, pi_f16 *d, uint8_t *qs, uint16_t *scales_h, uint8_t *scales_l);

#endif
