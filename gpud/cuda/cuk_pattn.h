/* cuk_pattn.h — attention for prompt batches (cuk_pattn.cu): the same partials and merge as
 * cuk.cu's split-K attention (cuk_attn), computed with each chunk of 32 KV cells read once from
 * global memory for a tile of tokens instead of once per token.
 *
 * Why: cuk_attn runs one block per (token, head, chunk of 32 cells); on a 512-token prompt every
 * block re-reads its chunk of K and V, and the pp512 profile (bench/gpu/NOTES.md, "Tiled prefill
 * kernel") put attention at 22 ms of a 92 ms step. Measured: 26.6 ms with this kernel — reading
 * the chunks was not the cost (see the call-2 notes). Invariance: a token's partial (m, l, o) for a
 * chunk is computed with the operations of k_attn_part in its order — the scores' per-lane fmaf
 * chain and warp sum, the max and Σ exp over the 32 lanes as cells, the four 8-cell fmaf chains of
 * p·v (cells w, w + 4, .. for w = 0..3) added in w order — and the chunks are merged by the same
 * code, so a token's output is bitwise what cuk_attn gives it alone (test_cuda_ops: a prompt in one
 * batch = in chunks; bench_cuda's pp_invariant). */
#ifndef PI_CUK_PATTN_H
#define PI_CUK_PATTN_H

#include <stdbool.h>
#include <stdint.h>

#include "cuk.h"

/* cuk_attn's contract and arguments. With PINFER_CUDA_PATTN=1 in the environment, batches of more
 * than 8 tokens take the tiled kernel (when it takes the cache type and head size); everything else,
 * and every batch by default, cuk_attn: on the H200 the tiled kernel was slower (bench/gpu/NOTES.md,
 * "Tiled prefill kernel", call 2), with the same bits (test_cuda_ops, test_backend_ops). */
int cuk_pattn(const struct cuk_attn_geom *g, const float *q, const void *k_cache, const void *v_cache,
              const int32_t *pos, const int32_t *seq, float *out, float *part, int B, int32_t max_pos, void *st);

#endif
