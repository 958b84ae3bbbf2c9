/* cuk_topk.cu — top-k of logits rows by radix selection (see cuk_topk.h).
 *
 * Each candidate has an unsigned key that orders as samp_best does (a float's bits made monotone:
 * sign flipped for positives, all bits for negatives; -0 as +0, NaN as 0). A block finds the k best
 * of a set of keys digit by digit (block_select): up to four passes of 8 bits, each a 256-bin
 * histogram of the keys that share the digits found so far, whose bins a scan over the block's
 * threads reads (the bin holding the k-th best). It stops early once that bin's keys are all wanted
 * (the usual case for distinct logits); otherwise the last digit leaves the k-th best key T, and of
 * the keys equal to T the lowest ids, in index order, fill the rest. No floating point is computed:
 * the result is exact and the same for any launch shape.
 *
 * A row is split over G blocks (k_topk_slice: each one slice's k best, in samp_best's order) and one
 * block merges the G·k candidates (k_topk_merge): every one of the row's k best is among its slice's
 * k best, and the candidates keep index order among equal keys (slices in order, each sorted), which
 * the ties' rule needs. One block held a whole row before: ~90 µs a token for llama.cpp's default
 * top 40 on the 32 000-logit row (bench/gpu/NOTES.md, p6), with 131 SMs idle. k = 1 (greedy) takes
 * the best key in one pass instead (k_top1). */
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "cuk.h" /* cuk_argmax */
#include "cuk_topk.h"
}
#include "cuk_compact_dev.cuh" /* block_scan_excl */
#include "cuk_pdl.cuh"   /* pdl_launch, pdl_enter; CUK_TRACE_BLOCK (a -Dcuk_trace=true build) */
#include "cuk_launch.cuh" /* launched, S */

#define TOPK_THREADS 1024 /* k_top1 */
#define TOPK_WARPS (TOPK_THREADS / 32)
#define RADIX_BITS 8
#define RADIX_BINS (1 << RADIX_BITS)
#define SEL_THREADS RADIX_BINS /* block_select: a thread per bin in the scan */
#define TOPK_SLICE 2048        /* a slice's logits, about: fewer blocks make the merge longer */
#define TOPK_SLICES_MAX 64

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

/* the keys a block selects from: a slice of a logits row, or the slices' candidates */
struct slice_keys {
    const float *l; /* the slice */
    int32_t first;  /* its first id */
    __device__ uint32_t key(int64_t i) const { return rank_key(l[i]); }
    __device__ int32_t id(int64_t i) const { return first + (int32_t)i; }
};
struct cand_keys {
    const uint2 *c; /* (key, id), ids ascending among equal keys */
    __device__ uint32_t key(int64_t i) const { return c[i].x; }
    __device__ int32_t id(int64_t i) const { return (int32_t)c[i].y; }
};

struct select_smem {
    uint32_t hist[RADIX_BINS];
    int32_t wsum[33]; /* block_scan_excl's */
    uint32_t prefix, need, exact, n_cand;
    uint32_t key[CUK_TOPK_MAX];
    int32_t id[CUK_TOPK_MAX];
};

/* The k best of the m keys of src, unordered, into sm.key / sm.id[0, k). Ids ascend with i among
 * equal keys. Every thread of the block calls it. */
