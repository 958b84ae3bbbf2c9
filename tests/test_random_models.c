/* test_random_models — shape-generic forward pass: tiny random models made here (a qwen2 with q/k/v
 * biases, tied embeddings, byte-level BPE and ChatML tokens; a llama with multi-query attention and a
 * head size that differs from n_embd / n_head) are written as GGUF, loaded by the engine, and their
 * logits compared with a straightforward f64 implementation below (recomputes the whole sequence
 * for every position, no cache). Also the model loader's errors: unknown architecture, missing
 * tensor, wrong shape, a prompt longer than the context. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eval.h"
#include "generate.h"
#include "gguf.h"
#include "model.h"
#include "pi_err.h"
#include "quant.h"
#include "ref_f64.h"
#include "tokenizer.h"
#include "testutil.h"

#define REL_TOL 1e-4
#define N_SEQ 9     /* tokens evaluated: a prefill of N_PREFILL, then one at a time */
#define N_PREFILL 5
#define MAX_LAYERS 4

struct cfg {
    const char *arch;
    const char *act; /* pinfer.ffn_activation, or NULL */
    int n_embd, n_layer, n_ff, n_head, n_head_kv, head_dim;
    bool tied, bias, neox;
    float theta, eps;
};

/* random weights (f32), kept for the reference */
struct weights {
    float *emb, *out_norm, *out;
    float *attn_norm[MAX_LAYERS], *wq[MAX_LAYERS], *wk[MAX_LAYERS], *wv[MAX_LAYERS], *wo[MAX_LAYERS];
    float *bq[MAX_LAYERS], *bk[MAX_LAYERS], *bv[MAX_LAYERS];
    float *ffn_norm[MAX_LAYERS], *gate[MAX_LAYERS], *up[MAX_LAYERS], *down[MAX_LAYERS];
};

static uint64_t rng_state = 0x1234567;
static float frand(float scale)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return ((float)(rng_state >> 40) / (float)(1 << 24) * 2.0f - 1.0f) * scale;
}

static float *rnd(size_t n, float scale, float offset)
{
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = offset + frand(scale);
    return p;
}

/* ---- vocabularies ---- */

#define N_BYTES 256
static const char *const chatml[] = { "<|endoftext|>", "<|im_start|>", "<|im_end|>" };
#define N_CHATML 3
#define BPE_VOCAB (N_BYTES + N_CHATML + 2)  /* + two merged tokens */
#define SPM_VOCAB (3 + N_BYTES + 4)

/* GPT-2's byte → printable code point map */
static int byte_to_cp(int b)
{
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))
        return b;
    int n = 0;
    for (int x = 0; x < b; x++)
        if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF)))
            n++;
    return 256 + n;
}

static void utf8(int cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    } else {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        out[3] = 0;
    }
}

static void set_bpe_vocab(struct gguf_writer *w, int n_vocab)
{
    char **toks = calloc((size_t)n_vocab, sizeof *toks);
    int32_t *types = calloc((size_t)n_vocab, sizeof *types);
    for (int b = 0; b < N_BYTES; b++) {
        toks[b] = malloc(4);
        utf8(byte_to_cp(b), toks[b]);
        types[b] = TOK_TYPE_NORMAL;
    }
    int id = N_BYTES;
    toks[id] = strdup("Ġh"); /* "Ġ" is the byte-level form of ' ' */
    types[id++] = TOK_TYPE_NORMAL;
    toks[id] = strdup("Ġhi");
    types[id++] = TOK_TYPE_NORMAL;
    for (int i = 0; i < N_CHATML; i++) {
        toks[id] = strdup(chatml[i]);
        types[id++] = TOK_TYPE_CONTROL;
    }
    REQUIRE(id == n_vocab, "vocabulary built %d tokens, expected %d", id, n_vocab);
    const char *merges[] = { "Ġ h", "Ġh i" };
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_str(w, "tokenizer.ggml.pre", "qwen2");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)toks, NULL, (size_t)n_vocab);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, (size_t)n_vocab);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, NULL, 2);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", N_BYTES + 2 + 2); /* <|im_end|> */
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", N_BYTES + 2);     /* <|endoftext|> */
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false);
    for (int i = 0; i < n_vocab; i++)
        free(toks[i]);
    free(toks);
    free(types);
}

