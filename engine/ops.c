/* ops.c — matmul driver over the type kernels, norm, rope, softmax. */
#include "ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pi_err.h"
#include "quant.h"
#include "threadpool.h"

void ops_scratch_fini(struct ops_scratch *s)
{
    free(s->buf);
    s->buf = NULL;
    s->cap = 0;
}

int ops_scratch_reserve(struct ops_scratch *s, size_t bytes)
{
    if (s->cap >= bytes)
        return 0;
    void *p = realloc(s->buf, bytes);
    if (!p)
        return pi_fail(PI_E_NOMEM, "ops: cannot allocate %zu bytes of scratch", bytes);
    s->buf = p;
    s->cap = bytes;
    return 0;
}

/* Up to OPS_MATMUL_MAX matrices with the same input, as one job over their concatenated rows. */
struct matmul_job {
    const struct pi_tensor *W[OPS_MATMUL_MAX];
    float *Y[OPS_MATMUL_MAX];
    int64_t first[OPS_MATMUL_MAX + 1]; /* row of the concatenation where matrix k starts */
    int n_w;
    const char *xvd;   /* B rows of activations in vec_dot_type */
    size_t xvd_stride; /* bytes between them */
    int B;
};

/* Rows of a slice: a multiple of this (the GEMV's row pairs and the GEMM's 16-row tiles stay whole,
 * though a row's result does not depend on its neighbours). */
#define MATMUL_ROW_ALIGN 16
/* The smallest slice worth a claim: ~36 KB of q4_0 weights at n_in 4096. */
#define MATMUL_MIN_ROWS 16

static void matmul_worker(void *arg, int ith, int nth)
{
    const struct matmul_job *j = arg;
    /* contiguous row ranges keep each slice streaming its own part of the weights */
    int64_t r0, r1;
    ops_slice_rows(j->first[j->n_w], nth, ith, MATMUL_ROW_ALIGN, &r0, &r1);
    for (int k = 0; k < j->n_w && r0 < r1; k++) {
        const int64_t a = r0 > j->first[k] ? r0 : j->first[k], b = r1 < j->first[k + 1] ? r1 : j->first[k + 1];
        if (a >= b)
            continue;
        const struct pi_tensor *W = j->W[k];
        /* the kernels tile the rows and the batch (quant_gemm_rows); one token is a multi-row GEMV */
        quant_gemm_rows(W->type, W->data, W->row_bytes, W->ne[0], j->xvd, j->xvd_stride, j->B, j->Y[k],
                        (size_t)W->ne[1], a - j->first[k], b - j->first[k]);
    }
}

int ops_matmul_n(struct pi_pool *pool, struct ops_scratch *s, const struct pi_tensor *const *W, float *const *Y,
                 int n_w, const float *X, int B)
{
    if (n_w < 1 || n_w > OPS_MATMUL_MAX)
        return pi_fail(PI_E_INVAL, "ops: %d matrices in one matmul (1..%d)", n_w, OPS_MATMUL_MAX);
    const struct pi_type_traits *tt = quant_traits(W[0]->type);
    if (!tt || !tt->vec_dot)
        return pi_fail(PI_E_UNSUPPORTED, "ops: tensor '%s' has type %u without kernels", W[0]->name, W[0]->type);
    const int64_t n_in = W[0]->ne[0];
    struct matmul_job j = { .n_w = n_w, .B = B };
    for (int k = 0; k < n_w; k++) {
        const struct pi_type_traits *kt = quant_traits(W[k]->type);
        if (!kt || !kt->vec_dot)
            return pi_fail(PI_E_UNSUPPORTED, "ops: tensor '%s' has type %u without kernels", W[k]->name, W[k]->type);
        /* one activation conversion serves every matrix: the same length and dot partner type */
        if (W[k]->ne[0] != n_in || kt->vec_dot_type != tt->vec_dot_type) {
            for (int i = 0; i < n_w; i++) {
                int rc = ops_matmul_n(pool, s, &W[i], &Y[i], 1, X, B);
                if (rc)
                    return rc;
            }
            return 0;
        }
        j.W[k] = W[k];
        j.Y[k] = Y[k];
        j.first[k + 1] = j.first[k] + W[k]->ne[1];
    }
    if (tt->vec_dot_type == PI_TYPE_F32) {
        j.xvd = (const char *)X;
        j.xvd_stride = (size_t)n_in * sizeof(float);
    } else {
        const struct pi_type_traits *vt = quant_traits(tt->vec_dot_type);
        size_t row = quant_row_size(tt->vec_dot_type, n_in);
        int rc = ops_scratch_reserve(s, row * (size_t)B);
        if (rc)
            return rc;
        for (int b = 0; b < B; b++)
            vt->from_float(X + (size_t)b * n_in, (char *)s->buf + row * (size_t)b, n_in);
        j.xvd = s->buf;
        j.xvd_stride = row;
    }
    /* home slices: each thread streams the same rows job after job, the head of which it may have
     * prefetched while it waited (ops_matmul_prefetch) */
    pool_run_home(pool, matmul_worker, &j, pool_slices_for(pool, j.first[n_w], MATMUL_MIN_ROWS));
    return 0;
}

