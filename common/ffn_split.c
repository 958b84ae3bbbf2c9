/* ffn_split.c — FFN over a subset of neurons (see ffn_split.h). */
#include "ffn_split.h"

#include <stdlib.h>
#include <string.h>

#include "pi_err.h"
#include "quant.h"
#include "threadpool.h"

int ffn_runs_build(struct ffn_runs *r, const uint8_t *sel, uint8_t want, const uint8_t *mask, int32_t n_mask,
                   int64_t n_ff)
{
    r->n = 0;
    r->n_neurons = 0;
    int64_t start = -1;
    for (int64_t i = 0; i <= n_ff; i++) {
        bool on = false;
        if (i < n_ff && sel[i] == want) {
            on = mask == NULL;
            for (int32_t b = 0; !on && b < n_mask; b++)
                on = mask[(int64_t)b * n_ff + i] != 0;
        }
        if (on && start < 0)
            start = i;
        if (!on && start >= 0) {
            if (r->n == r->cap) {
                int32_t cap = r->cap ? r->cap * 2 : 64;
                void *p = realloc(r->run, (size_t)cap * sizeof *r->run);
                if (!p)
                    return pi_fail(PI_E_NOMEM, "ffn: out of memory for %d runs", cap);
                r->run = p;
                r->cap = cap;
            }
            r->run[r->n][0] = (int32_t)start;
            r->run[r->n][1] = (int32_t)(i - start);
            r->n_neurons += i - start;
            r->n++;
            start = -1;
        }
    }
    return 0;
}

void ffn_runs_fini(struct ffn_runs *r)
{
    free(r->run);
    memset(r, 0, sizeof *r);
}

void ffn_scratch_fini(struct ffn_scratch *s)
{
    ops_scratch_fini(&s->xq);
    ops_scratch_fini(&s->aq);
    free(s->act);
    free(s->live);
    free(s->part);
    memset(s, 0, sizeof *s);
}

static int reserve(struct ops_scratch *s, size_t bytes)
{
    if (s->cap >= bytes)
        return 0;
    void *p = realloc(s->buf, bytes);
    if (!p)
        return pi_fail(PI_E_NOMEM, "ffn: cannot allocate %zu bytes", bytes);
    s->buf = p;
    s->cap = bytes;
    return 0;
}

struct ffn_job {
    const struct pi_model *m;
    const struct pi_layer *l;
    const struct ffn_runs *runs;
    const char *xq;     /* (B) rows of n in gate's vec_dot_type */
    size_t xq_stride;
    float *act;         /* (B, n_ff): gate results, then act */
    float *up;          /* (B, n_ff) */
    const char *aq;     /* (B) rows of act in down's vec_dot_type */
    size_t aq_stride;
    int32_t (*drun)[2]; /* runs widened to whole blocks of down */
    int32_t n_drun;
    float *y;
    int32_t B;
};

/* act[b, i] = act(gate_i · n_b, up_i · n_b) for the neurons of this thread's share of the runs */
static void gate_up_worker(void *arg, int ith, int nth)
{
    const struct ffn_job *j = arg;
    const int64_t N = j->runs->n_neurons, E = j->m->hp.n_embd, F = j->m->hp.n_ff;
    const int64_t lo = N * ith / nth, hi = N * (ith + 1) / nth;
    int64_t at = 0; /* index of the first neuron of run k in the concatenation */
    for (int32_t k = 0; k < j->runs->n && at < hi; k++) {
        const int64_t s = j->runs->run[k][0], len = j->runs->run[k][1];
        const int64_t a = lo > at ? lo - at : 0, b = hi - at < len ? hi - at : len;
        if (a < b) {
            for (int32_t t = 0; t < j->B; t++) {
                const char *x = j->xq + (size_t)t * j->xq_stride;
                quant_gemv_rows(j->l->ffn_gate.type, j->l->ffn_gate.data, j->l->ffn_gate.row_bytes, E, x,
                                j->act + (size_t)t * F, s + a, s + b);
                quant_gemv_rows(j->l->ffn_up.type, j->l->ffn_up.data, j->l->ffn_up.row_bytes, E, x,
                                j->up + (size_t)t * F, s + a, s + b);
                for (int64_t i = s + a; i < s + b; i++)
                    j->act[(size_t)t * F + i] = model_glu(j->m->hp.act, j->act[(size_t)t * F + i], j->up[(size_t)t * F + i]);
            }
        }
        at += len;
    }
}

