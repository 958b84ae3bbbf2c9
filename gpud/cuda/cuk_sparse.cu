/* cuk_sparse.cu — the sparse FFN's down side on the CUDA cores (interface: cuk.h): the AXPY over the
 * active neurons' ffn_down_t rows into per-chunk partials, their sum in chunk order (k_chunk_sum), and
 * a mask compacted into the active neurons' ordered list (k_compact; k_iota for a dense list). A
 * token's result depends only on its own rows and counts, never on the batch. */
#include <cuda_runtime.h>

#include <stdint.h>

extern "C" {
#include "cuk.h"
#include "model.h"
#include "quant.h"
}
#include "cuk_launch.cuh"
#include "cuk_traits.cuh"
#include "cuk_pdl.cuh"
#include "cuk_lane_dev.cuh"
#include "cuk_compact_dev.cuh" /* block_scan_excl: k_compact */

#define AXPY_THREADS 64
/* rows of a chunk in flight per thread (their words loaded together, then added in ascending j: the
 * same additions whatever G): the whole 16-row chunk for the float types' 8-element lane blocks (one
 * HBM round trip instead of two: ~+1.7 % on s16, across two calls), 8 for the Q types' 32-element
 * ones (16 was 1 % slower on s4: 32 accumulators and 16 rows' words a thread); bench/gpu/NOTES.md,
 * 2026-12-02 gsparse */
template <class T> struct AxpyG {
    enum { G = T::E <= 8 ? 16 : 8 };
};

template <class T>
__global__ void __launch_bounds__(AXPY_THREADS) k_axpy(const uint8_t *__restrict__ q, const uint8_t *__restrict__ d,
                                                       int64_t n_embd, int64_t n_ff, const float *__restrict__ act,
                                                       const int32_t *__restrict__ idx, const int32_t *__restrict__ cnt,
                                                       int64_t idx_stride, float *__restrict__ part, int64_t n_chunk)
{
    CUK_TRACE_BLOCK(CUK_F_k_axpy);
    constexpr int AXPY_G = AxpyG<T>::G;
    pdl_enter();
    /* chunks on y, each block taking chunks blockIdx.y, + gridDim.y, ... up to the count: the grid
     * is capped at about what the GPU holds at once (axpy_grid_y), where one block a chunk of n_ff
     * left ~90 % of a sparse step's blocks past the count, cycling through the SMs after the
     * working ones (4 µs of a 10.8 µs AXPY on s16, bench/gpu/NOTES.md 2026-12-04). A chunk's
     * partial is computed as before: the same bits whatever the grid. */
    const int tok = blockIdx.z;
    const int64_t n = cnt ? cnt[tok] : n_ff;
    const int64_t nb = n_embd / T::E, pb = (int64_t)blockIdx.x * AXPY_THREADS + threadIdx.x;
    if (pb >= nb)
        return;
    const float *a = act + (int64_t)tok * idx_stride;
    for (int64_t c = blockIdx.y, j0 = c * CUK_AXPY_CHUNK; j0 < n; c += gridDim.y, j0 = c * CUK_AXPY_CHUNK) {
        float acc[T::E];
#pragma unroll
        for (int e = 0; e < T::E; e++)
            acc[e] = 0.0f;
        const int64_t j1 = j0 + CUK_AXPY_CHUNK < n ? j0 + CUK_AXPY_CHUNK : n;
        /* AXPY_G rows at a time: their activations and row ids first, then every (non-zero) row's
         * word in flight together, then the additions in ascending j as before (the loads were one
         * dependent round trip per row: ~16 HBM latencies a block) */
        for (int64_t jb = j0; jb < j1; jb += AXPY_G) {
            float aj[AXPY_G];
            int64_t r[AXPY_G];
#pragma unroll
            for (int u = 0; u < AXPY_G; u++) {
                const int64_t j = jb + u;
                aj[u] = j < j1 ? a[j] : 0.0f;
                r[u] = j < j1 ? (idx ? idx[tok * idx_stride + j] : j) : 0;
            }
            uint4 qq[AXPY_G][T::NQ];
            typename T::S s[AXPY_G];
#pragma unroll
            for (int u = 0; u < AXPY_G; u++)
                if (aj[u] != 0.0f)
                    load_lb<T>(q + r[u] * nb * (16 * T::NQ), T::HAS_D ? d + r[u] * T::sbytes(nb) : nullptr, nb, pb,
                               qq[u], &s[u]);
#pragma unroll
            for (int u = 0; u < AXPY_G; u++)
                if (aj[u] != 0.0f) /* a zero activation skips its row */
                    T::axpy(qq[u], s[u], aj[u], acc);
        }
        float4 *out = (float4 *)(part + ((int64_t)tok * n_chunk + c) * n_embd + pb * T::E);
#pragma unroll
        for (int k = 0; k < T::E / 4; k++)
            out[k] = make_float4(acc[4 * k], acc[4 * k + 1], acc[4 * k + 2], acc[4 * k + 3]);
    }
}

