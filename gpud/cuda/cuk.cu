/* cuk.cu — the GPU executor's kernels (interface and layouts: cuk.h).
 *
 * Memory-bound decode kernels: one warp per output row, each lane loads whole 16-byte words of the
 * weight row (a "lane block": 4 f32, 8 f16/bf16, or one 32-element Q8_0/Q4_0 block after repacking)
 * and dots them with up to 8 tokens' f32 activations, so a weight row is read once per launch for
 * all of them. Every multiply-add is an explicit fmaf in a fixed order, so a token's result does
 * not depend on how many other tokens share the launch (no compiler re-association either). */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdint.h>

extern "C" {
#include "cuk.h"
#include "model.h"
#include "quant.h"
}

#define GEMV_ROWS 4 /* warps (rows) per 128-thread block */
#define GEMV_MAX_NB 8

static int launched(void)
{
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : -(int)e;
}

static cudaStream_t S(void *st) { return (cudaStream_t)st; }

/* ---- block-type traits: NQ 16-byte words hold E elements (times a scale when HAS_D) ---- */

struct TF32 {
    enum { E = 4, NQ = 1, HAS_D = 0, QX = 0 };
    __device__ static void deq(const uint4 *q, float *o)
    {
        o[0] = __uint_as_float(q[0].x), o[1] = __uint_as_float(q[0].y);
        o[2] = __uint_as_float(q[0].z), o[3] = __uint_as_float(q[0].w);
    }
};

__device__ static inline float h_lo(uint32_t w) { return __half2float(__ushort_as_half((unsigned short)(w & 0xffff))); }
__device__ static inline float h_hi(uint32_t w) { return __half2float(__ushort_as_half((unsigned short)(w >> 16))); }

struct TF16 {
    enum { E = 8, NQ = 1, HAS_D = 0, QX = 0 };
    __device__ static void deq(const uint4 *q, float *o)
    {
        const uint32_t w[4] = { q[0].x, q[0].y, q[0].z, q[0].w };
#pragma unroll
        for (int i = 0; i < 4; i++)
            o[2 * i] = h_lo(w[i]), o[2 * i + 1] = h_hi(w[i]);
    }
};

struct TBF16 {
    enum { E = 8, NQ = 1, HAS_D = 0, QX = 0 };
    __device__ static void deq(const uint4 *q, float *o)
    {
        const uint32_t w[4] = { q[0].x, q[0].y, q[0].z, q[0].w };
#pragma unroll
        for (int i = 0; i < 4; i++)
            o[2 * i] = __uint_as_float(w[i] << 16), o[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
};

/* Q types dot a Q8-quantized activation (QX): 32 int8 per block with (d, d·Σq), as the CPU's
 * kernels do; the block's integer dot product is 8 dp4a. */
__device__ static inline int dp4a(uint32_t a, uint32_t b, int c) { return __dp4a((int)a, (int)b, c); }

struct TQ8 {
    enum { E = 32, NQ = 2, HAS_D = 1, QX = 1 };
    __device__ static float dotq(const uint4 *q, const uint4 *x, float2 xd)
    {
        int s = 0;
        s = dp4a(q[0].x, x[0].x, s), s = dp4a(q[0].y, x[0].y, s), s = dp4a(q[0].z, x[0].z, s), s = dp4a(q[0].w, x[0].w, s);
        s = dp4a(q[1].x, x[1].x, s), s = dp4a(q[1].y, x[1].y, s), s = dp4a(q[1].z, x[1].z, s), s = dp4a(q[1].w, x[1].w, s);
        return xd.x * (float)s;
    }
    __device__ static void deq(const uint4 *q, float *o)
    {
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const uint32_t w[4] = { q[k].x, q[k].y, q[k].z, q[k].w };
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    o[16 * k + 4 * i + j] = (float)(int8_t)((w[i] >> (8 * j)) & 0xff);
        }
    }
};

struct TQ4 {
    enum { E = 32, NQ = 1, HAS_D = 1, QX = 1 };
    __device__ static float dotq(const uint4 *q, const uint4 *x, float2 xd)
    {
        const uint32_t w[4] = { q[0].x, q[0].y, q[0].z, q[0].w };
        const uint32_t lo[4] = { x[0].x, x[0].y, x[0].z, x[0].w }, hi[4] = { x[1].x, x[1].y, x[1].z, x[1].w };
        int s = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            s = dp4a(w[i] & 0x0f0f0f0fu, lo[i], s);
            s = dp4a((w[i] >> 4) & 0x0f0f0f0fu, hi[i], s);
        }
        return xd.x * (float)s - 8.0f * xd.y; /* Σ (q - 8) x = Σ q x - 8 Σ x */
    }
    __device__ static void deq(const uint4 *q, float *o)
    {
        const uint32_t w[4] = { q[0].x, q[0].y, q[0].z, q[0].w };
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const uint32_t byte = (w[i] >> (8 * j)) & 0xff;
                o[4 * i + j] = (float)(int)(byte & 0xf) - 8.0f;
                o[16 + 4 * i + j] = (float)(int)(byte >> 4) - 8.0f;
            }
    }
};

/* Run the statement with T = the traits of a runtime type; an unsupported type is an error. */
#define CUK_DISPATCH(type, ...)                                                                   \
    switch (type) {                                                                                \
    case PI_TYPE_F32: { typedef TF32 T; __VA_ARGS__; } break;                                             \
    case PI_TYPE_F16: { typedef TF16 T; __VA_ARGS__; } break;                                             \
    case PI_TYPE_BF16: { typedef TBF16 T; __VA_ARGS__; } break;                                           \
    case PI_TYPE_Q8_0: { typedef TQ8 T; __VA_ARGS__; } break;                                             \
    case PI_TYPE_Q4_0: { typedef TQ4 T; __VA_ARGS__; } break;                                             \
    default: return -(int)cudaErrorInvalidValue;                                                   \
    }

