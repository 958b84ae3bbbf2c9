/* test_backend_ops_random — every op of backend interface v2, on random inputs, for every weight
 * type and every architecture the random-model builder makes (llama ReGLU and SwiGLU, qwen2 with
 * q/k/v biases and NeoX RoPE, multi-query attention, bamboo dReLU), for every backend be_names()
 * lists and both KV cache types — ggml's test-backend-ops habit. Each op is checked alone against a
 * straightforward f64 implementation here, fed the backend's own input (what get_h returns before
 * the op), so errors do not compound from op to op: the normalized mean squared error of what the
 * op added to the residual stream (or of the logits) stays under ggml's bounds (1e-7 for f32
 * weights, 5e-4 for the others: their activations are rounded to a half or 8-bit type) per matrix
 * product in series inside the op (attention and the FFN have two), predicted
 * masks differ from the reference only within the rounding band around the threshold, and the top-k
 * candidates (topk) are samp_best of the backend's own logits, bit for bit.
 *
 * Ops and what each step exercises (placement: layer 0 all on the backend, layer 1 half, the other
 * half's share given as y_host):
 *   step 1: two sequences' prompts interleaved (embed, attn, dense ffn, ffn_add, output, topk)
 *   step 2: decode tokens of both, two of one sequence in the same step (predict → get_mask → sparse
 *           ffn on the backend's own masks; set_mask where the file has no predictor)
 *   step 3: seq_clear of one sequence, which starts again at position 0 (set_mask with random masks)
 * A backend that cannot open here (cuda without a device) is reported and skipped; one that refuses
 * a weight type (a -PI_E_UNSUPPORTED naming it) fails: cuda runs all 15 types. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "model.h"
#include "pi_err.h"
#include "pwri_testmodel.h"
#include "quant.h"
#include "ref_f64.h"
#include "sampling.h"
#include "testutil.h"

#define N_CTX 16
#define N_SEQ 2
#define N_BATCH 8
#define MAX_TOK 8

struct arch_case {
    const char *label;
    struct pwri_cfg cfg; /* types filled per run */
};

/* the f64 reference's state: per layer, sequence and position the K and V rows it computed from the
 * backend's own inputs */
struct ref {
    const struct pwri_cfg *c;
    const struct pwri_weights *w;
    const struct pi_hparams *hp;
    double *kc, *vc; /* (n_layer, N_SEQ, N_CTX, KV) */
};

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(float scale)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return ((float)(rng >> 40) / (float)(1 << 24) * 2.0f - 1.0f) * scale;
}

/* y = rmsnorm(x) * w of a row the backend returned (float) */
static void rmsnorm(const float *x, const float *w, double *y, int n, double eps)
{
    for (int i = 0; i < n; i++)
        y[i] = x[i];
    ref_norm(y, w, y, n, eps);
}

static double glu(const struct pwri_cfg *c, double g, double u)
{
    if (!strcmp(c->arch, "bamboo"))
        return g > 0 && u > 0 ? g * u : 0.0;
    if (c->pwri || (c->act && !strcmp(c->act, "relu")))
        return g > 0 ? g * u : 0.0;
    return g / (1.0 + exp(-g)) * u;
}

/* Σ(a − b)² / Σ b² over n values, of got − base against want (both deltas from base when base ≠ NULL) */
static double nmse(const float *got, const double *want, const float *base, int64_t n)
{
    double e = 0.0, s = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double g = got[i] - (base ? base[i] : 0.0f), w = want[i] - (base ? base[i] : 0.0f);
        e += (g - w) * (g - w);
        s += w * w;
    }
    return s > 0 ? e / s : e;
}

static double *ref_kv(struct ref *r, double *cache, int layer, int seq, int pos)
{
    const int KV = r->c->n_head_kv * r->c->head_dim;
    return cache + (((size_t)layer * N_SEQ + (size_t)seq) * N_CTX + (size_t)pos) * KV;
}

/* x_out = x + wo · attention(x) for the batch, K/V of its tokens stored first (a token attends to
 * the cells of its sequence at positions ≤ its own, including those of this batch) */
