/* cuk_attn_dev.cuh — what a token's attention output IS, bit for bit, written once for the two
 * kernels that compute it: cuk_attn.cu's split-K attention (decode and small batches: k_attn_part per
 * chunk, the last chunk of a (token, head) to finish merging them: attn_merge_out) and
 * cuk_pattn.cu's tiled prompt attention (k_pattn: one block per tile of tokens and head, walking the
 * chunks itself). Each kernel arranges the work its own way; the
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

/* The merge of a single chunk (m, l, o_i), as the recurrence computes it from (−∞, 0, 0): out_i.
 * Not o_i / l: A = 0·α + o_i·β is +0 where o_i is −0. */
__device__ static inline float attn_merge_one(float m, float l, float o)
{
    float M = -INFINITY, L = 0.0f, a, b;
    attn_merge_step(&M, &L, m, l, &a, &b);
    return __fdiv_rn(attn_merge_acc(0.0f, o, a, b), L);
}

/* Split-K pass 2: the nc chunks of (token, head) merged in chunk order. pt: the (token, head)'s
 * partials, per chunk D sums o then m and l; the threads of a block of nt take dims i ≡ tid (mod
 * nt), each running the (M, L) recurrence itself (the same bits in every thread). Loads go to L2
 * (__ldcg): other blocks of the same launch wrote the partials. The loads of ATTN_MERGE_BATCH chunks
 * are issued before the recurrence uses them: one L2 round trip for up to 512 cells, where the
 * recurrence's loop had them in batches of its unrolling (the merge is on the decode chain). */
#define ATTN_MERGE_BATCH 16
__device__ static inline void attn_merge_out(const float *pt, int nc, int D, float *ot, int tid, int nt)
{
    for (int i = tid; i < D; i += nt) {
        float M = -INFINITY, L = 0.0f, A = 0.0f;
        for (int c0 = 0; c0 < nc; c0 += ATTN_MERGE_BATCH) {
            float m[ATTN_MERGE_BATCH], l[ATTN_MERGE_BATCH], o[ATTN_MERGE_BATCH];
#pragma unroll
            for (int u = 0; u < ATTN_MERGE_BATCH; u++) {
                const float *pc = pt + (c0 + u) * (D + 2);
                const bool in = c0 + u < nc;
                m[u] = in ? __ldcg(pc + D) : 0.0f;
                l[u] = in ? __ldcg(pc + D + 1) : 0.0f;
                o[u] = in ? __ldcg(pc + i) : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < ATTN_MERGE_BATCH; u++)
                if (c0 + u < nc) {
                    float a, b;
                    attn_merge_step(&M, &L, m[u], l[u], &a, &b);
                    A = attn_merge_acc(A, o[u], a, b);
                }
        }
        ot[i] = __fdiv_rn(A, L);
    }
}

/* The merge through a cluster's distributed shared memory, where all of a (token, head)'s chunks fit
 * one cluster of ATTN_CLUSTER blocks along z (positions below ATTN_CLUSTER · ATTN_CHUNK; the block's
 * rank in its cluster is its chunk): the blocks of chunks 1.. store their partials straight into the
 * shared memory of chunk 0's block and arrive on its barrier; chunk 0's block merges in chunk order,
 * its own chunk from registers. Why: through L2, one block seeing the slowest block's partial costs
 * ~1.3 % of a d16 token (the arrival's release, atomic and loads, or a wait on the stores' landing —
 * bench/gpu/NOTES.md r1-r4); inside a GPC it is a store and a barrier. The ordering: chunk 0's block
 * initializes its barrier for the other working chunks before every thread of the cluster arrives on
 * the cluster barrier; a peer waits on that barrier before its first store into chunk 0's memory
 * (the barrier exists), stores, then (after its own bar.sync) its thread 0 arrives with release on
 * chunk 0's barrier, and leaves; chunk 0's block waits on its barrier with acquire. */
#define ATTN_CLUSTER 8

