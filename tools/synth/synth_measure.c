/* synth_measure.c — what a synthetic model's FFNs actually do: active fraction per layer, the share
 * of the hottest 30 % of neurons, the predictor's recall, and the bytes a dense and a sparse decode
 * step read. Runs the dense forward pass with the FFN hook over random tokens. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval.h"
#include "gguf.h"
#include "model.h"
#include "ops.h"
#include "pi_err.h"
#include "predictor.h"
#include "quant.h"
#include "synth_internal.h"
#include "threadpool.h"

#define SM_BATCH 32         /* tokens per prefill batch */
#define SM_TOKEN_STREAM 0x746f6b656e73ull /* "tokens": PRNG stream of the random prompt */

struct sm_ctx {
    int32_t L, F, E;
    uint32_t *counts;     /* (L, F) activations per neuron */
    uint64_t *active;     /* (L) activations */
    struct pi_layer *twin;       /* (L) predictors of a --pwri twin file (only fc1/fc2 set), or NULL */
    const struct pi_layer *pred; /* (L) the layers whose fc1/fc2 predict, or NULL */
    float thr;
    struct pi_pool *pool;
    struct ops_scratch scratch;
    uint8_t *mask;               /* (SM_BATCH, F) */
    uint64_t hit, n_act, n_pred;
    int err;
};

/* Counts act != 0 per neuron; with predictors, mask = fc2 · relu(fc1 · h) >= thr against it. */
static void sm_hook(void *user, int layer, int32_t B, int32_t pos, const float *h, const float *act)
{
    struct sm_ctx *s = user;
    const int32_t F = s->F;
    uint32_t *cnt = s->counts + (size_t)layer * F;
    for (int32_t b = 0; b < B; b++)
        for (int32_t i = 0; i < F; i++)
            if (act[(size_t)b * F + i] != 0.0f) {
                cnt[i]++;
                s->active[layer]++;
            }
    if (!s->pred || s->err)
        return;
    int rc = pred_eval(s->pool, &s->scratch, &s->pred[layer], h, B, s->thr, s->mask, NULL);
    if (rc) {
        s->err = rc;
        return;
    }
    for (int64_t k = 0; k < (int64_t)B * F; k++) {
        bool pr = s->mask[k], ac = act[k] != 0.0f;
        s->n_pred += pr;
        s->n_act += ac;
        s->hit += pr && ac;
    }
}

static int sm_bind(const struct gguf_file *f, struct pi_tensor *t, const char *name, int64_t ne0, int64_t ne1)
{
    const struct gguf_tensor *g = gguf_find_tensor(f, name);
    if (!g)
        return pi_fail(PI_E_NOTFOUND, "synth measure: predictor tensor '%s' is missing", name);
    if (g->ne[0] != ne0 || g->ne[1] != ne1 || !quant_traits(g->type) || !quant_traits(g->type)->vec_dot)
        return pi_fail(PI_E_TYPE, "synth measure: tensor '%s' is [%lld, %lld] of type %u, expected [%lld, %lld]",
                       name, (long long)g->ne[0], (long long)g->ne[1], g->type, (long long)ne0, (long long)ne1);
    *t = (struct pi_tensor){ .name = g->name, .type = g->type, .ne = { g->ne[0], g->ne[1], 1, 1 },
                             .row_bytes = quant_row_size(g->type, g->ne[0]), .data = g->data };
    return 0;
}

static uint64_t sm_bytes(const struct pi_tensor *t)
{
    return t->data ? (uint64_t)t->row_bytes * (uint64_t)t->ne[1] : 0;
}