static void set_spm_vocab(struct gguf_writer *w, int n_vocab)
{
    char **toks = calloc((size_t)n_vocab, sizeof *toks);
    int32_t *types = calloc((size_t)n_vocab, sizeof *types);
    float *scores = calloc((size_t)n_vocab, sizeof *scores);
    const char *specials[] = { "<unk>", "<s>", "</s>" };
    const int32_t stypes[] = { TOK_TYPE_UNKNOWN, TOK_TYPE_CONTROL, TOK_TYPE_CONTROL };
    int id = 0;
    for (int i = 0; i < 3; i++, id++) {
        toks[id] = strdup(specials[i]);
        types[id] = stypes[i];
    }
    for (int b = 0; b < N_BYTES; b++, id++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        toks[id] = strdup(s);
        types[id] = TOK_TYPE_BYTE;
    }
    const char *pieces[] = { "\xe2\x96\x81", "a", "b", "\xe2\x96\x81" "ab" };
    for (int i = 0; i < 4; i++, id++) {
        toks[id] = strdup(pieces[i]);
        types[id] = TOK_TYPE_NORMAL;
        scores[id] = -(float)i;
    }
    REQUIRE(id == n_vocab, "vocabulary built %d tokens, expected %d", id, n_vocab);
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)toks, NULL, (size_t)n_vocab);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, (size_t)n_vocab);
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, (size_t)n_vocab);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    for (int i = 0; i < n_vocab; i++)
        free(toks[i]);
    free(toks);
    free(types);
    free(scores);
}

/* ---- model files ---- */

enum corruption { CORRUPT_NONE, CORRUPT_ARCH, CORRUPT_MISSING, CORRUPT_SHAPE, CORRUPT_LAYERS };

static int n_vocab_of(const struct cfg *c) { return c->neox ? BPE_VOCAB : SPM_VOCAB; }

static void make_weights(const struct cfg *c, struct weights *w)
{
    const size_t E = (size_t)c->n_embd, Q = (size_t)c->n_head * c->head_dim, KV = (size_t)c->n_head_kv * c->head_dim,
                 F = (size_t)c->n_ff, V = (size_t)n_vocab_of(c);
    memset(w, 0, sizeof *w);
    w->emb = rnd(V * E, 1.0f, 0.0f);
    w->out_norm = rnd(E, 0.2f, 1.0f);
    w->out = c->tied ? NULL : rnd(V * E, 0.3f, 0.0f);
    for (int l = 0; l < c->n_layer; l++) {
        w->attn_norm[l] = rnd(E, 0.2f, 1.0f);
        w->wq[l] = rnd(Q * E, 0.4f, 0.0f);
        w->wk[l] = rnd(KV * E, 0.4f, 0.0f);
        w->wv[l] = rnd(KV * E, 0.4f, 0.0f);
        w->wo[l] = rnd(E * Q, 0.3f, 0.0f);
        if (c->bias) {
            w->bq[l] = rnd(Q, 0.5f, 0.0f);
            w->bk[l] = rnd(KV, 0.5f, 0.0f);
            w->bv[l] = rnd(KV, 0.5f, 0.0f);
        }
        w->ffn_norm[l] = rnd(E, 0.2f, 1.0f);
        w->gate[l] = rnd(F * E, 0.4f, 0.0f);
        w->up[l] = rnd(F * E, 0.4f, 0.0f);
        w->down[l] = rnd(E * F, 0.3f, 0.0f);
    }
}

