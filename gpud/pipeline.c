/* pipeline.c — gpud's evaluator: the forward pass with each layer's FFN split between gpud (hot
 * neurons), cpud (cold neurons) and predictord (which neurons are active).
 *
 * One step per layer (docs/ARCHITECTURE.md, "Data plane"):
 *   gpud: x += attn(x); h = x → act.h; item(epoch, seq, ...) → PRED_IN
 *   predictord: mask(h) → act.mask; item → PRED_GPU, and → PRED_CPU when cpud is up
 *   cpud:  ycold = FFN over cold ∧ mask → act.ycold; item → CPU_GPU
 *   gpud:  yhot = FFN over hot ∧ mask; x = h + yhot + ycold
 * A stage that is down is routed around with the same results: without predictord gpud evaluates
 * the same predictor itself, publishes the mask and hands the step to cpud (GPU_CPU); without cpud
 * gpud computes the cold share on the host with cpud's kernels. Messages from another epoch or step
 * are stale and dropped. The layer loop is eval.c's; this file is only the FFN step it calls.
 *
 * On a GPU (the backend runs the predictor and maps the act segment: stage_out) nothing crosses the
 * host between the device and cpud: gpud enqueues the predictor, a kernel that writes h and the masks
 * straight into the mapped act segment and then stores the step's key (act_hdr.dev_seq), the hot
 * FFN, and the add of the cold share — a kernel that waits on the device for cpud's key (ycold_seq)
 * and reads the share from the segment; it hands the step to cpud as soon as it has enqueued it, and
 * cpud waits for the device's key. gpud's host thread waits for cpud's answer (or computes the share
 * itself when cpud is down, and releases the device's wait with it) only after it has enqueued the
 * next layer's work up to its stage_out. A layer with no cold neuron never involves cpud. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dataplane.h"
#include "eval.h"
#include "gpud.h"
#include "pi_err.h"

/* How long gpud waits on a ring before checking that the stage it waits for is still alive. */
#define GPUD_WAIT_SLICE_MS 20

static uint64_t now_ns(void) { return stage_now_ns(); }

/* Wait for the message of step seq on ring r, dropping stale ones. Returns true when it came,
 * false when the stage that should send it is down. */
static bool wait_step(struct gpud *g, enum act_ring which, enum pi_stage sender, uint64_t seq, struct act_item *out)
{
    struct ring *r = &g->act.rings[which];
    for (;;) {
        const void *msg;
        uint32_t len;
        if (ring_peek(r, &msg, &len) == 0) {
            struct act_item it;
            memcpy(&it, msg, sizeof it < len ? sizeof it : len);
            ring_release(r);
            if (len == sizeof it && it.epoch == g->epoch && it.seq == seq) {
                *out = it;
                return true;
            }
            atomic_fetch_add_explicit(&g->rt.me->stale_dropped, 1, memory_order_relaxed);
            continue;
        }
        if (ring_wait_readable(r, GPUD_WAIT_SLICE_MS) == -ETIMEDOUT && !dataplane_stage_alive(g->rt.ctl, sender))
            return false;
    }
}

static int push_item(struct ring *r, const struct act_item *it)
{
    return ring_push(r, it, sizeof *it, 0); /* never block: a full ring means the consumer is stuck */
}

/* Masks of this step computed here (predictord is down, or the device runs the predictor): on the
 * device when it has the op, else on the host from h; published in the act segment for cpud. The
 * same predictor on the same h gives the same mask wherever it runs on this backend. */
static int masks_here(struct gpud *g, struct eval *e, int layer, int32_t n)
{
    const struct be_ops *be = e->ops;
    struct act_view *a = &g->act;
    int rc;
    if (g->pred_on_device) {
        if ((rc = be->predict(e->be, layer, n)) || (rc = be->get_mask(e->be, n, a->mask)))
            return rc;
    } else if ((rc = eval_host_predict(e, layer, n, a->h, a->mask)) || (rc = be->set_mask(e->be, n, a->mask))) {
        return rc;
    }
    /* release: the mask is written before cpud can see it as this step's */
    atomic_store_explicit(&a->hdr->mask_seq, g->seq, memory_order_release);
    return 0;
}

