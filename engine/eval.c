/* eval.c — the one layer loop (eval.h), the local FFN step, and the in-process context. */
#include "eval.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ncache.h"
#include "pi_err.h"
#include "predictor.h"
#include "sampling.h" /* SAMP_BEST_MAX */
#include "threadpool.h"

#define DEFAULT_BATCH 64

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* the time since *t0 into phase ph, and *t0 moved to now */
static void phase_add(struct eval *e, enum eval_phase ph, uint64_t *t0)
{
    const uint64_t t = now_ns();
    e->phase_ns[ph] += t - *t0;
    *t0 = t;
}

int eval_init(struct eval *e, const struct pi_model *m, const struct be_ops *ops, struct be *be,
              const struct eval_params *p)
{
    const struct pi_hparams *hp = &m->hp;
    memset(e, 0, sizeof *e);
    e->m = m;
    e->ops = ops;
    e->be = be;
    e->sparse = p->sparse && pred_available(m);
    e->on_device = p->on_device;
    e->n_batch = p->n_batch;
    e->pool = p->pool ? p->pool : (ops == &be_cpu_ops ? be_cpu_pool(be) : NULL);
    const size_t B = (size_t)p->n_batch, E = (size_t)hp->n_embd, F = (size_t)hp->n_ff;
    e->n_host = calloc((size_t)hp->n_layer, sizeof *e->n_host);
    e->stats = calloc((size_t)hp->n_layer, sizeof *e->stats);
    e->h = malloc(B * E * sizeof(float));
    e->xn = malloc(B * E * sizeof(float));
    e->y = malloc(B * E * sizeof(float));
    e->mask = malloc(B * F);
    if (!e->n_host || !e->stats || !e->h || !e->xn || !e->y || !e->mask) {
        eval_fini(e);
        return pi_fail(PI_E_NOMEM, "eval: out of memory");
    }
    bool any_host = false;
    for (int32_t l = 0; p->on_device && l < hp->n_layer; l++) {
        for (size_t i = 0; i < F; i++)
            e->n_host[l] += p->on_device[(size_t)l * F + i] == 0;
        any_host |= e->n_host[l] > 0;
    }
    if (any_host && !e->pool) {
        eval_fini(e);
        return pi_fail(PI_E_INVAL, "eval: the placement leaves neurons to the host but no host pool was given");
    }
    const char *ws = getenv("PINFER_WHOLE_STEP");
    e->whole_ok = ops->step_top && !any_host && !(ws && strcmp(ws, "0") == 0);
    if (e->whole_ok && !(e->whole_cnt = calloc((size_t)hp->n_layer, sizeof *e->whole_cnt))) {
        eval_fini(e);
        return pi_fail(PI_E_NOMEM, "eval: out of memory");
    }
    return 0;
}

void eval_fini(struct eval *e)
{
    ops_scratch_fini(&e->pred);
    ffn_scratch_fini(&e->ffn);
    ffn_runs_fini(&e->runs);
    ffn_runs_fini(&e->pruns);
    free(e->all);
    free(e->mask2);
    free(e->n_host);
    free(e->whole_cnt);
    free(e->stats);
    free(e->h);
    free(e->xn);
    free(e->y);
    free(e->mask);
    memset(e, 0, sizeof *e);
}

void eval_count(struct eval *e, int layer, int32_t n, const struct be_ffn_count *c)
{
    struct eval_ffn_stats *st = &e->stats[layer];
    st->neurons += c->neurons;
    st->tokens += (uint64_t)n;
    st->bytes += c->bytes;
    st->predicted += c->predicted;
}

int eval_host_predict(struct eval *e, int layer, int32_t n, const float *h, uint8_t *mask)
{
    return pred_eval(e->pool, &e->pred, &e->m->layers[layer], h, n, e->m->hp.sparse_threshold, mask, NULL);
}

int eval_host_share(struct eval *e, int layer, int32_t n, const float *h, const uint8_t *mask, float *y,
                    uint64_t *bytes)
{
    const struct pi_hparams *hp = &e->m->hp;
    const int64_t F = hp->n_ff;
    int rc;
    if (!e->on_device) { /* the device holds everything: nothing is left to the host */
        memset(y, 0, (size_t)n * (size_t)hp->n_embd * sizeof *y);
        if (bytes)
            *bytes = 0;
        return 0;
    }
    ops_rmsnorm_rows(e->xn, h, e->m->layers[layer].ffn_norm.data, n, hp->n_embd, hp->norm_eps);
    if ((rc = ffn_runs_build(&e->runs, e->on_device + (size_t)layer * F, 0, mask, n, F)))
        return rc;
    const struct pi_layer_weights w = model_layer_weights(e->m, layer);
    return ffn_partial(e->pool, &e->ffn, e->m, &w, e->xn, n, &e->runs, mask, y, bytes);
}

