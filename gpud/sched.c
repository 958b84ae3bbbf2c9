/* sched.c — continuous batching: gpud runs up to n_parallel requests at once, one evaluator step at
 * a time.
 *
 * Each step takes, under the step's token budget (the act segment's n_batch), the next token of
 * every decoding sequence first, then chunks of the pending prompts (oldest request first); a new
 * request joins at the next step, a finished one leaves and frees its sequence. Each sequence
 * samples with its own parameters and its own (seed, position) stream, so its tokens are those it
 * would produce alone (the invariance contract: a token's logits do not depend on the batch).
 *
 * Requests are the ctl segment's table: RUNNING ones without a sequence here are replays (a gpud
 * died running them: prompt + generated tokens are prefilled again), then QUEUED ones by id. A
 * free sequence keeps the tokens of its cells: a request whose tokens start with them skips that
 * prefix (its cells hold exactly what it would compute). A request whose `cancel` the supervisor
 * set is stopped at the next step. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "futex.h"
#include "gpud.h"
#include "pi_err.h"
#include "tokenizer.h"

/* A request that killed gpud this many times is failed instead of replayed again. */
#define GPUD_MAX_REPLAYS 3
#define GPUD_IDLE_WAIT_MS 100

int sched_init(struct gpud *g, int32_t n_seq)
{
    const int32_t n_ctx = g->ev.ops->n_ctx(g->ev.be), nb = g->ev.n_batch;
    g->n_seq = n_seq;
    g->seqs = calloc((size_t)n_seq, sizeof *g->seqs);
    g->logits = malloc((size_t)nb * (size_t)g->m->hp.n_vocab * sizeof *g->logits);
    g->row_seq = malloc((size_t)nb * sizeof *g->row_seq);
    g->top_ids = malloc((size_t)nb * SAMP_BEST_MAX * sizeof *g->top_ids);
    g->top_vals = malloc((size_t)nb * SAMP_BEST_MAX * sizeof *g->top_vals);
    if (!g->seqs || !g->logits || !g->row_seq || !g->top_ids || !g->top_vals)
        return pi_fail(PI_E_NOMEM, "gpud: out of memory for %d sequences", n_seq);
    for (int32_t s = 0; s < n_seq; s++) {
        g->seqs[s].slot = -1;
        g->seqs[s].logits_fd = -1;
        if (!(g->seqs[s].cached = malloc((size_t)n_ctx * sizeof *g->seqs[s].cached)))
            return pi_fail(PI_E_NOMEM, "gpud: out of memory for %d sequences", n_seq);
    }
    return samp_new(&g->ss, g->m->hp.n_vocab);
}

void sched_fini(struct gpud *g)
{
    for (int32_t s = 0; g->seqs && s < g->n_seq; s++) {
        if (g->seqs[s].logits_fd >= 0)
            close(g->seqs[s].logits_fd);
        free(g->seqs[s].cached);
    }
    free(g->seqs);
    free(g->logits);
    free(g->row_seq);
    free(g->top_ids);
    free(g->top_vals);
    samp_free(g->ss);
}

static void finish(struct pi_request *r, int rc)
{
    if (rc) {
        const char *d = pi_errmsg();
        r->error = rc;
        snprintf(r->errmsg, sizeof r->errmsg, "%s%s%s", pi_strerror(rc), d[0] ? ": " : "", d);
    }
    atomic_store_explicit(&r->seq, -1, memory_order_relaxed);
    /* release: tokens, timings and errmsg are visible to a client that acquires the state */
    atomic_store_explicit(&r->state, rc ? PI_REQ_FAILED : PI_REQ_DONE, memory_order_release);
    pi_futex_wake_all(&r->n_gen);
}

/* The request leaves its sequence (done, failed or cancelled); the cells keep their tokens for
 * prefix reuse. */
static void seq_leave(struct gpud *g, struct gpud_seq *q, int rc)
{
    struct pi_request *r = &g->rt.ctl->reqs[q->slot];
    if (q->logits_fd >= 0) {
        if (close(q->logits_fd) && !rc)
            rc = pi_fail(errno, "gpud: cannot close '%.200s'", r->logits_path);
        q->logits_fd = -1;
    }
    const uint64_t now = stage_now_ns();
    if (!rc) { /* no first token (-n 0): nothing was evaluated, no time to report */
        r->prefill_ns = q->first_ns ? q->first_ns - q->start_ns : 0;
        r->decode_ns = q->first_ns ? now - q->first_ns : 0;
    }
    finish(r, rc);
    q->slot = -1;
}