static int lane_elems(uint32_t type)
{
    switch (type) {
    case PI_TYPE_F32: return 4;
    case PI_TYPE_F16: case PI_TYPE_BF16: return 8;
    case PI_TYPE_Q8_0: case PI_TYPE_Q4_0: return 32;
    default: return 0;
    }
}
static int lane_qbytes(uint32_t type)
{
    switch (type) {
    case PI_TYPE_Q8_0: return 32;
    case PI_TYPE_F32: case PI_TYPE_F16: case PI_TYPE_BF16: case PI_TYPE_Q4_0: return 16;
    default: return 0;
    }
}

extern "C" bool cuk_type_ok(uint32_t type) { return lane_elems(type) > 0; }

extern "C" size_t cuk_w_qbytes(uint32_t type, int64_t n_in, int64_t n_out)
{
    const int e = lane_elems(type);
    if (!e || n_in % e)
        return 0;
    return (size_t)(n_in / e) * (size_t)lane_qbytes(type) * (size_t)n_out;
}

extern "C" size_t cuk_w_dbytes(uint32_t type, int64_t n_in, int64_t n_out)
{
    if (type != PI_TYPE_Q8_0 && type != PI_TYPE_Q4_0)
        return 0;
    return (size_t)(n_in / 32) * 2 * (size_t)n_out;
}

/* ---- repacking GGUF blocks ---- */

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

extern "C" int cuk_repack(const struct cuk_w *w, const void *raw, int64_t r0, int64_t n_rows, void *st)
{
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

/* ---- GEMV ---- */

/* Load lane block b of a row: NQ words, and the scale. */
template <class T>
__device__ static inline void load_lb(const uint8_t *__restrict__ qrow, const __half *__restrict__ drow, int64_t b,
                                      uint4 *qq, float *s)
{
    const uint4 *p = (const uint4 *)(qrow + b * (int64_t)(16 * T::NQ));
#pragma unroll
    for (int i = 0; i < T::NQ; i++)
        qq[i] = __ldg(p + i);
    *s = T::HAS_D ? __half2float(drow[b]) : 1.0f;
}

/* acc += dot(lane block b, the token's activation row xr) in a fixed order: float types Σ_e w_e x_e
 * as an fmaf chain; Q types the integer block dot of the quantized row, scaled once. xr: f32
 * [n_in] for float types; for Q types int8 [n_in] then float2 (d, d·Σq) [n_in/32]. */
template <class T>
__device__ static inline float dot_lb(const uint4 *qq, float s, const uint8_t *__restrict__ xr, int64_t n_in, int64_t b,
                                      float acc)
{
    if constexpr (T::QX) {
        const uint4 *xp = (const uint4 *)(xr + b * 32);
        const uint4 xv[2] = { __ldg(xp), __ldg(xp + 1) };
        const float2 xd = __ldg((const float2 *)(xr + n_in) + b);
        return __fmaf_rn(s, T::dotq(qq, xv, xd), acc);
    } else {
        float w[T::E];
        T::deq(qq, w);
        const float4 *xp = (const float4 *)((const float *)xr + b * T::E);
#pragma unroll
        for (int k = 0; k < T::E / 4; k++) {
            const float4 xv = __ldg(xp + k);
            acc = __fmaf_rn(w[4 * k], xv.x, acc);
            acc = __fmaf_rn(w[4 * k + 1], xv.y, acc);
            acc = __fmaf_rn(w[4 * k + 2], xv.z, acc);
            acc = __fmaf_rn(w[4 * k + 3], xv.w, acc);
        }
        return acc;
    }
}

__device__ static inline float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* acc[t] = dot(row, x_t) for t < nt (NB compile-time bound), reduced over the warp (all lanes get it). */
template <class T, int NB>
__device__ static inline void dot_row(const uint8_t *__restrict__ qrow, const __half *__restrict__ drow, int64_t nb,
                                      const uint8_t *__restrict__ x, int64_t xs, int64_t n_in, int nt, int lane,
                                      float *acc)
{
#pragma unroll
    for (int t = 0; t < NB; t++)
        acc[t] = 0.0f;
    enum { U = T::E == 32 ? 2 : 4 }; /* lane blocks in flight per lane */
    int64_t b = lane;
    for (; b + 32 * (U - 1) < nb; b += 32 * U) {
        uint4 qq[U][T::NQ];
        float s[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            load_lb<T>(qrow, drow, b + 32 * u, qq[u], &s[u]);
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int t = 0; t < NB; t++)
                if (t < nt)
                    acc[t] = dot_lb<T>(qq[u], s[u], x + t * xs, n_in, b + 32 * u, acc[t]);
    }
    for (; b < nb; b += 32) {
        uint4 qq[T::NQ];
        float s;
        load_lb<T>(qrow, drow, b, qq, &s);
#pragma unroll
        for (int t = 0; t < NB; t++)
            if (t < nt)
                acc[t] = dot_lb<T>(qq, s, x + t * xs, n_in, b, acc[t]);
    }
#pragma unroll
    for (int t = 0; t < NB; t++)
        acc[t] = warp_sum(acc[t]);
}

template <class T, int NB, int MODE>
__global__ void __launch_bounds__(128) k_gemv(const uint8_t *__restrict__ q, const __half *__restrict__ d,
                                              int64_t n_in, int64_t n_out, const uint8_t *__restrict__ x, int64_t xs,
                                              void *y, float thr, int nt)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t r = (int64_t)blockIdx.x * GEMV_ROWS + warp;
    if (r >= n_out)
        return;
    const int64_t nb = n_in / T::E;
    float acc[NB];
    dot_row<T, NB>(q + r * nb * (16 * T::NQ), T::HAS_D ? d + r * nb : nullptr, nb, x, xs, n_in, nt, lane, acc);
    if (lane)
        return;
#pragma unroll
    for (int t = 0; t < NB; t++) {
        if (t >= nt)
            break;
        const int64_t o = t * n_out + r;
        if (MODE == CUK_SET)
            ((float *)y)[o] = acc[t];
        else if (MODE == CUK_ADD)
            ((float *)y)[o] += acc[t];
        else if (MODE == CUK_RELU)
            ((float *)y)[o] = acc[t] > 0.0f ? acc[t] : 0.0f;
        else
            ((uint8_t *)y)[o] = acc[t] >= thr;
    }
}