/* the AXPY's y blocks: every chunk of n_ff where the whole grid fits the SMs at AXPY_BLOCKS_PER_SM
 * (the 64-thread blocks of all nt tokens at once), else that many, each looping */
#define AXPY_BLOCKS_PER_SM 16
static unsigned axpy_grid_y(int64_t n_chunk, int64_t x_blocks, int nt)
{
    const int64_t most = (int64_t)AXPY_BLOCKS_PER_SM * cuk_sm_count() / (x_blocks * nt);
    const int64_t y = n_chunk < most ? n_chunk : most;
    return (unsigned)(y > 0 ? y : 1);
}

/* partials loaded together by each thread. 96 (one batch for a sparse step's ~70 chunks instead of
 * two) measured 4–5 % slower on s16 and s4 (bench/gpu/NOTES.md, f7): ptxas then keeps 38 registers,
 * so the loads are no longer in flight together, where 40 keeps all of them (128 registers) */
#define CHUNK_SUM_G 40
#define CHUNK_SUM_EPB 64 /* elements a block, two threads each */

/* y[e] (+)= the partials of the token's chunks, added in chunk order. Two threads an element (lanes
 * 2i, 2i + 1) each load CHUNK_SUM_G of them together — a sparse step's ~70 chunks in one L2 round trip
 * instead of two — then the first adds its own in order, hands its sum by a shuffle to the second,
 * which goes on with its own: the same additions in the same order (bits unchanged). The count and
 * y's row are read before the wait: in the decode chain they are outputs of kernels at least two
 * back (the gathered gate/up or the compaction; wo), complete by then (cuk_pdl.cuh). */
__global__ void k_chunk_sum(const float *__restrict__ part, const int32_t *__restrict__ cnt, int64_t n_ff,
                            int64_t n_embd, int64_t n_chunk, float *y, bool add)
{
    CUK_TRACE_BLOCK(CUK_F_k_chunk_sum);
    const int tok = blockIdx.y, lane = threadIdx.x & 31, second = lane & 1;
    const int64_t e = (int64_t)blockIdx.x * CHUNK_SUM_EPB + (threadIdx.x >> 1);
    const bool ok = e < n_embd; /* the same for both threads of a pair */
    const int64_t n = cnt ? __ldcg(cnt + tok) : n_ff, nc = (n + CUK_AXPY_CHUNK - 1) / CUK_AXPY_CHUNK;
    float *o = y + (int64_t)tok * n_embd + e;
    const float y0 = add && ok && !second ? __ldcg(o) : 0.0f;
    pdl_enter();
    if (!ok)
        return;
    const unsigned pair = 3u << (lane & ~1);
    const float *p = part + (int64_t)tok * n_chunk * n_embd + e;
    float s = 0.0f;
    for (int64_t c0 = 0; c0 < nc; c0 += 2 * CHUNK_SUM_G) {
        const int64_t cb = c0 + (second ? CHUNK_SUM_G : 0);
        float v[CHUNK_SUM_G];
#pragma unroll
        for (int u = 0; u < CHUNK_SUM_G; u++)
            v[u] = cb + u < nc ? p[(cb + u) * n_embd] : 0.0f;
        if (!second)
#pragma unroll
            for (int u = 0; u < CHUNK_SUM_G; u++)
                if (cb + u < nc)
                    s += v[u];
        s = __shfl_sync(pair, s, lane & ~1); /* the second takes the first's sum */
        if (second)
#pragma unroll
            for (int u = 0; u < CHUNK_SUM_G; u++)
                if (cb + u < nc)
                    s += v[u];
        s = __shfl_sync(pair, s, lane | 1); /* both carry the second's sum into the next batch */
    }
    if (!second)
        *o = add ? y0 + s : s;
}