__device__ static inline uint32_t cl_smem(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
/* the same shared-memory offset in the cluster's rank-0 block */
__device__ static inline uint32_t cl_rank0(uint32_t a)
{
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, 0;\n" : "=r"(r) : "r"(a));
    return r;
}
__device__ static inline void cl_arrive(void) { asm volatile("barrier.cluster.arrive.release;\n" ::: "memory"); }
__device__ static inline void cl_wait(void) { asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory"); }
__device__ static inline void cl_put(uint32_t a, float v)
{
    asm volatile("st.shared::cluster.f32 [%0], %1;\n" ::"r"(a), "f"(v) : "memory");
}
__device__ static inline void cl_bar_init(uint64_t *bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(cl_smem(bar)), "r"(count) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ static inline void cl_bar_arrive_rank0(uint64_t *bar)
{
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(cl_rank0(cl_smem(bar)))
                 : "memory");
}
__device__ static inline void cl_bar_wait(uint64_t *bar)
{
    asm volatile("{\n .reg .pred p;\n"
                 "CL_BAR_WAIT%=:\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%0], 0;\n"
                 " @!p bra CL_BAR_WAIT%=;\n}\n" ::"r"(cl_smem(bar))
                 : "memory");
}

/* chunk 0's block: its own chunk (m0, l0, o0) then the np chunks after it from cp (per chunk D sums o,
 * then m and l), in chunk order; dims i = tid + nt·k (k < NDT) */
template <int NDT>
__device__ static inline void attn_merge_first(float m0, float l0, const float (&o0)[NDT], const float *cp, int np,
                                               int D, float *ot, int tid, int nt)
{
#pragma unroll
    for (int k = 0; k < NDT; k++) {
        const int i = tid + nt * k;
        if (i >= D)
            continue;
        float M = -INFINITY, L = 0.0f, a, b;
        attn_merge_step(&M, &L, m0, l0, &a, &b);
        float A = attn_merge_acc(0.0f, o0[k], a, b);
        for (int c = 0; c < np; c++) {
            const float *pc = cp + c * (D + 2);
            attn_merge_step(&M, &L, pc[D], pc[D + 1], &a, &b);
            A = attn_merge_acc(A, pc[i], a, b);
        }
        ot[i] = __fdiv_rn(A, L);
    }
}

/* The split-K partial buffer: ATTN_GROUP × n_head arrival counters (zero between launches: the last
 * block of a (token, head) to arrive merges, then zeroes its counter), then the partials. */
__device__ __host__ static inline unsigned *attn_arrivals(float *part) { return (unsigned *)part; }
__device__ __host__ static inline float *attn_partials(float *part, int n_head)
{
    return part + (size_t)ATTN_GROUP * (size_t)n_head;
}

/* Called by every thread of a split-K block after it wrote its chunk's partial (pt): whether this
 * block is the last of the (token, head)'s nc chunks to arrive — the one that merges. The barrier
 * makes the block's partial stores thread 0's to release: its count is one acq_rel atomic (the
 * release pattern of CUTLASS's barriers: bar.sync, then one thread's release), which also orders the
 * merge's loads after it (thread 0's acquire, then bar.sync) — one round trip where a fence in every
 * thread, the atomic and a fence were three. */
__device__ static inline bool attn_last_arrival(unsigned *arrive, int nc)
{
    __shared__ bool last;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned before;
        asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;\n" : "=r"(before) : "l"(arrive) : "memory");
        last = before == (unsigned)nc - 1u;
        if (last)
            *arrive = 0u; /* every chunk of this launch has arrived: ready for the next launch */
    }
    __syncthreads();
    return last;
}

/* The split-K launches: the batch in groups of ATTN_GROUP tokens (the partial buffer holds one
 * group), each group's launch (launch_part(t0, nt)) merging its own partials. */
template <class Part>
static int attn_groups(int B, const Part &launch_part)
{
    for (int t0 = 0; t0 < B; t0 += ATTN_GROUP) {
        launch_part(t0, B - t0 < ATTN_GROUP ? B - t0 : ATTN_GROUP);
        const int rc = launched();
        if (rc)
            return rc;
    }
    return 0;
}

#endif