/* Q types: x (nt rows of n_in) → int8 blocks with (d, d·Σq), CPU's Q8_0 rounding (d stored as f16). */
__global__ void k_quant_x(const float *__restrict__ x, int64_t n_in, uint8_t *__restrict__ out, int64_t xs)
{
    const int tok = blockIdx.y, lane = threadIdx.x & 31;
    const int64_t blk = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    if (blk >= n_in / 32)
        return;
    const float v = x[(int64_t)tok * n_in + blk * 32 + lane];
    float amax = fabsf(v);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float dd = amax / 127.0f, id = dd > 0.0f ? 1.0f / dd : 0.0f;
    const int qv = __float2int_rn(v * id);
    int sum = qv;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
    uint8_t *row = out + (int64_t)tok * xs;
    row[blk * 32 + lane] = (uint8_t)(int8_t)qv;
    if (lane == 0) {
        const float dh = __half2float(__float2half_rn(dd));
        ((float2 *)(row + n_in))[blk] = make_float2(dh, dh * (float)sum);
    }
}

extern "C" size_t cuk_xq_row_bytes(int64_t n_in) { return (size_t)((n_in + n_in / 32 * 8 + 15) / 16 * 16); }

/* The activation rows as the kernels of type T read them: f32 as is, or quantized into xq. */
template <class T>
static int prep_x(const float *x, int64_t n_in, int nt, void *xq, const uint8_t **xr, int64_t *xs, cudaStream_t st)
{
    if constexpr (T::QX) {
        if (!xq)
            return -(int)cudaErrorInvalidValue;
        *xs = (int64_t)cuk_xq_row_bytes(n_in);
        k_quant_x<<<dim3((unsigned)((n_in / 32 + 7) / 8), (unsigned)nt), 256, 0, st>>>(x, n_in, (uint8_t *)xq, *xs);
        *xr = (const uint8_t *)xq;
        return launched();
    } else {
        *xr = (const uint8_t *)x;
        *xs = n_in * (int64_t)sizeof(float);
        return 0;
    }
}

template <class T, int NB>
static int gemv_launch(const struct cuk_w *w, const uint8_t *x, int64_t xs, int nt, void *y, int mode, float thr,
                       cudaStream_t st)
{
    const unsigned grid = (unsigned)((w->n_out + GEMV_ROWS - 1) / GEMV_ROWS);
    const uint8_t *q = (const uint8_t *)w->q;
    const __half *d = (const __half *)w->d;
    switch (mode) {
    case CUK_SET: k_gemv<T, NB, CUK_SET><<<grid, 128, 0, st>>>(q, d, w->n_in, w->n_out, x, xs, y, thr, nt); break;
    case CUK_ADD: k_gemv<T, NB, CUK_ADD><<<grid, 128, 0, st>>>(q, d, w->n_in, w->n_out, x, xs, y, thr, nt); break;
    case CUK_RELU: k_gemv<T, NB, CUK_RELU><<<grid, 128, 0, st>>>(q, d, w->n_in, w->n_out, x, xs, y, thr, nt); break;
    default: k_gemv<T, NB, CUK_MASK><<<grid, 128, 0, st>>>(q, d, w->n_in, w->n_out, x, xs, y, thr, nt); break;
    }
    return launched();
}

template <class T>
static int gemv_t(const struct cuk_w *w, const float *x, int B, void *y, int mode, float thr, void *xq, cudaStream_t st)
{
    const size_t ysz = mode == CUK_MASK ? 1 : sizeof(float);
    for (int t0 = 0; t0 < B; t0 += GEMV_MAX_NB) {
        const int nt = B - t0 < GEMV_MAX_NB ? B - t0 : GEMV_MAX_NB;
        const uint8_t *xr;
        int64_t xs;
        int rc = prep_x<T>(x + (size_t)t0 * w->n_in, w->n_in, nt, xq, &xr, &xs, st);
        if (rc)
            return rc;
        void *yt = (uint8_t *)y + (size_t)t0 * w->n_out * ysz;
        rc = nt == 1   ? gemv_launch<T, 1>(w, xr, xs, nt, yt, mode, thr, st)
             : nt == 2 ? gemv_launch<T, 2>(w, xr, xs, nt, yt, mode, thr, st)
             : nt <= 4 ? gemv_launch<T, 4>(w, xr, xs, nt, yt, mode, thr, st)
                       : gemv_launch<T, 8>(w, xr, xs, nt, yt, mode, thr, st);
        if (rc)
            return rc;
    }
    return 0;
}

