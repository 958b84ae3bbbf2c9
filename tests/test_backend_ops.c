/* test_backend_ops — every backend be_names() lists, through the evaluator, against the in-process
 * engine: with a placement that leaves half of some layers' neurons to the host, the logits equal
 * ctx_eval's; a sequence's logits in steps shared with another sequence equal its logits alone,
 * bitwise on every backend (issue 8's invariance rule) — also in batches of up to 32 tokens (a
 * GPU's prefill path) mixed with other sequences' prompts and decode steps, and for prompts chunked
 * in several ways. Every backend runs the same checks — llama.cpp's test-backend-ops habit.
 *
 * Tolerances against ctx_eval (f32 everywhere, other summation orders): max |Δ| / max |logit| ≤ 1e-5;
 * an f16 KV cache rounds K and V (2e-2). The CUDA backend's F16 products round their activation to
 * f16 once (cuk_mma.h's f16 mode, the default; PINFER_CUDA_MMA_ACT=split keeps x to ~22 bits): each
 * product's NMSE is then ≈ E[δ²] ≤ u² = 2^-22 (test_cuda_mma derives and checks it per product), and
 * the logits are judged as test_cuda_ops judges that mode's whole-model logits, by NMSE ≤ 10 · 2^-20
 * (two roundings in series per FFN, 4 u², and the factor 10 every type's logits get there).
 *
 * usage: test_backend_ops MODEL.gguf */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#ifdef PI_HAVE_CUDA_BACKEND
#include "cuk_mma.h"
#endif
#include "eval.h"
#include "pi_err.h"
#include "threadpool.h"
#include "testutil.h"

#define N_TOK 12
#define N_PREFILL 7
#define SPLIT 0.5

static double rel(const float *a, const float *b, int64_t n)
{
    double md = 0, mr = 0;
    for (int64_t i = 0; i < n; i++) {
        md = fmax(md, fabs((double)a[i] - b[i]));
        mr = fmax(mr, fabs((double)b[i]));
    }
    return md / (mr > 0 ? mr : 1);
}