static void ref_attn(struct ref *r, int l, const struct pi_batch *bt, const float *x, double *out)
{
    const struct pwri_cfg *c = r->c;
    const struct pwri_weights *w = r->w;
    const int E = c->n_embd, H = c->n_head, HK = c->n_head_kv, D = c->head_dim, Q = H * D, KV = HK * D;
    const bool neox = r->hp->rope_mode == OPS_ROPE_NEOX;
    double *xn = malloc((size_t)E * sizeof *xn), *q = malloc((size_t)bt->n * Q * sizeof *q),
           *att = malloc((size_t)Q * sizeof *att), *o = malloc((size_t)E * sizeof *o), sc[N_CTX];
    for (int32_t t = 0; t < bt->n; t++) {
        double *k = ref_kv(r, r->kc, l, bt->seq[t], bt->pos[t]), *v = ref_kv(r, r->vc, l, bt->seq[t], bt->pos[t]);
        rmsnorm(x + (size_t)t * E, w->attn_norm[l], xn, E, r->hp->norm_eps);
        ref_mv(w->wq[l], xn, q + (size_t)t * Q, E, Q);
        ref_mv(w->wk[l], xn, k, E, KV);
        ref_mv(w->wv[l], xn, v, E, KV);
        for (int i = 0; c->bias && i < Q; i++)
            q[(size_t)t * Q + i] += w->bq[l][i];
        for (int i = 0; c->bias && i < KV; i++)
            k[i] += w->bk[l][i], v[i] += w->bv[l][i];
        ref_rope(q + (size_t)t * Q, H, D, bt->pos[t], r->hp->rope_theta, neox);
        ref_rope(k, HK, D, bt->pos[t], r->hp->rope_theta, neox);
    }
    for (int32_t t = 0; t < bt->n; t++) {
        const int p = bt->pos[t], s = bt->seq[t];
        for (int h = 0; h < H; h++) {
            const int kh = h / (H / HK);
            double mx = -INFINITY, sum = 0.0;
            for (int j = 0; j <= p; j++) {
                double d = 0.0;
                for (int i = 0; i < D; i++)
                    d += q[(size_t)t * Q + h * D + i] * ref_kv(r, r->kc, l, s, j)[kh * D + i];
                sc[j] = d / sqrt((double)D);
                mx = fmax(mx, sc[j]);
            }
            for (int j = 0; j <= p; j++)
                sum += (sc[j] = exp(sc[j] - mx));
            for (int i = 0; i < D; i++) {
                double a = 0.0;
                for (int j = 0; j <= p; j++)
                    a += sc[j] / sum * ref_kv(r, r->vc, l, s, j)[kh * D + i];
                att[h * D + i] = a;
            }
        }
        ref_mv(w->wo[l], att, o, Q, E);
        for (int i = 0; i < E; i++)
            out[(size_t)t * E + i] = x[(size_t)t * E + i] + o[i];
    }
    free(xn), free(q), free(att), free(o);
}

/* predictor scores fc2 · relu(fc1 · h) of n tokens: (n, n_ff) */
static void ref_scores(struct ref *r, int l, int32_t n, const float *h, double *score)
{
    const int E = r->c->n_embd, F = r->c->n_ff, R = r->w->rank;
    double *hd = malloc((size_t)E * sizeof *hd), *z = malloc((size_t)R * sizeof *z);
    for (int32_t t = 0; t < n; t++) {
        for (int i = 0; i < E; i++)
            hd[i] = h[(size_t)t * E + i];
        ref_mv(r->w->fc1[l], hd, z, E, R);
        for (int i = 0; i < R; i++)
            z[i] = z[i] > 0 ? z[i] : 0;
        ref_mv(r->w->fc2[l], z, score + (size_t)t * F, R, F);
    }
    free(hd), free(z);
}

/* x_out = x + FFN over the neurons with on_dev (and, when mask ≠ NULL, in the token's mask) + y_host */
static void ref_ffn(struct ref *r, int l, int32_t n, const float *x, const uint8_t *on_dev, const uint8_t *mask,
                    const float *y_host, double *out)
{
    const struct pwri_weights *w = r->w;
    const int E = r->c->n_embd, F = r->c->n_ff;
    double *xn = malloc((size_t)E * sizeof *xn);
    for (int32_t t = 0; t < n; t++) {
        double *o = out + (size_t)t * E;
        rmsnorm(x + (size_t)t * E, w->ffn_norm[l], xn, E, r->hp->norm_eps);
        for (int e = 0; e < E; e++)
            o[e] = x[(size_t)t * E + e] + (y_host ? y_host[(size_t)t * E + e] : 0.0f);
        for (int i = 0; i < F; i++) {
            if (!on_dev[i] || (mask && !mask[(size_t)t * F + i]))
                continue;
            double g = 0.0, u = 0.0;
            for (int k = 0; k < E; k++) {
                g += (double)w->gate[l][(size_t)i * E + k] * xn[k];
                u += (double)w->up[l][(size_t)i * E + k] * xn[k];
            }
            const double a = glu(r->c, g, u);
            for (int e = 0; a != 0.0 && e < E; e++)
                o[e] += a * w->down[l][(size_t)e * F + i];
        }
    }
    free(xn);
}