extern "C" int cuk_gemv(const struct cuk_w *w, const float *x, int B, void *y, enum cuk_mode mode, float thr, void *xq,
                        void *st)
{
    CUK_DISPATCH(w->type, return gemv_t<T>(w, x, B, y, mode, thr, xq, S(st)));
    return 0;
}

/* ---- gated FFN rows ---- */

__device__ static inline float glu(int kind, float g, float u)
{
    if (kind == PI_ACT_SWIGLU)
        return g / (1.0f + expf(-g)) * u;
    if (kind == PI_ACT_REGLU)
        return g > 0.0f ? g * u : 0.0f;
    return (g > 0.0f && u > 0.0f) ? g * u : 0.0f;
}

/* Dense (idx NULL): warp row j for the nt tokens of the launch. Indexed: token blockIdx.y, its
 * j-th listed row (nt 1). */
template <class T, int NB>
__global__ void __launch_bounds__(128) k_glu(const uint8_t *__restrict__ gq, const __half *__restrict__ gd,
                                             const uint8_t *__restrict__ uq, const __half *__restrict__ ud,
                                             int64_t n_in, int64_t n_out, const uint8_t *__restrict__ x, int64_t xs,
                                             float *act, int kind, const int32_t *__restrict__ idx,
                                             const int32_t *__restrict__ cnt, int64_t idx_stride, bool compact, int nt)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t j = (int64_t)blockIdx.x * GEMV_ROWS + warp;
    const int tok = blockIdx.y;
    const int64_t n = idx && cnt ? cnt[tok] : n_out;
    if (j >= n)
        return;
    const int64_t r = idx ? idx[tok * idx_stride + j] : j;
    const uint8_t *xt = x + (int64_t)tok * xs;
    const int64_t nb = n_in / T::E, rq = r * nb * (16 * T::NQ);
    float ag[NB], au[NB];
    dot_row<T, NB>(gq + rq, T::HAS_D ? gd + r * nb : nullptr, nb, xt, xs, n_in, nt, lane, ag);
    dot_row<T, NB>(uq + rq, T::HAS_D ? ud + r * nb : nullptr, nb, xt, xs, n_in, nt, lane, au);
    if (lane)
        return;
#pragma unroll
    for (int t = 0; t < NB; t++) {
        if (t >= nt)
            break;
        const int64_t row = (int64_t)(tok + t) * (idx ? idx_stride : n_out);
        act[row + (compact ? j : r)] = glu(kind, ag[t], au[t]);
    }
}

template <class T>
static int glu_t(const struct cuk_w *g, const struct cuk_w *u, const float *x, int B, float *act, int kind,
                 const int32_t *idx, const int32_t *cnt, int64_t idx_stride, bool compact, void *xq, cudaStream_t st)
{
    const uint8_t *gq = (const uint8_t *)g->q, *uq = (const uint8_t *)u->q;
    const __half *gd = (const __half *)g->d, *ud = (const __half *)u->d;
    const unsigned gx = (unsigned)((g->n_out + GEMV_ROWS - 1) / GEMV_ROWS);
    const uint8_t *xr;
    int64_t xs;
    if (idx) {
        if (B > GEMV_MAX_NB)
            return -(int)cudaErrorInvalidValue;
        int rc = prep_x<T>(x, g->n_in, B, xq, &xr, &xs, st);
        if (rc)
            return rc;
        k_glu<T, 1><<<dim3(gx, (unsigned)B), 128, 0, st>>>(gq, gd, uq, ud, g->n_in, g->n_out, xr, xs, act, kind, idx,
                                                           cnt, idx_stride, compact, 1);
        return launched();
    }
    for (int t0 = 0; t0 < B; t0 += GEMV_MAX_NB) {
        const int nt = B - t0 < GEMV_MAX_NB ? B - t0 : GEMV_MAX_NB;
        int rc = prep_x<T>(x + (size_t)t0 * g->n_in, g->n_in, nt, xq, &xr, &xs, st);
        if (rc)
            return rc;
        float *at = act + (size_t)t0 * g->n_out;
#define GLU_L(NB) k_glu<T, NB><<<dim3(gx, 1), 128, 0, st>>>(gq, gd, uq, ud, g->n_in, g->n_out, xr, xs, at, kind, \
                                                             nullptr, nullptr, 0, false, nt)
        if (nt == 1)
            GLU_L(1);
        else if (nt == 2)
            GLU_L(2);
        else if (nt <= 4)
            GLU_L(4);
        else
            GLU_L(8);
#undef GLU_L
        rc = launched();
        if (rc)
            return rc;
    }
    return 0;
}

extern "C" int cuk_glu(const struct cuk_w *gate, const struct cuk_w *up, const float *x, int B, float *act,
                       int act_kind, const int32_t *idx, const int32_t *cnt, int64_t idx_stride, bool compact,
                       void *xq, void *st)
{
    if (gate->type != up->type || gate->n_in != up->n_in || gate->n_out != up->n_out)
        return -(int)cudaErrorInvalidValue;
    CUK_DISPATCH(gate->type, return glu_t<T>(gate, up, x, B, act, act_kind, idx, cnt, idx_stride, compact, xq, S(st)));
    return 0;
}

/* ---- sparse down projection: AXPY over down_t rows ---- */

#define AXPY_THREADS 64

