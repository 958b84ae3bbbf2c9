/* be_cuda.c — the CUDA backend: backend interface v2 (engine/backend.h) over the device context
 * (cudev.h). Registered in be_find() as "cuda" when the build has the toolkit.
 *
 * Each op maps onto one cudev step; ffn() writes the device share into the pending buffer and
 * ffn_add() adds it (and the host's cold share) to x in the order the interface fixes — except on a
 * layer held whole, which has no host share: there the FFN's last product adds into x itself, as the
 * decode graph does (the same single add x + y_dev, the same bits), and ffn_add() has nothing left to
 * do — one kernel, and one break in the launch chain, fewer a layer. Placement:
 * only the neurons on_device gives this backend are uploaded (their gate, up and down_t rows,
 * compacted: cudev.h), and ffn() computes only those (dense: all of them; sparse: those ∧ each
 * token's own mask). A layer of a file without ffn_down_t is uploaded whole when any of its
 * neurons is placed, and its placement is applied here, on the host mask. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cudev.h"
#include "pi_err.h"
#include "sampling.h"

struct be {
    const struct pi_model *m;
    struct cudev *d;
    int32_t n_ctx, n_seq, n_batch;
    bool *all_held;   /* (n_layer) */
    uint8_t *held;    /* (n_layer, n_ff) copy of the placement, or NULL = all */
    uint8_t *mask;    /* (n_batch, n_ff) host mask scratch (placement ∧ masks) */
    int32_t *ids;     /* (n_batch, SAMP_BEST_MAX) topk scratch */
    float *vals;
    bool dev_mask;    /* the batch's masks are on the device (predict / set_mask since the last ffn) */
    bool ffn_in_x;    /* the last ffn added y_dev into x itself (a layer held whole) */
    bool in_x_on;     /* PINFER_CUDA_FFN_IN_X=0: through the pending buffer on every layer (A/B) */
    bool whole;       /* every neuron of every layer is here: step_top replays the decode graph */
};

static void cu_close(struct be *b)
{
    if (!b)
        return;
    cudev_close(b->d);
    free(b->all_held);
    free(b->held);
    free(b->mask);
    free(b->ids);
    free(b->vals);
    free(b);
}

static int cu_open(struct be **out, const struct pi_model *m, const struct be_params *p)
{
    struct be *b = calloc(1, sizeof *b);
    if (!b)
        return pi_fail(PI_E_NOMEM, "cuda backend: out of memory");
    const struct pi_hparams *hp = &m->hp;
    b->m = m;
    b->n_ctx = p->n_ctx > 0 ? p->n_ctx : hp->n_ctx_train;
    b->n_seq = p->n_seq > 0 ? p->n_seq : 1;
    b->n_batch = p->n_batch > 0 ? p->n_batch : 64;
    const size_t F = (size_t)hp->n_ff, L = (size_t)hp->n_layer;
    int rc = 0;
    b->all_held = calloc(L, sizeof *b->all_held);
    b->mask = malloc((size_t)b->n_batch * F);
    b->ids = malloc((size_t)b->n_batch * SAMP_BEST_MAX * sizeof *b->ids);
    b->vals = malloc((size_t)b->n_batch * SAMP_BEST_MAX * sizeof *b->vals);
    if (!b->all_held || !b->mask || !b->ids || !b->vals)
        rc = pi_fail(PI_E_NOMEM, "cuda backend: out of memory");
    for (size_t l = 0; !rc && l < L; l++)
        b->all_held[l] = true;
    const char *in_x = getenv("PINFER_CUDA_FFN_IN_X");
    b->in_x_on = !(in_x && strcmp(in_x, "0") == 0);
    if (!rc && p->on_device) {
        if (!(b->held = malloc(L * F)))
            rc = pi_fail(PI_E_NOMEM, "cuda backend: out of memory");
        else
            memcpy(b->held, p->on_device, L * F);
        for (size_t l = 0; !rc && l < L; l++)
            for (size_t i = 0; i < F && b->all_held[l]; i++)
                b->all_held[l] = b->held[l * F + i] != 0;
    }
    const struct cudev_params dp = { .n_ctx = b->n_ctx, .n_seq = b->n_seq, .n_batch = b->n_batch,
                                     .kv_f32 = p->cache_type == BE_CACHE_F32, .on_device = p->on_device,
                                     .n_gpu_layers = p->n_gpu_layers };
    if (!rc)
        rc = cudev_open(&b->d, m, &dp);
    if (rc) {
        cu_close(b);
        return rc;
    }
    b->whole = cudev_whole(b->d); /* (a layer not held whole is compacted or masked there) */
    /* the upload is the start-up (and restart) cost of a GPU stage: one line in its log */
    struct cudev_mem mm;
    cudev_mem(b->d, &mm);
    fprintf(stderr,
            "cuda: %s: %.2f GB of weights uploaded in %.2f s (%.2f GB/s) from the model's mapping; VRAM: weights "
            "%.2f, KV %.2f, scratch %.2f, context %.2f GB (device: %.2f of %.2f GB in use)\n",
            cudev_device_name(b->d), (double)mm.weights / 1e9, mm.upload_s,
            mm.upload_s > 0 ? (double)mm.weights / mm.upload_s / 1e9 : 0.0, (double)mm.weights / 1e9,
            (double)mm.kv / 1e9, (double)mm.scratch / 1e9, (double)mm.context / 1e9, (double)mm.device_used / 1e9,
            (double)mm.device_total / 1e9);
    *out = b;
    return 0;
}

