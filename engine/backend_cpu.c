/* backend_cpu.c — the CPU backend: llama / qwen2 / bamboo layer steps over a KV cache shared by
 * n_seq sequences, on the host's thread pool (backend.h says what each op does).
 *
 * KV cache: (n_layer, n_seq, n_ctx, n_head_kv · head_dim), f32 or f16 (--cache-type: f16 halves it;
 * the dot products and V sums read it through the type table's kernels); sequence s's cell p holds its token
 * at position p, so a token attends to its sequence's cells 0..pos in position order whatever else
 * is in the batch. The FFN: three GEMMs when this backend holds every neuron of a layer that has
 * ffn_down and runs dense; otherwise ffn_partial (ffn_split.c) over the neurons it holds (sparse:
 * the union of the batch's masks, each token restricted to its own mask). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "ffn_split.h"
#include "ops.h"
#include "pi_err.h"
#include "predictor.h"
#include "quant.h"
#include "sampling.h"
#include "threadpool.h"

struct be {
    const struct pi_model *m;
    struct pi_pool *pool;
    struct ops_scratch scratch;
    float *top_logits; /* topk's rows of logits (top_cap floats), grown on first use */
    size_t top_cap;
    int32_t n_ctx, n_seq, n_batch;
    float *x;       /* (n_batch, n_embd) residual stream */
    float *xn;      /* (n_batch, n_embd) normed input of a sublayer */
    float *q;       /* (n_batch, n_head * head_dim) */
    float *k, *v;   /* (n_batch, n_head_kv * head_dim) */
    float *att;     /* (n_batch, n_head * head_dim) attention output before wo */
    float *proj;    /* (n_batch, n_embd) sublayer output */
    float *gate;    /* (n_batch, n_ff) */
    float *up;      /* (n_batch, n_ff) */
    float *scores;  /* (n_threads, n_ctx) attention weights per worker */
    char *k_cache;  /* (n_layer, n_seq, n_ctx, n_head_kv * head_dim) of cache_type */
    char *v_cache;
    uint32_t cache_type; /* PI_TYPE_F32 or PI_TYPE_F16 */
    size_t cell_bytes;   /* one cell's K (or V) row */
    uint8_t *on_dev;            /* (n_layer, n_ff) placement */
    bool *all_on_dev;           /* (n_layer) every neuron of the layer is held */
    struct ffn_runs *held;      /* (n_layer) runs of the held neurons (dense FFN over them) */
    struct ffn_runs runs;       /* sparse: held ∧ the batch's union mask */
    struct ffn_scratch ffn;
    struct ops_scratch pred;    /* predictor intermediates */
    uint8_t *mask;              /* (n_batch, n_ff) predicted activity */
    float *ydev;                /* (n_batch, n_embd) this backend's FFN share */
    be_ffn_hook hook;
    void *hook_user;
    int32_t hook_pos;           /* position of the batch's first token, for the hook */
    bool sparse_seen;           /* the last FFN ran sparse: the predictor follows the attention */
};

void be_cpu_set_ffn_hook(struct be *b, be_ffn_hook fn, void *user)
{
    b->hook = fn;
    b->hook_user = user;
}

struct pi_pool *be_cpu_pool(struct be *b) { return b->pool; }
float *be_cpu_x(struct be *b) { return b->x; }

static void cpu_close(struct be *b)
{
    if (!b)
        return;
    pool_free(b->pool);
    ops_scratch_fini(&b->scratch);
    ops_scratch_fini(&b->pred);
    ffn_scratch_fini(&b->ffn);
    ffn_runs_fini(&b->runs);
    if (b->held)
        for (int l = 0; l < b->m->hp.n_layer; l++)
            ffn_runs_fini(&b->held[l]);
    free(b->held);
    free(b->all_on_dev);
    free(b->on_dev);
    free(b->x), free(b->xn), free(b->q), free(b->k), free(b->v), free(b->att), free(b->proj);
    free(b->gate), free(b->up), free(b->scores), free(b->k_cache), free(b->v_cache);
    free(b->mask), free(b->ydev), free(b->top_logits);
    free(b);
}

static size_t kv_row(const struct pi_hparams *hp) { return (size_t)hp->n_head_kv * hp->head_dim; }

