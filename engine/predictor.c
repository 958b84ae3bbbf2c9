/* predictor.c — mask = fc2 · relu(fc1 · h) >= threshold (see predictor.h). */
#include "predictor.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "pi_err.h"
#include "quant.h"
#include "threadpool.h"

/* Rows a thread takes at a time: as in ops_matmul, a tile of weight rows stays in cache while every
 * token of the batch is dotted with it. */
#define PRED_ROW_TILE 16
#define PRED_ALIGN 64 /* scratch sections start on cache lines */

bool pred_available(const struct pi_model *m)
{
    for (int il = 0; il < m->hp.n_layer; il++)
        if (!m->layers[il].fc1.data || !m->layers[il].fc2.data)
            return false;
    return m->hp.n_layer > 0;
}

uint64_t pred_bytes(const struct pi_layer *l)
{
    return (uint64_t)l->fc1.row_bytes * (uint64_t)l->fc1.ne[1] + (uint64_t)l->fc2.row_bytes * (uint64_t)l->fc2.ne[1];
}

struct pred_job {
    const struct pi_tensor *W;
    const char *x;     /* (B) rows of the input in W's vec_dot_type */
    size_t x_stride;
    float *y;          /* (B, n_out) */
    int32_t B;
    bool relu;         /* fc1: y = relu(y) */
    uint8_t *mask;     /* fc2: mask = y >= thr */
    float thr;
    atomic_llong n_on; /* ones written to mask */
};

/* y[b, r] = W[r] · x[b] for this thread's rows, then relu (fc1) or the threshold (fc2) */
static void pred_worker(void *arg, int ith, int nth)
{
    struct pred_job *j = arg;
    const int64_t n_in = j->W->ne[0], n_out = j->W->ne[1];
    int64_t r0, r1;
    ops_slice_rows(n_out, nth, ith, 1, &r0, &r1);
    long long on = 0;
    for (int64_t t0 = r0; t0 < r1; t0 += PRED_ROW_TILE) {
        const int64_t t1 = t0 + PRED_ROW_TILE < r1 ? t0 + PRED_ROW_TILE : r1;
        for (int32_t b = 0; b < j->B; b++) {
            float *y = j->y + (size_t)b * n_out;
            quant_gemv_rows(j->W->type, j->W->data, j->W->row_bytes, n_in, j->x + (size_t)b * j->x_stride, y, t0, t1);
            if (j->relu)
                for (int64_t r = t0; r < t1; r++)
                    y[r] = y[r] > 0.0f ? y[r] : 0.0f;
            if (j->mask) {
                uint8_t *mk = j->mask + (size_t)b * n_out;
                for (int64_t r = t0; r < t1; r++) {
                    mk[r] = y[r] >= j->thr;
                    on += mk[r];
                }
            }
        }
    }
    /* relaxed: pool_run's completion orders these adds before the caller's read */
    if (on)
        atomic_fetch_add_explicit(&j->n_on, on, memory_order_relaxed);
}

static size_t align_up(size_t n) { return (n + PRED_ALIGN - 1) / PRED_ALIGN * PRED_ALIGN; }

/* Bytes of B rows of n elements converted to W's vec_dot_type (0 when that is F32: used as is). */
static size_t vd_bytes(const struct pi_tensor *W, int64_t n, int32_t B)
{
    const enum pi_type vt = quant_traits(W->type)->vec_dot_type;
    return vt == PI_TYPE_F32 ? 0 : align_up(quant_row_size(vt, n) * (size_t)B);
}

/* x (B rows of n f32) in W's vec_dot_type: into dst, or x itself when that is F32 */
static const char *to_vd(const struct pi_tensor *W, const float *x, int64_t n, int32_t B, char *dst, size_t *stride)
{
    const enum pi_type vt = quant_traits(W->type)->vec_dot_type;
    if (vt == PI_TYPE_F32) {
        *stride = (size_t)n * sizeof(float);
        return (const char *)x;
    }
    *stride = quant_row_size(vt, n);
    for (int32_t b = 0; b < B; b++)
        quant_traits(vt)->from_float(x + (size_t)b * n, dst + *stride * (size_t)b, n);
    return dst;
}

void pred_prefetch(struct pi_pool *pool, const struct pi_layer *l)
{
    if (!l->fc1.data)
        return;
    const struct pi_tensor *fc1 = &l->fc1;
    ops_prefetch_rows(pool, &fc1, 1, pool_slices_for(pool, l->fc1.ne[1], PRED_ROW_TILE), 1);
}

int pred_eval(struct pi_pool *pool, struct ops_scratch *s, const struct pi_layer *l, const float *h, int32_t B,
              float threshold, uint8_t *mask, int64_t *n_active)
{
    if (!l->fc1.data || !l->fc2.data)
        return pi_fail(PI_E_INVAL, "predictor: layer has no fc1/fc2 (not a PowerInfer file)");
    if (B <= 0)
        return pi_fail(PI_E_INVAL, "predictor: batch of %d tokens", B);
    const int64_t E = l->fc1.ne[0], R = l->fc1.ne[1], F = l->fc2.ne[1];
    /* scratch: [h in fc1's vd type][hid (B, r) f32][hid in fc2's vd type][logits (B, n_ff) f32] */
    const size_t o_hid = vd_bytes(&l->fc1, E, B), o_hq = o_hid + align_up((size_t)B * R * sizeof(float)),
                 o_logit = o_hq + vd_bytes(&l->fc2, R, B), need = o_logit + (size_t)B * F * sizeof(float);
    int rc = ops_scratch_reserve(s, need);
    if (rc)
        return rc;
    char *buf = s->buf;
    float *hid = (float *)(buf + o_hid), *logit = (float *)(buf + o_logit);

    struct pred_job j1 = { .W = &l->fc1, .y = hid, .B = B, .relu = true };
    j1.x = to_vd(&l->fc1, h, E, B, buf, &j1.x_stride);
    /* fc2 comes next: the workers done with fc1 prefetch the head of their fc2 rows */
    const struct pi_tensor *fc2 = &l->fc2;
    const int n2 = pool_slices_for(pool, F, PRED_ROW_TILE);
    ops_prefetch_rows(pool, &fc2, 1, n2, 1);
    pool_run_home(pool, pred_worker, &j1, pool_slices_for(pool, R, PRED_ROW_TILE));

    struct pred_job j2 = { .W = &l->fc2, .y = logit, .B = B, .mask = mask, .thr = threshold };
    j2.x = to_vd(&l->fc2, hid, R, B, buf + o_hq, &j2.x_stride);
    atomic_init(&j2.n_on, 0);
    pool_run_home(pool, pred_worker, &j2, n2);
    if (n_active)
        *n_active = atomic_load_explicit(&j2.n_on, memory_order_relaxed);
    return 0;
}
