/* gpud.c — stage set-up and the request loop: take a queued request (or replay one that a previous
 * gpud was running when it died), generate, publish each token into the request slot. */
#include "gpud.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dataplane.h"
#include "futex.h"
#include "generate.h"
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
    const struct be_params bp = { .n_ctx = ctl->n_ctx, .n_seq = 1, .n_batch = ah->n_batch, .n_threads = nt,
                                  .on_device = g->act.gpu_idx };
    if ((rc = g->be_ops->open(&g->be, g->m, &bp)))
        return rc;
    g->use_predictor = pred_available(g->m);
    g->pred_on_device = g->use_predictor && g->be_ops != &be_cpu_ops && g->be_ops->predict;
    const struct eval_params ep = { .n_batch = ah->n_batch, .sparse = g->use_predictor, .on_device = g->act.gpu_idx };
    if ((rc = eval_init(&g->ev, g->m, g->be_ops, g->be, &ep)) || (rc = batch_buf_init(&g->bb, ah->n_batch)))
        return rc;
    gpud_route_ffn(g);
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
    fprintf(stderr, "gpud: epoch %llu, model %s, %s backend, %d threads, n_ctx %d\n", (unsigned long long)g->epoch,
            g->m->name, g->be_ops->name, nt, ctl->n_ctx);
    return 0;
}