int eval_set_ncache(struct eval *e, struct ncache *nc)
{
    if (nc && (!e->sparse || e->on_device || e->ops != &be_cpu_ops))
        return pi_fail(PI_E_UNSUPPORTED, "eval: the disk tier needs the sparse FFN (a PowerInfer file with predictors, "
                                         "not --dense) on the CPU backend holding every neuron");
    const size_t F = (size_t)e->m->hp.n_ff;
    if (nc && !e->all) {
        e->all = malloc(F);
        e->mask2 = malloc((size_t)e->n_batch * F);
        if (!e->all || !e->mask2)
            return pi_fail(PI_E_NOMEM, "eval: out of memory");
        memset(e->all, 1, F);
    }
    e->nc = nc;
    return 0;
}

/* The FFN step through the neuron cache: this layer's masks to the host, their neurons made
 * present (cache hits, reads a prefetch started, or reads now), the next layer's predicted neurons
 * prefetched from this layer's FFN input, then the backend's FFN over the cached rows. The masks
 * and the kernels are the in-RAM step's, and so are the bits. */
static int ffn_streamed(struct eval *e, int layer, const struct pi_batch *b)
{
    const struct be_ops *ops = e->ops;
    const int32_t n = b->n;
    const int64_t F = e->m->hp.n_ff;
    struct be_ffn_count c = { 0 };
    struct pi_layer_weights w;
    int rc;
    if ((rc = ops->predict(e->be, layer, n)) || (rc = ops->get_mask(e->be, n, e->mask)) ||
        (rc = ops->get_h(e->be, n, e->h)) || (rc = ffn_runs_build(&e->runs, e->all, 1, e->mask, n, F)) ||
        (rc = ncache_layer(e->nc, layer, &e->runs, &w)))
        return rc;
    if (layer + 1 < e->m->hp.n_layer &&
        ((rc = eval_host_predict(e, layer + 1, n, e->h, e->mask2)) ||
         (rc = ffn_runs_build(&e->pruns, e->all, 1, e->mask2, n, F)) || (rc = ncache_prefetch(e->nc, layer + 1, &e->pruns))))
        return rc;
    if ((rc = ops->ffn(e->be, &w, n, true, &c)))
        return rc;
    eval_count(e, layer, n, &c);
    return ops->ffn_add(e->be, layer, n, NULL);
}

int eval_ffn_local(struct eval *e, int layer, const struct pi_batch *b)
{
    if (e->nc)
        return ffn_streamed(e, layer, b);
    const struct be_ops *ops = e->ops;
    const int32_t n = b->n;
    const bool host = e->n_host[layer] > 0;
    struct be_ffn_count c = { 0 };
    bool have_h = false, have_mask = false;
    int rc;
    uint64_t t0 = now_ns();
    if (e->sparse) {
        if (ops->predict) {
            if ((rc = ops->predict(e->be, layer, n)))
                return rc;
        } else {
            if ((rc = ops->get_h(e->be, n, e->h)) || (rc = eval_host_predict(e, layer, n, e->h, e->mask)) ||
                (rc = ops->set_mask(e->be, n, e->mask)))
                return rc;
            have_h = have_mask = true;
        }
        if (host && !have_mask) {
            if ((rc = ops->get_mask(e->be, n, e->mask)))
                return rc;
            have_mask = true;
        }
        phase_add(e, EVAL_PREDICT, &t0);
    }
    if (host && !have_h && (rc = ops->get_h(e->be, n, e->h)))
        return rc;
    const struct pi_layer_weights w = model_layer_weights(e->m, layer);
    if ((rc = ops->ffn(e->be, &w, n, e->sparse, &c)))
        return rc;
    if (host) {
        uint64_t hb = 0;
        if ((rc = eval_host_share(e, layer, n, e->h, e->sparse ? e->mask : NULL, e->y, &hb)))
            return rc;
        c.bytes += hb;
        c.neurons += (uint64_t)e->runs.n_neurons;
    }
    eval_count(e, layer, n, &c);
    return ops->ffn_add(e->be, layer, n, host ? e->y : NULL);
}

static int eval_layers(struct eval *e, const struct pi_batch *b)
{
    const struct be_ops *ops = e->ops;
    if (b->n <= 0 || b->n > e->n_batch)
        return pi_fail(PI_E_INVAL, "eval: a step of %d tokens (1..%d)", b->n, e->n_batch);
    int rc = ops->embed(e->be, b);
    for (int il = 0; !rc && il < e->m->hp.n_layer; il++) {
        uint64_t t0 = now_ns();
        rc = ops->attn(e->be, il, b);
        phase_add(e, EVAL_ATTN, &t0);
        const uint64_t pred0 = e->phase_ns[EVAL_PREDICT];
        if (!rc)
            rc = e->ffn_fn ? e->ffn_fn(e->ffn_user, e, il, b) : eval_ffn_local(e, il, b);
        phase_add(e, EVAL_FFN, &t0);
        e->phase_ns[EVAL_FFN] -= e->phase_ns[EVAL_PREDICT] - pred0; /* the predictor's share, counted apart */
    }
    return rc;
}

