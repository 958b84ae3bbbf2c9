/* generate.c — the prefill + decode loop. */
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

int gen_run(struct pi_ctx *c, const struct pi_model *m, const struct gen_params *gp, const int32_t *prompt,
            int32_t n_prompt, gen_token_fn cb, void *user, struct gen_stats *st)
{
    const int32_t V = m->hp.n_vocab, n_ctx = ctx_n_ctx(c);
    memset(st, 0, sizeof *st);
    st->n_prompt = n_prompt;
    if (n_prompt <= 0)
        return pi_fail(PI_E_INVAL, "generate: empty prompt");
    if (n_prompt >= n_ctx)
        return pi_fail(PI_E_RANGE, "generate: the prompt has %d tokens but the context holds %d (raise -c)",
                       n_prompt, n_ctx);
    const int32_t max_new = gp->n_predict < 0 ? n_ctx - n_prompt : gp->n_predict;
    int32_t *hist = malloc(((size_t)n_prompt + (size_t)max_new + 1) * sizeof *hist);
    float *logits = malloc((size_t)V * sizeof *logits);
    struct samp_state *ss = NULL;
    int rc = samp_new(&ss, V);
    if (!hist || !logits) {
        rc = pi_fail(PI_E_NOMEM, "generate: out of memory");
        goto out;
    }
    if (rc)
        goto out;
    memcpy(hist, prompt, (size_t)n_prompt * sizeof *hist);
    size_t n_hist = (size_t)n_prompt;

    double t0 = pi_now_ms();
    if ((rc = ctx_eval(c, prompt, n_prompt, 0, logits, false)))
        goto out;
    st->prefill_ms = pi_now_ms() - t0;

    t0 = pi_now_ms();
    for (int32_t i = 0; i < max_new; i++) {
        const int32_t pos = (int32_t)n_hist;
        const int32_t id = samp_sample(ss, &gp->samp, logits, hist, n_hist, (uint64_t)pos);
        hist[n_hist++] = id;
        st->n_gen++;
        int stop = cb ? cb(user, id, logits, V) : 0;
        if (stop) {
            rc = stop < 0 ? stop : 0;
            break;
        }
        if (!gp->ignore_eos && tok_is_eog(m->tok, id))
            break;
        if (i + 1 == max_new)
            break;
        if (pos >= n_ctx) { /* the new token has no KV slot left */
            st->hit_context_end = true;
            break;
        }
        if ((rc = ctx_eval(c, &id, 1, pos, logits, false)))
            break;
    }
    st->decode_ms = pi_now_ms() - t0;
out:
    samp_free(ss);
    free(hist);
    free(logits);
    return rc;
}