static void free_weights(const struct cfg *c, struct weights *w)
{
    free(w->emb);
    free(w->out_norm);
    free(w->out);
    for (int l = 0; l < c->n_layer; l++) {
        free(w->attn_norm[l]);
        free(w->wq[l]);
        free(w->wk[l]);
        free(w->wv[l]);
        free(w->wo[l]);
        free(w->bq[l]);
        free(w->bk[l]);
        free(w->bv[l]);
        free(w->ffn_norm[l]);
        free(w->gate[l]);
        free(w->up[l]);
        free(w->down[l]);
    }
}

static void add(struct gguf_writer *g, const char *name, const float *data, int64_t ne0, int64_t ne1)
{
    int64_t ne[2] = { ne0, ne1 };
    int rc = gguf_writer_add_tensor(g, name, PI_TYPE_F32, ne1 > 1 ? 2 : 1, ne, data);
    REQUIRE(rc == 0, "add_tensor %s: %s", name, pi_errmsg());
}

static void write_model(const char *path, const struct cfg *c, const struct weights *w, enum corruption bad)
{
    struct gguf_writer *g = NULL;
    REQUIRE(gguf_writer_new(&g, GGUF_MAGIC_GGUF) == 0, "writer_new: %s", pi_errmsg());
    const char *arch = bad == CORRUPT_ARCH ? "gptx" : c->arch;
    char key[128];
    gguf_writer_set_str(g, "general.architecture", arch);
    gguf_writer_set_str(g, "general.name", "random");
#define KEY(s) (snprintf(key, sizeof key, "%s." s, arch), key)
    gguf_writer_set_u32(g, KEY("context_length"), 64);
    gguf_writer_set_u32(g, KEY("embedding_length"), (uint32_t)c->n_embd);
    /* CORRUPT_LAYERS: a block count no file of these tensors can back (the loader must refuse it before
     * allocating its layer table) */
    gguf_writer_set_u32(g, KEY("block_count"), bad == CORRUPT_LAYERS ? 20000000u : (uint32_t)c->n_layer);
    gguf_writer_set_u32(g, KEY("feed_forward_length"), (uint32_t)c->n_ff);
    gguf_writer_set_u32(g, KEY("attention.head_count"), (uint32_t)c->n_head);
    gguf_writer_set_u32(g, KEY("attention.head_count_kv"), (uint32_t)c->n_head_kv);
    gguf_writer_set_u32(g, KEY("attention.key_length"), (uint32_t)c->head_dim);
    gguf_writer_set_u32(g, KEY("attention.value_length"), (uint32_t)c->head_dim);
    gguf_writer_set_u32(g, KEY("rope.dimension_count"), (uint32_t)c->head_dim);
    gguf_writer_set_f32(g, KEY("rope.freq_base"), c->theta);
    gguf_writer_set_f32(g, KEY("attention.layer_norm_rms_epsilon"), c->eps);
#undef KEY
    if (c->act)
        gguf_writer_set_str(g, "pinfer.ffn_activation", c->act);
    const int V = n_vocab_of(c);
    if (c->neox)
        set_bpe_vocab(g, V);
    else
        set_spm_vocab(g, V);
    const int64_t E = c->n_embd, Q = (int64_t)c->n_head * c->head_dim, KV = (int64_t)c->n_head_kv * c->head_dim,
                  F = c->n_ff;
    add(g, "token_embd.weight", w->emb, E, V);
    add(g, "output_norm.weight", w->out_norm, E, 1);
    if (!c->tied)
        add(g, "output.weight", w->out, E, V);
    char n[96];
    for (int l = 0; l < c->n_layer; l++) {
#define NM(s) (snprintf(n, sizeof n, "blk.%d." s, l), n)
        add(g, NM("attn_norm.weight"), w->attn_norm[l], E, 1);
        add(g, NM("attn_q.weight"), w->wq[l], E, Q);
        add(g, NM("attn_k.weight"), w->wk[l], E, KV);
        add(g, NM("attn_v.weight"), w->wv[l], E, KV);
        add(g, NM("attn_output.weight"), w->wo[l], Q, E);
        if (c->bias) {
            add(g, NM("attn_q.bias"), w->bq[l], Q, 1);
            add(g, NM("attn_k.bias"), w->bk[l], KV, 1);
            add(g, NM("attn_v.bias"), w->bv[l], KV, 1);
        }
        add(g, NM("ffn_norm.weight"), w->ffn_norm[l], E, 1);
        add(g, NM("ffn_gate.weight"), w->gate[l], E, F);
        if (!(bad == CORRUPT_MISSING && l == c->n_layer - 1))
            add(g, NM("ffn_up.weight"), w->up[l], E, bad == CORRUPT_SHAPE && l == 0 ? F / 2 : F);
        add(g, NM("ffn_down.weight"), w->down[l], F, E);
#undef NM
    }
    int rc = gguf_writer_write_file(g, path);
    REQUIRE(rc == 0, "write %s: %s", path, pi_errmsg());
    gguf_writer_free(g);
}

