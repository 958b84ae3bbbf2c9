/* cuk_pattn.cu — tiled attention for prompt batches (why and the invariance argument: cuk_pattn.h).
 *
 * One block per (head, tile of TT batch tokens; the tiles of the latest positions first) walks the
 * chunks of 32 cells of the tile's sequence in ascending order and keeps each token's merge state
 * (M, L, A) itself: no partial buffer, no merge launch. Per chunk: K and V staged in shared memory
 * as floats; the scores a warp a quarter of the head (each thread TT/8 tokens × 8 cells of one
 * quarter's fmaf chains, cuk_attn_dev.cuh); a warp a token for the score from its quarters, the
 * chunk's softmax and the merge step (TT/4 tokens side by side); then p·v (each thread TT/8 tokens
 * × D/16 dims, each an fmaf chain over the chunk's cells) folded into A. Every operation on a
 * token's values is the one cuk_attn_dev.cuh defines, in its order: the bits are cuk_attn.cu's split-K
 * attention's (k_attn_part, merging in its last block). A tile holding tokens of several sequences
 * walks each sequence's chunks in turn (the others masked); the caller sends batches of many short runs to
 * cuk_attn (cuk_pattn). */
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "cuk_pattn.h"
}

#define PT_TOK 16   /* tokens per block by default (measured: 5.50 ms a pp512 step against 5.72 with 32) */
#define PT_THREADS 128
#define PT_KPAD 4 /* floats of padding a row of q and k: rows 16 bytes apart in the banks */

#include "cuk_launch.cuh" /* launched */

#include "cuk_attn_dev.cuh" /* the definition of the output, one with cuk_attn.cu */
#include "cuk_trace.cuh"    /* CUK_TRACE_BLOCK (a -Dcuk_trace=true build) */

/* 8 consecutive cache values (16-byte aligned) as stored: one or two 16-byte loads, then as floats */
template <class C> struct pt_raw;
template <> struct pt_raw<__half> {
    uint4 u;
};
template <> struct pt_raw<float> {
    float4 a, b;
};
__device__ static inline void pt_fetch(const __half *p, pt_raw<__half> &r) { r.u = *(const uint4 *)p; }
__device__ static inline void pt_fetch(const float *p, pt_raw<float> &r)
{
    r.a = ((const float4 *)p)[0];
    r.b = ((const float4 *)p)[1];
}
__device__ static inline void pt_zero(pt_raw<__half> &r) { r.u = make_uint4(0u, 0u, 0u, 0u); }
__device__ static inline void pt_zero(pt_raw<float> &r) { r.a = r.b = make_float4(0.0f, 0.0f, 0.0f, 0.0f); }
__device__ static inline void pt_cvt(const pt_raw<__half> &r, float4 *o)
{
    const __half2 *h = (const __half2 *)&r.u;
    const float2 a = __half22float2(h[0]), b = __half22float2(h[1]), c = __half22float2(h[2]),
                 d = __half22float2(h[3]);
    o[0] = make_float4(a.x, a.y, b.x, b.y);
    o[1] = make_float4(c.x, c.y, d.x, d.y);
}
__device__ static inline void pt_cvt(const pt_raw<float> &r, float4 *o) { o[0] = r.a, o[1] = r.b; }

/* the dynamic shared memory of k_pattn<D>, in floats */
static constexpr size_t pt_smem_floats(int D, int TT)
{
    return (size_t)TT * (D + PT_KPAD) + (size_t)ATTN_CHUNK * (D + PT_KPAD) + (size_t)ATTN_CHUNK * D +
           (size_t)ATTN_QSEG * TT * (ATTN_CHUNK + 1) + (size_t)ATTN_CHUNK * TT + 5 * TT;
}

/* PF: the next chunk's K and V loaded into registers while this chunk computes (costs registers:
 * fewer blocks an SM); else loaded at the chunk's start (other blocks of the SM hide the wait). */
