/* quant_blocks.h — the on-disk block layouts of the quantized GGUF types, byte for byte as ggml
 * defines them (ggml-common.h), each with a static_assert on its size. Nothing here computes.
 *
 * Two families:
 *  - 32-element blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL): one f16 scale (and a min for the
 *    _1 types); element j of a block sits in the low nibble of byte j, element j+16 in its high
 *    nibble; the 5th bit of Q5 quants is bit j of the 32-bit qh.
 *  - 256-element super-blocks (the K-quants, IQ4_XS): an f16 super-scale (and super-min) times
 *    small integer per-sub-block scales (16 sub-blocks of 16 or 8 of 32), see each struct. Q8_K is
 *    the activation type their dot products take, as in ggml. */
#ifndef PI_QUANT_BLOCKS_H
#define PI_QUANT_BLOCKS_H

#include <assert.h>
#include <stdint.h>

typedef uint16_t pi_f16;  /* IEEE half bits */
typedef uint16_t pi_bf16; /* bfloat16 bits */

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK4_NL 32
#define QK_K 256          /* elements per super-block */
#define K_SCALE_SIZE 12   /* Q4_K/Q5_K: 8 six-bit scales and 8 six-bit mins packed in 12 bytes */

/* Q4_0: scale d, then 32 4-bit quants; value = (q - 8) * d. */
struct block_q4_0 {
    pi_f16 d;
    uint8_t qs[QK4_0 / 2];
};
static_assert(sizeof(struct block_q4_0) == 18, "block_q4_0 layout must match ggml");

/* Q4_1: scale d, min m, 32 4-bit quants; value = q * d + m. */
struct block_q4_1 {
    pi_f16 d;
    pi_f16 m;
    uint8_t qs[QK4_1 / 2];
};
static_assert(sizeof(struct block_q4_1) == 20, "block_q4_1 layout must match ggml");

/* Q5_0: scale d, the 5th bits (bit j = element j), 32 low nibbles; value = (q - 16) * d. */
struct block_q5_0 {
    pi_f16 d;
    uint8_t qh[4];
    uint8_t qs[QK5_0 / 2];
};
static_assert(sizeof(struct block_q5_0) == 22, "block_q5_0 layout must match ggml");

/* Q5_1: scale d, min m, 5th bits, low nibbles; value = q * d + m. */
struct block_q5_1 {
    pi_f16 d;
    pi_f16 m;
    uint8_t qh[4];
    uint8_t qs[QK5_1 / 2];
};
static_assert(sizeof(struct block_q5_1) == 24, "block_q5_1 layout must match ggml");

/* Q8_0: scale d, 32 int8 quants; value = q * d. */
struct block_q8_0 {
    pi_f16 d;
    int8_t qs[QK8_0];
};
static_assert(sizeof(struct block_q8_0) == 34, "block_q8_0 layout must match ggml");

/* IQ4_NL: scale d, 32 4-bit indices into the non-linear table quant_iq4nl_values; value =
 * d * values[q]. */
struct block_iq4_nl {
    pi_f16 d;
    uint8_t qs[QK4_NL / 2];
};
static_assert(sizeof(struct block_iq4_nl) == 18, "block_iq4_nl layout must match ggml");

/* Q2_K: 16 sub-blocks of 16; scales[j] = scale (low nibble) | min (high nibble); 2-bit quants,
 * byte l of each 32-byte group holds elements l, l+32, l+64, l+96 of its 128 (bits 0-1, 2-3, 4-5,
 * 6-7); value = d * scale * q - dmin * min. */
struct block_q2_K {
    uint8_t scales[QK_K / 16];
    uint8_t qs[QK_K / 4];
    pi_f16 d;
    pi_f16 dmin;
};
static_assert(sizeof(struct block_q2_K) == 84, "block_q2_K layout must match ggml");

/* Q3_K: 16 sub-blocks of 16; high bit of each quant in hmask (bit k of byte m: element 32k + m),
 * low 2 bits as in Q2_K; 16 six-bit scales (offset 32) packed in 12 bytes; value =
 * d * (scale - 32) * (q - 4), q the 3-bit quant. */
struct block_q3_K {
    uint8_t hmask[QK_K / 8];
    uint8_t qs[QK_K / 4];
    uint8_t scales[12];
    pi_f16 d;
};
static_assert(sizeof(struct block_q3_K) == 110, "block_q3_K layout must match ggml");

/* Q4_K: 8 sub-blocks of 32; six-bit scales and mins packed in 12 bytes; byte l of each 32-byte
 * group holds elements l (low nibble) and l+32 (high) of its 64; value = d*sc*q - dmin*m. */
struct block_q4_K {
    pi_f16 d;
    pi_f16 dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qs[QK_K / 2];
};
static_assert(sizeof(struct block_q4_K) == 144, "block_q4_K layout must match ggml");

/* Q5_K: Q4_K plus a 5th bit per quant: bit 2g (element 64g + l) and 2g+1 (64g + 32 + l) of qh[l]. */
struct block_q5_K {
    pi_f16 d;
    pi_f16 dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
};
static_assert(sizeof(struct block_q5_K) == 176, "block_q5_K layout must match ggml");

/* Q6_K: 16 sub-blocks of 16 with int8 scales; per 128 elements, 64 bytes of low nibbles (ql[l]:
 * elements l | l+64, ql[l+32]: l+32 | l+96) and 32 bytes of high 2-bit pairs (qh[l]: elements l,
 * l+32, l+64, l+96); value = d * scale * (q - 32). */
struct block_q6_K {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    pi_f16 d;
};
static_assert(sizeof(struct block_q6_K) == 210, "block_q6_K layout must match ggml");

/* Q8_K: the K-quants' activation: f32 scale, 256 int8 quants, and the sum of every 16 quants
 * (the min terms of the dot products need only those). value = d * q. */
struct block_q8_K {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
};
static_assert(sizeof(struct block_q8_K) == 292, "block_q8_K layout must match ggml");

/* IQ4_XS: 8 sub-blocks of 32; six-bit scales (offset 32): low 4 bits in scales_l (two per byte,
 * even sub-block low nibble), high 2 bits in scales_h (bits 2j, 2j+1); quants as IQ4_NL; value =
 * d * (scale - 32) * values[q]. */
struct block_iq4_xs {
    pi_f16 d;
    uint16_t scales_h;
    uint8_t scales_l[QK_K / 64];
    uint8_t qs[QK_K / 2];
};
static_assert(sizeof(struct block_iq4_xs) == 136, "block_iq4_xs layout must match ggml");

/* The 16 values of IQ4_NL/IQ4_XS (ggml's kvalues_iq4nl: a fixed non-linear grid, data of the
 * format). */
#define IQ4_NL_VALUES { -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113 }

#endif
