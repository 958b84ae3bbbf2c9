/* cuk_hand.h — the per-layer hand-off between gpud's device and the host's share of the FFN (hybrid
 * GPU + CPU, docs/ARCHITECTURE.md "The per-layer hand-off"), as kernels over mapped host memory: no
 * copy engine, no event and no host thread between the device and cpud (cuk_hand.cu). Same
 * conventions as cuk.h: device pointers (a mapped host range's device address), a stream as void *,
 * 0 or a negative cudaError_t of the launch.
 *
 * Memory orders (PTX, system scope): out's writes are ordered before its key by a system fence in
 * every writing thread, a barrier, and a release store of the key; add reads its share only after
 * observing the share's key (or the release word) and a system fence, with loads that bypass the
 * caches (the same host addresses are read again every layer). */
#ifndef PI_CUK_HAND_H
#define PI_CUK_HAND_H

#include <stdint.h>

/* One token's cold active neurons as bits, beside its mask: bits (mapped host memory, (n_ff + 63) / 64
 * words) = mask ∧ cold, cold the layer's neurons not placed on the device: cold_tab (device, the same
 * layout, made once when the layer is placed: cuk_cold_table) when 0 < n_hot < n_ff; n_hot == 0: every
 * neuron cold, n_hot == n_ff: none (cold_tab unused). */
struct cuk_cold {
    const uint64_t *cold_tab;
    int64_t n_hot, n_ff;
    uint64_t *bits;
};

/* tab[w] (host, (n_ff + 63) / 64 words) = the neurons of 64 w .. 64 w + 63 not among hot_ids (ascending
 * or not, each < n_ff), bits past n_ff clear */
void cuk_cold_table(const int32_t *hot_ids, int64_t n_hot, int64_t n_ff, uint64_t *tab);

/* h (n_h bytes, 0: h went out before) = x, hmask (n_mask bytes) = mask, cold->bits when cold is not
 * NULL (one token: mask is its row), then *key = seq: h, hmask, bits and key in mapped host memory
 * (hmask/mask NULL when n_mask is 0). One block: a decode step moves ~29 KiB. */
int cuk_hand_out(const void *x, int64_t n_h, const uint8_t *mask, int64_t n_mask, void *h, uint8_t *hmask,
                 const struct cuk_cold *cold, uint64_t *key, uint64_t seq, void *st);

/* x[i] += pending[i] + y[i] for i < n, where y is y_key once *key == seq (the host share's writer
 * stores the key after it), or y_rel once *rel >= seq (the host releases the wait with its own share,
 * or with anything when the step is abandoned): the device waits for one of them, each block's
 * first thread polling. key, y_key, rel, y_rel in mapped host memory. */
int cuk_hand_add(float *x, const float *pending, const float *y_key, const uint64_t *key, const float *y_rel,
                 const uint64_t *rel, uint64_t seq, int64_t n, void *st);

#endif