static void ref_output(struct ref *r, int32_t n, const float *x, double *logits)
{
    const int E = r->c->n_embd, V = r->w->n_vocab;
    double *xn = malloc((size_t)E * sizeof *xn);
    for (int32_t t = 0; t < n; t++) {
        rmsnorm(x + (size_t)t * E, r->w->out_norm, xn, E, r->hp->norm_eps);
        ref_mv(r->c->tied ? r->w->emb : r->w->out, xn, logits + (size_t)t * V, E, V);
    }
    free(xn);
}

struct step {
    int32_t n;
    int32_t tok[MAX_TOK], pos[MAX_TOK], seq[MAX_TOK];
    uint8_t logits[MAX_TOK];
    int clear_seq; /* -1: none */
    enum { FFN_DENSE, FFN_PREDICT, FFN_SET_MASK } ffn;
};

struct run_ctx {
    const char *label;
    const struct be_ops *ops;
    struct be *b;
    struct ref *r;
    struct pi_model *m;
    const uint8_t *place; /* (n_layer, n_ff) */
    double tol;           /* NMSE bound */
    double band;          /* predictor: mismatches allowed within band · rms(score) of the threshold */
};

static int n_checks_of_case;
static double worst_nmse; /* of the current type, over its runs */

/* stages: the matrix products in series inside the op (attention: q/k/v, then wo; the FFN: gate/up,
 * then down), each bounded by tol: their errors add */
static void check_nmse(const struct run_ctx *rc, const char *op, int stages, int layer, int step, double e)
{
    n_checks_of_case++;
    worst_nmse = fmax(worst_nmse, e / stages);
    CHECK(e <= rc->tol * stages, "%s: %s (layer %d, step %d): NMSE %.3g > %d x %.3g", rc->label, op, layer, step, e,
          stages, rc->tol);
}

