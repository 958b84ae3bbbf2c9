/* cuk_topk.cu — top-k of logits rows by radix selection (see cuk_topk.h).
 *
 * One block per row. Each candidate has an unsigned key that orders as samp_best does (a float's
 * bits made monotone: sign flipped for positives, all bits for negatives; -0 as +0, NaN as 0), so
 * the k-th best key T is found digit by digit: four passes of 8 bits over the row, each a 256-bin
 * histogram of the keys that share the digits found so far. Then every key above T is a candidate
 * (fewer than k), and of the keys equal to T the lowest ids, in index order (a block-wide scan over
 * contiguous chunks), fill the rest. The candidates' final positions are their ranks. No floating
 * point is computed: the result is exact and the same for any launch shape. k = 1 (greedy) takes
 * the best key in one pass instead (k_top1). */
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "cuk.h" /* cuk_argmax */
#include "cuk_topk.h"
}
#include "cuk_pdl.cuh"   /* pdl_launch, pdl_enter; CUK_TRACE_BLOCK (a -Dcuk_trace=true build) */

#define TOPK_THREADS 1024
#define TOPK_WARPS (TOPK_THREADS / 32)
#define RADIX_BITS 8
#define RADIX_BINS (1 << RADIX_BITS)

__device__ static inline uint32_t rank_key(float f)
{
    if (f != f)
        return 0u;
    if (f == 0.0f)
        f = 0.0f;
    const uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* k = 1 (greedy): the best key, the lowest id among equal ones — the order above, in one pass
 * (vals may be NULL: cuk_argmax) */
__global__ void __launch_bounds__(TOPK_THREADS) k_top1(const float *__restrict__ logits, int64_t n,
                                                       int32_t *__restrict__ ids, float *__restrict__ vals)
{
    CUK_TRACE_BLOCK(CUK_F_k_top1);
    __shared__ uint32_t s_key[TOPK_WARPS];
    __shared__ int32_t s_id[TOPK_WARPS];
    pdl_enter();
    const float *l = logits + (int64_t)blockIdx.x * n;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    uint32_t best = 0u;
    int32_t id = 0x7fffffff;
    for (int64_t i = tid; i < n; i += TOPK_THREADS) { /* ascending: the first of a thread's best */
        const uint32_t key = rank_key(l[i]);
        if (key > best || id == 0x7fffffff)
            best = key, id = (int32_t)i;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const uint32_t ok = __shfl_xor_sync(0xffffffffu, best, o);
        const int32_t oi = __shfl_xor_sync(0xffffffffu, id, o);
        if (ok > best || (ok == best && oi < id))
            best = ok, id = oi;
    }
    if (lane == 0)
        s_key[warp] = best, s_id[warp] = id;
    __syncthreads();
    if (tid == 0) {
        for (int w = 1; w < TOPK_WARPS; w++)
            if (s_key[w] > best || (s_key[w] == best && s_id[w] < id))
                best = s_key[w], id = s_id[w];
        ids[blockIdx.x] = id;
        if (vals)
            vals[blockIdx.x] = l[id];
    }
}

__global__ void __launch_bounds__(TOPK_THREADS) k_topk(const float *__restrict__ logits, int64_t n, int k,
                                                       int32_t *__restrict__ ids, float *__restrict__ vals)
{
    CUK_TRACE_BLOCK(CUK_F_k_topk);
    __shared__ uint32_t hist[RADIX_BINS];
    __shared__ uint32_t s_prefix, s_need, s_n_above;
    __shared__ uint32_t warp_sum[TOPK_WARPS];
    __shared__ uint32_t cand_key[CUK_TOPK_MAX];
    __shared__ int32_t cand_id[CUK_TOPK_MAX];
    pdl_enter();
    const float *l = logits + (int64_t)blockIdx.x * n;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    /* T, digit by digit from the top; `need`: how many keys equal to the prefix are still wanted */
    uint32_t prefix = 0, pmask = 0, need = (uint32_t)k;
    for (int shift = 32 - RADIX_BITS; shift >= 0; shift -= RADIX_BITS) {
        for (int i = tid; i < RADIX_BINS; i += TOPK_THREADS)
            hist[i] = 0;
        __syncthreads();
        /* a warp's lanes that fall in one bin add once, together: logits crowd a few bins of the
         * top digits, and 32 atomics on one shared word are served one by one */
        for (int64_t base = (int64_t)warp * 32; base < n; base += TOPK_THREADS) {
            const int64_t i = base + lane;
            const uint32_t key = i < n ? rank_key(l[i]) : 0u;
            const bool in = i < n && (key & pmask) == prefix;
            const unsigned in_mask = __ballot_sync(0xffffffffu, in);
            if (in) {
                const uint32_t bin = (key >> shift) & (RADIX_BINS - 1);
                const unsigned peers = __match_any_sync(in_mask, bin);
                if (lane == __ffs(peers) - 1)
                    atomicAdd(&hist[bin], (uint32_t)__popc(peers));
            }
        }
        __syncthreads();
        if (tid == 0) {
            uint32_t rem = need, d = 0;
            for (int b = RADIX_BINS - 1; b >= 0; b--) {
                if (hist[b] >= rem) {
                    d = (uint32_t)b;
                    break;
                }
                rem -= hist[b];
            }
            s_prefix = prefix | d << shift;
            s_need = rem;
        }
        __syncthreads();
        prefix = s_prefix;
        need = s_need;
        pmask |= (uint32_t)(RADIX_BINS - 1) << shift;
    }
    const uint32_t T = prefix; /* k - need keys are above T */

    if (tid == 0)
        s_n_above = 0;
    __syncthreads();
    for (int64_t i = tid; i < n; i += TOPK_THREADS) {
        const uint32_t key = rank_key(l[i]);
        if (key > T) {
            const uint32_t p = atomicAdd(&s_n_above, 1u);
            cand_key[p] = key;
            cand_id[p] = (int32_t)i;
        }
    }
    /* keys equal to T: the `need` lowest ids; thread t scans ids [t*chunk, (t+1)*chunk) */
    const int64_t chunk = (n + TOPK_THREADS - 1) / TOPK_THREADS;
    const int64_t c0 = (int64_t)tid * chunk, c1 = c0 + chunk < n ? c0 + chunk : n;
    uint32_t cnt = 0;
    for (int64_t i = c0; i < c1; i++)
        cnt += rank_key(l[i]) == T;
    uint32_t incl = cnt; /* inclusive scan of cnt over the block, in thread (= id) order */
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const uint32_t v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o)
            incl += v;
    }
    if (lane == 31)
        warp_sum[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        uint32_t w = warp_sum[lane];
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const uint32_t v = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o)
                w += v;
        }
        warp_sum[lane] = w;
    }
    __syncthreads();
    uint32_t before = incl - cnt + (warp ? warp_sum[warp - 1] : 0u);
    const uint32_t base = (uint32_t)k - need; /* == s_n_above, complete after the barriers above */
    for (int64_t i = c0; i < c1 && before < need; i++)
        if (rank_key(l[i]) == T) {
            cand_key[base + before] = T;
            cand_id[base + before] = (int32_t)i;
            before++;
        }
    __syncthreads();
    /* each candidate's place is the number of better ones */
    if (tid < k) {
        const uint32_t key = cand_key[tid];
        const int32_t id = cand_id[tid];
        int r = 0;
        for (int j = 0; j < k; j++)
            r += cand_key[j] > key || (cand_key[j] == key && cand_id[j] < id);
        ids[(int64_t)blockIdx.x * k + r] = id;
        vals[(int64_t)blockIdx.x * k + r] = l[id];
    }
}