static int cpu_open(struct be **out, const struct pi_model *m, const struct be_params *p)
{
    const struct pi_hparams *hp = &m->hp;
    if (p->n_ctx <= 0 || p->n_batch <= 0)
        return pi_fail(PI_E_INVAL, "cpu backend: n_ctx %d, n_batch %d", p->n_ctx, p->n_batch);
    if (p->cache_type != BE_CACHE_F32 && p->cache_type != BE_CACHE_F16)
        return pi_fail(PI_E_UNSUPPORTED, "cpu backend: KV cache type %d (f32 or f16)", (int)p->cache_type);
    struct be *b = calloc(1, sizeof *b);
    if (!b)
        return pi_fail(PI_E_NOMEM, "cpu backend: out of memory");
    b->m = m;
    b->n_ctx = p->n_ctx;
    b->n_seq = p->n_seq > 0 ? p->n_seq : 1;
    b->n_batch = p->n_batch;
    const int nt = p->n_threads > 0 ? p->n_threads : 1;
    int rc = pool_new(&b->pool, nt);
    if (rc)
        goto fail;
    const size_t B = (size_t)b->n_batch, E = (size_t)hp->n_embd, Q = (size_t)hp->n_head * hp->head_dim,
                 KV = kv_row(hp), F = (size_t)hp->n_ff, L = (size_t)hp->n_layer;
    const size_t kv_elems = L * (size_t)b->n_seq * (size_t)b->n_ctx * KV;
    b->x = malloc(B * E * sizeof(float));
    b->xn = malloc(B * E * sizeof(float));
    b->q = malloc(B * Q * sizeof(float));
    b->k = malloc(B * KV * sizeof(float));
    b->v = malloc(B * KV * sizeof(float));
    b->att = malloc(B * Q * sizeof(float));
    b->proj = malloc(B * E * sizeof(float));
    b->gate = malloc(B * F * sizeof(float));
    b->up = malloc(B * F * sizeof(float));
    b->scores = malloc((size_t)nt * (size_t)b->n_ctx * sizeof(float));
    b->cache_type = p->cache_type == BE_CACHE_F16 ? PI_TYPE_F16 : PI_TYPE_F32;
    b->cell_bytes = quant_row_size(b->cache_type, (int64_t)KV);
    b->k_cache = calloc(kv_elems / KV, b->cell_bytes);
    b->v_cache = calloc(kv_elems / KV, b->cell_bytes);
    b->mask = calloc(B * F, 1);
    b->ydev = malloc(B * E * sizeof(float));
    b->on_dev = malloc(L * F);
    b->all_on_dev = calloc(L, sizeof *b->all_on_dev);
    b->held = calloc(L, sizeof *b->held);
    if (!b->x || !b->xn || !b->q || !b->k || !b->v || !b->att || !b->proj || !b->gate || !b->up || !b->scores ||
        !b->k_cache || !b->v_cache || !b->mask || !b->ydev || !b->on_dev || !b->all_on_dev || !b->held) {
        rc = pi_fail(PI_E_NOMEM, "cpu backend: cannot allocate buffers for %d x %d cells (KV cache %.1f MiB)",
                     b->n_seq, b->n_ctx, 2.0 * (double)(kv_elems / KV) * (double)b->cell_bytes / (1 << 20));
        goto fail;
    }
    if (p->on_device)
        memcpy(b->on_dev, p->on_device, L * F);
    else
        memset(b->on_dev, 1, L * F);
    for (size_t l = 0; l < L; l++) {
        const uint8_t *sel = b->on_dev + l * F;
        b->all_on_dev[l] = memchr(sel, 0, F) == NULL;
        if ((rc = ffn_runs_build(&b->held[l], sel, 1, NULL, 0, (int64_t)F)))
            goto fail;
    }
    *out = b;
    return 0;
fail:
    cpu_close(b);
    return rc;
}

static void cpu_mem(const struct be *b, struct be_mem *o)
{
    const struct pi_hparams *hp = &b->m->hp;
    const uint64_t B = (uint64_t)b->n_batch, E = (uint64_t)hp->n_embd, F = (uint64_t)hp->n_ff,
                   Q = (uint64_t)hp->n_head * hp->head_dim, KV = kv_row(hp);
    o->weights = 0; /* read in place from the model's mapping */
    o->kv = 2 * (uint64_t)hp->n_layer * (uint64_t)b->n_seq * (uint64_t)b->n_ctx * b->cell_bytes;
    (void)KV;
    o->scratch = (B * (4 * E + 2 * Q + 2 * KV + 2 * F) + (uint64_t)pool_size(b->pool) * (uint64_t)b->n_ctx) *
                     sizeof(float) +
                 B * F + (uint64_t)hp->n_layer * F;
}

