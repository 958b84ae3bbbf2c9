/* cuk_gglu.cu — the sparse path's gathered gate/up rows of one token on a cluster of CTAs (cuk_gglu.h).
 *
 * Why: the streamed kernel (cuk_mmv.cu) gives a gathered product's 16-row tile to one block of 8
 * warps, each streaming one of the tile's 8 K ranges with S − 1 = 4 chunks in flight. At s16's ~10 %
 * of 11 008 neurons that is ~69 tiles: ~69 of 132 SMs work, each warp waits for two HBM round trips,
 * and the product took 11.7 µs for 18 MB (0.34 of the read floor; bench/gpu/NOTES.md, 2026-12-03).
 * Here a tile goes to a cluster of GG_CW CTAs of GG_WPC warps: warp w of the cluster's CTA c owns K
 * range c · GG_WPC + w (cuk_mma.h's fixed ranges), and each warp keeps GG_S chunks in flight — all 8
 * of a range at K = 4 096 — so the 18 MB go out in one round trip a warp from ~4× as many SMs.
 *
 * Bits: each range is accumulated chunk by chunk as cuk_mma.cu's decode kernel does (the same words
 * of the same rows into the same mma fragments, the activation split or rounded once as there); at
 * the tile's end every warp stores its range's accumulators into CTA 0's shared memory (distributed
 * shared memory), one cluster barrier, and CTA 0 adds ranges 0..KS−1 in range order with __fadd_rn —
 * cuk_mma.cu's order, so the outputs equal the streamed kernel's and the prefill kernels' bit for
 * bit. NORM (the RMSNorm folded in): each CTA computes the row's sum of squares in norm_row's exact
 * order (cuk_mmv.cu: 256 virtual threads, each over e = v, v + 256, … in turn, each virtual warp's
 * butterfly, the 8 warps' sums from 0 in order) and keeps only its ranges' normalized elements.
 *
 * Shape: a persistent grid (as many clusters as fit at once, each walking tiles c, c + gridDim, …)
 * so that the tiles past the token's count cost one early exit a cluster, not one a tile. */
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "cuk.h"
#include "cuk_gglu.h"
#include "cuk_mma.h"
#include "model.h"
#include "quant.h"
}

#define KS CUK_MMA_KS
#define CH 64 /* elements of K per chunk, as cuk_mma.cu */
#define GG_CW 4                /* CTAs a cluster: a tile's K ranges split over them */
#define GG_WPC (KS / GG_CW)    /* warps a CTA, each one K range */
#define GG_NTH (GG_WPC * 32)   /* threads a CTA */
#define GG_S 8                 /* chunks a warp keeps in flight (its stages) */
#define GG_SLOTS 8             /* 16-byte words a thread copies a chunk: 2 matrices × rows g, g + 8 × 2 halves */
#define GG_NORM_NTH 256        /* the virtual block of norm_row (cuk_mmv.cu's NTH) */
#define GG_NORM_PER (GG_NORM_NTH / 32 / GG_WPC) /* virtual warps a real warp sums */
static_assert(KS % GG_CW == 0, "the ranges split evenly over the cluster");
static_assert(GG_NORM_NTH % (32 * GG_WPC) == 0, "the virtual warps split evenly over the CTA's warps");

#include "cuk_mma_dev.cuh"
#include "cuk_pdl.cuh"

namespace cg = cooperative_groups;

/* the ring of a CTA: [warp][stage][slot][lane] 16-byte words (64 KiB), then the CTA's ranges of the
 * row: 4 KiB at K = 4 096, at most 16 KiB (K ≤ 16 384) — three CTAs an SM at K ≤ 8 192 */
static constexpr size_t GG_RING = (size_t)GG_WPC * GG_S * GG_SLOTS * 32 * 16;
#define GG_SMEM_MAX (GG_RING + 16 * 1024)

