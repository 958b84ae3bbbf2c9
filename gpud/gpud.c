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
#include "threadpool.h"

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
    /* the placement: gpud's backend holds the hot neurons (gpu_idx 1); the rest is cpud's share,
     * computed on the host here while cpud is down */
    const int32_t n_seq = ctl->n_parallel > 0 ? ctl->n_parallel : 1;
    const struct be_params bp = { .n_ctx = ctl->n_ctx, .n_seq = n_seq, .n_batch = ah->n_batch, .n_threads = nt,
                                  .on_device = g->act.gpu_idx };
    char backend[sizeof ctl->backend + 1], why[PI_MSG_MAX];
    snprintf(backend, sizeof backend, "%.*s", (int)sizeof ctl->backend, ctl->backend[0] ? ctl->backend : "auto");
    why[0] = '\0';
    if (ctl->n_gpu_layers > 0 && ctl->n_gpu_layers < ah->n_layer && strcmp(backend, "cpu")) {
        /* whole-layer placement (-ngl): the first layers on the GPU, the rest here on the host */
        struct be_params np = bp;
        np.n_gpu_layers = ctl->n_gpu_layers;
        np.cache_type = ctl->cache_type >= 0 ? (enum be_cache_type)ctl->cache_type : BE_CACHE_F16;
        np.on_device = NULL;
        g->be_ops = &be_ngl_ops;
        if ((rc = be_ngl_ops.open(&g->be, g->m, &np))) {
            if (strcmp(backend, "auto") || rc != -PI_E_UNSUPPORTED)
                return rc;
            /* auto without a device: every layer on the host */
            char no_gpu[PI_MSG_MAX];
            snprintf(no_gpu, sizeof no_gpu, "%s", pi_errmsg());
            fprintf(stderr, "gpud: -ngl %d: no GPU (%s): every layer on the CPU\n", ctl->n_gpu_layers, no_gpu);
            g->be = NULL;
            if ((rc = be_open_named("cpu", g->m, &bp, ctl->cache_type, &g->be_ops, &g->be, why, sizeof why)))
                return rc;
            snprintf(why, sizeof why, "%s", no_gpu);
        }
    } else if ((rc = be_open_named(ctl->n_gpu_layers == 0 ? "cpu" : backend, g->m, &bp, ctl->cache_type, &g->be_ops,
                                   &g->be, why, sizeof why))) {
        return rc;
    }
    if (why[0])
        fprintf(stderr, "gpud: --backend %s: not using cuda (%s)\n", backend, why);
    snprintf(ctl->backend_why, sizeof ctl->backend_why, "%s", why);
    snprintf(ctl->backend_used, sizeof ctl->backend_used, "%s", g->be_ops->name);
    /* device memory by kind, from the backend's allocator (status, --json-stats, [perf]) */
    struct be_mem mem = { 0 };
    g->be_ops->mem(g->be, &mem);
    ctl->vram_weights = mem.weights, ctl->vram_hot = mem.hot, ctl->vram_pred = mem.pred, ctl->vram_kv = mem.kv;
    ctl->vram_scratch = mem.scratch, ctl->vram_context = mem.context, ctl->vram_device_used = mem.device_used;
    /* the act segment pinned and mapped for the per-layer hand-off (the device writes h and the masks
     * into it and reads the cold share from it: pipeline.c) */
    if (g->be_ops->host_register) {
        if (g->be_ops->host_register(g->be, g->act_seg.base, g->act_seg.size))
            fprintf(stderr, "gpud: the act segment is not mapped (%s): the hand-off copies synchronously\n",
                    pi_errmsg());
        else
            g->act_pinned = true;
    }
    /* a device backend leaves the host share (cpud's, while cpud is down) to host threads */
    if (g->be_ops != &be_cpu_ops && (rc = pool_new(&g->host_pool, nt)))
        return rc;
    g->use_predictor = pred_available(g->m);
    g->pred_on_device = g->use_predictor && g->be_ops != &be_cpu_ops && g->be_ops->predict;
    /* a per-layer hop to predictord and back costs two cross-process wake-ups (pi_ctl.predict_in);
     * the audit runs there */
    g->pred_local = g->pred_on_device || (ctl->predict_in == PI_PREDICT_IN_GPUD && !(ctl->audit_rate > 0.0f));
    const struct eval_params ep = { .n_batch = ah->n_batch, .sparse = g->use_predictor, .on_device = g->act.gpu_idx,
                                    .pool = g->host_pool };
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
    /* steps of each session are numbered apart: the act segment's keys (mask_seq, ycold_seq) carry no
     * epoch, so a key an older session left never matches a step of this one */
    g->seq = g->epoch << 40;
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
    pool_free(g->host_pool);
    model_free(g->m);
    shm_detach(&g->act_seg);
    stage_fini(&g->rt);
}