static int32_t cpu_n_ctx(const struct be *b) { return b->n_ctx; }
static int32_t cpu_n_seq(const struct be *b) { return b->n_seq; }

static int check_batch(const struct be *b, const struct pi_batch *bt)
{
    if (bt->n <= 0 || bt->n > b->n_batch)
        return pi_fail(PI_E_RANGE, "cpu backend: batch of %d tokens (1..%d)", bt->n, b->n_batch);
    for (int32_t i = 0; i < bt->n; i++) {
        if (bt->seq[i] < 0 || bt->seq[i] >= b->n_seq)
            return pi_fail(PI_E_RANGE, "cpu backend: sequence %d out of range [0, %d)", bt->seq[i], b->n_seq);
        if (bt->pos[i] < 0 || bt->pos[i] >= b->n_ctx)
            return pi_fail(PI_E_RANGE, "cpu backend: position %d exceeds the context of %d tokens", bt->pos[i],
                           b->n_ctx);
    }
    return 0;
}

static int cpu_embed(struct be *b, const struct pi_batch *bt)
{
    const struct pi_model *m = b->m;
    int rc = check_batch(b, bt);
    if (rc)
        return rc;
    for (int32_t i = 0; i < bt->n; i++) {
        if (bt->tok[i] < 0 || bt->tok[i] >= m->hp.n_vocab)
            return pi_fail(PI_E_RANGE, "forward: token id %d out of range [0, %d)", bt->tok[i], m->hp.n_vocab);
        ops_get_row(&m->token_embd, bt->tok[i], b->x + (size_t)i * m->hp.n_embd);
    }
    b->hook_pos = bt->pos[0];
    return 0;
}

static void add_bias(float *y, const struct pi_tensor *bias, int32_t B, int64_t n)
{
    if (!bias->data)
        return;
    const float *bv = bias->data;
    for (int32_t t = 0; t < B; t++)
        for (int64_t i = 0; i < n; i++)
            y[(size_t)t * n + i] += bv[i];
}

struct attn_job {
    struct be *b;
    int layer;
    const struct pi_batch *bt;
};

static char *cache_cell(const struct be *b, char *cache, int layer, int32_t seq, int32_t pos)
{
    return cache + (((size_t)layer * (size_t)b->n_seq + (size_t)seq) * (size_t)b->n_ctx + (size_t)pos) * b->cell_bytes;
}

/* att[i, h] = softmax(q[i,h] · K[seq_i][0..pos_i] / sqrt(d)) · V[seq_i][0..pos_i], kv head = h / group */
static void attn_worker(void *arg, int ith, int nth)
{
    const struct attn_job *j = arg;
    struct be *b = j->b;
    const struct pi_hparams *hp = &b->m->hp;
    const int d = hp->head_dim, H = hp->n_head, group = hp->n_head / hp->n_head_kv;
    const size_t KV = kv_row(hp), Q = (size_t)H * d;
    float *sc = b->scores + (size_t)ith * b->n_ctx;
    const float scale = 1.0f / sqrtf((float)d);
    /* f32 kernels of the type table (AVX2 when available): the dot products over positions and
     * the weighted sum of V rows are most of decode time at long contexts */
    /* (an f16 cache dots f16 rows with the f32 query: F16's vec_dot_type is F32) */
    const struct pi_type_traits *ct = quant_traits(b->cache_type);
    const size_t head_off = quant_row_size(b->cache_type, d), cell = b->cell_bytes;
    (void)KV;
    for (int task = ith; task < j->bt->n * H; task += nth) {
        const int i = task / H, h = task % H, kvh = h / group;
        const int32_t n_kv = j->bt->pos[i] + 1; /* causal: this token sees itself and all before */
        const char *kc = cache_cell(b, b->k_cache, j->layer, j->bt->seq[i], 0) + (size_t)kvh * head_off;
        const char *vc = cache_cell(b, b->v_cache, j->layer, j->bt->seq[i], 0) + (size_t)kvh * head_off;
        const float *q = b->q + (size_t)i * Q + (size_t)h * d;
        for (int32_t t = 0; t < n_kv; t++) {
            float s;
            ct->vec_dot(d, &s, kc + (size_t)t * cell, q);
            sc[t] = s * scale;
        }
        ops_softmax(sc, n_kv);
        float *o = b->att + (size_t)i * Q + (size_t)h * d;
        memset(o, 0, (size_t)d * sizeof(float));
        for (int32_t t = 0; t < n_kv; t++)
            ct->axpy(d, o, sc[t], vc + (size_t)t * cell);
    }
}

