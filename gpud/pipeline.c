/* pipeline.c — gpud's evaluator: the forward pass with each layer's FFN split between gpud (hot
 * neurons), cpud (cold neurons) and predictord (which neurons are active).
 *
 * One step per layer (docs/ARCHITECTURE.md, "Data plane"):
 *   gpud: x += attn(x); h = x → act.h; item(epoch, seq, ...) → PRED_IN
 *   predictord: mask(h) → act.mask; item → PRED_GPU, and → PRED_CPU when cpud is up
 *   cpud:  ycold = FFN over cold ∧ mask → act.ycold; item → CPU_GPU
 *   gpud:  yhot = FFN over hot ∧ mask; x = h + yhot + ycold
 * A stage that is down is routed around: without predictord every neuron is active and gpud hands
 * the step to cpud itself (GPU_CPU); without cpud gpud computes the cold share too. Messages from
 * another epoch or step are stale and dropped. */
#include <errno.h>
#include <string.h>

#include "dataplane.h"
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

static int ffn_step(struct gpud *g, int layer, int32_t B, int32_t pos)
{
    const struct be_ops *be = g->be_ops;
    const int64_t F = g->m->hp.n_ff;
    struct act_view *a = &g->act;
    struct pi_ctl *ctl = g->rt.ctl;
    const uint64_t t_start = now_ns();
    uint64_t wait_ns = 0, bytes = 0, bytes_cold = 0;
    int rc;

    struct act_item it = { .epoch = g->epoch, .seq = ++g->seq, .req_id = g->req_id, .pos = pos, .n_tok = B,
                           .layer = layer };
    if ((rc = be->get_h(g->be, B, a->h)))
        return rc;
    /* release: h is written before any stage can see this step as current */
    atomic_store_explicit(&a->hdr->cur_seq, g->seq, memory_order_release);

    /* Without predictors every mask is all-active: the two hops through predictord would only add
     * latency, so gpud hands the step to cpud directly. */
    bool pred = g->use_predictor && !g->req_dense && dataplane_stage_alive(ctl, PI_STAGE_PREDICTORD) &&
                push_item(&a->rings[ACT_RING_PRED_IN], &it) == 0;
    bool cpu_sent = false;
    /* a layer whose neurons are all hot needs no cpud step (and no hop) */
    const bool cpu_up = g->n_cold[layer] > 0 && dataplane_stage_alive(ctl, PI_STAGE_CPUD);
    if (!pred && cpu_up) {
        struct act_item ci = it;
        ci.flags = ACT_ITEM_ALL_ACTIVE;
        cpu_sent = push_item(&a->rings[ACT_RING_GPU_CPU], &ci) == 0;
        if (cpu_sent)
            act_ring_cpud_bell(a->hdr);
    }
    if ((rc = be->ffn_begin(g->be, layer, B)))
        return rc;

    const uint8_t *mask = NULL; /* NULL: all active */
    if (pred) {
        struct act_item got;
        uint64_t w0 = now_ns();
        pred = wait_step(g, ACT_RING_PRED_GPU, PI_STAGE_PREDICTORD, &got);
        wait_ns += now_ns() - w0;
        if (pred) {
            cpu_sent = (got.flags & ACT_ITEM_TO_CPUD) != 0;
            /* acquire: pairs with predictord's release of mask_seq after writing the mask */
            if (atomic_load_explicit(&a->hdr->mask_seq, memory_order_acquire) == g->seq)
                mask = a->mask;
        }
        if (!cpu_sent && cpu_up) {
            struct act_item ci = it;
            ci.flags = mask ? 0 : ACT_ITEM_ALL_ACTIVE;
            cpu_sent = push_item(&a->rings[ACT_RING_GPU_CPU], &ci) == 0;
            if (cpu_sent)
                act_ring_cpud_bell(a->hdr);
        }
    }

    const uint8_t *sel = a->gpu_idx + (size_t)layer * F;
    if ((rc = ffn_runs_build(&g->hot, sel, 1, mask, B, F)) || (rc = be->ffn_runs(g->be, layer, B, &g->hot, &bytes)))
        return rc;

    const float *ycold = NULL;
    if (cpu_sent) {
        struct act_item got;
        if (be->idle)
            be->idle(g->be); /* cpud needs the cores now; our workers would only spin */
        uint64_t w0 = now_ns();
        bool ok = wait_step(g, ACT_RING_CPU_GPU, PI_STAGE_CPUD, &got);
        wait_ns += now_ns() - w0;
        /* acquire: pairs with cpud's release of ycold_seq after writing ycold */
        if (ok && atomic_load_explicit(&a->hdr->ycold_seq, memory_order_acquire) == g->seq)
            ycold = a->ycold;
    }
    if (!ycold) { /* cpud is down: compute its share here, exact and slower */
        if ((rc = ffn_runs_build(&g->cold, sel, 0, mask, B, F)) ||
            (rc = be->ffn_runs(g->be, layer, B, &g->cold, &bytes_cold)))
            return rc;
        if (g->cold.n_neurons)
            atomic_fetch_add_explicit(&g->rt.me->fallbacks, 1, memory_order_relaxed);
    }
    if ((rc = be->ffn_end(g->be, B, ycold)))
        return rc;
    const uint64_t total = now_ns() - t_start;
    stage_prof(&g->rt, layer, total - wait_ns, wait_ns, bytes + bytes_cold);
    return 0;
}

int gpud_eval(void *self, const int32_t *toks, int32_t n, int32_t pos, float *logits)
{
    struct gpud *g = self;
    const struct be_ops *be = g->be_ops;
    const int32_t nb = g->act.hdr->n_batch, n_ctx = be->n_ctx(g->be);
    if (pos < 0 || (int64_t)pos + n > n_ctx)
        return pi_fail(PI_E_RANGE, "gpud: positions %d..%d exceed the context of %d tokens", pos, pos + n - 1, n_ctx);
    for (int32_t done = 0; done < n; done += nb) {
        const int32_t B = n - done < nb ? n - done : nb;
        int rc = be->embed(g->be, toks + done, B);
        for (int il = 0; !rc && il < g->m->hp.n_layer; il++) {
            rc = be->attn(g->be, il, B, pos + done);
            if (!rc)
                rc = ffn_step(g, il, B, pos + done);
        }
        if (!rc && done + B == n)
            rc = be->output(g->be, B, logits, false);
        if (rc)
            return rc;
    }
    return 0;
}