static void cu_mem(const struct be *b, struct be_mem *out)
{
    struct cudev_mem mm;
    cudev_mem(b->d, &mm);
    *out = (struct be_mem){ .weights = mm.weights, .kv = mm.kv, .scratch = mm.scratch, .hot = mm.hot,
                            .pred = mm.pred, .context = mm.context, .device_used = mm.device_used,
                            .device_total = mm.device_total, .hot_neurons = mm.hot_neurons };
}

static int32_t cu_n_ctx(const struct be *b) { return b->n_ctx; }
static int32_t cu_n_seq(const struct be *b) { return b->n_seq; }

static int cu_embed(struct be *b, const struct pi_batch *bt)
{
    int rc = cudev_batch(b->d, bt->n, bt->tok, bt->pos, bt->seq);
    b->dev_mask = false;
    return rc ? rc : cudev_embed(b->d, bt->n);
}

static int cu_attn(struct be *b, int layer, const struct pi_batch *bt) { return cudev_attn(b->d, layer, bt->n); }

static int cu_predict(struct be *b, int layer, int32_t n)
{
    int rc = cudev_predict(b->d, layer, n);
    b->dev_mask = rc == 0;
    return rc;
}

static int cu_set_mask(struct be *b, int32_t n, const uint8_t *mask)
{
    int rc = cudev_set_mask(b->d, n, mask);
    b->dev_mask = rc == 0;
    return rc;
}

static int cu_get_mask(struct be *b, int32_t n, uint8_t *mask) { return cudev_get_mask(b->d, n, mask); }
static int cu_get_h(struct be *b, int32_t n, float *h) { return cudev_get_x(b->d, n, h); }

static int cu_ffn(struct be *b, const struct pi_layer_weights *w, int32_t n, bool sparse, struct be_ffn_count *cnt)
{
    const int layer = w->layer; /* the weights were uploaded at open: where the host has them does not matter */
    const int64_t F = b->m->hp.n_ff;
    if (sparse && !b->dev_mask)
        return pi_fail(PI_E_INVAL, "cuda backend: sparse FFN of layer %d without masks", layer);
    bool masked = sparse;
    if (!b->all_held[layer] && !cudev_ffn_compact(b->d, layer)) {
        /* the neurons held here: the placement, ∧ each token's own mask when sparse */
        const uint8_t *held = b->held + (size_t)layer * F;
        int rc = sparse ? cudev_get_mask(b->d, n, b->mask) : 0;
        if (rc)
            return rc;
        for (int32_t t = 0; t < n; t++)
            for (int64_t i = 0; i < F; i++) {
                uint8_t *v = &b->mask[(size_t)t * F + i];
                *v = held[i] && (!sparse || *v);
            }
        if ((rc = cudev_set_mask(b->d, n, b->mask)))
            return rc;
        masked = true;
    }
    if (cnt && !masked)
        cnt->neurons += (uint64_t)cudev_layer_hot(b->d, layer);
    b->dev_mask = false;
    b->ffn_in_x = b->all_held[layer] && b->in_x_on;
    return cudev_ffn(b->d, layer, n, masked, !b->ffn_in_x);
}

static int cu_ffn_add(struct be *b, int layer, int32_t n, const float *y_host)
{
    if (b->ffn_in_x) {
        b->ffn_in_x = false;
        return y_host ? pi_fail(PI_E_INVAL, "cuda backend: layer %d is held whole on the device: it has no host "
                                            "share to add", layer)
                      : 0;
    }
    return cudev_ffn_add(b->d, n, y_host);
}

/* The rows [first, n) cover every token that wants logits; wanted rows are copied in batch order. */
static int32_t first_wanted(const struct pi_batch *bt)
{
    for (int32_t i = 0; i < bt->n; i++)
        if (batch_wants(bt, i))
            return i;
    return -1;
}

static int cu_output(struct be *b, const struct pi_batch *bt, float *logits)
{
    const int32_t first = first_wanted(bt), V = b->m->hp.n_vocab;
    if (first < 0)
        return 0;
    const int32_t k = bt->n - first;
    const bool all = batch_n_out(bt) == k;
    if (all)
        return cudev_output(b->d, bt->n, first, logits);
    float *tmp = malloc((size_t)k * V * sizeof *tmp);
    if (!tmp)
        return pi_fail(PI_E_NOMEM, "cuda backend: out of memory");
    int rc = cudev_output(b->d, bt->n, first, tmp);
    for (int32_t i = first, o = 0; !rc && i < bt->n; i++)
        if (batch_wants(bt, i))
            memcpy(logits + (size_t)o++ * V, tmp + (size_t)(i - first) * V, (size_t)V * sizeof *tmp);
    free(tmp);
    return rc;
}

