/* cuk_hand.cu — the hand-off kernels (see cuk_hand.h). Both are launched in the decode chain's
 * programmatic order (cuk_pdl.cuh): out waits for the predictor before it reads x and the masks; add
 * polls its keys before the hot FFN has finished (the keys are host words no kernel writes) and
 * waits for it only before it reads pending and writes x. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuk_pdl.cuh"

extern "C" {
#include "cuk_hand.h"
}

#define OUT_THREADS 1024
#define ADD_THREADS 1024
#define ADD_PER_THREAD 4

__device__ static inline uint64_t ld_relaxed_sys(const uint64_t *p)
{
    uint64_t v;
    asm volatile("ld.relaxed.sys.global.u64 %0, [%1];\n" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ static inline void st_release_sys(uint64_t *p, uint64_t v)
{
    asm volatile("st.release.sys.global.u64 [%0], %1;\n" ::"l"(p), "l"(v) : "memory");
}

/* dst (mapped host memory) = src (device), n bytes, by the whole block: 16 bytes a thread where both
 * are 16-byte aligned, written through to the host (nothing of it stays in L2 to be flushed later) */
__device__ static void put_bytes(uint8_t *dst, const uint8_t *src, int64_t n)
{
    const int64_t nv = ((uintptr_t)dst % 16 == 0 && (uintptr_t)src % 16 == 0) ? n / 16 : 0;
    for (int64_t i = threadIdx.x; i < nv; i += blockDim.x)
        __stwt((uint4 *)dst + i, ((const uint4 *)src)[i]);
    for (int64_t i = nv * 16 + threadIdx.x; i < n; i += blockDim.x)
        __stwt(dst + i, src[i]);
}

__global__ void __launch_bounds__(OUT_THREADS) k_hand_out(const uint8_t *x, int64_t n_h, const uint8_t *mask,
                                                          int64_t n_mask, uint8_t *h, uint8_t *hmask, uint64_t *key,
                                                          uint64_t seq)
{
    pdl_wait(); /* x and the masks are the step's: the attention's and the predictor's output */
    pdl_trigger();
    put_bytes(h, x, n_h);
    if (n_mask)
        put_bytes(hmask, mask, n_mask);
    /* every thread's writes reach the host before the key: a system fence in each, the barrier,
     * then the key with a system-scope release (cpud acquires it, act_wait_dev) */
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x == 0)
        st_release_sys(key, seq);
}

extern "C" int cuk_hand_out(const void *x, int64_t n_h, const uint8_t *mask, int64_t n_mask, void *h, uint8_t *hmask,
                            uint64_t *key, uint64_t seq, void *st)
{
    pdl_launch(k_hand_out, dim3(1), dim3(OUT_THREADS), 0, (cudaStream_t)st, (const uint8_t *)x, n_h, mask,
               mask ? n_mask : (int64_t)0, (uint8_t *)h, hmask, key, seq);
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : -(int)e;
}

__global__ void __launch_bounds__(ADD_THREADS) k_hand_add(float *x, const float *pending, const float *y_key,
                                                          const uint64_t *key, const float *y_rel, const uint64_t *rel,
                                                          uint64_t seq, int64_t n)
{
    __shared__ const float *src;
    if (threadIdx.x == 0) {
        const float *s;
        for (;;) { /* both words each round: two PCIe reads in flight, ~1 µs a round */
            const uint64_t k = ld_relaxed_sys(key), r = ld_relaxed_sys(rel);
            if (k == seq) {
                s = y_key;
                break;
            }
            if (r >= seq) {
                s = y_rel;
                break;
            }
        }
        __threadfence_system(); /* with the load that saw the key: an acquire of the share */
        src = s;
    }
    __syncthreads();
    pdl_wait(); /* pending is the hot FFN's output, x the residual the next layer reads */
    pdl_trigger();
    const int64_t i0 = ((int64_t)blockIdx.x * ADD_THREADS + threadIdx.x) * ADD_PER_THREAD;
    if (i0 >= n)
        return;
    /* x + (pending + y): the order of cuk_add2 (cuda backend's ffn_add), so the same bits */
    if (i0 + ADD_PER_THREAD <= n && ((uintptr_t)(x + i0) | (uintptr_t)(pending + i0) | (uintptr_t)(src + i0)) % 16 == 0) {
        float4 a = *(const float4 *)(x + i0);
        const float4 p = *(const float4 *)(pending + i0);
        const float4 y = __ldcv((const float4 *)(src + i0));
        a.x += p.x + y.x;
        a.y += p.y + y.y;
        a.z += p.z + y.z;
        a.w += p.w + y.w;
        *(float4 *)(x + i0) = a;
        return;
    }
    for (int64_t i = i0; i < n && i < i0 + ADD_PER_THREAD; i++)
        x[i] += pending[i] + __ldcv(src + i);
}

extern "C" int cuk_hand_add(float *x, const float *pending, const float *y_key, const uint64_t *key, const float *y_rel,
                            const uint64_t *rel, uint64_t seq, int64_t n, void *st)
{
    if (n < 1)
        return 0;
    const int64_t per_block = (int64_t)ADD_THREADS * ADD_PER_THREAD;
    pdl_launch(k_hand_add, dim3((unsigned)((n + per_block - 1) / per_block)), dim3(ADD_THREADS), 0, (cudaStream_t)st, x,
               pending, y_key, key, y_rel, rel, seq, n);
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : -(int)e;
}
