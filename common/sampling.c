/* sampling.c — samplers in llama.cpp's default order, with (seed, position)-pure randomness. */
#include "sampling.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "pi_err.h"

struct cand {
    int32_t id;
    float logit;
    float p;
};

struct samp_state {
    int32_t n_vocab;
    struct cand *c;
    float *penalized; /* copy of the logits the repeat penalty edits */
};

void samp_defaults(struct samp_params *p)
{
    p->temp = 0.8f;
    p->top_k = 40;
    p->top_p = 0.95f;
    p->min_p = 0.05f;
    p->repeat_penalty = 1.0f;
    p->repeat_last_n = 64;
    p->seed = 0;
}

int samp_new(struct samp_state **out, int32_t n_vocab)
{
    struct samp_state *s = calloc(1, sizeof *s);
    if (!s)
        return pi_fail(PI_E_NOMEM, "sampling: out of memory");
    s->n_vocab = n_vocab;
    s->c = malloc((size_t)n_vocab * sizeof *s->c);
    s->penalized = malloc((size_t)n_vocab * sizeof(float));
    if (!s->c || !s->penalized) {
        samp_free(s);
        return pi_fail(PI_E_NOMEM, "sampling: out of memory");
    }
    *out = s;
    return 0;
}

void samp_free(struct samp_state *s)
{
    if (!s)
        return;
    free(s->c);
    free(s->penalized);
    free(s);
}

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

double samp_uniform(uint64_t seed, uint64_t pos)
{
    /* Two rounds so that nearby (seed, pos) pairs give unrelated values. */
    const uint64_t r = splitmix64(splitmix64(seed) ^ (pos * 0xD1B54A32D192ED03ull));
    return (double)(r >> 11) * (1.0 / 9007199254740992.0); /* 53 random bits → [0, 1) */
}

static int cmp_desc(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit < y->logit ? 1 : -1;
    return x->id - y->id; /* stable order for equal logits: lower id first */
}

static void swap_cand(struct cand *a, struct cand *b)
{
    struct cand t = *a;
    *a = *b;
    *b = t;
}

/* Quickselect: afterwards c[0..k) are the k first elements of the cmp_desc order, in any order. */
static void select_top(struct cand *c, int32_t n, int32_t k)
{
    int32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        swap_cand(&c[(lo + hi) / 2], &c[hi]); /* middle element as pivot: sorted inputs stay linear */
        int32_t store = lo;
        for (int32_t i = lo; i < hi; i++)
            if (cmp_desc(&c[i], &c[hi]) < 0)
                swap_cand(&c[i], &c[store++]);
        swap_cand(&c[store], &c[hi]);
        if (store == k - 1 || store == k)
            return;
        if (store < k)
            lo = store + 1;
        else
            hi = store - 1;
    }
}

static int32_t argmax(const float *l, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (l[i] > l[best])
            best = i;
    return best;
}

/* llama.cpp's penalty: a positive logit is divided, a negative one multiplied, once per distinct
 * token in the window. */
static void apply_repeat_penalty(float *l, int32_t n_vocab, float penalty, const int32_t *hist, size_t n_hist,
                                 int32_t last_n)
{
    size_t start = last_n > 0 && n_hist > (size_t)last_n ? n_hist - (size_t)last_n : 0;
    for (size_t i = start; i < n_hist; i++) {
        int32_t id = hist[i];
        if (id < 0 || id >= n_vocab)
            continue;
        bool seen = false;
        for (size_t k = start; k < i && !seen; k++)
            seen = hist[k] == id;
        if (seen)
            continue;
        l[id] = l[id] > 0 ? l[id] / penalty : l[id] * penalty;
    }
}

int32_t samp_sample(struct samp_state *s, const struct samp_params *p, const float *logits,
                    const int32_t *history, size_t n_history, uint64_t pos)
{
    const int32_t V = s->n_vocab;
    const float *l = logits;
    if (p->repeat_penalty != 1.0f && n_history) {
        memcpy(s->penalized, logits, (size_t)V * sizeof(float));
        apply_repeat_penalty(s->penalized, V, p->repeat_penalty, history, n_history, p->repeat_last_n);
        l = s->penalized;
    }
    if (p->temp <= 0.0f)
        return argmax(l, V);

    int32_t n = 0;
    for (int32_t i = 0; i < V; i++)
        if (l[i] > -INFINITY) /* -inf marks a banned token */
            s->c[n++] = (struct cand){ .id = i, .logit = l[i] };
    if (n == 0)
        return argmax(l, V);
    /* With top-k, only the k best need ordering: move them to the front first (O(n)), so a
     * 150k vocabulary is not sorted for every sampled token. cmp_desc is a total order (ids are
     * unique), so the result equals a full sort's first k. */
    if (p->top_k > 0 && p->top_k < n) {
        select_top(s->c, n, p->top_k);
        n = p->top_k;
    }
    qsort(s->c, (size_t)n, sizeof *s->c, cmp_desc);

    /* Probabilities at temperature 1 for top-p / min-p, as llama.cpp applies them before temp. */
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        s->c[i].p = expf(s->c[i].logit - s->c[0].logit);
        sum += s->c[i].p;
    }
    if (p->top_p < 1.0f) {
        double cum = 0.0;
        for (int32_t i = 0; i < n; i++) {
            cum += s->c[i].p / sum;
            if (cum >= p->top_p) {
                n = i + 1;
                break;
            }
        }
    }
    if (p->min_p > 0.0f) {
        /* keep tokens with p >= min_p * p_max; p_max is c[0] (relative prob 1) */
        int32_t keep = 1;
        while (keep < n && s->c[keep].p >= p->min_p)
            keep++;
        n = keep;
    }
    /* Temperature, then draw. */
    sum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        s->c[i].p = expf((s->c[i].logit - s->c[0].logit) / p->temp);
        sum += s->c[i].p;
    }
    const double u = samp_uniform(p->seed, pos) * sum;
    double cum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        cum += s->c[i].p;
        if (u < cum)
            return s->c[i].id;
    }
    return s->c[n - 1].id;
}