static void run_step(const struct run_ctx *rc, const struct step *s, int si)
{
    const struct be_ops *ops = rc->ops;
    struct be *b = rc->b;
    struct ref *r = rc->r;
    const int E = r->c->n_embd, F = r->c->n_ff, V = r->w->n_vocab, L = r->c->n_layer;
    const struct pi_batch bt = { .n = s->n, .tok = s->tok, .pos = s->pos, .seq = s->seq, .logits = s->logits };
    float *x = malloc((size_t)s->n * E * sizeof *x), *y = malloc((size_t)s->n * E * sizeof *y),
          *yh = malloc((size_t)s->n * E * sizeof *yh);
    double *want = malloc((size_t)s->n * (E > V ? E : V) * sizeof *want), *score = malloc((size_t)s->n * F * sizeof *score);
    uint8_t *mask = malloc((size_t)s->n * F);

    if (s->clear_seq >= 0)
        CHECK_OK(ops->seq_clear(b, s->clear_seq));
    CHECK_OK(ops->embed(b, &bt));
    CHECK_OK(ops->get_h(b, s->n, x));
    for (int32_t t = 0; t < s->n; t++)
        for (int i = 0; i < E; i++)
            want[(size_t)t * E + i] = r->w->emb[(size_t)s->tok[t] * E + i];
    check_nmse(rc, "embed", 1, -1, si, nmse(x, want, NULL, (int64_t)s->n * E));

    for (int l = 0; l < L; l++) {
        CHECK_OK(ops->attn(b, l, &bt));
        CHECK_OK(ops->get_h(b, s->n, y));
        ref_attn(r, l, &bt, x, want);
        check_nmse(rc, "attn", 2, l, si, nmse(y, want, x, (int64_t)s->n * E));
        memcpy(x, y, (size_t)s->n * E * sizeof *x);

        const uint8_t *on = rc->place + (size_t)l * F;
        const uint8_t *use_mask = NULL;
        if (s->ffn == FFN_PREDICT && ops->predict && r->w->fc1[l]) {
            CHECK_OK(ops->predict(b, l, s->n));
            CHECK_OK(ops->get_mask(b, s->n, mask));
            ref_scores(r, l, s->n, x, score);
            double ss = 0.0;
            for (int64_t i = 0; i < (int64_t)s->n * F; i++)
                ss += score[i] * score[i];
            const double rms = sqrt(ss / ((double)s->n * F)), thr = r->hp->sparse_threshold;
            int64_t off = 0, on_n = 0;
            for (int64_t i = 0; i < (int64_t)s->n * F; i++) {
                on_n += mask[i] != 0;
                if ((mask[i] != 0) != (score[i] >= thr) && fabs(score[i] - thr) > rc->band * rms)
                    off++;
            }
            n_checks_of_case++;
            CHECK(off == 0, "%s: predict (layer %d): %lld neurons differ from the reference beyond %.3g of the "
                  "threshold", rc->label, l, (long long)off, rc->band * rms);
            CHECK(on_n > 0 && on_n < (int64_t)s->n * F, "%s: predict (layer %d): %lld of %lld active", rc->label, l,
                  (long long)on_n, (long long)s->n * F);
            use_mask = mask;
        } else if (s->ffn != FFN_DENSE) {
            for (int64_t i = 0; i < (int64_t)s->n * F; i++)
                mask[i] = frand(1.0f) > 0.4f; /* ~30 % active */
            CHECK_OK(ops->set_mask(b, s->n, mask));
            use_mask = mask;
        }
        /* the half of layer 1 this backend does not hold comes back from "the host" as y_host */
        const bool half = l % 2 == 1;
        for (int64_t i = 0; i < (int64_t)s->n * E; i++)
            yh[i] = frand(0.1f);
        struct be_ffn_count cnt = { 0 };
        CHECK_OK(ops->ffn(b, (struct pi_layer_weights[]){ model_layer_weights(rc->m, l) }, s->n, use_mask != NULL, &cnt));
        CHECK_OK(ops->ffn_add(b, l, s->n, half ? yh : NULL));
        CHECK_OK(ops->get_h(b, s->n, y));
        ref_ffn(r, l, s->n, x, on, use_mask, half ? yh : NULL, want);
        check_nmse(rc, use_mask ? "sparse ffn + ffn_add" : "dense ffn + ffn_add", 2, l, si,
                   nmse(y, want, x, (int64_t)s->n * E));
        memcpy(x, y, (size_t)s->n * E * sizeof *x);
    }

    int32_t n_out = 0;
    for (int32_t t = 0; t < s->n; t++)
        if (s->logits[t])
            memcpy(y + (size_t)(n_out++) * E, x + (size_t)t * E, (size_t)E * sizeof *y);
    float *lg = malloc((size_t)n_out * V * sizeof *lg);
    CHECK_OK(ops->output(b, &bt, lg));
    ref_output(r, n_out, y, want);
    check_nmse(rc, "output", 1, -1, si, nmse(lg, want, NULL, (int64_t)n_out * V));
    static const int32_t top_ks[] = { 1, 5, 40, SAMP_BEST_MAX };
    for (size_t kk = 0; ops->topk && kk < sizeof top_ks / sizeof *top_ks; kk++) {
        const int32_t k = top_ks[kk] < V ? top_ks[kk] : V;
        int32_t ids[MAX_TOK * SAMP_BEST_MAX], want_ids[SAMP_BEST_MAX];
        float vals[MAX_TOK * SAMP_BEST_MAX], want_vals[SAMP_BEST_MAX];
        CHECK_OK(ops->topk(b, &bt, k, ids, vals));
        for (int32_t t = 0; t < n_out; t++) {
            samp_best(lg + (size_t)t * V, V, k, want_ids, want_vals);
            n_checks_of_case++;
            CHECK(!memcmp(ids + (size_t)t * k, want_ids, (size_t)k * sizeof *ids) &&
                      !memcmp(vals + (size_t)t * k, want_vals, (size_t)k * sizeof *vals),
                  "%s: top %d of output %d: ids %d.. (logit %g) where the backend's own logits give %d.. (%g)",
                  rc->label, k, t, ids[(size_t)t * k], (double)vals[(size_t)t * k], want_ids[0], (double)want_vals[0]);
        }
    }
    free(lg), free(x), free(y), free(yh), free(want), free(score), free(mask);
}

