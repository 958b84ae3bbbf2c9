/* cuk_attn.cu — RoPE, the KV cache's store and the split-K decode attention (interface: cuk.h; the
 * definition of the output, one with cuk_pattn.cu's prefill attention: cuk_attn_dev.cuh). */
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdlib.h>

extern "C" {
#include "cuk.h"
#include "cuk_mma.h"
#include "cuk_mmv.h"
#include "model.h"
}
#include "cuk_launch.cuh"
#include "cuk_pdl.cuh"

/* ---- RoPE, KV store ---- */

template <class C> __device__ static inline void cstore(C *p, float v);
template <> __device__ inline void cstore<float>(float *p, float v) { *p = v; }
template <> __device__ inline void cstore<__half>(__half *p, float v) { *p = __float2half_rn(v); }
__device__ static inline float cload(const float *p) { return *p; }
__device__ static inline float cload(const __half *p) { return __half2float(*p); }
/* v as the cache gives it back after cstore */
template <class C> __device__ static inline float cround(float v);
template <> __device__ inline float cround<float>(float v) { return v; }
template <> __device__ inline float cround<__half>(float v) { return __half2float(__float2half_rn(v)); }
/* 8 consecutive cache values from a 16-byte aligned address */
__device__ static inline void kload8(const float *p, float *o)
{
    const float4 a = ((const float4 *)p)[0], b = ((const float4 *)p)[1];
    o[0] = a.x, o[1] = a.y, o[2] = a.z, o[3] = a.w, o[4] = b.x, o[5] = b.y, o[6] = b.z, o[7] = b.w;
}
__device__ static inline void kload8(const __half *p, float *o)
{
    const uint4 u = *(const uint4 *)p;
    const __half2 *h = (const __half2 *)&u;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 f = __half22float2(h[i]);
        o[2 * i] = f.x, o[2 * i + 1] = f.y;
    }
}

/* Pair i of a head's rotation by p · inv_freq[i], every rounding explicit: k_rope_store and the
 * attention that rotates q and k itself (k_attn_part's ROPE) give the same bits. rope_angle is apart
 * so that the attention can take it before its PDL wait (p and inv_freq are no kernel's output). */
__device__ static inline void rope_angle(int32_t p, const float *inv_freq, int i, float *sn, float *c)
{
    sincosf(__fmul_rn((float)p, inv_freq[i]), sn, c);
}
/* the dims of pair i: (i, i + half) for NeoX, (2i, 2i + 1) for the normal mode */
__device__ static inline int rope_a(const struct cuk_attn_geom &g, int i) { return g.rope_mode == OPS_ROPE_NEOX ? i : 2 * i; }
__device__ static inline int rope_b(const struct cuk_attn_geom &g, int i)
{
    return g.rope_mode == OPS_ROPE_NEOX ? i + g.rope_dim / 2 : 2 * i + 1;
}
__device__ static inline float rope_x0(float x0, float x1, float sn, float c)
{
    return __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, sn));
}
__device__ static inline float rope_x1(float x0, float x1, float sn, float c)
{
    return __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, c));
}
__device__ static inline void rope_pair(const struct cuk_attn_geom &g, float *vec, int32_t p, const float *inv_freq,
                                        int i)
{
    float sn, c;
    rope_angle(p, inv_freq, i, &sn, &c);
    const int a = rope_a(g, i), b = rope_b(g, i);
    const float x0 = vec[a], x1 = vec[b];
    vec[a] = rope_x0(x0, x1, sn, c);
    vec[b] = rope_x1(x0, x1, sn, c);
}

/* One block per (token, head): thread i rotates pair i by pos · inv_freq[i] (inv_freq from the
 * host, as ops_rope computes it); the blocks of the kv heads then store their rotated k and their v
 * into the cell (seq, pos). Many small blocks: this is latency, not bandwidth. */
