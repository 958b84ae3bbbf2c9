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
    const struct pi_type_traits *gt = quant_traits(l->ffn_gate.type), *dt = quant_traits(l->ffn_down.type);
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
