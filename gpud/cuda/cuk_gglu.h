/* cuk_gglu.h — the sparse path's gathered gate/up rows (one token a cluster row) on clusters of CTAs
 * sharing each 16-row tile's K ranges (cuk_gglu.cu: why, and the bits — equal to cuk_mmv.cu's and
 * cuk_mma.cu's gathered GLU bit for bit). cuk_mmv.cu calls it for its gathered products when it is on. */
#ifndef PI_CUK_GGLU_H
#define PI_CUK_GGLU_H

#include <stdbool.h>
#include <stdint.h>

/* PINFER_CUDA_GGLU=0 turns it off (the streamed kernel's gathered products instead); read once */
bool cuk_gglu_on(void);
/* rows of n_in elements fit its shared memory */
bool cuk_gglu_fits(int64_t n_in);
/* act[tok][j] (compact, else at the row) = glu(gate row · x_tok, up row · x_tok) for the listed rows
 * idx[tok][j], j < cnt[tok], of B tokens. gate, up: F16 or BF16 rows of n_in (type); norm_w: the
 * RMSNorm weight folded in (x the un-normalized rows; eps), or NULL (x normalized already). */
int cuk_gglu(uint32_t type, const void *gate, const void *up, int64_t n_in, int64_t n_out, const float *x,
             const float *norm_w, float eps, int B, float *act, int act_kind, const int32_t *idx, const int32_t *cnt,
             int64_t idx_stride, bool compact, void *st);

#endif