template <class C>
__global__ void k_rope_store(struct cuk_attn_geom g, float *q, float *k, const float *v, const int32_t *pos,
                             const int32_t *seq, C *kc, C *vc, const float *inv_freq)
{
    CUK_TRACE_BLOCK(CUK_F_k_rope_store);
    const int tok = blockIdx.x, h = blockIdx.y, D = g.head_dim, half = g.rope_dim / 2;
    const int64_t Q = (int64_t)g.n_head * D, KV = (int64_t)g.n_head_kv * D;
    (void)half;
    const int32_t p = pos[tok];
    float *vec = h < g.n_head ? q + tok * Q + (int64_t)h * D : k + tok * KV + (int64_t)(h - g.n_head) * D;
    for (int i = threadIdx.x; i < half; i += blockDim.x)
        rope_pair(g, vec, p, inv_freq, i);
    if (h < g.n_head)
        return;
    __syncthreads();
    const int64_t off = (int64_t)(h - g.n_head) * D, cell = ((int64_t)seq[tok] * g.n_ctx + p) * KV + off;
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        cstore<C>(kc + cell + i, vec[i]);
        cstore<C>(vc + cell + i, v[tok * KV + off + i]);
    }
}

extern "C" int cuk_rope_store(const struct cuk_attn_geom *g, float *q, float *k, const float *v, const int32_t *pos,
                              const int32_t *seq, void *k_cache, void *v_cache, const float *inv_freq, int B, void *st)
{
    const dim3 grid((unsigned)B, (unsigned)(g->n_head + g->n_head_kv));
    if (g->f16)
        k_rope_store<__half><<<grid, 64, 0, S(st)>>>(*g, q, k, v, pos, seq, (__half *)k_cache, (__half *)v_cache,
                                                      inv_freq);
    else
        k_rope_store<float><<<grid, 64, 0, S(st)>>>(*g, q, k, v, pos, seq, (float *)k_cache, (float *)v_cache,
                                                     inv_freq);
    return launched();
}

#include "cuk_attn_dev.cuh" /* ATTN_WARPS, ATTN_CHUNK, ATTN_GROUP, the merge and attn_groups */

/* The next product's weight fetched into L2 while the attention runs. Why: a one-token attention
 * reads a few MB of cache in ~7 µs a layer at the positions measured while the HBM sits idle, so a
 * small enough wo (attn_pf_max) then streams from L2 instead. Each block of the grid (working or past the position) takes an even share of
 * the weight's q and d arrays after its wait (before it, the fetch would compete with q/k/v's own
 * stream) and hands it to the bulk-copy engine as prefetches of at most L2PF_PIECE bytes, a thread
 * a piece: no register holds the data, no bit of any output depends on it. */
struct l2_pf {
    const uint8_t *p[2];
    int64_t n[2]; /* bytes, a multiple of 16 (the d array's last bytes below 16 are left out) */
};
#define L2PF_PIECE 16384
/* the default largest weight fetched (MiB): the Q4_0 7B's wo (9 MB) fetched gained 0.5-0.8 % on d4 /
 * s4; the F16 wo (32 MB: more than the ~7 µs of attention can bring in) lost 2-3.5 % on d16 / s16
 * (H200, 2026-12-04 calls c1, c2; wo's own blocks fetching what their ring had not issued lost too) */
#define ATTN_PF_MIB 16
__device__ static void l2_fetch_share(const l2_pf &pf)
{
    const int64_t parts = (int64_t)gridDim.x * gridDim.y * gridDim.z,
                  part = blockIdx.x + (int64_t)gridDim.x * (blockIdx.y + (int64_t)gridDim.y * blockIdx.z);
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int64_t u = pf.n[r] / 16, a = u * part / parts * 16, b = u * (part + 1) / parts * 16;
        for (int64_t o = a + (int64_t)threadIdx.x * L2PF_PIECE; o < b; o += (int64_t)blockDim.x * L2PF_PIECE) {
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(pf.p[r] + o),
                         "r"((uint32_t)(b - o < L2PF_PIECE ? b - o : L2PF_PIECE))
                         : "memory");
        }
    }
}

/* Split-K attention ("flash decoding"): one block per (token, head, chunk of 32 cells of the token's
 * own sequence, ≤ its position), computing the chunk's partial as cuk_attn_dev.cuh defines it; the
 * last block of a (token, head) to finish merges the chunks in chunk order (attn_merge_out: one
 * launch a layer, not a merge kernel after it, whose launch and drain sat on the decode chain) — or,
 * CL (geom.cluster, every chunk with cells in one cluster), chunk 0's block merges them from its shared
 * memory (cuk_attn_dev.cuh: d16 +0.5 %, s16 +1.5 % on the H200, r5).
 * Scores: thread (cell t = tid / 4, quarter j = tid % 4) runs the fmaf chain of its quarter of the
 * dims, the cell's four lanes' chains are added in order (attn_score). One warp then takes the
 * chunk's softmax (lane = cell). p·v: thread i runs dim i's fmaf chain over the cells in order (its
 * v values loaded up front, with the keys: one memory round trip instead of two). */