static bool is_ours(const struct gpud *g, int slot)
{
    for (int32_t s = 0; s < g->n_seq; s++)
        if (g->seqs[s].slot == slot)
            return true;
    return false;
}

/* A replay (RUNNING, not ours: a previous gpud died running it), else the oldest QUEUED. */
static int next_request(const struct gpud *g)
{
    const struct pi_ctl *ctl = g->rt.ctl;
    int best = -1;
    uint64_t best_id = UINT64_MAX;
    for (int i = 0; i < PI_MAX_REQUESTS; i++) {
        const uint32_t st = atomic_load_explicit(&ctl->reqs[i].state, memory_order_acquire);
        if (st == PI_REQ_RUNNING && !is_ours(g, i))
            return i;
        if (st == PI_REQ_QUEUED && ctl->reqs[i].id < best_id) {
            best = i;
            best_id = ctl->reqs[i].id;
        }
    }
    return best;
}

/* The free sequence whose cached cells share the longest prefix with tokens[0..n) (same FFN mode),
 * and that prefix's length (< n: the last known token is always evaluated, for its logits). */
static int32_t pick_seq(const struct gpud *g, const int32_t *tokens, int32_t n, bool dense, int32_t *lcp)
{
    int32_t best = -1, best_len = -1;
    for (int32_t s = 0; s < g->n_seq; s++) {
        const struct gpud_seq *q = &g->seqs[s];
        if (q->slot >= 0)
            continue;
        int32_t k = 0;
        if (q->cached_dense == dense)
            while (k < q->n_cached && k < n - 1 && q->cached[k] == tokens[k])
                k++;
        if (k > best_len) {
            best = s;
            best_len = k;
        }
    }
    *lcp = best_len < 0 ? 0 : best_len;
    return best;
}