static const struct step steps[] = {
    { .n = 8, .tok = { 5, 17, 29, 41, 53, 65, 77, 89 }, .pos = { 0, 0, 1, 1, 2, 2, 3, 4 },
      .seq = { 0, 1, 0, 1, 0, 1, 0, 0 }, .logits = { 0, 0, 0, 0, 0, 1, 0, 1 }, .clear_seq = -1, .ffn = FFN_DENSE },
    { .n = 3, .tok = { 101, 113, 127 }, .pos = { 3, 5, 6 }, .seq = { 1, 0, 0 }, .logits = { 1, 1, 1 },
      .clear_seq = -1, .ffn = FFN_PREDICT },
    { .n = 3, .tok = { 131, 139, 149 }, .pos = { 0, 7, 1 }, .seq = { 1, 0, 1 }, .logits = { 0, 1, 1 },
      .clear_seq = 1, .ffn = FFN_SET_MASK },
};

/* one model (arch, type) on every backend and cache type; returns the backends that ran it */
static int run_case(const char *dir, const struct arch_case *ac, uint32_t type, int *skipped)
{
    struct pwri_cfg c = ac->cfg;
    const struct pi_type_traits *tt = quant_traits(type);
    c.ffn_type = c.mat_type = type;
    /* fc2 rows are rank (32) long: the 256-element types store predictors as Q8_0 (PowerInfer's
     * quantize picks another type for them too) */
    c.pred_type = tt->blck_size > 32 ? PI_TYPE_Q8_0 : type;
    char label[128], path[512];
    snprintf(label, sizeof label, "%s %s", ac->label, tt->name);
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    struct pwri_weights w;
    pwri_make(&c, &w, 0x5eed + type);
    pwri_write(path, &c, &w);
    struct pi_model *m = NULL;
    REQUIRE(model_load(&m, path) == 0, "%s: load: %s", label, pi_errmsg());
    const int L = c.n_layer, F = c.n_ff, KV = c.n_head_kv * c.head_dim;
    uint8_t *place = malloc((size_t)L * F);
    for (int l = 0; l < L; l++)
        for (int i = 0; i < F; i++)
            place[(size_t)l * F + i] = l % 2 == 0 || i < F / 2;
    struct ref r = { .c = &c, .w = &w, .hp = &m->hp };
    r.kc = calloc((size_t)L * N_SEQ * N_CTX * KV, sizeof *r.kc);
    r.vc = calloc((size_t)L * N_SEQ * N_CTX * KV, sizeof *r.vc);
    int ran = 0;
    for (const char *const *nm = be_names(); *nm; nm++)
        for (int ct = BE_CACHE_F32; ct <= BE_CACHE_F16; ct++) {
            const struct be_ops *ops = be_find(*nm);
            REQUIRE(ops, "be_find(%s)", *nm);
            struct be *b = NULL;
            const struct be_params bp = { .n_ctx = N_CTX, .n_seq = N_SEQ, .n_batch = N_BATCH, .n_threads = 2,
                                          .on_device = place, .cache_type = (enum be_cache_type)ct };
            const int orc = ops->open(&b, m, &bp);
            if (orc == -PI_E_UNSUPPORTED && strcmp(ops->name, "cpu")) {
                /* a backend that cannot open here (no device) is skipped; one that refuses the
                 * weight type fails: every backend runs every type */
                CHECK(!strstr(pi_errmsg(), tt->name), "%s: %s refuses the type: %s", label, ops->name, pi_errmsg());
                if (!*skipped)
                    printf("%s on %s: skipped (%s)\n", label, ops->name, pi_errmsg());
                (*skipped)++;
                continue;
            }
            CHECK(orc == 0, "%s: %s open: %s", label, ops->name, pi_errmsg());
            if (orc)
                continue;
            char rl[192];
            snprintf(rl, sizeof rl, "%s on %s (%s cache)", label, ops->name, ct == BE_CACHE_F16 ? "f16" : "f32");
            /* ggml's bounds: 1e-7 for most ops, 5e-4 for mul_mat with rounded activations; an f16
             * KV cache rounds K and V to 11 bits (NMSE ~ 2^-22 ≈ 2e-7 per op) */
            double tol = type == PI_TYPE_F32 ? 1e-7 : 5e-4;
            if (ct == BE_CACHE_F16 && tol < 1e-6)
                tol = 1e-6;
            /* a score error of NMSE ≤ tol has an rms of ≤ sqrt(tol) · rms(score): 3 σ either side */
            const double band = 3.0 * sqrt(c.pred_type == PI_TYPE_F32 ? 1e-7 : 5e-4);
            const struct run_ctx rc = { .label = rl, .ops = ops, .b = b, .r = &r, .m = m, .place = place,
                                        .tol = tol, .band = band };
            n_checks_of_case = 0;
            for (size_t si = 0; si < sizeof steps / sizeof steps[0]; si++)
                run_step(&rc, &steps[si], (int)si + 1);
            struct be_mem mem = { 0 };
            ops->mem(b, &mem);
            CHECK(mem.kv > 0, "%s: KV cache bytes reported", rl);
            ops->close(b);
            ran++;
            if (type == PI_TYPE_Q4_0)
                printf("%s: %d op checks\n", rl, n_checks_of_case);
        }
    free(r.kc), free(r.vc), free(place);
    model_free(m);
    pwri_free(&c, &w);
    unlink(path);
    return ran;
}