template <class C, int DL, bool ROPE, bool CL>
__global__ void __launch_bounds__(ATTN_WARPS * 32) k_attn_part(struct cuk_attn_geom g, const float *q, C *kc, C *vc,
                                                               const int32_t *pos, const int32_t *seq, float *part,
                                                               unsigned *arrive, float *out, int n_chunk,
                                                               const float *k_new, const float *v_new,
                                                               const float *inv_freq, bool preload, l2_pf pf)
{
    CUK_TRACE_BLOCK(CUK_F_k_attn_part);
    constexpr int D = DL * 32, NT = ATTN_WARPS * 32, DQ = D / ATTN_QSEG, NDT = (D + NT - 1) / NT;
    static_assert(NT == ATTN_CHUNK * ATTN_QSEG && DQ % 8 == 0, "a thread per (cell, quarter), 8-value loads");
    __shared__ float sc[ATTN_CHUNK], ps[ATTN_CHUNK], ml[2];
    __shared__ __align__(16) float rv[ROPE ? 2 : 1][ROPE ? D : 4];
    /* CL: chunk 0's block receives the other chunks' partials here, and their arrivals on cbar */
    __shared__ __align__(16) float cpart[CL ? (ATTN_CLUSTER - 1) * (D + 2) : 1];
    __shared__ __align__(8) uint64_t cbar;
    const int tok = blockIdx.x, h = blockIdx.y, c = blockIdx.z, kvh = h / (g.n_head / g.n_head_kv);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int32_t n_kv = pos[tok] + 1, c0 = c * ATTN_CHUNK;
    const int nc_all = (n_kv + ATTN_CHUNK - 1) / ATTN_CHUNK; /* the (token, head)'s chunks with cells */
    if constexpr (CL) { /* a cluster a (token, head), the rank its chunk: chunk 0's barrier, then every thread arrives */
        if (c == 0 && threadIdx.x == 0)
            cl_bar_init(&cbar, nc_all > 1 ? (unsigned)(nc_all - 1) : 1u);
        cl_arrive();
    }
    if (c0 >= n_kv) { /* a chunk past the position: nothing to do (leaving before the wait measured the same) */
        pdl_enter();
        l2_fetch_share(pf);
        return;
    }
    const int32_t nc = n_kv - c0 < ATTN_CHUNK ? n_kv - c0 : ATTN_CHUNK;
    const int64_t KV = (int64_t)g.n_head_kv * D;
    const int64_t base = ((int64_t)seq[tok] * g.n_ctx + c0) * KV + (int64_t)kvh * D;
    const int t = threadIdx.x / ATTN_QSEG, j = threadIdx.x % ATTN_QSEG;
    /* ROPE (one token, its cell the only one of the layer this step writes, by this kernel): the
     * cells before the token's own are the earlier steps', so their k and v load BEFORE the wait,
     * while q/k/v are still being computed, and the own cell's come from the rotated k and from v
     * rounded as the cache stores them — the same values the cache would give back, so the same
     * bits. pos and seq are read before the wait too: no kernel writes them (the host's copy of the
     * batch completes before any kernel after it starts, cuk_pdl.cuh). Measured (bench/gpu/NOTES.md,
     * the chain's trace, 2026-12-03/04): with every load after the wait, attention held the decode
     * chain ~12.5 µs a layer at any context length — a chain of dependent round trips. The loads
     * stand under the runtime `preload` (PINFER_CUDA_ATTN_PRELOAD=0: after the wait): with them
     * unconditional the compiler's code for this part took ~10 µs in the blocks that could not start
     * beside the q4 products (s4 465 tok/s against 508 with the argument, the same loads); staging
     * the cells in shared memory by cp.async instead measured no better (16 KiB a block). */
    const int32_t own_t = ROPE && (n_kv - 1) / ATTN_CHUNK == c ? n_kv - 1 - c0 : -1; /* the own cell in the chunk */
    float vv[ATTN_CHUNK][NDT]; /* dim threadIdx.x + NT·i of every cell (0 past the chunk's cells) */
    float kq[ROPE ? DQ : 1];   /* ROPE: cell t's quarter j of k */
    auto load_v = [&]() {      /* the cached cells' v (the own cell's: below) */
#pragma unroll
        for (int tt = 0; tt < ATTN_CHUNK; tt++)
#pragma unroll
            for (int i = 0; i < NDT; i++) {
                const int d = threadIdx.x + NT * i;
                vv[tt][i] = tt < nc && tt != own_t && d < D ? cload(vc + base + (int64_t)tt * KV + d) : 0.0f;
            }
    };
    /* ROPE: this thread's pair's angle (p and inv_freq are no kernel's output) */
    static_assert(D / 2 <= NT, "a thread a rotated pair");
    const int half = ROPE ? g.rope_dim / 2 : 0;
    float rsn = 0.0f, rcs = 0.0f;
    auto load_k = [&]() { /* ROPE: the cached cells' k (the own cell's: below) */
        if (t < nc && t != own_t)
#pragma unroll
            for (int i0 = 0; i0 < DQ; i0 += 8)
                kload8(kc + base + (int64_t)t * KV + j * DQ + i0, kq + i0);
    };
    if constexpr (ROPE) {
        if ((int)threadIdx.x < half)
            rope_angle(n_kv - 1, inv_freq, threadIdx.x, &rsn, &rcs);
        if (preload)
            load_v(), load_k();
    }
    pdl_enter(); /* q, k, v are the previous kernel's (cuk_pdl.cuh) */
    l2_fetch_share(pf);
    const float *qt = q + ((int64_t)tok * g.n_head + h) * D;
    if constexpr (ROPE) {
        if (!preload)
            load_v(), load_k();
        /* k_rope_store folded in (one token, a kv head per head): q rotated here, straight from the
         * product's output into shared memory, and the block of the chunk holding the token's own cell
         * rotates k and stores k and v there */
        const bool own = own_t >= 0;
        const float *kt = k_new + (int64_t)tok * KV + (int64_t)kvh * D;
        const float *vt = v_new + (int64_t)tok * KV + (int64_t)kvh * D;
        if ((int)threadIdx.x < half) {
            const int a = rope_a(g, threadIdx.x), b = rope_b(g, threadIdx.x);
            const float q0 = qt[a], q1 = qt[b];
            rv[0][a] = rope_x0(q0, q1, rsn, rcs), rv[0][b] = rope_x1(q0, q1, rsn, rcs);
            if (own) {
                const float k0 = kt[a], k1 = kt[b];
                rv[1][a] = rope_x0(k0, k1, rsn, rcs), rv[1][b] = rope_x1(k0, k1, rsn, rcs);
            }
        }
        for (int i = g.rope_dim + threadIdx.x; i < D; i += NT) { /* the dims past the rotated ones */
            rv[0][i] = qt[i];
            if (own)
                rv[1][i] = kt[i];
        }
        if (own)
#pragma unroll
            for (int i = 0; i < NDT; i++) {
                const int d = threadIdx.x + NT * i;
                const float v = d < D ? cround<C>(vt[d]) : 0.0f;
#pragma unroll
                for (int tt = 0; tt < ATTN_CHUNK; tt++)
                    if (tt == own_t)
                        vv[tt][i] = v;
            }
        __syncthreads();
        if (own) {
            const int64_t cell = base + (int64_t)own_t * KV;
            for (int i = threadIdx.x; i < D; i += NT) {
                cstore<C>(kc + cell + i, rv[1][i]);
                cstore<C>(vc + cell + i, vt[i]);
            }
            if (t == own_t)
#pragma unroll
                for (int i = 0; i < DQ; i++)
                    kq[i] = cround<C>(rv[1][j * DQ + i]);
        }
        qt = rv[0];
    } else
        load_v(); /* after the wait: the previous kernel (k_rope_store) wrote the batch's cells */
    float dj = 0.0f;
    if (t < nc) { /* 16-byte loads: q rows and cache rows are 16-byte aligned (cudev's arenas) */
        const C *kr = kc + base + (int64_t)t * KV + j * DQ;
        const float *qj = qt + j * DQ;
#pragma unroll
        for (int i0 = 0; i0 < DQ; i0 += 8) {
            float kk[8];
            if constexpr (ROPE) {
#pragma unroll
                for (int e = 0; e < 8; e++)
                    kk[e] = kq[i0 + e];
            } else
                kload8(kr + i0, kk);
            const float4 qa = *(const float4 *)(qj + i0), qb = *(const float4 *)(qj + i0 + 4);
            const float qq[8] = { qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w };
#pragma unroll
            for (int e = 0; e < 8; e++)
                dj = __fmaf_rn(qq[e], kk[e], dj);
        }
    }
    const int l0 = lane & ~(ATTN_QSEG - 1);
    const float d0 = __shfl_sync(0xffffffffu, dj, l0), d1 = __shfl_sync(0xffffffffu, dj, l0 + 1);
    const float d2 = __shfl_sync(0xffffffffu, dj, l0 + 2), d3 = __shfl_sync(0xffffffffu, dj, l0 + 3);
    if (j == 0 && t < nc)
        sc[t] = attn_score(d0, d1, d2, d3, attn_scale(D));
    __syncthreads();
    static_assert(ATTN_CHUNK == 32, "one cell a lane");
    if (warp == 0) {
        float m, l;
        ps[lane] = attn_chunk_softmax(lane < nc ? sc[lane] : 0.0f, lane < nc, &m, &l);
        if (lane == 0)
            ml[0] = m, ml[1] = l;
    }
    __syncthreads();
    float o[NDT];
#pragma unroll
    for (int i = 0; i < NDT; i++) {
        o[i] = 0.0f;
#pragma unroll
        for (int u = 0; u < ATTN_CHUNK; u++)
            if (u < nc)
                o[i] = __fmaf_rn(ps[u], vv[u][i], o[i]);
    }
    float *ot = out + ((int64_t)tok * g.n_head + h) * D;
    if (nc_all == 1) { /* the only chunk: the merge of one, here (no partial, no arrival's round trips) */
#pragma unroll
        for (int i = 0; i < NDT; i++) {
            const int d = threadIdx.x + NT * i;
            if (d < D)
                ot[d] = attn_merge_one(ml[0], ml[1], o[i]);
        }
        return;
    }
    if constexpr (CL) {
        if (c > 0) { /* the partial into chunk 0's shared memory, then the arrival on its barrier */
            cl_wait(); /* chunk 0's barrier is initialized */
            const uint32_t rp = cl_rank0(cl_smem(cpart + (c - 1) * (D + 2)));
#pragma unroll
            for (int i = 0; i < NDT; i++) {
                const int d = threadIdx.x + NT * i;
                if (d < D)
                    cl_put(rp + 4u * (uint32_t)d, o[i]);
            }
            if (threadIdx.x == 0)
                cl_put(rp + 4u * (uint32_t)D, ml[0]), cl_put(rp + 4u * (uint32_t)(D + 1), ml[1]);
            __syncthreads();
            if (threadIdx.x == 0)
                cl_bar_arrive_rank0(&cbar);
            return;
        }
        cl_bar_wait(&cbar);
        attn_merge_first<NDT>(ml[0], ml[1], o, cpart, nc_all - 1, D, ot, threadIdx.x, NT);
        return;
    }
    float *pt = part + (((int64_t)tok * g.n_head + h) * n_chunk + c) * (D + 2);
#pragma unroll
    for (int i = 0; i < NDT; i++) {
        const int d = threadIdx.x + NT * i;
        if (d < D)
            pt[d] = o[i];
    }
    if (threadIdx.x == 0)
        pt[D] = ml[0], pt[D + 1] = ml[1];
    if (attn_last_arrival(arrive + (int64_t)tok * g.n_head + h, nc_all))
        attn_merge_out(part + ((int64_t)tok * g.n_head + h) * n_chunk * (D + 2), nc_all, D, ot, threadIdx.x, NT);
}

