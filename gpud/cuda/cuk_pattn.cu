/* cuk_pattn.cu — tiled attention for prompt batches (why and the invariance argument: cuk_pattn.h).
 *
 * Pass 1, one block per (tile of PT_TOK batch tokens, head, chunk of 32 cells): the chunk's K and V
 * cells of the tile's first token's sequence are staged in shared memory once (as stored: f16 or
 * f32), then each warp takes tokens of the tile one at a time and computes its partial exactly as
 * k_attn_part's four warps do, the four warps' 8-cell chains one after the other in one warp; a
 * token of another sequence reads its cells from global memory (the same values). The partials'
 * layout, the 64-token groups (the partial buffer's size, cuk_attn_part_floats) and the merge are
 * cuk.cu's: the constants and the merge kernel come from cuk_attn_dev.cuh, which cuk.cu includes
 * too (each object compiles its own copy of the one source, with the same flags). k_pattn_part stays
 * its own kernel: it stages a tile's cells and replays k_attn_part's four warp chains in one warp,
 * so its code differs from k_attn_part's while its sums are the same. */
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "cuk_pattn.h"
}

#define PT_CHUNK ATTN_CHUNK /* cells per partial */
#define PT_VW ATTN_WARPS     /* k_attn_part's warps, whose 8-cell chains are replayed here */
#define PT_WARPS 4  /* warps of a block here */
#define PT_TOK 16   /* tokens per block */

static int launched(void)
{
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : -(int)e;
}

#include "cuk_attn_dev.cuh" /* the constants, k_attn_merge and the group loop, one definition with cuk.cu */

__device__ static inline float pt_load(const float *p) { return *p; }
__device__ static inline float pt_load(const __half *p) { return __half2float(*p); }

__device__ static inline float pt_warp_sum(float v) /* cuk.cu's warp_sum */
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <class C, int DL>
__global__ void __launch_bounds__(PT_WARPS * 32) k_pattn_part(struct cuk_attn_geom g, const float *q, const C *kc,
                                                              const C *vc, const int32_t *pos, const int32_t *seq,
                                                              float *part, int n_chunk, int nt)
{
    constexpr int D = DL * 32;
    __shared__ __align__(16) C ks[PT_CHUNK][D], vs[PT_CHUNK][D];
    const int h = blockIdx.y, c = blockIdx.z, kvh = h / (g.n_head / g.n_head_kv);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int tok0 = blockIdx.x * PT_TOK, tok1 = tok0 + PT_TOK < nt ? tok0 + PT_TOK : nt;
    const int32_t c0 = c * PT_CHUNK;
    int32_t top = -1; /* the block's largest position: nothing to do when the chunk starts past it */
    for (int i = tok0; i < tok1; i++)
        top = pos[i] > top ? pos[i] : top;
    if (c0 > top)
        return;
    const int64_t KV = (int64_t)g.n_head_kv * D;
    const int32_t s0 = seq[tok0];
    const int ncs = g.n_ctx - c0 < PT_CHUNK ? g.n_ctx - c0 : PT_CHUNK; /* cells that exist */
    { /* 16-byte words (the launcher checks the caches' alignment) */
        constexpr int NV = D * (int)sizeof(C) / 16;
        const int64_t base = ((int64_t)s0 * g.n_ctx + c0) * KV + (int64_t)kvh * D;
        for (int i = threadIdx.x; i < ncs * NV; i += PT_WARPS * 32) {
            const int t = i / NV, j = i % NV;
            ((uint4 *)ks[t])[j] = ((const uint4 *)(kc + base + (int64_t)t * KV))[j];
            ((uint4 *)vs[t])[j] = ((const uint4 *)(vc + base + (int64_t)t * KV))[j];
        }
    }
    __syncthreads();
    const float scale = 1.0f / sqrtf((float)D);
    for (int tok = tok0 + warp; tok < tok1; tok += PT_WARPS) {
        const int32_t n_kv = pos[tok] + 1;
        if (c0 >= n_kv)
            continue;
        const int32_t nc = n_kv - c0 < PT_CHUNK ? n_kv - c0 : PT_CHUNK;
        const bool sh = seq[tok] == s0;
        const int64_t gb = ((int64_t)seq[tok] * g.n_ctx + c0) * KV + (int64_t)kvh * D + lane * DL;
        const float *qt = q + ((int64_t)tok * g.n_head + h) * D;
        float qr[DL];
#pragma unroll
        for (int k = 0; k < DL; k++)
            qr[k] = qt[lane * DL + k];
        float sc = 0.0f; /* lane t: the score of cell t; 8 cells' sums in flight (independent chains) */
#pragma unroll
        for (int t0 = 0; t0 < PT_CHUNK; t0 += 8) {
            float s[8];
#pragma unroll
            for (int u = 0; u < 8; u++) {
                const int t = t0 + u;
                s[u] = 0.0f;
                if (t < nc)
#pragma unroll
                    for (int k = 0; k < DL; k++)
                        s[u] = __fmaf_rn(qr[k], sh ? pt_load(&ks[t][lane * DL + k]) : pt_load(kc + gb + (int64_t)t * KV + k),
                                         s[u]);
            }
#pragma unroll
            for (int u = 0; u < 8; u++) {
                const float v = pt_warp_sum(s[u]);
                if (lane == t0 + u)
                    sc = v * scale;
            }
        }
        float m = fmaxf(lane < nc ? sc : -INFINITY, -INFINITY); /* as k_attn_part (a NaN score included) */
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        const float p = lane < nc ? expf(sc - m) : 0.0f;
        const float l = pt_warp_sum(p + 0.0f); /* k_attn_part's sum of one cell a lane and a 0 */
        float a[DL];
#pragma unroll
        for (int k = 0; k < DL; k++)
            a[k] = 0.0f;
#pragma unroll
        for (int w = 0; w < PT_VW; w++) { /* k_attn_part's warp w: cells w, w + 4, .., w + 28 */
            float o[DL];
#pragma unroll
            for (int k = 0; k < DL; k++)
                o[k] = 0.0f;
#pragma unroll
            for (int u = 0; u < PT_CHUNK / PT_VW; u++) {
                const int t = w + PT_VW * u;
                const float pu = __shfl_sync(0xffffffffu, p, t); /* 0 for t ≥ nc */
#pragma unroll
                for (int k = 0; k < DL; k++) {
                    const float vv = t < nc ? (sh ? pt_load(&vs[t][lane * DL + k]) : pt_load(vc + gb + (int64_t)t * KV + k))
                                            : 0.0f;
                    o[k] = __fmaf_rn(pu, vv, o[k]);
                }
            }
#pragma unroll
            for (int k = 0; k < DL; k++)
                a[k] += o[k];
        }
        float *pt = part + (((int64_t)tok * g.n_head + h) * n_chunk + c) * (D + 2);
#pragma unroll
        for (int k = 0; k < DL; k++)
            pt[lane * DL + k] = a[k];
        if (lane == 0)
            pt[D] = m, pt[D + 1] = l;
    }
}

