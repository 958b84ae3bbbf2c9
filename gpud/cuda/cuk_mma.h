/* cuk_mma.h — F16 / BF16 matrix products on the tensor cores (mma.sync m16n8k16, f32 accumulate), one
 * kernel family for every batch size (cuk_mma.cu implements them; cuk_gemv.cu dispatches to them).
 *
 * Why: the CUDA-core GEMV (cuk_gemv.cu k_gemv) is batch-invariant but runs prefill at a fraction of the
 * tensor cores' rate. These kernels compute every (row, token) output with the same instruction
 * sequence whatever the batch: tokens are the mma's N dimension (padded to 8; decode is memory-bound,
 * the empty columns cost nothing), K is split into CUK_MMA_KS fixed ranges of 64-element chunks (a
 * function of K alone), each range accumulated chunk by chunk in order, the ranges added in range
 * order. Decode (B ≤ 8) runs the ranges on the warps of a block and adds them through shared memory;
 * prefill (more tokens) runs them one after the other in one warp and adds them in registers: the
 * same additions in the same order, so the bits are equal.
 *
 * Weights stay in the GGUF layout: a K-permutation that A and B share lets each thread load 16-byte
 * words of its two rows (row g and g + 8 of the tile, 64 contiguous bytes per quad), so no repacking
 * and any row order (the sparse path's gathered rows) works.
 *
 * Activations: the f32 row x of a token is split into f16 (bf16) hi = round(x) and lo = round(x − hi):
 * x = hi + lo to ~22 bits (~16 for bf16) and W·x = W·hi + W·lo with exact products (two mmas per
 * k16 tile). This keeps the F16 path within the CPU's f32 tolerances (test_cuda_ops NMSE ≤ 1e-8).
 * BF16 always runs so; F16 only with PINFER_CUDA_MMA_ACT=split (its default is the f16 mode below).
 * Decode converts in the kernel as it loads x; prefill converts once per op into the scratch xh.
 * Limits of f16: |x| ≥ 65520 becomes inf (as in the cuBLAS f16 path), and below 2^-2 the lo part
 * loses bits to f16's subnormals (an absolute error ≤ 2^-25 per element). BF16 has neither.
 *
 * The f16 mode, F16 weights' default (read once, like PINFER_CUDA_MMA; PINFER_CUDA_MMA_ACT=split turns
 * it off): the activation is rounded to f16 once (hi only, what cuBLAS's f16 GEMM of the same product
 * and llama.cpp's F16 prefill see) and each k16 tile is ONE mma — half the tensor-core work and half
 * the staged activation bytes of the prefill kernels (d16 pp512 on the H200: 11 300 against the
 * split's 6 260 tok/s). Every kernel of the family (decode, the streamed decode kernel, both prefill kernels)
 * switches together (one template parameter), so the invariance contract holds as in the split
 * mode. Error: each element gets a relative error ≤ u = 2^-11 (absolute ≤ 2^-25 below 2^-14), so
 * a product's NMSE against f32 is about E[δ²] ≤ u² ≈ 2.4e-7 (u²/3 for uniform δ) instead of ≤ 1e-8
 * (test_cuda_mma derives and checks the bound). BF16 weights always keep the split (bf16 has only
 * 8 mantissa bits: one rounding would cost an NMSE of ~2^-16 / 3 ≈ 5e-6). */
#ifndef PI_CUK_MMA_H
#define PI_CUK_MMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuk.h"

#define CUK_MMA_KS 8 /* K ranges (the fixed split-K; also the decode kernel's warps per block) */

/* The types these kernels take (F16, BF16) and whether they are in use: PINFER_CUDA_MMA=0 in the
 * environment falls back to cuk_gemv.cu's CUDA-core kernels (benchmarks: the A/B in one run). */
bool cuk_mma_type(uint32_t type);
bool cuk_mma_on(uint32_t type);
/* Whether products of this weight type round the activation to f16 once (F16 weights, unless
 * PINFER_CUDA_MMA_ACT=split) instead of splitting it into hi + lo. */
bool cuk_mma_act16(uint32_t type);
/* Scratch bytes per token of the split activation (hi, lo; 16 bytes of slack) for n_in inputs (the
 * f16 mode uses the first half). */
size_t cuk_mma_x_row_bytes(int64_t n_in);

/* cuk_gemv / cuk_gemv_split3 for F16 / BF16 weights (mode, y, thr as there; y1, y2, n0, n1 the
 * split3 outputs, else NULL / 0). xh: B × cuk_mma_x_row_bytes(n_in) bytes of scratch (used when
 * B > 8). */
int cuk_mma_gemv(const struct cuk_w *w, const float *x, int B, void *y, int mode, float thr, float *y1, float *y2,
                 int64_t n0, int64_t n1, void *xh, void *st);
/* cuk_glu for F16 / BF16 weights, the same arguments. */
int cuk_mma_glu(const struct cuk_w *gate, const struct cuk_w *up, const float *x, int B, float *act, int act_kind,
                const int32_t *idx, const int32_t *cnt, int64_t idx_stride, bool compact, void *xh, void *st);

#endif
