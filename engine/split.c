/* split.c — the VRAM budget split: the plan's fixed bytes, then the hottest neurons per byte
 * (see split.h). */
#include "split.h"

#include <stdlib.h>
#include <string.h>

#include "pi_err.h"

uint64_t split_neuron_cost(const struct pi_model *m, int layer) { return vram_neuron_bytes(m, layer); }

static uint64_t slack_bytes(const struct pi_model *m)
{
    uint64_t s = 0;
    for (int il = 0; il < m->hp.n_layer; il++)
        if (vram_layer_compactable(m, il))
            s += vram_hot_slack(m, il);
    return s;
}

uint64_t split_fixed_bytes(const struct pi_model *m, const struct vram_params *vp)
{
    struct vram_params p = *vp;
    p.whole_layers = false;
    const size_t n = (size_t)m->hp.n_layer * (size_t)m->hp.n_ff;
    uint8_t *none = calloc(n ? n : 1, 1);
    struct vram_plan pl;
    const int rc = none ? vram_plan_make(m, &p, none, &pl) : -1;
    free(none);
    return rc ? UINT64_MAX : pl.fixed + slack_bytes(m);
}

double split_coverage(const struct pi_model *m, const uint8_t *gpu_idx)
{
    const int64_t F = m->hp.n_ff;
    double all = 0, on = 0;
    for (int il = 0; il < m->hp.n_layer; il++) {
        const float *f = m->layers[il].act_freq;
        if (!f)
            return -1;
        for (int64_t i = 0; i < F; i++) {
            const double v = f[i] > 0.0f ? (double)f[i] : 0.0; /* NaN / negative count nothing */
            all += v;
            if (gpu_idx[il * F + i])
                on += v;
        }
    }
    return all > 0 ? on / all : 0;
}

struct cand {
    double score;  /* act_freq / cost, or 0 when ranking by index */
    int32_t neuron; /* -1: the whole layer (a layer without ffn_down_t) */
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

static double freq_of(const struct pi_model *m, int il, int64_t i, bool by_freq)
{
    const float f = by_freq ? m->layers[il].act_freq[i] : 0.0f;
    return f > 0.0f ? (double)f : 0.0; /* NaN / negative rank last */
}

int split_solve(const struct pi_model *m, const struct vram_params *vp, uint64_t budget_bytes, uint8_t *gpu_idx,
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
    r->n_gpu_layers = -1;
    memset(gpu_idx, 0, (size_t)(L * F));
    struct vram_params p = *vp;
    p.whole_layers = false;
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
    r->fixed_bytes = split_fixed_bytes(m, &p);
    if (r->fixed_bytes == UINT64_MAX) {
        rc = vram_plan_make(m, &p, gpu_idx, &r->plan); /* the plan's own error (an unsupported type) */
        rc = rc ? rc : pi_fail(PI_E_INVAL, "split: no plan for this model");
        goto fail;
    }
    r->fixed_fits = r->fixed_bytes <= budget_bytes;
    r->by_freq = true;
    for (int64_t il = 0; il < L; il++)
        r->by_freq &= m->layers[il].act_freq != NULL;
    if (!r->fixed_fits) {
        /* the non-FFN parts do not fit: whole layers, as many as fit (llama.cpp's -ngl) */
        p.n_gpu_layers = vram_max_layers(m, &p, budget_bytes);
        p.whole_layers = true;
        r->n_gpu_layers = p.n_gpu_layers;
        for (int64_t il = 0; il < p.n_gpu_layers; il++) {
            memset(gpu_idx + il * F, 1, (size_t)F);
            r->layer_neurons[il] = F;
            r->neurons += F;
        }
        goto done;
    }
    int64_t nc = 0;
    for (int64_t il = 0; il < L; il++) {
        if (vram_layer_compactable(m, (int)il)) {
            cost[il] = vram_neuron_bytes(m, (int)il);
            for (int64_t i = 0; i < F; i++)
                c[nc++] = (struct cand){ .score = freq_of(m, (int)il, i, r->by_freq) / (double)cost[il],
                                         .neuron = (int32_t)i, .layer = (int32_t)il };
        } else { /* one candidate: the whole FFN, at its mean frequency per byte */
            cost[il] = vram_ffn_whole_bytes(m, (int)il);
            double s = 0;
            for (int64_t i = 0; i < F; i++)
                s += freq_of(m, (int)il, i, r->by_freq);
            c[nc++] = (struct cand){ .score = s / (double)cost[il], .neuron = -1, .layer = (int32_t)il };
        }
    }
    qsort(c, (size_t)nc, sizeof *c, cand_cmp);
    uint64_t left = budget_bytes - r->fixed_bytes;
    for (int64_t k = 0; k < nc; k++) {
        const uint64_t b = cost[c[k].layer];
        if (b > left)
            continue; /* another layer's neurons may be cheaper */
        left -= b;
        r->neuron_bytes += b;
        if (c[k].neuron < 0) {
            memset(gpu_idx + (int64_t)c[k].layer * F, 1, (size_t)F);
            r->layer_neurons[c[k].layer] = F;
            r->neurons += F;
        } else {
            gpu_idx[(int64_t)c[k].layer * F + c[k].neuron] = 1;
            r->layer_neurons[c[k].layer]++;
            r->neurons++;
        }
    }
done:
    if ((rc = vram_plan_make(m, &p, gpu_idx, &r->plan)))
        goto fail;
    /* the reserve covers every rounding: the exact plan never exceeds what was counted */
    if (r->plan.total > budget_bytes && (r->fixed_fits || r->n_gpu_layers > 0)) {
        rc = pi_fail(PI_E_INVAL, "split: plan of %llu bytes exceeds the budget of %llu (internal error)",
                     (unsigned long long)r->plan.total, (unsigned long long)budget_bytes);
        goto fail;
    }
    r->covered = split_coverage(m, gpu_idx);
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