static int cpu_attn(struct be *b, int layer, const struct pi_batch *bt)
{
    const struct pi_hparams *hp = &b->m->hp;
    const struct pi_layer *l = &b->m->layers[layer];
    const int32_t B = bt->n;
    const int64_t E = hp->n_embd, Q = (int64_t)hp->n_head * hp->head_dim, KV = (int64_t)kv_row(hp);
    int rc;
    ops_rmsnorm_rows(b->xn, b->x, l->attn_norm.data, B, E, hp->norm_eps);
    const struct pi_tensor *qkv[3] = { &l->wq, &l->wk, &l->wv }, *wo = &l->wo;
    float *const qkv_out[3] = { b->q, b->k, b->v };
    /* each job's hints name the next matrix (threadpool.h, pool_prefetch_set): wo after q/k/v */
    ops_matmul_prefetch(b->pool, &wo, 1);
    if ((rc = ops_matmul_n(b->pool, &b->scratch, qkv, qkv_out, 3, b->xn, B)))
        return rc;
    add_bias(b->q, &l->bq, B, Q);
    add_bias(b->k, &l->bk, B, KV);
    add_bias(b->v, &l->bv, B, KV);
    /* every token's K/V first: a token attends to the earlier tokens of its batch too */
    for (int32_t i = 0; i < B; i++) {
        ops_rope(b->q + i * Q, hp->n_head, hp->head_dim, hp->rope_dim, bt->pos[i], hp->rope_theta, hp->rope_mode);
        ops_rope(b->k + i * KV, hp->n_head_kv, hp->head_dim, hp->rope_dim, bt->pos[i], hp->rope_theta,
                 hp->rope_mode);
        const struct pi_type_traits *ct = quant_traits(b->cache_type);
        ct->from_float(b->k + i * KV, cache_cell(b, b->k_cache, layer, bt->seq[i], bt->pos[i]), KV);
        ct->from_float(b->v + i * KV, cache_cell(b, b->v_cache, layer, bt->seq[i], bt->pos[i]), KV);
    }
    struct attn_job j = { .b = b, .layer = layer, .bt = bt };
    ops_matmul_prefetch(b->pool, &wo, 1); /* still wo: the attention job is short */
    /* slices = threads: each has its own row of scores */
    pool_run_home(b->pool, attn_worker, &j, pool_size(b->pool));
    /* after wo: the predictor's fc1 (sparse), or gate/up (dense, every neuron here) */
    if (b->sparse_seen)
        pred_prefetch(b->pool, l);
    else if (l->ffn_down.data && !l->ffn_down_t.data && b->all_on_dev[layer]) {
        const struct pi_tensor *gu[2] = { &l->ffn_gate, &l->ffn_up };
        ops_matmul_prefetch(b->pool, gu, 2);
    }
    if ((rc = ops_matmul(b->pool, &b->scratch, &l->wo, b->att, b->proj, B)))
        return rc;
    for (int64_t i = 0; i < (int64_t)B * E; i++)
        b->x[i] += b->proj[i];
    return 0;
}

static int cpu_predict(struct be *b, int layer, int32_t n)
{
    return pred_eval(b->pool, &b->pred, &b->m->layers[layer], b->x, n, b->m->hp.sparse_threshold, b->mask, NULL);
}

static int cpu_set_mask(struct be *b, int32_t n, const uint8_t *mask)
{
    memcpy(b->mask, mask, (size_t)n * (size_t)b->m->hp.n_ff);
    return 0;
}

static int cpu_get_mask(struct be *b, int32_t n, uint8_t *mask)
{
    memcpy(mask, b->mask, (size_t)n * (size_t)b->m->hp.n_ff);
    return 0;
}

static int cpu_get_h(struct be *b, int32_t n, float *h)
{
    memcpy(h, b->x, (size_t)n * b->m->hp.n_embd * sizeof *h);
    return 0;
}

static uint64_t tensor_bytes(const struct pi_tensor *t)
{
    return t->data ? (uint64_t)t->row_bytes * (uint64_t)t->ne[1] : 0;
}

