/* gpud.c — stage set-up: the model and act segment, the backend with gpud's placement, the
 * evaluator with its routed FFN step, the scheduler (sched.c runs the requests). */
#include "gpud.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dataplane.h"
#include "futex.h"
#include "pi_err.h"
#include "predictor.h"

/* A request that killed gpud this many times is failed instead of replayed again. */
#define GPUD_MAX_REPLAYS 3
#define GPUD_IDLE_WAIT_MS 100

int gpud_init(struct gpud *g, int argc, char **argv)
{
    memset(g, 0, sizeof *g);
    g->act_seg.fd = -1;
    int rc = stage_init(&g->rt, PI_STAGE_GPUD, argc, argv);
    if (rc)
        return rc;
    struct pi_ctl *ctl = g->rt.ctl;
    if ((rc = dataplane_open(&g->rt, &g->m, &g->act_seg, &g->act)))
        return rc;
    const struct act_hdr *ah = g->act.hdr;
    const int32_t nt = ctl->gpud_threads > 0 ? ctl->gpud_threads : ctl->n_threads > 0 ? ctl->n_threads : 1;
    g->be_ops = &be_cpu_ops;
    /* the placement: gpud's backend holds the hot neurons (gpu_idx 1); the rest is cpud's share,
     * computed on the host here while cpud is down */
    const int32_t n_seq = ctl->n_parallel > 0 ? ctl->n_parallel : 1;
    const struct be_params bp = { .n_ctx = ctl->n_ctx, .n_seq = n_seq, .n_batch = ah->n_batch, .n_threads = nt,
                                  .cache_type = (enum be_cache_type)ctl->cache_type,
                                  .on_device = g->act.gpu_idx };
    if ((rc = g->be_ops->open(&g->be, g->m, &bp)))
        return rc;
    g->use_predictor = pred_available(g->m);
    g->pred_on_device = g->use_predictor && g->be_ops != &be_cpu_ops && g->be_ops->predict;
    const struct eval_params ep = { .n_batch = ah->n_batch, .sparse = g->use_predictor, .on_device = g->act.gpu_idx };
    if ((rc = eval_init(&g->ev, g->m, g->be_ops, g->be, &ep)) || (rc = batch_buf_init(&g->bb, ah->n_batch)))
        return rc;
    gpud_route_ffn(g);
    if ((rc = sched_init(g, n_seq)))
        return rc;
    g->n_cold = calloc((size_t)ah->n_layer, sizeof *g->n_cold);
    if (!g->n_cold)
        return pi_fail(PI_E_NOMEM, "gpud: out of memory");
    for (int32_t l = 0; l < ah->n_layer; l++)
        for (int32_t i = 0; i < ah->n_ff; i++)
            g->n_cold[l] += g->act.gpu_idx[(size_t)l * ah->n_ff + i] == 0;
    /* A new session: results keyed with an older epoch are stale from now on. */
    g->epoch = atomic_fetch_add_explicit(&ctl->epoch, 1, memory_order_acq_rel) + 1;
    atomic_store_explicit(&g->act.hdr->cur_epoch, g->epoch, memory_order_release);
    stage_set_ready(&g->rt);
    fprintf(stderr, "gpud: epoch %llu, model %s, %s backend, %d threads, %d sequences of %d cells\n",
            (unsigned long long)g->epoch, g->m->name, g->be_ops->name, nt, n_seq, ctl->n_ctx);
    return 0;
}

void gpud_fini(struct gpud *g)
{
    sched_fini(g);
    free(g->n_cold);
    if (g->ev.m)
        eval_fini(&g->ev);
    batch_buf_fini(&g->bb);
    if (g->be)
        g->be_ops->close(g->be);
    model_free(g->m);
    shm_detach(&g->act_seg);
    stage_fini(&g->rt);
}