template <class T>
__global__ void __launch_bounds__(AXPY_THREADS) k_axpy(const uint8_t *__restrict__ q, const __half *__restrict__ d,
                                                       int64_t n_embd, int64_t n_ff, const float *__restrict__ act,
                                                       const int32_t *__restrict__ idx, const int32_t *__restrict__ cnt,
                                                       int64_t idx_stride, float *__restrict__ part, int64_t n_chunk)
{
    const int tok = blockIdx.z;
    const int64_t c = blockIdx.x, j0 = c * CUK_AXPY_CHUNK;
    const int64_t n = cnt ? cnt[tok] : n_ff;
    if (j0 >= n)
        return;
    const int64_t nb = n_embd / T::E, pb = (int64_t)blockIdx.y * AXPY_THREADS + threadIdx.x;
    if (pb >= nb)
        return;
    const float *a = act + (int64_t)tok * idx_stride;
    float acc[T::E];
#pragma unroll
    for (int e = 0; e < T::E; e++)
        acc[e] = 0.0f;
    const int64_t j1 = j0 + CUK_AXPY_CHUNK < n ? j0 + CUK_AXPY_CHUNK : n;
    for (int64_t j = j0; j < j1; j++) {
        const float aj = a[j];
        if (aj == 0.0f)
            continue;
        const int64_t r = idx ? idx[tok * idx_stride + j] : j;
        uint4 qq[T::NQ];
        float s;
        load_lb<T>(q + r * nb * (16 * T::NQ), T::HAS_D ? d + r * nb : nullptr, pb, qq, &s);
        float w[T::E];
        T::deq(qq, w);
        const float as = aj * s; /* the scale folded first, as the CPU's axpy kernels do */
#pragma unroll
        for (int e = 0; e < T::E; e++)
            acc[e] = __fmaf_rn(as, w[e], acc[e]);
    }
    float4 *out = (float4 *)(part + ((int64_t)tok * n_chunk + c) * n_embd + pb * T::E);
#pragma unroll
    for (int k = 0; k < T::E / 4; k++)
        out[k] = make_float4(acc[4 * k], acc[4 * k + 1], acc[4 * k + 2], acc[4 * k + 3]);
}

__global__ void k_chunk_sum(const float *__restrict__ part, const int32_t *__restrict__ cnt, int64_t n_ff,
                            int64_t n_embd, int64_t n_chunk, float *y, bool add)
{
    const int tok = blockIdx.y;
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n_embd)
        return;
    const int64_t n = cnt ? cnt[tok] : n_ff, nc = (n + CUK_AXPY_CHUNK - 1) / CUK_AXPY_CHUNK;
    const float *p = part + (int64_t)tok * n_chunk * n_embd + e;
    float s = 0.0f;
    for (int64_t c = 0; c < nc; c++)
        s += p[c * n_embd];
    float *o = y + (int64_t)tok * n_embd + e;
    *o = add ? *o + s : s;
}

extern "C" size_t cuk_axpy_part_floats(int64_t n_ff, int64_t n_embd, int B)
{
    return (size_t)((n_ff + CUK_AXPY_CHUNK - 1) / CUK_AXPY_CHUNK) * (size_t)n_embd * (size_t)B;
}

template <class T>
static int axpy_t(const struct cuk_w *w, const float *act, int B, const int32_t *idx, const int32_t *cnt,
                  int64_t idx_stride, float *part, float *y, bool add, cudaStream_t st)
{
    const int64_t n_embd = w->n_in, n_ff = w->n_out, nb = n_embd / T::E;
    const int64_t n_chunk = (n_ff + CUK_AXPY_CHUNK - 1) / CUK_AXPY_CHUNK;
    const dim3 grid((unsigned)n_chunk, (unsigned)((nb + AXPY_THREADS - 1) / AXPY_THREADS), (unsigned)B);
    k_axpy<T><<<grid, AXPY_THREADS, 0, st>>>((const uint8_t *)w->q, (const __half *)w->d, n_embd, n_ff, act, idx, cnt,
                                              idx_stride, part, n_chunk);
    int rc = launched();
    if (rc)
        return rc;
    k_chunk_sum<<<dim3((unsigned)((n_embd + 255) / 256), (unsigned)B), 256, 0, st>>>(part, cnt, n_ff, n_embd, n_chunk,
                                                                                      y, add);
    return launched();
}

extern "C" int cuk_axpy_rows(const struct cuk_w *down_t, const float *act, int B, const int32_t *idx,
                             const int32_t *cnt, int64_t idx_stride, float *part, float *y, bool add, void *st)
{
    CUK_DISPATCH(down_t->type, return axpy_t<T>(down_t, act, B, idx, cnt, idx_stride, part, y, add, S(st)));
    return 0;
}

/* ---- mask compaction: an ordered block scan, one block per token ---- */

__global__ void __launch_bounds__(1024) k_compact(const uint8_t *__restrict__ mask, int64_t n, int32_t *idx, int32_t *cnt)
{
    __shared__ int32_t wsum[32];
    const int tok = blockIdx.x, t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int64_t seg = (n + 1023) / 1024, i0 = t * seg, i1 = i0 + seg < n ? i0 + seg : n;
    const uint8_t *m = mask + (int64_t)tok * n;
    int32_t c = 0;
    for (int64_t i = i0; i < i1; i++)
        c += m[i] != 0;
    int32_t incl = c; /* inclusive scan over the warp, then over the warps */
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        int32_t v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o)
            incl += v;
    }
    if (lane == 31)
        wsum[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        int32_t v = wsum[lane], s = v;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            int32_t u = __shfl_up_sync(0xffffffffu, s, o);
            if (lane >= o)
                s += u;
        }
        wsum[lane] = s - v; /* exclusive */
        if (lane == 31)
            cnt[tok] = s;
    }
    __syncthreads();
    int32_t o = wsum[warp] + incl - c;
    int32_t *out = idx + (int64_t)tok * n;
    for (int64_t i = i0; i < i1; i++)
        if (m[i])
            out[o++] = (int32_t)i;
}