#ifdef PI_HAVE_CUDA_BACKEND /* only the CUDA backend's f16 mode is judged by NMSE */
static double nmse(const float *a, const float *b, int64_t n)
{
    double e = 0, r = 0;
    for (int64_t i = 0; i < n; i++) {
        e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return e / (r > 0 ? r : 1);
}
#endif

/* The logits' comparison with ctx_eval for this backend and cache (the head of this file) */
struct cmp_rule {
    double (*dist)(const float *a, const float *b, int64_t n);
    double tol;
    const char *what;
};

static struct cmp_rule cmp_rule(const struct be_ops *ops, const struct pi_model *m, enum be_cache_type ct)
{
    if (ct == BE_CACHE_F16) /* an f16 KV cache rounds K and V: the logits move by ~1e-3 of their range */
        return (struct cmp_rule){ rel, 2e-2, "max |d| / max |logit|" };
#ifdef PI_HAVE_CUDA_BACKEND
    if (!strcmp(ops->name, "cuda") && cuk_mma_act16(m->layers[0].ffn_gate.type))
        return (struct cmp_rule){ nmse, 10.0 / 1048576.0, "NMSE (f16 activations)" };
#else
    (void)ops, (void)m;
#endif
    return (struct cmp_rule){ rel, 1e-5, "max |d| / max |logit|" };
}

/* Tokens toks[0..n) of sequence seq at positions pos.. through the evaluator, in steps of at most
 * step tokens; logits of the last one. */
static int run_seq(struct eval *e, struct pi_batch_buf *bb, const int32_t *toks, int32_t n, int32_t pos, int32_t seq,
                   int32_t step, float *logits)
{
    for (int32_t done = 0; done < n; done += step) {
        const int32_t B = n - done < step ? n - done : step;
        batch_buf_clear(bb);
        for (int32_t i = 0; i < B; i++)
            batch_buf_add(bb, toks[done + i], pos + done + i, seq, done + i == n - 1);
        const struct pi_batch b = batch_view(bb);
        int rc = eval_batch(e, &b, done + B == n ? logits : NULL);
        if (rc)
            return rc;
    }
    return 0;
}

/* Sequence 0's logits at every position of NI tokens, one token a step (alone), against the same
 * sequence with its prompt chunked in several ways and in steps of up to BIG tokens shared with the
 * prompts and decode steps of sequences 1..3: bitwise equal. The backend opened afresh with room
 * for BIG tokens a step, so that a GPU runs its prefill (many-token) kernels. */
#define BIG 32
#define NI 40
static void big_batches(const struct be_ops *ops, const struct pi_model *m, const uint8_t *place, struct pi_pool *host,
                        enum be_cache_type ct)
{
    const int32_t V = m->hp.n_vocab;
    const char *cname = ct == BE_CACHE_F16 ? "f16" : "f32";
    struct be *b = NULL;
    struct be_params bp = { .n_ctx = 64, .n_seq = 4, .n_batch = BIG, .n_threads = 2, .on_device = place,
                            .cache_type = ct };
    if (ops->open(&b, m, &bp)) {
        CHECK(0, "%s (%s cache): open with %d tokens a step: %s", ops->name, cname, BIG, pi_errmsg());
        return;
    }
    struct eval e;
    struct pi_batch_buf bb;
    const struct eval_params ep = { .n_batch = BIG, .on_device = place, .pool = host };
    CHECK_OK(eval_init(&e, m, ops, b, &ep));
    CHECK_OK(batch_buf_init(&bb, BIG));
    int32_t toks[NI], other[3][NI];
    for (int i = 0; i < NI; i++) {
        toks[i] = (int32_t)((i * 977 + 31) % V);
        for (int s = 0; s < 3; s++)
            other[s][i] = (int32_t)((i * 389 + 101 * s + 5) % V);
    }
    float *alone = malloc((size_t)NI * V * sizeof *alone), *got = malloc((size_t)BIG * V * sizeof *got);
    CHECK_OK(ops->seq_clear(b, 0));
    for (int t = 0; t < NI; t++) {
        batch_buf_clear(&bb);
        batch_buf_add(&bb, toks[t], t, 0, true);
        const struct pi_batch st = batch_view(&bb);
        CHECK_OK(eval_batch(&e, &st, alone + (size_t)t * V));
    }
    int bad = 0, rows = 0;
    /* chunkings: sequence 0 alone in chunks of c tokens, every token with logits */
    const int chunks[] = { BIG, 13, 3, 9 };
    for (size_t ci = 0; ci < sizeof chunks / sizeof chunks[0]; ci++) {
        CHECK_OK(ops->seq_clear(b, 0));
        for (int p = 0; p < NI; p += chunks[ci]) {
            const int k = NI - p < chunks[ci] ? NI - p : chunks[ci];
            batch_buf_clear(&bb);
            for (int i = 0; i < k; i++)
                batch_buf_add(&bb, toks[p + i], p + i, 0, true);
            const struct pi_batch st = batch_view(&bb);
            CHECK_OK(eval_batch(&e, &st, got));
            for (int i = 0; i < k; i++, rows++)
                bad += memcmp(got + (size_t)i * V, alone + (size_t)(p + i) * V, (size_t)V * sizeof *got) != 0;
        }
    }
    CHECK(bad == 0, "%s (%s cache): %d of %d logits rows of chunked prompts differ from alone", ops->name, cname, bad,
          rows);
    /* mixed: each step k tokens of sequence 0 (with logits) among f tokens of another sequence,
     * which is itself in its prompt or decoding; batch sizes 2..32 */
    const int ks[] = { 9, 1, 5, 17, 2, 6 }, fs[] = { 8, 20, 0, 3, 14, 1, 26 };
    int done[3] = { 0 };
    for (int s = 1; s <= 3; s++)
        CHECK_OK(ops->seq_clear(b, s));
    CHECK_OK(ops->seq_clear(b, 0));
    const int bad0 = bad;
    for (int p = 0, step = 0; p < NI; step++) {
        const int k = NI - p < ks[step % 6] ? NI - p : ks[step % 6];
        const int s = step % 3;
        int f = fs[step % 7];
        if (f > NI - done[s])
            f = NI - done[s];
        if (k + f > BIG)
            f = BIG - k;
        batch_buf_clear(&bb);
        int o = 0; /* the other sequence's tokens first half, then sequence 0's, then the rest */
        for (; o < f / 2; o++)
            batch_buf_add(&bb, other[s][done[s] + o], done[s] + o, s + 1, o % 2 == 0);
        for (int i = 0; i < k; i++)
            batch_buf_add(&bb, toks[p + i], p + i, 0, true);
        for (; o < f; o++)
            batch_buf_add(&bb, other[s][done[s] + o], done[s] + o, s + 1, o % 2 == 0);
        const struct pi_batch st = batch_view(&bb);
        CHECK_OK(eval_batch(&e, &st, got));
        /* rows in batch order: the other's first half with logits, then sequence 0's */
        int row0 = 0;
        for (int i = 0; i < f / 2; i++)
            row0 += i % 2 == 0;
        for (int i = 0; i < k; i++, rows++)
            bad += memcmp(got + (size_t)(row0 + i) * V, alone + (size_t)(p + i) * V, (size_t)V * sizeof *got) != 0;
        done[s] += f;
        p += k;
    }
    CHECK(bad == bad0, "%s (%s cache): %d logits rows in mixed batches differ from alone", ops->name, cname,
          bad - bad0);
    printf("backend %s, %s cache: %d logits rows of sequence 0 in chunked prompts and mixed batches of up to %d "
           "tokens = alone (bitwise)\n", ops->name, cname, rows, BIG);
    free(alone), free(got);
    batch_buf_fini(&bb);
    eval_fini(&e);
    ops->close(b);
}

/* A backend with step_top (a device that replays a decode step as one request): decode steps
 * through it give the ids and logits of the same steps op by op, bitwise, with every layer held
 * (step_top's condition) — steps of 1, 2 and 3 sequences' tokens, k changing between steps (1, 5
 * and 3: cuda's greedy graph, its sampling graph captured at 5, whose first 3 of 5 answer k = 3),
 * positions crossing 256 (cuda: the graphs of several tokens by
 * bucket of positions, 256 then 512 cells of a 1 024-cell context). */
#define WS_PROMPT 250
#define WS_STEPS 9
#define WS_SEQS 3
static void whole_steps(const struct be_ops *ops, const struct pi_model *m, enum be_cache_type ct, int max_whole)
{
    if (!ops->step_top)
        return;
    int n_whole = 0; /* steps of at most max_whole tokens: the backend takes them whole */
    for (int t = 0; t < WS_STEPS; t++)
        n_whole += 1 + t % WS_SEQS <= max_whole;
    const char *cname = ct == BE_CACHE_F16 ? "f16" : "f32";
    const int32_t V = m->hp.n_vocab;
    struct be *b = NULL;
    struct be_params bp = { .n_ctx = 1024, .n_seq = WS_SEQS, .n_batch = 8, .n_threads = 2, .cache_type = ct };
    CHECK_OK(ops->open(&b, m, &bp));
    struct eval e;
    struct pi_batch_buf bb;
    const struct eval_params ep = { .n_batch = 8 };
    CHECK_OK(eval_init(&e, m, ops, b, &ep));
    CHECK_OK(batch_buf_init(&bb, 8));
    static int32_t toks[WS_SEQS][WS_PROMPT + WS_STEPS], ids[2][WS_STEPS][WS_SEQS * 5];
    static float vals[2][WS_STEPS][WS_SEQS * 5];
    for (int s = 0; s < WS_SEQS; s++)
        for (int i = 0; i < WS_PROMPT + WS_STEPS; i++)
            toks[s][i] = (int32_t)((i * 577 + 11 + 97 * s) % V);
    memset(ids, 0, sizeof ids), memset(vals, 0, sizeof vals);
    const bool whole_on = e.whole_ok;
    for (int pass = 0; pass < 2; pass++) { /* 0: through step_top, 1: op by op */
        e.whole_ok = whole_on && pass == 0;
        const uint64_t w0 = e.whole_steps;
        int32_t pos[WS_SEQS];
        for (int s = 0; s < WS_SEQS; s++) {
            CHECK_OK(ops->seq_clear(b, s));
            CHECK_OK(run_seq(&e, &bb, toks[s], WS_PROMPT, 0, s, 8, NULL));
            pos[s] = WS_PROMPT;
        }
        for (int t = 0; t < WS_STEPS; t++) {
            const int32_t k = t % 3 == 1 ? 1 : (t / 3) % 2 ? 3 : 5, nb = 1 + t % WS_SEQS;
            batch_buf_clear(&bb);
            for (int s = nb - 1; s >= 0; s--) { /* later sequences first */
                batch_buf_add(&bb, toks[s][pos[s]], pos[s], s, true);
                pos[s]++;
            }
            const struct pi_batch st = batch_view(&bb);
            CHECK_OK(eval_batch_top(&e, &st, k, ids[pass][t], vals[pass][t]));
        }
        CHECK(e.whole_steps - w0 == (pass == 0 ? (uint64_t)n_whole : 0), "%s (%s cache): %llu steps of %d went through "
              "step_top", ops->name, cname, (unsigned long long)(e.whole_steps - w0), pass == 0 ? n_whole : 0);
    }
    CHECK(!memcmp(ids[0], ids[1], sizeof ids[0]) && !memcmp(vals[0], vals[1], sizeof vals[0]),
          "%s (%s cache): the k best of whole steps differ from the steps op by op", ops->name, cname);
    printf("backend %s, %s cache: %d decode steps of 1-%d sequences, %d of them through step_top = op by op (ids "
           "and logits, bitwise)\n", ops->name, cname, WS_STEPS, WS_SEQS, n_whole);
    batch_buf_fini(&bb);
    eval_fini(&e);
    ops->close(b);
}

/* The evaluator's side of step_top where CI can run it: the CPU backend's ops with a step_top that
 * runs those same ops (sparse: with its predictor) for steps of up to FAKE_MAX tokens and answers
 * "not here" above — whole_steps' checks, bitwise and counted, through eval_batch_top's routing. */
#define FAKE_MAX 2
static const struct pi_model *fake_m;
static int fake_step_top(struct be *b, const struct pi_batch *bt, bool sparse, int32_t k, int32_t *ids, float *vals,
                         struct be_ffn_count *cnt)
{
    const struct be_ops *o = &be_cpu_ops;
    if (bt->n > FAKE_MAX)
        return 1;
    int rc = o->embed(b, bt);
    for (int l = 0; !rc && l < fake_m->hp.n_layer; l++) {
        const struct pi_layer_weights w = model_layer_weights(fake_m, l);
        cnt[l] = (struct be_ffn_count){ 0 };
        if (!(rc = o->attn(b, l, bt)) && !(rc = sparse ? o->predict(b, l, bt->n) : 0) &&
            !(rc = o->ffn(b, &w, bt->n, sparse, &cnt[l])))
            rc = o->ffn_add(b, l, bt->n, NULL);
    }
    return rc ? rc : o->topk(b, bt, k, ids, vals);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        SKIP("usage: test_backend_ops MODEL.gguf");
    struct pi_model *m = NULL;
    REQUIRE(model_load(&m, argv[1]) == 0, "load %s: %s", argv[1], pi_errmsg());
    const int32_t V = m->hp.n_vocab;
    const int64_t F = m->hp.n_ff;
    int32_t toks[N_TOK];
    for (int i = 0; i < N_TOK; i++)
        toks[i] = (int32_t)((i * 131 + 7) % V);
    uint8_t *sel = malloc((size_t)F);
    for (int64_t i = 0; i < F; i++)
        sel[i] = i < (int64_t)(F * SPLIT) / 32 * 32;

    struct pi_ctx *c = NULL;
    struct pi_ctx_params cp = { .n_ctx = 64, .n_batch = 8, .n_threads = 2 };
    CHECK_OK(ctx_new(&c, m, &cp));
    float *want = malloc((size_t)N_TOK * V * sizeof *want), *got = malloc((size_t)V * sizeof *got);
    CHECK_OK(ctx_eval(c, toks, N_PREFILL, 0, want + (size_t)(N_PREFILL - 1) * V, false));
    for (int t = N_PREFILL; t < N_TOK; t++)
        CHECK_OK(ctx_eval(c, toks + t, 1, t, want + (size_t)t * V, false));

    struct pi_pool *host = NULL;
    CHECK_OK(pool_new(&host, 2));
    uint8_t *place = malloc((size_t)m->hp.n_layer * F);
    for (int l = 0; l < m->hp.n_layer; l++) /* even layers half on the device, odd layers all */
        memcpy(place + (size_t)l * F, sel, (size_t)F), memset(place + (size_t)l * F, 1, l % 2 ? (size_t)F : 0);
    for (const char *const *nm = be_names(); *nm; nm++)
    for (int ct = BE_CACHE_F32; ct <= BE_CACHE_F16; ct++) {
        const struct be_ops *ops = be_find(*nm);
        const struct cmp_rule cr = cmp_rule(ops, m, (enum be_cache_type)ct);
        const char *cname = ct == BE_CACHE_F16 ? "f16" : "f32";
        REQUIRE(ops, "be_find(%s)", *nm);
        struct be *b = NULL;
        struct be_params bp = { .n_ctx = 64, .n_seq = 3, .n_batch = 8, .n_threads = 2, .on_device = place,
                                .cache_type = (enum be_cache_type)ct };
        const int orc = ops->open(&b, m, &bp);
        if (orc == -PI_E_UNSUPPORTED && strcmp(ops->name, "cpu")) { /* e.g. cuda built, no device here */
            printf("backend %s: cannot run here (%s), skipped\n", ops->name, pi_errmsg());
            continue;
        }
        CHECK_OK(orc);
        CHECK(ops->n_ctx(b) == 64 && ops->n_seq(b) == 3, "%s: n_ctx %d n_seq %d", ops->name, ops->n_ctx(b),
              ops->n_seq(b));
        struct eval e;
        struct pi_batch_buf bb;
        const struct eval_params ep = { .n_batch = 8, .on_device = place, .pool = host };
        CHECK_OK(eval_init(&e, m, ops, b, &ep));
        CHECK_OK(batch_buf_init(&bb, 8));
        /* sequence 1: a placement that leaves half of even layers to the host = ctx_eval */
        CHECK_OK(run_seq(&e, &bb, toks, N_PREFILL, 0, 1, 8, got));
        double d = cr.dist(got, want + (size_t)(N_PREFILL - 1) * V, V), worst = d;
        CHECK(d < cr.tol, "%s (%s cache): prefill logits differ from ctx_eval by %.3g (%s)", ops->name, cname, d,
              cr.what);
        for (int t = N_PREFILL; t < N_TOK; t++) {
            CHECK_OK(run_seq(&e, &bb, toks + t, 1, t, 1, 8, got));
            d = cr.dist(got, want + (size_t)t * V, V);
            worst = fmax(worst, d);
            CHECK(d < cr.tol, "%s (%s cache): position %d logits differ from ctx_eval by %.3g (%s)", ops->name, cname,
                  t, d, cr.what);
        }
        struct be_mem mem = { 0 };
        ops->mem(b, &mem);
        CHECK(mem.kv > 0, "%s: KV cache bytes reported", ops->name);
        printf("backend %s, %s cache: logits of %d positions match ctx_eval: worst %.3g < %g (%s; KV %.2f MiB)\n",
               ops->name, cname, N_TOK - N_PREFILL + 1, worst, cr.tol, cr.what, (double)mem.kv / (1 << 20));

        /* batch invariance: sequence 0 alone, one token a step, then sequences 0 and 2 interleaved
         * in shared steps with other tokens: sequence 0's logits are bitwise the same */
        float *alone = malloc((size_t)N_TOK * V * sizeof *alone), *mixed = malloc((size_t)4 * V * sizeof *mixed);
        CHECK_OK(ops->seq_clear(b, 0));
        for (int t = 0; t < N_TOK; t++)
            CHECK_OK(run_seq(&e, &bb, toks + t, 1, t, 0, 1, alone + (size_t)t * V));
        CHECK_OK(ops->seq_clear(b, 0));
        CHECK_OK(ops->seq_clear(b, 2));
        /* step 1: seq 0 prompt (5 tokens, logits of the last) + seq 2's first 3 tokens */
        batch_buf_clear(&bb);
        for (int t = 0; t < 5; t++)
            batch_buf_add(&bb, toks[t], t, 0, t == 4);
        for (int t = 0; t < 3; t++)
            batch_buf_add(&bb, toks[N_TOK - 1 - t], t, 2, t == 2);
        struct pi_batch st = batch_view(&bb);
        CHECK_OK(eval_batch(&e, &st, mixed)); /* rows: seq 0 pos 4, seq 2 pos 2 */
        d = rel(mixed, alone + (size_t)4 * V, V);
        CHECK(memcmp(mixed, alone + (size_t)4 * V, (size_t)V * sizeof *mixed) == 0,
              "%s: seq 0 pos 4 in a mixed step differs from alone by %.3g", ops->name, d);
        /* step 2: seq 2 pos 3 then seq 0 pos 5..6, all with logits */
        batch_buf_clear(&bb);
        batch_buf_add(&bb, toks[N_TOK - 4], 3, 2, true);
        batch_buf_add(&bb, toks[5], 5, 0, true);
        batch_buf_add(&bb, toks[6], 6, 0, true);
        st = batch_view(&bb);
        CHECK_OK(eval_batch(&e, &st, mixed));
        for (int t = 5; t <= 6; t++) {
            const float *row = mixed + (size_t)(t - 4) * V;
            d = rel(row, alone + (size_t)t * V, V);
            CHECK(memcmp(row, alone + (size_t)t * V, (size_t)V * sizeof *row) == 0,
                  "%s: seq 0 pos %d in a mixed step differs from alone by %.3g", ops->name, t, d);
        }
        printf("backend %s, %s cache: a sequence's logits in mixed batches = alone (bitwise)\n", ops->name, cname);
        free(alone), free(mixed);
        batch_buf_fini(&bb);
        eval_fini(&e);
        ops->close(b);
        big_batches(ops, m, place, host, (enum be_cache_type)ct);
        whole_steps(ops, m, (enum be_cache_type)ct, WS_SEQS);
    }
    /* step_top's routing in the evaluator, on the CPU (CI); not taken where the placement leaves
     * neurons to the host */
    struct be_ops fake = be_cpu_ops;
    fake.name = "cpu with a step_top";
    fake.step_top = fake_step_top;
    fake_m = m;
    whole_steps(&fake, m, BE_CACHE_F32, FAKE_MAX);
    {
        struct be *b = NULL;
        struct be_params bp = { .n_ctx = 64, .n_seq = 1, .n_batch = 8, .n_threads = 2, .on_device = place };
        CHECK_OK(fake.open(&b, m, &bp));
        struct eval e;
        const struct eval_params ep = { .n_batch = 8, .on_device = place, .pool = host };
        CHECK_OK(eval_init(&e, m, &fake, b, &ep));
        CHECK(!e.whole_ok, "%s: whole steps with neurons left to the host", fake.name);
        eval_fini(&e);
        fake.close(b);
    }
    pool_free(host);
    free(place);
    ctx_free(c);
    free(want), free(got), free(sel);
    model_free(m);
    return tu_finish("backend_ops");
}