int eval_batch(struct eval *e, const struct pi_batch *b, float *logits)
{
    int rc = eval_layers(e, b);
    uint64_t t0 = now_ns();
    if (!rc && logits && batch_n_out(b) > 0)
        rc = e->ops->output(e->be, b, logits);
    phase_add(e, EVAL_OUTPUT, &t0);
    if (!rc && e->nc)
        rc = ncache_step(e->nc, b->n);
    return rc;
}

/* The step as one request to the backend (step_top): 1 when it does not apply (the backend takes
 * decode steps: few tokens, each wanting its candidates). The layers' FFN step (eval_ffn_local, or
 * the pipeline's ffn_fn) would only have run the backend's ops: no layer leaves neurons to the host,
 * the masks come from the backend's predictor, and no disk tier. */
static int whole_step(struct eval *e, const struct pi_batch *b, int32_t k, int32_t *ids, float *vals)
{
    if (!e->whole_ok || e->nc || (e->sparse && !e->ops->predict))
        return 1;
    uint64_t t0 = now_ns();
    const int rc = e->ops->step_top(e->be, b, e->sparse, k, ids, vals, e->whole_cnt);
    if (rc)
        return rc;
    phase_add(e, EVAL_OUTPUT, &t0);
    for (int il = 0; il < e->m->hp.n_layer; il++)
        eval_count(e, il, b->n, &e->whole_cnt[il]);
    e->whole_steps++;
    return 0;
}

int eval_batch_top(struct eval *e, const struct pi_batch *b, int32_t k, int32_t *ids, float *vals)
{
    if (!e->ops->topk)
        return pi_fail(PI_E_UNSUPPORTED, "eval: backend %s computes no top-k candidates", e->ops->name);
    int rc = whole_step(e, b, k, ids, vals);
    if (rc <= 0)
        return rc;
    rc = eval_layers(e, b);
    uint64_t t0 = now_ns();
    if (!rc && batch_n_out(b) > 0)
        rc = e->ops->topk(e->be, b, k, ids, vals);
    phase_add(e, EVAL_OUTPUT, &t0);
    if (!rc && e->nc)
        rc = ncache_step(e->nc, b->n);
    return rc;
}

/* ---- the in-process context ---- */

struct pi_ctx {
    const struct pi_model *m;
    const struct be_ops *ops;
    struct be *be;
    struct pi_pool *host;   /* host threads beside a device backend (the CPU backend has its own) */
    struct eval ev;
    struct pi_batch_buf bb;
    int32_t n_ctx, n_batch;
    char backend_why[256]; /* why `auto` runs on the CPU ("" when it did not have to choose) */
};

