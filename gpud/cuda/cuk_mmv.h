/* cuk_mmv.h — F16 / BF16 products of one token a block (a decode token; the sparse path's gathered
 * rows of up to 8 tokens, a block each) streamed through a cp.async shared-memory pipeline
 * (cuk_mmv.cu implements them; cuk_gemv.cu and cudev.c call them).
 *
 * Why: cuk_mma.cu's decode kernel gives every 16-row tile its own block of 8 warps, each loading two
 * 64-element chunks and then waiting for them, and the gathered FFN rows (~70 tiles at 10 % active)
 * leave most SMs idle. These kernels run one block per SM that walks its tiles in turn, each warp
 * keeping S − 1 chunks of its K range in flight across tile boundaries (the rows of the next tiles
 * load while this one is reduced; per thread by cp.async, or as one tensor-map box a warp's item where
 * the product runs one block an SM: PINFER_CUDA_MMV_TMA, cuk_mmv.cu); the token's row sits in shared memory (normalized there when the
 * RMSNorm is folded in). Measured (bench/gpu/NOTES.md, "Decode kernels"): faster for long streams
 * per block (q/k/v, gate/up, the gathered rows), slower where a block gets ≤ 2 tiles (wo, down) or
 * 2-chunk ranges (the predictor's fc2) — hence PINFER_CUDA_MMV's default below.
 *
 * Bits: every (row, token) output is computed with the instructions of cuk_mma.h's order — the same
 * CUK_MMA_KS fixed K ranges of 64-element chunks, the same fragment mapping and hi/lo split, each
 * range accumulated chunk by chunk in ascending order, the ranges added in range order — so the
 * outputs equal cuk_mma's decode and prefill kernels bit for bit (test_cuda_ops checks both on shapes
 * that give a block several tiles; test_cuda_mma and test_backend_ops check batch = alone with
 * PINFER_CUDA_MMV=2). If cuk_mma.cu's order changes, this file must follow it. */
#ifndef PI_CUK_MMV_H
#define PI_CUK_MMV_H

#include <stdbool.h>
#include <stdint.h>

#include "cuk.h"

/* PINFER_CUDA_MMV: 0 off; 1 the products that measured faster streamed without PDL — the ones with
 * the RMSNorm folded in (q/k/v, gate/up of one token) and the sparse path's gathered gate/up rows;
 * 2 (default) every one-token F16/BF16 product: with PDL on (cuk_pdl.cuh) it is the faster level on
 * d16 and s16 (bench/gpu/NOTES.md, 2026-12-02). */
int cuk_mmv_level(void);
bool cuk_mmv_on(void);
/* the most shared memory a block of the streamed kernel asks for (dynamic and static): a device whose
 * opt-in limit per block is lower cannot run the decode chain (cudev_available refuses it) */
size_t cuk_mmv_block_smem(void);
/* the streamed kernel takes w (n_in: its one token row must fit in shared memory after the ring) */
bool cuk_mmv_fits(const struct cuk_w *w, int nm);
/* cuk_mma_gemv's contract for B = 1 (y1, y2, n0, n1: the split3 outputs, else NULL / 0) */
int cuk_mmv_gemv(const struct cuk_w *w, const float *x, int B, void *y, int mode, float thr, float *y1, float *y2,
                 int64_t n0, int64_t n1, void *st);
/* cuk_mma_glu's contract, B = 1 dense or B ≤ 8 with idx (a block per token) */
int cuk_mmv_glu(const struct cuk_w *gate, const struct cuk_w *up, const float *x, int B, float *act, int act_kind,
                const int32_t *idx, const int32_t *cnt, int64_t idx_stride, bool compact, void *st);

/* RMSNorm then the product, one token: the norm computed in the product's blocks (each block
 * normalizes the row into shared memory while its first chunks load), the bits of cuk_rmsnorm into
 * xn followed by cuk_gemv_split3 / cuk_glu — which is what these do instead (xn written) when the
 * fused kernel does not apply (B > 1, other types, PINFER_CUDA_MMV=0, n_in too large). x: B rows of
 * n_in; norm_w: n_in; xn: B × n_in of scratch. One launch fewer per norm in the decode graph. */
int cuk_norm_gemv_split3(const struct cuk_w *w, const float *x, const float *norm_w, float eps, int B, float *xn,
                         float *y0, int64_t n0, float *y1, int64_t n1, float *y2, void *xq, void *st);
int cuk_norm_glu(const struct cuk_w *gate, const struct cuk_w *up, const float *x, const float *norm_w, float eps,
                 int B, float *xn, float *act, int act_kind, const int32_t *idx, const int32_t *cnt,
                 int64_t idx_stride, bool compact, void *xq, void *st);

/* cuk_norm_glu for one token over the rows a raw mask lists (mask: n_out bytes, non-zero = listed),
 * compact, without cuk_compact before it: each block of the gathered product scans the mask itself
 * and keeps its share of the list, and the kernel writes the list and its count as cuk_compact would
 * (idx[j], j < *cnt, stride idx_stride), for the AXPY after it: cuk_compact + cuk_norm_glu's bits.
 * Returns 1 where it does not apply (B > 1, the Q types, the norm not foldable, n_out over 16 384 or
 * over 256 rows a block, PINFER_CUDA_GLU_MASK=0): the caller runs those two. Its blocks normalize x
 * before their PDL wait (cuk_pdl.cuh): x must be no output of the kernel just before it in the
 * stream — in the decode chain the predictor's two products run between wo and it. */
int cuk_norm_glu_mask(const struct cuk_w *gate, const struct cuk_w *up, const float *x, const float *norm_w,
                      float eps, int B, float *act, int act_kind, const uint8_t *mask, int32_t *idx, int32_t *cnt,
                      int64_t idx_stride, void *st);

#endif
