/* sampling.h — next-token selection: penalties (repeat, frequency, presence) → greedy, or
 * top-k → top-p → min-p → temperature → a draw. The draw's randomness is a pure function of (seed,
 * position) and the penalties a pure function of the token history passed in, so a request replayed
 * after a stage restart (its history rebuilt from its tokens) produces the same tokens.
 *
 * Log-probabilities (samp_sample_lp) are those of the model's distribution after the penalties and
 * before every other sampler: log-softmax of the penalized logits at temperature 1, over the whole
 * vocabulary — what OpenAI reports (the raw model distribution), not llama-server's default of the
 * probabilities after the sampler chain. */
#ifndef PI_SAMPLING_H
#define PI_SAMPLING_H

#include <stddef.h>
#include <stdint.h>

struct samp_params {
    float temp;           /* <= 0: greedy */
    int32_t top_k;        /* <= 0: off */
    float top_p;          /* >= 1: off */
    float min_p;          /* <= 0: off */
    float repeat_penalty; /* 1: off */
    int32_t repeat_last_n;/* window of recent tokens the penalties look at (<= 0: all of them) */
    float frequency_penalty; /* 0: off; logit -= count in the window * this */
    float presence_penalty;  /* 0: off; logit -= this, once, if the token is in the window */
    uint64_t seed;
};

/* The most candidates samp_best returns (and a backend's topk op, engine/backend.h). */
#define SAMP_BEST_MAX 64

/* OpenAI's most top_logprobs: the bound of every per-token record that crosses processes. */
#define SAMP_MAX_TOP_LOGPROBS 20

/* One sampled token's log-probabilities (see the top of this file for which distribution). */
struct samp_logprobs {
    float logprob;                             /* the sampled token's */
    int32_t n_top;                             /* candidates below, most likely first */
    int32_t top_id[SAMP_MAX_TOP_LOGPROBS];     /* ties: lower id first */
    float top_logprob[SAMP_MAX_TOP_LOGPROBS];  /* -INFINITY for a banned token */
};

/* llama.cpp's defaults: temp 0.8, top-k 40, top-p 0.95, min-p 0.05, repeat penalty 1.0 over 64,
 * no frequency or presence penalty. */
void samp_defaults(struct samp_params *p);

struct samp_state; /* scratch reused across calls (candidate arrays of n_vocab) */
int samp_new(struct samp_state **out, int32_t n_vocab);
void samp_free(struct samp_state *s);

/* Pick the token at position `pos` (the index the token will occupy) from logits (n_vocab, not
 * modified). history: the tokens so far (prompt + generated), for the penalties. */
int32_t samp_sample(struct samp_state *s, const struct samp_params *p, const float *logits,
                    const int32_t *history, size_t n_history, uint64_t pos);

/* samp_sample, and (lp not NULL) the sampled token's log-probability and the n_top (0..
 * SAMP_MAX_TOP_LOGPROBS, clamped) most likely tokens' into *lp. The token is the one samp_sample
 * picks: the log-probabilities never change the choice. */
int32_t samp_sample_lp(struct samp_state *s, const struct samp_params *p, const float *logits,
                       const int32_t *history, size_t n_history, uint64_t pos, int32_t n_top,
                       struct samp_logprobs *lp);

/* Sampling from a few candidates instead of the whole row (a device computes them, and only they
 * cross to the host): samp_top_needed(p) is the number of best tokens that decide p's choice —
 * 1 for greedy, top_k with top-k on — or 0 when the whole row is needed (penalties, or no top-k).
 * samp_sample_top picks from the k >= samp_top_needed(p) best tokens of the row, in cmp order
 * (logit descending, then id ascending; ids and their logits as in the row; -0 and +0 equal): the
 * very token samp_sample picks from the whole row (tests/test_sampling.c checks it). */
int32_t samp_top_needed(const struct samp_params *p);
/* samp_top_needed(p) where a backend's topk can give that many of a row of n_vocab (1..SAMP_BEST_MAX,
 * at most n_vocab), else 0: the k gpud and the in-process loop ask for, the one rule for both */
int32_t samp_top_asked(const struct samp_params *p, int32_t n_vocab);
/* The k best tokens of a row of n logits in that order, as ids and their logits (k <= n): what a
 * backend's topk op returns (gpud/cuda/cuk_topk.cu computes the same on the device). NaN ranks
 * below -inf. */
void samp_best(const float *l, int32_t n, int32_t k, int32_t *ids, float *vals);
int32_t samp_sample_top(struct samp_state *s, const struct samp_params *p, const int32_t *ids, const float *logits,
                        int32_t k, uint64_t pos);

/* Uniform double in [0, 1) from (seed, pos): splitmix64 of a mix of both. */
double samp_uniform(uint64_t seed, uint64_t pos);

#endif