/* The weights segment has no FFN rows (--ram-budget: pi_ctl.weights_trimmed): only cpud, through its
 * neuron cache, can compute the cold share of step seq. Wait for it (restarted by the supervisor),
 * handing it the step again (a duplicate is dropped by its key; flags: the item's ACT_ITEM_DEV_KEY).
 * *ycold: its share, or stays NULL when stopping. */
static int cold_from_cpud(struct gpud *g, uint64_t seq, int layer, int32_t B, bool sparse, uint32_t flags,
                          const float **ycold, uint64_t *wait_ns)
{
    struct act_view *a = &g->act;
    const uint64_t w0 = now_ns();
    struct act_item ci = { .epoch = g->epoch, .seq = seq, .req_id = g->req_id, .n_tok = B, .layer = layer,
                           .flags = flags | (sparse ? 0 : ACT_ITEM_ALL_ACTIVE) };
    int rc = 0;
    while (!*ycold && !rc && !stage_should_stop(&g->rt)) {
        if (!dataplane_stage_alive(g->rt.ctl, PI_STAGE_CPUD)) {
            const struct timespec ts = { .tv_sec = 0, .tv_nsec = GPUD_WAIT_SLICE_MS * 1000000L };
            nanosleep(&ts, NULL);
            continue;
        }
        if (push_item(&a->rings[ACT_RING_GPU_CPU], &ci))
            continue;
        act_ring_cpud_bell(a->hdr);
        struct act_item got;
        if (!wait_step(g, ACT_RING_CPU_GPU, PI_STAGE_CPUD, seq, &got))
            continue;
        if (got.flags & ACT_ITEM_FAILED)
            rc = pi_fail(PI_E_IO, "cpud: %s", g->rt.ctl->stages[PI_STAGE_CPUD].last_error);
        /* acquire: pairs with cpud's release of ycold_seq after writing ycold */
        else if (atomic_load_explicit(&a->hdr->ycold_seq, memory_order_acquire) == seq)
            *ycold = a->ycold;
    }
    *wait_ns += now_ns() - w0;
    return rc ? rc : *ycold ? 0 : pi_fail(ECANCELED, "gpud: stopping while waiting for cpud");
}

/* The cold share of step it: cpud's (it was handed the step when cpu_sent), or computed here when
 * cpud is down or did not answer, with the same masks and order; then x += yhot + ycold. */
static int finish_step(struct gpud *g, struct eval *e, int layer, int32_t B, bool host_share, bool cpu_sent,
                       struct be_ffn_count *cnt, uint64_t t_start, uint64_t wait_ns)
{
    const struct be_ops *be = e->ops;
    struct act_view *a = &g->act;
    int rc;
    const float *ycold = NULL;
    if (host_share && cpu_sent) {
        struct act_item got;
        if (be->idle)
            be->idle(e->be); /* cpud needs the cores now; our workers would only spin */
        uint64_t w0 = now_ns();
        bool ok = wait_step(g, ACT_RING_CPU_GPU, PI_STAGE_CPUD, g->seq, &got);
        wait_ns += now_ns() - w0;
        if (ok && (got.flags & ACT_ITEM_FAILED)) /* the step fails, with cpud's reason (its disk read) */
            return pi_fail(PI_E_IO, "cpud: %s", g->rt.ctl->stages[PI_STAGE_CPUD].last_error);
        /* acquire: pairs with cpud's release of ycold_seq after writing ycold */
        if (ok && atomic_load_explicit(&a->hdr->ycold_seq, memory_order_acquire) == g->seq)
            ycold = a->ycold;
    }
    if (host_share && !ycold && atomic_load_explicit(&g->rt.ctl->weights_trimmed, memory_order_acquire) &&
        (rc = cold_from_cpud(g, g->seq, layer, B, e->sparse, 0, &ycold, &wait_ns)))
        return rc;
    if (host_share && !ycold) { /* cpud is down: its share on the host here, exactly as cpud computes it */
        uint64_t hb = 0;
        if ((rc = eval_host_share(e, layer, B, a->h, e->sparse ? a->mask : NULL, e->y, &hb)))
            return rc;
        cnt->bytes += hb;
        ycold = e->y;
        atomic_fetch_add_explicit(&g->rt.me->fallbacks, 1, memory_order_relaxed);
    }
    eval_count(e, layer, B, cnt);
    if ((rc = be->ffn_add(e->be, layer, B, ycold)))
        return rc;
    if (ycold && be->stage_out) /* the cold share went to the device */
        atomic_fetch_add_explicit(&g->rt.me->h2d_bytes, (uint64_t)B * (uint64_t)e->m->hp.n_embd * sizeof(float),
                                  memory_order_relaxed);
    const uint64_t total = now_ns() - t_start;
    stage_prof(&g->rt, layer, total - wait_ns, wait_ns, cnt->bytes);
    return 0;
}