__device__ static inline void cluster_arrive_relaxed(void) { asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory"); }
__device__ static inline void cluster_arrive(void) { asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory"); }
__device__ static inline void cluster_wait(void) { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }

struct ggo : mout {
    const float *nw; /* NORM: the RMSNorm weight, and its eps */
    float eps;
};

/* Tiles t = cluster, cluster + clusters, … of token blockIdx.y's listed rows; CTA rank c of the
 * cluster streams ranges c · GG_WPC + warp of each. */
template <bool BF, bool LO, bool NORM>
__global__ void __cluster_dims__(GG_CW, 1, 1) __launch_bounds__(GG_NTH)
    k_gglu(const uint8_t *__restrict__ w0, const uint8_t *__restrict__ w1, int64_t K, int64_t n_out,
           const float *__restrict__ x, ggo o)
{
    CUK_TRACE_BLOCK(CUK_F_k_gglu);
    extern __shared__ __align__(16) uint4 ring[]; /* GG_RING bytes, then the CTA's ranges of the row (f32) */
    __shared__ float red[2][KS][4][8];            /* CTA 0: each range's (gate, up) × (row g, g + 8) of token 0 */
    __shared__ float shv[GG_NORM_NTH / 32];
    cg::cluster_group cl = cg::this_cluster();
    const int crank = (int)cl.block_rank(), cid = (int)(blockIdx.x / GG_CW), ncl = (int)(gridDim.x / GG_CW);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int tok = (int)blockIdx.y;
    const int nk = (int)((K + CH - 1) / CH), cpr = (nk + KS - 1) / KS;
    const int r = crank * GG_WPC + warp; /* this warp's K range */
    const int c0 = r * cpr < nk ? r * cpr : nk, c1 = c0 + cpr < nk ? c0 + cpr : nk, nw = c1 - c0;
    const int cb = crank * GG_WPC * cpr < nk ? crank * GG_WPC * cpr : nk; /* the CTA's first chunk */
    const int64_t eb = (int64_t)cb * CH; /* the CTA's first element of the row */
    const int64_t ee = (int64_t)(cb + GG_WPC * cpr) * CH < K ? (int64_t)(cb + GG_WPC * cpr) * CH : K;
    const int64_t ne = ee > eb ? ee - eb : 0; /* the CTA's elements of the row */
    const int32_t *lst = o.idx + (int64_t)tok * o.idx_stride;

    /* NORM: the CTA's norm weights before the wait (no kernel of the step writes them) */
    constexpr int WV = 16;
    float wv[NORM ? WV : 1];
    if constexpr (NORM)
#pragma unroll
        for (int u = 0; u < WV; u++) {
            const int64_t e = tid + (int64_t)u * GG_NTH;
            wv[u] = e < ne ? o.nw[eb + e] : 0.0f;
        }
    pdl_wait(); /* the list and the row are the previous kernels' */
    /* the count and the first tile's list entries in one round trip (entries past the count unused) */
    const int64_t jmax = o.idx_stride - 1;
    int64_t j0 = (int64_t)cid * 16;
    int32_t lg = lst[j0 + g < jmax ? j0 + g : jmax], lh = lst[j0 + g + 8 < jmax ? j0 + g + 8 : jmax];
    const int64_t n = o.cnt ? o.cnt[tok] : n_out, ntiles = (n + 15) / 16;
    if (cid >= ntiles)
        return; /* the whole cluster */
    const int nt = (int)((ntiles - cid + ncl - 1) / ncl); /* this cluster's tiles */
    cluster_arrive_relaxed(); /* phase 0: every CTA of the cluster has started (before any remote store) */

    /* the producer: item p = chunk c0 + p % nw of this cluster's tile p / nw */
    uint4 *wring = ring + (size_t)warp * GG_S * GG_SLOTS * 32 + lane;
    const uint8_t *rp[2][2];
    bool rv[2]; /* rows g, g + 8 of the producer's tile are listed (else zeros, not read) */
    auto rows = [&](int64_t jt, int32_t ig, int32_t ih) {
        rv[0] = jt + g < n, rv[1] = jt + g + 8 < n;
        const int64_t rg = rv[0] ? ig : 0, rh = rv[1] ? ih : 0;
        rp[0][0] = w0 + rg * K * 2, rp[0][1] = w0 + rh * K * 2;
        rp[1][0] = w1 + rg * K * 2, rp[1][1] = w1 + rh * K * 2;
    };
    int p = 0, pit = 0, pc = c0;
    const int total = nt * nw;
    auto produce = [&]() {
        asm volatile("" ::: "memory"); /* the stage's words were read (into registers) before it is refilled */
        if (p < total) {
            uint4 *st = wring + (size_t)(p % GG_S) * GG_SLOTS * 32;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int64_t e = elem(pc, t, h);
                const bool ok = e + 8 <= K;
#pragma unroll
                for (int m = 0; m < 2; m++)
#pragma unroll
                    for (int q = 0; q < 2; q++) {
                        const bool rd = ok && rv[q];
                        cp16(st + ((m * 2 + q) * 2 + h) * 32, rd ? rp[m][q] + 2 * e : rp[m][q], rd ? 16 : 0);
                    }
            }
            if (++pc == c1) {
                pc = c0, pit++;
                if (pit < nt) {
                    const int64_t jt = ((int64_t)cid + (int64_t)pit * ncl) * 16;
                    rows(jt, lst[jt + g < jmax ? jt + g : jmax], lst[jt + g + 8 < jmax ? jt + g + 8 : jmax]);
                }
            }
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory"); /* one group an item, empty past the end */
        p++;
    };
    if (nw > 0)
        rows(j0, lg, lh);
#pragma unroll
    for (int s = 0; s < GG_S; s++)
        produce();
    pdl_trigger();

    /* the CTA's ranges of the token's row into shared memory (NORM: normalized, norm_row's bits) */
    float *xs = (float *)((uint8_t *)ring + GG_RING);
    const float *xt = x + (int64_t)tok * K;
    if constexpr (NORM) {
        /* pass 1, the virtual threads' chains (all of a row of ≤ 4 096 in one batch of loads); the
         * CTA's elements are kept raw in xs by whichever thread loaded them */
        float vs[GG_NORM_PER];
#pragma unroll
        for (int k = 0; k < GG_NORM_PER; k++)
            vs[k] = 0.0f;
        for (int64_t b0 = 0; b0 < K; b0 += (int64_t)WV * GG_NORM_NTH) {
            float xv[GG_NORM_PER][WV];
#pragma unroll
            for (int k = 0; k < GG_NORM_PER; k++)
#pragma unroll
                for (int u = 0; u < WV; u++) {
                    const int64_t e = b0 + (warp * GG_NORM_PER + k) * 32 + lane + (int64_t)u * GG_NORM_NTH;
                    xv[k][u] = e < K ? xt[e] : 0.0f;
                }
#pragma unroll
            for (int k = 0; k < GG_NORM_PER; k++)
#pragma unroll
                for (int u = 0; u < WV; u++) {
                    const int64_t e = b0 + (warp * GG_NORM_PER + k) * 32 + lane + (int64_t)u * GG_NORM_NTH;
                    if (e < K) {
                        vs[k] = __fmaf_rn(xv[k][u], xv[k][u], vs[k]);
                        if (e >= eb && e < ee)
                            xs[e - eb] = xv[k][u];
                    }
                }
        }
#pragma unroll
        for (int k = 0; k < GG_NORM_PER; k++) {
            float s = vs[k];
#pragma unroll
            for (int of = 16; of > 0; of >>= 1)
                s += __shfl_xor_sync(0xffffffffu, s, of);
            if (lane == 0)
                shv[warp * GG_NORM_PER + k] = s;
        }
        __syncthreads(); /* shv and the raw xs */
        float ss = 0.0f;
        for (int i = 0; i < GG_NORM_NTH / 32; i++)
            ss += shv[i];
        const float scale = 1.0f / sqrtf(ss / (float)K + o.eps);
        for (int64_t b0 = 0; b0 < ne; b0 += (int64_t)WV * GG_NTH)
#pragma unroll
            for (int u = 0; u < WV; u++) {
                const int64_t e = b0 + tid + (int64_t)u * GG_NTH;
                if (e < ne)
                    xs[e] = __fmul_rn(__fmul_rn(xs[e], scale), b0 == 0 ? wv[u] : o.nw[eb + e]);
            }
    } else {
        for (int64_t b0 = 0; b0 < ne; b0 += (int64_t)WV * GG_NTH) {
            float xv[WV];
#pragma unroll
            for (int u = 0; u < WV; u++) {
                const int64_t e = b0 + tid + (int64_t)u * GG_NTH;
                xv[u] = e < ne ? xt[eb + e] : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < WV; u++) {
                const int64_t e = b0 + tid + (int64_t)u * GG_NTH;
                if (e < ne)
                    xs[e] = xv[u];
            }
        }
    }
    __syncthreads();

    float *red0 = cl.map_shared_rank(&red[0][0][0][0], 0); /* CTA 0's red[][][][] */
    int i = 0;
    for (int it = 0; it < nt; it++) {
        const int buf = it & 1;
        float acc[2][4];
#pragma unroll
        for (int m = 0; m < 2; m++)
#pragma unroll
            for (int k = 0; k < 4; k++)
                acc[m][k] = 0.0f;
        for (int k = 0; k < nw; k++, i++) {
            asm volatile("cp.async.wait_group %0;\n" ::"n"(GG_S - 1) : "memory"); /* item i has landed */
            const uint4 *st = wring + (size_t)(i % GG_S) * GG_SLOTS * 32;
            uint4 a[2][2][2];
#pragma unroll
            for (int m = 0; m < 2; m++)
#pragma unroll
                for (int q = 0; q < 2; q++)
#pragma unroll
                    for (int h = 0; h < 2; h++)
                        a[m][q][h] = st[((m * 2 + q) * 2 + h) * 32];
            float4 xv[2][2];
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int q = 0; q < 2; q++) {
                    const int64_t e = elem(c0 + k, t, h);
                    xv[h][q] = g == 0 && e + 8 <= K ? *(const float4 *)(xs + (e - eb) + 4 * q)
                                                    : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                }
            uint32_t hw[8], lw[8];
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int q = 0; q < 2; q++)
                    split4<BF, LO>(xv[h][q], hw + 4 * h + 2 * q, lw + 4 * h + 2 * q);
            const uint4 bh[2] = { make_uint4(hw[0], hw[1], hw[2], hw[3]), make_uint4(hw[4], hw[5], hw[6], hw[7]) };
            const uint4 bl[2] = { make_uint4(lw[0], lw[1], lw[2], lw[3]), make_uint4(lw[4], lw[5], lw[6], lw[7]) };
#pragma unroll
            for (int m = 0; m < 2; m++)
                mma_chunk<BF, LO>(acc[m], a[m][0], a[m][1], bh, bl);
            produce(); /* item i + GG_S, into the stage item i left (its words are in registers) */
        }
        /* token 0 is column 0: lanes t = 0 hold it, acc[m][0] row g and acc[m][2] row g + 8 */
        if (it == 0)
            cluster_wait(); /* phase 0 done: CTA 0 has started */
        if (t == 0) {
            float *dst = red0 + ((size_t)(buf * KS + r) * 4) * 8 + g;
            dst[0 * 8] = acc[0][0], dst[1 * 8] = acc[1][0], dst[2 * 8] = acc[0][2], dst[3 * 8] = acc[1][2];
        }
        cluster_arrive(); /* red[buf] complete after this phase; rewritten two tiles on, after the next one */
        cluster_wait();
        if (crank != 0 || warp != 0 || t != 0)
            continue;
        float s[4];
#pragma unroll
        for (int v = 0; v < 4; v++) {
            s[v] = red[buf][0][v][g];
#pragma unroll
            for (int w = 1; w < KS; w++)
                s[v] = __fadd_rn(s[v], red[buf][w][v][g]);
        }
        const int64_t jt = ((int64_t)cid + (int64_t)it * ncl) * 16;
        if (jt + g < n)
            emit_glu<true>(o, n_out, jt + g, tok, s[0], s[1]);
        if (jt + g + 8 < n)
            emit_glu<true>(o, n_out, jt + g + 8, tok, s[2], s[3]);
    }
}

