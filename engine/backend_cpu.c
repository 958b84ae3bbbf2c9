/* backend_cpu.c — gpud's CPU backend: the in-process engine's forward pass steps (forward.c) and
 * partial FFN (ffn_split.c) behind the backend table. */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "forward.h"
#include "pi_err.h"
#include "threadpool.h"

struct be {
    const struct pi_model *m;
    struct pi_ctx *ctx;      /* KV cache, x, and the thread pool */
    struct ffn_scratch ffn;
    float *xn;               /* (n_batch, n_embd) ffn_norm(x) of the layer in progress */
    float *pending;          /* (n_batch, n_embd) Σ of ffn_runs results */
    float *part;             /* (n_batch, n_embd) one ffn_runs result */
    int32_t n_batch;
};

static void cpu_close(struct be *b)
{
    if (!b)
        return;
    ffn_scratch_fini(&b->ffn);
    free(b->xn);
    free(b->pending);
    free(b->part);
    ctx_free(b->ctx);
    free(b);
}

static int cpu_open(struct be **out, const struct pi_model *m, const struct be_params *p)
{
    struct be *b = calloc(1, sizeof *b);
    if (!b)
        return pi_fail(PI_E_NOMEM, "cpu backend: out of memory");
    b->m = m;
    b->n_batch = p->n_batch;
    struct pi_ctx_params cp = { .n_ctx = p->n_ctx, .n_batch = p->n_batch, .n_threads = p->n_threads };
    int rc = ctx_new(&b->ctx, m, &cp);
    const size_t be = (size_t)p->n_batch * (size_t)m->hp.n_embd * sizeof(float);
    if (!rc && (!(b->xn = malloc(be)) || !(b->pending = malloc(be)) || !(b->part = malloc(be))))
        rc = pi_fail(PI_E_NOMEM, "cpu backend: out of memory");
    if (rc) {
        cpu_close(b);
        return rc;
    }
    *out = b;
    return 0;
}

static int32_t cpu_n_ctx(const struct be *b) { return ctx_n_ctx(b->ctx); }
static int cpu_embed(struct be *b, const int32_t *toks, int32_t B) { return fwd_embed(b->ctx, toks, B); }
static int cpu_attn(struct be *b, int layer, int32_t B, int32_t pos) { return fwd_attn(b->ctx, layer, B, pos); }

static int cpu_get_h(struct be *b, int32_t B, float *h)
{
    memcpy(h, fwd_x(b->ctx), (size_t)B * b->m->hp.n_embd * sizeof *h);
    return 0;
}

static int cpu_ffn_begin(struct be *b, int layer, int32_t B)
{
    const struct pi_hparams *hp = &b->m->hp;
    const int64_t E = hp->n_embd;
    const float *x = fwd_x(b->ctx);
    ops_rmsnorm_rows(b->xn, x, b->m->layers[layer].ffn_norm.data, B, E, hp->norm_eps);
    memset(b->pending, 0, (size_t)B * E * sizeof *b->pending);
    return 0;
}

static int cpu_ffn_runs(struct be *b, int layer, int32_t B, const struct ffn_runs *runs, uint64_t *bytes)
{
    const int64_t n = (int64_t)B * b->m->hp.n_embd;
    int rc = ffn_partial(ctx_pool(b->ctx), &b->ffn, b->m, layer, b->xn, B, runs, b->part, bytes);
    for (int64_t i = 0; !rc && i < n; i++)
        b->pending[i] += b->part[i];
    return rc;
}

static int cpu_ffn_end(struct be *b, int32_t B, const float *y_host)
{
    float *x = fwd_x(b->ctx);
    const int64_t n = (int64_t)B * b->m->hp.n_embd;
    for (int64_t i = 0; i < n; i++)
        x[i] += y_host ? b->pending[i] + y_host[i] : b->pending[i];
    return 0;
}

static int cpu_output(struct be *b, int32_t B, float *logits, bool all) { return fwd_output(b->ctx, B, logits, all); }
static void cpu_idle(struct be *b) { pool_park(ctx_pool(b->ctx)); }

const struct be_ops be_cpu_ops = {
    .name = "cpu",
    .open = cpu_open,
    .close = cpu_close,
    .n_ctx = cpu_n_ctx,
    .embed = cpu_embed,
    .attn = cpu_attn,
    .get_h = cpu_get_h,
    .ffn_begin = cpu_ffn_begin,
    .ffn_runs = cpu_ffn_runs,
    .ffn_end = cpu_ffn_end,
    .output = cpu_output,
    .idle = cpu_idle,
};

const struct be_ops *be_find(const char *name)
{
    if (!name || !strcmp(name, "cpu"))
        return &be_cpu_ops;
    return NULL;
}