/* ---- on a device with the act segment mapped ----
 *
 * Each step is enqueued whole — predictor, h and masks out with the step's key (stage_out), the hot
 * FFN, and the add that waits on the device for the cold share (cold_add) — and handed to cpud at
 * once. The host settles a step (cpud's answer, or the share computed here when cpud is down) only
 * once the next layer's attention, predictor and stage_out are enqueued behind its add: when cpud
 * answers, the device runs on into the next layer without waiting for a launch. The last layer's
 * step is settled before the batch ends; every error releases the steps not settled (the device
 * must never wait for a share nobody will give). */

/* The cold share of pending step p: cpud's — its answer came after it stored ycold_seq, and the
 * device takes the share by itself (cpud takes no later step before the device has passed this one,
 * so the key stays there until the device sees it) — or, when cpud is down or did not get the step,
 * the host's, computed exactly as cpud computes it from the h and masks the device wrote, into the
 * backend's release buffer, then released. */
static int settle_device(struct gpud *g, struct eval *e, const struct gpud_pend *p, uint64_t *wait_ns)
{
    const struct be_ops *be = e->ops;
    struct act_view *a = &g->act;
    int rc;
    const float *ycold = NULL;
    if (p->cpu_sent) {
        struct act_item got;
        const uint64_t w0 = now_ns();
        const bool ok = wait_step(g, ACT_RING_CPU_GPU, PI_STAGE_CPUD, p->seq, &got);
        *wait_ns += now_ns() - w0;
        if (ok && (got.flags & ACT_ITEM_FAILED)) /* the step fails, with cpud's reason (its disk read) */
            return pi_fail(PI_E_IO, "cpud: %s", g->rt.ctl->stages[PI_STAGE_CPUD].last_error);
        if (ok)
            return 0;
    }
    if (atomic_load_explicit(&g->rt.ctl->weights_trimmed, memory_order_acquire) &&
        (rc = cold_from_cpud(g, p->seq, p->layer, p->B, p->sparse, ACT_ITEM_DEV_KEY, &ycold, wait_ns)))
        return rc;
    if (ycold)
        return 0;
    /* cpud is down: its share here, from what the device wrote. 1: the device already announced a
     * later step, so it passed this one with the share of a cpud that came back */
    const uint64_t w0 = now_ns();
    rc = be->stage_wait(e->be, (const uint64_t *)&a->hdr->dev_seq, p->seq);
    *wait_ns += now_ns() - w0;
    if (rc)
        return rc < 0 ? rc : 0;
    struct be_ffn_count c = { 0 };
    if ((rc = eval_host_share(e, p->layer, p->B, a->h, p->sparse ? a->mask : NULL, be->cold_buf(e->be), &c.bytes)))
        return rc;
    be->cold_release(e->be, p->seq);
    eval_count(e, p->layer, 0, &c);
    atomic_fetch_add_explicit(&g->rt.me->fallbacks, 1, memory_order_relaxed);
    return 0;
}

static int settle_pending(struct gpud *g, struct eval *e, uint64_t *wait_ns)
{
    if (!g->pend.on)
        return 0;
    const struct gpud_pend p = g->pend;
    g->pend.on = false;
    return settle_device(g, e, &p, wait_ns);
}

void gpud_ffn_abandon(struct gpud *g)
{
    if (g->be_ops->cold_release)
        g->be_ops->cold_release(g->be, g->seq); /* every step issued so far */
    g->pend.on = false;
}

/* PINFER_HAND_EARLY=0: the predictor, then h and the masks in one hand-out, and cpud lists its
 * neurons from the masks (the hand-off before predict_out; for A/B benchmarks); read once */
static bool hand_early(void)
{
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("PINFER_HAND_EARLY");
        on = !(e && strcmp(e, "0") == 0);
    }
    return on;
}

