/* cuk_pattn.cu — tiled attention for prompt batches (why and the invariance argument: cuk_pattn.h).
 *
 * One block per (tile of PT_TOK batch tokens, head) walks the chunks of 32 cells of the tile's
 * sequence in ascending order and keeps each token's merge state (M, L, A) itself: no partial
 * buffer, no merge launch. Per chunk: K and V staged in shared memory as floats, the tile's scores
 * as a small product (each thread 2 tokens × 4 cells, each score the quarters' fmaf chains of
 * cuk_attn_dev.cuh), one warp a token for the chunk's softmax and the merge step, then p·v (each
 * thread 4 tokens × D/16 dims, each an fmaf chain over the chunk's cells) folded into A. Every
 * operation on a token's values is the one cuk_attn_dev.cuh defines, in its order: the bits are
 * cuk.cu's split-K attention's (k_attn_part + k_attn_merge). A tile holding tokens of several
 * sequences walks each sequence's chunks in turn (the others masked); the caller sends such
 * batches to cuk_attn when the sequences' runs are short (cuk_pattn). */
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "cuk_pattn.h"
}

#define PT_TOK 32   /* tokens per block */
#define PT_THREADS 128
#define PT_KPAD 4 /* floats of padding a row of q and k: rows 16 bytes apart in the banks */

static int launched(void)
{
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : -(int)e;
}

#include "cuk_attn_dev.cuh" /* the definition of the output, one with cuk.cu */

/* 8 consecutive cache values (16-byte aligned) as floats: one or two 16-byte loads */
__device__ static inline void pt_load8(const __half *p, float4 *o)
{
    const uint4 u = *(const uint4 *)p;
    const __half2 *h = (const __half2 *)&u;
    const float2 a = __half22float2(h[0]), b = __half22float2(h[1]), c = __half22float2(h[2]),
                 d = __half22float2(h[3]);
    o[0] = make_float4(a.x, a.y, b.x, b.y);
    o[1] = make_float4(c.x, c.y, d.x, d.y);
}
__device__ static inline void pt_load8(const float *p, float4 *o)
{
    o[0] = ((const float4 *)p)[0];
    o[1] = ((const float4 *)p)[1];
}

/* the dynamic shared memory of k_pattn<D>, in floats */
static constexpr size_t pt_smem_floats(int D)
{
    return (size_t)PT_TOK * (D + PT_KPAD) + (size_t)ATTN_CHUNK * (D + PT_KPAD) + (size_t)ATTN_CHUNK * D +
           (size_t)PT_TOK * (ATTN_CHUNK + 1) + (size_t)ATTN_CHUNK * PT_TOK + 5 * PT_TOK;
}