template <class C, int DL>
static int pattn_launch(const struct cuk_attn_geom *g, const float *q, const void *k_cache, const void *v_cache,
                        const int32_t *pos, const int32_t *seq, float *out, float *part, int B, int32_t max_pos,
                        cudaStream_t st)
{
    const int nch = (g->n_ctx + PT_CHUNK - 1) / PT_CHUNK; /* the partials' stride */
    const int nlaunch = max_pos >= 0 && max_pos < g->n_ctx ? max_pos / PT_CHUNK + 1 : nch;
    const int64_t Q = (int64_t)g->n_head * g->head_dim;
    return attn_groups(g, pos, part, out, B, nch, st, [&](int t0, int nt) {
        k_pattn_part<C, DL><<<dim3((unsigned)((nt + PT_TOK - 1) / PT_TOK), (unsigned)g->n_head, (unsigned)nlaunch),
                              PT_WARPS * 32, 0, st>>>(*g, q + t0 * Q, (const C *)k_cache, (const C *)v_cache, pos + t0,
                                                      seq + t0, part, nch, nt);
    });
}

/* Off unless PINFER_CUDA_PATTN=1. Measured (bench/gpu/NOTES.md) with the scores as one dependent
 * chain of 32 warp sums: slower than cuk_attn (pp512 d16: 26.6 against 22.3 ms of attention a step),
 * same bits. The 8-sums-in-flight version above has not run on the GPU yet. */
static bool pattn_on(void)
{
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("PINFER_CUDA_PATTN");
        on = e && strcmp(e, "1") == 0;
    }
    return on;
}

extern "C" int cuk_pattn(const struct cuk_attn_geom *g, const float *q, const void *k_cache, const void *v_cache,
                         const int32_t *pos, const int32_t *seq, float *out, float *part, int B, int32_t max_pos,
                         void *st)
{
    const cudaStream_t s = (cudaStream_t)st;
    const bool aligned = !(((uintptr_t)k_cache | (uintptr_t)v_cache) & 15);
    if (B > 8 && pattn_on() && aligned && g->n_head % g->n_head_kv == 0) {
        /* shared memory: 2 × 32 cells × head_dim as stored (≤ 32 KiB) */
        if (g->f16)
            switch (g->head_dim) {
            case 64: return pattn_launch<__half, 2>(g, q, k_cache, v_cache, pos, seq, out, part, B, max_pos, s);
            case 128: return pattn_launch<__half, 4>(g, q, k_cache, v_cache, pos, seq, out, part, B, max_pos, s);
            case 256: return pattn_launch<__half, 8>(g, q, k_cache, v_cache, pos, seq, out, part, B, max_pos, s);
            default: break;
            }
        else
            switch (g->head_dim) {
            case 64: return pattn_launch<float, 2>(g, q, k_cache, v_cache, pos, seq, out, part, B, max_pos, s);
            case 128: return pattn_launch<float, 4>(g, q, k_cache, v_cache, pos, seq, out, part, B, max_pos, s);
            default: break;
            }
    }
    return cuk_attn(g, q, k_cache, v_cache, pos, seq, out, part, B, max_pos, st);
}
