/* sampling.h — next-token selection: greedy, or repeat penalty → top-k → top-p → min-p →
 * temperature → a draw. The draw's randomness is a pure function of (seed, position), so a request
 * replayed after a stage restart produces the same tokens. */
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
    int32_t repeat_last_n;/* window of recent tokens the penalty looks at */
    uint64_t seed;
};

/* llama.cpp's defaults: temp 0.8, top-k 40, top-p 0.95, min-p 0.05, repeat penalty 1.0 over 64. */
void samp_defaults(struct samp_params *p);

struct samp_state; /* scratch reused across calls (candidate arrays of n_vocab) */
int samp_new(struct samp_state **out, int32_t n_vocab);
void samp_free(struct samp_state *s);

/* Pick the token at position `pos` (the index the token will occupy) from logits (n_vocab, not
 * modified). history: the tokens so far (prompt + generated), for the repeat penalty. */
int32_t samp_sample(struct samp_state *s, const struct samp_params *p, const float *logits,
                    const int32_t *history, size_t n_history, uint64_t pos);

/* Uniform double in [0, 1) from (seed, pos): splitmix64 of a mix of both. */
double samp_uniform(uint64_t seed, uint64_t pos);

#endif
