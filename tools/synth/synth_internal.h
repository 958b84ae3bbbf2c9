/* synth_internal.h — what the synth files share: the counter-based PRNG, the activation law, the
 * vocabulary. Not for use outside tools/synth. */
#ifndef PI_SYNTH_INTERNAL_H
#define PI_SYNTH_INTERNAL_H

#include <stdint.h>

#include "synth.h"

struct gguf_writer;

/* The SPM vocabulary: control + 256 byte tokens + pieces ("▁", characters, lowercase syllables). */
int synth_vocab_write(struct gguf_writer *w, int32_t n_vocab);
#define SYNTH_VOCAB_MIN 512
#define SYNTH_N_CONTROL 3 /* <unk> <s> </s>: ids 0, 1, 2 */

/* Per-rank firing probabilities p[0..n_ff) (descending) for the options; *zipf_used = exponent. */
int synth_rank_probs(const struct synth_opts *o, double *p, double *zipf_used);

/* Quantile of u1, one coordinate of a uniform unit vector in R^d (tabulated CDF). */
struct synth_quantile {
    int32_t n;
    double *cdf; /* n + 1 points over [-1, 1] */
};
int synth_quantile_init(struct synth_quantile *q, int32_t d);
void synth_quantile_fini(struct synth_quantile *q);
double synth_quantile_upper(const struct synth_quantile *q, double p); /* x: P(u1 > x) = p */

/* ---- counter-based PRNG: value i of stream `key` is mix(key + (i+1) golden) (splitmix64), so any
 * element of any tensor can be produced independently, in any order and layout. ---- */
#define SYN_GOLDEN 0x9e3779b97f4a7c15ull

static inline uint64_t syn_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The stream key of (seed, a, b): e.g. (seed, tensor kind, layer). */
static inline uint64_t syn_key(uint64_t seed, uint64_t a, uint64_t b)
{
    return syn_mix(syn_mix(seed ^ syn_mix(a + SYN_GOLDEN)) + b * SYN_GOLDEN);
}

static inline uint64_t syn_u64(uint64_t key, uint64_t i) { return syn_mix(key + (i + 1) * SYN_GOLDEN); }

/* Uniform in [-1, 1): the top 24 bits, as exactly representable floats. */
static inline float syn_uniform(uint64_t key, uint64_t i)
{
    return (float)(syn_u64(key, i) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

/* Uniform in (0, 1), never 0 (for logarithms). */
static inline double syn_open01(uint64_t key, uint64_t i)
{
    return ((double)(syn_u64(key, i) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

#endif
