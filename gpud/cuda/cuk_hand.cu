/* cuk_hand.cu — the hand-off kernels (see cuk_hand.h). Both are launched in the decode chain's
 * programmatic order (cuk_pdl.cuh): out waits for the predictor before it reads x and the masks; add
 * polls its keys before the hot FFN has finished (the keys are host words no kernel writes) and
 * waits for it only before it reads pending and writes x. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuk_hand_dev.cuh"
#include "cuk_pdl.cuh"
#include "cuk_launch.cuh" /* launched, S */

extern "C" {
#include "cuk_hand.h"
}

#define OUT_THREADS 1024
#define ADD_THREADS 1024
#define ADD_PER_THREAD 4

/* bits[w] (mapped host memory) = the one token's mask ∧ cold, 64 neurons a word, bit k = neuron 64 w + k:
 * cold_tab the layer's cold neurons in the same layout (NULL: all_cold says every neuron or none).
 * The table is made once at placement: building the hot set here every step (a shared bitmap from the
 * hot ids, atomics and two barriers) made the hand-out 4.64 µs instead of 3.82 (H200, bench_kern). */
__device__ static void put_cold_bits(const uint8_t *mask, int64_t n_ff, const uint64_t *cold_tab, bool all_cold,
                                     uint64_t *bits)
{
    const int64_t nw = (n_ff + 63) / 64;
    for (int64_t w = threadIdx.x; w < nw; w += blockDim.x) {
        uint64_t on = 0;
        const uint8_t *m = mask + w * 64;
        if (w * 64 + 64 <= n_ff && (uintptr_t)m % 16 == 0) { /* a whole word: four 16-byte loads */
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const uint4 v = ((const uint4 *)m)[q];
                const uint32_t u[4] = { v.x, v.y, v.z, v.w };
#pragma unroll
                for (int i = 0; i < 16; i++)
                    on |= (uint64_t)((u[i / 4] >> (8 * (i % 4)) & 0xffu) != 0) << (16 * q + i);
            }
        } else {
            for (int k = 0; k < 64 && w * 64 + k < n_ff; k++)
                on |= (uint64_t)(m[k] != 0) << k;
        }
        const uint64_t cold = cold_tab ? cold_tab[w] : all_cold ? ~0ull : 0ull;
        __stwt((unsigned long long *)bits + w, (unsigned long long)(on & cold));
    }
}

__global__ void __launch_bounds__(OUT_THREADS) k_hand_out(const uint8_t *x, int64_t n_h, const uint8_t *mask,
                                                          int64_t n_mask, uint8_t *h, uint8_t *hmask,
                                                          const uint64_t *cold_tab, bool all_cold, int64_t n_ff,
                                                          uint64_t *bits, uint64_t *key, uint64_t seq)
{
    CUK_TRACE_BLOCK(CUK_F_k_hand_out);
    pdl_wait(); /* x and the masks are the step's: the attention's and the predictor's output */
    pdl_trigger();
    put_bytes(h, x, n_h);
    if (n_mask)
        put_bytes(hmask, mask, n_mask);
    if (bits)
        put_cold_bits(mask, n_ff, cold_tab, all_cold, bits);
    /* every thread's writes reach the host before the key (cpud acquires it, act_wait_dev) */
    put_key(key, seq);
}

extern "C" int cuk_hand_out(const void *x, int64_t n_h, const uint8_t *mask, int64_t n_mask, void *h, uint8_t *hmask,
                            const struct cuk_cold *cold, uint64_t *key, uint64_t seq, void *st)
{
    if (cold && (!mask || !cold->bits || cold->n_ff < 1 || cold->n_hot < 0 || cold->n_hot > cold->n_ff ||
                 (cold->n_hot < cold->n_ff && cold->n_hot > 0 && !cold->cold_tab)))
        return -(int)cudaErrorInvalidValue;
    const bool partial = cold && cold->n_hot > 0 && cold->n_hot < cold->n_ff;
    pdl_launch(k_hand_out, dim3(1), dim3(OUT_THREADS), 0, S(st), (const uint8_t *)x, n_h, mask,
               mask ? n_mask : (int64_t)0, (uint8_t *)h, hmask, partial ? cold->cold_tab : (const uint64_t *)nullptr,
               cold && cold->n_hot == 0, cold ? cold->n_ff : (int64_t)0, cold ? cold->bits : (uint64_t *)nullptr,
               key, seq);
    return launched();
}

extern "C" void cuk_cold_table(const int32_t *hot_ids, int64_t n_hot, int64_t n_ff, uint64_t *tab)
{
    const int64_t nw = (n_ff + 63) / 64;
    for (int64_t w = 0; w < nw; w++)
        tab[w] = w * 64 + 64 <= n_ff ? ~0ull : (1ull << (n_ff - w * 64)) - 1;
    for (int64_t j = 0; j < n_hot; j++)
        tab[hot_ids[j] / 64] &= ~(1ull << (hot_ids[j] % 64));
}

__global__ void __launch_bounds__(ADD_THREADS) k_hand_add(float *x, const float *pending, const float *y_key,
                                                          const uint64_t *key, const float *y_rel, const uint64_t *rel,
                                                          uint64_t seq, int64_t n)
{
    CUK_TRACE_BLOCK(CUK_F_k_hand_add);
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
    pdl_launch(k_hand_add, dim3((unsigned)((n + per_block - 1) / per_block)), dim3(ADD_THREADS), 0, S(st), x,
               pending, y_key, key, y_rel, rel, seq, n);
    return launched();
}

/* this object's copy of the trace ring's pointers (cuk_trace.cuh; a CUK_TRACE build only) */
CUK_TRACE_SETTER(cuk_hand_trace_set)
