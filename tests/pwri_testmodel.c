/* pwri_testmodel.c — see pwri_testmodel.h. */
#include "pwri_testmodel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "pi_err.h"
#include "quant.h"
#include "tokenizer.h"
#include "testutil.h"

#define N_BYTES 256
#define SPM_VOCAB (3 + N_BYTES + 4)
#define RANDOM_RANK 32
#define NORM_EPS 1e-5f
#define MAX_BUFS (16 * PWRI_MAX_LAYERS + 8)

static uint64_t rng;
static float frand(float scale)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return ((float)(rng >> 40) / (float)(1 << 24) * 2.0f - 1.0f) * scale;
}

static float *rnd(size_t n, float scale, float offset)
{
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = offset + frand(scale);
    return p;
}

/* round rows of n elements to type t in place (quantize, dequantize) */
static void round_rows(float *x, int64_t rows, int64_t n, uint32_t t)
{
    if (t == PI_TYPE_F32)
        return;
    const struct pi_type_traits *tt = quant_traits_ref(t);
    void *q = malloc(quant_row_size(t, n));
    for (int64_t r = 0; r < rows; r++) {
        tt->from_float(x + r * n, q, n);
        tt->to_float(q, x + r * n, n);
    }
    free(q);
}

static float *transpose(const float *x, int64_t rows, int64_t cols)
{
    float *t = malloc((size_t)(rows * cols) * sizeof *t);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < cols; k++)
            t[k * rows + r] = x[r * cols + k];
    return t;
}

void pwri_make(const struct pwri_cfg *c, struct pwri_weights *w, uint64_t seed)
{
    const int64_t E = c->n_embd, Q = (int64_t)c->n_head * c->head_dim, KV = (int64_t)c->n_head_kv * c->head_dim,
                  F = c->n_ff;
    REQUIRE(c->n_layer <= PWRI_MAX_LAYERS, "too many layers");
    memset(w, 0, sizeof *w);
    rng = seed;
    w->n_vocab = SPM_VOCAB;
    w->rank = c->pred == PRED_EXACT || c->pred == PRED_OFF ? 2 * c->n_embd : RANDOM_RANK;
    const int64_t R = w->rank;
    w->emb = rnd((size_t)(w->n_vocab * E), 1.0f, 0.0f);
    w->out = c->tied ? NULL : rnd((size_t)(w->n_vocab * E), 0.3f, 0.0f);
    w->out_norm = rnd((size_t)E, 0.2f, 1.0f);
    round_rows(w->emb, w->n_vocab, E, c->mat_type);
    if (w->out)
        round_rows(w->out, w->n_vocab, E, c->mat_type);
    for (int l = 0; l < c->n_layer; l++) {
        w->attn_norm[l] = rnd((size_t)E, 0.2f, 1.0f);
        /* q and k scaled with 1/sqrt(n_embd) (as at n_embd 64): attention scores of a few units, as in
         * trained models, not a one-hot softmax that would amplify every rounding */
        const float qk = E > 64 ? 0.4f * sqrtf(64.0f / (float)E) : 0.4f;
        w->wq[l] = rnd((size_t)(Q * E), qk, 0.0f);
        w->wk[l] = rnd((size_t)(KV * E), qk, 0.0f);
        w->wv[l] = rnd((size_t)(KV * E), 0.4f, 0.0f);
        w->wo[l] = rnd((size_t)(E * Q), 0.3f, 0.0f);
        round_rows(w->wq[l], Q, E, c->mat_type);
        round_rows(w->wk[l], KV, E, c->mat_type);
        round_rows(w->wv[l], KV, E, c->mat_type);
        round_rows(w->wo[l], E, Q, c->mat_type);
        if (c->bias) {
            w->bq[l] = rnd((size_t)Q, 0.5f, 0.0f);
            w->bk[l] = rnd((size_t)KV, 0.5f, 0.0f);
            w->bv[l] = rnd((size_t)KV, 0.5f, 0.0f);
        }
        w->ffn_norm[l] = rnd((size_t)E, 0.2f, 1.0f); /* positive: the exact predictor folds it in */
        w->gate[l] = rnd((size_t)(F * E), 0.4f, 0.0f);
        w->up[l] = rnd((size_t)(F * E), 0.4f, 0.0f);
        w->down[l] = rnd((size_t)(E * F), 0.3f, 0.0f);
        round_rows(w->gate[l], F, E, c->ffn_type);
        round_rows(w->up[l], F, E, c->ffn_type);
        if (c->down_t) { /* down_t rows are the quantization rows */
            float *t = transpose(w->down[l], E, F);
            round_rows(t, F, E, c->ffn_type);
            free(w->down[l]);
            w->down[l] = transpose(t, F, E);
            free(t);
        } else {
            round_rows(w->down[l], E, F, c->ffn_type);
        }
        if (c->pred != PRED_NONE) {
            w->fc1[l] = calloc((size_t)(R * E), sizeof(float));
            w->fc2[l] = calloc((size_t)(F * R), sizeof(float));
            if (c->pred == PRED_EXACT || c->pred == PRED_OFF) {
                for (int64_t k = 0; k < E; k++) {
                    w->fc1[l][k * E + k] = 1.0f;
                    w->fc1[l][(E + k) * E + k] = -1.0f;
                }
                for (int64_t i = 0; i < F; i++)
                    for (int64_t k = 0; k < E; k++) {
                        const float g = c->pred == PRED_EXACT ? w->gate[l][i * E + k] * w->ffn_norm[l][k]
                                                              : -0.5f - fabsf(frand(1.0f));
                        w->fc2[l][i * R + k] = g;
                        w->fc2[l][i * R + E + k] = c->pred == PRED_EXACT ? -g : g;
                    }
            } else {
                for (int64_t i = 0; i < R * E; i++)
                    w->fc1[l][i] = frand(0.5f);
                for (int64_t i = 0; i < F * R; i++)
                    w->fc2[l][i] = c->pred == PRED_ON ? fabsf(frand(0.5f)) : frand(0.5f);
            }
            round_rows(w->fc1[l], R, E, c->pred_type);
            round_rows(w->fc2[l], F, R, c->pred_type);
        }
        if (c->act_freq) {
            w->act_freq[l] = malloc((size_t)F * sizeof(float));
            for (int64_t i = 0; i < F; i++)
                w->act_freq[l][i] = 0.5f + frand(0.5f);
        }
    }
}

