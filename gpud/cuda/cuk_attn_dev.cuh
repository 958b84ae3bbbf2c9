/* cuk_attn_dev.cuh — the split-K attention's layout constants and its merge pass, one definition for
 * cuk.cu (decode attention) and cuk_pattn.cu (tiled prompt attention). Both write partials in the
 * same layout (per token, head and chunk of ATTN_CHUNK cells: D sums, then m and l) and merge them
 * with this one kernel, so a token's output is the same bits whichever pass 1 produced its partials.
 * Included by each .cu after struct cuk_attn_geom is declared (cuk.h / cuk_pattn.h) and after its
 * launched(); the kernel is static, so each object compiles its own copy of the same code (no -rdc:
 * kernels do not cross files). */
#ifndef CUK_ATTN_DEV_CUH
#define CUK_ATTN_DEV_CUH

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cuk_pdl.cuh" /* the merge is launched as a link of the decode chain */

#define ATTN_WARPS 4
#define ATTN_CHUNK 32 /* cells per block: the split of the cells is fixed, whatever the batch */
#define ATTN_GROUP 64 /* tokens per launch pair (bounds the partial buffer) */

/* Pass 2: the chunks of (token, head) merged in chunk order: out = Σ o_c e^(m_c − M) / Σ l_c e^(m_c − M). */
static __global__ void k_attn_merge(struct cuk_attn_geom g, const int32_t *pos, const float *part, float *out,
                                    int n_chunk)
{
    pdl_enter(); /* the partials are the previous kernel's (cuk_pdl.cuh) */
    const int tok = blockIdx.x, h = blockIdx.y, D = g.head_dim;
    const int nc = (pos[tok] + 1 + ATTN_CHUNK - 1) / ATTN_CHUNK;
    const float *pt = part + ((int64_t)tok * g.n_head + h) * n_chunk * (D + 2);
    float M = -INFINITY;
#pragma unroll 8
    for (int c = 0; c < nc; c++)
        M = fmaxf(M, pt[c * (D + 2) + D]);
    float L = 0.0f;
#pragma unroll 8
    for (int c = 0; c < nc; c++)
        L += pt[c * (D + 2) + D + 1] * expf(pt[c * (D + 2) + D] - M);
    float *ot = out + ((int64_t)tok * g.n_head + h) * D;
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        float a = 0.0f;
#pragma unroll 8
        for (int c = 0; c < nc; c++)
            a += pt[c * (D + 2) + i] * expf(pt[c * (D + 2) + D] - M);
        ot[i] = a / L;
    }
}

/* Both attentions' launches: the batch in groups of ATTN_GROUP tokens (the partial buffer holds one
 * group), each group's pass 1 (launch_part(t0, nt): cuk.cu's k_attn_part or cuk_pattn.cu's
 * k_pattn_part, each with its own grid) then the merge of its partials, in that order on st. */
template <class Part>
static int attn_groups(const struct cuk_attn_geom *g, const int32_t *pos, float *part, float *out, int B, int nch,
                       cudaStream_t st, const Part &launch_part)
{
    const int64_t Q = (int64_t)g->n_head * g->head_dim;
    for (int t0 = 0; t0 < B; t0 += ATTN_GROUP) {
        const int nt = B - t0 < ATTN_GROUP ? B - t0 : ATTN_GROUP;
        launch_part(t0, nt);
        int rc = launched();
        if (rc)
            return rc;
        pdl_launch(k_attn_merge, dim3((unsigned)nt, (unsigned)g->n_head), dim3(128), 0, st, *g, pos + t0,
                   (const float *)part, out + t0 * Q, nch);
        if ((rc = launched()))
            return rc;
    }
    return 0;
}

#endif