/* y[b, e] = Σ over runs of down[e, run] · act[b, run] for this thread's rows e */
static void down_worker(void *arg, int ith, int nth)
{
    const struct ffn_job *j = arg;
    const struct pi_tensor *d = &j->l->ffn_down;
    const struct pi_type_traits *tt = quant_traits(d->type);
    const int64_t E = d->ne[1];
    const int64_t e0 = E * ith / nth, e1 = E * (ith + 1) / nth;
    for (int64_t e = e0; e < e1; e++) {
        const char *row = (const char *)d->data + (size_t)e * d->row_bytes;
        for (int32_t t = 0; t < j->B; t++) {
            const char *a = j->aq + (size_t)t * j->aq_stride;
            float acc = 0.0f;
            for (int32_t k = 0; k < j->n_drun; k++) {
                const int64_t s = j->drun[k][0], len = j->drun[k][1];
                float part;
                tt->vec_dot(len, &part, row + quant_row_size(d->type, s), a + quant_row_size(tt->vec_dot_type, s));
                acc += part;
            }
            j->y[(size_t)t * E + e] = acc;
        }
    }
}

/* ---- down_t path (PowerInfer layers) ---- */

/* Cache lines of the next live neuron's down_t row to prefetch while the current one is added: the
 * rows are scattered, so the hardware prefetcher only catches on a few lines into each. */
#define ROW_PREFETCH_LINES 4
#define CACHE_LINE 64

struct axpy_job {
    const struct pi_tensor *dt; /* down_t, ne {n_embd, n_ff} */
    pi_axpy_fn axpy;
    const float *act;           /* (B, n_ff) */
    const int32_t *live;        /* n_live neuron ids */
    int64_t n_live, F, E;
    float *y;                   /* (B, n_embd): thread 0's accumulator and the result */
    float *part;                /* (n_part, B, n_embd): threads 1..n_part */
    int n_part;
    int32_t B;
};

/* acc[t] (n_embd) = Σ over this thread's share of live neurons i of act[t, i] · down_t[i] */
static void axpy_worker(void *arg, int ith, int nth)
{
    const struct axpy_job *j = arg;
    const size_t BE = (size_t)j->B * (size_t)j->E;
    float *acc = ith == 0 ? j->y : j->part + (size_t)(ith - 1) * BE;
    memset(acc, 0, BE * sizeof *acc);
    const int64_t lo = j->n_live * ith / nth, hi = j->n_live * (ith + 1) / nth;
    const char *base = j->dt->data;
    const size_t rb = j->dt->row_bytes;
    for (int64_t k = lo; k < hi; k++) {
        const int32_t i = j->live[k];
        if (k + 1 < hi)
            for (int c = 0; c < ROW_PREFETCH_LINES; c++)
                __builtin_prefetch(base + (size_t)j->live[k + 1] * rb + (size_t)c * CACHE_LINE, 0, 3);
        const char *row = base + (size_t)i * rb;
        for (int32_t t = 0; t < j->B; t++) {
            const float a = j->act[(size_t)t * j->F + i];
            if (a != 0.0f)
                j->axpy(j->E, acc + (size_t)t * j->E, a, row);
        }
    }
}

