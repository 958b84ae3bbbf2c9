/* cuk_pattn.h — attention for prompt batches (cuk_pattn.cu): the output cuk_attn_dev.cuh defines,
 * bit for bit what cuk_attn.cu's split-K attention (cuk_attn, the decode path) gives, computed by one
 * block per (head, tile of 16 tokens) that reads each chunk of 32 KV cells once for the tile and
 * keeps the tile's merge state itself (pp512 d16: attention 22.4 → 5.5 ms a step, bench/gpu/NOTES.md).
 *
 * Why: cuk_attn runs one block per (token, head, chunk of 32 cells): on a 512-token prompt every
 * chunk is re-read by up to 512 blocks, each a chain of small latency-bound steps, and the pp512
 * profile (bench/gpu/NOTES.md, "Tiled prefill kernel") put attention at 22 ms of a 92 ms step.
 * Invariance (issue 8): the two kernels perform, per token, the same floating-point operations in
 * the same order (cuk_attn_dev.cuh: the scores' quarter chains, each chunk's softmax, the p·v
 * chains, the chunks' online merge in chunk order), so a token's output is the same whether its
 * prompt ran in one batch, in chunks, token by token, or next to other sequences (test_cuda_ops,
 * test_backend_ops, bench_cuda's pp_invariant). */
#ifndef PI_CUK_PATTN_H
#define PI_CUK_PATTN_H

#include <stdbool.h>
#include <stdint.h>

#include "cuk.h"

/* The tiled kernel takes batches of more than PATTN_MIN_BATCH tokens whose runs of one sequence
 * (in batch order) are PATTN_MIN_RUN tokens long on average: a tile walks each of its sequences'
 * chunks in turn, which costs a mixed decode batch more than cuk_attn's block per token. */
#define PATTN_MIN_BATCH 8
#define PATTN_MIN_RUN 8

/* cuk_attn's contract and arguments, plus n_runs: the number of maximal runs of equal seq[] in the
 * batch (the host's count; it picks the kernel, never the bits). PINFER_CUDA_PATTN=0: always
 * cuk_attn; =2: the tiled kernel for every batch of more than one token. PINFER_CUDA_PATTN_TT=32
 * (tiles of 32 tokens) and PINFER_CUDA_PATTN_PF=1 (the next chunk loaded during this one): the
 * variants measured, same bits. part is cuk_attn's (unused by the tiled kernel). */
int cuk_pattn(const struct cuk_attn_geom *g, const float *q, const void *k_cache, const void *v_cache,
              const int32_t *pos, const int32_t *seq, float *out, float *part, int B, int32_t max_pos, int n_runs,
              void *st);

#endif