/* The step on a GPU backend with the act segment mapped (see above). */
static int ffn_step_device(struct gpud *g, struct eval *e, int layer, const struct pi_batch *b,
                           const struct act_item *it, bool host_share, uint64_t t_start)
{
    const struct be_ops *be = e->ops;
    const int32_t B = b->n;
    const bool sparse = e->sparse;
    struct act_view *a = &g->act;
    struct be_ffn_count cnt = { 0 };
    const struct pi_layer_weights w = model_layer_weights(e->m, layer);
    uint64_t wait_ns = 0;
    int rc;
    const bool early = sparse && host_share && be->predict_out && hand_early();
    if (sparse && !early && (rc = be->predict(e->be, layer, B)))
        goto fail;
    if (!host_share) { /* every neuron of the layer is on the device */
        if ((rc = be->ffn(e->be, &w, B, sparse, &cnt)) || (rc = be->ffn_add(e->be, layer, B, NULL)) ||
            (rc = settle_pending(g, e, &wait_ns)))
            goto fail;
        goto done;
    }
    /* the device's key: the step's h and masks are in the segment (cpud: act_wait_dev); with the
     * predictor, h may come first under its own key (cpud normalizes it while the predictor runs), and
     * one token's cold active neurons as bits */
    bool bits = false;
    if (early) {
        struct be_stage st = { .h = a->h, .mask = a->mask, .bits = a->cold_bits,
                               .key_h = (uint64_t *)&a->hdr->dev_h_seq, .key = (uint64_t *)&a->hdr->dev_seq,
                               .seq = g->seq };
        if ((rc = be->predict_out(e->be, layer, B, &st)))
            goto fail;
        bits = st.bits_out;
    } else if ((rc = be->stage_out(e->be, B, a->h, sparse ? a->mask : NULL, (uint64_t *)&a->hdr->dev_seq, g->seq))) {
        goto fail;
    }
    atomic_fetch_add_explicit(&g->rt.me->d2h_bytes,
                              (uint64_t)B * (uint64_t)e->m->hp.n_embd * sizeof(float) +
                                  (sparse ? (uint64_t)B * (uint64_t)e->m->hp.n_ff : 0) +
                                  (bits ? (uint64_t)act_cold_words(e->m->hp.n_ff) * sizeof(uint64_t) : 0),
                              memory_order_relaxed);
    bool cpu_sent = false;
    if (dataplane_stage_alive(g->rt.ctl, PI_STAGE_CPUD)) {
        struct act_item ci = *it;
        ci.flags = ACT_ITEM_DEV_KEY | (sparse ? 0 : ACT_ITEM_ALL_ACTIVE) | (bits ? ACT_ITEM_COLD_BITS : 0);
        cpu_sent = push_item(&a->rings[ACT_RING_GPU_CPU], &ci) == 0;
        if (cpu_sent)
            act_ring_cpud_bell(a->hdr);
    }
    /* the previous layer's share, now that this layer's chain up to cpud's start is queued behind
     * its add */
    if ((rc = settle_pending(g, e, &wait_ns)))
        goto fail;
    /* the hot neurons, which the GPU computes while cpud computes the cold ones; then x += yhot +
     * ycold, the device waiting for ycold: cpud's (ycold_seq == seq) or ours (cold_release) */
    if ((rc = be->ffn(e->be, &w, B, sparse, &cnt)) ||
        (rc = be->cold_add(e->be, layer, B, (const uint64_t *)&a->hdr->ycold_seq, a->ycold, g->seq)))
        goto fail;
    g->pend = (struct gpud_pend){ .on = true, .seq = g->seq, .layer = layer, .B = B, .sparse = sparse,
                                  .cpu_sent = cpu_sent };
    /* the device reads the share (cpud's or ours) from host memory */
    atomic_fetch_add_explicit(&g->rt.me->h2d_bytes, (uint64_t)B * (uint64_t)e->m->hp.n_embd * sizeof(float),
                              memory_order_relaxed);
    if (layer == e->m->hp.n_layer - 1 && (rc = settle_pending(g, e, &wait_ns))) /* the batch ends here */
        goto fail;
done:
    /* wait_ns: for the previous layer's share (and, at the last layer, this one's) */
    eval_count(e, layer, B, &cnt);
    const uint64_t total = now_ns() - t_start;
    stage_prof(&g->rt, layer, total - wait_ns, wait_ns, cnt.bytes);
    return 0;
fail:
    gpud_ffn_abandon(g); /* a launch may have been enqueued before its error */
    return rc;
}