static int cpu_ffn(struct be *b, const struct pi_layer_weights *w, int32_t B, bool sparse, struct be_ffn_count *cnt)
{
    const struct pi_hparams *hp = &b->m->hp;
    const struct pi_layer *l = w->l;
    const int layer = w->layer;
    const int64_t E = hp->n_embd, F = hp->n_ff;
    uint64_t bytes = 0;
    int rc;
    b->sparse_seen = sparse;
    /* what the pool runs after this layer's FFN: the next layer's q/k/v, or the output matrix */
    const struct pi_tensor *next[3] = { &b->m->output };
    int n_next = 1;
    if (layer + 1 < hp->n_layer) {
        const struct pi_layer *nl = &b->m->layers[layer + 1];
        next[0] = &nl->wq, next[1] = &nl->wk, next[2] = &nl->wv;
        n_next = 3;
    }
    ops_rmsnorm_rows(b->xn, b->x, l->ffn_norm.data, B, E, hp->norm_eps);
    if (!sparse && !w->slot && l->ffn_down.data && !l->ffn_down_t.data && b->all_on_dev[layer]) {
        /* dense, every neuron here: three GEMMs */
        const struct pi_tensor *gu[2] = { &l->ffn_gate, &l->ffn_up };
        float *const gu_out[2] = { b->gate, b->up };
        const struct pi_tensor *down = &l->ffn_down;
        ops_matmul_prefetch(b->pool, &down, 1);
        if ((rc = ops_matmul_n(b->pool, &b->scratch, gu, gu_out, 2, b->xn, B)))
            return rc;
        for (int64_t i = 0; i < (int64_t)B * F; i++)
            b->gate[i] = model_glu(hp->act, b->gate[i], b->up[i]);
        if (b->hook)
            b->hook(b->hook_user, layer, B, b->hook_pos, b->x, b->gate);
        ops_matmul_prefetch(b->pool, next, n_next);
        if ((rc = ops_matmul(b->pool, &b->scratch, &l->ffn_down, b->gate, b->ydev, B)))
            return rc;
        bytes = tensor_bytes(&l->ffn_gate) + tensor_bytes(&l->ffn_up) + tensor_bytes(&l->ffn_down);
        if (cnt)
            cnt->neurons += (uint64_t)F;
    } else {
        const struct ffn_runs *runs = &b->held[layer];
        if (sparse) {
            if ((rc = ffn_runs_build(&b->runs, b->on_dev + (size_t)layer * F, 1, b->mask, B, F)))
                return rc;
            runs = &b->runs;
        }
        ops_matmul_prefetch(b->pool, next, n_next);
        if ((rc = ffn_partial(b->pool, &b->ffn, b->m, w, b->xn, B, runs, sparse ? b->mask : NULL, b->ydev,
                              &bytes)))
            return rc;
        if (!sparse && b->hook && b->all_on_dev[layer])
            b->hook(b->hook_user, layer, B, b->hook_pos, b->x, b->ffn.act);
        if (cnt)
            cnt->neurons += (uint64_t)runs->n_neurons;
    }
    if (cnt) {
        cnt->bytes += bytes;
        if (sparse) {
            uint64_t on = 0;
            for (int64_t i = 0; i < (int64_t)B * F; i++)
                on += b->mask[i] != 0;
            cnt->predicted += on;
        }
    }
    return 0;
}

static int cpu_ffn_add(struct be *b, int layer, int32_t B, const float *y_host)
{
    const int64_t n = (int64_t)B * b->m->hp.n_embd;
    if (y_host)
        for (int64_t i = 0; i < n; i++)
            b->x[i] += b->ydev[i] + y_host[i];
    else
        for (int64_t i = 0; i < n; i++)
            b->x[i] += b->ydev[i];
    return 0;
}

static int cpu_output(struct be *b, const struct pi_batch *bt, float *logits)
{
    const struct pi_model *m = b->m;
    const int64_t E = m->hp.n_embd;
    int32_t n = 0;
    for (int32_t i = 0; i < bt->n; i++)
        if (batch_wants(bt, i))
            ops_rmsnorm(b->xn + (size_t)(n++) * E, b->x + (size_t)i * E, m->output_norm.data, E, m->hp.norm_eps);
    return n ? ops_matmul(b->pool, &b->scratch, &m->output, b->xn, logits, n) : 0;
}

/* The logits, then each row's k best on the host: the same candidates a device computes, so that
 * gpud's candidate path runs (and is tested) on the CPU backend too. */