void gpud_fini(struct gpud *g)
{
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

/* RUNNING requests first (a previous gpud died running them), then the oldest QUEUED one. */
static int pick_request(struct pi_ctl *ctl)
{
    int best = -1;
    uint64_t best_id = UINT64_MAX;
    for (int i = 0; i < PI_MAX_REQUESTS; i++) {
        uint32_t st = atomic_load_explicit(&ctl->reqs[i].state, memory_order_acquire);
        if (st == PI_REQ_RUNNING)
            return i;
        if (st == PI_REQ_QUEUED && ctl->reqs[i].id < best_id) {
            best = i;
            best_id = ctl->reqs[i].id;
        }
    }
    return best;
}

struct req_sink {
    struct gpud *g;
    struct pi_request *r;
    int logits_fd;
    int32_t cap; /* most generated tokens the slot holds */
};

/* Publish one token: write it, then release-store n_gen (clients acquire n_gen before reading
 * tokens[]), then wake clients sleeping on n_gen. The logits row goes to its fixed place in the
 * file, so a replay rewrites rows instead of appending twice. */
static int on_token(void *user, int32_t id, const float *logits, int32_t n_vocab)
{
    struct req_sink *s = user;
    struct pi_request *r = s->r;
    const uint32_t n = atomic_load_explicit(&r->n_gen, memory_order_relaxed);
    if (s->logits_fd >= 0) {
        const size_t row = (size_t)n_vocab * sizeof(float);
        if (pwrite(s->logits_fd, logits, row, (off_t)(row * n)) != (ssize_t)row)
            return pi_fail(errno ? errno : PI_E_IO, "gpud: cannot write logits to '%s'", r->logits_path);
    }
    r->tokens[r->n_prompt + (int32_t)n] = id;
    atomic_store_explicit(&r->n_gen, n + 1, memory_order_release);
    pi_futex_wake_all(&r->n_gen);
    if ((int32_t)n + 1 >= s->cap)
        return 1; /* the slot is full: stop as if n_predict was reached */
    return stage_should_stop(&s->g->rt) ? -ECANCELED : 0;
}

static void finish(struct pi_request *r, int rc)
{
    if (rc) {
        const char *d = pi_errmsg();
        r->error = rc;
        snprintf(r->errmsg, sizeof r->errmsg, "%s%s%s", pi_strerror(rc), d[0] ? ": " : "", d);
    }
    /* release: tokens, timings and errmsg are visible to a client that acquires the state */
    atomic_store_explicit(&r->state, rc ? PI_REQ_FAILED : PI_REQ_DONE, memory_order_release);
    pi_futex_wake_all(&r->n_gen);
}

static int run_request(struct gpud *g, struct pi_request *r)
{
    uint32_t expected = PI_REQ_QUEUED;
    if (!atomic_compare_exchange_strong_explicit(&r->state, &expected, PI_REQ_RUNNING, memory_order_acq_rel,
                                                 memory_order_acquire)) {
        if (expected != PI_REQ_RUNNING)
            return 0; /* released meanwhile */
        if (++r->replays > GPUD_MAX_REPLAYS) {
            finish(r, pi_fail(PI_E_RANGE, "gpud died %d times running this request; giving up", GPUD_MAX_REPLAYS));
            return 0;
        }
        fprintf(stderr, "gpud: replaying request %llu from %u generated tokens\n", (unsigned long long)r->id,
                atomic_load_explicit(&r->n_gen, memory_order_acquire));
    }
    g->req_id = r->id;
    g->req_dense = (r->flags & PI_REQ_DENSE) != 0;
    const int32_t n_done = (int32_t)atomic_load_explicit(&r->n_gen, memory_order_acquire);
    if (r->n_prompt <= 0 || r->n_prompt + n_done > PI_REQ_MAX_TOKENS) {
        finish(r, pi_fail(PI_E_RANGE, "gpud: request with %d prompt tokens", r->n_prompt));
        return 0;
    }
    struct gen_params gp = { .n_predict = r->n_predict, .ignore_eos = (r->flags & PI_REQ_IGNORE_EOS) != 0 };
    gp.samp = (struct samp_params){ .temp = r->temp, .top_k = r->top_k, .top_p = r->top_p, .min_p = r->min_p,
                                    .repeat_penalty = r->repeat_penalty, .repeat_last_n = r->repeat_last_n,
                                    .seed = r->seed };
    struct req_sink sink = { .g = g, .r = r, .logits_fd = -1, .cap = PI_REQ_MAX_TOKENS - r->n_prompt };
    int rc = 0;
    if (r->logits_path[0]) {
        sink.logits_fd = open(r->logits_path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        if (sink.logits_fd < 0)
            rc = pi_fail(errno, "gpud: cannot open '%.200s'", r->logits_path);
        /* a replay drops a row the dead gpud may have half written */
        else if (ftruncate(sink.logits_fd, (off_t)n_done * g->m->hp.n_vocab * (off_t)sizeof(float)))
            rc = pi_fail(errno, "gpud: cannot truncate '%.200s'", r->logits_path);
    }
    struct gen_stats st;
    if (!rc) {
        const struct gen_eval ev = { .fn = gpud_eval, .self = g, .n_ctx = g->be_ops->n_ctx(g->be) };
        rc = gen_run_eval(&ev, g->m, &gp, r->tokens, r->n_prompt, n_done, on_token, &sink, &st);
    }
    if (sink.logits_fd >= 0 && close(sink.logits_fd) && !rc)
        rc = pi_fail(errno, "gpud: cannot close '%.200s'", r->logits_path);
    if (rc == -ECANCELED)
        return rc; /* stopping: leave it RUNNING, a next gpud would replay it */
    if (!rc) {
        r->prefill_ns = (uint64_t)(st.prefill_ms * 1e6);
        r->decode_ns = (uint64_t)(st.decode_ms * 1e6);
    }
    finish(r, rc);
    return 0;
}

int gpud_run(struct gpud *g)
{
    struct pi_ctl *ctl = g->rt.ctl;
    while (!stage_should_stop(&g->rt)) {
        /* acquire: pairs with the supervisor's release increment after it filled a request */
        const uint32_t seen = atomic_load_explicit(&ctl->req_seq, memory_order_acquire);
        const int slot = pick_request(ctl);
        if (slot < 0) {
            pi_futex_wait(&ctl->req_seq, seen, GPUD_IDLE_WAIT_MS);
            continue;
        }
        int rc = run_request(g, &ctl->reqs[slot]);
        if (rc == -ECANCELED)
            break;
    }
    return 0;
}