template <class Keys> __device__ static void block_select(const Keys &src, int64_t m, int k, select_smem &sm)
{
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    /* the k best are the keys whose digits above `shift` beat prefix, and `need` of those equal to it */
    uint32_t prefix = 0, pmask = 0, need = (uint32_t)k, exact = 0;
    for (int shift = 32 - RADIX_BITS; shift >= 0 && !exact; shift -= RADIX_BITS) {
        sm.hist[tid] = 0;
        __syncthreads();
        /* a warp's lanes that fall in one bin add once, together: logits crowd a few bins of the
         * top digits, and 32 atomics on one shared word are served one by one */
        for (int64_t base = (int64_t)warp * 32; base < m; base += SEL_THREADS) {
            const int64_t i = base + lane;
            const uint32_t key = i < m ? src.key(i) : 0u;
            const bool in = i < m && (key & pmask) == prefix;
            const unsigned in_mask = __ballot_sync(0xffffffffu, in);
            if (in) {
                const uint32_t bin = (key >> shift) & (RADIX_BINS - 1);
                const unsigned peers = __match_any_sync(in_mask, bin);
                if (lane == __ffs(peers) - 1)
                    atomicAdd(&sm.hist[bin], (uint32_t)__popc(peers));
            }
        }
        __syncthreads();
        /* thread t reads bin 255 - t: its inclusive sum counts the keys in bins at or above it; the
         * one thread where it first reaches `need` holds the k-th best's digit */
        const uint32_t h = sm.hist[RADIX_BINS - 1 - tid];
        int32_t total;
        const uint32_t excl = (uint32_t)block_scan_excl<SEL_THREADS>((int32_t)h, sm.wsum, &total), incl = excl + h;
        if (excl < need && incl >= need) {
            sm.prefix = prefix | (uint32_t)(RADIX_BINS - 1 - tid) << shift;
            sm.need = need - excl;
            sm.exact = h == need - excl; /* the bin's keys are all wanted: no digit further */
        }
        __syncthreads();
        prefix = sm.prefix, need = sm.need, exact = sm.exact;
        pmask |= (uint32_t)(RADIX_BINS - 1) << shift;
    }

    /* the keys above the prefix (k - need of them), and with `exact` the `need` equal to it */
    if (tid == 0)
        sm.n_cand = 0;
    __syncthreads();
    for (int64_t i = tid; i < m; i += SEL_THREADS) {
        const uint32_t key = src.key(i), mk = key & pmask;
        if (mk > prefix || (exact && mk == prefix)) {
            const uint32_t p = atomicAdd(&sm.n_cand, 1u);
            sm.key[p] = key;
            sm.id[p] = src.id(i);
        }
    }
    if (!exact) { /* key T = prefix (all digits): the `need` first in index order, a block's round at a time */
        const uint32_t base = (uint32_t)k - need;
        uint32_t taken = 0;
        for (int64_t r = 0; r < m && taken < need; r += SEL_THREADS) {
            const int64_t i = r + tid;
            const bool eq = i < m && src.key(i) == prefix;
            int32_t n_eq;
            const uint32_t at = taken + (uint32_t)block_scan_excl<SEL_THREADS>(eq, sm.wsum, &n_eq);
            if (eq && at < need) {
                sm.key[base + at] = prefix;
                sm.id[base + at] = src.id(i);
            }
            taken += (uint32_t)n_eq;
        }
    }
    __syncthreads();
}

/* a candidate's place among the k: the number of better ones (samp_best's order: key, then lower id) */
__device__ static inline int cand_rank(const select_smem &sm, int k, uint32_t key, int32_t id)
{
    int r = 0;
    for (int j = 0; j < k; j++)
        r += sm.key[j] > key || (sm.key[j] == key && sm.id[j] < id);
    return r;
}

/* slice blockIdx.x of G of row blockIdx.y: its k best in order, into part (G > 1) or, as the row's
 * answer, into ids and vals (G = 1) */
__global__ void __launch_bounds__(SEL_THREADS) k_topk_slice(const float *__restrict__ logits, int64_t n, int k, int G,
                                                            uint2 *__restrict__ part, int32_t *__restrict__ ids,
                                                            float *__restrict__ vals)
{
    CUK_TRACE_BLOCK(CUK_F_k_topk_slice);
    __shared__ select_smem sm;
    pdl_enter();
    const int64_t row = blockIdx.y, g = blockIdx.x;
    const float *l = logits + row * n;
    const int64_t a = g * n / G, b = (g + 1) * n / G; /* ≥ k logits: G ≤ n / CUK_TOPK_MAX */
    block_select(slice_keys{ l + a, (int32_t)a }, b - a, k, sm);
    const int tid = threadIdx.x;
    if (tid < k) {
        const uint32_t key = sm.key[tid];
        const int32_t id = sm.id[tid];
        const int r = cand_rank(sm, k, key, id);
        if (G == 1) {
            ids[row * k + r] = id;
            vals[row * k + r] = l[id];
        } else {
            part[(row * G + g) * k + r] = make_uint2(key, (uint32_t)id);
        }
    }
}

/* row blockIdx.x: the k best of its slices' G·k candidates, in order */
__global__ void __launch_bounds__(SEL_THREADS) k_topk_merge(const float *__restrict__ logits, int64_t n, int k, int G,
                                                            const uint2 *__restrict__ part, int32_t *__restrict__ ids,
                                                            float *__restrict__ vals)
{
    CUK_TRACE_BLOCK(CUK_F_k_topk_merge);
    __shared__ select_smem sm;
    pdl_enter();
    const int64_t row = blockIdx.x;
    block_select(cand_keys{ part + row * G * k }, (int64_t)G * k, k, sm);
    const int tid = threadIdx.x;
    if (tid < k) {
        const uint32_t key = sm.key[tid];
        const int32_t id = sm.id[tid];
        const int r = cand_rank(sm, k, key, id);
        ids[row * k + r] = id;
        vals[row * k + r] = logits[row * n + id];
    }
}

/* slices a row of n is split into: about TOPK_SLICE logits each, at least CUK_TOPK_MAX (engine/vram_plan.c
 * mirrors it for the scratch) */