/* the dynamic shared memory of a CTA for rows of K elements */
static size_t gg_smem(int64_t K)
{
    const int64_t nk = (K + CH - 1) / CH, cpr = (nk + KS - 1) / KS;
    return GG_RING + (size_t)(GG_WPC * cpr * CH) * sizeof(float);
}

template <bool BF, bool LO, bool NORM>
static int gg_launch(const uint8_t *w0, const uint8_t *w1, int64_t K, int64_t n_out, const float *x, int B, const ggo &o,
                     cudaStream_t st)
{
    const size_t smem = gg_smem(K);
    if (smem > GG_SMEM_MAX)
        return -(int)cudaErrorInvalidValue;
    static const cudaError_t attr = [] {
        cudaError_t e = cudaFuncSetAttribute(k_gglu<BF, LO, NORM>, cudaFuncAttributeMaxDynamicSharedMemorySize, GG_SMEM_MAX);
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(k_gglu<BF, LO, NORM>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     (int)cudaSharedmemCarveoutMaxShared);
        return e;
    }();
    if (attr != cudaSuccess)
        return -(int)attr;
    static size_t at_smem = 0; /* the clusters resident at once for this row size (one per model) */
    static int clusters = 0;
    if (smem != at_smem) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(GG_CW * 1024), cfg.blockDim = dim3(GG_NTH), cfg.dynamicSmemBytes = smem;
        const cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, k_gglu<BF, LO, NORM>, &cfg);
        if (e != cudaSuccess || clusters < 1)
            return -(int)(e != cudaSuccess ? e : cudaErrorInvalidConfiguration);
        at_smem = smem;
        const char *cl = getenv("PINFER_CUDA_GGLU_CL"); /* measurements: the grid's clusters */
        if (cl && atoi(cl) > 0)
            clusters = atoi(cl);
        if (getenv("PINFER_CUDA_GGLU_INFO"))
            fprintf(stderr, "cuk_gglu: K %lld, %zu bytes of shared memory a CTA, %d clusters of %d CTAs\n", (long long)K,
                    smem, clusters, GG_CW);
    }
    const int64_t tiles = (n_out + 15) / 16;
    const unsigned gx = (unsigned)(tiles < clusters ? tiles : clusters) * GG_CW;
    pdl_launch(k_gglu<BF, LO, NORM>, dim3(gx, (unsigned)B), dim3(GG_NTH), smem, st, w0, w1, K, n_out, x, o);
    return launched();
}