static int cu_topk(struct be *b, const struct pi_batch *bt, int32_t k, int32_t *ids, float *vals)
{
    if (k < 1 || k > SAMP_BEST_MAX || k > b->m->hp.n_vocab)
        return pi_fail(PI_E_RANGE, "cuda backend: top %d of %d logits (1..%d)", k, b->m->hp.n_vocab, SAMP_BEST_MAX);
    const int32_t first = first_wanted(bt);
    if (first < 0)
        return 0;
    /* the logits stay on the device; only the wanted rows' k candidates come back */
    int rc = cudev_output(b->d, bt->n, first, NULL);
    if (!rc)
        rc = cudev_topk(b->d, bt->n, first, k, b->ids, b->vals);
    for (int32_t i = first, o = 0; !rc && i < bt->n; i++)
        if (batch_wants(bt, i)) {
            memcpy(ids + (size_t)o * k, b->ids + (size_t)(i - first) * k, (size_t)k * sizeof *ids);
            memcpy(vals + (size_t)o * k, b->vals + (size_t)(i - first) * k, (size_t)k * sizeof *vals);
            o++;
        }
    return rc;
}

static int cu_step_top(struct be *b, const struct pi_batch *bt, bool sparse, int32_t k, int32_t *ids, float *vals,
                       struct be_ffn_count *cnt)
{
    const int32_t L = b->m->hp.n_layer;
    /* a decode step: every token wants its candidates, as many tokens as a decode graph takes */
    if (!b->whole || bt->n < 1 || bt->n > CUDEV_GEMV_MAX || batch_n_out(bt) != bt->n)
        return 1;
    int rc = cudev_step_top(b->d, bt->n, bt->tok, bt->pos, bt->seq, sparse, k, ids, vals);
    for (int32_t l = 0; !rc && l < L; l++) /* as cu_ffn counts */
        cnt[l] = (struct be_ffn_count){ .neurons = sparse ? 0 : (uint64_t)cudev_layer_hot(b->d, l) };
    b->dev_mask = false;
    return rc;
}

static int cu_seq_clear(struct be *b, int32_t seq)
{
    /* a token reads only its own sequence's cells at positions ≤ its own, all written before it */
    if (seq < 0 || seq >= b->n_seq)
        return pi_fail(PI_E_RANGE, "cuda backend: sequence %d of %d", seq, b->n_seq);
    return 0;
}

static int cu_sync(struct be *b) { return cudev_sync(b->d); }
static int cu_host_register(struct be *b, void *ptr, size_t bytes) { return cudev_host_register(b->d, ptr, bytes); }
static int cu_stage_out(struct be *b, int32_t n, float *h, uint8_t *mask, uint64_t *key, uint64_t seq)
{
    return cudev_stage_out(b->d, n, h, mask, key, seq);
}
static int cu_predict_out(struct be *b, int layer, int32_t n, struct be_stage *s)
{
    int rc = cudev_predict_out(b->d, layer, n, s->h, s->mask, s->bits, s->key_h, s->key, s->seq, &s->bits_out);
    b->dev_mask = rc == 0;
    return rc;
}
static int cu_stage_wait(struct be *b, const uint64_t *key, uint64_t seq) { return cudev_stage_wait(b->d, key, seq); }
static int cu_cold_add(struct be *b, int layer, int32_t n, const uint64_t *key, const float *y, uint64_t seq)
{
    (void)layer;
    return cudev_cold_add(b->d, n, key, y, seq);
}
static float *cu_cold_buf(struct be *b) { return cudev_cold_buf(b->d); }
static void cu_cold_release(struct be *b, uint64_t seq) { cudev_cold_release(b->d, seq); }

const struct be_ops be_cuda_ops = {
    .name = "cuda",
    .open = cu_open,
    .close = cu_close,
    .mem = cu_mem,
    .n_ctx = cu_n_ctx,
    .n_seq = cu_n_seq,
    .embed = cu_embed,
    .attn = cu_attn,
    .predict = cu_predict,
    .set_mask = cu_set_mask,
    .get_mask = cu_get_mask,
    .get_h = cu_get_h,
    .ffn = cu_ffn,
    .ffn_add = cu_ffn_add,
    .output = cu_output,
    .topk = cu_topk,
    .step_top = cu_step_top,
    .seq_clear = cu_seq_clear,
    .sync = cu_sync,
    .idle = NULL,
    .host_register = cu_host_register,
    .stage_out = cu_stage_out,
    .predict_out = cu_predict_out,
    .stage_wait = cu_stage_wait,
    .cold_add = cu_cold_add,
    .cold_buf = cu_cold_buf,
    .cold_release = cu_cold_release,
};