void pwri_free(const struct pwri_cfg *c, struct pwri_weights *w)
{
    free(w->emb), free(w->out), free(w->out_norm);
    for (int l = 0; l < c->n_layer; l++) {
        free(w->attn_norm[l]), free(w->wq[l]), free(w->wk[l]), free(w->wv[l]), free(w->wo[l]);
        free(w->bq[l]), free(w->bk[l]), free(w->bv[l]);
        free(w->ffn_norm[l]), free(w->gate[l]), free(w->up[l]), free(w->down[l]);
        free(w->fc1[l]), free(w->fc2[l]), free(w->act_freq[l]);
    }
    memset(w, 0, sizeof *w);
}

static void set_spm_vocab(struct gguf_writer *g)
{
    const int n = SPM_VOCAB;
    char **toks = calloc((size_t)n, sizeof *toks);
    int32_t *types = calloc((size_t)n, sizeof *types);
    float *scores = calloc((size_t)n, sizeof *scores);
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
    gguf_writer_set_str(g, "tokenizer.ggml.model", "llama");
    gguf_writer_set_arr_str(g, "tokenizer.ggml.tokens", (const char *const *)toks, NULL, (size_t)n);
    gguf_writer_set_arr(g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, (size_t)n);
    gguf_writer_set_arr(g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, (size_t)n);
    gguf_writer_set_u32(g, "tokenizer.ggml.bos_token_id", 1);
    gguf_writer_set_u32(g, "tokenizer.ggml.eos_token_id", 2);
    for (int i = 0; i < n; i++)
        free(toks[i]);
    free(toks), free(types), free(scores);
}