extern "C" size_t cuk_attn_part_floats(const struct cuk_attn_geom *g, int B)
{
    const int64_t nch = (g->n_ctx + ATTN_CHUNK - 1) / ATTN_CHUNK, nt = B < ATTN_GROUP ? B : ATTN_GROUP;
    return (size_t)(ATTN_GROUP * g->n_head + nt * g->n_head * nch * (g->head_dim + 2)); /* attn_arrivals first */
}

struct rope_in { /* the fused RoPE's inputs (NULL k: none) */
    const float *k, *v, *inv_freq;
};

/* PINFER_CUDA_ATTN_PF: the largest weight (MiB) the attention fetches; 0 none (read once) */
static int64_t attn_pf_max(void)
{
    static const int64_t v = [] {
        const char *e = getenv("PINFER_CUDA_ATTN_PF");
        return (int64_t)(e && *e ? atoi(e) : ATTN_PF_MIB) << 20;
    }();
    return v;
}

/* the weight w's arrays to fetch into L2 (none for NULL, a weight not on the device, or one over
 * attn_pf_max) */
static l2_pf l2_pf_of(const struct cuk_w *w)
{
    l2_pf pf = {};
    if (!w || !w->q)
        return pf;
    const size_t nq = cuk_w_qbytes(w->type, w->n_in, w->n_out), nd = w->d ? cuk_w_dbytes(w->type, w->n_in, w->n_out) : 0;
    if ((int64_t)(nq + nd) > attn_pf_max())
        return pf;
    pf.p[0] = (const uint8_t *)w->q, pf.n[0] = (int64_t)(nq & ~(size_t)15);
    pf.p[1] = (const uint8_t *)w->d, pf.n[1] = (int64_t)(nd & ~(size_t)15);
    return pf;
}