static int cpu_topk(struct be *b, const struct pi_batch *bt, int32_t k, int32_t *ids, float *vals)
{
    const int32_t V = b->m->hp.n_vocab, n = batch_n_out(bt);
    if (k < 1 || k > SAMP_BEST_MAX || k > V)
        return pi_fail(PI_E_RANGE, "cpu backend: top %d of %d logits (1..%d)", k, V, SAMP_BEST_MAX);
    if (n == 0)
        return 0;
    if ((size_t)n * (size_t)V > b->top_cap) {
        float *p = realloc(b->top_logits, (size_t)n * (size_t)V * sizeof *p);
        if (!p)
            return pi_fail(PI_E_NOMEM, "cpu backend: out of memory for %d rows of logits", n);
        b->top_logits = p;
        b->top_cap = (size_t)n * (size_t)V;
    }
    int rc = cpu_output(b, bt, b->top_logits);
    for (int32_t r = 0; !rc && r < n; r++)
        samp_best(b->top_logits + (size_t)r * V, V, k, ids + (size_t)r * k, vals + (size_t)r * k);
    return rc;
}

static int cpu_seq_clear(struct be *b, int32_t seq)
{
    if (seq < 0 || seq >= b->n_seq)
        return pi_fail(PI_E_RANGE, "cpu backend: sequence %d out of range [0, %d)", seq, b->n_seq);
    return 0; /* cells are rewritten before they are read: a token at pos p writes cell p first */
}

static void cpu_idle(struct be *b) { pool_park(b->pool); }

const struct be_ops be_cpu_ops = {
    .name = "cpu",
    .open = cpu_open,
    .close = cpu_close,
    .mem = cpu_mem,
    .n_ctx = cpu_n_ctx,
    .n_seq = cpu_n_seq,
    .embed = cpu_embed,
    .attn = cpu_attn,
    .predict = cpu_predict,
    .set_mask = cpu_set_mask,
    .get_mask = cpu_get_mask,
    .get_h = cpu_get_h,
    .ffn = cpu_ffn,
    .ffn_add = cpu_ffn_add,
    .output = cpu_output,
    .topk = cpu_topk,
    .seq_clear = cpu_seq_clear,
    .sync = NULL,
    .idle = cpu_idle,
};

#ifdef PI_HAVE_CUDA_BACKEND
extern const struct be_ops be_cuda_ops;
#endif

static const char *const names[] = {
    "cpu",
#ifdef PI_HAVE_CUDA_BACKEND
    "cuda",
#endif
    NULL,
};

const char *const *be_names(void) { return names; }

int be_open_named(const char *name, const struct pi_model *m, const struct be_params *p, int cache_type,
                  const struct be_ops **ops, struct be **out, char *why, size_t why_len)
{
    const bool any = !name || !strcmp(name, "auto");
    if (why && why_len)
        why[0] = '\0';
    struct be_params bp = *p;
    if (any || strcmp(name, "cpu")) {
        const struct be_ops *o = be_find(any ? "cuda" : name);
        if (!o && !any)
            return pi_fail(PI_E_UNSUPPORTED, "backend '%s' is not built in (built: cpu%s)", name,
                           be_find("cuda") ? ", cuda" : "");
        if (o) {
            bp.cache_type = cache_type >= 0 ? (enum be_cache_type)cache_type : BE_CACHE_F16;
            int rc = o->open(out, m, &bp);
            if (!rc) {
                *ops = o;
                return 0;
            }
            if (!any)
                return rc;
            if (why && why_len) { /* the detail names the backend already ("cuda: no CUDA device: ...") */
                const char *d = pi_errmsg();
                snprintf(why, why_len, "%s%s", strncmp(d, "cuda", 4) ? "cuda: " : "", d[0] ? d : pi_strerror(rc));
            }
        } else if (why && why_len) {
            snprintf(why, why_len, "cuda: not built in (the CUDA toolkit was not found at build time)");
        }
    }
    bp.cache_type = cache_type >= 0 ? (enum be_cache_type)cache_type : BE_CACHE_F32;
    *ops = &be_cpu_ops;
    return be_cpu_ops.open(out, m, &bp);
}

const struct be_ops *be_find(const char *name)
{
    if (!name || !strcmp(name, "cpu"))
        return &be_cpu_ops;
#ifdef PI_HAVE_CUDA_BACKEND
    if (!strcmp(name, "cuda"))
        return &be_cuda_ops;
#endif
    return NULL;
}
