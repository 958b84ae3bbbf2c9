/* test_sampling — samplers: greedy, determinism in (seed, position), filters, the penalties (repeat,
 * frequency, presence: hand-computed values), log-probabilities. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pi_err.h"
#include "sampling.h"
#include "testutil.h"

#define V 512
#define DRAWS 64

static void random_logits(float *l, uint64_t seed)
{
    for (int i = 0; i < V; i++)
        l[i] = (float)(samp_uniform(seed, (uint64_t)i) * 6.0 - 3.0);
}

/* the reference order of candidates: logit descending, then id ascending (-0 == +0) */
static const float *cmp_row;
static int cmp_ids(const void *a, const void *b)
{
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (cmp_row[x] != cmp_row[y])
        return cmp_row[x] < cmp_row[y] ? 1 : -1;
    return x - y;
}

/* samp_sample_top on the row's k best tokens picks what samp_sample picks from the whole row, for
 * rows full of ties (a coarse grid), banned tokens, signed zeros and all-banned rows */
static void test_top(struct samp_state *s)
{
    static const float temps[] = { 0.0f, 0.5f, 1.0f, 1.7f };
    static const int32_t ks[] = { 0, 1, 2, 5, 40 };
    static const float tps[] = { 1.0f, 0.9f, 0.5f }, mps[] = { 0.0f, 0.05f, 0.3f };
    float l[V];
    int32_t order[V], ids[V];
    float vals[V];
    int checked = 0, same = 0, needed_ok = 1;
    for (int row = 0; row < 12; row++) {
        for (int i = 0; i < V; i++) {
            const double u = samp_uniform(100 + (uint64_t)row, (uint64_t)i);
            l[i] = row % 3 == 0 ? (float)floor(u * 8.0) * 0.5f - 2.0f : (float)(u * 6.0 - 3.0); /* ties */
            if (samp_uniform(200 + (uint64_t)row, (uint64_t)i) < (row == 5 ? 0.995 : 0.05))
                l[i] = -INFINITY;
            if (row % 4 == 1 && i % 7 == 0)
                l[i] = (i & 8) ? -0.0f : 0.0f;
        }
        if (row == 7)
            for (int i = 0; i < V; i++)
                l[i] = -INFINITY;
        for (int i = 0; i < V; i++)
            order[i] = i;
        cmp_row = l;
        qsort(order, V, sizeof *order, cmp_ids);
        for (size_t a = 0; a < sizeof temps / sizeof *temps; a++)
            for (size_t b = 0; b < sizeof ks / sizeof *ks; b++)
                for (size_t c = 0; c < sizeof tps / sizeof *tps; c++)
                    for (size_t d = 0; d < sizeof mps / sizeof *mps; d++) {
                        struct samp_params p;
                        samp_defaults(&p);
                        p.temp = temps[a], p.top_k = ks[b], p.top_p = tps[c], p.min_p = mps[d];
                        p.seed = 11 + (uint64_t)row;
                        const int32_t k = samp_top_needed(&p);
                        needed_ok &= k == (p.temp <= 0.0f ? 1 : p.top_k);
                        if (k == 0)
                            continue;
                        for (int extra = 0; extra <= 3; extra += 3) { /* exactly k, and a few more */
                            const int32_t n = k + extra;
                            for (int32_t i = 0; i < n; i++)
                                ids[i] = order[i], vals[i] = l[order[i]];
                            for (uint64_t pos = 0; pos < 24; pos++) {
                                checked++;
                                same += samp_sample_top(s, &p, ids, vals, n, pos) == samp_sample(s, &p, l, NULL, 0, pos);
                            }
                        }
                    }
    }
    CHECK(needed_ok, "samp_top_needed: 1 for greedy, top_k with top-k on");
    /* samp_best = the reference order's first k, on the same kinds of rows */
    int best_ok = 1;
    for (int row = 0; row < 12; row++) {
        for (int i = 0; i < V; i++) {
            const double u = samp_uniform(300 + (uint64_t)row, (uint64_t)i);
            l[i] = row % 2 ? (float)floor(u * 6.0) - 3.0f : (float)(u * 6.0 - 3.0);
            if (i % 11 == 0)
                l[i] = row % 3 ? -INFINITY : -0.0f;
        }
        for (int i = 0; i < V; i++)
            order[i] = i;
        cmp_row = l;
        qsort(order, V, sizeof *order, cmp_ids);
        for (int32_t k = 1; k <= SAMP_BEST_MAX; k += 9) {
            samp_best(l, V, k, ids, vals);
            for (int32_t i = 0; i < k; i++)
                best_ok &= ids[i] == order[i] && (vals[i] == l[order[i]] || (vals[i] != vals[i]));
        }
    }
    CHECK(best_ok, "samp_best returns the k best in order (ties: lower id first)");
    CHECK(same == checked, "samp_sample_top = samp_sample: %d of %d draws", same, checked);
    struct samp_params p;
    samp_defaults(&p);
    p.repeat_penalty = 1.1f;
    CHECK(samp_top_needed(&p) == 0, "penalties need the whole row");
    p.repeat_penalty = 1.0f, p.top_k = 0;
    CHECK(samp_top_needed(&p) == 0, "sampling without top-k needs the whole row");
    p.top_k = 40;
    CHECK(samp_top_asked(&p, 32000) == 40 && samp_top_asked(&p, 30) == 0, "top 40 asked of 32 000 logits, not of 30");
    p.top_k = SAMP_BEST_MAX + 1;
    CHECK(samp_top_asked(&p, 32000) == 0, "top %d: more than a topk op gives", SAMP_BEST_MAX + 1);
    p.temp = 0.0f;
    CHECK(samp_top_asked(&p, 32000) == 1, "greedy asks for 1");
}

