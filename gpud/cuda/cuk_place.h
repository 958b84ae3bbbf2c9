/* cuk_place.h — the kernels of the placement (hybrid GPU + CPU): what a layer that holds only its
 * hot neurons' rows needs beside cuk.h's kernels (cuk_place.cu). Same conventions as cuk.h: device
 * pointers, a stream as void *, 0 or a negative cudaError_t of the launch. */
#ifndef PI_CUK_PLACE_H
#define PI_CUK_PLACE_H

#include <stdint.h>

/* out (B, n_hot)[b][j] = mask (B, n_ff)[b][ids[j]]: each token's mask on a layer's hot rows. */
int cuk_gather_mask(const uint8_t *mask, int B, int64_t n_ff, const int32_t *ids, int64_t n_hot, uint8_t *out,
                    void *st);

#endif
