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
 * On a GPU (the backend runs the predictor and has stage_out) the hand-off is asynchronous: the
 * predictor and the copy of h and the masks into the act segment (pinned with cudaHostRegister) are
 * enqueued in gpud's stream; gpud waits for the copies' event alone — not the device — hands the
 * step to cpud, then enqueues the hot FFN, which the GPU computes while cpud computes the cold
 * neurons; the cold share comes back from the pinned segment with an asynchronous copy added on
 * the device. A layer with no cold neuron never involves cpud. */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "dataplane.h"
#include "eval.h"
#include "gpud.h"
#include "pi_err.h"

/* How long gpud waits on a ring before checking that the stage it waits for is still alive. */
#define GPUD_WAIT_SLICE_MS 20

static uint64_t now_ns(void) { return stage_now_ns(); }

/* Wait for the message of step g->seq on ring r, dropping stale ones. Returns true when it came,
 * false when the stage that should send it is down. */
static bool wait_step(struct gpud *g, enum act_ring which, enum pi_stage sender, struct act_item *out)
{
    struct ring *r = &g->act.rings[which];
    for (;;) {
        const void *msg;
        uint32_t len;
        if (ring_peek(r, &msg, &len) == 0) {
            struct act_item it;
            memcpy(&it, msg, sizeof it < len ? sizeof it : len);
            ring_release(r);
            if (len == sizeof it && it.epoch == g->epoch && it.seq == g->seq) {
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
 * neuron cache, can compute the cold share. Wait for it (restarted by the supervisor), handing it the
 * step again (a duplicate is dropped by its key). *ycold: its share, or stays NULL when stopping. */
static int cold_from_cpud(struct gpud *g, int layer, int32_t B, bool sparse, const float **ycold, uint64_t *wait_ns)
{
    struct act_view *a = &g->act;
    const uint64_t w0 = now_ns();
    struct act_item ci = { .epoch = g->epoch, .seq = g->seq, .req_id = g->req_id, .n_tok = B, .layer = layer,
                           .flags = sparse ? 0 : ACT_ITEM_ALL_ACTIVE };
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
        if (!wait_step(g, ACT_RING_CPU_GPU, PI_STAGE_CPUD, &got))
            continue;
        if (got.flags & ACT_ITEM_FAILED)
            rc = pi_fail(PI_E_IO, "cpud: %s", g->rt.ctl->stages[PI_STAGE_CPUD].last_error);
        /* acquire: pairs with cpud's release of ycold_seq after writing ycold */
        else if (atomic_load_explicit(&a->hdr->ycold_seq, memory_order_acquire) == g->seq)
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
        bool ok = wait_step(g, ACT_RING_CPU_GPU, PI_STAGE_CPUD, &got);
        wait_ns += now_ns() - w0;
        if (ok && (got.flags & ACT_ITEM_FAILED)) /* the step fails, with cpud's reason (its disk read) */
            return pi_fail(PI_E_IO, "cpud: %s", g->rt.ctl->stages[PI_STAGE_CPUD].last_error);
        /* acquire: pairs with cpud's release of ycold_seq after writing ycold */
        if (ok && atomic_load_explicit(&a->hdr->ycold_seq, memory_order_acquire) == g->seq)
            ycold = a->ycold;
    }
    if (host_share && !ycold && atomic_load_explicit(&g->rt.ctl->weights_trimmed, memory_order_acquire) &&
        (rc = cold_from_cpud(g, layer, B, e->sparse, &ycold, &wait_ns)))
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

/* The step on a GPU backend: predictor and copies out enqueued; the host waits for the copies' event
 * only, hands the step to cpud, enqueues the hot FFN, then takes the cold share back. */
static int ffn_step_device(struct gpud *g, struct eval *e, int layer, const struct pi_batch *b,
                           const struct act_item *it, bool host_share, uint64_t t_start)
{
    const struct be_ops *be = e->ops;
    const int32_t B = b->n;
    const bool sparse = e->sparse;
    struct act_view *a = &g->act;
    struct be_ffn_count cnt = { 0 };
    int rc;
    const bool cpu_up = host_share && dataplane_stage_alive(g->rt.ctl, PI_STAGE_CPUD);
    if (sparse && (rc = be->predict(e->be, layer, B)))
        return rc;
    /* h and the masks go out only when a host share needs them (cpud, or the host when it is down) */
    if (host_share) {
        if ((rc = be->stage_out(e->be, B, a->h, sparse ? a->mask : NULL)))
            return rc;
        const uint64_t out = (uint64_t)B * (uint64_t)e->m->hp.n_embd * sizeof(float) +
                             (sparse ? (uint64_t)B * (uint64_t)e->m->hp.n_ff : 0);
        atomic_fetch_add_explicit(&g->rt.me->d2h_bytes, out, memory_order_relaxed);
    }
    bool cpu_sent = false;
    uint64_t wait_ns = 0;
    if (host_share) {
        const uint64_t w0 = now_ns();
        if ((rc = be->stage_wait(e->be)))
            return rc;
        wait_ns += now_ns() - w0;
        /* release: h and the masks are written before cpud can see this step as current */
        atomic_store_explicit(&a->hdr->cur_seq, g->seq, memory_order_release);
        if (sparse)
            atomic_store_explicit(&a->hdr->mask_seq, g->seq, memory_order_release);
        if (cpu_up) {
            struct act_item ci = *it;
            ci.flags = sparse ? 0 : ACT_ITEM_ALL_ACTIVE;
            cpu_sent = push_item(&a->rings[ACT_RING_GPU_CPU], &ci) == 0;
            if (cpu_sent)
                act_ring_cpud_bell(a->hdr);
        }
    }
    /* the hot neurons, enqueued only now: cpud starts as soon as the copies are done, and the GPU
     * computes while cpud does (launching first would put these launches on every layer's critical
     * path); the stream holds the same kernels in the same order either way */
    const struct pi_layer_weights w = model_layer_weights(e->m, layer);
    if ((rc = be->ffn(e->be, &w, B, sparse, &cnt)))
        return rc;
    return finish_step(g, e, layer, B, host_share, cpu_sent, &cnt, t_start, wait_ns);
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
    if (be->stage_out && be->stage_wait && (g->pred_on_device || !sparse))
        return ffn_step_device(g, e, layer, b, &it, host_share, t_start);
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
            const bool came = wait_step(g, ACT_RING_PRED_GPU, PI_STAGE_PREDICTORD, &got);
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