/* ---- the f64 reference ---- */

/* logits (n, V) for every position of toks */
static void ref_forward(const struct cfg *c, const struct weights *w, const int32_t *toks, int n, double *logits)
{
    const int E = c->n_embd, H = c->n_head, HK = c->n_head_kv, D = c->head_dim, Q = H * D, KV = HK * D, F = c->n_ff,
              V = n_vocab_of(c);
    double *x = calloc((size_t)n * E, sizeof *x), *xn = malloc((size_t)E * sizeof *xn);
    double *q = malloc((size_t)n * Q * sizeof *q), *k = malloc((size_t)n * KV * sizeof *k),
           *v = malloc((size_t)n * KV * sizeof *v), *att = malloc((size_t)Q * sizeof *att),
           *o = malloc((size_t)E * sizeof *o), *g = malloc((size_t)F * sizeof *g), *u = malloc((size_t)F * sizeof *u),
           *sc = malloc((size_t)n * sizeof *sc);
    for (int t = 0; t < n; t++)
        for (int i = 0; i < E; i++)
            x[(size_t)t * E + i] = w->emb[(size_t)toks[t] * E + i];
    for (int l = 0; l < c->n_layer; l++) {
        for (int t = 0; t < n; t++) {
            ref_norm(x + (size_t)t * E, w->attn_norm[l], xn, E, c->eps);
            ref_mv(w->wq[l], xn, q + (size_t)t * Q, E, Q);
            ref_mv(w->wk[l], xn, k + (size_t)t * KV, E, KV);
            ref_mv(w->wv[l], xn, v + (size_t)t * KV, E, KV);
            for (int i = 0; c->bias && i < Q; i++)
                q[(size_t)t * Q + i] += w->bq[l][i];
            for (int i = 0; c->bias && i < KV; i++) {
                k[(size_t)t * KV + i] += w->bk[l][i];
                v[(size_t)t * KV + i] += w->bv[l][i];
            }
            ref_rope(q + (size_t)t * Q, H, D, t, c->theta, c->neox);
            ref_rope(k + (size_t)t * KV, HK, D, t, c->theta, c->neox);
        }
        for (int t = 0; t < n; t++) {
            for (int h = 0; h < H; h++) {
                const int kh = h / (H / HK);
                double mx = -INFINITY, sum = 0.0;
                for (int s = 0; s <= t; s++) {
                    double d = 0.0;
                    for (int i = 0; i < D; i++)
                        d += q[(size_t)t * Q + h * D + i] * k[(size_t)s * KV + kh * D + i];
                    sc[s] = d / sqrt((double)D);
                    mx = fmax(mx, sc[s]);
                }
                for (int s = 0; s <= t; s++)
                    sum += (sc[s] = exp(sc[s] - mx));
                for (int i = 0; i < D; i++) {
                    double a = 0.0;
                    for (int s = 0; s <= t; s++)
                        a += sc[s] / sum * v[(size_t)s * KV + kh * D + i];
                    att[h * D + i] = a;
                }
            }
            ref_mv(w->wo[l], att, o, Q, E);
            for (int i = 0; i < E; i++)
                x[(size_t)t * E + i] += o[i];
            ref_norm(x + (size_t)t * E, w->ffn_norm[l], xn, E, c->eps);
            ref_mv(w->gate[l], xn, g, E, F);
            ref_mv(w->up[l], xn, u, E, F);
            const bool relu = c->act && !strcmp(c->act, "relu");
            for (int i = 0; i < F; i++)
                g[i] = relu ? (g[i] > 0 ? g[i] : 0) * u[i] : g[i] / (1.0 + exp(-g[i])) * u[i];
            ref_mv(w->down[l], g, o, F, E);
            for (int i = 0; i < E; i++)
                x[(size_t)t * E + i] += o[i];
        }
    }
    const float *out = c->tied ? w->emb : w->out;
    for (int t = 0; t < n; t++) {
        ref_norm(x + (size_t)t * E, w->out_norm, xn, E, c->eps);
        ref_mv(out, xn, logits + (size_t)t * V, E, V);
    }
    free(x), free(xn), free(q), free(k), free(v), free(att), free(o), free(g), free(u), free(sc);
}

