/* cuk_hand_dev.cuh — device helpers of the hand-off to the host share (cuk_hand.h's memory orders):
 * writes into mapped host memory and the key stored after them. Used by the hand-off kernels and by
 * the predictor's first product, which hands h out before the masks exist (cuk.h cuk_gemv_hand_h). */
#ifndef CUK_HAND_DEV_CUH
#define CUK_HAND_DEV_CUH

#include <stdint.h>

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

/* dst (mapped host memory) = src (device), n bytes, by threads t of nt: 16 bytes a thread where both
 * are 16-byte aligned, written through to the host (nothing of it stays in L2 to be flushed later) */
__device__ static inline void put_bytes_t(uint8_t *dst, const uint8_t *src, int64_t n, int t, int nt)
{
    const int64_t nv = ((uintptr_t)dst % 16 == 0 && (uintptr_t)src % 16 == 0) ? n / 16 : 0;
    for (int64_t i = t; i < nv; i += nt)
        __stwt((uint4 *)dst + i, ((const uint4 *)src)[i]);
    for (int64_t i = nv * 16 + t; i < n; i += nt)
        __stwt(dst + i, src[i]);
}

/* the same by the whole block */
__device__ static inline void put_bytes(uint8_t *dst, const uint8_t *src, int64_t n)
{
    put_bytes_t(dst, src, n, (int)threadIdx.x, (int)blockDim.x);
}

/* *key = seq after every thread's writes of the block reach the host: a system fence in each, the
 * barrier, then the key with a system-scope release (the host acquires it). Every thread of the
 * block calls it. */
__device__ static inline void put_key(uint64_t *key, uint64_t seq)
{
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x == 0)
        st_release_sys(key, seq);
}

#endif