/* Take requests into free sequences. */
static void admit(struct gpud *g)
{
    struct pi_ctl *ctl = g->rt.ctl;
    const int32_t n_ctx = g->ev.ops->n_ctx(g->ev.be);
    for (;;) {
        bool any_free = false;
        for (int32_t s = 0; s < g->n_seq && !any_free; s++)
            any_free = g->seqs[s].slot < 0;
        if (!any_free) {
            const int waiting = next_request(g);
            /* only gpud writes it, the client reads it after the request ended (state release) */
            if (waiting >= 0 && atomic_load_explicit(&ctl->reqs[waiting].state, memory_order_acquire) == PI_REQ_QUEUED)
                ctl->reqs[waiting].queued_steps++;
            return;
        }
        const int slot = next_request(g);
        if (slot < 0)
            return;
        struct pi_request *r = &ctl->reqs[slot];
        uint32_t expected = PI_REQ_QUEUED;
        if (!atomic_compare_exchange_strong_explicit(&r->state, &expected, PI_REQ_RUNNING, memory_order_acq_rel,
                                                     memory_order_acquire)) {
            if (expected != PI_REQ_RUNNING)
                continue; /* released meanwhile */
            if (++r->replays > GPUD_MAX_REPLAYS) {
                finish(r, pi_fail(PI_E_RANGE, "gpud died %d times running this request; giving up",
                                  GPUD_MAX_REPLAYS));
                continue;
            }
            fprintf(stderr, "gpud: replaying request %llu from %u generated tokens\n", (unsigned long long)r->id,
                    atomic_load_explicit(&r->n_gen, memory_order_acquire));
        }
        const int32_t n_done = (int32_t)atomic_load_explicit(&r->n_gen, memory_order_acquire);
        if (r->n_prompt <= 0 || r->n_prompt + n_done > PI_REQ_MAX_TOKENS) {
            finish(r, pi_fail(PI_E_RANGE, "gpud: request with %d prompt tokens", r->n_prompt));
            continue;
        }
        if (r->n_prompt >= n_ctx) {
            finish(r, pi_fail(PI_E_RANGE, "generate: the prompt has %d tokens but the context holds %d (raise -c)",
                              r->n_prompt, n_ctx));
            continue;
        }
        const bool dense = (r->flags & PI_REQ_DENSE) != 0 || !g->use_predictor;
        const int32_t n_known = r->n_prompt + n_done;
        int32_t lcp;
        const int32_t s = pick_seq(g, r->tokens, n_known, dense, &lcp);
        struct gpud_seq *q = &g->seqs[s];
        *q = (struct gpud_seq){ .slot = slot, .req_id = r->id, .n_past = lcp, .n_known = n_known, .dense = dense,
                                .logits_fd = -1, .start_ns = stage_now_ns(), .cached = q->cached,
                                .n_cached = lcp, .cached_dense = dense };
        q->max_new = r->n_predict < 0 ? n_ctx - r->n_prompt : r->n_predict;
        if (q->max_new > PI_REQ_MAX_TOKENS - r->n_prompt)
            q->max_new = PI_REQ_MAX_TOKENS - r->n_prompt;
        int rc = 0;
        if (lcp == 0)
            rc = g->ev.ops->seq_clear(g->ev.be, s);
        if (!rc && r->logits_path[0]) {
            q->logits_fd = open(r->logits_path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
            if (q->logits_fd < 0)
                rc = pi_fail(errno, "gpud: cannot open '%.200s'", r->logits_path);
            /* a replay drops a row the dead gpud may have half written */
            else if (ftruncate(q->logits_fd, (off_t)n_done * g->m->hp.n_vocab * (off_t)sizeof(float)))
                rc = pi_fail(errno, "gpud: cannot truncate '%.200s'", r->logits_path);
        }
        if (!rc && (n_done >= q->max_new || n_known >= n_ctx))
            rc = 1; /* nothing left to generate (a replay that had finished) */
        atomic_store_explicit(&r->seq, s, memory_order_relaxed);
        if (rc)
            seq_leave(g, q, rc > 0 ? 0 : rc);
        else if (lcp)
            g->prefix_reused += (uint64_t)lcp;
    }
}

/* Assemble the next step: decoding sequences' tokens first, then prompt chunks; only sequences of
 * one FFN mode (dense or sparse: the evaluator's per-step flag), alternating when both wait. */
static int32_t build_step(struct gpud *g)
{
    struct pi_ctl *ctl = g->rt.ctl;
    bool has[2] = { false, false };
    for (int32_t s = 0; s < g->n_seq; s++)
        if (g->seqs[s].slot >= 0)
            has[g->seqs[s].dense] = true;
    if (!has[0] && !has[1])
        return 0;
    const bool dense = has[0] && has[1] ? !g->last_dense : has[1];
    g->last_dense = dense;
    g->ev.sparse = g->use_predictor && !dense;
    batch_buf_clear(&g->bb);
    int32_t budget = g->ev.n_batch, n_rows = 0;
    for (int pass = 0; pass < 2 && budget > 0; pass++) {
        /* pass 0: one token to decode; pass 1: prompts, oldest request first */
        for (;;) {
            int32_t pick = -1;
            for (int32_t s = 0; s < g->n_seq; s++) {
                const struct gpud_seq *q = &g->seqs[s];
                const int32_t left = q->n_known - q->n_past; /* tokens not yet in its cells */
                if (q->slot < 0 || q->dense != dense || q->in_step || left <= 0 || (pass == 0) != (left == 1))
                    continue;
                if (pick < 0 || q->req_id < g->seqs[pick].req_id)
                    pick = s;
            }
            if (pick < 0 || budget == 0)
                break;
            struct gpud_seq *q = &g->seqs[pick];
            const struct pi_request *r = &ctl->reqs[q->slot];
            int32_t take = q->n_known - q->n_past;
            if (take > budget)
                take = budget;
            for (int32_t i = 0; i < take; i++) {
                const int32_t p = q->n_past + i;
                const bool last = p == q->n_known - 1;
                batch_buf_add(&g->bb, r->tokens[p], p, pick, last);
                q->cached[p] = r->tokens[p];
                if (last)
                    g->row_seq[n_rows++] = pick;
            }
            q->n_past += take;
            q->n_cached = q->n_past;
            q->in_step = true;
            budget -= take;
        }
    }
    for (int32_t s = 0; s < g->n_seq; s++)
        g->seqs[s].in_step = false;
    return g->bb.n;
}

static struct samp_params req_samp(const struct pi_request *r)
{
    return (struct samp_params){ .temp = r->temp, .top_k = r->top_k, .top_p = r->top_p, .min_p = r->min_p,
                                 .repeat_penalty = r->repeat_penalty, .repeat_last_n = r->repeat_last_n,
                                 .frequency_penalty = r->frequency_penalty,
                                 .presence_penalty = r->presence_penalty, .seed = r->seed };
}

/* Candidates per row that decide every row's token of this step (1..SAMP_BEST_MAX), or 0 when some
 * row needs its whole logits row (penalties, sampling without top-k, log-probabilities, a logits
 * dump) or the backend has no topk: then the rows are copied as they are. The token is the same
 * either way (samp_sample_top). */
static int32_t step_top_k(const struct gpud *g, int32_t n_rows)
{
    if (!g->ev.ops->topk)
        return 0;
    int32_t k = 1;
    for (int32_t i = 0; i < n_rows; i++) {
        const struct gpud_seq *q = &g->seqs[g->row_seq[i]];
        if (q->slot < 0)
            continue;
        const struct pi_request *r = &g->rt.ctl->reqs[q->slot];
        const struct samp_params sp = req_samp(r);
        const int32_t need = samp_top_asked(&sp, g->m->hp.n_vocab);
        if (!need || (r->flags & PI_REQ_LOGPROBS) || q->logits_fd >= 0)
            return 0;
        k = need > k ? need : k;
    }
    return k;
}

/* Sample the next token of sequence s from its logits row (or, logits NULL, from its k best
 * candidates ids/vals), publish it, and end the request when it is done: the stop rules of
 * gen_run_eval (engine/generate.c), so pipeline = in-process. */
static void after_logits(struct gpud *g, int32_t s, const float *logits, const int32_t *ids, const float *vals,
                         int32_t k)
{
    struct gpud_seq *q = &g->seqs[s];
    struct pi_request *r = &g->rt.ctl->reqs[q->slot];
    const int32_t V = g->m->hp.n_vocab, n_ctx = g->ev.ops->n_ctx(g->ev.be);
    const struct samp_params sp = req_samp(r);
    const int32_t pos = q->n_known;
    const uint32_t n = atomic_load_explicit(&r->n_gen, memory_order_relaxed);
    /* the penalties see the request's whole token history, which a replay has too: same tokens */
    const bool want_lp = logits && (r->flags & PI_REQ_LOGPROBS) && n < PI_LP_MAX_TOKENS; /* (step_top_k: rows) */
    struct samp_logprobs lp;
    const int32_t id = logits ? samp_sample_lp(g->ss, &sp, logits, r->tokens, (size_t)q->n_known, (uint64_t)pos,
                                               want_lp ? r->n_probs : 0, want_lp ? &lp : NULL)
                              : samp_sample_top(g->ss, &sp, ids, vals, k, (uint64_t)pos);
    if (want_lp) {
        static_assert(PI_LP_MAX_TOP == SAMP_MAX_TOP_LOGPROBS, "the shared record holds what the sampler gives");
        struct pi_logprob *rec = &g->rt.ctl->logprobs[q->slot][n];
        rec->logprob = lp.logprob;
        rec->n_top = lp.n_top;
        memcpy(rec->top_id, lp.top_id, (size_t)lp.n_top * sizeof *rec->top_id);
        memcpy(rec->top_logprob, lp.top_logprob, (size_t)lp.n_top * sizeof *rec->top_logprob);
    }
    if (!q->first_ns)
        q->first_ns = stage_now_ns();
    if (q->logits_fd >= 0 && logits) { /* (step_top_k takes whole rows for a dump) */
        const size_t row = (size_t)V * sizeof(float);
        if (pwrite(q->logits_fd, logits, row, (off_t)(row * n)) != (ssize_t)row) {
            seq_leave(g, q, pi_fail(errno ? errno : PI_E_IO, "gpud: cannot write logits to '%s'", r->logits_path));
            return;
        }
    }
    /* write the token (and its log-probabilities above), then release-store n_gen (clients acquire
     * n_gen before reading tokens[] and logprobs[]),
     * then wake clients sleeping on n_gen */
    r->tokens[r->n_prompt + (int32_t)n] = id;
    atomic_store_explicit(&r->n_gen, n + 1, memory_order_release);
    pi_futex_wake_all(&r->n_gen);
    q->n_known++;
    const bool eog = !(r->flags & PI_REQ_IGNORE_EOS) && tok_is_eog(g->m->tok, id);
    if (eog || (int32_t)n + 1 >= q->max_new || pos >= n_ctx || r->n_prompt + (int32_t)n + 1 >= PI_REQ_MAX_TOKENS)
        seq_leave(g, q, 0);
}

/* Stop the requests whose cancel flag the supervisor set. */
static void cancels(struct gpud *g)
{
    struct pi_ctl *ctl = g->rt.ctl;
    for (int32_t s = 0; s < g->n_seq; s++)
        if (g->seqs[s].slot >= 0 && atomic_load_explicit(&ctl->reqs[g->seqs[s].slot].cancel, memory_order_relaxed))
            seq_leave(g, &g->seqs[s], pi_fail(ECANCELED, "the request was cancelled"));
    for (int i = 0; i < PI_MAX_REQUESTS; i++) {
        struct pi_request *r = &ctl->reqs[i];
        uint32_t expected = PI_REQ_QUEUED;
        if (atomic_load_explicit(&r->cancel, memory_order_relaxed) &&
            atomic_compare_exchange_strong_explicit(&r->state, &expected, PI_REQ_RUNNING, memory_order_acq_rel,
                                                    memory_order_acquire))
            finish(r, pi_fail(ECANCELED, "the request was cancelled before it started"));
    }
}

int gpud_run(struct gpud *g)
{
    struct pi_ctl *ctl = g->rt.ctl;
    const int32_t V = g->m->hp.n_vocab;
    while (!stage_should_stop(&g->rt)) {
        const uint64_t t0 = stage_now_ns();
        /* acquire: pairs with the supervisor's release increment after it filled a request */
        const uint32_t seen = atomic_load_explicit(&ctl->req_seq, memory_order_acquire);
        cancels(g);
        admit(g);
        if (build_step(g) == 0) {
            pi_futex_wait(&ctl->req_seq, seen, GPUD_IDLE_WAIT_MS);
            continue;
        }
        const struct pi_batch b = batch_view(&g->bb);
        const int32_t top_k = step_top_k(g, batch_n_out(&b));
        const uint64_t t1 = stage_now_ns(), out0 = g->ev.phase_ns[EVAL_OUTPUT];
        int rc = top_k ? eval_batch_top(&g->ev, &b, top_k, g->top_ids, g->top_vals) : eval_batch(&g->ev, &b, g->logits);
        const uint64_t t2 = stage_now_ns(), out_ns = g->ev.phase_ns[EVAL_OUTPUT] - out0;
        if (rc)
            gpud_ffn_abandon(g); /* a batch that failed between layers leaves no wait on the device */
        if (stage_should_stop(&g->rt))
            break; /* stopping: requests stay RUNNING, a next gpud replays them */
        if (rc == -PI_E_DEVICE)
            return rc; /* the device's context is lost: the stage exits and is restarted, and the
                        * requests, still RUNNING, are replayed by the next gpud */
        if (rc) {
            /* the step failed: every request in it fails with the reason (their sequences' cells
             * are in an unknown state) */
            for (int32_t i = 0; i < b.n; i++) {
                struct gpud_seq *q = &g->seqs[b.seq[i]];
                if (q->slot >= 0) {
                    q->n_cached = 0;
                    seq_leave(g, q, rc);
                }
            }
            continue;
        }
        const int32_t n_rows = batch_n_out(&b);
        for (int32_t k = 0; k < n_rows; k++)
            if (g->seqs[g->row_seq[k]].slot >= 0)
                after_logits(g, g->row_seq[k], top_k ? NULL : g->logits + (size_t)k * V,
                             g->top_ids + (size_t)k * top_k, g->top_vals + (size_t)k * top_k, top_k);
        g->steps++;
        if (n_rows == b.n) { /* a decode step */
            const uint64_t t3 = stage_now_ns();
            g->dec.steps++;
            g->dec.wall_ns += t3 - t0;
            g->dec.outside_ns += (t3 - t0) - (t2 - t1);
            g->dec.output_ns += out_ns;
            g->dec.layers_ns += (t2 - t1) - out_ns;
        }
    }
    return 0;
}

void gpud_log_step_time(const struct gpud *g)
{
    const struct gpud_step_time *d = &g->dec;
    if (!d->steps)
        return;
    const double n = (double)d->steps * 1e3;
    fprintf(stderr,
            "gpud: %llu decode steps (%llu whole: one request to the backend, its step_top), %.1f us a step: "
            "%.1f on the host around the evaluator, %.1f enqueueing the layers, %.1f in the output and its wait "
            "(or the whole step)\n",
            (unsigned long long)d->steps, (unsigned long long)g->ev.whole_steps, (double)d->wall_ns / n,
            (double)d->outside_ns / n, (double)d->layers_ns / n, (double)d->output_ns / n);
}
