/* cuk_lane_dev.cuh — device pieces of the CUDA-core kernels: a lane block of a repacked weight row
 * (load_lb; layout: cuk_traits.cuh) and the fixed-order sums over a warp and a block. One definition
 * for the products (cuk_gemv.cu), the sparse AXPY (cuk_sparse.cu), the norms and elementwise kernels
 * (cuk_elem.cu) and the row lookups (cuk_weights.cu); static / templates, each object its own copy.
 * Include after cuk_traits.cuh. */
#ifndef CUK_LANE_DEV_CUH
#define CUK_LANE_DEV_CUH

#include <cuda_runtime.h>
#include <stdint.h>

/* Load lane block b of a row: NQ words, and the scale. */
template <class T>
__device__ static inline void load_lb(const uint8_t *__restrict__ qrow, const uint8_t *__restrict__ drow, int64_t nb,
                                      int64_t b, uint4 *qq, typename T::S *s)
{
    const uint4 *p = (const uint4 *)(qrow + b * (int64_t)(16 * T::NQ));
#pragma unroll
    for (int i = 0; i < T::NQ; i++)
        qq[i] = __ldg(p + i);
    T::side(drow, nb, b, *s);
}

__device__ static inline float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* An RMSNorm's sum of squares, thread t of nt: x[e]² for e = t, t + nt, t + 2 nt, … added in that
 * order (every norm kernel's order, so every path gets the same scale), its loads issued NORM_RB at a
 * time: one L2 round trip for NORM_RB elements, where a loop of single loads waited on one every few
 * elements. v: the loaded values of the last batch — the whole row's share where n ≤ NORM_RB · nt.
 * (cuk_mmv.cu's norm_row runs the same loop with its own loads — around L1 — and shared-memory stores.) */
#define NORM_RB 16
__device__ static inline float sumsq_strided(const float *__restrict__ x, int64_t n, int t, int nt, float (&v)[NORM_RB])
{
    float ss = 0.0f;
    for (int64_t b0 = 0; b0 < n; b0 += (int64_t)NORM_RB * nt) {
#pragma unroll
        for (int u = 0; u < NORM_RB; u++) {
            const int64_t e = b0 + t + (int64_t)u * nt;
            v[u] = e < n ? x[e] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < NORM_RB; u++)
            if (b0 + t + (int64_t)u * nt < n)
                ss = __fmaf_rn(v[u], v[u], ss);
    }
    return ss;
}

__device__ static float block_sum(float v, float *sh)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    if (lane == 0)
        sh[warp] = v;
    __syncthreads();
    float s = 0.0f;
    for (int i = 0; i < nw; i++)
        s += sh[i];
    __syncthreads();
    return s;
}

#endif