void ops_prefetch_rows(struct pi_pool *pool, const struct pi_tensor *const *W, int n_w, int n_slices, int64_t align)
{
    if (!pool || pool_prefetch_bytes(pool) == 0 || n_w < 1 || n_w > OPS_MATMUL_MAX || n_slices < 1)
        return;
    int64_t first[OPS_MATMUL_MAX + 1] = { 0 };
    for (int k = 0; k < n_w; k++)
        first[k + 1] = first[k] + (W[k]->data ? W[k]->ne[1] : 0);
    const int64_t total = first[n_w], a = align > 0 ? align : 1;
    for (int t = 1; t < pool_size(pool); t++) {
        int s0, s1;
        pool_home_range(pool, n_slices, t, &s0, &s1);
        int64_t r0 = 0, r1 = 0, unused; /* the thread's rows: its first slice's start, its last one's end */
        if (s0 < s1) {
            ops_slice_rows(total, n_slices, s0, a, &r0, &unused);
            ops_slice_rows(total, n_slices, s1 - 1, a, &unused, &r1);
        }
        const void *ptr = NULL;
        size_t len = 0;
        for (int k = 0; k < n_w && r0 < r1; k++) {
            if (r0 < first[k] || r0 >= first[k + 1])
                continue;
            /* the head of the thread's share: the part in the first matrix it reaches is enough */
            const int64_t e = r1 < first[k + 1] ? r1 : first[k + 1];
            ptr = (const char *)W[k]->data + (size_t)(r0 - first[k]) * W[k]->row_bytes;
            len = (size_t)(e - r0) * W[k]->row_bytes;
            break;
        }
        pool_prefetch_set(pool, t, ptr, len);
    }
}

void ops_matmul_prefetch(struct pi_pool *pool, const struct pi_tensor *const *W, int n_w)
{
    if (!pool || pool_prefetch_bytes(pool) == 0 || n_w < 1 || n_w > OPS_MATMUL_MAX)
        return;
    int64_t total = 0;
    for (int k = 0; k < n_w; k++)
        total += W[k]->data ? W[k]->ne[1] : 0;
    ops_prefetch_rows(pool, W, n_w, pool_slices_for(pool, total, MATMUL_MIN_ROWS), MATMUL_ROW_ALIGN);
}

int ops_matmul(struct pi_pool *pool, struct ops_scratch *s, const struct pi_tensor *W, const float *X,
               float *Y, int B)
{
    return ops_matmul_n(pool, s, &W, &Y, 1, X, B);
}

/* The sum of squares as 8 chains: element i goes into chain i % 8, each chain in ascending i, the
 * chains added in a fixed tree — the same bits for every caller, batch and thread count. One chain
 * was one dependent double add per element: ~8 µs for 4096 elements in cpud, on the hybrid cold
 * share's critical path once a layer; 8 chains are independent adds. Scalars, not an array, so
 * that they stay in registers at -O2 (the GPU builds are debugoptimized). */
static double sum_squares(const float *x, int64_t n)
{
    double c0 = 0.0, c1 = 0.0, c2 = 0.0, c3 = 0.0, c4 = 0.0, c5 = 0.0, c6 = 0.0, c7 = 0.0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const double v0 = x[i], v1 = x[i + 1], v2 = x[i + 2], v3 = x[i + 3];
        const double v4 = x[i + 4], v5 = x[i + 5], v6 = x[i + 6], v7 = x[i + 7];
        c0 += v0 * v0, c1 += v1 * v1, c2 += v2 * v2, c3 += v3 * v3;
        c4 += v4 * v4, c5 += v5 * v5, c6 += v6 * v6, c7 += v7 * v7;
    }
    double *tail[7] = { &c0, &c1, &c2, &c3, &c4, &c5, &c6 }; /* the last n % 8: chain k the k-th */
    for (int k = 0; k < 7 && i < n; i++, k++)
        *tail[k] += (double)x[i] * x[i];
    return ((c0 + c1) + (c2 + c3)) + ((c4 + c5) + (c6 + c7));
}

void ops_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps)
{
    /* Accumulate in double: n is up to ~16k and the reference computes the mean in fp32 with a
     * pairwise sum, so a plain fp32 running sum would drift further from it than double does. */
    const double ss = sum_squares(x, n);
    const float scale = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (int64_t i = 0; i < n; i++)
        out[i] = x[i] * scale * w[i];
}

void ops_rmsnorm_rows(float *out, const float *x, const float *w, int32_t B, int64_t n, float eps)
{
    for (int32_t b = 0; b < B; b++)
        ops_rmsnorm(out + (size_t)b * n, x + (size_t)b * n, w, n, eps);
}

void ops_rope(float *x, int n_heads, int head_dim, int rope_dim, int32_t pos, float theta,
              enum ops_rope_mode mode)
{
    const int half = rope_dim / 2;
    for (int i = 0; i < half; i++) {
        /* fp32 angle as HF computes it: inv_freq = 1 / theta^(2i/d), angle = pos * inv_freq. */
        const float inv_freq = 1.0f / powf(theta, (float)(2 * i) / (float)rope_dim);
        const float ang = (float)pos * inv_freq;
        const float c = cosf(ang), s = sinf(ang);
        for (int h = 0; h < n_heads; h++) {
            float *v = x + (size_t)h * head_dim;
            const int a = mode == OPS_ROPE_NEOX ? i : 2 * i;
            const int b = mode == OPS_ROPE_NEOX ? i + half : 2 * i + 1;
            const float x0 = v[a], x1 = v[b];
            v[a] = x0 * c - x1 * s;
            v[b] = x0 * s + x1 * c;
        }
    }
}

void ops_softmax(float *x, int64_t n)
{
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++)
        x[i] *= inv;
}

void ops_get_row(const struct pi_tensor *t, int64_t r, float *out)
{
    const struct pi_type_traits *tt = quant_traits(t->type);
    tt->to_float((const char *)t->data + (size_t)r * t->row_bytes, out, t->ne[0]);
}
