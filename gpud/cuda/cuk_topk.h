/* cuk_topk.h — the k best logits of each row on the device (cuk_topk.cu), for sampling without
 * copying whole rows to the host. */
#ifndef PI_CUK_TOPK_H
#define PI_CUK_TOPK_H

#include <stddef.h>
#include <stdint.h>

/* Rows b in [0, B) of logits (n each): ids[b*k..] the k best (1 <= k <= CUK_TOPK_MAX, k <= n) in
 * samp_best's order (common/sampling.c: logit descending with -0 = +0 and NaN lowest, then the
 * lower id), vals[b*k..] their logits as stored. Enqueued on stream st; 0 or a negative cudaError.
 * The same launches for any B: a row's result does not depend on its batch. */
#define CUK_TOPK_MAX 64
int cuk_topk(const float *logits, int B, int64_t n, int k, int32_t *ids, float *vals, void *scratch, void *st);
/* device bytes `scratch` must hold for up to B rows of n (the slices' candidates; 0: none needed) */
size_t cuk_topk_scratch_bytes(int B, int64_t n);
/* The same from and to host memory, synchronously, on the current device (tests). */
int cuk_topk_host(const float *rows, int B, int64_t n, int k, int32_t *ids, float *vals);

#endif
