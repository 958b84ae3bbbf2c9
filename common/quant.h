/* quant.h — tensor element types with exact GGUF/ggml block layouts, one traits table.
 *
 * A row of n elements (n a multiple of the type's block size) is stored as n/blck blocks of
 * type_size bytes. Every type provides to_float, from_float (quantize), and vec_dot against a row of
 * its vec_dot_type: F32/F16/BF16 weights dot an F32 activation; the 32-element block types dot a
 * Q8_0-quantized activation, the 256-element ones (K-quants, IQ4_XS) a Q8_K one (as ggml does: the
 * activation is quantized once per matvec). Each kernel has a
 * scalar reference; AVX2/FMA/F16C and AVX-512 versions are chosen at run time by quant_init()
 * (cpuid), so one binary runs everywhere.
 *
 * Files: quant_blocks.h (block layouts), quant.c (the table and the dispatch), quant_half.c (f16/bf16
 * conversion), quant_ref.c (float and 32-element block types), quant_kquants.c (256-element
 * super-block types and Q8_K), quant_avx2*.c (the AVX2 kernels), quant_avx512.c (the AVX-512 ones). */
#ifndef PI_QUANT_H
#define PI_QUANT_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quant_blocks.h"

/* ggml type numbers, as stored in GGUF tensor infos. */
enum pi_type {
    PI_TYPE_F32 = 0,
    PI_TYPE_F16 = 1,
    PI_TYPE_Q4_0 = 2,
    PI_TYPE_Q4_1 = 3,
    PI_TYPE_Q5_0 = 6,
    PI_TYPE_Q5_1 = 7,
    PI_TYPE_Q8_0 = 8,
    PI_TYPE_Q2_K = 10,
    PI_TYPE_Q3_K = 11,
    PI_TYPE_Q4_K = 12,
    PI_TYPE_Q5_K = 13,
    PI_TYPE_Q6_K = 14,
    PI_TYPE_Q8_K = 15, /* the K-quants' activation type (ggml never stores it in files) */
    PI_TYPE_IQ4_NL = 20,
    PI_TYPE_IQ4_XS = 23,
    PI_TYPE_I32 = 26, /* gpuidx tensors; no arithmetic */
    PI_TYPE_BF16 = 30,
    PI_TYPE_COUNT = 40 /* table size; numbers between are unknown types */
};

typedef void (*pi_to_float_fn)(const void *src, float *dst, int64_t n);
typedef void (*pi_from_float_fn)(const float *src, void *dst, int64_t n);
/* *s = dot(x[0..n), y[0..n)); x in this type, y in vec_dot_type. */
typedef void (*pi_vec_dot_fn)(int64_t n, float *s, const void *x, const void *y);
/* y[0..n) += a * dequant(x[0..n)), x a row of this type: the sparse FFN's down_t rows (AXPY). For
 * quantized types the block scale is folded first (s = a * d, y += s * q), each update one fused
 * multiply-add, so the scalar and AVX2 kernels agree bit for bit. */
typedef void (*pi_axpy_fn)(int64_t n, float *y, float a, const void *x);
/* *s = dot over elements [i0, i1) of whole rows x (this type) and y (vec_dot_type), i0 and i1
 * multiples of sub_size: a part of a super-block, for the sparse FFN's runs over ffn_down. */
typedef void (*pi_vec_dot_sub_fn)(int64_t i0, int64_t i1, float *s, const void *x, const void *y);

struct pi_type_traits {
    const char *name;       /* ggml's name: "f32", "q8_0", "q4_K", "iq4_xs", "i32"... */
    int blck_size;          /* elements per block */
    size_t type_size;       /* bytes per block */
    bool is_float_matmul;   /* has kernels (false for I32 / unknown) */
    enum pi_type vec_dot_type;
    pi_to_float_fn to_float;
    pi_from_float_fn from_float;
    pi_vec_dot_fn vec_dot;
    pi_axpy_fn axpy;        /* NULL for I32 */
    int sub_size;           /* the finest cut of a row vec_dot_sub takes: the sub-block length of the
                             * super-block types (16 or 32), else blck_size */
    pi_vec_dot_sub_fn vec_dot_sub; /* (optional) the super-block types; NULL: cut rows at whole blocks */
};

/* Kernel levels, each a complete table: the scalar reference (the oracle), AVX2 (+FMA, F16C), and
 * AVX-512 (F, BW, VL, DQ, VNNI, VBMI: Q4_0 and the Q6_K dot; the other types keep their AVX2
 * kernels and multi-row paths). For one level a row's dot is the same bits whether computed by
 * vec_dot, quant_gemv_rows, quant_gemv_gather or quant_gemm_rows. */
