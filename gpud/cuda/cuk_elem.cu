/* cuk_elem.cu — norms and elementwise kernels (interface: cuk.h): RMSNorm, bias and residual
 * additions, the GLU's elementwise product, masks, ReLU and the predictor's threshold, and f32 → f16 /
 * bf16 for cuBLAS. Each output element is computed by its own fixed sequence of operations. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdint.h>

extern "C" {
#include "cuk.h"
#include "model.h"
}
#include "cuk_launch.cuh"
#include "cuk_pdl.cuh"
#include "cuk_lane_dev.cuh"
#include "cuk_act_dev.cuh" /* glu */

__global__ void k_rmsnorm(float *out, const float *x, const float *w, int64_t n, int64_t sx, float eps)
{
    CUK_TRACE_BLOCK(CUK_F_k_rmsnorm);
    __shared__ float sh[32];
    const int t = threadIdx.x, nt = blockDim.x;
    const bool one = n <= (int64_t)NORM_RB * nt; /* the thread's elements fit v: the row is read once */
    float wv[NORM_RB];
    if (one) /* the weights before the wait: no kernel writes them, and from HBM they cost a round trip */
#pragma unroll
        for (int u = 0; u < NORM_RB; u++)
            wv[u] = t + (int64_t)u * nt < n ? w[t + (int64_t)u * nt] : 0.0f;
    pdl_enter();
    const float *xr = x + (int64_t)blockIdx.x * sx;
    float *o = out + (int64_t)blockIdx.x * n;
    float v[NORM_RB];
    float ss = sumsq_strided(xr, n, t, nt, v);
    ss = block_sum(ss, sh);
    const float scale = 1.0f / sqrtf(ss / (float)n + eps);
    if (one) {
#pragma unroll
        for (int u = 0; u < NORM_RB; u++) {
            const int64_t i = t + (int64_t)u * nt;
            if (i < n)
                o[i] = v[u] * scale * wv[u];
        }
        return;
    }
    for (int64_t i = t; i < n; i += nt)
        o[i] = xr[i] * scale * w[i];
}

extern "C" int cuk_rmsnorm(float *out, const float *x, const float *w, int B, int64_t n, int64_t stride_x, float eps,
                           void *st)
{
    static const bool carved = carve((const void *)k_rmsnorm);
    (void)carved;
    pdl_launch(k_rmsnorm, dim3((unsigned)B), dim3(256), 0, S(st), out, x, w, n, stride_x, eps);
    return launched();
}

__global__ void k_add_bias(float *y, const float *b, int64_t n, int64_t total)
{
    CUK_TRACE_BLOCK(CUK_F_k_add_bias);
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total)
        y[i] += b[i % n];
}

extern "C" int cuk_add_bias(float *y, const float *bias, int B, int64_t n, void *st)
{
    const int64_t total = (int64_t)B * n;
    k_add_bias<<<(unsigned)((total + 255) / 256), 256, 0, S(st)>>>(y, bias, n, total);
    return launched();
}

__global__ void k_add2(float *x, const float *a, const float *b, int64_t n)
{
    CUK_TRACE_BLOCK(CUK_F_k_add2);
    pdl_enter();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] += b ? a[i] + b[i] : a[i];
}

extern "C" int cuk_add2(float *x, const float *a, const float *b, int64_t n, void *st)
{
    /* in the launch chain (cuk_pdl.cuh): a break here would expose the next layer's launch */
    pdl_launch(k_add2, dim3((unsigned)((n + 255) / 256)), dim3(256), 0, S(st), x, a, b, n);
    return launched();
}

__global__ void k_glu_ew(float *out, const float *g, const float *u, int64_t n, int kind)
{
    CUK_TRACE_BLOCK(CUK_F_k_glu_ew);
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = glu(kind, g[i], u[i]);
}

extern "C" int cuk_glu_ew(float *out, const float *g, const float *u, int64_t n, int act_kind, void *st)
{
    k_glu_ew<<<(unsigned)((n + 255) / 256), 256, 0, S(st)>>>(out, g, u, n, act_kind);
    return launched();
}

__global__ void k_mask_mul(float *x, const uint8_t *m, int64_t n)
{
    CUK_TRACE_BLOCK(CUK_F_k_mask_mul);
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && !m[i])
        x[i] = 0.0f;
}

extern "C" int cuk_mask_mul(float *x, const uint8_t *mask, int64_t n, void *st)
{
    k_mask_mul<<<(unsigned)((n + 255) / 256), 256, 0, S(st)>>>(x, mask, n);
    return launched();
}

__global__ void k_relu(float *y, int64_t n)
{
    CUK_TRACE_BLOCK(CUK_F_k_relu);
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && !(y[i] > 0.0f))
        y[i] = 0.0f;
}

extern "C" int cuk_relu(float *y, int64_t n, void *st)
{
    k_relu<<<(unsigned)((n + 255) / 256), 256, 0, S(st)>>>(y, n);
    return launched();
}

__global__ void k_threshold(const float *y, uint8_t *m, int64_t n, float thr)
{
    CUK_TRACE_BLOCK(CUK_F_k_threshold);
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        m[i] = y[i] >= thr;
}

extern "C" int cuk_threshold(const float *y, uint8_t *mask, int64_t n, float thr, void *st)
{
    k_threshold<<<(unsigned)((n + 255) / 256), 256, 0, S(st)>>>(y, mask, n, thr);
    return launched();
}

__global__ void k_to_half(const float *x, void *out, int64_t n, bool bf16)
{
    CUK_TRACE_BLOCK(CUK_F_k_to_half);
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    if (bf16)
        ((__nv_bfloat16 *)out)[i] = __float2bfloat16_rn(x[i]);
    else
        ((__half *)out)[i] = __float2half_rn(x[i]);
}

extern "C" int cuk_to_half(const float *x, void *out, int64_t n, bool bf16, void *st)
{
    k_to_half<<<(unsigned)((n + 255) / 256), 256, 0, S(st)>>>(x, out, n, bf16);
    return launched();
}

/* this object's copy of the trace ring's pointers (cuk_trace.cuh; a CUK_TRACE build only) */
CUK_TRACE_SETTER(cuk_elem_trace_set)