template <class C, int D, bool PF, int TT>
__global__ void __launch_bounds__(PT_THREADS) k_pattn(struct cuk_attn_geom g, const float *q, const C *kc,
                                                      const C *vc, const int32_t *pos, const int32_t *seq,
                                                      float *out, int B)
{
    CUK_TRACE_BLOCK(CUK_F_k_pattn);
    constexpr int QS = D + PT_KPAD, DQ = D / ATTN_QSEG;
    constexpr int VW = D >= 64 ? 4 : 2, NV = D / (16 * VW), DPT = NV * VW; /* p·v: dims a thread */
    constexpr int RT = TT / 8; /* tokens a thread in the scores and in p·v */
    static_assert(PT_THREADS == 128 && (TT == 32 || TT == 16) && ATTN_CHUNK == 32 && ATTN_QSEG == PT_THREADS / 32,
                  "the thread maps below (a warp a quarter of the scores)");
    static_assert(DQ % 4 == 0 && D % (16 * VW) == 0, "head sizes 32, 64, 128, 256");
    extern __shared__ __align__(16) float sm[];
    float *qs = sm;                               /* [TT][QS]  the tile's queries */
    float *ks = qs + TT * QS;                 /* [ATTN_CHUNK][QS]  the chunk's keys */
    float *vs = ks + ATTN_CHUNK * QS;             /* [ATTN_CHUNK][D]  its values */
    float *ss = vs + ATTN_CHUNK * D;              /* [ATTN_QSEG][TT][ATTN_CHUNK + 1]  quarter chains */
    float *ps = ss + ATTN_QSEG * TT * (ATTN_CHUNK + 1); /* [ATTN_CHUNK][TT]  p, transposed */
    float *Ms = ps + ATTN_CHUNK * TT, *Ls = Ms + TT, *al = Ls + TT, *be = al + TT;
    int *ncs = (int *)(be + TT);              /* the token's cells in this chunk (0: none) */
    __shared__ int done[TT], cur_s, top_s;

    /* the tiles of the latest positions (the most chunks) first, all heads of a tile together */
    const int tok0 = (int)(gridDim.y - 1 - blockIdx.y) * TT, h = blockIdx.x;
    const int nt = B - tok0 < TT ? B - tok0 : TT;
    const int kvh = h / (g.n_head / g.n_head_kv), tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t Q = (int64_t)g.n_head * D, KV = (int64_t)g.n_head_kv * D;
#pragma unroll
    for (int i = tid; i < TT * D / 4; i += PT_THREADS) {
        const int r = i / (D / 4), d = i % (D / 4) * 4;
        *(float4 *)&qs[r * QS + d] = r < nt ? *(const float4 *)&q[(int64_t)(tok0 + r) * Q + (int64_t)h * D + d]
                                            : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    if (tid < TT) {
        done[tid] = tid >= nt;
        Ms[tid] = -INFINITY;
        Ls[tid] = 0.0f;
    }
    /* p·v and the merge state: tokens tq·RT + r, dims i·16·VW + dg·VW + e */
    const int tq = tid / 16, dg = tid % 16;
    float A[RT][DPT];
#pragma unroll
    for (int r = 0; r < RT; r++)
#pragma unroll
        for (int k = 0; k < DPT; k++)
            A[r][k] = 0.0f;
    /* scores: warp j runs quarter j's chains of tokens tp·RT + r and cells cq + 4·i */
    const int tp = lane / 4, cq = lane % 4;
    const float scale = attn_scale(D);
    for (;;) {
        __syncthreads();
        if (tid == 0) { /* the next sequence: the first token not done yet */
            int s = -1, top = -1;
            for (int r = 0; r < TT; r++)
                if (!done[r] && s < 0)
                    s = seq[tok0 + r];
            for (int r = 0; r < TT; r++)
                if (!done[r] && seq[tok0 + r] == s && pos[tok0 + r] > top)
                    top = pos[tok0 + r];
            cur_s = s;
            top_s = top;
        }
        __syncthreads();
        const int cur = cur_s, top = top_s;
        if (cur < 0)
            break;
        const int64_t sbase = (int64_t)cur * g.n_ctx * KV + (int64_t)kvh * D;
        constexpr int NIT = ATTN_CHUNK * D / 8 / PT_THREADS; /* 8-value words a thread, of K and of V */
        static_assert(NIT * 8 * PT_THREADS == ATTN_CHUNK * D, "whole words a thread");
        pt_raw<C> rk[NIT], rv[NIT];
        const auto fetch = [&](int cs) { /* chunk cells [cs, cs + 32) that exist (≤ top), else 0 */
#pragma unroll
            for (int it = 0; it < NIT; it++) {
                const int i = tid + it * PT_THREADS, t = i / (D / 8), d = i % (D / 8) * 8;
                if (cs + t <= top) {
                    const int64_t o = sbase + (int64_t)(cs + t) * KV + d;
                    pt_fetch(kc + o, rk[it]);
                    pt_fetch(vc + o, rv[it]);
                } else {
                    pt_zero(rk[it]);
                    pt_zero(rv[it]);
                }
            }
        };
        if (PF)
            fetch(0);
        for (int c0 = 0; c0 <= top; c0 += ATTN_CHUNK) {
            if (c0 > 0)
                __syncthreads(); /* the last chunk's p·v has read ks, vs, ps */
            if (!PF)
                fetch(c0);
#pragma unroll
            for (int it = 0; it < NIT; it++) {
                const int i = tid + it * PT_THREADS, t = i / (D / 8), d = i % (D / 8) * 8;
                float4 kv[2], vv[2];
                pt_cvt(rk[it], kv);
                pt_cvt(rv[it], vv);
                *(float4 *)&ks[t * QS + d] = kv[0], *(float4 *)&ks[t * QS + d + 4] = kv[1];
                *(float4 *)&vs[t * D + d] = vv[0], *(float4 *)&vs[t * D + d + 4] = vv[1];
            }
            if (tid < TT) {
                const int p = tid < nt ? pos[tok0 + tid] - c0 : -1;
                const bool in = !done[tid] && seq[tok0 + tid] == cur && p >= 0;
                ncs[tid] = in ? (p + 1 < ATTN_CHUNK ? p + 1 : ATTN_CHUNK) : 0;
            }
            __syncthreads();
            if (PF && c0 + ATTN_CHUNK <= top)
                fetch(c0 + ATTN_CHUNK);
            { /* quarter `warp` of the scores of tokens tp·RT + r and cells cq + 4i */
                float acc[RT][8];
#pragma unroll
                for (int r = 0; r < RT; r++)
#pragma unroll
                    for (int i = 0; i < 8; i++)
                        acc[r][i] = 0.0f;
#pragma unroll 2
                for (int d = warp * DQ; d < (warp + 1) * DQ; d += 4) {
                    float4 qv[RT], kv[8];
#pragma unroll
                    for (int r = 0; r < RT; r++)
                        qv[r] = *(const float4 *)&qs[(tp * RT + r) * QS + d];
#pragma unroll
                    for (int i = 0; i < 8; i++)
                        kv[i] = *(const float4 *)&ks[(cq + 4 * i) * QS + d];
#pragma unroll
                    for (int r = 0; r < RT; r++)
#pragma unroll
                        for (int i = 0; i < 8; i++) {
                            acc[r][i] = __fmaf_rn(qv[r].x, kv[i].x, acc[r][i]);
                            acc[r][i] = __fmaf_rn(qv[r].y, kv[i].y, acc[r][i]);
                            acc[r][i] = __fmaf_rn(qv[r].z, kv[i].z, acc[r][i]);
                            acc[r][i] = __fmaf_rn(qv[r].w, kv[i].w, acc[r][i]);
                        }
                }
                float *sq = ss + warp * TT * (ATTN_CHUNK + 1);
#pragma unroll
                for (int r = 0; r < RT; r++)
#pragma unroll
                    for (int i = 0; i < 8; i++)
                        sq[(tp * RT + r) * (ATTN_CHUNK + 1) + cq + 4 * i] = acc[r][i];
            }
            __syncthreads();
            /* a warp a token (8 each, independent chains side by side): the score from its quarters,
             * the chunk's softmax, the merge step */
#pragma unroll
            for (int u = 0; u < TT / (PT_THREADS / 32); u++) {
                const int r = warp * (TT / (PT_THREADS / 32)) + u, nc = ncs[r];
                const float *sr = ss + r * (ATTN_CHUNK + 1) + lane;
                constexpr int SQ = TT * (ATTN_CHUNK + 1);
                const float sc = attn_score(sr[0], sr[SQ], sr[2 * SQ], sr[3 * SQ], scale);
                float m, l;
                ps[lane * TT + r] = attn_chunk_softmax(lane < nc ? sc : 0.0f, lane < nc, &m, &l);
                if (lane == 0 && nc > 0) {
                    float M = Ms[r], L = Ls[r], a, b;
                    attn_merge_step(&M, &L, m, l, &a, &b);
                    Ms[r] = M, Ls[r] = L, al[r] = a, be[r] = b;
                }
            }
            __syncthreads();
            { /* o = Σ_t p_t v_t over the token's cells, folded into A */
                int nc[RT];
#pragma unroll
                for (int r = 0; r < RT; r++)
                    nc[r] = ncs[tq * RT + r];
                float o[RT][DPT];
#pragma unroll
                for (int r = 0; r < RT; r++)
#pragma unroll
                    for (int k = 0; k < DPT; k++)
                        o[r][k] = 0.0f;
#pragma unroll 4
                for (int t = 0; t < ATTN_CHUNK; t++) {
                    float pr[RT];
                    if constexpr (RT == 4) {
                        const float4 p4 = *(const float4 *)&ps[t * TT + tq * 4];
                        pr[0] = p4.x, pr[1] = p4.y, pr[2] = p4.z, pr[3] = p4.w;
                    } else {
                        const float2 p2 = *(const float2 *)&ps[t * TT + tq * 2];
                        pr[0] = p2.x, pr[1] = p2.y;
                    }
                    float v[DPT];
#pragma unroll
                    for (int i = 0; i < NV; i++) {
                        const float *vp = &vs[t * D + i * 16 * VW + dg * VW];
                        if constexpr (VW == 4) {
                            const float4 w = *(const float4 *)vp;
                            v[i * 4] = w.x, v[i * 4 + 1] = w.y, v[i * 4 + 2] = w.z, v[i * 4 + 3] = w.w;
                        } else {
                            const float2 w = *(const float2 *)vp;
                            v[i * 2] = w.x, v[i * 2 + 1] = w.y;
                        }
                    }
#pragma unroll
                    for (int r = 0; r < RT; r++)
                        if (t < nc[r])
#pragma unroll
                            for (int k = 0; k < DPT; k++)
                                o[r][k] = __fmaf_rn(pr[r], v[k], o[r][k]);
                }
#pragma unroll
                for (int r = 0; r < RT; r++)
                    if (nc[r] > 0) {
                        const float a = al[tq * RT + r], b = be[tq * RT + r];
#pragma unroll
                        for (int k = 0; k < DPT; k++)
                            A[r][k] = attn_merge_acc(A[r][k], o[r][k], a, b);
                    }
            }
        }
        __syncthreads();
        if (tid < TT && !done[tid] && seq[tok0 + tid] == cur)
            done[tid] = 1;
    }
#pragma unroll
    for (int r = 0; r < RT; r++) {
        const int rr = tq * RT + r;
        if (rr >= nt)
            continue;
        float *ot = out + (int64_t)(tok0 + rr) * Q + (int64_t)h * D;
#pragma unroll
        for (int i = 0; i < NV; i++)
#pragma unroll
            for (int e = 0; e < VW; e++)
                ot[i * 16 * VW + dg * VW + e] = __fdiv_rn(A[r][i * VW + e], Ls[rr]);
    }
}

template <class C, int D, bool PF, int TT>
static int pattn_launch(const struct cuk_attn_geom *g, const float *q, const void *k_cache, const void *v_cache,
                        const int32_t *pos, const int32_t *seq, float *out, int B, cudaStream_t st)
{
    const size_t smem = pt_smem_floats(D, TT) * sizeof(float);
    static const cudaError_t set =
        cudaFuncSetAttribute((const void *)k_pattn<C, D, PF, TT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (set != cudaSuccess)
        return -(int)set;
    /* the whole shared memory an SM: 3 blocks of D = 128 beside each other */
    static const bool carved = cudaFuncSetAttribute((const void *)k_pattn<C, D, PF, TT>,
                                                    cudaFuncAttributePreferredSharedMemoryCarveout,
                                                    (int)cudaSharedmemCarveoutMaxShared) == cudaSuccess || true;
    (void)carved;
    cudaGetLastError(); /* a refused hint is not an error of the launch */
    k_pattn<C, D, PF, TT><<<dim3((unsigned)g->n_head, (unsigned)((B + TT - 1) / TT)), PT_THREADS, smem, st>>>(
        *g, q, (const C *)k_cache, (const C *)v_cache, pos, seq, out, B);
    return launched();
}

template <class C, bool PF, int TT>
static int pattn_d(const struct cuk_attn_geom *g, const float *q, const void *k_cache, const void *v_cache,
                   const int32_t *pos, const int32_t *seq, float *out, int B, cudaStream_t st)
{
    switch (g->head_dim) {
    case 32: return pattn_launch<C, 32, PF, TT>(g, q, k_cache, v_cache, pos, seq, out, B, st);
    case 64: return pattn_launch<C, 64, PF, TT>(g, q, k_cache, v_cache, pos, seq, out, B, st);
    case 128: return pattn_launch<C, 128, PF, TT>(g, q, k_cache, v_cache, pos, seq, out, B, st);
    case 256: return pattn_launch<C, 256, PF, TT>(g, q, k_cache, v_cache, pos, seq, out, B, st);
    default: return -(int)cudaErrorInvalidValue; /* cudev checks head_dim at open */
    }
}

static bool env_is(const char *name, const char *val)
{
    const char *e = getenv(name);
    return e && strcmp(e, val) == 0;
}

/* benchmarks: PINFER_CUDA_PATTN_PF=1 the prefetching variant, PINFER_CUDA_PATTN_TT=32 tiles of 32
 * tokens (the same bits: every variant performs the same operations on a token's values) */
static int pattn_variant(void)
{
    static int v = -1; /* read once: a captured graph must not change kernels between captures */
    if (v < 0)
        v = (env_is("PINFER_CUDA_PATTN_PF", "1") ? 1 : 0) | (env_is("PINFER_CUDA_PATTN_TT", "32") ? 2 : 0);
    return v;
}

template <class C>
static int pattn_c(const struct cuk_attn_geom *g, const float *q, const void *k_cache, const void *v_cache,
                   const int32_t *pos, const int32_t *seq, float *out, int B, cudaStream_t st)
{
    switch (pattn_variant()) {
    case 1: return pattn_d<C, true, PT_TOK>(g, q, k_cache, v_cache, pos, seq, out, B, st);
    case 2: return pattn_d<C, false, 32>(g, q, k_cache, v_cache, pos, seq, out, B, st);
    case 3: return pattn_d<C, true, 32>(g, q, k_cache, v_cache, pos, seq, out, B, st);
    default: return pattn_d<C, false, PT_TOK>(g, q, k_cache, v_cache, pos, seq, out, B, st);
    }
}

/* PINFER_CUDA_PATTN: 0 = always cuk_attn, 2 = the tiled kernel for every batch of more than one
 * token (the tests' way to run it on mixed batches), else (default) prompt-like batches. */
static int pattn_mode(void)
{
    static int mode = -1; /* read once: a captured graph must not change kernels between captures */
    if (mode < 0) {
        const char *e = getenv("PINFER_CUDA_PATTN");
        mode = e && strcmp(e, "0") == 0 ? 0 : e && strcmp(e, "2") == 0 ? 2 : 1;
    }
    return mode;
}

extern "C" int cuk_pattn(const struct cuk_attn_geom *g, const float *q, const void *k_cache, const void *v_cache,
                         const int32_t *pos, const int32_t *seq, float *out, float *part, int B, int32_t max_pos,
                         int n_runs, void *st)
{
    const int mode = pattn_mode();
    const bool prompt = mode == 2 ? B > 1 : mode == 1 && B > PATTN_MIN_BATCH && n_runs * PATTN_MIN_RUN <= B;
    /* 16-byte loads of q and of the caches' rows (cudev's arenas align them) */
    const bool aligned = !(((uintptr_t)q | (uintptr_t)k_cache | (uintptr_t)v_cache) & 15);
    if (prompt && aligned && g->n_head % g->n_head_kv == 0) {
        if (g->f16)
            return pattn_c<__half>(g, q, k_cache, v_cache, pos, seq, out, B, S(st));
        return pattn_c<float>(g, q, k_cache, v_cache, pos, seq, out, B, S(st));
    }
    return cuk_attn(g, q, k_cache, v_cache, pos, seq, out, part, B, max_pos, st);
}

/* this object's copy of the trace ring's pointers (cuk_trace.cuh; a CUK_TRACE build only) */
CUK_TRACE_SETTER(cuk_pattn_trace_set)