/* y += Σ_p part[p], over this thread's slice of the (B, n_embd) elements, partials in thread order */
static void reduce_worker(void *arg, int ith, int nth)
{
    const struct axpy_job *j = arg;
    const size_t BE = (size_t)j->B * (size_t)j->E, lo = BE * (size_t)ith / (size_t)nth,
                 hi = BE * (size_t)(ith + 1) / (size_t)nth;
    for (int p = 0; p < j->n_part; p++) {
        const float *src = j->part + (size_t)p * BE;
        for (size_t e = lo; e < hi; e++)
            j->y[e] += src[e];
    }
}

/* y = Σ over live neurons of the runs of act_i · down_t[i]; *rows = down_t rows read */
static int down_t_partial(struct pi_pool *pool, struct ffn_scratch *s, const struct pi_layer *l, const float *act,
                          int64_t F, int64_t E, int32_t B, const struct ffn_runs *runs, float *y, int64_t *rows)
{
    const struct pi_type_traits *tt = quant_traits(l->ffn_down_t.type);
    if (!tt || !tt->axpy)
        return pi_fail(PI_E_UNSUPPORTED, "ffn: tensor '%s' has type %u without an AXPY kernel", l->ffn_down_t.name,
                       l->ffn_down_t.type);
    if (s->live_cap < runs->n_neurons) {
        int32_t *p = realloc(s->live, (size_t)runs->n_neurons * sizeof *p);
        if (!p)
            return pi_fail(PI_E_NOMEM, "ffn: out of memory for %lld neuron ids", (long long)runs->n_neurons);
        s->live = p;
        s->live_cap = runs->n_neurons;
    }
    /* live = neurons of the runs whose activation is nonzero for some token (ReLU zeros skip) */
    int64_t n_live = 0;
    for (int32_t k = 0; k < runs->n; k++)
        for (int64_t i = runs->run[k][0]; i < (int64_t)runs->run[k][0] + runs->run[k][1]; i++) {
            bool on = false;
            for (int32_t t = 0; !on && t < B; t++)
                on = act[(size_t)t * F + i] != 0.0f;
            if (on)
                s->live[n_live++] = (int32_t)i;
        }
    const int nth = pool_size(pool);
    const int64_t need = (int64_t)(nth - 1) * B * E;
    if (s->part_cap < need) {
        float *p = realloc(s->part, (size_t)need * sizeof *p);
        if (!p)
            return pi_fail(PI_E_NOMEM, "ffn: out of memory for %d partial sums", nth - 1);
        s->part = p;
        s->part_cap = need;
    }
    struct axpy_job j = { .dt = &l->ffn_down_t, .axpy = tt->axpy, .act = act, .live = s->live, .n_live = n_live,
                          .F = F, .E = E, .y = y, .part = s->part, .n_part = nth - 1, .B = B };
    pool_run(pool, axpy_worker, &j);
    if (nth > 1)
        pool_run(pool, reduce_worker, &j);
    *rows = n_live;
    return 0;
}

/* Widen runs to whole blocks of blk neurons, merging runs that then touch: a block is read once,
 * and its neurons outside S have act 0, so they add nothing. */
static int32_t widen_runs(const struct ffn_runs *r, int64_t blk, int64_t n_ff, int32_t (*out)[2])
{
    int32_t n = 0;
    for (int32_t k = 0; k < r->n; k++) {
        int64_t s = r->run[k][0] / blk * blk, e = (r->run[k][0] + r->run[k][1] + blk - 1) / blk * blk;
        if (e > n_ff)
            e = n_ff;
        if (n && out[n - 1][0] + out[n - 1][1] >= s) {
            out[n - 1][1] = (int32_t)(e - out[n - 1][0]);
        } else {
            out[n][0] = (int32_t)s;
            out[n][1] = (int32_t)(e - s);
            n++;
        }
    }
    return n;
}