extern "C" int cuk_compact(const uint8_t *mask, int B, int64_t n, int32_t *idx, int32_t *cnt, void *st)
{
    k_compact<<<(unsigned)B, 1024, 0, S(st)>>>(mask, n, idx, cnt);
    return launched();
}

__global__ void k_iota(int64_t n, int32_t *idx, int32_t *cnt)
{
    const int tok = blockIdx.y;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        idx[(int64_t)tok * n + i] = (int32_t)i;
    if (i == 0)
        cnt[tok] = (int32_t)n;
}

extern "C" int cuk_iota(int B, int64_t n, int32_t *idx, int32_t *cnt, void *st)
{
    k_iota<<<dim3((unsigned)((n + 255) / 256), (unsigned)B), 256, 0, S(st)>>>(n, idx, cnt);
    return launched();
}

/* ---- norms, rows, elementwise ---- */

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

__global__ void k_rmsnorm(float *out, const float *x, const float *w, int64_t n, int64_t sx, float eps)
{
    __shared__ float sh[32];
    const float *xr = x + (int64_t)blockIdx.x * sx;
    float *o = out + (int64_t)blockIdx.x * n;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        ss = __fmaf_rn(xr[i], xr[i], ss);
    ss = block_sum(ss, sh);
    const float scale = 1.0f / sqrtf(ss / (float)n + eps);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        o[i] = xr[i] * scale * w[i];
}

extern "C" int cuk_rmsnorm(float *out, const float *x, const float *w, int B, int64_t n, int64_t stride_x, float eps,
                           void *st)
{
    k_rmsnorm<<<(unsigned)B, 256, 0, S(st)>>>(out, x, w, n, stride_x, eps);
    return launched();
}

template <class T>
__global__ void k_get_rows(const uint8_t *q, const __half *d, int64_t n_in, const int32_t *ids, float *out)
{
    const int tok = blockIdx.x;
    const int64_t r = ids[tok], nb = n_in / T::E;
    for (int64_t b = threadIdx.x; b < nb; b += blockDim.x) {
        uint4 qq[T::NQ];
        float s, w[T::E];
        load_lb<T>(q + r * nb * (16 * T::NQ), T::HAS_D ? d + r * nb : nullptr, b, qq, &s);
        T::deq(qq, w);
#pragma unroll
        for (int e = 0; e < T::E; e++)
            out[(int64_t)tok * n_in + b * T::E + e] = w[e] * s;
    }
}

extern "C" int cuk_get_rows(const struct cuk_w *t, const int32_t *ids, int B, float *out, void *st)
{
    CUK_DISPATCH(t->type, k_get_rows<T><<<(unsigned)B, 128, 0, S(st)>>>((const uint8_t *)t->q, (const __half *)t->d,
                                                                         t->n_in, ids, out));
    return launched();
}

__global__ void k_add_bias(float *y, const float *b, int64_t n, int64_t total)
{
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
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] += b ? a[i] + b[i] : a[i];
}

extern "C" int cuk_add2(float *x, const float *a, const float *b, int64_t n, void *st)
{
    k_add2<<<(unsigned)((n + 255) / 256), 256, 0, S(st)>>>(x, a, b, n);
    return launched();
}

__global__ void k_glu_ew(float *out, const float *g, const float *u, int64_t n, int kind)
{
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
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        m[i] = y[i] >= thr;
}

extern "C" int cuk_threshold(const float *y, uint8_t *mask, int64_t n, float thr, void *st)
{
    k_threshold<<<(unsigned)((n + 255) / 256), 256, 0, S(st)>>>(y, mask, n, thr);
    return launched();
}

/* ---- RoPE, KV store, attention ---- */

template <class C> __device__ static inline void cstore(C *p, float v);
template <> __device__ inline void cstore<float>(float *p, float v) { *p = v; }
template <> __device__ inline void cstore<__half>(__half *p, float v) { *p = __float2half_rn(v); }
__device__ static inline float cload(const float *p) { return *p; }
__device__ static inline float cload(const __half *p) { return __half2float(*p); }

template <class C>
__global__ void k_rope_store(struct cuk_attn_geom g, float *q, float *k, const float *v, const int32_t *pos,
                             const int32_t *seq, C *kc, C *vc)
{
    const int tok = blockIdx.x, D = g.head_dim, half = g.rope_dim / 2;
    const int64_t Q = (int64_t)g.n_head * D, KV = (int64_t)g.n_head_kv * D;
    const int32_t p = pos[tok];
    float *qt = q + tok * Q, *kt = k + tok * KV;
    const int n_pairs = (g.n_head + g.n_head_kv) * half;
    for (int w = threadIdx.x; w < n_pairs; w += blockDim.x) {
        const int h = w / half, i = w % half;
        float *vec = h < g.n_head ? qt + (int64_t)h * D : kt + (int64_t)(h - g.n_head) * D;
        /* fp32 angle as ops_rope: inv_freq = 1 / theta^(2i/d) */
        const float inv_freq = 1.0f / powf(g.rope_theta, (float)(2 * i) / (float)g.rope_dim);
        const float ang = (float)p * inv_freq;
        float s, c;
        sincosf(ang, &s, &c);
        const int a = g.rope_mode == OPS_ROPE_NEOX ? i : 2 * i, b = g.rope_mode == OPS_ROPE_NEOX ? i + half : 2 * i + 1;
        const float x0 = vec[a], x1 = vec[b];
        vec[a] = x0 * c - x1 * s;
        vec[b] = x0 * s + x1 * c;
    }
    __syncthreads();
    const int64_t cell = ((int64_t)seq[tok] * g.n_ctx + p) * KV;
    for (int64_t i = threadIdx.x; i < KV; i += blockDim.x) {
        cstore<C>(kc + cell + i, kt[i]);
        cstore<C>(vc + cell + i, v[tok * KV + i]);
    }
}