extern "C" bool cuk_gglu_on(void)
{
    static int on = -1; /* read once: a decode graph must not change kernels between captures */
    if (on < 0) {
        const char *e = getenv("PINFER_CUDA_GGLU");
        on = !(e && strcmp(e, "0") == 0);
    }
    return on;
}

extern "C" bool cuk_gglu_fits(int64_t n_in) { return n_in % 8 == 0 && gg_smem(n_in) <= GG_SMEM_MAX; }

extern "C" int cuk_gglu(uint32_t type, const void *gate, const void *up, int64_t n_in, int64_t n_out, const float *x,
                        const float *norm_w, float eps, int B, float *act, int act_kind, const int32_t *idx,
                        const int32_t *cnt, int64_t idx_stride, bool compact, void *st)
{
    if ((type != PI_TYPE_F16 && type != PI_TYPE_BF16) || !idx || !cuk_gglu_fits(n_in) || B < 0)
        return -(int)cudaErrorInvalidValue;
    if (B == 0)
        return 0;
    ggo o = {};
    o.y = act, o.kind = act_kind, o.idx = idx, o.cnt = cnt, o.idx_stride = idx_stride, o.compact = compact;
    o.nw = norm_w, o.eps = eps;
    const uint8_t *g = (const uint8_t *)gate, *u = (const uint8_t *)up;
    const cudaStream_t s = (cudaStream_t)st;
    if (norm_w) {
        if (type == PI_TYPE_BF16)
            return gg_launch<true, true, true>(g, u, n_in, n_out, x, B, o, s);
        return cuk_mma_act16(type) ? gg_launch<false, false, true>(g, u, n_in, n_out, x, B, o, s)
                                   : gg_launch<false, true, true>(g, u, n_in, n_out, x, B, o, s);
    }
    if (type == PI_TYPE_BF16)
        return gg_launch<true, true, false>(g, u, n_in, n_out, x, B, o, s);
    return cuk_mma_act16(type) ? gg_launch<false, false, false>(g, u, n_in, n_out, x, B, o, s)
                               : gg_launch<false, true, false>(g, u, n_in, n_out, x, B, o, s);
}

/* this object's copy of the trace ring's pointers (cuk_trace.cuh; a CUK_TRACE build only) */
CUK_TRACE_SETTER(cuk_gglu_trace_set)
