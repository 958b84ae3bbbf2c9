/* ops.h — the CPU kernels of the forward pass that are not per-type (those live in quant.c).
 *
 * Shapes follow ggml: a weight tensor W has ne[0] = n_in (contiguous) and ne[1] = n_out rows. */
#ifndef PI_OPS_H
#define PI_OPS_H

#include <stddef.h>
#include <stdint.h>

struct pi_pool;

/* A view of one weight tensor (data usually points into the mmapped GGUF). */
struct pi_tensor {
    const char *name;
    uint32_t type;     /* enum pi_type */
    int64_t ne[4];
    size_t row_bytes;  /* bytes of one row of ne[0] elements */
    const void *data;
};

/* Scratch that ops_matmul needs to convert activations to a weight's vec_dot_type. */
struct ops_scratch {
    void *buf;
    size_t cap;
};
void ops_scratch_fini(struct ops_scratch *s);
/* Grow s to at least bytes (contents not kept meaningful): 0 or -PI_E_NOMEM. */
int ops_scratch_reserve(struct ops_scratch *s, size_t bytes);

/* Y (B, n_out) = X (B, n_in) @ W^T, rows split over the pool. Returns 0 or -PI_E_NOMEM. */
int ops_matmul(struct pi_pool *pool, struct ops_scratch *s, const struct pi_tensor *W, const float *X,
               float *Y, int B);
/* Y[k] = X @ W[k]^T for n_w matrices with the same input (q/k/v, gate/up) as one pool job: one
 * conversion of X and one hand-out of slices over all their rows. Matrices that cannot share the
 * converted X (other length or dot partner type) run one after the other. Each row's result is the
 * one ops_matmul gives. */
#define OPS_MATMUL_MAX 4
int ops_matmul_n(struct pi_pool *pool, struct ops_scratch *s, const struct pi_tensor *const *W, float *const *Y,
                 int n_w, const float *X, int B);
/* Prefetch hints (threadpool.h, pool_prefetch_set) for the NEXT ops_matmul_n over these matrices,
 * each worker the head of its home share of their rows: set before the pool job that precedes that
 * matmul. ops_prefetch_rows: the same for any home job over the matrices' concatenated rows cut into
 * n_slices slices of ceil(rows / n_slices) rounded up to align (the predictor's). Hints only: no
 * result depends on them. */
void ops_matmul_prefetch(struct pi_pool *pool, const struct pi_tensor *const *W, int n_w);
/* Rows [*r0, *r1) of slice ith of n over total rows: contiguous, ceil(total / n) rounded up to align
 * (≥ 1) a slice. One definition for the workers and for the prefetch hints that name their shares. */
static inline void ops_slice_rows(int64_t total, int n, int ith, int64_t align, int64_t *r0, int64_t *r1)
{
    const int64_t per = ((total + n - 1) / n + align - 1) / align * align;
    *r0 = per * ith;
    *r1 = *r0 + per < total ? *r0 + per : total;
}
void ops_prefetch_rows(struct pi_pool *pool, const struct pi_tensor *const *W, int n_w, int n_slices, int64_t align);

/* out (n) = x / sqrt(mean(x^2) + eps) * w   (out may alias x) */
void ops_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps);
/* The same for B rows of n (out may alias x). */
void ops_rmsnorm_rows(float *out, const float *x, const float *w, int32_t B, int64_t n, float eps);

/* Rotary embedding in place on n_heads vectors of head_dim, first rope_dim dims rotated.
 * NORM pairs (x[2i], x[2i+1]) (GGUF llama, whose q/k rows were permuted by the converter);
 * NEOX pairs (x[i], x[i + rope_dim/2]) (qwen2, HF layout). angle_i = pos * theta^(-2i/rope_dim). */
enum ops_rope_mode { OPS_ROPE_NORM = 0, OPS_ROPE_NEOX = 2 };
void ops_rope(float *x, int n_heads, int head_dim, int rope_dim, int32_t pos, float theta,
              enum ops_rope_mode mode);

/* x (n) = softmax(x), in place, max-subtracted. */
void ops_softmax(float *x, int64_t n);

/* Row r of an embedding table as f32 (any float type). */
void ops_get_row(const struct pi_tensor *t, int64_t r, float *out);

#endif
