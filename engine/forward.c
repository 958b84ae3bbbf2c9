/* forward.c — llama / qwen2 / bamboo forward pass on the CPU with a KV cache. */
#include "forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ffn_split.h"
#include "ops.h"
#include "pi_err.h"
#include "quant.h"
#include "predictor.h"
#include "threadpool.h"

#define DEFAULT_BATCH 64

struct pi_ctx {
    const struct pi_model *m;
    struct pi_pool *pool;
    struct ops_scratch scratch;
    int32_t n_ctx, n_batch;
    float *x;       /* (n_batch, n_embd) residual stream */
    float *xn;      /* (n_batch, n_embd) normed input of a sublayer */
    float *q;       /* (n_batch, n_head * head_dim) */
    float *k, *v;   /* (n_batch, n_head_kv * head_dim) */
    float *att;     /* (n_batch, n_head * head_dim) attention output before wo */
    float *proj;    /* (n_batch, n_embd) sublayer output */
    float *gate;    /* (n_batch, n_ff) */
    float *up;      /* (n_batch, n_ff) */
    float *scores;  /* (n_threads, n_ctx) attention weights per worker */
    float *k_cache; /* (n_layer, n_ctx, n_head_kv * head_dim) */
    float *v_cache; /* (n_layer, n_ctx, n_head_kv * head_dim) */
    fwd_ffn_hook hook;
    void *hook_user;
    int32_t hook_pos; /* position of the batch being evaluated, for the hook */
    /* FFN over a subset of neurons: PowerInfer layers (down_t) and the sparse mode */
    bool sparse;              /* predictors in use */
    struct ffn_scratch ffn;
    struct ffn_runs runs_all; /* one run: every neuron */
    struct ffn_runs runs;     /* sparse: the union of the batch's predicted masks */
    struct ops_scratch pred;  /* predictor intermediates */
    uint8_t *sel;             /* (n_ff) all ones: the selector for ffn_runs_build */
    uint8_t *mask;            /* (n_batch, n_ff) predicted activity, sparse mode */
    struct ffn_stats {
        uint64_t neurons, tokens, bytes, predicted;
    } *stats;                 /* (n_layer) */
};

void ctx_set_ffn_hook(struct pi_ctx *c, fwd_ffn_hook fn, void *user)
{
    c->hook = fn;
    c->hook_user = user;
}

int32_t ctx_n_ctx(const struct pi_ctx *c) { return c->n_ctx; }
bool ctx_is_sparse(const struct pi_ctx *c) { return c->sparse; }

void ctx_sparse_stats(const struct pi_ctx *c, int layer, uint64_t *neurons, uint64_t *tokens, uint64_t *bytes)
{
    const bool ok = layer >= 0 && layer < c->m->hp.n_layer;
    const struct ffn_stats *st = ok ? &c->stats[layer] : NULL;
    if (neurons)
        *neurons = st ? st->neurons : 0;
    if (tokens)
        *tokens = st ? st->tokens : 0;
    if (bytes)
        *bytes = st ? st->bytes : 0;
}

uint64_t ctx_sparse_predicted(const struct pi_ctx *c, int layer)
{
    return layer >= 0 && layer < c->m->hp.n_layer ? c->stats[layer].predicted : 0;
}

void ctx_sparse_stats_reset(struct pi_ctx *c)
{
    memset(c->stats, 0, (size_t)c->m->hp.n_layer * sizeof *c->stats);
}
float *fwd_x(struct pi_ctx *c) { return c->x; }
struct pi_pool *ctx_pool(struct pi_ctx *c) { return c->pool; }

