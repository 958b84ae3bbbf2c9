/* predictord.c — take gpud's step, publish the mask, hand the step to gpud and cpud. */
#include "predictord.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "dataplane.h"
#include "pi_err.h"

#define PRED_WAIT_MS 100 /* bounded wait, to notice a stop request */

int predictord_init(struct predictord *p, int argc, char **argv)
{
    memset(p, 0, sizeof *p);
    p->act_seg.fd = -1;
    int rc = stage_init(&p->rt, PI_STAGE_PREDICTORD, argc, argv);
    if (rc || (rc = dataplane_open(&p->rt, &p->m, &p->act_seg, &p->act)))
        return rc;
    stage_set_ready(&p->rt);
    fprintf(stderr, "predictord: no predictor weights in this model: every neuron is predicted active\n");
    return 0;
}

void predictord_fini(struct predictord *p)
{
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

static void do_step(struct predictord *p, struct act_item it)
{
    struct act_view *a = &p->act;
    const int64_t F = p->m->hp.n_ff;
    const uint64_t t0 = stage_now_ns();
    const int32_t B = it.n_tok < a->hdr->n_batch ? it.n_tok : a->hdr->n_batch;
    memset(a->mask, 1, (size_t)B * F); /* all active: exact for every activation function */
    /* release: the mask is written before gpud or cpud can see it as this step's */
    atomic_store_explicit(&a->hdr->mask_seq, it.seq, memory_order_release);
    it.flags = 0;
    if (dataplane_stage_alive(p->rt.ctl, PI_STAGE_CPUD) &&
        ring_push(&a->rings[ACT_RING_PRED_CPU], &it, sizeof it, 0) == 0) {
        act_ring_cpud_bell(a->hdr);
        it.flags |= ACT_ITEM_TO_CPUD;
    }
    if (ring_push(&a->rings[ACT_RING_PRED_GPU], &it, sizeof it, 1000))
        fprintf(stderr, "predictord: ring to gpud is full; gpud will go on without the mask\n");
    p->last_epoch = it.epoch;
    p->last_seq = it.seq;
    stage_prof(&p->rt, it.layer, stage_now_ns() - t0, 0, 0);
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