/* The predictors of `pf`, a --pwri twin of the dense model (same seed, same gate weights). */
static int sm_twin_open(struct sm_ctx *s, const struct pi_model *m, const struct gguf_file *pf)
{
    uint64_t seed_m, seed_p;
    if (gguf_get_u64(m->gguf, "pinfer.synth.seed", &seed_m) || gguf_get_u64(pf, "pinfer.synth.seed", &seed_p) ||
        seed_m != seed_p)
        return pi_fail(PI_E_INVAL, "synth measure: the predictor file is not a --pwri twin of the model (seed)");
    const struct gguf_tensor *g = gguf_find_tensor(pf, "blk.0.ffn_gate.weight");
    const struct pi_tensor *mg = &m->layers[0].ffn_gate;
    if (!g || g->type != mg->type || g->nbytes != sm_bytes(mg) || memcmp(g->data, mg->data, g->nbytes))
        return pi_fail(PI_E_INVAL, "synth measure: the predictor file's gate weights differ from the model's");
    const struct gguf_tensor *fc1 = gguf_find_tensor(pf, "blk.0.fc1.weight");
    if (!fc1)
        return pi_fail(PI_E_NOTFOUND, "synth measure: predictor tensor 'blk.0.fc1.weight' is missing");
    const int64_t rank = fc1->ne[1];
    int rc = gguf_get_f32(pf, "powerinfer.sparse_threshold", &s->thr);
    if (rc == -PI_E_NOTFOUND)
        s->thr = 0.0f;
    else if (rc)
        return rc;
    if (!(s->twin = calloc((size_t)s->L, sizeof *s->twin)))
        return pi_fail(PI_E_NOMEM, "synth measure: out of memory");
    for (int32_t l = 0; l < s->L; l++) {
        char n1[64], n2[64];
        snprintf(n1, sizeof n1, "blk.%d.fc1.weight", l);
        snprintf(n2, sizeof n2, "blk.%d.fc2.weight", l);
        if ((rc = sm_bind(pf, &s->twin[l].fc1, n1, s->E, rank)) || (rc = sm_bind(pf, &s->twin[l].fc2, n2, rank, s->F)))
            return rc;
    }
    s->pred = s->twin;
    return 0;
}

static int sm_desc_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x < y) - (x > y);
}

static void sm_fini(struct sm_ctx *s)
{
    free(s->counts);
    free(s->active);
    free(s->twin);
    free(s->mask);
    ops_scratch_fini(&s->scratch);
    pool_free(s->pool);
}

int synth_measure(const char *model_path, const char *pred_path, int32_t n_tokens, uint64_t seed, int n_threads,
                  struct synth_stats *out)
{
    struct pi_model *m = NULL;
    struct gguf_file *pf = NULL;
    struct pi_ctx *c = NULL;
    struct sm_ctx s = { 0 };
    int32_t *tokens = NULL;
    int rc;
    memset(out, 0, sizeof *out);
    if (n_tokens < 1)
        return pi_fail(PI_E_INVAL, "synth measure: need at least one token");
    if ((rc = model_load(&m, model_path)))
        goto out;
    const struct pi_hparams *hp = &m->hp;
    if (hp->n_vocab <= SYNTH_N_CONTROL) {
        rc = pi_fail(PI_E_INVAL, "synth measure: vocabulary of %d tokens is too small", hp->n_vocab);
        goto out;
    }
    s.L = hp->n_layer;
    s.F = hp->n_ff;
    s.E = hp->n_embd;
    s.counts = calloc((size_t)s.L * (size_t)s.F, sizeof *s.counts);
    s.active = calloc((size_t)s.L, sizeof *s.active);
    tokens = malloc((size_t)n_tokens * sizeof *tokens);
    if (!s.counts || !s.active || !tokens) {
        rc = pi_fail(PI_E_NOMEM, "synth measure: out of memory");
        goto out;
    }
    if (pred_path) {
        if ((rc = gguf_open(&pf, pred_path)) || (rc = sm_twin_open(&s, m, pf)))
            goto out;
    } else if (pred_available(m)) {
        s.pred = m->layers; /* a PowerInfer file: its own predictors */
        s.thr = hp->sparse_threshold;
    }
    if (s.pred) {
        s.mask = malloc((size_t)SM_BATCH * (size_t)s.F);
        if (!s.mask) {
            rc = pi_fail(PI_E_NOMEM, "synth measure: out of memory");
            goto out;
        }
        if ((rc = pool_new(&s.pool, n_threads > 0 ? n_threads : 1)))
            goto out;
    }
    const uint64_t key = syn_key(seed, SM_TOKEN_STREAM, 0);
    for (int32_t t = 0; t < n_tokens; t++)
        tokens[t] = SYNTH_N_CONTROL + (int32_t)(syn_u64(key, (uint64_t)t) % (uint64_t)(hp->n_vocab - SYNTH_N_CONTROL));
    struct pi_ctx_params cp = { .n_ctx = n_tokens, .n_batch = SM_BATCH, .n_threads = n_threads > 0 ? n_threads : 1 };
    if ((rc = ctx_new(&c, m, &cp)))
        goto out;
    ctx_set_ffn_hook(c, sm_hook, &s);
    if ((rc = ctx_eval(c, tokens, n_tokens, 0, NULL, false)) || (rc = s.err))
        goto out;