static int chunk_sum(const float *part, const int32_t *cnt, int64_t n_ff, int64_t n_embd, int nt, float *y, bool add,
                     cudaStream_t st)
{
    const int64_t n_chunk = (n_ff + CUK_AXPY_CHUNK - 1) / CUK_AXPY_CHUNK;
    pdl_launch(k_chunk_sum, dim3((unsigned)((n_embd + CHUNK_SUM_EPB - 1) / CHUNK_SUM_EPB), (unsigned)nt),
               dim3(2 * CHUNK_SUM_EPB), 0, st, part, cnt, n_ff, n_embd, n_chunk, y, add);
    return launched();
}

extern "C" size_t cuk_axpy_part_floats(int64_t n_ff, int64_t n_embd, int B)
{
    return (size_t)((n_ff + CUK_AXPY_CHUNK - 1) / CUK_AXPY_CHUNK) * (size_t)n_embd * (size_t)B;
}

template <class T>
static int axpy_t(const struct cuk_w *w, const float *act, int B, const int32_t *idx, const int32_t *cnt,
                  int64_t idx_stride, float *part, float *y, bool add, cudaStream_t st)
{
    const int64_t n_embd = w->n_in, n_ff = w->n_out, nb = n_embd / T::E;
    const int64_t n_chunk = (n_ff + CUK_AXPY_CHUNK - 1) / CUK_AXPY_CHUNK;
    static const bool carved = carve((const void *)k_axpy<T>) && carve((const void *)k_chunk_sum);
    (void)carved;
    /* the partial sums hold CUK_AXPY_MAX_B tokens: larger batches go in groups, each token alone in
     * its blocks either way */
    for (int t0 = 0; t0 < B; t0 += CUK_AXPY_MAX_B) {
        const int nt = B - t0 < CUK_AXPY_MAX_B ? B - t0 : CUK_AXPY_MAX_B;
        const float *at = act + (int64_t)t0 * idx_stride;
        const int32_t *it = idx ? idx + (int64_t)t0 * idx_stride : nullptr, *ct = cnt ? cnt + t0 : nullptr;
        float *yt = y + (int64_t)t0 * n_embd;
        const int64_t xb = (nb + AXPY_THREADS - 1) / AXPY_THREADS;
        const dim3 grid((unsigned)xb, axpy_grid_y(n_chunk, xb, nt), (unsigned)nt);
        pdl_launch(k_axpy<T>, grid, dim3(AXPY_THREADS), 0, st, (const uint8_t *)w->q, (const uint8_t *)w->d, n_embd, n_ff,
                   at, it, ct, idx_stride, part, n_chunk);
        int rc = launched();
        if (rc)
            return rc;
        if ((rc = chunk_sum(part, ct, n_ff, n_embd, nt, yt, add, st)))
            return rc;
    }
    return 0;
}

extern "C" int cuk_axpy_rows(const struct cuk_w *down_t, const float *act, int B, const int32_t *idx,
                             const int32_t *cnt, int64_t idx_stride, float *part, float *y, bool add, void *st)
{
    CUK_DISPATCH(down_t->type, return axpy_t<T>(down_t, act, B, idx, cnt, idx_stride, part, y, add, S(st)));
    return 0;
}

/* ---- mask compaction: an ordered block scan, one block per token ---- */