int ctx_new(struct pi_ctx **out, const struct pi_model *m, const struct pi_ctx_params *p)
{
    const struct pi_hparams *hp = &m->hp;
    struct pi_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return pi_fail(PI_E_NOMEM, "ctx: out of memory");
    c->m = m;
    c->n_ctx = p->n_ctx > 0 ? p->n_ctx : hp->n_ctx_train;
    c->n_batch = p->n_batch > 0 ? p->n_batch : DEFAULT_BATCH;
    const int nt = p->n_threads > 0 ? p->n_threads : 1;
    int rc = pool_new(&c->pool, nt);
    if (rc)
        goto fail;
    const size_t B = (size_t)c->n_batch, E = (size_t)hp->n_embd, Q = (size_t)hp->n_head * hp->head_dim,
                 KV = (size_t)hp->n_head_kv * hp->head_dim, F = (size_t)hp->n_ff;
    const size_t kv_elems = (size_t)hp->n_layer * (size_t)c->n_ctx * KV;
    c->x = malloc(B * E * sizeof(float));
    c->xn = malloc(B * E * sizeof(float));
    c->q = malloc(B * Q * sizeof(float));
    c->k = malloc(B * KV * sizeof(float));
    c->v = malloc(B * KV * sizeof(float));
    c->att = malloc(B * Q * sizeof(float));
    c->proj = malloc(B * E * sizeof(float));
    c->gate = malloc(B * F * sizeof(float));
    c->up = malloc(B * F * sizeof(float));
    c->scores = malloc((size_t)nt * (size_t)c->n_ctx * sizeof(float));
    c->k_cache = calloc(kv_elems, sizeof(float));
    c->v_cache = calloc(kv_elems, sizeof(float));
    c->sparse = p->sparse && pred_available(m);
    c->sel = malloc(F);
    c->mask = c->sparse ? malloc(B * F) : NULL;
    c->stats = calloc((size_t)hp->n_layer, sizeof *c->stats);
    if (!c->x || !c->xn || !c->q || !c->k || !c->v || !c->att || !c->proj || !c->gate || !c->up || !c->scores ||
        !c->k_cache || !c->v_cache || !c->sel || (c->sparse && !c->mask) || !c->stats) {
        rc = pi_fail(PI_E_NOMEM, "ctx: cannot allocate buffers for n_ctx %d (KV cache %.1f MiB)", c->n_ctx,
                     2.0 * (double)kv_elems * sizeof(float) / (1 << 20));
        goto fail;
    }
    memset(c->sel, 1, F);
    if ((rc = ffn_runs_build(&c->runs_all, c->sel, 1, NULL, 0, (int64_t)F)))
        goto fail;
    *out = c;
    return 0;
fail:
    ctx_free(c);
    return rc;
}

void ctx_free(struct pi_ctx *c)
{
    if (!c)
        return;
    pool_free(c->pool);
    ops_scratch_fini(&c->scratch);
    free(c->x);
    free(c->xn);
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->att);
    free(c->proj);
    free(c->gate);
    free(c->up);
    free(c->scores);
    free(c->k_cache);
    free(c->v_cache);
    ffn_scratch_fini(&c->ffn);
    ffn_runs_fini(&c->runs_all);
    ffn_runs_fini(&c->runs);
    ops_scratch_fini(&c->pred);
    free(c->sel);
    free(c->mask);
    free(c->stats);
    free(c);
}

int fwd_embed(struct pi_ctx *c, const int32_t *tokens, int32_t B)
{
    const struct pi_model *m = c->m;
    for (int32_t b = 0; b < B; b++) {
        if (tokens[b] < 0 || tokens[b] >= m->hp.n_vocab)
            return pi_fail(PI_E_RANGE, "forward: token id %d out of range [0, %d)", tokens[b], m->hp.n_vocab);
        ops_get_row(&m->token_embd, tokens[b], c->x + (size_t)b * m->hp.n_embd);
    }
    return 0;
}

static void add_bias(float *y, const struct pi_tensor *bias, int32_t B, int64_t n)
{
    if (!bias->data)
        return;
    const float *bv = bias->data;
    for (int32_t b = 0; b < B; b++)
        for (int64_t i = 0; i < n; i++)
            y[(size_t)b * n + i] += bv[i];
}

struct attn_job {
    struct pi_ctx *c;
    int layer;
    int32_t B, pos;
};