/* whether the device places a cluster of the attention's largest instance at all (read once): a
 * partitioned GPU may not, and a launch it refuses would fail every step */
static bool attn_clusters_fit(void)
{
    static const bool fit = [] {
        cudaLaunchAttribute at;
        at.id = cudaLaunchAttributeClusterDimension;
        at.val.clusterDim.x = 1, at.val.clusterDim.y = 1, at.val.clusterDim.z = ATTN_CLUSTER;
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(1, 1, ATTN_CLUSTER), cfg.blockDim = dim3(ATTN_WARPS * 32), cfg.attrs = &at, cfg.numAttrs = 1;
        int n = 0;
        const cudaError_t e =
            cudaOccupancyMaxActiveClusters(&n, (const void *)k_attn_part<float, 8, true, true>, &cfg);
        cudaGetLastError(); /* a refusal is this answer, not an error of the next launch */
        return e == cudaSuccess && n > 0;
    }();
    return fit;
}

/* PINFER_CUDA_ATTN_CLUSTER (read once): cuk_attn_cluster_ok's 0 / 1 / 2 */
extern "C" bool cuk_attn_cluster_ok(const struct cuk_w *qkv)
{
    static const int mode = [] {
        const char *e = getenv("PINFER_CUDA_ATTN_CLUSTER");
        return e && *e ? atoi(e) : 1;
    }();
    if (mode == 0 || !attn_clusters_fit())
        return false;
    return mode == 2 || (qkv && qkv->q && cuk_mma_on(qkv->type) && cuk_mmv_level() >= 2 &&
                         cuk_mmv_fits(qkv, 1)); /* cuk_norm_gemv_split3's streamed case for one token */
}