int ffn_partial(struct pi_pool *pool, struct ffn_scratch *s, const struct pi_model *m, int layer, const float *xn,
                int32_t B, const struct ffn_runs *runs, float *y, uint64_t *bytes)
{
    const struct pi_layer *l = &m->layers[layer];
    const int64_t E = m->hp.n_embd, F = m->hp.n_ff;
    if (bytes)
        *bytes = 0;
    if (runs->n == 0) {
        memset(y, 0, (size_t)B * E * sizeof *y);
        return 0;
    }
    const int64_t need = 2 * (int64_t)B * F;
    if (s->act_cap < need) {
        float *p = realloc(s->act, (size_t)need * sizeof *p);
        if (!p)
            return pi_fail(PI_E_NOMEM, "ffn: out of memory");
        s->act = p;
        s->act_cap = need;
    }
    struct ffn_job j = { .m = m, .l = l, .runs = runs, .act = s->act, .up = s->act + (size_t)B * F, .y = y, .B = B };
    memset(j.act, 0, (size_t)B * F * sizeof *j.act);

    /* n in gate/up's vec_dot_type (gate and up share a type in every file we know; checked) */
    /* the down projection: ffn_down_t when present (AXPY path), else ffn_down */
    const struct pi_type_traits *gt = quant_traits(l->ffn_gate.type),
                                *dt = quant_traits(l->ffn_down_t.data ? l->ffn_down_t.type : l->ffn_down.type);
    if (l->ffn_up.type != l->ffn_gate.type)
        return pi_fail(PI_E_UNSUPPORTED, "ffn: layer %d has gate %s and up %s: mixed types are not supported", layer,
                       gt->name, quant_traits(l->ffn_up.type)->name);
    int rc;
    if (gt->vec_dot_type == PI_TYPE_F32) {
        j.xq = (const char *)xn;
        j.xq_stride = (size_t)E * sizeof(float);
    } else {
        j.xq_stride = quant_row_size(gt->vec_dot_type, E);
        if ((rc = reserve(&s->xq, j.xq_stride * (size_t)B)))
            return rc;
        for (int32_t t = 0; t < B; t++)
            quant_traits(gt->vec_dot_type)->from_float(xn + (size_t)t * E, (char *)s->xq.buf + j.xq_stride * (size_t)t, E);
        j.xq = s->xq.buf;
    }
    pool_run(pool, gate_up_worker, &j);

    if (l->ffn_down_t.data) {
        int64_t rows = 0;
        if ((rc = down_t_partial(pool, s, l, j.act, F, E, B, runs, y, &rows)))
            return rc;
        if (bytes)
            *bytes = (uint64_t)runs->n_neurons * (l->ffn_gate.row_bytes + l->ffn_up.row_bytes) +
                     (uint64_t)rows * l->ffn_down_t.row_bytes;
        return 0;
    }
    if (dt->vec_dot_type == PI_TYPE_F32) {
        j.aq = (const char *)j.act;
        j.aq_stride = (size_t)F * sizeof(float);
    } else {
        j.aq_stride = quant_row_size(dt->vec_dot_type, F);
        if ((rc = reserve(&s->aq, j.aq_stride * (size_t)B)))
            return rc;
        for (int32_t t = 0; t < B; t++)
            quant_traits(dt->vec_dot_type)->from_float(j.act + (size_t)t * F, (char *)s->aq.buf + j.aq_stride * (size_t)t, F);
        j.aq = s->aq.buf;
    }
    int64_t blk = dt->blck_size > quant_traits(dt->vec_dot_type)->blck_size ? dt->blck_size
                                                                             : quant_traits(dt->vec_dot_type)->blck_size;
    int32_t (*drun)[2] = malloc((size_t)runs->n * sizeof *drun);
    if (!drun)
        return pi_fail(PI_E_NOMEM, "ffn: out of memory");
    j.drun = drun;
    j.n_drun = widen_runs(runs, blk, F, drun);
    pool_run(pool, down_worker, &j);
    if (bytes) {
        uint64_t b = (uint64_t)runs->n_neurons * (l->ffn_gate.row_bytes + l->ffn_up.row_bytes);
        for (int32_t k = 0; k < j.n_drun; k++)
            b += (uint64_t)E * quant_row_size(l->ffn_down.type, drun[k][1]);
        *bytes = b;
    }
    free(drun);
    return 0;
}