int main(void)
{
    struct samp_state *s = NULL;
    CHECK_OK(samp_new(&s, V));
    float l[V];
    random_logits(l, 7);
    int32_t best = 0;
    for (int i = 1; i < V; i++)
        best = l[i] > l[best] ? i : best;

    struct samp_params p;
    samp_defaults(&p);
    p.temp = 0.0f;
    CHECK(samp_sample(s, &p, l, NULL, 0, 0) == best, "greedy must pick the argmax");

    /* top-k 1 at any temperature is greedy */
    samp_defaults(&p);
    p.temp = 1.5f;
    p.top_k = 1;
    for (int pos = 0; pos < DRAWS; pos++)
        CHECK(samp_sample(s, &p, l, NULL, 0, (uint64_t)pos) == best, "top-k 1 must pick the argmax");

    /* same seed → same tokens; different seeds → different sequences at temperature 1 */
    samp_defaults(&p);
    p.temp = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    int32_t a[DRAWS], b[DRAWS], c[DRAWS];
    p.seed = 42;
    for (int i = 0; i < DRAWS; i++)
        a[i] = samp_sample(s, &p, l, NULL, 0, (uint64_t)i);
    for (int i = DRAWS - 1; i >= 0; i--) /* order of calls must not matter: pure in (seed, pos) */
        b[i] = samp_sample(s, &p, l, NULL, 0, (uint64_t)i);
    p.seed = 43;
    for (int i = 0; i < DRAWS; i++)
        c[i] = samp_sample(s, &p, l, NULL, 0, (uint64_t)i);
    CHECK(!memcmp(a, b, sizeof a), "same seed and positions must give the same tokens");
    CHECK(memcmp(a, c, sizeof a) != 0, "different seeds must give different tokens");
    int distinct = 0;
    for (int i = 0; i < DRAWS; i++) {
        int seen = 0;
        for (int k = 0; k < i; k++)
            seen |= a[k] == a[i];
        distinct += !seen;
    }
    CHECK(distinct > DRAWS / 4, "temperature 1 over %d near-uniform logits gave only %d distinct tokens", V, distinct);

    /* top-k 5: every draw among the 5 best */
    p.top_k = 5;
    int32_t top5[5];
    for (int k = 0; k < 5; k++) {
        int32_t bi = -1;
        for (int i = 0; i < V; i++) {
            int taken = 0;
            for (int q = 0; q < k; q++)
                taken |= top5[q] == i;
            if (!taken && (bi < 0 || l[i] > l[bi]))
                bi = i;
        }
        top5[k] = bi;
    }
    for (int pos = 0; pos < DRAWS; pos++) {
        int32_t t = samp_sample(s, &p, l, NULL, 0, (uint64_t)pos);
        int ok = 0;
        for (int k = 0; k < 5; k++)
            ok |= t == top5[k];
        CHECK(ok, "top-k 5 drew token %d outside the top 5", t);
    }

    /* top-k over ties: equal logits are ordered by id, so top-k 3 of a flat row is {0, 1, 2}
     * (checks the partial selection against the full order) */
    float flat[V];
    for (int i = 0; i < V; i++)
        flat[i] = 1.0f;
    p.top_k = 3;
    int seen3[3] = { 0 };
    for (int pos = 0; pos < DRAWS; pos++) {
        int32_t t = samp_sample(s, &p, flat, NULL, 0, (uint64_t)pos);
        CHECK(t >= 0 && t < 3, "top-k 3 of equal logits drew token %d", t);
        if (t >= 0 && t < 3)
            seen3[t] = 1;
    }
    CHECK(seen3[0] && seen3[1] && seen3[2], "top-k 3 of equal logits must draw each of 0, 1, 2");

    /* min-p: one dominant token (p ≈ 1) and min-p 0.5 → always that token */
    float dom[V];
    for (int i = 0; i < V; i++)
        dom[i] = 0.0f;
    dom[17] = 20.0f;
    samp_defaults(&p);
    p.temp = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.5f;
    for (int pos = 0; pos < DRAWS; pos++)
        CHECK(samp_sample(s, &p, dom, NULL, 0, (uint64_t)pos) == 17, "min-p must keep only the dominant token");

    /* top-p 0.5 with the dominant token: only it survives */
    p.min_p = 0.0f;
    p.top_p = 0.5f;
    for (int pos = 0; pos < DRAWS; pos++)
        CHECK(samp_sample(s, &p, dom, NULL, 0, (uint64_t)pos) == 17, "top-p must keep only the dominant token");

    /* repeat penalty: greedy switches away from a repeated best token */
    float two[V];
    for (int i = 0; i < V; i++)
        two[i] = -1.0f;
    two[3] = 2.0f;
    two[4] = 1.5f;
    samp_defaults(&p);
    p.temp = 0.0f;
    p.repeat_penalty = 1.5f; /* 2.0 / 1.5 = 1.33 < 1.5 */
    int32_t hist[] = { 3, 3, 9 };
    CHECK(samp_sample(s, &p, two, hist, 3, 3) == 4, "repeat penalty must demote token 3");
    CHECK(two[3] == 2.0f, "the caller's logits must not be modified");
    p.repeat_last_n = 1; /* window sees only token 9 */
    CHECK(samp_sample(s, &p, two, hist, 3, 3) == 3, "the penalty window must be respected");

    /* frequency and presence penalties, llama.cpp's formula over the window: logit -= count * freq +
     * presence, after the repeat penalty. Row: 3 → 2.0, 4 → 1.5, 5 → 0.9, the rest -1.0; history
     * {3, 3, 5, 3, 9}: token 3 seen 3 times, 5 and 9 once. */
    float pen[V];
    for (int i = 0; i < V; i++)
        pen[i] = -1.0f;
    pen[3] = 2.0f;
    pen[4] = 1.5f;
    pen[5] = 0.9f;
    const int32_t ph[] = { 3, 3, 5, 3, 9 };
    samp_defaults(&p);
    p.temp = 0.0f;
    p.frequency_penalty = 0.1f; /* 3: 2.0 - (3 * 0.1 + 0.05) = 1.65 > 1.5: still 3 */
    p.presence_penalty = 0.05f;
    CHECK(samp_sample(s, &p, pen, ph, 5, 5) == 3, "freq 0.1 + presence 0.05: 1.65 beats 1.5");
    p.frequency_penalty = 0.2f; /* 3: 2.0 - (0.6 + 0.05) = 1.35 < 1.5 */
    CHECK(samp_sample(s, &p, pen, ph, 5, 5) == 4, "freq 0.2 + presence 0.05: 1.35 loses to 1.5");
    p.frequency_penalty = 0.0f;
    p.presence_penalty = 0.6f; /* 3: 2.0 - 0.6 = 1.4 < 1.5: presence counts once, not per occurrence */
    CHECK(samp_sample(s, &p, pen, ph, 5, 5) == 4, "presence 0.6: 1.4 loses to 1.5");
    p.presence_penalty = 0.4f; /* 1.6 > 1.5; were it per occurrence, 2.0 - 1.2 = 0.8 */
    CHECK(samp_sample(s, &p, pen, ph, 5, 5) == 3, "presence is applied once per token");
    p.presence_penalty = -0.5f; /* negative: encourages the seen token 5 (0.9 + 0.5 = 1.4), not 4 */
    p.frequency_penalty = 0.0f;
    pen[5] = 1.2f; /* 1.7 > 1.5 */
    CHECK(samp_sample(s, &p, pen, ph, 5, 5) == 3, "negative presence: 3 at 2.5");
    pen[5] = 0.9f;
    p.repeat_last_n = 2; /* window {3, 9}: 3 seen once → 2.0 - (0.2 + 0.6) = 1.2 */
    p.presence_penalty = 0.6f;
    p.frequency_penalty = 0.2f;
    CHECK(samp_sample(s, &p, pen, ph, 5, 5) == 4, "window of 2: 3 at 1.2");
    p.repeat_last_n = 2;
    p.presence_penalty = 0.2f; /* window {3, 9}: 2.0 - 0.4 = 1.6 > 1.5 (all 5: 2.0 - 0.8 = 1.2) */
    CHECK(samp_sample(s, &p, pen, ph, 5, 5) == 3, "the window bounds the count");

    /* all three with log-probabilities: repeat 2, freq 0.1, presence 0.05 →
     * 3: 2.0 / 2 - (0.3 + 0.05) = 0.65 (0.825 if subtracted before dividing), 4: 1.5,
     * 5: 0.9 / 2 - 0.15 = 0.3, 9: -1.0 * 2 - 0.15 = -2.15 (-2.3 the other way), others -1.0 */
    samp_defaults(&p);
    p.temp = 0.0f;
    p.repeat_penalty = 2.0f;
    p.frequency_penalty = 0.1f;
    p.presence_penalty = 0.05f;
    float want[V];
    for (int i = 0; i < V; i++)
        want[i] = -1.0f;
    want[3] = 0.65f, want[4] = 1.5f, want[5] = 0.3f, want[9] = -2.15f;
    double wsum = 0.0;
    for (int i = 0; i < V; i++)
        wsum += exp((double)want[i]);
    const double lse = log(wsum);
    struct samp_logprobs lp;
    memset(&lp, 0, sizeof lp);
    CHECK(samp_sample_lp(s, &p, pen, ph, 5, 5, 4, &lp) == 4, "all penalties: 4 wins at 1.5");
    CHECK(fabs(lp.logprob - (1.5 - lse)) < 1e-5, "logprob of the sampled token %f, want %f", lp.logprob, 1.5 - lse);
    CHECK(lp.n_top == 4, "n_top %d", lp.n_top);
    /* 1.5, 0.65, 0.3, then the -1.0 ties: the lowest id, 0 */
    CHECK(lp.top_id[0] == 4 && lp.top_id[1] == 3 && lp.top_id[2] == 5 && lp.top_id[3] == 0,
          "top ids %d %d %d %d", lp.top_id[0], lp.top_id[1], lp.top_id[2], lp.top_id[3]);
    CHECK(fabs(lp.top_logprob[1] - (0.65 - lse)) < 1e-5, "token 3 logprob %f, want %f (repeat before freq)",
          lp.top_logprob[1], 0.65 - lse);
    CHECK(fabs(lp.top_logprob[2] - (0.3 - lse)) < 1e-5, "token 5 logprob %f", lp.top_logprob[2]);
    CHECK(fabs(lp.top_logprob[3] - (-1.0 - lse)) < 1e-5, "token 0 logprob %f", lp.top_logprob[3]);
    CHECK(pen[3] == 2.0f && pen[9] == -1.0f, "the caller's logits must not be modified");
    /* token 9's penalized value through a row where it is the best of the rest */
    float neg[V];
    for (int i = 0; i < V; i++)
        neg[i] = -30.0f;
    neg[9] = -1.0f;
    neg[3] = 2.0f;
    samp_sample_lp(s, &p, neg, ph, 5, 5, 2, &lp);
    double nsum = exp(0.65) + exp(-2.15) + (V - 3) * exp(-30.0) + exp(-30.0 * 2 - 0.15); /* 5: -60.15 */
    CHECK(lp.top_id[1] == 9 && fabs(lp.top_logprob[1] - (-2.15 - log(nsum))) < 1e-5,
          "a negative logit: multiplied, then lowered: %d %f want %f", lp.top_id[1], lp.top_logprob[1],
          -2.15 - log(nsum));

    /* log-probabilities never change the choice; they are the raw log-softmax (temperature, top-k
     * and friends do not change them); n_top is clamped to 20 */
    samp_defaults(&p);
    p.temp = 0.7f;
    p.top_k = 5;
    p.seed = 9;
    double rsum = 0.0;
    for (int i = 0; i < V; i++)
        rsum += exp((double)l[i]);
    for (int pos = 0; pos < DRAWS; pos++) {
        const int32_t t0 = samp_sample(s, &p, l, NULL, 0, (uint64_t)pos);
        const int32_t t1 = samp_sample_lp(s, &p, l, NULL, 0, (uint64_t)pos, 99, &lp);
        CHECK(t0 == t1, "with log-probabilities the draw changed: %d != %d", t0, t1);
        CHECK(fabs(lp.logprob - ((double)l[t1] - log(rsum))) < 1e-5, "raw log-softmax at temperature 1");
        CHECK(lp.n_top == SAMP_MAX_TOP_LOGPROBS && lp.top_id[0] == best, "n_top clamped to 20, best first");
        for (int k = 1; k < lp.n_top; k++)
            CHECK(lp.top_logprob[k] <= lp.top_logprob[k - 1], "top log-probabilities in order");
    }
    /* ties: a flat row gives ids 0, 1, 2 at -log(V) */
    samp_sample_lp(s, &p, flat, NULL, 0, 0, 3, &lp);
    CHECK(lp.top_id[0] == 0 && lp.top_id[1] == 1 && lp.top_id[2] == 2 && fabs(lp.top_logprob[2] + log((double)V)) < 1e-5,
          "flat row: ids 0 1 2 at -log V");

    /* a replay: the penalties depend only on the history, so continuing from a rebuilt history gives
     * the same tokens as the uninterrupted run */
    samp_defaults(&p);
    p.temp = 1.0f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.3f;
    p.repeat_penalty = 1.1f;
    p.seed = 77;
    int32_t run1[DRAWS], run2[DRAWS];
    for (int i = 0; i < DRAWS; i++)
        run1[i] = samp_sample(s, &p, l, run1, (size_t)i, (uint64_t)i);
    memcpy(run2, run1, (DRAWS / 2) * sizeof *run2);
    for (int i = DRAWS / 2; i < DRAWS; i++)
        run2[i] = samp_sample(s, &p, l, run2, (size_t)i, (uint64_t)i);
    CHECK(!memcmp(run1, run2, sizeof run1), "a replay from the token history gives the same tokens");

    /* uniform draws are in [0, 1) and look uniform */
    double sum = 0.0;
    for (int i = 0; i < 10000; i++) {
        double u = samp_uniform(5, (uint64_t)i);
        CHECK(u >= 0.0 && u < 1.0, "uniform out of range: %f", u);
        sum += u;
    }
    CHECK(fabs(sum / 10000 - 0.5) < 0.02, "uniform mean %f", sum / 10000);
    test_top(s);
    samp_free(s);
    return tu_finish("sampling");
}