/* PINFER_CUDA_ATTN_PRELOAD=0: the fused RoPE attention loads its cached cells after the wait (read once) */
static bool attn_preload_on(void)
{
    static const bool on = env_on_unless_0("PINFER_CUDA_ATTN_PRELOAD");
    return on;
}

template <class C, int DL, bool ROPE>
static int attn_launch(const struct cuk_attn_geom *g, const float *q, void *k_cache, void *v_cache, const int32_t *pos,
                       const int32_t *seq, float *out, float *part, int B, int32_t max_pos, const rope_in &ri,
                       const l2_pf &pf, cudaStream_t st)
{
    const int nch = (g->n_ctx + ATTN_CHUNK - 1) / ATTN_CHUNK; /* the partials' stride */
    const int nlaunch = max_pos >= 0 && max_pos < g->n_ctx ? max_pos / ATTN_CHUNK + 1 : nch;
    const int64_t Q = (int64_t)g->n_head * g->head_dim;
    static const bool carved = carve((const void *)k_attn_part<C, DL, ROPE, false>) &&
                               carve((const void *)k_attn_part<C, DL, ROPE, true>);
    (void)carved;
    /* every chunk with cells in one cluster (a power of two of blocks along z): the merge in shared memory */
    unsigned cz = 0;
    if (g->cluster && nlaunch <= ATTN_CLUSTER)
        for (cz = 1; cz < (unsigned)nlaunch;)
            cz *= 2;
    return attn_groups(B, [&](int t0, int nt) {
        pdl_launch_clusters(cz ? k_attn_part<C, DL, ROPE, true> : k_attn_part<C, DL, ROPE, false>,
                            dim3((unsigned)nt, (unsigned)g->n_head, cz ? cz : (unsigned)nlaunch),
                            dim3(ATTN_WARPS * 32), 0, st, cz, *g, q + t0 * Q, (C *)k_cache, (C *)v_cache, pos + t0,
                            seq + t0, attn_partials(part, g->n_head), attn_arrivals(part), out + t0 * Q, nch, ri.k,
                            ri.v, ri.inv_freq, attn_preload_on(), pf);
    });
}