enum pi_cpu_level { PI_CPU_SCALAR = 0, PI_CPU_AVX2 = 1, PI_CPU_AVX512 = 2, PI_CPU_LEVELS = 3 };

/* Pick the fastest kernels this CPU supports, or the level PINFER_CPU_LEVEL names (scalar, avx2,
 * avx512; a level the CPU lacks falls back to the best it has, with a note on stderr).
 * Idempotent and thread-safe; called by quant_traits. */
void quant_init(void);
/* Use the kernels of a level: 0, or -PI_E_UNSUPPORTED (nothing changed) if this CPU or build lacks it. */
int quant_set_level(enum pi_cpu_level level);
/* The level in use, and the best one this CPU and build support. */
enum pi_cpu_level quant_level(void);
enum pi_cpu_level quant_level_max(void);
/* "scalar", "avx2", "avx512"; and back (-1 if unknown). */
const char *quant_level_name(enum pi_cpu_level level);
int quant_level_from_name(const char *name);
/* Force the scalar reference kernels, or go back to the best level (tests; PINFER_SCALAR=1 in the
 * environment is PINFER_CPU_LEVEL=scalar). */
void quant_use_scalar(bool scalar);
/* Traits of a type, or NULL if the number is unknown. */
const struct pi_type_traits *quant_traits(uint32_t type);
/* The scalar reference traits of a type (for tests), or NULL. */
const struct pi_type_traits *quant_traits_ref(uint32_t type);
/* Type from a name ("q4_0"...), or -1. */
int quant_type_from_name(const char *name);
/* Bytes of a row of n elements; 0 if n is not a multiple of the block size or the type is unknown. */
size_t quant_row_size(uint32_t type, int64_t n);
/* True if the CPU kernels in use are the AVX2 ones or better (for logs and benchmarks). */
bool quant_has_avx2(void);

float pi_f16_to_f32(pi_f16 h);
pi_f16 pi_f32_to_f16(float f); /* round to nearest even */
float pi_bf16_to_f32(pi_bf16 h);
pi_bf16 pi_f32_to_bf16(float f); /* round to nearest even; NaN stays NaN */

/* y[r] = dot(W row r, x) for rows [r0, r1); x_vd is x already converted to W's vec_dot_type
 * (or x itself when that is F32). row_bytes = quant_row_size(type, n). */
void quant_gemv_rows(uint32_t type, const void *W, size_t row_bytes, int64_t n, const void *x_vd,
                     float *y, int64_t r0, int64_t r1);

/* y[r] = dot(rows[r], x) for r in [0, nrows): the multi-row GEMV over rows at any addresses (a sparse
 * FFN's live neurons, each of quant_row_size(type, n) bytes), the activation prepared once per call
 * where the kernels do that; bitwise vec_dot's per row at the same level. Rows are prefetched a
 * few ahead of the one computed, and no prefetch reaches past a row's end. */
void quant_gemv_gather(uint32_t type, int64_t n, const void *x_vd, const void *const *rows, int64_t nrows,
                       float *y);
/* The same with the activation prepared once for many calls (a sparse FFN layer gathers twice per
 * neuron group, ~86 times a token, over one x_vd): quant_gather_act_bytes is the size of the prepared
 * form at the current kernel level (0 when the type has none there: pass act NULL), which
 * quant_gather_act_prepare writes (64-byte aligned) and quant_gemv_gather_act reads, from any
 * thread; results bitwise quant_gemv_gather's. Prepare and gather at the same level. */
size_t quant_gather_act_bytes(uint32_t type, int64_t n);
void quant_gather_act_prepare(uint32_t type, int64_t n, const void *x_vd, void *act);
void quant_gemv_gather_act(uint32_t type, int64_t n, const void *x_vd, const void *act, const void *const *rows,
                           int64_t nrows, float *y);

/* y += Σ_k a[k] * rows[k] for k in [0, nr), each element's updates in order k: bitwise nr calls of
 * the type's axpy in that order (at the same level), after a memset of y to 0 if init. The sparse
 * FFN's down_t rows of one neuron group; the kernels keep a chunk of y in registers over a few rows. */
void quant_axpy_rows(uint32_t type, int64_t n, float *y, const float *a, const void *const *rows, int nr, bool init);
/* y += t, t = Σ_k a[k] * rows[k] summed from zero in order k: bitwise quant_axpy_rows into a zeroed
 * buffer t (init) followed by y[i] += t[i] (at the same level). One neuron group's rows over a slice
 * of columns (the sparse FFN by columns), t never written out where the kernels keep it in registers. */
void quant_axpy_rows_add(uint32_t type, int64_t n, float *y, const float *a, const void *const *rows, int nr);
/* whether quant_axpy_rows_add keeps t in registers for type at the current level (AVX2's kernels);
 * elsewhere it goes through a tile on the stack, slower than quant_axpy_rows into an accumulator */