struct bufs {
    void *p[MAX_BUFS];
    int n;
};

/* data is overwritten with what the file stores (quantizing a rounded row again need not give the
 * same blocks: the K-quants' scale search is not idempotent) */
static void add(struct gguf_writer *g, struct bufs *b, const char *name, uint32_t type, float *data, int64_t ne0,
                int64_t ne1)
{
    const int64_t ne[2] = { ne0, ne1 };
    const void *src = data;
    if (type != PI_TYPE_F32) {
        const size_t row = quant_row_size(type, ne0);
        char *q = malloc(row * (size_t)ne1);
        for (int64_t r = 0; r < ne1; r++) {
            quant_traits_ref(type)->from_float(data + r * ne0, q + row * (size_t)r, ne0);
            quant_traits_ref(type)->to_float(q + row * (size_t)r, data + r * ne0, ne0);
        }
        REQUIRE(b->n < MAX_BUFS, "too many buffers");
        b->p[b->n++] = q;
        src = q;
    }
    int rc = gguf_writer_add_tensor(g, name, type, ne1 > 1 ? 2 : 1, ne, src);
    REQUIRE(rc == 0, "add_tensor %s: %s", name, pi_errmsg());
}

void pwri_write(const char *path, const struct pwri_cfg *c, struct pwri_weights *w)
{
    struct gguf_writer *g = NULL;
    REQUIRE(gguf_writer_new(&g, c->pwri ? GGUF_MAGIC_PWRI : GGUF_MAGIC_GGUF) == 0, "writer: %s", pi_errmsg());
    char key[128], n[96];
    gguf_writer_set_str(g, "general.architecture", c->arch);
    gguf_writer_set_str(g, "general.name", "pwri-test");
#define KEY(s) (snprintf(key, sizeof key, "%s." s, c->arch), key)
    gguf_writer_set_u32(g, KEY("context_length"), 64);
    gguf_writer_set_u32(g, KEY("embedding_length"), (uint32_t)c->n_embd);
    gguf_writer_set_u32(g, KEY("block_count"), (uint32_t)c->n_layer);
    gguf_writer_set_u32(g, KEY("feed_forward_length"), (uint32_t)c->n_ff);
    gguf_writer_set_u32(g, KEY("attention.head_count"), (uint32_t)c->n_head);
    gguf_writer_set_u32(g, KEY("attention.head_count_kv"), (uint32_t)c->n_head_kv);
    gguf_writer_set_u32(g, KEY("attention.key_length"), (uint32_t)c->head_dim);
    gguf_writer_set_u32(g, KEY("rope.dimension_count"), (uint32_t)c->head_dim);
    gguf_writer_set_f32(g, KEY("attention.layer_norm_rms_epsilon"), NORM_EPS);
#undef KEY
    if (c->act)
        gguf_writer_set_str(g, "pinfer.ffn_activation", c->act);
    if (c->set_threshold)
        gguf_writer_set_f32(g, "powerinfer.sparse_threshold", c->threshold);
    set_spm_vocab(g);
    const int64_t E = c->n_embd, Q = (int64_t)c->n_head * c->head_dim, KV = (int64_t)c->n_head_kv * c->head_dim,
                  F = c->n_ff, R = w->rank;
    struct bufs b = { .n = 0 };
    add(g, &b, "token_embd.weight", c->mat_type, w->emb, E, w->n_vocab);
    add(g, &b, "output_norm.weight", PI_TYPE_F32, w->out_norm, E, 1);
    if (!c->tied)
        add(g, &b, "output.weight", c->mat_type, w->out, E, w->n_vocab);
    float *down_t[PWRI_MAX_LAYERS] = { 0 };
    for (int l = 0; l < c->n_layer; l++) {
#define NM(s) (snprintf(n, sizeof n, "blk.%d." s, l), n)
        add(g, &b, NM("attn_norm.weight"), PI_TYPE_F32, w->attn_norm[l], E, 1);
        add(g, &b, NM("attn_q.weight"), c->mat_type, w->wq[l], E, Q);
        add(g, &b, NM("attn_k.weight"), c->mat_type, w->wk[l], E, KV);
        add(g, &b, NM("attn_v.weight"), c->mat_type, w->wv[l], E, KV);
        add(g, &b, NM("attn_output.weight"), c->mat_type, w->wo[l], Q, E);
        if (c->bias) {
            add(g, &b, NM("attn_q.bias"), PI_TYPE_F32, w->bq[l], Q, 1);
            add(g, &b, NM("attn_k.bias"), PI_TYPE_F32, w->bk[l], KV, 1);
            add(g, &b, NM("attn_v.bias"), PI_TYPE_F32, w->bv[l], KV, 1);
        }
        add(g, &b, NM("ffn_norm.weight"), PI_TYPE_F32, w->ffn_norm[l], E, 1);
        add(g, &b, NM("ffn_gate.weight"), c->ffn_type, w->gate[l], E, F);
        add(g, &b, NM("ffn_up.weight"), c->ffn_type, w->up[l], E, F);
        if (c->down)
            add(g, &b, NM("ffn_down.weight"), c->ffn_type, w->down[l], F, E);
        if (c->down_t && !(c->bad == BAD_NO_DOWN_T && l == c->n_layer - 1)) {
            down_t[l] = transpose(w->down[l], E, F);
            add(g, &b, NM("ffn_down_t.weight"), c->ffn_type, down_t[l], E, F);
            free(w->down[l]);
            w->down[l] = transpose(down_t[l], F, E);
        }
        if (c->pred != PRED_NONE) {
            if (!(c->bad == BAD_NO_FC1 && l == 1))
                add(g, &b, NM("fc1.weight"), c->pred_type, w->fc1[l], c->bad == BAD_FC1_SHAPE ? E / 2 : E,
                    c->bad == BAD_FC1_SHAPE ? 2 * R : R);
            add(g, &b, NM("fc2.weight"), c->pred_type, w->fc2[l], R, c->bad == BAD_FC2_SHAPE && l == 0 ? F / 2 : F);
        }
        if (c->act_freq)
            add(g, &b, NM("act_freq"), PI_TYPE_F32, w->act_freq[l], F, 1);
#undef NM
    }
    int rc = gguf_writer_write_file(g, path);
    REQUIRE(rc == 0, "write %s: %s", path, pi_errmsg());
    gguf_writer_free(g);
    for (int i = 0; i < b.n; i++)
        free(b.p[i]);
    for (int l = 0; l < c->n_layer; l++)
        free(down_t[l]);
}

