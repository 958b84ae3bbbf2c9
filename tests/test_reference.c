/* test_reference — the numerical oracle: our forward pass against Hugging Face transformers' outputs
 * for the tiny ReLU llama (reference.json: fp32 math on the f16 weights).
 *
 * For each GGUF given on the command line (converted from the HF model by our converter at build
 * time) and each reference case: prompt ids equal, first-step logits within 1e-4 relative (max abs
 * difference over max abs logit), greedy continuation of 48 tokens identical, top-8 ids per step
 * identical (up to swaps of entries whose reference logits tie within 1e-4). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval.h"
#include "generate.h"
#include "model.h"
#include "pi_err.h"
#include "tokenizer.h"
#include "testutil.h"

#define TOP_N 8
#define LOGIT_REL_TOL 1e-4
#define TIE_TOL 1e-4

struct capture {
    int32_t n, cap;
    int32_t *ids;
    float *logits; /* n × n_vocab */
    int32_t n_vocab;
};

static int on_token(void *user, int32_t id, const float *logits, int32_t n_vocab)
{
    struct capture *c = user;
    if (c->n == c->cap)
        return -PI_E_RANGE;
    c->ids[c->n] = id;
    memcpy(c->logits + (size_t)c->n * n_vocab, logits, (size_t)n_vocab * sizeof(float));
    c->n++;
    return 0;
}

/* candidates_only: the ids, and that no logits row came */
static int on_candidate(void *user, int32_t id, const float *logits, int32_t n_vocab)
{
    struct capture *c = user;
    (void)n_vocab;
    if (c->n == c->cap || logits)
        return -PI_E_RANGE;
    c->ids[c->n++] = id;
    return 0;
}

/* top-n ids of a row, descending by logit (ties: lower id first) */
static void top_ids(const float *l, int32_t V, int n, int32_t *out)
{
    for (int k = 0; k < n; k++) {
        int32_t best = -1;
        for (int32_t i = 0; i < V; i++) {
            int taken = 0;
            for (int q = 0; q < k; q++)
                taken |= out[q] == i;
            if (!taken && (best < 0 || l[i] > l[best]))
                best = i;
        }
        out[k] = best;
    }
}