static double rel_diff(const float *a, const double *b, int n)
{
    double md = 0.0, mr = 0.0;
    for (int i = 0; i < n; i++) {
        md = fmax(md, fabs(a[i] - b[i]));
        mr = fmax(mr, fabs(b[i]));
    }
    return md / mr;
}

static void check_model(const char *label, const struct cfg *c, const char *dir)
{
    struct weights w;
    make_weights(c, &w);
    char path[512];
    snprintf(path, sizeof path, "%s/%s.gguf", dir, label);
    write_model(path, c, &w, CORRUPT_NONE);
    struct pi_model *m = NULL;
    int rc = model_load(&m, path);
    REQUIRE(rc == 0, "%s: model_load: %s %s", label, pi_strerror(rc), pi_errmsg());
    CHECK(m->hp.tied_output == c->tied, "%s: tied_output %d", label, m->hp.tied_output);
    CHECK(m->hp.rope_mode == (c->neox ? OPS_ROPE_NEOX : OPS_ROPE_NORM), "%s: rope mode", label);
    const int V = n_vocab_of(c);
    int32_t toks[N_SEQ];
    for (int i = 0; i < N_SEQ; i++)
        toks[i] = (int32_t)((i * 37 + 11) % V);
    double *ref = malloc((size_t)N_SEQ * V * sizeof *ref);
    ref_forward(c, &w, toks, N_SEQ, ref);

    for (int threads = 1; threads <= 3; threads += 2) {
        struct pi_ctx *ctx = NULL;
        struct pi_ctx_params cp = { .n_ctx = 32, .n_batch = 3, .n_threads = threads };
        CHECK_OK(ctx_new(&ctx, m, &cp));
        float *lg = malloc((size_t)N_SEQ * V * sizeof *lg);
        CHECK_OK(ctx_eval(ctx, toks, N_PREFILL, 0, lg, true)); /* chunked: n_batch 3 < 5 */
        for (int t = N_PREFILL; t < N_SEQ; t++)
            CHECK_OK(ctx_eval(ctx, toks + t, 1, t, lg + (size_t)t * V, false));
        for (int t = 0; t < N_SEQ; t++) {
            double d = rel_diff(lg + (size_t)t * V, ref + (size_t)t * V, V);
            CHECK(d < REL_TOL, "%s (threads %d): position %d logits differ from f64 reference by %.3g", label,
                  threads, t, d);
        }
        /* a prompt longer than the context is refused with a clear error */
        int32_t *long_prompt = calloc(40, sizeof *long_prompt);
        struct gen_params gp = { .n_predict = 1 };
        samp_defaults(&gp.samp);
        struct gen_stats st;
        rc = gen_run(ctx, m, &gp, long_prompt, 40, NULL, NULL, &st);
        CHECK(rc == -PI_E_RANGE && strstr(pi_errmsg(), "context"), "%s: long prompt gave %d '%s'", label, rc,
              pi_errmsg());
        free(long_prompt);
        free(lg);
        ctx_free(ctx);
    }
    printf("%s: logits match the f64 reference at %d positions\n", label, N_SEQ);

    if (c->neox) {
        const char *chat = "<|im_start|>user\n hi<|im_end|>";
        int32_t *ids = NULL;
        size_t n = 0;
        CHECK_OK(tok_encode(m->tok, chat, strlen(chat), false, true, &ids, &n));
        CHECK(n >= 3 && ids[0] == N_BYTES + 2 + 1 && ids[n - 1] == N_BYTES + 2 + 2,
              "%s: ChatML specials must be single tokens (n=%zu first=%d last=%d)", label, n, n ? ids[0] : -1,
              n ? ids[n - 1] : -1);
        CHECK(n >= 2 && ids[n - 2] == N_BYTES + 1, "%s: ' hi' must merge into one token (got %d)", label,
              n >= 2 ? ids[n - 2] : -1);
        CHECK(tok_is_eog(m->tok, N_BYTES + 2 + 2), "%s: <|im_end|> must end generation", label);
        free(ids);
    }
    model_free(m);
    free(ref);

    /* loader errors */
    struct {
        enum corruption bad;
        int code;
        const char *needle;
    } errs[] = {
        { CORRUPT_ARCH, -PI_E_UNSUPPORTED, "gptx" },
        { CORRUPT_MISSING, -PI_E_NOTFOUND, "ffn_up.weight' is missing" },
        { CORRUPT_SHAPE, -PI_E_TYPE, "blk.0.ffn_up.weight" },
        { CORRUPT_LAYERS, -PI_E_RANGE, "block_count is 20000000" },
    };
    for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++) {
        write_model(path, c, &w, errs[i].bad);
        m = NULL;
        rc = model_load(&m, path);
        CHECK(rc == errs[i].code && strstr(pi_errmsg(), errs[i].needle), "%s: corruption %zu gave %d '%s'", label, i,
              rc, pi_errmsg());
        model_free(m);
    }
    unlink(path);
    free_weights(c, &w);
}

