/* cuk_attn_dev.cuh — what a token's attention output IS, bit for bit, written once for the two
 * kernels that compute it: cuk.cu's split-K attention (decode and small batches: k_attn_part per
 * chunk, then k_attn_merge) and cuk_pattn.cu's tiled prompt attention (k_pattn: one block per tile
 * of tokens and head, walking the chunks itself). Each kernel arranges the work its own way; the
 * floating-point operations on a token's values, and their order, are the ones below in both, so a
 * token's output does not depend on which kernel ran, on the batch, or on how the prompt was chunked.
 *
 * The definition, for a token with (rotated) query q and the cells 0..pos of its sequence, cut into
 * fixed chunks of ATTN_CHUNK cells at absolute cell indices (chunk c = cells [32c, 32c + 32)):
 *  - score of cell t: s_t = (((d_0 + d_1) + d_2) + d_3) · scale, where d_j is the fmaf chain
 *    Σ q_i k_t,i over the j-th quarter of the head's dims in ascending i, starting from 0, and
 *    scale = 1 / sqrtf(D) (attn_score);
 *  - per chunk, over its n cells ≤ pos (one lane a cell): m = max s_t, p_t = expf(s_t − m),
 *    l = the warp butterfly sum of p_t (attn_chunk_softmax); o_i = the fmaf chain Σ p_t v_t,i over
 *    the chunk's cells t < n in ascending t, starting from 0;
 *  - the chunks merged in ascending order by the online recurrence from M = −∞, L = 0, A_i = 0:
 *    M' = max(M, m), α = expf(M − M'), β = expf(m − M'), L = L·α + l·β, A_i = A_i·α + o_i·β
 *    (attn_merge_step, attn_merge_acc); out_i = A_i / L.
 * Every rounding is explicit (__fmaf_rn, __fadd_rn, __fmul_rn): nvcc cannot contract differently in
 * the two objects. Included by each .cu after struct cuk_attn_geom is declared (cuk.h / cuk_pattn.h)
 * and after its launched(); the kernels are static (no -rdc: kernels do not cross files). */
#ifndef CUK_ATTN_DEV_CUH
#define CUK_ATTN_DEV_CUH

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cuk_pdl.cuh" /* the merge is launched as a link of the decode chain */

#define ATTN_WARPS 4
#define ATTN_CHUNK 32 /* cells per chunk: the split of the cells is fixed, whatever the batch */
#define ATTN_QSEG 4   /* a score's dims in 4 quarters: 4 short chains (decode: 4 threads a cell) */
#define ATTN_GROUP 64 /* tokens per launch pair of the split-K path (bounds the partial buffer) */

__device__ static inline float attn_scale(int D) { return 1.0f / sqrtf((float)D); }

/* s_t from the quarters' chains d_0..d_3 */
__device__ static inline float attn_score(float d0, float d1, float d2, float d3, float scale)
{
    return __fmul_rn(__fadd_rn(__fadd_rn(__fadd_rn(d0, d1), d2), d3), scale);
}

/* One chunk's softmax over a full warp, lane t = cell t (valid: t < the chunk's cells ≤ pos):
 * returns p_t (0 for an invalid lane), *m and *l the chunk's max and Σ p (the same in every lane). */
__device__ static inline float attn_chunk_softmax(float s, bool valid, float *m_out, float *l_out)
{
    float m = valid ? s : -INFINITY;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    const float p = valid ? expf(__fsub_rn(s, m)) : 0.0f;
    float l = p;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, o));
    *m_out = m;
    *l_out = l;
    return p;
}

/* The merge state (M, L) takes chunk (m, l); *a, *b: the factors of the old sums and of the chunk's. */
__device__ static inline void attn_merge_step(float *M, float *L, float m, float l, float *a, float *b)
{
    const float Mn = fmaxf(*M, m);
    *a = expf(__fsub_rn(*M, Mn));
    *b = expf(__fsub_rn(m, Mn));
    *L = __fadd_rn(__fmul_rn(*L, *a), __fmul_rn(l, *b));
    *M = Mn;
}

__device__ static inline float attn_merge_acc(float A, float o, float a, float b)
{
    return __fadd_rn(__fmul_rn(A, a), __fmul_rn(o, b));
}

/* Split-K pass 2: the chunks of (token, head) merged in chunk order. part: per token, head and
 * chunk, D sums o then m and l. Every thread runs the (M, L) recurrence itself (the same bits). */
static __global__ void k_attn_merge(struct cuk_attn_geom g, const int32_t *pos, const float *part, float *out,
                                    int n_chunk)
{
    pdl_enter(); /* the partials are the previous kernel's (cuk_pdl.cuh) */
    const int tok = blockIdx.x, h = blockIdx.y, D = g.head_dim;
    const int nc = (pos[tok] + 1 + ATTN_CHUNK - 1) / ATTN_CHUNK;
    const float *pt = part + ((int64_t)tok * g.n_head + h) * n_chunk * (D + 2);
    float *ot = out + ((int64_t)tok * g.n_head + h) * D;
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        float M = -INFINITY, L = 0.0f, A = 0.0f;
#pragma unroll 4
        for (int c = 0; c < nc; c++) {
            float a, b;
            attn_merge_step(&M, &L, pt[c * (D + 2) + D], pt[c * (D + 2) + D + 1], &a, &b);
            A = attn_merge_acc(A, pt[c * (D + 2) + i], a, b);
        }
        ot[i] = __fdiv_rn(A, L);
    }
}

/* The split-K launches: the batch in groups of ATTN_GROUP tokens (the partial buffer holds one
 * group), each group's pass 1 (launch_part(t0, nt)) then the merge of its partials, in that order. */
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
