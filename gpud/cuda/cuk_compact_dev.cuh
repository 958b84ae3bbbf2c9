/* cuk_compact_dev.cuh — the ordered block scan of one mask row for the gathered gate/up of a raw mask
 * (cuk_mmv.cu's MSK kernels, cuk_norm_glu_mask): every block lists the row itself and keeps its share
 * of the list, one kernel fewer in the sparse step than k_compact then the product (cuk_sparse.cu's k_compact
 * writes whole lists where this kernel does not apply).
 *
 * Thread t takes a contiguous segment of at most 64 bytes (16-byte multiples; the caller keeps the row
 * within 64 × NT bytes), loaded at once and kept as a 64-bit mask of its non-zero bytes: the count is a
 * popcount, the counts are scanned (block_scan_excl, k_compact's too), and the listed positions come
 * from the mask's set bits — a few instructions per listed row, where a byte-by-byte walk spent a
 * branch on each of the ~48 bytes of a thread (the prologue is on the sparse step's critical path). */
#ifndef CUK_COMPACT_DEV_CUH
#define CUK_COMPACT_DEV_CUH

#include <stdint.h>

/* bit k = byte k of w is non-zero */
__device__ static inline uint32_t nz_nib(uint32_t w) { return ((__vcmpne4(w, 0u) & 0x01010101u) * 0x10204080u) >> 28; }

/* the block's exclusive scan of each thread's count c (over the warp, then over the warps): the count
 * before this thread's; *total the block's. wsum: 33 ints of shared memory. Every thread of the block
 * calls it (two barriers). Used by k_compact (cuk_sparse.cu), mask_scan and cuk_topk.cu's block_select. */
template <int NT> __device__ static inline int32_t block_scan_excl(int32_t c, int32_t *wsum, int32_t *total)
{
    static_assert(NT % 32 == 0 && NT <= 1024, "whole warps, at most 32");
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int32_t incl = c;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int32_t v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o)
            incl += v;
    }
    if (lane == 31)
        wsum[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        const int32_t v = lane < NT / 32 ? wsum[lane] : 0;
        int32_t sc = v;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int32_t u = __shfl_up_sync(0xffffffffu, sc, o);
            if (lane >= o)
                sc += u;
        }
        if (lane < NT / 32)
            wsum[lane] = sc - v; /* exclusive */
        if (lane == 31)
            wsum[32] = sc;
    }
    __syncthreads();
    *total = wsum[32];
    return wsum[warp] + incl - c;
}

template <int NT> struct mask_scan {
    enum { MAX_LEN = 64 * NT }; /* the longest row a block lists */
    uint64_t bits;              /* this thread's non-zero bytes, from i0 */
    int64_t i0;
    int32_t c, off, n; /* this thread's count, the count before its segment, the row's */

    /* count row m of len ≤ MAX_LEN bytes; wsum: 33 ints of shared memory (the warps' offsets, the
     * total). Every thread of the block calls it (two barriers). */
    __device__ void count(const uint8_t *__restrict__ m, int64_t len, int32_t *wsum)
    {
        const int t = threadIdx.x;
        int64_t seg = (len + NT - 1) / NT;
        seg = (seg + 15) & ~(int64_t)15;
        i0 = (int64_t)t * seg < len ? (int64_t)t * seg : len;
        const int64_t i1 = i0 + seg < len ? i0 + seg : len;
        bits = 0;
        if (((uintptr_t)(m + i0) & 15) == 0 && (i1 - i0) % 16 == 0) {
            uint4 v[4];
#pragma unroll
            for (int q = 0; q < 4; q++) /* the segment's words in flight together */
                v[q] = i0 + 16 * q < i1 ? *(const uint4 *)(m + i0 + 16 * q) : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
            for (int q = 0; q < 4; q++)
                bits |= (uint64_t)(nz_nib(v[q].x) | nz_nib(v[q].y) << 4 | nz_nib(v[q].z) << 8 | nz_nib(v[q].w) << 12)
                        << (16 * q);
        } else /* a row that is not 16-byte aligned (or a short last segment): bytes */
            for (int64_t i = i0; i < i1; i++)
                bits |= (uint64_t)(m[i] != 0) << (i - i0);
        c = __popcll(bits);
        off = block_scan_excl<NT>(c, wsum, &n);
    }

    /* f(rank, i) for each listed position of this thread's segment whose rank is in [lo, hi) */
    template <class F> __device__ void emit(int64_t lo, int64_t hi, F f) const
    {
        if (off >= hi || off + c <= lo)
            return;
        int64_t r = off;
        for (uint64_t b = bits; b && r < hi; b &= b - 1, r++)
            if (r >= lo)
                f(r, i0 + __ffsll((long long)b) - 1);
    }
};

#endif
