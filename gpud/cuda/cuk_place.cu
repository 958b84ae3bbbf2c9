/* cuk_place.cu — kernels of the placement (see cuk_place.h). */
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "cuk_place.h"
}
#include "cuk_trace.cuh" /* CUK_TRACE_BLOCK (a -Dcuk_trace=true build) */
#include "cuk_launch.cuh" /* launched, S */

#define GATHER_THREADS 256

__global__ void k_gather_mask(const uint8_t *__restrict__ mask, int64_t n_ff, const int32_t *__restrict__ ids,
                              int64_t n_hot, uint8_t *__restrict__ out)
{
    CUK_TRACE_BLOCK(CUK_F_k_gather_mask);
    const int tok = blockIdx.y;
    const int64_t j = (int64_t)blockIdx.x * GATHER_THREADS + threadIdx.x;
    if (j < n_hot)
        out[(int64_t)tok * n_hot + j] = mask[(int64_t)tok * n_ff + ids[j]];
}

extern "C" int cuk_gather_mask(const uint8_t *mask, int B, int64_t n_ff, const int32_t *ids, int64_t n_hot,
                               uint8_t *out, void *st)
{
    if (B < 1 || n_hot < 1)
        return 0;
    const dim3 grid((unsigned)((n_hot + GATHER_THREADS - 1) / GATHER_THREADS), (unsigned)B);
    k_gather_mask<<<grid, GATHER_THREADS, 0, S(st)>>>(mask, n_ff, ids, n_hot, out);
    return launched();
}

/* this object's copy of the trace ring's pointers (cuk_trace.cuh; a CUK_TRACE build only) */
CUK_TRACE_SETTER(cuk_place_trace_set)