extern "C" int cuk_topk(const float *logits, int B, int64_t n, int k, int32_t *ids, float *vals, void *st)
{
    if (B <= 0)
        return 0;
    if (k < 1 || k > CUK_TOPK_MAX || k > n)
        return -(int)cudaErrorInvalidValue;
    /* in the launch chain behind the output product (cuk_pdl.cuh) */
    static const bool top1 = env_on_unless_0("PINFER_CUDA_TOP1"); /* 0: the radix passes for k = 1 too (A/B) */
    if (k == 1 && top1)
        pdl_launch(k_top1, dim3((unsigned)B), dim3(TOPK_THREADS), 0, (cudaStream_t)st, logits, n, ids, vals);
    else
        pdl_launch(k_topk, dim3((unsigned)B), dim3(TOPK_THREADS), 0, (cudaStream_t)st, logits, n, k, ids, vals);
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : -(int)e;
}

extern "C" int cuk_argmax(const float *logits, int B, int64_t n, int32_t *ids, void *st)
{
    if (B <= 0)
        return 0;
    pdl_launch(k_top1, dim3((unsigned)B), dim3(TOPK_THREADS), 0, (cudaStream_t)st, logits, n, ids, (float *)NULL);
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : -(int)e;
}

extern "C" int cuk_topk_host(const float *rows, int B, int64_t n, int k, int32_t *ids, float *vals)
{
    float *dl = NULL, *dv = NULL;
    int32_t *di = NULL;
    const size_t cells = (size_t)B * (size_t)k;
    cudaError_t e = cudaMalloc((void **)&dl, (size_t)B * (size_t)n * sizeof(float));
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&di, cells * sizeof(int32_t));
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&dv, cells * sizeof(float));
    if (e == cudaSuccess)
        e = cudaMemcpy(dl, rows, (size_t)B * (size_t)n * sizeof(float), cudaMemcpyHostToDevice);
    int rc = e == cudaSuccess ? cuk_topk(dl, B, n, k, di, dv, NULL) : -(int)e;
    if (!rc && (e = cudaMemcpy(ids, di, cells * sizeof(int32_t), cudaMemcpyDeviceToHost)) != cudaSuccess)
        rc = -(int)e;
    if (!rc && (e = cudaMemcpy(vals, dv, cells * sizeof(float), cudaMemcpyDeviceToHost)) != cudaSuccess)
        rc = -(int)e;
    cudaFree(dl), cudaFree(di), cudaFree(dv);
    return rc;
}

/* this object's copy of the trace ring's pointers (cuk_trace.cuh; a CUK_TRACE build only) */
CUK_TRACE_SETTER(cuk_topk_trace_set)