template <class C, int D>
__global__ void __launch_bounds__(PT_THREADS) k_pattn(struct cuk_attn_geom g, const float *q, const C *kc,
                                                      const C *vc, const int32_t *pos, const int32_t *seq,
                                                      float *out, int B)
{
    constexpr int QS = D + PT_KPAD, DQ = D / ATTN_QSEG;
    constexpr int VW = D >= 64 ? 4 : 2, NV = D / (16 * VW), DPT = NV * VW; /* p·v: dims a thread */
    static_assert(PT_THREADS == 128 && PT_TOK == 32 && ATTN_CHUNK == 32, "the thread maps below");
    static_assert(DQ % 4 == 0 && D % (16 * VW) == 0, "head sizes 32, 64, 128, 256");
    extern __shared__ __align__(16) float sm[];
    float *qs = sm;                               /* [PT_TOK][QS]  the tile's queries */
    float *ks = qs + PT_TOK * QS;                 /* [ATTN_CHUNK][QS]  the chunk's keys */
    float *vs = ks + ATTN_CHUNK * QS;             /* [ATTN_CHUNK][D]  its values */
    float *ss = vs + ATTN_CHUNK * D;              /* [PT_TOK][ATTN_CHUNK + 1]  scores */
    float *ps = ss + PT_TOK * (ATTN_CHUNK + 1);   /* [ATTN_CHUNK][PT_TOK]  p, transposed */
    float *Ms = ps + ATTN_CHUNK * PT_TOK, *Ls = Ms + PT_TOK, *al = Ls + PT_TOK, *be = al + PT_TOK;
    int *ncs = (int *)(be + PT_TOK);              /* the token's cells in this chunk (0: none) */
    __shared__ int done[PT_TOK], cur_s, top_s;

    /* the tiles of the latest positions (the most chunks) first */
    const int tok0 = (int)(gridDim.x - 1 - blockIdx.x) * PT_TOK, h = blockIdx.y;
    const int nt = B - tok0 < PT_TOK ? B - tok0 : PT_TOK;
    const int kvh = h / (g.n_head / g.n_head_kv), tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t Q = (int64_t)g.n_head * D, KV = (int64_t)g.n_head_kv * D;
#pragma unroll
    for (int i = tid; i < PT_TOK * D / 4; i += PT_THREADS) {
        const int r = i / (D / 4), d = i % (D / 4) * 4;
        *(float4 *)&qs[r * QS + d] = r < nt ? *(const float4 *)&q[(int64_t)(tok0 + r) * Q + (int64_t)h * D + d]
                                            : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    if (tid < PT_TOK) {
        done[tid] = tid >= nt;
        Ms[tid] = -INFINITY;
        Ls[tid] = 0.0f;
    }
    /* p·v and the merge state: tokens tq·4 + r, dims i·16·VW + dg·VW + e */
    const int tq = tid / 16, dg = tid % 16;
    float A[4][DPT];
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
        for (int k = 0; k < DPT; k++)
            A[r][k] = 0.0f;
    /* scores: tokens tp·2 + r, cells cq + 8·i */
    const int tp = tid / 8, cq = tid % 8;
    const float scale = attn_scale(D);
    for (;;) {
        __syncthreads();
        if (tid == 0) { /* the next sequence: the first token not done yet */
            int s = -1, top = -1;
            for (int r = 0; r < PT_TOK; r++)
                if (!done[r] && s < 0)
                    s = seq[tok0 + r];
            for (int r = 0; r < PT_TOK; r++)
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
        for (int c0 = 0; c0 <= top; c0 += ATTN_CHUNK) {
            const int nst = top + 1 - c0 < ATTN_CHUNK ? top + 1 - c0 : ATTN_CHUNK;
            if (c0 > 0)
                __syncthreads(); /* the last chunk's p·v has read ks, vs, ps */
#pragma unroll
            for (int i = tid; i < ATTN_CHUNK * D / 8; i += PT_THREADS) { /* 8 values a step */
                const int t = i / (D / 8), d = i % (D / 8) * 8;
                float4 kv[2], vv[2];
                if (t < nst) {
                    const int64_t o = sbase + (int64_t)(c0 + t) * KV + d;
                    pt_load8(kc + o, kv);
                    pt_load8(vc + o, vv);
                } else {
                    kv[0] = kv[1] = vv[0] = vv[1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                }
                *(float4 *)&ks[t * QS + d] = kv[0], *(float4 *)&ks[t * QS + d + 4] = kv[1];
                *(float4 *)&vs[t * D + d] = vv[0], *(float4 *)&vs[t * D + d + 4] = vv[1];
            }
            if (tid < PT_TOK) {
                const int p = tid < nt ? pos[tok0 + tid] - c0 : -1;
                const bool in = !done[tid] && seq[tok0 + tid] == cur && p >= 0;
                ncs[tid] = in ? (p + 1 < ATTN_CHUNK ? p + 1 : ATTN_CHUNK) : 0;
            }
            __syncthreads();
            { /* scores of tokens tp·2 + r and cells cq + 8i */
                float tot[2][4], acc[2][4];
#pragma unroll
                for (int j = 0; j < ATTN_QSEG; j++) {
#pragma unroll
                    for (int r = 0; r < 2; r++)
#pragma unroll
                        for (int i = 0; i < 4; i++)
                            acc[r][i] = 0.0f;
#pragma unroll 4
                    for (int d = j * DQ; d < (j + 1) * DQ; d += 4) {
                        float4 qv[2], kv[4];
#pragma unroll
                        for (int r = 0; r < 2; r++)
                            qv[r] = *(const float4 *)&qs[(tp * 2 + r) * QS + d];
#pragma unroll
                        for (int i = 0; i < 4; i++)
                            kv[i] = *(const float4 *)&ks[(cq + 8 * i) * QS + d];
#pragma unroll
                        for (int r = 0; r < 2; r++)
#pragma unroll
                            for (int i = 0; i < 4; i++) {
                                acc[r][i] = __fmaf_rn(qv[r].x, kv[i].x, acc[r][i]);
                                acc[r][i] = __fmaf_rn(qv[r].y, kv[i].y, acc[r][i]);
                                acc[r][i] = __fmaf_rn(qv[r].z, kv[i].z, acc[r][i]);
                                acc[r][i] = __fmaf_rn(qv[r].w, kv[i].w, acc[r][i]);
                            }
                    }
#pragma unroll
                    for (int r = 0; r < 2; r++)
#pragma unroll
                        for (int i = 0; i < 4; i++)
                            tot[r][i] = j == 0 ? acc[r][i] : __fadd_rn(tot[r][i], acc[r][i]);
                }
#pragma unroll
                for (int r = 0; r < 2; r++)
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        ss[(tp * 2 + r) * (ATTN_CHUNK + 1) + cq + 8 * i] = __fmul_rn(tot[r][i], scale);
            }
            __syncthreads();
            for (int r = warp; r < PT_TOK; r += PT_THREADS / 32) { /* a warp a token: softmax, merge step */
                const int nc = ncs[r];
                if (nc == 0) {
                    ps[lane * PT_TOK + r] = 0.0f;
                    continue;
                }
                float m, l;
                ps[lane * PT_TOK + r] =
                    attn_chunk_softmax(lane < nc ? ss[r * (ATTN_CHUNK + 1) + lane] : 0.0f, lane < nc, &m, &l);
                if (lane == 0) {
                    float M = Ms[r], L = Ls[r], a, b;
                    attn_merge_step(&M, &L, m, l, &a, &b);
                    Ms[r] = M, Ls[r] = L, al[r] = a, be[r] = b;
                }
            }
            __syncthreads();
            { /* o = Σ_t p_t v_t over the token's cells, folded into A */
                int nc[4];
#pragma unroll
                for (int r = 0; r < 4; r++)
                    nc[r] = ncs[tq * 4 + r];
                float o[4][DPT];
#pragma unroll
                for (int r = 0; r < 4; r++)
#pragma unroll
                    for (int k = 0; k < DPT; k++)
                        o[r][k] = 0.0f;
#pragma unroll 4
                for (int t = 0; t < ATTN_CHUNK; t++) {
                    const float4 p4 = *(const float4 *)&ps[t * PT_TOK + tq * 4];
                    const float pr[4] = { p4.x, p4.y, p4.z, p4.w };
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
                    for (int r = 0; r < 4; r++)
                        if (t < nc[r])
#pragma unroll
                            for (int k = 0; k < DPT; k++)
                                o[r][k] = __fmaf_rn(pr[r], v[k], o[r][k]);
                }
#pragma unroll
                for (int r = 0; r < 4; r++)
                    if (nc[r] > 0) {
                        const float a = al[tq * 4 + r], b = be[tq * 4 + r];
#pragma unroll
                        for (int k = 0; k < DPT; k++)
                            A[r][k] = attn_merge_acc(A[r][k], o[r][k], a, b);
                    }
            }
        }
        __syncthreads();
        if (tid < PT_TOK && !done[tid] && seq[tok0 + tid] == cur)
            done[tid] = 1;
    }
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const int rr = tq * 4 + r;
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

template <class C, int D>
static int pattn_launch(const struct cuk_attn_geom *g, const float *q, const void *k_cache, const void *v_cache,
                        const int32_t *pos, const int32_t *seq, float *out, int B, cudaStream_t st)
{
    const size_t smem = pt_smem_floats(D) * sizeof(float);
    static const cudaError_t set =
        cudaFuncSetAttribute((const void *)k_pattn<C, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (set != cudaSuccess)
        return -(int)set;
    k_pattn<C, D><<<dim3((unsigned)((B + PT_TOK - 1) / PT_TOK), (unsigned)g->n_head), PT_THREADS, smem, st>>>(
        *g, q, (const C *)k_cache, (const C *)v_cache, pos, seq, out, B);
    return launched();
}

template <class C>
static int pattn_c(const struct cuk_attn_geom *g, const float *q, const void *k_cache, const void *v_cache,
                   const int32_t *pos, const int32_t *seq, float *out, int B, cudaStream_t st)
{
    switch (g->head_dim) {
    case 32: return pattn_launch<C, 32>(g, q, k_cache, v_cache, pos, seq, out, B, st);
    case 64: return pattn_launch<C, 64>(g, q, k_cache, v_cache, pos, seq, out, B, st);
    case 128: return pattn_launch<C, 128>(g, q, k_cache, v_cache, pos, seq, out, B, st);
    case 256: return pattn_launch<C, 256>(g, q, k_cache, v_cache, pos, seq, out, B, st);
    default: return -(int)cudaErrorInvalidValue; /* cudev checks head_dim at open */
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
            return pattn_c<__half>(g, q, k_cache, v_cache, pos, seq, out, B, (cudaStream_t)st);
        return pattn_c<float>(g, q, k_cache, v_cache, pos, seq, out, B, (cudaStream_t)st);
    }
    return cuk_attn(g, q, k_cache, v_cache, pos, seq, out, part, B, max_pos, st);
}
