/* predictord.c — take gpud's step, publish the mask, hand the step to gpud and cpud. */
#include "predictord.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataplane.h"
#include "pi_err.h"
#include "predictor.h"
#include "sampling.h"
#include "threadpool.h"

#define PRED_WAIT_MS 100 /* bounded wait, to notice a stop request */

int predictord_init(struct predictord *p, int argc, char **argv)
{
    memset(p, 0, sizeof *p);
    p->act_seg.fd = -1;
    int rc = stage_init(&p->rt, PI_STAGE_PREDICTORD, argc, argv);
    if (rc || (rc = dataplane_open(&p->rt, &p->m, &p->act_seg, &p->act)))
        return rc;
    /* gpud waits for the masks with its threads parked: predictord may use as many (one thread made
     * the predictor ~27 ms of a 7B token at -t 16) */
    const struct pi_ctl *ctl = p->rt.ctl;
    const int32_t nt = ctl->gpud_threads > 0 ? ctl->gpud_threads : ctl->n_threads > 0 ? ctl->n_threads : 1;
    if ((rc = pool_new(&p->pool, nt)))
        return rc;
    const struct pi_hparams *hp = &p->m->hp;
    p->have_predictors = pred_available(p->m);
    p->xn = malloc((size_t)hp->n_embd * sizeof(float));
    p->gate = malloc((size_t)hp->n_ff * sizeof(float));
    p->up = malloc((size_t)hp->n_ff * sizeof(float));
    if (!p->xn || !p->gate || !p->up)
        return pi_fail(PI_E_NOMEM, "predictord: out of memory");
    stage_set_ready(&p->rt);
    if (p->have_predictors)
        fprintf(stderr, "predictord: predictors for %d layers, threshold %g, audit rate %g\n", hp->n_layer,
                (double)hp->sparse_threshold, (double)p->rt.ctl->audit_rate);
    else
        fprintf(stderr, "predictord: no predictor weights in this model: every neuron is predicted active\n");
    return 0;
}

void predictord_fini(struct predictord *p)
{
    free(p->xn);
    free(p->gate);
    free(p->up);
    ops_scratch_fini(&p->scratch);
    pool_free(p->pool);
    model_free(p->m);
    shm_detach(&p->act_seg);
    stage_fini(&p->rt);
}

static bool current(struct predictord *p, const struct act_item *it)
{
    const struct act_hdr *h = p->act.hdr;
    /* acquire: pairs with gpud's release of cur_seq after writing h */
    const uint64_t seq = atomic_load_explicit(&h->cur_seq, memory_order_acquire);
    const uint64_t epoch = atomic_load_explicit(&h->cur_epoch, memory_order_relaxed);
    return it->epoch == epoch && it->seq == seq && !(it->epoch == p->last_epoch && it->seq == p->last_seq);
}

/* Audit one token densely: which neurons really fire, against the mask. The token is chosen by a
 * hash of its position, so a replayed request audits the same tokens. */
static void audit_token(struct predictord *p, int layer, const float *h, const uint8_t *mask)
{
    const struct pi_model *m = p->m;
    const struct pi_layer *l = &m->layers[layer];
    const int64_t E = m->hp.n_embd, F = m->hp.n_ff;
    ops_rmsnorm(p->xn, h, l->ffn_norm.data, E, m->hp.norm_eps);
    if (ops_matmul(p->pool, &p->scratch, &l->ffn_gate, p->xn, p->gate, 1) ||
        ops_matmul(p->pool, &p->scratch, &l->ffn_up, p->xn, p->up, 1))
        return;
    uint64_t fired = 0, predicted = 0, missed = 0;
    for (int64_t i = 0; i < F; i++) {
        const bool on = model_glu(m->hp.act, p->gate[i], p->up[i]) != 0.0f;
        fired += on;
        predicted += mask[i] != 0;
        missed += on && !mask[i];
    }
    struct pi_audit_row *row = &p->rt.ctl->audit[layer < PI_MAX_LAYERS ? layer : PI_MAX_LAYERS - 1];
    atomic_fetch_add_explicit(&row->tokens, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&row->fired, fired, memory_order_relaxed);
    atomic_fetch_add_explicit(&row->predicted, predicted, memory_order_relaxed);
    atomic_fetch_add_explicit(&row->missed, missed, memory_order_relaxed);
}

static void do_step(struct predictord *p, struct act_item it)
{
    struct act_view *a = &p->act;
    const int64_t E = p->m->hp.n_embd, F = p->m->hp.n_ff;
    const uint64_t t0 = stage_now_ns();
    const int32_t B = it.n_tok < a->hdr->n_batch ? it.n_tok : a->hdr->n_batch;
    uint64_t bytes = 0;
    const struct pi_layer *l = &p->m->layers[it.layer];
    int64_t n_active = 0;
    if (!p->have_predictors ||
        pred_eval(p->pool, &p->scratch, l, a->h, B, p->m->hp.sparse_threshold, a->mask, &n_active)) {
        memset(a->mask, 1, (size_t)B * F); /* all active: exact for every activation function */
    } else {
        bytes = pred_bytes(l);
        const float rate = p->rt.ctl->audit_rate;
        for (int32_t b = 0; rate > 0.0f && b < B; b++)
            if (samp_uniform(0x61756469u /* "audi" */, (uint64_t)(it.pos + b) * 4096u + (uint64_t)it.layer) < rate)
                audit_token(p, it.layer, a->h + (size_t)b * E, a->mask + (size_t)b * F);
    }
    /* release: the mask is written before gpud or cpud can see it as this step's */
    atomic_store_explicit(&a->hdr->mask_seq, it.seq, memory_order_release);
    it.flags = 0;
    /* cpud only for a layer with cold neurons: otherwise gpud does not wait for it, and cpud's
     * threads would only compete with gpud's for the cores (at -t 16 on a 7B, cpud spent 100 ms per
     * such step and pipeline decode fell to 0.67x) */
    const bool cold = memchr(a->gpu_idx + (size_t)it.layer * (size_t)F, 0, (size_t)F) != NULL;
    if (cold && dataplane_stage_alive(p->rt.ctl, PI_STAGE_CPUD) &&
        ring_push(&a->rings[ACT_RING_PRED_CPU], &it, sizeof it, 0) == 0) {
        act_ring_cpud_bell(a->hdr);
        it.flags |= ACT_ITEM_TO_CPUD;
    }
    if (ring_push(&a->rings[ACT_RING_PRED_GPU], &it, sizeof it, 1000))
        fprintf(stderr, "predictord: ring to gpud is full; gpud will go on without the mask\n");
    pool_park(p->pool); /* gpud and cpud compute now: our workers would only spin against them */
    p->last_epoch = it.epoch;
    p->last_seq = it.seq;
    stage_prof(&p->rt, it.layer, stage_now_ns() - t0, 0, bytes);
}

int predictord_run(struct predictord *p)
{
    struct ring *in = &p->act.rings[ACT_RING_PRED_IN];
    while (!stage_should_stop(&p->rt)) {
        const void *msg;
        uint32_t len;
        int rc = ring_peek(in, &msg, &len);
        if (rc == -EAGAIN) {
            ring_wait_readable(in, PRED_WAIT_MS);
            continue;
        }
        if (rc == 0 && len == sizeof(struct act_item)) {
            struct act_item it;
            memcpy(&it, msg, sizeof it);
            if (current(p, &it))
                do_step(p, it);
            else
                atomic_fetch_add_explicit(&p->rt.me->stale_dropped, 1, memory_order_relaxed);
        }
        ring_release(in); /* after publishing: a predictord killed mid-step redoes it */
    }
    return 0;
}