bool quant_axpy_rows_add_native(uint32_t type);

/* Y_b[r] = dot(W row r, X_b) for rows [r0, r1) and the B activations X_b = X_vd + b * x_stride
 * (bytes, each in W's vec_dot_type), Y_b = Y + b * y_stride (floats): the batched matmul's tile,
 * which unpacks each weight block once for several tokens where the kernels can. Every value is
 * bitwise quant_gemv_rows' (and vec_dot's) at the same level. */
void quant_gemm_rows(uint32_t type, const void *W, size_t row_bytes, int64_t n, const void *X_vd, size_t x_stride,
                     int B, float *Y, size_t y_stride, int64_t r0, int64_t r1);

/* Internal, for quant.c: the AVX2 unit (quant_avx2.c, compiled with -mavx2 -mfma -mf16c) overwrites
 * the kernel pointers of the types it accelerates in a copy of the reference table. Only call it
 * after cpuid has reported AVX2, FMA and F16C (quant_init does). */
void quant_avx2_install(struct pi_type_traits *traits, size_t count);
/* Internal, for quant_gemv_rows: the AVX2 multi-row GEMV, which prepares the activation once per call
 * (block scales as f32, block sums) for the types where that pays. Returns false, computing nothing,
 * for the other types (and rows too long for its stack buffers); same preconditions as above. */
bool quant_avx2_gemv_rows(uint32_t type, const void *W, size_t row_bytes, int64_t n, const void *x_vd,
                          float *y, int64_t r0, int64_t r1);
/* and its gather (quant_gemv_gather's contract; act: quant_avx2_gather_act_prepare's, or NULL to
 * prepare here): false, computing nothing, for the types it lacks */
bool quant_avx2_gemv_gather(uint32_t type, int64_t n, const void *x_vd, const void *act, const void *const *rows,
                            int64_t nrows, float *y);
/* the prepared activation's bytes (0: none for this type / length) and its preparation */
size_t quant_avx2_gather_act_bytes(uint32_t type, int64_t n);
void quant_avx2_gather_act_prepare(uint32_t type, int64_t n, const void *x_vd, void *act);
/* and its multi-row AXPY (quant_axpy_rows' contract): false, computing nothing, for the types it lacks */
bool quant_avx2_axpy_rows(uint32_t type, int64_t n, float *y, const float *a, const void *const *rows, int nr,
                          bool init);
/* and its AXPY-then-add (quant_axpy_rows_add's contract): false, computing nothing, for the types it lacks */
bool quant_avx2_axpy_rows_add(uint32_t type, int64_t n, float *y, const float *a, const void *const *rows, int nr);
/* whether it has that kernel for type */
bool quant_avx2_has_axpy_rows_add(uint32_t type);
/* Internal, for quant.c: the AVX-512 unit (quant_avx512.c, compiled with its ISA flags), the same
 * entry points as the AVX2 unit's (false, computing nothing, for the types it lacks); only after cpuid
 * has reported AVX-512 F/BW/VL/DQ/VNNI/VBMI (quant_init does). */
void quant_avx512_install(struct pi_type_traits *traits, size_t count);
bool quant_avx512_gemv_rows(uint32_t type, const void *W, size_t row_bytes, int64_t n, const void *x_vd,
                            float *y, int64_t r0, int64_t r1);
bool quant_avx512_gemv_gather(uint32_t type, int64_t n, const void *x_vd, const void *act, const void *const *rows,
                              int64_t nrows, float *y);
size_t quant_avx512_gather_act_bytes(uint32_t type, int64_t n);
void quant_avx512_gather_act_prepare(uint32_t type, int64_t n, const void *x_vd, void *act);
bool quant_avx512_axpy_rows(uint32_t type, int64_t n, float *y, const float *a, const void *const *rows, int nr,
                            bool init);
bool quant_avx512_axpy_rows_add(uint32_t type, int64_t n, float *y, const float *a, const void *const *rows, int nr);
bool quant_avx512_has_axpy_rows_add(uint32_t type);
bool quant_avx512_gemm_rows(uint32_t type, const void *W, size_t row_bytes, int64_t n, const void *X_vd,
                            size_t x_stride, int B, float *Y, size_t y_stride, int64_t r0, int64_t r1);
/* and the AVX2 unit's GEMM tile (Q8_0/Q4_0; false, computing nothing, for the other types) */
bool quant_avx2_gemm_rows(uint32_t type, const void *W, size_t row_bytes, int64_t n, const void *X_vd,
                          size_t x_stride, int B, float *Y, size_t y_stride, int64_t r0, int64_t r1);

#endif