    out->n_layer = s.L;
    out->n_ff = s.F;
    out->n_tokens = n_tokens;
    out->active_frac = calloc((size_t)s.L, sizeof *out->active_frac);
    out->hot_share = calloc((size_t)s.L, sizeof *out->hot_share);
    if (!out->active_frac || !out->hot_share) {
        rc = pi_fail(PI_E_NOMEM, "synth measure: out of memory");
        goto out;
    }
    const int32_t n_hot = (int32_t)(SYNTH_HOT_FRAC * s.F);
    uint64_t ffn_bytes = 0, all_pred_bytes = 0, own_pred_bytes = 0;
    for (int32_t l = 0; l < s.L; l++) {
        uint32_t *cnt = s.counts + (size_t)l * s.F;
        out->active_frac[l] = (double)s.active[l] / ((double)n_tokens * s.F);
        qsort(cnt, (size_t)s.F, sizeof *cnt, sm_desc_u32);
        uint64_t hot = 0;
        for (int32_t i = 0; i < n_hot; i++)
            hot += cnt[i];
        out->hot_share[l] = s.active[l] ? (double)hot / (double)s.active[l] : 0.0;
        const struct pi_layer *ly = &m->layers[l];
        ffn_bytes += sm_bytes(&ly->ffn_gate) + sm_bytes(&ly->ffn_up) + sm_bytes(&ly->ffn_down) +
                     sm_bytes(&ly->ffn_down_t);
        own_pred_bytes += sm_bytes(&ly->fc1) + sm_bytes(&ly->fc2);
        if (s.pred)
            all_pred_bytes += pred_bytes(&s.pred[l]);
    }
    /* A dense step reads no predictor, even where the file has one. */
    out->dense_bytes = (double)(model_weight_bytes(m) - own_pred_bytes);
    out->ffn_bytes = (double)ffn_bytes;
    out->recall = out->predicted_frac = -1.0;
    out->sparse_bytes = out->pred_bytes = -1.0;
    if (s.pred) {
        out->recall = s.n_act ? (double)s.hit / (double)s.n_act : 1.0;
        out->pred_bytes = (double)all_pred_bytes;
        out->predicted_frac = (double)s.n_pred / ((double)n_tokens * s.L * s.F);
        out->sparse_bytes = out->dense_bytes - (double)ffn_bytes + (double)all_pred_bytes +
                            out->predicted_frac * (double)ffn_bytes;
    }
out:
    if (rc)
        synth_stats_fini(out);
    ctx_free(c);
    sm_fini(&s);
    free(tokens);
    gguf_close(pf);
    model_free(m);
    return rc;
}

void synth_stats_fini(struct synth_stats *s)
{
    free(s->active_frac);
    free(s->hot_share);
    s->active_frac = s->hot_share = NULL;
}