static void check_case(const struct pi_model *m, json_t *jc, const char *label)
{
    const char *prompt = json_string_value(json_object_get(jc, "prompt"));
    json_t *jp = json_object_get(jc, "prompt_ids"), *jg = json_object_get(jc, "greedy_ids"),
           *jt = json_object_get(jc, "top8_per_step"), *jf = json_object_get(jc, "first_step_logits");
    REQUIRE(prompt && jp && jg && jt && jf, "reference case lacks fields");
    const int32_t V = m->hp.n_vocab;
    REQUIRE((int32_t)json_array_size(jf) == V, "first_step_logits has %zu entries, model vocab %d",
            json_array_size(jf), V);

    int32_t *ids = NULL;
    size_t n_ids = 0;
    CHECK_OK(tok_encode(m->tok, prompt, strlen(prompt), tok_add_bos(m->tok), true, &ids, &n_ids));
    CHECK(n_ids == json_array_size(jp), "%s: prompt has %zu ids, reference %zu", label, n_ids, json_array_size(jp));
    for (size_t i = 0; i < n_ids && i < json_array_size(jp); i++)
        CHECK(ids[i] == json_integer_value(json_array_get(jp, i)), "%s: prompt id %zu is %d, reference %lld", label,
              i, ids[i], json_integer_value(json_array_get(jp, i)));
    free(ids);
    /* Evaluate the reference's ids so that a tokenizer bug does not hide forward-pass results. */
    const int32_t n_prompt = (int32_t)json_array_size(jp), n_gen = (int32_t)json_array_size(jg);
    int32_t *prompt_ids = malloc((size_t)n_prompt * sizeof *prompt_ids);
    for (int32_t i = 0; i < n_prompt; i++)
        prompt_ids[i] = (int32_t)json_integer_value(json_array_get(jp, i));

    struct pi_ctx *c = NULL;
    struct pi_ctx_params cp = { .n_ctx = 256, .n_batch = 16, .n_threads = 2 };
    CHECK_OK(ctx_new(&c, m, &cp));
    struct capture cap = { .cap = n_gen, .n_vocab = V };
    cap.ids = malloc((size_t)n_gen * sizeof(int32_t));
    cap.logits = malloc((size_t)n_gen * V * sizeof(float));
    struct gen_params gp = { .n_predict = n_gen, .ignore_eos = true };
    samp_defaults(&gp.samp);
    gp.samp.temp = 0.0f;
    struct gen_stats st;
    CHECK_OK(gen_run(c, m, &gp, prompt_ids, n_prompt, on_token, &cap, &st));
    REQUIRE(cap.n == n_gen, "%s: generated %d tokens, expected %d", label, cap.n, n_gen);
    /* the same generation from the best candidates only (pictl run without --dump-logits): the same
     * tokens, and the callback gets no logits */
    {
        struct pi_ctx *c2 = NULL;
        CHECK_OK(ctx_new(&c2, m, &cp));
        struct capture top = { .cap = n_gen, .n_vocab = V, .ids = malloc((size_t)n_gen * sizeof(int32_t)) };
        struct gen_params gt = gp;
        gt.candidates_only = true;
        CHECK_OK(gen_run(c2, m, &gt, prompt_ids, n_prompt, on_candidate, &top, &st));
        CHECK(top.n == n_gen && !memcmp(top.ids, cap.ids, (size_t)n_gen * sizeof(int32_t)),
              "%s: greedy tokens from candidates differ from tokens from logits rows", label);
        free(top.ids);
        ctx_free(c2);
    }

    /* first-step logits */
    double max_diff = 0.0, max_ref = 0.0;
    for (int32_t i = 0; i < V; i++) {
        const double r = json_real_value(json_array_get(jf, i));
        max_diff = fmax(max_diff, fabs(r - cap.logits[i]));
        max_ref = fmax(max_ref, fabs(r));
    }
    CHECK(max_diff / max_ref < LOGIT_REL_TOL, "%s: first-step logits differ: max |diff| %.3g / max |ref| %.3g = %.3g",
          label, max_diff, max_ref, max_diff / max_ref);
    printf("%s: first-step max|diff|/max|ref| = %.3g\n", label, max_diff / max_ref);

    int greedy_ok = 1;
    for (int32_t s = 0; s < n_gen; s++) {
        const int32_t ref = (int32_t)json_integer_value(json_array_get(jg, s));
        if (cap.ids[s] != ref) {
            CHECK(0, "%s: greedy step %d: got %d, reference %d", label, s, cap.ids[s], ref);
            greedy_ok = 0;
            break; /* later steps follow a different history */
        }
        json_t *step = json_array_get(jt, s);
        json_t *rids = json_object_get(step, "ids"), *rlog = json_object_get(step, "logits");
        int32_t ours[TOP_N];
        top_ids(cap.logits + (size_t)s * V, V, TOP_N, ours);
        for (int k = 0; k < TOP_N; k++) {
            const int32_t rid = (int32_t)json_integer_value(json_array_get(rids, k));
            if (ours[k] == rid)
                continue;
            /* a swap is only acceptable between reference logits that tie */
            const double rl = json_real_value(json_array_get(rlog, k));
            const double ol = k + 1 < TOP_N ? json_real_value(json_array_get(rlog, k + 1)) : rl;
            const double pl = k > 0 ? json_real_value(json_array_get(rlog, k - 1)) : rl;
            CHECK(fabs(rl - ol) < TIE_TOL || fabs(rl - pl) < TIE_TOL,
                  "%s: step %d top-%d id %d, reference %d (not a tie)", label, s, k + 1, ours[k], rid);
        }
    }
    printf("%s: greedy %d tokens %s\n", label, n_gen, greedy_ok ? "identical" : "DIFFER");
    free(prompt_ids);
    free(cap.ids);
    free(cap.logits);
    ctx_free(c);
}

int main(int argc, char **argv)
{
    const char *fixtures = getenv("PINFER_FIXTURES");
    if (!fixtures)
        SKIP("PINFER_FIXTURES (tests/fixtures) is not set: run it with meson test");
    char path[4096];
    snprintf(path, sizeof path, "%s/models/tiny-relu-llama/reference.json", fixtures);
    json_error_t jerr;
    json_t *ref = json_load_file(path, 0, &jerr);
    REQUIRE(ref, "cannot read %s: %s", path, jerr.text);
    json_t *cases = json_object_get(ref, "cases");
    REQUIRE(json_array_size(cases) >= 4, "reference.json has %zu cases", json_array_size(cases));
    REQUIRE(argc >= 2, "usage: test_reference MODEL.gguf...");
    for (int a = 1; a < argc; a++) {
        struct pi_model *m = NULL;
        int rc = model_load(&m, argv[a]);
        CHECK(rc == 0, "model_load(%s): %s %s", argv[a], pi_strerror(rc), pi_errmsg());
        if (rc)
            continue;
        for (size_t i = 0; i < json_array_size(cases); i++) {
            char label[256];
            snprintf(label, sizeof label, "%s case %zu", strrchr(argv[a], '/') ? strrchr(argv[a], '/') + 1 : argv[a], i);
            check_case(m, json_array_get(cases, i), label);
        }
        model_free(m);
    }
    json_decref(ref);
    return tu_finish("reference");
}