void pwri_ref_ffn(const struct pwri_cfg *c, const struct pwri_weights *w, int layer, const float *h, double eps,
                  double *y, double *act_out)
{
    const int E = c->n_embd, F = c->n_ff;
    const bool drelu = !strcmp(c->arch, "bamboo");
    double *nrm = malloc((size_t)E * sizeof *nrm), *act = malloc((size_t)F * sizeof *act);
    double ss = 0.0;
    for (int k = 0; k < E; k++)
        ss += (double)h[k] * h[k];
    const double s = 1.0 / sqrt(ss / E + eps);
    for (int k = 0; k < E; k++)
        nrm[k] = h[k] * s * w->ffn_norm[layer][k];
    for (int i = 0; i < F; i++) {
        double g = 0.0, u = 0.0;
        for (int k = 0; k < E; k++) {
            g += (double)w->gate[layer][(size_t)i * E + k] * nrm[k];
            u += (double)w->up[layer][(size_t)i * E + k] * nrm[k];
        }
        act[i] = drelu ? (g > 0 && u > 0 ? g * u : 0.0) : (g > 0 ? g * u : 0.0);
        if (act_out)
            act_out[i] = act[i];
    }
    for (int e = 0; e < E; e++) {
        double a = 0.0;
        for (int i = 0; i < F; i++)
            a += (double)w->down[layer][(size_t)e * F + i] * act[i];
        y[e] = a;
    }
    free(nrm);
    free(act);
}