int main(void)
{
    char dir[] = "/tmp/pinfer-beopsXXXXXX";
    REQUIRE(mkdtemp(dir), "mkdtemp");
    /* n_embd and n_ff multiples of 256 (the K-quants' super-block); n_ff / 2 splits at a block */
    const struct pwri_cfg base = { .n_embd = 256, .n_layer = 2, .n_ff = 512, .n_head = 4, .n_head_kv = 4,
                                   .head_dim = 64, .pred = PRED_RANDOM };
    struct arch_case cases[] = {
        { "llama-reglu-pwri", base },
        { "llama-swiglu", base },
        { "qwen2-bias", base },
        { "llama-mqa-pwri", base },
        { "bamboo-drelu-pwri", base },
    };
    cases[0].cfg.arch = "llama", cases[0].cfg.pwri = true, cases[0].cfg.down_t = true;
    cases[1].cfg.arch = "llama", cases[1].cfg.down = true, cases[1].cfg.pred = PRED_NONE;
    cases[2].cfg.arch = "qwen2", cases[2].cfg.down = true, cases[2].cfg.pred = PRED_NONE, cases[2].cfg.bias = true,
    cases[2].cfg.tied = true, cases[2].cfg.n_head_kv = 2;
    cases[3].cfg.arch = "llama", cases[3].cfg.pwri = true, cases[3].cfg.down_t = true, cases[3].cfg.n_head_kv = 1;
    cases[4].cfg.arch = "bamboo", cases[4].cfg.pwri = true, cases[4].cfg.down_t = true;
    static const uint32_t types[] = { PI_TYPE_F32, PI_TYPE_F16, PI_TYPE_BF16, PI_TYPE_Q8_0, PI_TYPE_Q4_0,
                                      PI_TYPE_Q4_1, PI_TYPE_Q5_0, PI_TYPE_Q5_1, PI_TYPE_IQ4_NL, PI_TYPE_Q2_K,
                                      PI_TYPE_Q3_K, PI_TYPE_Q4_K, PI_TYPE_Q5_K, PI_TYPE_Q6_K, PI_TYPE_IQ4_XS };
    int runs = 0, skipped = 0;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        worst_nmse = 0;
        for (size_t a = 0; a < sizeof cases / sizeof cases[0]; a++)
            runs += run_case(dir, &cases[a], types[t], &skipped);
        printf("%-7s worst NMSE per matrix-product stage of any op, architecture, backend and cache: %.2g\n", quant_traits(types[t])->name,
               worst_nmse);
    }
    printf("%d (architecture, type, backend, cache) runs, %d skipped by a backend\n", runs, skipped);
    CHECK(runs >= (int)(sizeof cases / sizeof cases[0] * sizeof types / sizeof types[0]) * 2,
          "the CPU backend must run every case");
    rmdir(dir);
    return tu_finish("backend_ops_random");
}