extern "C" int cuk_rope_store(const struct cuk_attn_geom *g, float *q, float *k, const float *v, const int32_t *pos,
                              const int32_t *seq, void *k_cache, void *v_cache, int B, void *st)
{
    if (g->f16)
        k_rope_store<__half><<<(unsigned)B, 256, 0, S(st)>>>(*g, q, k, v, pos, seq, (__half *)k_cache, (__half *)v_cache);
    else
        k_rope_store<float><<<(unsigned)B, 256, 0, S(st)>>>(*g, q, k, v, pos, seq, (float *)k_cache, (float *)v_cache);
    return launched();
}

#define ATTN_WARPS 8
#define ATTN_UNROLL 4

/* One block per (token, head), 8 warps. Lane l holds dims [l·DL, l·DL + DL) of the head. Scores:
 * warp w takes cells w, w+8, ... (four in flight), one warp sum each, into shared memory; softmax;
 * then warp w sums p_t · v_t over the same cells for its lane's dims, and the 8 warps' partial
 * outputs are added in warp order. Each token attends to its own sequence's cells 0..pos. */
template <class C, int DL>
__global__ void __launch_bounds__(ATTN_WARPS * 32) k_attn(struct cuk_attn_geom g, const float *q, const C *kc, const C *vc,
                                                          const int32_t *pos, const int32_t *seq, float *out)
{
    extern __shared__ float sm[];
    __shared__ float red[32];
    const int tok = blockIdx.x, h = blockIdx.y, D = DL * 32, kvh = h / (g.n_head / g.n_head_kv);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t KV = (int64_t)g.n_head_kv * D;
    const int32_t n_kv = pos[tok] + 1;
    float *sc = sm;                 /* n_ctx scores */
    float *po = sm + g.n_ctx;       /* ATTN_WARPS × D partial outputs */
    const float *qt = q + ((int64_t)tok * g.n_head + h) * D;
    float qr[DL];
#pragma unroll
    for (int k = 0; k < DL; k++)
        qr[k] = qt[lane * DL + k];
    const C *kb = kc + (int64_t)seq[tok] * g.n_ctx * KV + (int64_t)kvh * D + lane * DL;
    const C *vb = vc + (int64_t)seq[tok] * g.n_ctx * KV + (int64_t)kvh * D + lane * DL;
    const float scale = 1.0f / sqrtf((float)D);
    for (int32_t t0 = warp; t0 < n_kv; t0 += ATTN_WARPS * ATTN_UNROLL) {
        float s[ATTN_UNROLL];
#pragma unroll
        for (int u = 0; u < ATTN_UNROLL; u++) {
            const int32_t t = t0 + u * ATTN_WARPS;
            s[u] = 0.0f;
            if (t < n_kv) {
                const C *kr = kb + (int64_t)t * KV;
#pragma unroll
                for (int k = 0; k < DL; k++)
                    s[u] = __fmaf_rn(qr[k], cload(kr + k), s[u]);
            }
        }
#pragma unroll
        for (int u = 0; u < ATTN_UNROLL; u++) {
            const int32_t t = t0 + u * ATTN_WARPS;
            const float v = warp_sum(s[u]);
            if (lane == 0 && t < n_kv)
                sc[t] = v * scale;
        }
    }
    __syncthreads();
    float mx = -INFINITY;
    for (int32_t t = threadIdx.x; t < n_kv; t += ATTN_WARPS * 32)
        mx = fmaxf(mx, sc[t]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (lane == 0)
        red[warp] = mx;
    __syncthreads();
    mx = red[0];
    for (int i = 1; i < ATTN_WARPS; i++)
        mx = fmaxf(mx, red[i]);
    __syncthreads();
    float sum = 0.0f;
    for (int32_t t = threadIdx.x; t < n_kv; t += ATTN_WARPS * 32) {
        const float e = expf(sc[t] - mx);
        sc[t] = e;
        sum += e;
    }
    sum = block_sum(sum, red); /* syncs: sc is complete after it */
    float o[DL];
#pragma unroll
    for (int k = 0; k < DL; k++)
        o[k] = 0.0f;
    for (int32_t t0 = warp; t0 < n_kv; t0 += ATTN_WARPS * ATTN_UNROLL) {
        float vv[ATTN_UNROLL][DL];
#pragma unroll
        for (int u = 0; u < ATTN_UNROLL; u++) {
            const int32_t t = t0 + u * ATTN_WARPS;
#pragma unroll
            for (int k = 0; k < DL; k++)
                vv[u][k] = t < n_kv ? cload(vb + (int64_t)t * KV + k) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < ATTN_UNROLL; u++) {
            const int32_t t = t0 + u * ATTN_WARPS;
            const float p = t < n_kv ? sc[t] : 0.0f;
#pragma unroll
            for (int k = 0; k < DL; k++)
                o[k] = __fmaf_rn(p, vv[u][k], o[k]);
        }
    }
#pragma unroll
    for (int k = 0; k < DL; k++)
        po[warp * D + lane * DL + k] = o[k];
    __syncthreads();
    const float inv = 1.0f / sum;
    float *ot = out + ((int64_t)tok * g.n_head + h) * D;
    for (int i = threadIdx.x; i < D; i += ATTN_WARPS * 32) {
        float a = 0.0f;
        for (int w = 0; w < ATTN_WARPS; w++)
            a += po[w * D + i];
        ot[i] = a * inv;
    }
}

template <class C, int DL>
static int attn_launch(const struct cuk_attn_geom *g, const float *q, const void *k_cache, const void *v_cache,
                       const int32_t *pos, const int32_t *seq, float *out, int B, cudaStream_t st)
{
    const size_t smem = (size_t)(g->n_ctx + ATTN_WARPS * DL * 32) * sizeof(float);
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(k_attn<C, DL>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess)
            return -(int)e;
    }
    k_attn<C, DL><<<dim3((unsigned)B, (unsigned)g->n_head), ATTN_WARPS * 32, smem, st>>>(
        *g, q, (const C *)k_cache, (const C *)v_cache, pos, seq, out);
    return launched();
}

