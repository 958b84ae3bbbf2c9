/* generate.h — one completion: prefill the prompt, then sample and evaluate token by token.
 * Shared by `pictl run --inproc` and (later) the pipeline's gpud, so both produce the same tokens. */
#ifndef PI_GENERATE_H
#define PI_GENERATE_H

#include <stdbool.h>
#include <stdint.h>

#include "eval.h"
#include "sampling.h"

struct gen_params {
    int32_t n_predict; /* tokens to generate; < 0: until EOG or the context is full */
    bool ignore_eos;   /* keep going past end-of-generation tokens */
    /* the callback never reads the logits: where the sampling parameters let k candidates decide
     * (samp_top_needed) and the evaluator has `top`, only those are computed on the host side, the
     * callback gets NULL logits, and the tokens are the same (samp_sample_top) */
    bool candidates_only;
    struct samp_params samp;
};

struct gen_stats {
    int32_t n_prompt, n_gen;
    double prefill_ms, decode_ms; /* decode_ms covers the evaluations of generated tokens */
    bool hit_context_end;         /* stopped because the KV cache was full */
};

/* Called once per generated token with the logits it was sampled from (NULL with
 * candidates_only). Non-zero return stops the generation (and is returned by gen_run if negative). */
typedef int (*gen_token_fn)(void *user, int32_t id, const float *logits, int32_t n_vocab);

/* The prompt must fit the context: otherwise -PI_E_RANGE naming both lengths. */
int gen_run(struct pi_ctx *c, const struct pi_model *m, const struct gen_params *gp, const int32_t *prompt,
            int32_t n_prompt, gen_token_fn cb, void *user, struct gen_stats *st);

/* Any evaluator: logits (n_vocab) of the last of n tokens at positions pos..pos+n-1, whose
 * predecessors are already in its cache. */
typedef int (*gen_eval_fn)(void *self, const int32_t *toks, int32_t n, int32_t pos, float *logits);
/* The same, the last token's k best candidates instead (samp_best's order) */
typedef int (*gen_top_fn)(void *self, const int32_t *toks, int32_t n, int32_t pos, int32_t k, int32_t *ids,
                          float *vals);
struct gen_eval {
    gen_eval_fn fn;
    gen_top_fn top; /* may be NULL */
    void *self;
    int32_t n_ctx;
};

/* gen_run over any evaluator, continuing a generation: tokens holds the prompt (n_prompt) followed
 * by n_done tokens generated before (a replay after a restart); they are prefilled together and
 * the next token is sampled at position n_prompt + n_done, so the result equals an uninterrupted
 * run. n_predict counts the n_done tokens too. */
int gen_run_eval(const struct gen_eval *ev, const struct pi_model *m, const struct gen_params *gp,
                 const int32_t *tokens, int32_t n_prompt, int32_t n_done, gen_token_fn cb, void *user,
                 struct gen_stats *st);

double pi_now_ms(void); /* monotonic clock */

#endif
