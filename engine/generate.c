/* generate.c — the prefill + decode loop, over any evaluator (in-process context or pipeline). */
#include "generate.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pi_err.h"
#include "tokenizer.h"

double pi_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int ctx_evaluator(void *self, const int32_t *toks, int32_t n, int32_t pos, float *logits)
{
    return ctx_eval(self, toks, n, pos, logits, false);
}

static int ctx_top_evaluator(void *self, const int32_t *toks, int32_t n, int32_t pos, int32_t k, int32_t *ids,
                             float *vals)
{
    return ctx_eval_top(self, toks, n, pos, k, ids, vals);
}

int gen_run(struct pi_ctx *c, const struct pi_model *m, const struct gen_params *gp, const int32_t *prompt,
            int32_t n_prompt, gen_token_fn cb, void *user, struct gen_stats *st)
{
    const struct gen_eval ev = { .fn = ctx_evaluator, .top = ctx_top_evaluator, .self = c, .n_ctx = ctx_n_ctx(c) };
    return gen_run_eval(&ev, m, gp, prompt, n_prompt, 0, cb, user, st);
}

int gen_run_eval(const struct gen_eval *ev, const struct pi_model *m, const struct gen_params *gp,
                 const int32_t *tokens, int32_t n_prompt, int32_t n_done, gen_token_fn cb, void *user,
                 struct gen_stats *st)
{
    const int32_t V = m->hp.n_vocab, n_ctx = ev->n_ctx;
    memset(st, 0, sizeof *st);
    st->n_prompt = n_prompt;
    if (n_prompt <= 0)
        return pi_fail(PI_E_INVAL, "generate: empty prompt");
    if (n_prompt >= n_ctx)
        return pi_fail(PI_E_RANGE, "generate: the prompt has %d tokens but the context holds %d (raise -c)",
                       n_prompt, n_ctx);
    const int32_t n_known = n_prompt + n_done;
    int32_t max_new = gp->n_predict < 0 ? n_ctx - n_prompt : gp->n_predict;
    max_new -= n_done;
    if (max_new <= 0 || n_known >= n_ctx) {
        st->hit_context_end = n_known >= n_ctx;
        return 0;
    }
    /* candidates instead of rows where they decide the token (gpud's step_top_k rule) */
    const int32_t k = gp->candidates_only && ev->top ? samp_top_asked(&gp->samp, V) : 0;
    int32_t top_ids[SAMP_BEST_MAX];
    float top_vals[SAMP_BEST_MAX];
    int32_t *hist = malloc(((size_t)n_known + (size_t)max_new + 1) * sizeof *hist);
    float *logits = malloc((size_t)V * sizeof *logits);
    struct samp_state *ss = NULL;
    int rc = samp_new(&ss, V);
    if (!hist || !logits) {
        rc = pi_fail(PI_E_NOMEM, "generate: out of memory");
        goto out;
    }
    if (rc)
        goto out;
    memcpy(hist, tokens, (size_t)n_known * sizeof *hist);
    size_t n_hist = (size_t)n_known;

    /* The prompt and any tokens generated before (a replay) in one prefill: the logits of a token
     * do not depend on how its predecessors were batched, so a replay continues exactly. */
    double t0 = pi_now_ms();
    if ((rc = k ? ev->top(ev->self, tokens, n_known, 0, k, top_ids, top_vals) : ev->fn(ev->self, tokens, n_known, 0,
                                                                                       logits)))
        goto out;
    st->prefill_ms = pi_now_ms() - t0;

    t0 = pi_now_ms();
    for (int32_t i = 0; i < max_new; i++) {
        const int32_t pos = (int32_t)n_hist;
        const int32_t id = k ? samp_sample_top(ss, &gp->samp, top_ids, top_vals, k, (uint64_t)pos)
                             : samp_sample(ss, &gp->samp, logits, hist, n_hist, (uint64_t)pos);
        hist[n_hist++] = id;
        st->n_gen++;
        int stop = cb ? cb(user, id, k ? NULL : logits, V) : 0;
        if (stop) {
            rc = stop < 0 ? stop : 0;
            break;
        }
        if (!gp->ignore_eos && tok_is_eog(m->tok, id))
            break;
        if (i + 1 == max_new)
            break;
        if (pos >= n_ctx) { /* the new token would have no KV slot to be evaluated in */
            st->hit_context_end = true;
            break;
        }
        if ((rc = k ? ev->top(ev->self, &id, 1, pos, k, top_ids, top_vals) : ev->fn(ev->self, &id, 1, pos, logits)))
            break;
    }
    st->decode_ms = pi_now_ms() - t0;
out:
    samp_free(ss);
    free(hist);
    free(logits);
    return rc;
}