int ctx_new(struct pi_ctx **out, const struct pi_model *m, const struct pi_ctx_params *p)
{
    struct pi_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return pi_fail(PI_E_NOMEM, "ctx: out of memory");
    c->m = m;
    c->n_ctx = p->n_ctx > 0 ? p->n_ctx : m->hp.n_ctx_train;
    c->n_batch = p->n_batch > 0 ? p->n_batch : DEFAULT_BATCH;
    const int nt = p->n_threads > 0 ? p->n_threads : 1;
    const struct be_params bp = { .n_ctx = c->n_ctx, .n_seq = p->n_seq, .n_batch = c->n_batch, .n_threads = nt };
    int rc = be_open_named(p->backend ? p->backend : "cpu", m, &bp, p->cache_type, &c->ops, &c->be, c->backend_why,
                           sizeof c->backend_why);
    if (!rc && c->ops != &be_cpu_ops)
        rc = pool_new(&c->host, nt);
    if (!rc) {
        const struct eval_params ep = { .n_batch = c->n_batch, .sparse = p->sparse, .pool = c->host };
        rc = eval_init(&c->ev, m, c->ops, c->be, &ep);
    }
    if (!rc)
        rc = batch_buf_init(&c->bb, c->n_batch);
    if (rc) {
        ctx_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void ctx_free(struct pi_ctx *c)
{
    if (!c)
        return;
    if (c->ev.m)
        eval_fini(&c->ev);
    batch_buf_fini(&c->bb);
    if (c->be)
        c->ops->close(c->be);
    pool_free(c->host);
    free(c);
}

const char *ctx_backend(const struct pi_ctx *c) { return c->ops->name; }
const char *ctx_backend_why(const struct pi_ctx *c) { return c->backend_why; }
int32_t ctx_n_ctx(const struct pi_ctx *c) { return c->n_ctx; }
bool ctx_is_sparse(const struct pi_ctx *c) { return c->ev.sparse; }
struct eval *ctx_eval_state(struct pi_ctx *c) { return &c->ev; }
void ctx_set_ffn_hook(struct pi_ctx *c, be_ffn_hook fn, void *user)
{
    if (c->ops == &be_cpu_ops)
        be_cpu_set_ffn_hook(c->be, fn, user);
}
int ctx_set_ncache(struct pi_ctx *c, struct ncache *nc) { return eval_set_ncache(&c->ev, nc); }
struct pi_pool *ctx_pool(struct pi_ctx *c) { return c->host ? c->host : be_cpu_pool(c->be); }
float *ctx_x(struct pi_ctx *c) { return c->ops == &be_cpu_ops ? be_cpu_x(c->be) : NULL; }

int ctx_ffn(struct pi_ctx *c, int layer, int32_t B)
{
    const struct pi_batch b = { .n = B };
    return eval_ffn_local(&c->ev, layer, &b);
}

void ctx_sparse_stats(const struct pi_ctx *c, int layer, uint64_t *neurons, uint64_t *tokens, uint64_t *bytes)
{
    const bool ok = layer >= 0 && layer < c->m->hp.n_layer;
    const struct eval_ffn_stats *st = ok ? &c->ev.stats[layer] : NULL;
    if (neurons)
        *neurons = st ? st->neurons : 0;
    if (tokens)
        *tokens = st ? st->tokens : 0;
    if (bytes)
        *bytes = st ? st->bytes : 0;
}

uint64_t ctx_sparse_predicted(const struct pi_ctx *c, int layer)
{
    return layer >= 0 && layer < c->m->hp.n_layer ? c->ev.stats[layer].predicted : 0;
}

void ctx_sparse_stats_reset(struct pi_ctx *c)
{
    memset(c->ev.stats, 0, (size_t)c->m->hp.n_layer * sizeof *c->ev.stats);
    memset(c->ev.phase_ns, 0, sizeof c->ev.phase_ns);
}

double ctx_phase_ms(const struct pi_ctx *c, int ph)
{
    return ph >= 0 && ph < EVAL_PHASES ? (double)c->ev.phase_ns[ph] / 1e6 : 0.0;
}

int ctx_eval_batch(struct pi_ctx *c, const struct pi_batch *b, float *logits) { return eval_batch(&c->ev, b, logits); }

/* ctx_eval's chunks; the last one's last token's k best when k > 0 (then logits is unused) */
static int ctx_eval_k(struct pi_ctx *c, const int32_t *tokens, int32_t n, int32_t pos, float *logits, bool all_logits,
                      int32_t k, int32_t *ids, float *vals)
{
    const int32_t V = c->m->hp.n_vocab;
    if (n <= 0)
        return pi_fail(PI_E_INVAL, "eval: no tokens");
    if (pos < 0 || (int64_t)pos + n > c->n_ctx)
        return pi_fail(PI_E_RANGE, "eval: positions %d..%d exceed the context of %d tokens", pos, pos + n - 1,
                       c->n_ctx);
    for (int32_t done = 0; done < n; done += c->n_batch) {
        const int32_t B = n - done < c->n_batch ? n - done : c->n_batch;
        const bool last = done + B == n;
        batch_buf_clear(&c->bb);
        for (int32_t i = 0; i < B; i++)
            batch_buf_add(&c->bb, tokens[done + i], pos + done + i, 0, all_logits || (last && i == B - 1));
        const struct pi_batch b = batch_view(&c->bb);
        float *out = all_logits ? logits + (size_t)done * V : last ? logits : NULL;
        int rc = last && k > 0 ? eval_batch_top(&c->ev, &b, k, ids, vals) : eval_batch(&c->ev, &b, k > 0 ? NULL : out);
        if (rc)
            return rc;
    }
    return 0;
}

int ctx_eval(struct pi_ctx *c, const int32_t *tokens, int32_t n, int32_t pos, float *logits, bool all_logits)
{
    return ctx_eval_k(c, tokens, n, pos, logits, all_logits, 0, NULL, NULL);
}

int ctx_eval_top(struct pi_ctx *c, const int32_t *tokens, int32_t n, int32_t pos, int32_t k, int32_t *ids,
                 float *vals)
{
    if (!c->ops->topk)
        return pi_fail(PI_E_UNSUPPORTED, "eval: backend %s computes no top-k candidates", c->ops->name);
    if (k < 1 || k > SAMP_BEST_MAX || k > c->m->hp.n_vocab)
        return pi_fail(PI_E_RANGE, "eval: top %d of %d logits (1..%d)", k, c->m->hp.n_vocab, SAMP_BEST_MAX);
    return ctx_eval_k(c, tokens, n, pos, NULL, false, k, ids, vals);
}
