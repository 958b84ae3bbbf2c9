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
    float *penalized; /* copy of the logits the penalties edit */
    int32_t *count;   /* (n_vocab) occurrences in the penalty window; all 0 between calls */
};

void samp_defaults(struct samp_params *p)
{
    p->temp = 0.8f;
    p->top_k = 40;
    p->top_p = 0.95f;
    p->min_p = 0.05f;
    p->repeat_penalty = 1.0f;
    p->repeat_last_n = 64;
    p->frequency_penalty = 0.0f;
    p->presence_penalty = 0.0f;
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
    s->count = calloc((size_t)n_vocab, sizeof *s->count);
    if (!s->c || !s->penalized || !s->count) {
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
    free(s->count);
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

static bool penalties_on(const struct samp_params *p)
{
    return p->repeat_penalty != 1.0f || p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f;
}

/* llama.cpp's penalties sampler, over the last repeat_last_n tokens of the history: for each
 * distinct token in the window, seen `count` times, the repeat penalty (a positive logit divided,
 * a negative one multiplied, once), then logit -= count * frequency + presence. */
static void apply_penalties(struct samp_state *s, float *l, const struct samp_params *p, const int32_t *hist,
                            size_t n_hist)
{
    const int32_t V = s->n_vocab, last_n = p->repeat_last_n;
    const size_t start = last_n > 0 && n_hist > (size_t)last_n ? n_hist - (size_t)last_n : 0;
    for (size_t i = start; i < n_hist; i++)
        if (hist[i] >= 0 && hist[i] < V)
            s->count[hist[i]]++;
    for (size_t i = start; i < n_hist; i++) {
        const int32_t id = hist[i];
        if (id < 0 || id >= V || s->count[id] == 0)
            continue; /* out of the vocabulary, or done at its first occurrence */
        const int32_t count = s->count[id];
        s->count[id] = 0; /* scratch is all zero again when the loop ends */
        if (p->repeat_penalty != 1.0f)
            l[id] = l[id] > 0 ? l[id] / p->repeat_penalty : l[id] * p->repeat_penalty;
        l[id] -= (float)count * p->frequency_penalty + p->presence_penalty;
    }
}

/* From the n candidates in s->c (every allowed token, or at least the top_k best of them), in any
 * order: top-k → sort → top-p → min-p → temperature → draw. */
static int32_t pick_from(struct samp_state *s, const struct samp_params *p, int32_t n, uint64_t pos)
{
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

/* The token, from the penalized logits l: greedy, or top-k → top-p → min-p → temperature → draw. */
static int32_t pick(struct samp_state *s, const struct samp_params *p, const float *l, uint64_t pos)
{
    const int32_t V = s->n_vocab;
    if (p->temp <= 0.0f)
        return argmax(l, V);
    int32_t n = 0;
    for (int32_t i = 0; i < V; i++)
        if (l[i] > -INFINITY) /* -inf marks a banned token */
            s->c[n++] = (struct cand){ .id = i, .logit = l[i] };
    if (n == 0)
        return argmax(l, V);
    return pick_from(s, p, n, pos);
}

/* log-softmax of l (n_vocab) at temperature 1: the sampled token's value and the n_top best. */
static void logprobs(struct samp_state *s, const float *l, int32_t id, int32_t n_top, struct samp_logprobs *lp)
{
    const int32_t V = s->n_vocab;
    float mx = -INFINITY;
    for (int32_t i = 0; i < V; i++)
        mx = l[i] > mx ? l[i] : mx;
    /* log sum exp in double, in index order: the same bits for the same row on every replay */
    double sum = 0.0;
    for (int32_t i = 0; i < V; i++)
        if (l[i] > -INFINITY)
            sum += exp((double)l[i] - (double)mx);
    const double lse = mx > -INFINITY ? (double)mx + log(sum) : 0.0;
    lp->logprob = (float)((double)l[id] - lse);
    if (n_top > SAMP_MAX_TOP_LOGPROBS)
        n_top = SAMP_MAX_TOP_LOGPROBS;
    if (n_top > V)
        n_top = V;
    lp->n_top = n_top > 0 ? n_top : 0;
    if (lp->n_top == 0)
        return;
    for (int32_t i = 0; i < V; i++)
        s->c[i] = (struct cand){ .id = i, .logit = l[i] };
    if (n_top < V)
        select_top(s->c, V, n_top);
    qsort(s->c, (size_t)n_top, sizeof *s->c, cmp_desc);
    for (int32_t k = 0; k < n_top; k++) {
        lp->top_id[k] = s->c[k].id;
        lp->top_logprob[k] = (float)((double)s->c[k].logit - lse);
    }
}

int32_t samp_sample_lp(struct samp_state *s, const struct samp_params *p, const float *logits,
                       const int32_t *history, size_t n_history, uint64_t pos, int32_t n_top,
                       struct samp_logprobs *lp)
{
    const float *l = logits;
    if (penalties_on(p) && n_history) {
        memcpy(s->penalized, logits, (size_t)s->n_vocab * sizeof(float));
        apply_penalties(s, s->penalized, p, history, n_history);
        l = s->penalized;
    }
    const int32_t id = pick(s, p, l, pos);
    if (lp)
        logprobs(s, l, id, n_top, lp);
    return id;
}

int32_t samp_sample(struct samp_state *s, const struct samp_params *p, const float *logits,
                    const int32_t *history, size_t n_history, uint64_t pos)
{
    return samp_sample_lp(s, p, logits, history, n_history, pos, 0, NULL);
}

/* The candidates' order as one unsigned key (larger = better, then the lower id): the float order
 * with -0 = +0 and NaN below everything; the device computes the same key (cuk_topk.cu). */
static uint32_t rank_key(float f)
{
    uint32_t u;
    if (f != f)
        return 0;
    if (f == 0.0f)
        f = 0.0f; /* -0 ranks as +0 */
    memcpy(&u, &f, sizeof u);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}

void samp_best(const float *l, int32_t n, int32_t k, int32_t *ids, float *vals)
{
    /* insertion into the sorted best k: after the first few hundred a row's element rarely
     * beats the k-th, so this is one compare per element */
    uint32_t keys[SAMP_BEST_MAX];
    if (k > SAMP_BEST_MAX)
        k = SAMP_BEST_MAX;
    if (k <= 0) /* nothing asked (the loop's k-th would be keys[-1]) */
        return;
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        const uint32_t key = rank_key(l[i]);
        if (m == k && key <= keys[k - 1])
            continue; /* not better than the k-th (an equal key has a lower id there) */
        int32_t j = m < k ? m++ : k - 1;
        for (; j > 0 && keys[j - 1] < key; j--) {
            keys[j] = keys[j - 1];
            ids[j] = ids[j - 1];
        }
        keys[j] = key;
        ids[j] = i;
    }
    for (int32_t j = 0; j < m; j++)
        vals[j] = l[ids[j]];
}

int32_t samp_top_needed(const struct samp_params *p)
{
    if (penalties_on(p))
        return 0; /* the penalties change logits outside the best few */
    if (p->temp <= 0.0f)
        return 1;
    return p->top_k > 0 ? p->top_k : 0;
}

int32_t samp_top_asked(const struct samp_params *p, int32_t n_vocab)
{
    const int32_t need = samp_top_needed(p);
    return need > 0 && need <= SAMP_BEST_MAX && need <= n_vocab ? need : 0;
}

int32_t samp_sample_top(struct samp_state *s, const struct samp_params *p, const int32_t *ids, const float *logits,
                        int32_t n, uint64_t pos)
{
    /* greedy: argmax's choice, the lowest id among the maxima, is the best candidate (an all-banned
     * row included: every logit is -inf and the best is id 0, as argmax gives) */
    if (p->temp <= 0.0f)
        return ids[0];
    int32_t m = 0;
    for (int32_t i = 0; i < n && i < s->n_vocab; i++)
        if (logits[i] > -INFINITY) /* the banned tokens pick() leaves out */
            s->c[m++] = (struct cand){ .id = ids[i], .logit = logits[i] };
    if (m == 0)
        return ids[0];
    return pick_from(s, p, m, pos);
}
