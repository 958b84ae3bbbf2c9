/* cuk_scan.cuh — the ordered compaction of a mask row by one block: one definition for cuk.cu's
 * k_compact (the list written out) and cuk_mmv.cu's gathered GLU (each block finds its own tiles'
 * rows, so the sparse F16 step needs no compaction kernel between the predictor and the FFN).
 *
 * mask_list<NT>(m, n, sh, put): every thread of a block of NT threads calls it with the same m and n;
 * it calls put(o, i) once for every i < n with m[i] != 0, o = the number of non-zero entries before i
 * (so the list of the i in ascending order is what k_compact always wrote), and returns the count to
 * every thread. Thread t takes a contiguous segment of 16-byte multiples (one or two rounds of
 * independent 16-byte loads, where the old k_compact made each thread walk its ~11 bytes one dependent
 * byte load at a time), the counts are scanned over the warp and then over the warps. sh: NT / 32
 * ints of shared memory. Ends with a barrier (sh may be reused after it). */
#ifndef CUK_SCAN_CUH
#define CUK_SCAN_CUH

#include <cuda_runtime.h>
#include <stdint.h>

/* non-zero bytes of a 32-bit word */
__device__ static inline int nz4(uint32_t w) { return __popc(__vcmpne4(w, 0u)) >> 3; }

template <int NT, class Put>
__device__ static int32_t mask_list(const uint8_t *__restrict__ m, int64_t n, int32_t *sh, Put put)
{
    static_assert(NT % 32 == 0 && NT <= 1024, "a block of whole warps");
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const bool vec = ((uintptr_t)m & 15) == 0;
    int64_t seg = (n + NT - 1) / NT;
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
    int32_t incl = c; /* inclusive scan over the warp, then over the warps */
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int32_t v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o)
            incl += v;
    }
    if (lane == 31)
        sh[warp] = incl;
    __syncthreads();
    int32_t before = 0, total = 0;
    for (int w = 0; w < NT / 32; w++) { /* NT / 32 shared reads, broadcast: cheaper than a second barrier */
        const int32_t s = sh[w];
        before += w < warp ? s : 0;
        total += s;
    }
    int32_t o = before + incl - c;
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
                    put(o++, i + 4 * k + b);
        }
    }
    for (int64_t i = v1; i < i1; i++)
        if (m[i])
            put(o++, i);
    __syncthreads(); /* sh free again */
    return total;
}

#endif
