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

#define HAND_BITMAP_WORDS 2048 /* a layer's hot set as bits in shared memory: n_ff up to 65 536 */

/* dst (mapped host memory) = src (device), n bytes, by the whole block: 16 bytes a thread where both
 * are 16-byte aligned, written through to the host (nothing of it stays in L2 to be flushed later);
 * src read from L2 (other blocks of the same kernel may have written it: cuk.cu's fc2 hand-out) */
__device__ static inline void put_bytes(uint8_t *dst, const uint8_t *src, int64_t n)
{
    const int64_t nv = ((uintptr_t)dst % 16 == 0 && (uintptr_t)src % 16 == 0) ? n / 16 : 0;
    for (int64_t i = threadIdx.x; i < nv; i += blockDim.x)
        __stwt((uint4 *)dst + i, __ldcg((const uint4 *)src + i));
    for (int64_t i = nv * 16 + threadIdx.x; i < n; i += blockDim.x)
        __stwt(dst + i, __ldcg(src + i));
}

/* bits[w] (mapped host memory) = the one token's mask ∧ not hot, 64 neurons a word, bit k = neuron
 * 64 w + k: hot is the layer's placed neurons (ids ascending, n_hot of n_ff; n_hot == n_ff: all, ids
 * unused), set in a shared bitmap first */
__device__ static inline void put_cold_bits(const uint8_t *mask, int64_t n_ff, const int32_t *hot_ids, int64_t n_hot,
                                     uint64_t *bits)
{
    __shared__ uint32_t hot[HAND_BITMAP_WORDS];
    const int64_t nw32 = (n_ff + 31) / 32, nw = (n_ff + 63) / 64;
    for (int64_t i = threadIdx.x; i < nw32; i += blockDim.x)
        hot[i] = 0;
    __syncthreads();
    if (n_hot < n_ff)
        for (int64_t j = threadIdx.x; j < n_hot; j += blockDim.x) {
            const int32_t id = __ldg(hot_ids + j);
            atomicOr(&hot[id >> 5], 1u << (id & 31));
        }
    __syncthreads();
    for (int64_t w = threadIdx.x; w < nw; w += blockDim.x) {
        uint64_t on = 0;
        const uint8_t *m = mask + w * 64;
        if (w * 64 + 64 <= n_ff && (uintptr_t)m % 16 == 0) { /* a whole word: four 16-byte loads */
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const uint4 v = __ldcg((const uint4 *)m + q);
                const uint32_t u[4] = { v.x, v.y, v.z, v.w };
#pragma unroll
                for (int i = 0; i < 16; i++)
                    on |= (uint64_t)((u[i / 4] >> (8 * (i % 4)) & 0xffu) != 0) << (16 * q + i);
            }
        } else {
            for (int k = 0; k < 64 && w * 64 + k < n_ff; k++)
                on |= (uint64_t)(__ldcg(m + k) != 0) << k;
        }
        uint64_t h = n_hot >= n_ff ? ~0ull : hot[2 * w];
        if (n_hot < n_ff && 2 * w + 1 < nw32)
            h |= (uint64_t)hot[2 * w + 1] << 32;
        __stwt((unsigned long long *)bits + w, (unsigned long long)(on & ~h));
    }
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
