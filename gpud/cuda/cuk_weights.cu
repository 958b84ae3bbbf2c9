/* cuk_weights.cu — the repacked weight layout outside the products (interface: cuk.h; layout:
 * cuk_traits.cuh): its sizes (cuk_w_qbytes / dbytes), repacking GGUF blocks into it, rows of a table
 * (the embeddings: cuk_get_rows) and a whole matrix as f16 (cuBLAS prefill: cuk_dequant_f16). */
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdint.h>
#include <string.h>

extern "C" {
#include "cuk.h"
#include "model.h"
#include "quant.h"
}
#include "cuk_launch.cuh"
#include "cuk_traits.cuh"
#include "cuk_lane_dev.cuh"
#include "cuk_trace.cuh" /* CUK_TRACE_BLOCK (a -Dcuk_trace=true build) */

static int lane_elems(uint32_t type)
{
    CUK_DISPATCH_OR(type, return 0, return T::E);
    return 0;
}
static int lane_qbytes(uint32_t type)
{
    CUK_DISPATCH_OR(type, return 0, return 16 * T::NQ);
    return 0;
}
/* a row must be whole GGUF blocks (256 for the K-quants) */
static int row_unit(uint32_t type)
{
    CUK_DISPATCH_OR(type, return 0, return T::GQ);
    return 0;
}

extern "C" bool cuk_type_ok(uint32_t type) { return lane_elems(type) > 0; }

extern "C" size_t cuk_w_qbytes(uint32_t type, int64_t n_in, int64_t n_out)
{
    const int e = lane_elems(type);
    if (!e || n_in % e || n_in % row_unit(type))
        return 0;
    return (size_t)(n_in / e) * (size_t)lane_qbytes(type) * (size_t)n_out;
}

extern "C" size_t cuk_w_dbytes(uint32_t type, int64_t n_in, int64_t n_out)
{
    CUK_DISPATCH_OR(type, return 0, return (size_t)T::sbytes(n_in / T::E) * (size_t)n_out);
    return 0;
}



/* raw: n blocks of bsz bytes (2-byte scale, then nq quant bytes); out q: nq bytes each, d: scales */
__global__ void k_repack(const uint8_t *raw, int64_t n, int bsz, int nq, uint8_t *q, uint16_t *d)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    const uint16_t *src = (const uint16_t *)(raw + i * bsz); /* blocks are 2-byte aligned */
    d[i] = src[0];
    uint16_t *dst = (uint16_t *)(q + i * nq);
    for (int k = 0; k < nq / 2; k++)
        dst[k] = src[1 + k];
}

/* The other GGUF types: one thread per GGUF block, its trait's lossless re-encoding into the lane
 * blocks' words and the row's side array (q and d at row 0 of the rows repacked). */
template <class T>
__global__ void k_repack_t(const uint8_t *raw, int64_t n_rows, int64_t n_in, uint8_t *q, uint8_t *d)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, ng = n_in / T::GQ, nb = n_in / T::E;
    if (i >= n_rows * ng)
        return;
    const int64_t r = i / ng;
    T::repack(raw + i * T::GB, q + r * nb * (16 * T::NQ), d + r * T::sbytes(nb), nb, i % ng);
}

template <class T> static int repack_t(const struct cuk_w *w, const void *raw, int64_t r0, int64_t n_rows, cudaStream_t st)
{
    const int64_t nb = w->n_in / T::E, n = n_rows * (w->n_in / T::GQ);
    k_repack_t<T><<<(unsigned)((n + 127) / 128), 128, 0, st>>>((const uint8_t *)raw, n_rows, w->n_in,
                                                               (uint8_t *)w->q + (size_t)r0 * nb * (16 * T::NQ),
                                                               (uint8_t *)w->d + (size_t)r0 * T::sbytes(nb));
    return launched();
}

extern "C" int cuk_repack(const struct cuk_w *w, const void *raw, int64_t r0, int64_t n_rows, void *st)
{
    int gb = 0;
    CUK_DISPATCH(w->type, gb = T::GB);
    if (gb)
        CUK_DISPATCH(w->type, if constexpr (T::GB > 0) return repack_t<T>(w, raw, r0, n_rows, S(st)));
    if (w->type != PI_TYPE_Q8_0 && w->type != PI_TYPE_Q4_0) {
        const size_t row = cuk_w_qbytes(w->type, w->n_in, 1);
        cudaError_t e = cudaMemcpyAsync((uint8_t *)w->q + (size_t)r0 * row, raw, row * (size_t)n_rows,
                                        cudaMemcpyDeviceToDevice, S(st));
        return e == cudaSuccess ? 0 : -(int)e;
    }
    const int nq = lane_qbytes(w->type), bsz = nq + 2;
    const int64_t nb = w->n_in / 32, n = nb * n_rows;
    k_repack<<<(unsigned)((n + 255) / 256), 256, 0, S(st)>>>((const uint8_t *)raw, n, bsz, nq,
                                                              (uint8_t *)w->q + (size_t)r0 * nb * nq,
                                                              (uint16_t *)w->d + (size_t)r0 * nb);
    return launched();
}
template <class T>
__global__ void k_get_rows(const uint8_t *q, const uint8_t *d, int64_t n_in, const int32_t *ids, float *out)
{
    CUK_TRACE_BLOCK(CUK_F_k_get_rows);
    const int tok = blockIdx.x;
    const int64_t r = ids[tok], nb = n_in / T::E;
    for (int64_t b = threadIdx.x; b < nb; b += blockDim.x) {
        uint4 qq[T::NQ];
        typename T::S s;
        float w[T::E];
        load_lb<T>(q + r * nb * (16 * T::NQ), T::HAS_D ? d + r * T::sbytes(nb) : nullptr, nb, b, qq, &s);
        T::deqs(qq, s, w);
#pragma unroll
        for (int e = 0; e < T::E; e++)
            out[(int64_t)tok * n_in + b * T::E + e] = w[e];
    }
}

extern "C" int cuk_get_rows(const struct cuk_w *t, const int32_t *ids, int B, float *out, void *st)
{
    CUK_DISPATCH(t->type, k_get_rows<T><<<(unsigned)B, 128, 0, S(st)>>>((const uint8_t *)t->q, (const uint8_t *)t->d,
                                                                         t->n_in, ids, out));
    return launched();
}

template <class T>
__global__ void k_dequant_f16(const uint8_t *q, const uint8_t *d, int64_t n_in, int64_t n_out, __half *out)
{
    const int64_t nb = n_in / T::E, i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nb * n_out)
        return;
    uint4 qq[T::NQ];
    typename T::S s;
    float w[T::E];
    const int64_t r = i / nb;
    load_lb<T>(q + r * nb * (16 * T::NQ), T::HAS_D ? d + r * T::sbytes(nb) : nullptr, nb, i % nb, qq, &s);
    T::deqs(qq, s, w);
#pragma unroll
    for (int e = 0; e < T::E; e++)
        out[i * T::E + e] = __float2half_rn(w[e]);
}

extern "C" int cuk_dequant_f16(const struct cuk_w *w, void *out, void *st)
{
    const int64_t n = w->n_in / lane_elems(w->type) * w->n_out;
    CUK_DISPATCH(w->type, k_dequant_f16<T><<<(unsigned)((n + 255) / 256), 256, 0, S(st)>>>(
                              (const uint8_t *)w->q, (const uint8_t *)w->d, w->n_in, w->n_out, (__half *)out));
    return launched();
}

/* this object's copy of the trace ring's pointers (cuk_trace.cuh; a CUK_TRACE build only) */
CUK_TRACE_SETTER(cuk_weights_trace_set)