/* att[b, h] = softmax(q[b,h] · K[0..pos+b] / sqrt(d)) · V[0..pos+b], kv head = h / (n_head / n_head_kv) */
static void attn_worker(void *arg, int ith, int nth)
{
    const struct attn_job *j = arg;
    struct pi_ctx *c = j->c;
    const struct pi_hparams *hp = &c->m->hp;
    const int d = hp->head_dim, H = hp->n_head, group = hp->n_head / hp->n_head_kv;
    const size_t KV = (size_t)hp->n_head_kv * d, Q = (size_t)H * d;
    const float *kc = c->k_cache + (size_t)j->layer * c->n_ctx * KV;
    const float *vc = c->v_cache + (size_t)j->layer * c->n_ctx * KV;
    float *sc = c->scores + (size_t)ith * c->n_ctx;
    const float scale = 1.0f / sqrtf((float)d);
    /* f32 kernels of the type table (AVX2 when available): the dot products over positions and
     * the weighted sum of V rows are most of decode time at long contexts */
    const struct pi_type_traits *f32 = quant_traits(PI_TYPE_F32);
    for (int task = ith; task < j->B * H; task += nth) {
        const int b = task / H, h = task % H, kvh = h / group;
        const int32_t n_kv = j->pos + b + 1; /* causal: this token sees itself and all before */
        const float *q = c->q + (size_t)b * Q + (size_t)h * d;
        for (int32_t t = 0; t < n_kv; t++) {
            float s;
            f32->vec_dot(d, &s, kc + (size_t)t * KV + (size_t)kvh * d, q);
            sc[t] = s * scale;
        }
        ops_softmax(sc, n_kv);
        float *o = c->att + (size_t)b * Q + (size_t)h * d;
        memset(o, 0, (size_t)d * sizeof(float));
        for (int32_t t = 0; t < n_kv; t++)
            f32->axpy(d, o, sc[t], vc + (size_t)t * KV + (size_t)kvh * d);
    }
}

int fwd_attn(struct pi_ctx *c, int layer, int32_t B, int32_t pos)
{
    const struct pi_hparams *hp = &c->m->hp;
    const struct pi_layer *l = &c->m->layers[layer];
    const int64_t E = hp->n_embd, Q = (int64_t)hp->n_head * hp->head_dim, KV = (int64_t)hp->n_head_kv * hp->head_dim;
    int rc;
    ops_rmsnorm_rows(c->xn, c->x, l->attn_norm.data, B, E, hp->norm_eps);
    if ((rc = ops_matmul(c->pool, &c->scratch, &l->wq, c->xn, c->q, B)) ||
        (rc = ops_matmul(c->pool, &c->scratch, &l->wk, c->xn, c->k, B)) ||
        (rc = ops_matmul(c->pool, &c->scratch, &l->wv, c->xn, c->v, B)))
        return rc;
    add_bias(c->q, &l->bq, B, Q);
    add_bias(c->k, &l->bk, B, KV);
    add_bias(c->v, &l->bv, B, KV);
    float *kc = c->k_cache + (size_t)layer * c->n_ctx * KV;
    float *vc = c->v_cache + (size_t)layer * c->n_ctx * KV;
    for (int32_t b = 0; b < B; b++) {
        ops_rope(c->q + b * Q, hp->n_head, hp->head_dim, hp->rope_dim, pos + b, hp->rope_theta, hp->rope_mode);
        ops_rope(c->k + b * KV, hp->n_head_kv, hp->head_dim, hp->rope_dim, pos + b, hp->rope_theta, hp->rope_mode);
        memcpy(kc + (size_t)(pos + b) * KV, c->k + b * KV, (size_t)KV * sizeof(float));
        memcpy(vc + (size_t)(pos + b) * KV, c->v + b * KV, (size_t)KV * sizeof(float));
    }
    struct attn_job j = { .c = c, .layer = layer, .B = B, .pos = pos };
    pool_run(c->pool, attn_worker, &j);
    if ((rc = ops_matmul(c->pool, &c->scratch, &l->wo, c->att, c->proj, B)))
        return rc;
    for (int64_t i = 0; i < (int64_t)B * E; i++)
        c->x[i] += c->proj[i];
    return 0;
}

static uint64_t tensor_bytes(const struct pi_tensor *t)
{
    return t->data ? (uint64_t)t->row_bytes * (uint64_t)t->ne[1] : 0;
}

