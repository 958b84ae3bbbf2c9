/* test_sampling — samplers: greedy, determinism in (seed, position), filters, repeat penalty. */
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

    /* uniform draws are in [0, 1) and look uniform */
    double sum = 0.0;
    for (int i = 0; i < 10000; i++) {
        double u = samp_uniform(5, (uint64_t)i);
        CHECK(u >= 0.0 && u < 1.0, "uniform out of range: %f", u);
        sum += u;
    }
    CHECK(fabs(sum / 10000 - 0.5) < 0.02, "uniform mean %f", sum / 10000);
    samp_free(s);
    return tu_finish("sampling");
}