int main(void)
{
    char dir[] = "/tmp/pinfer-randXXXXXX";
    REQUIRE(mkdtemp(dir), "mkdtemp");
    const struct cfg qwen2 = { .arch = "qwen2", .n_embd = 64, .n_layer = 2, .n_ff = 96, .n_head = 4,
                               .n_head_kv = 2, .head_dim = 16, .tied = true, .bias = true, .neox = true,
                               .theta = 1000000.0f, .eps = 1e-6f };
    const struct cfg mqa = { .arch = "llama", .act = "relu", .n_embd = 64, .n_layer = 3, .n_ff = 128, .n_head = 4,
                             .n_head_kv = 1, .head_dim = 32, .tied = false, .bias = false, .neox = false,
                             .theta = 10000.0f, .eps = 1e-5f };
    const struct cfg swiglu = { .arch = "llama", .n_embd = 32, .n_layer = 1, .n_ff = 64, .n_head = 2, .n_head_kv = 2,
                                .head_dim = 16, .theta = 500000.0f, .eps = 1e-5f };
    check_model("qwen2-tied-bias-bpe", &qwen2, dir);
    check_model("llama-mqa-relu", &mqa, dir);
    check_model("llama-swiglu", &swiglu, dir);
    rmdir(dir);
    return tu_finish("random_models");
}