template <class C>
static int attn_c(const struct cuk_attn_geom *g, const float *q, const void *k_cache, const void *v_cache,
                  const int32_t *pos, const int32_t *seq, float *out, int B, cudaStream_t st)
{
    switch (g->head_dim) {
    case 32: return attn_launch<C, 1>(g, q, k_cache, v_cache, pos, seq, out, B, st);
    case 64: return attn_launch<C, 2>(g, q, k_cache, v_cache, pos, seq, out, B, st);
    case 128: return attn_launch<C, 4>(g, q, k_cache, v_cache, pos, seq, out, B, st);
    case 256: return attn_launch<C, 8>(g, q, k_cache, v_cache, pos, seq, out, B, st);
    default: return -(int)cudaErrorInvalidValue; /* cudev checks head_dim at open */
    }
}

extern "C" bool cuk_attn_ok(int head_dim) { return head_dim == 32 || head_dim == 64 || head_dim == 128 || head_dim == 256; }

extern "C" int cuk_attn(const struct cuk_attn_geom *g, const float *q, const void *k_cache, const void *v_cache,
                        const int32_t *pos, const int32_t *seq, float *out, int B, void *st)
{
    if (g->f16)
        return attn_c<__half>(g, q, k_cache, v_cache, pos, seq, out, B, S(st));
    return attn_c<float>(g, q, k_cache, v_cache, pos, seq, out, B, S(st));
}

/* ---- greedy sampling ---- */

__global__ void __launch_bounds__(1024) k_argmax(const float *logits, int64_t n, int32_t *ids)
{
    __shared__ float bv[32];
    __shared__ int32_t bi[32];
    const float *l = logits + (int64_t)blockIdx.x * n;
    float v = -INFINITY;
    int32_t best = 0x7fffffff;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        if (l[i] > v)
            v = l[i], best = (int32_t)i; /* strided ascending: the first maximum of this thread */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int32_t oi = __shfl_xor_sync(0xffffffffu, best, o);
        if (ov > v || (ov == v && oi < best))
            v = ov, best = oi;
    }
    if (lane == 0)
        bv[warp] = v, bi[warp] = best;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x >> 5); w++)
            if (bv[w] > v || (bv[w] == v && bi[w] < best))
                v = bv[w], best = bi[w];
        ids[blockIdx.x] = best == 0x7fffffff ? 0 : best;
    }
}

extern "C" int cuk_argmax(const float *logits, int B, int64_t n, int32_t *ids, void *st)
{
    k_argmax<<<(unsigned)B, 1024, 0, S(st)>>>(logits, n, ids);
    return launched();
}

/* ---- cuBLAS helpers ---- */

__global__ void k_to_half(const float *x, void *out, int64_t n, bool bf16)
{
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

template <class T>
__global__ void k_dequant_f16(const uint8_t *q, const __half *d, int64_t n_in, int64_t n_out, __half *out)
{
    const int64_t nb = n_in / T::E, i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nb * n_out)
        return;
    uint4 qq[T::NQ];
    float s, w[T::E];
    load_lb<T>(q, d, i, qq, &s); /* rows are contiguous: lane block i of the whole matrix */
    T::deq(qq, w);
#pragma unroll
    for (int e = 0; e < T::E; e++)
        out[i * T::E + e] = __float2half_rn(w[e] * s);
}

extern "C" int cuk_dequant_f16(const struct cuk_w *w, void *out, void *st)
{
    const int64_t n = w->n_in / lane_elems(w->type) * w->n_out;
    CUK_DISPATCH(w->type, k_dequant_f16<T><<<(unsigned)((n + 255) / 256), 256, 0, S(st)>>>(
                              (const uint8_t *)w->q, (const __half *)w->d, w->n_in, w->n_out, (__half *)out));
    return launched();
}

/* ---- HBM read floor ---- */

__global__ void k_read(const uint4 *p, size_t n, unsigned long long *sink)
{
    uint32_t acc = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        const uint4 a = __ldcs(p + i), b = __ldcs(p + i + stride), c = __ldcs(p + i + 2 * stride),
                    e = __ldcs(p + i + 3 * stride);
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ e.x ^ e.y ^ e.z ^ e.w;
    }
    for (; i < n; i += stride) {
        const uint4 a = __ldcs(p + i);
        acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    if (acc == 0x9e3779b9u) /* practically never: keeps the loads live */
        *sink = acc;
}

extern "C" int cuk_read_bench(const void *buf, size_t n, unsigned long long *sink, void *st)
{
    int dev = 0, sms = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    k_read<<<(unsigned)(sms * 8), 512, 0, S(st)>>>((const uint4 *)buf, n / 16, sink);
    return launched();
}