template <class C, bool ROPE>
static int attn_c(const struct cuk_attn_geom *g, const float *q, void *k_cache, void *v_cache, const int32_t *pos,
                  const int32_t *seq, float *out, float *part, int B, int32_t mp, const rope_in &ri, const l2_pf &pf,
                  cudaStream_t st)
{
    switch (g->head_dim) {
    case 32: return attn_launch<C, 1, ROPE>(g, q, k_cache, v_cache, pos, seq, out, part, B, mp, ri, pf, st);
    case 64: return attn_launch<C, 2, ROPE>(g, q, k_cache, v_cache, pos, seq, out, part, B, mp, ri, pf, st);
    case 128: return attn_launch<C, 4, ROPE>(g, q, k_cache, v_cache, pos, seq, out, part, B, mp, ri, pf, st);
    case 256: return attn_launch<C, 8, ROPE>(g, q, k_cache, v_cache, pos, seq, out, part, B, mp, ri, pf, st);
    default: return -(int)cudaErrorInvalidValue; /* cudev checks head_dim at open */
    }
}

extern "C" bool cuk_attn_ok(int head_dim) { return head_dim == 32 || head_dim == 64 || head_dim == 128 || head_dim == 256; }

/* the attention over cells already rotated and stored (no fused RoPE), by the cache's type */
static int attn_stored(const struct cuk_attn_geom *g, const float *q, void *k_cache, void *v_cache, const int32_t *pos,
                       const int32_t *seq, float *out, float *part, int B, int32_t max_pos, const l2_pf &pf,
                       cudaStream_t st)
{
    const rope_in ri = { nullptr, nullptr, nullptr };
    if (g->f16)
        return attn_c<__half, false>(g, q, k_cache, v_cache, pos, seq, out, part, B, max_pos, ri, pf, st);
    return attn_c<float, false>(g, q, k_cache, v_cache, pos, seq, out, part, B, max_pos, ri, pf, st);
}

extern "C" int cuk_attn(const struct cuk_attn_geom *g, const float *q, const void *k_cache, const void *v_cache,
                        const int32_t *pos, const int32_t *seq, float *out, float *part, int B, int32_t max_pos,
                        void *st)
{
    return attn_stored(g, q, (void *)k_cache, (void *)v_cache, pos, seq, out, part, B, max_pos, l2_pf{}, S(st));
}

static bool rope_fuse_on(void)
{
    static const bool on = env_on_unless_0("PINFER_CUDA_ROPE_FUSE");
    return on;
}

extern "C" int cuk_rope_attn(const struct cuk_attn_geom *g, float *q, float *k, const float *v, const int32_t *pos,
                             const int32_t *seq, void *k_cache, void *v_cache, const float *inv_freq, float *out,
                             float *part, int B, int32_t max_pos, const struct cuk_w *l2_next, void *st)
{
    const l2_pf pf = l2_pf_of(B == 1 ? l2_next : NULL);
    if (B != 1 || g->n_head != g->n_head_kv || !rope_fuse_on()) {
        const int rc = cuk_rope_store(g, q, k, v, pos, seq, k_cache, v_cache, inv_freq, B, st);
        return rc ? rc : attn_stored(g, q, k_cache, v_cache, pos, seq, out, part, B, max_pos, pf, S(st));
    }
    const rope_in ri = { k, v, inv_freq };
    if (g->f16)
        return attn_c<__half, true>(g, q, k_cache, v_cache, pos, seq, out, part, B, max_pos, ri, pf, S(st));
    return attn_c<float, true>(g, q, k_cache, v_cache, pos, seq, out, part, B, max_pos, ri, pf, S(st));
}
/* this object's copy of the trace ring's pointers (cuk_trace.cuh; a CUK_TRACE build only) */
CUK_TRACE_SETTER(cuk_attn_trace_set)