static int topk_slices_max(int64_t n)
{
    int64_t g = (n + TOPK_SLICE - 1) / TOPK_SLICE;
    if (g > TOPK_SLICES_MAX)
        g = TOPK_SLICES_MAX;
    if (g > n / CUK_TOPK_MAX)
        g = n / CUK_TOPK_MAX;
    return g < 1 ? 1 : (int)g;
}

/* ... fewer where PINFER_CUDA_TOPK_SLICES=N caps them (A/B; 1: a block a row) */
static int topk_slices(int64_t n)
{
    static const int cap = [] {
        const char *e = getenv("PINFER_CUDA_TOPK_SLICES");
        const int v = e ? atoi(e) : 0;
        return v >= 1 && v <= TOPK_SLICES_MAX ? v : TOPK_SLICES_MAX;
    }();
    const int g = topk_slices_max(n);
    return g < cap ? g : cap;
}

extern "C" size_t cuk_topk_scratch_bytes(int B, int64_t n)
{
    const int G = topk_slices_max(n);
    return G > 1 ? (size_t)B * (size_t)G * CUK_TOPK_MAX * sizeof(uint2) : 0;
}

extern "C" int cuk_topk(const float *logits, int B, int64_t n, int k, int32_t *ids, float *vals, void *scratch,
                        void *st)
{
    if (B <= 0)
        return 0;
    if (k < 1 || k > CUK_TOPK_MAX || k > n || n > INT32_MAX || B > 65535)
        return -(int)cudaErrorInvalidValue;
    /* in the launch chain behind the output product (cuk_pdl.cuh) */
    static const bool top1 = env_on_unless_0("PINFER_CUDA_TOP1"); /* 0: the radix selection for k = 1 too (A/B) */
    const cudaStream_t s = S(st);
    const int G = topk_slices(n);
    if (k == 1 && top1)
        pdl_launch(k_top1, dim3((unsigned)B), dim3(TOPK_THREADS), 0, s, logits, n, ids, vals);
    else if (G == 1)
        pdl_launch(k_topk_slice, dim3(1, (unsigned)B), dim3(SEL_THREADS), 0, s, logits, n, k, 1, (uint2 *)NULL, ids,
                   vals);
    else {
        if (!scratch)
            return -(int)cudaErrorInvalidValue;
        uint2 *part = (uint2 *)scratch;
        pdl_launch(k_topk_slice, dim3((unsigned)G, (unsigned)B), dim3(SEL_THREADS), 0, s, logits, n, k, G, part,
                   ids, vals);
        pdl_launch(k_topk_merge, dim3((unsigned)B), dim3(SEL_THREADS), 0, s, logits, n, k, G, (const uint2 *)part, ids,
                   vals);
    }
    return launched();
}

extern "C" int cuk_argmax(const float *logits, int B, int64_t n, int32_t *ids, void *st)
{
    if (B <= 0)
        return 0;
    pdl_launch(k_top1, dim3((unsigned)B), dim3(TOPK_THREADS), 0, S(st), logits, n, ids, (float *)NULL);
    return launched();
}

extern "C" int cuk_topk_host(const float *rows, int B, int64_t n, int k, int32_t *ids, float *vals)
{
    float *dl = NULL, *dv = NULL;
    int32_t *di = NULL;
    void *ds = NULL;
    const size_t cells = (size_t)B * (size_t)k, sb = cuk_topk_scratch_bytes(B, n);
    cudaError_t e = cudaMalloc((void **)&dl, (size_t)B * (size_t)n * sizeof(float));
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&di, cells * sizeof(int32_t));
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&dv, cells * sizeof(float));
    if (e == cudaSuccess && sb)
        e = cudaMalloc(&ds, sb);
    if (e == cudaSuccess)
        e = cudaMemcpy(dl, rows, (size_t)B * (size_t)n * sizeof(float), cudaMemcpyHostToDevice);
    int rc = e == cudaSuccess ? cuk_topk(dl, B, n, k, di, dv, ds, NULL) : -(int)e;
    if (!rc && (e = cudaMemcpy(ids, di, cells * sizeof(int32_t), cudaMemcpyDeviceToHost)) != cudaSuccess)
        rc = -(int)e;
    if (!rc && (e = cudaMemcpy(vals, dv, cells * sizeof(float), cudaMemcpyDeviceToHost)) != cudaSuccess)
        rc = -(int)e;
    cudaFree(dl), cudaFree(di), cudaFree(dv), cudaFree(ds);
    return rc;
}

/* this object's copy of the trace ring's pointers (cuk_trace.cuh; a CUK_TRACE build only) */
CUK_TRACE_SETTER(cuk_topk_trace_set)