int fwd_ffn(struct pi_ctx *c, int layer, int32_t B)
{
    const struct pi_hparams *hp = &c->m->hp;
    const struct pi_layer *l = &c->m->layers[layer];
    const int64_t E = hp->n_embd, F = hp->n_ff;
    struct ffn_stats *st = &c->stats[layer];
    uint64_t bytes = 0;
    int rc;
    if (c->sparse) {
        /* the predictor reads the FFN input before ffn_norm */
        int64_t on = 0;
        if ((rc = pred_eval(c->pool, &c->pred, l, c->x, B, hp->sparse_threshold, c->mask, &on)) ||
            (rc = ffn_runs_build(&c->runs, c->sel, 1, c->mask, B, F)))
            return rc;
        st->predicted += (uint64_t)on;
    }
    ops_rmsnorm_rows(c->xn, c->x, l->ffn_norm.data, B, E, hp->norm_eps);
    if (!c->sparse && l->ffn_down.data) {
        /* dense: three GEMMs */
        if ((rc = ops_matmul(c->pool, &c->scratch, &l->ffn_gate, c->xn, c->gate, B)) ||
            (rc = ops_matmul(c->pool, &c->scratch, &l->ffn_up, c->xn, c->up, B)))
            return rc;
        for (int64_t i = 0; i < (int64_t)B * F; i++)
            c->gate[i] = model_glu(hp->act, c->gate[i], c->up[i]);
        if (c->hook)
            c->hook(c->hook_user, layer, B, c->hook_pos, c->x, c->gate);
        if ((rc = ops_matmul(c->pool, &c->scratch, &l->ffn_down, c->gate, c->proj, B)))
            return rc;
        bytes = tensor_bytes(&l->ffn_gate) + tensor_bytes(&l->ffn_up) + tensor_bytes(&l->ffn_down);
        st->neurons += (uint64_t)F;
    } else {
        /* sparse, or a PowerInfer layer without ffn_down: the neurons of runs through down_t */
        const struct ffn_runs *runs = c->sparse ? &c->runs : &c->runs_all;
        if ((rc = ffn_partial(c->pool, &c->ffn, c->m, layer, c->xn, B, runs, c->proj, &bytes)))
            return rc;
        if (!c->sparse && c->hook)
            c->hook(c->hook_user, layer, B, c->hook_pos, c->x, c->ffn.act);
        st->neurons += (uint64_t)runs->n_neurons;
    }
    st->tokens += (uint64_t)B;
    st->bytes += bytes;
    for (int64_t i = 0; i < (int64_t)B * E; i++)
        c->x[i] += c->proj[i];
    return 0;
}

int fwd_output(struct pi_ctx *c, int32_t B, float *logits, bool all)
{
    const struct pi_model *m = c->m;
    const int64_t E = m->hp.n_embd;
    const int32_t first = all ? 0 : B - 1, n = B - first;
    for (int32_t b = first; b < B; b++)
        ops_rmsnorm(c->xn + (b - first) * E, c->x + b * E, m->output_norm.data, E, m->hp.norm_eps);
    return ops_matmul(c->pool, &c->scratch, &m->output, c->xn, logits, n);
}

int ctx_eval(struct pi_ctx *c, const int32_t *tokens, int32_t n, int32_t pos, float *logits, bool all_logits)
{
    const struct pi_hparams *hp = &c->m->hp;
    if (n <= 0)
        return pi_fail(PI_E_INVAL, "eval: no tokens");
    if (pos < 0 || (int64_t)pos + n > c->n_ctx)
        return pi_fail(PI_E_RANGE, "eval: positions %d..%d exceed the context of %d tokens", pos, pos + n - 1,
                       c->n_ctx);
    for (int32_t done = 0; done < n; done += c->n_batch) {
        const int32_t B = n - done < c->n_batch ? n - done : c->n_batch;
        const bool last = done + B == n;
        c->hook_pos = pos + done;
        int rc = fwd_embed(c, tokens + done, B);
        for (int il = 0; !rc && il < hp->n_layer; il++) {
            rc = fwd_attn(c, il, B, pos + done);
            if (!rc)
                rc = fwd_ffn(c, il, B);
        }
        if (!rc && all_logits)
            rc = fwd_output(c, B, logits + (size_t)done * hp->n_vocab, true);
        else if (!rc && last && logits)
            rc = fwd_output(c, B, logits, false);
        if (rc)
            return rc;
    }
    return 0;
}
