/* split.c — the VRAM budget split: fixed bytes, then the hottest neurons per byte (see split.h). */
#include "split.h"

#include <stdlib.h>
#include <string.h>

#include "pi_err.h"
#include "quant.h"

#define KV_TENSORS 2 /* K and V */

static uint64_t tensor_bytes(const struct pi_tensor *t)
{
    return t->data ? (uint64_t)t->row_bytes * (uint64_t)t->ne[1] : 0;
}

uint64_t split_neuron_cost(const struct pi_model *m, int layer)
{
    const struct pi_layer *l = &m->layers[layer];
    uint64_t down;
    if (l->ffn_down_t.data) {
        down = l->ffn_down_t.row_bytes;
    } else {
        /* a column of ffn_down: n_embd elements at the type's average bytes per element */
        const struct pi_type_traits *tt = quant_traits_ref(l->ffn_down.type);
        down = ((uint64_t)m->hp.n_embd * tt->type_size + (uint64_t)tt->blck_size - 1) / (uint64_t)tt->blck_size;
    }
    return (uint64_t)l->ffn_gate.row_bytes + (uint64_t)l->ffn_up.row_bytes + down;
}

uint64_t split_fixed_bytes(const struct pi_model *m, int32_t n_ctx, struct split_report *r)
{
    const struct pi_hparams *hp = &m->hp;
    struct split_report z;
    if (!r)
        r = &z;
    r->attn_bytes = r->norm_bytes = r->pred_bytes = 0;
    r->n_ctx = n_ctx > 0 ? n_ctx : hp->n_ctx_train;
    for (int il = 0; il < hp->n_layer; il++) {
        const struct pi_layer *l = &m->layers[il];
        r->attn_bytes += tensor_bytes(&l->wq) + tensor_bytes(&l->wk) + tensor_bytes(&l->wv) + tensor_bytes(&l->wo) +
                         tensor_bytes(&l->bq) + tensor_bytes(&l->bk) + tensor_bytes(&l->bv);
        r->norm_bytes += tensor_bytes(&l->attn_norm) + tensor_bytes(&l->ffn_norm);
        r->pred_bytes += tensor_bytes(&l->fc1) + tensor_bytes(&l->fc2);
    }
    r->norm_bytes += tensor_bytes(&m->output_norm);
    r->output_bytes = tensor_bytes(&m->output);
    r->kv_bytes = (uint64_t)hp->n_layer * (uint64_t)r->n_ctx * (uint64_t)hp->n_head_kv * (uint64_t)hp->head_dim *
                  KV_TENSORS * sizeof(float);
    r->fixed_bytes = r->attn_bytes + r->norm_bytes + r->output_bytes + r->pred_bytes + r->kv_bytes;
    return r->fixed_bytes;
}

struct cand {
    float score;   /* act_freq / cost, or 0 when ranking by index */
    int32_t neuron;
    int32_t layer;
};

/* score descending, then neuron index, then layer: deterministic, and by index alone when the
 * scores are all equal (no act_freq) */
static int cand_cmp(const void *pa, const void *pb)
{
    const struct cand *a = pa, *b = pb;
    if (a->score != b->score)
        return a->score > b->score ? -1 : 1;
    if (a->neuron != b->neuron)
        return a->neuron < b->neuron ? -1 : 1;
    return (a->layer > b->layer) - (a->layer < b->layer);
}

void split_report_fini(struct split_report *r)
{
    if (!r)
        return;
    free(r->layer_neurons);
    r->layer_neurons = NULL;
}

int split_solve(const struct pi_model *m, int32_t n_ctx, uint64_t budget_bytes, uint8_t *gpu_idx,
                struct split_report *r)
{
    const struct pi_hparams *hp = &m->hp;
    const int64_t L = hp->n_layer, F = hp->n_ff;
    struct split_report z;
    if (!r)
        r = &z;
    memset(r, 0, sizeof *r);
    r->budget = budget_bytes;
    r->n_layer = hp->n_layer;
    memset(gpu_idx, 0, (size_t)(L * F));
    struct cand *c = NULL;
    uint64_t *cost = NULL;
    int rc = 0;
    r->layer_neurons = calloc((size_t)L, sizeof *r->layer_neurons);
    cost = malloc((size_t)L * sizeof *cost);
    c = malloc((size_t)(L * F) * sizeof *c);
    if (!r->layer_neurons || !cost || !c) {
        rc = pi_fail(PI_E_NOMEM, "split: out of memory for %lld neurons", (long long)(L * F));
        goto fail;
    }
    split_fixed_bytes(m, n_ctx, r);
    r->fixed_fits = r->fixed_bytes <= budget_bytes;
    r->by_freq = true;
    uint64_t min_cost = UINT64_MAX;
    for (int64_t il = 0; il < L; il++) {
        r->by_freq &= m->layers[il].act_freq != NULL;
        cost[il] = split_neuron_cost(m, (int)il);
        min_cost = cost[il] < min_cost ? cost[il] : min_cost;
    }
    if (!r->fixed_fits)
        goto done;
    for (int64_t il = 0; il < L; il++)
        for (int64_t i = 0; i < F; i++) {
            struct cand *k = &c[il * F + i];
            const float f = r->by_freq ? m->layers[il].act_freq[i] : 0.0f;
            k->score = f > 0.0f ? (float)((double)f / (double)cost[il]) : 0.0f; /* NaN / negative rank last */
            k->neuron = (int32_t)i;
            k->layer = (int32_t)il;
        }
    qsort(c, (size_t)(L * F), sizeof *c, cand_cmp);
    uint64_t left = budget_bytes - r->fixed_bytes;
    for (int64_t k = 0; k < L * F && left >= min_cost; k++) {
        const uint64_t b = cost[c[k].layer];
        if (b > left)
            continue; /* another layer's neurons may be cheaper */
        left -= b;
        gpu_idx[(int64_t)c[k].layer * F + c[k].neuron] = 1;
        r->layer_neurons[c[k].layer]++;
        r->neurons++;
        r->neuron_bytes += b;
    }
done:
    free(c);
    free(cost);
    if (r == &z)
        split_report_fini(r);
    return 0;
fail:
    free(c);
    free(cost);
    split_report_fini(r);
    return rc;
}