/* The FFN step routed through predictord (masks) and cpud (the neurons not on the device); a stage
 * that is down is replaced here with the same masks and the same order of sums. */
static int ffn_step(void *user, struct eval *e, int layer, const struct pi_batch *b)
{
    struct gpud *g = user;
    const struct be_ops *be = e->ops;
    const int32_t B = b->n;
    struct act_view *a = &g->act;
    struct pi_ctl *ctl = g->rt.ctl;
    const uint64_t t_start = now_ns();
    uint64_t wait_ns = 0;
    struct be_ffn_count cnt = { 0 };
    int rc;

    struct act_item it = { .epoch = g->epoch, .seq = ++g->seq, .req_id = g->req_id, .pos = b->pos[0], .n_tok = B,
                           .layer = layer };
    const bool sparse = e->sparse;
    /* a layer whose neurons are all on the device needs no cpud step (and no hop) */
    const bool host_share = g->n_cold[layer] > 0;
    if (g->act_pinned && be->stage_out && (g->pred_on_device || !sparse))
        return ffn_step_device(g, e, layer, b, &it, host_share, t_start);
    if ((rc = settle_pending(g, e, &wait_ns))) {
        gpud_ffn_abandon(g);
        return rc;
    }
    if ((rc = be->get_h(e->be, B, a->h)))
        return rc;
    /* release: h is written before any stage can see this step as current */
    atomic_store_explicit(&a->hdr->cur_seq, g->seq, memory_order_release);

    const bool cpu_up = host_share && dataplane_stage_alive(ctl, PI_STAGE_CPUD);
    bool cpu_sent = false;
    if (sparse) {
        bool have = false;
        if (!g->pred_local && dataplane_stage_alive(ctl, PI_STAGE_PREDICTORD) &&
            push_item(&a->rings[ACT_RING_PRED_IN], &it) == 0) {
            struct act_item got;
            if (be->idle)
                be->idle(e->be); /* predictord's threads need the cores now */
            uint64_t w0 = now_ns();
            const bool came = wait_step(g, ACT_RING_PRED_GPU, PI_STAGE_PREDICTORD, g->seq, &got);
            wait_ns += now_ns() - w0;
            /* acquire: pairs with predictord's release of mask_seq after writing the mask */
            if (came && atomic_load_explicit(&a->hdr->mask_seq, memory_order_acquire) == g->seq) {
                cpu_sent = (got.flags & ACT_ITEM_TO_CPUD) != 0;
                have = true;
                if ((rc = be->set_mask(e->be, B, a->mask)))
                    return rc;
            }
        }
        if (!have) {
            if ((rc = masks_here(g, e, layer, B)))
                return rc;
            if (!g->pred_local)
                atomic_fetch_add_explicit(&g->rt.me->fallbacks, 1, memory_order_relaxed);
        }
    }
    if (!cpu_sent && cpu_up) {
        struct act_item ci = it;
        ci.flags = sparse ? 0 : ACT_ITEM_ALL_ACTIVE;
        cpu_sent = push_item(&a->rings[ACT_RING_GPU_CPU], &ci) == 0;
        if (cpu_sent)
            act_ring_cpud_bell(a->hdr);
    }
    const struct pi_layer_weights w = model_layer_weights(e->m, layer);
    if ((rc = be->ffn(e->be, &w, B, sparse, &cnt)))
        return rc;
    return finish_step(g, e, layer, B, host_share, cpu_sent, &cnt, t_start, wait_ns);
}

/* Polls of the cold-share ring before gpud sleeps on it, beside a device: cpud takes 0.05-1 ms per
 * layer, and a futex wake-up on the critical path of every layer costs tens of µs; the core gpud
 * spins on is the one cpud leaves to gpud's host thread (cpud.c, device_check). */
#define GPUD_COLD_SPIN 1000000u

void gpud_route_ffn(struct gpud *g)
{
    if (g->be_ops->stage_out)
        ring_set_spin(&g->act.rings[ACT_RING_CPU_GPU], GPUD_COLD_SPIN);
    g->ev.ffn_fn = ffn_step;
    g->ev.ffn_user = g;
}