/* non-zero bytes of a 32-bit word */
__device__ static inline int nz4(uint32_t w) { return __popc(__vcmpne4(w, 0u)) >> 3; }

/* idx[tok][0..cnt) = the i with mask[tok][i] != 0, ascending. Thread t takes a contiguous segment of
 * 16-byte multiples (at 11 008 neurons one 16-byte load each: the kernel was one dependent byte load
 * after another over ~11 bytes a thread, twice), counts, the counts are scanned over the warp and then
 * over the warps, and each thread writes its segment's indices from its offset. PDL-launched: it
 * follows the predictor's fc2 in the decode chain (cudev_predict). */
__global__ void __launch_bounds__(1024) k_compact(const uint8_t *__restrict__ mask, int64_t n, int32_t *idx, int32_t *cnt)
{
    CUK_TRACE_BLOCK(CUK_F_k_compact);
    __shared__ int32_t wsum[33];
    pdl_enter(); /* the mask is the previous kernel's (or copy's) output */
    const int tok = blockIdx.x, t = threadIdx.x;
    const uint8_t *m = mask + (int64_t)tok * n;
    const bool vec = ((uintptr_t)m & 15) == 0;
    int64_t seg = (n + 1023) / 1024;
    seg = (seg + 15) & ~(int64_t)15;
    const int64_t i0 = (int64_t)t * seg < n ? (int64_t)t * seg : n, i1 = i0 + seg < n ? i0 + seg : n;
    const int64_t v1 = vec ? i0 + ((i1 - i0) & ~(int64_t)15) : i0; /* [i0, v1) in 16-byte words, the rest bytes */
    int32_t c = 0;
#pragma unroll 4
    for (int64_t i = i0; i < v1; i += 16) {
        const uint4 v = *(const uint4 *)(m + i);
        c += nz4(v.x) + nz4(v.y) + nz4(v.z) + nz4(v.w);
    }
    for (int64_t i = v1; i < i1; i++)
        c += m[i] != 0;
    int32_t total;
    int32_t o = block_scan_excl<1024>(c, wsum, &total);
    if (t == 0)
        cnt[tok] = total;
    int32_t *out = idx + (int64_t)tok * n;
    for (int64_t i = i0; i < v1; i += 16) {
        const uint4 v = *(const uint4 *)(m + i);
        const uint32_t w4[4] = { v.x, v.y, v.z, v.w };
#pragma unroll
        for (int k = 0; k < 4; k++) {
            if (!w4[k])
                continue;
#pragma unroll
            for (int b = 0; b < 4; b++)
                if ((w4[k] >> (8 * b)) & 0xffu)
                    out[o++] = (int32_t)(i + 4 * k + b);
        }
    }
    for (int64_t i = v1; i < i1; i++)
        if (m[i])
            out[o++] = (int32_t)i;
}

extern "C" int cuk_compact(const uint8_t *mask, int B, int64_t n, int32_t *idx, int32_t *cnt, void *st)
{
    static const bool carved = carve((const void *)k_compact);
    (void)carved;
    pdl_launch(k_compact, dim3((unsigned)B), dim3(1024), 0, S(st), mask, n, idx, cnt);
    return launched();
}

__global__ void k_iota(int64_t n, int32_t *idx, int32_t *cnt)
{
    CUK_TRACE_BLOCK(CUK_F_k_iota);
    const int tok = blockIdx.y;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        idx[(int64_t)tok * n + i] = (int32_t)i;
    if (i == 0)
        cnt[tok] = (int32_t)n;
}

extern "C" int cuk_iota(int B, int64_t n, int32_t *idx, int32_t *cnt, void *st)
{
    k_iota<<<dim3((unsigned)((n + 255) / 256), (unsigned)B), 256, 0, S(st)>>>(n, idx, cnt);
    return launched();
}
/* this object's copy of the trace ring's pointers (cuk_trace.cuh; a CUK_TRACE build only) */
CUK_TRACE_SETTER(cuk_sparse_trace_set)
