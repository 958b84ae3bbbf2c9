/* test_convert — the HF → GGUF converter.
 *
 * 1. (--hf) The tiny ReLU llama (PINFER_SHARED/models/tiny-relu-llama, f16 safetensors) converted to f32,
 *    f16 and q8_0: hyperparameter and tokenizer keys, tensor count and shapes, the rotary q/k row
 *    permutation (recomputed here by the numpy recipe: reshape [heads, 2, d/2, n] → swap axes 1,2),
 *    f16 output bit-identical to the source, f32 output equal to it, q8_0 within its error bound.
 * 2. A qwen2-style checkpoint written here (sharded f32 safetensors + index, tied embeddings,
 *    byte-level BPE tokenizer.json with the Qwen2 split regex): biases, no output.weight, no
 *    permutation, pre "qwen2", added/padding token types, merges in both JSON forms.
 * 3. Errors: missing config.json, unknown architecture, truncated safetensors, bad dtype, bad
 *    offsets, unknown pre-tokenizer — each a clear code and message, and no output file left. */
#include <errno.h>
#include <ftw.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "convert.h"
#include "gguf.h"
#include "pi_err.h"
#include "quant.h"
#include "safetensors.h"
#include "tokenizer.h"
#include "testutil.h"

/* tiny-relu-llama's published hyperparameters */
#define TINY_LAYERS 6
#define TINY_EMBD 256
#define TINY_FF 1024
#define TINY_HEADS 4
#define TINY_KV_HEADS 2
#define TINY_HEAD_DIM 64
#define TINY_VOCAB 4096
#define TINY_TENSORS (2 + 9 * TINY_LAYERS + 1) /* embd, output_norm, 9 per block, output */

/* the qwen2-style checkpoint written by this test */
#define QW_LAYERS 2
#define QW_EMBD 64
#define QW_FF 128
#define QW_HEADS 4
#define QW_KV_HEADS 2
#define QW_HEAD_DIM (QW_EMBD / QW_HEADS)
#define QW_VOCAB 300
#define QW_TENSORS (1 + 12 * QW_LAYERS + 1) /* embd, 12 per block (3 biases), output_norm; tied */
#define QW_BYTE_TOKENS 256
#define QW_ID_ENDOFTEXT 259
#define QW_ID_IM_START 260
#define QW_ID_IM_END 261
#define QW_ID_TOOL 262

#define QWEN2_REGEX                                                                                \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define ODD_REGEX "\\p{N}{1,2}| ?\\p{L}+|\\s+"

#define PATH_CAP 512

static char tmp_root[PATH_CAP];

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static void path_join(char *buf, const char *a, const char *b)
{
    int n = snprintf(buf, PATH_CAP, "%s/%s", a, b);
    REQUIRE(n > 0 && n < PATH_CAP, "path too long: %s/%s", a, b);
}

static void make_dir(char *buf, const char *name)
{
    path_join(buf, tmp_root, name);
    int rc = mkdir(buf, 0755);
    REQUIRE(rc == 0, "mkdir %s: %s", buf, strerror(errno));
}

static bool file_exists(const char *p) { return access(p, F_OK) == 0; }

/* The whole file (malloc'd), or NULL. */
static uint8_t *slurp_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    uint8_t *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long len = ftell(f);
        if (len >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)len + 1)) &&
            fread(buf, 1, (size_t)len, f) != (size_t)len) {
            free(buf);
            buf = NULL;
        }
        *n = len >= 0 ? (size_t)len : 0;
    }
    fclose(f);
    return buf;
}

static void write_file(const char *dir, const char *name, const void *data, size_t n)
{
    char p[PATH_CAP];
    path_join(p, dir, name);
    FILE *f = fopen(p, "wb");
    REQUIRE(f, "open %s", p);
    size_t wrote = fwrite(data, 1, n, f);
    REQUIRE(wrote == n, "write %s", p);
    fclose(f);
}

static void write_json(const char *dir, const char *name, json_t *j)
{
    char *s = json_dumps(j, JSON_INDENT(1));
    REQUIRE(s, "json_dumps");
    write_file(dir, name, s, strlen(s));
    free(s);
    json_decref(j);
}

static int convert(const char *dir, const char *out, int type)
{
    struct convert_opts o = { .hf_dir = dir, .out_path = out, .out_type = type, .quiet = true };
    pi_errmsg_clear();
    return convert_hf(&o);
}

static void check_u32(const struct gguf_file *f, const char *key, uint32_t want)
{
    uint32_t v = 0;
    int rc = gguf_get_u32(f, key, &v);
    CHECK(rc == 0 && v == want, "%s = %u (rc %d), want %u", key, v, rc, want);
}

static void check_str(const struct gguf_file *f, const char *key, const char *want)
{
    const char *v = NULL;
    int rc = gguf_get_str(f, key, &v);
    CHECK(rc == 0 && v && !strcmp(v, want), "%s = '%s' (rc %d), want '%s'", key, v ? v : "(null)", rc, want);
}

static const struct gguf_tensor *check_tensor(const struct gguf_file *f, const char *name, uint32_t type, int64_t ne0,
                                              int64_t ne1)
{
    const struct gguf_tensor *t = gguf_find_tensor(f, name);
    CHECK(t, "tensor %s missing", name);
    if (!t) return NULL;
    CHECK(t->type == type, "%s type %u, want %u", name, t->type, type);
    CHECK(t->ne[0] == ne0 && t->ne[1] == ne1, "%s ne {%lld, %lld}, want {%lld, %lld}", name, (long long)t->ne[0],
          (long long)t->ne[1], (long long)ne0, (long long)ne1);
    CHECK(t->n_dims == (ne1 > 1 ? 2u : 1u), "%s n_dims %u", name, t->n_dims);
    return t;
}

/* numpy's w.reshape(H, 2, d/2, n).swapaxes(1, 2).reshape(H*d, n), written as index loops. */
static void permute_rows_ref(const uint16_t *src, uint16_t *dst, int64_t heads, int64_t d, int64_t n)
{
    for (int64_t h = 0; h < heads; h++)
        for (int64_t s = 0; s < 2; s++)
            for (int64_t j = 0; j < d / 2; j++)
                memcpy(dst + ((h * (d / 2) + j) * 2 + s) * n, src + ((h * 2 + s) * (d / 2) + j) * n,
                       (size_t)n * sizeof *dst);
}

/* ---------------------------------------------------------------- tiny llama */

static void check_tiny_keys(const struct gguf_file *f, uint32_t ftype)
{
    float fv = 0;
    check_str(f, "general.architecture", "llama");
    check_str(f, "general.name", "tiny-relu-llama");
    check_u32(f, "general.alignment", 32);
    check_u32(f, "general.file_type", ftype);
    check_u32(f, "llama.block_count", TINY_LAYERS);
    check_u32(f, "llama.embedding_length", TINY_EMBD);
    check_u32(f, "llama.feed_forward_length", TINY_FF);
    check_u32(f, "llama.attention.head_count", TINY_HEADS);
    check_u32(f, "llama.attention.head_count_kv", TINY_KV_HEADS);
    check_u32(f, "llama.attention.key_length", TINY_HEAD_DIM);
    check_u32(f, "llama.attention.value_length", TINY_HEAD_DIM);
    check_u32(f, "llama.rope.dimension_count", TINY_HEAD_DIM);
    check_u32(f, "llama.context_length", 1024);
    check_u32(f, "llama.vocab_size", TINY_VOCAB);
    CHECK(gguf_get_f32(f, "llama.rope.freq_base", &fv) == 0 && fv == 10000.0f, "rope base %g", fv);
    CHECK(gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &fv) == 0 && fv == 1e-5f, "eps %g", fv);
    check_str(f, "pinfer.ffn_activation", "relu");

    check_str(f, "tokenizer.ggml.model", "llama");
    CHECK(gguf_find_key(f, "tokenizer.ggml.pre") < 0, "no pre-tokenizer for SentencePiece");
    enum gguf_type et;
    size_t n = 0;
    const void *data;
    CHECK(gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &n, &data) == 0 && et == GGUF_TYPE_STRING && n == TINY_VOCAB,
          "tokens: %zu", n);
    CHECK(gguf_get_arr(f, "tokenizer.ggml.scores", &et, &n, &data) == 0 && et == GGUF_TYPE_FLOAT32 && n == TINY_VOCAB,
          "scores: %zu", n);
    CHECK(gguf_get_arr(f, "tokenizer.ggml.token_type", &et, &n, &data) == 0 && et == GGUF_TYPE_INT32 && n == TINY_VOCAB,
          "token_type: %zu", n);
    if (n == TINY_VOCAB && et == GGUF_TYPE_INT32) {
        int32_t t0, t1;
        memcpy(&t0, (const char *)data, sizeof t0);
        memcpy(&t1, (const char *)data + sizeof t1, sizeof t1);
        CHECK(t0 == TOK_TYPE_UNKNOWN && t1 == TOK_TYPE_CONTROL, "token types of <unk>, <s>: %d %d", t0, t1);
    }
    const char *s = NULL;
    size_t len = 0;
    CHECK(gguf_get_arr_str(f, "tokenizer.ggml.tokens", 1, &s, &len) == 0 && s && !strcmp(s, "<s>"), "token 1 '%s'",
          s ? s : "");
    check_u32(f, "tokenizer.ggml.bos_token_id", 1);
    check_u32(f, "tokenizer.ggml.eos_token_id", 2);
    check_u32(f, "tokenizer.ggml.unknown_token_id", 0);
    bool b = false;
    CHECK(gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &b) == 0 && b, "add_bos_token");
    CHECK(gguf_get_bool(f, "tokenizer.ggml.add_eos_token", &b) == 0 && !b, "add_eos_token");
}

static void check_tiny_shapes(const struct gguf_file *f, uint32_t wtype)
{
    CHECK(gguf_n_tensors(f) == TINY_TENSORS, "%zu tensors, want %d", gguf_n_tensors(f), TINY_TENSORS);
    check_tensor(f, "token_embd.weight", wtype, TINY_EMBD, TINY_VOCAB);
    check_tensor(f, "output.weight", wtype, TINY_EMBD, TINY_VOCAB);
    check_tensor(f, "output_norm.weight", PI_TYPE_F32, TINY_EMBD, 1);
    for (int il = 0; il < TINY_LAYERS; il++) {
        char n[64];
        snprintf(n, sizeof n, "blk.%d.attn_norm.weight", il);
        check_tensor(f, n, PI_TYPE_F32, TINY_EMBD, 1);
        snprintf(n, sizeof n, "blk.%d.ffn_norm.weight", il);
        check_tensor(f, n, PI_TYPE_F32, TINY_EMBD, 1);
        snprintf(n, sizeof n, "blk.%d.attn_q.weight", il);
        check_tensor(f, n, wtype, TINY_EMBD, TINY_HEADS * TINY_HEAD_DIM);
        snprintf(n, sizeof n, "blk.%d.attn_k.weight", il);
        check_tensor(f, n, wtype, TINY_EMBD, TINY_KV_HEADS * TINY_HEAD_DIM);
        snprintf(n, sizeof n, "blk.%d.attn_v.weight", il);
        check_tensor(f, n, wtype, TINY_EMBD, TINY_KV_HEADS * TINY_HEAD_DIM);
        snprintf(n, sizeof n, "blk.%d.attn_output.weight", il);
        check_tensor(f, n, wtype, TINY_HEADS * TINY_HEAD_DIM, TINY_EMBD);
        snprintf(n, sizeof n, "blk.%d.ffn_gate.weight", il);
        check_tensor(f, n, wtype, TINY_EMBD, TINY_FF);
        snprintf(n, sizeof n, "blk.%d.ffn_up.weight", il);
        check_tensor(f, n, wtype, TINY_EMBD, TINY_FF);
        snprintf(n, sizeof n, "blk.%d.ffn_down.weight", il);
        check_tensor(f, n, wtype, TINY_FF, TINY_EMBD);
    }
}

/* The GGUF tensor's bits equal the HF tensor's, rows permuted for rotary q/k (heads > 0). */
static void check_f16_bits(const struct gguf_file *f, const struct st_set *st, const char *gname, const char *hname,
                           int64_t heads)
{
    const struct gguf_tensor *g = gguf_find_tensor(f, gname);
    const struct st_tensor *h = st_find(st, hname);
    CHECK(g && h && h->dtype == ST_F16 && g->type == PI_TYPE_F16, "%s / %s", gname, hname);
    if (!g || !h || g->nbytes != h->nbytes) return;
    uint16_t *want = malloc(h->nbytes);
    REQUIRE(want, "malloc");
    if (heads) permute_rows_ref(h->data, want, heads, TINY_HEAD_DIM, h->shape[1]);
    else memcpy(want, h->data, h->nbytes);
    CHECK(!memcmp(want, g->data, h->nbytes), "%s: f16 bits differ from %s%s", gname, hname, heads ? " (permuted)" : "");
    free(want);
}

/* Row r of a converted tensor, as floats. */
static void gguf_row(const struct gguf_tensor *t, int64_t r, float *out)
{
    size_t rs = quant_row_size(t->type, t->ne[0]);
    quant_traits(t->type)->to_float((const char *)t->data + (size_t)r * rs, out, t->ne[0]);
}

static void test_tiny(const char *hf)
{
    char out16[PATH_CAP], out32[PATH_CAP], out8[PATH_CAP];
    path_join(out16, tmp_root, "tiny-f16.gguf");
    path_join(out32, tmp_root, "tiny-f32.gguf");
    path_join(out8, tmp_root, "tiny-q8_0.gguf");
    CHECK_OK(convert(hf, out16, PI_TYPE_F16));
    CHECK_OK(convert(hf, out32, PI_TYPE_F32));
    CHECK_OK(convert(hf, out8, PI_TYPE_Q8_0));

    struct st_set *st = NULL;
    struct gguf_file *f16 = NULL, *f32 = NULL, *q8 = NULL;
    CHECK_OK(st_open_dir(&st, hf));
    CHECK_OK(gguf_open(&f16, out16));
    CHECK_OK(gguf_open(&f32, out32));
    CHECK_OK(gguf_open(&q8, out8));
    REQUIRE(st && f16 && f32 && q8, "tiny model files must open");

    check_tiny_keys(f16, 1);
    check_tiny_keys(f32, 0);
    check_tiny_keys(q8, 7);
    check_tiny_shapes(f16, PI_TYPE_F16);
    check_tiny_shapes(f32, PI_TYPE_F32);
    check_tiny_shapes(q8, PI_TYPE_Q8_0);

    /* f16 → f16 is a bit copy; q and k are row-permuted, v and the rest are not. */
    check_f16_bits(f16, st, "token_embd.weight", "model.embed_tokens.weight", 0);
    check_f16_bits(f16, st, "output.weight", "lm_head.weight", 0);
    check_f16_bits(f16, st, "blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight", TINY_HEADS);
    check_f16_bits(f16, st, "blk.5.attn_k.weight", "model.layers.5.self_attn.k_proj.weight", TINY_KV_HEADS);
    check_f16_bits(f16, st, "blk.3.attn_v.weight", "model.layers.3.self_attn.v_proj.weight", 0);
    check_f16_bits(f16, st, "blk.2.attn_output.weight", "model.layers.2.self_attn.o_proj.weight", 0);
    check_f16_bits(f16, st, "blk.4.ffn_down.weight", "model.layers.4.mlp.down_proj.weight", 0);

    /* One attn_q row by hand: GGUF row 2j+s of head h is HF row h*d + s*d/2 + j. */
    const struct st_tensor *hq = st_find(st, "model.layers.1.self_attn.q_proj.weight");
    const struct gguf_tensor *gq = gguf_find_tensor(f32, "blk.1.attn_q.weight");
    const int64_t h = 2, j = 5, s = 1;
    int64_t grow = h * TINY_HEAD_DIM + 2 * j + s, hrow = h * TINY_HEAD_DIM + s * TINY_HEAD_DIM / 2 + j;
    if (hq && gq) {
        float got[TINY_EMBD], want[TINY_EMBD];
        st_read_f32(hq, hrow * TINY_EMBD, TINY_EMBD, want);
        gguf_row(gq, grow, got);
        CHECK(!memcmp(got, want, sizeof got), "attn_q f32 row %lld != HF row %lld", (long long)grow, (long long)hrow);
        /* and the permutation is not the identity for this row */
        float other[TINY_EMBD];
        st_read_f32(hq, grow * TINY_EMBD, TINY_EMBD, other);
        CHECK(memcmp(got, other, sizeof got), "attn_q row %lld was not permuted", (long long)grow);
    }

    /* f32 norms equal the f16 source exactly. */
    const struct st_tensor *hn = st_find(st, "model.layers.0.input_layernorm.weight");
    const struct gguf_tensor *gn = gguf_find_tensor(f16, "blk.0.attn_norm.weight");
    if (hn && gn) {
        float want[TINY_EMBD];
        st_read_f32(hn, 0, TINY_EMBD, want);
        CHECK(!memcmp(want, gn->data, sizeof want), "attn_norm f32 != source");
    }

    /* q8_0 round-trips each element within half a quantization step d = max|x|/127, plus the
     * rounding of d itself to f16 (relative 2^-11, times |q| <= 127): 0.5 + 127/2048 < 0.57 steps. */
    const struct st_tensor *hd = st_find(st, "model.layers.0.mlp.down_proj.weight");
    const struct gguf_tensor *gd = gguf_find_tensor(q8, "blk.0.ffn_down.weight");
    if (hd && gd) {
        float got[TINY_FF], want[TINY_FF];
        st_read_f32(hd, 7 * TINY_FF, TINY_FF, want);
        gguf_row(gd, 7, got);
        double worst = 0;
        for (int b = 0; b < TINY_FF / QK8_0; b++) {
            float amax = 0;
            for (int i = 0; i < QK8_0; i++) amax = fmaxf(amax, fabsf(want[b * QK8_0 + i]));
            for (int i = 0; i < QK8_0; i++) {
                double err = fabs(got[b * QK8_0 + i] - want[b * QK8_0 + i]) / (amax / 127.0 + 1e-30);
                if (err > worst) worst = err;
            }
        }
        CHECK(worst <= 0.57, "q8_0 error %.3f steps", worst);
    }

    /* The tokenizer module accepts what we wrote and reproduces the SentencePiece ids. */
    struct pi_tokenizer *tok = NULL;
    CHECK_OK(tok_new_from_gguf(&tok, f16));
    if (tok) {
        static const char prompt[] = "The computer said";
        static const int32_t want[] = { 1, 369, 1164, 698 }; /* spm ids from train_meta.json */
        int32_t *ids = NULL;
        size_t n = 0;
        CHECK_OK(tok_encode(tok, prompt, strlen(prompt), true, false, &ids, &n));
        CHECK(n == sizeof want / sizeof want[0] && ids && !memcmp(ids, want, sizeof want), "encode gave %zu ids", n);
        free(ids);
        tok_free(tok);
    }

    gguf_close(f16);
    gguf_close(f32);
    gguf_close(q8);
    st_close(st);
}

/* ---------------------------------------------------------------- qwen2-style checkpoint */

struct w_tensor {
    const char *name;
    int64_t rows, cols; /* cols 0: 1-D */
    float *data;
};

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static float rnd(void)
{
    /* xorshift64*: deterministic weights in [-1, 1) */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (float)((rng_state * 0x2545f4914f6cdd1dull) >> 40) / (float)(1 << 23) - 1.0f;
}

/* One f32 safetensors file holding tensors [first, last). */
static void write_safetensors(const char *dir, const char *file, struct w_tensor *t, int first, int last)
{
    json_t *hdr = json_object();
    size_t off = 0;
    for (int i = first; i < last; i++) {
        size_t n = (size_t)t[i].rows * (size_t)(t[i].cols ? t[i].cols : 1) * sizeof(float);
        json_t *shape = t[i].cols ? json_pack("[II]", (json_int_t)t[i].rows, (json_int_t)t[i].cols)
                                  : json_pack("[I]", (json_int_t)t[i].rows);
        json_object_set_new(hdr, t[i].name,
                            json_pack("{s:s, s:o, s:[II]}", "dtype", "F32", "shape", shape, "data_offsets",
                                      (json_int_t)off, (json_int_t)(off + n)));
        off += n;
    }
    json_object_set_new(hdr, "__metadata__", json_pack("{s:s}", "format", "pt"));
    char *h = json_dumps(hdr, JSON_COMPACT);
    json_decref(hdr);
    size_t hlen = strlen(h), total = 8 + hlen + off;
    uint8_t *buf = malloc(total);
    REQUIRE(buf && h, "malloc");
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    memcpy(buf + 8, h, hlen);
    size_t pos = 8 + hlen;
    for (int i = first; i < last; i++) {
        size_t n = (size_t)t[i].rows * (size_t)(t[i].cols ? t[i].cols : 1) * sizeof(float);
        memcpy(buf + pos, t[i].data, n);
        pos += n;
    }
    write_file(dir, file, buf, total);
    free(buf);
    free(h);
}

/* GPT-2's byte → printable code point map (bytes_to_unicode), as UTF-8. */
static void byte_token(int b, char out[4])
{
    int cp;
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) {
        cp = b;
    } else {
        int k = 0; /* rank of b among the remapped bytes */
        for (int c = 0; c < b; c++)
            if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF))) k++;
        cp = 256 + k;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    }
}

static void write_qwen_tokenizer(const char *dir, const char *regex)
{
    json_t *vocab = json_object();
    for (int b = 0; b < QW_BYTE_TOKENS; b++) {
        char t[4];
        byte_token(b, t);
        json_object_set_new(vocab, t, json_integer(b));
    }
    json_object_set_new(vocab, "\xc4\xa0t", json_integer(256)); /* "Ġt" */
    json_object_set_new(vocab, "he", json_integer(257));
    json_object_set_new(vocab, "\xc4\xa0the", json_integer(258));
    /* both merge spellings: newer tokenizers write pairs, older ones "a b" */
    json_t *merges = json_pack("[[ss], s, s]", "\xc4\xa0", "t", "h e", "\xc4\xa0t he");
    json_t *added = json_array();
    const struct {
        int id;
        const char *s;
        bool special;
    } add[] = { { QW_ID_ENDOFTEXT, "<|endoftext|>", true },
                { QW_ID_IM_START, "<|im_start|>", true },
                { QW_ID_IM_END, "<|im_end|>", true },
                { QW_ID_TOOL, "<tool>", false } };
    for (size_t i = 0; i < sizeof add / sizeof add[0]; i++)
        json_array_append_new(added, json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", add[i].id, "content",
                                               add[i].s, "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0,
                                               "special", add[i].special));
    /* regex NULL: GPT-2 style, the ByteLevel step applies its built-in regex */
    json_t *pre = regex ? json_pack("{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b, s:b}]}", "type", "Sequence",
                                    "pretokenizers", "type", "Split", "pattern", "Regex", regex, "behavior",
                                    "Isolated", "invert", 0, "type", "ByteLevel", "add_prefix_space", 0,
                                    "trim_offsets", 0, "use_regex", 0)
                        : json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets",
                                    0, "use_regex", 1);
    json_t *tj = json_pack("{s:s, s:o, s:{s:s}, s:o, s:{s:s, s:b, s:b, s:b}, s:{s:s, s:o, s:o}}", "version", "1.0",
                           "added_tokens", added, "normalizer", "type", "NFC", "pre_tokenizer", pre, "decoder", "type",
                           "ByteLevel", "add_prefix_space", 0, "trim_offsets", 0, "use_regex", 0, "model", "type", "BPE",
                           "vocab", vocab, "merges", merges);
    REQUIRE(tj, "tokenizer.json pack");
    write_json(dir, "tokenizer.json", tj);
    write_json(dir, "tokenizer_config.json",
               json_pack("{s:n, s:s, s:s, s:s}", "bos_token", "eos_token", "<|im_end|>", "pad_token", "<|endoftext|>",
                         "chat_template", "{% for m in messages %}<|im_start|>{{ m.content }}<|im_end|>{% endfor %}"));
}

static void write_qwen_config(const char *dir, const char *arch)
{
    json_t *c = json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:b, s:i, s:i, s:n, s:b}",
                          "architectures", arch, "hidden_act", "silu", "hidden_size", QW_EMBD, "intermediate_size",
                          QW_FF, "num_hidden_layers", QW_LAYERS, "num_attention_heads", QW_HEADS,
                          "num_key_value_heads", QW_KV_HEADS, "max_position_embeddings", 512, "rms_norm_eps", 1e-6,
                          "rope_theta", 1000000.0, "tie_word_embeddings", 1, "vocab_size", QW_VOCAB, "bos_token_id",
                          QW_ID_ENDOFTEXT, "rope_scaling", "use_sliding_window", 0);
    REQUIRE(c, "config pack");
    json_object_set_new(c, "eos_token_id", json_pack("[i]", QW_ID_ENDOFTEXT));
    write_json(dir, "config.json", c);
}

/* A whole qwen2-style checkpoint in two shards. Returns the tensors (caller frees) via *out. */
static int write_qwen_dir(const char *dir, const char *regex, struct w_tensor **out)
{
    static const struct {
        const char *suffix;
        int64_t rows, cols;
    } L[] = {
        { "input_layernorm.weight", QW_EMBD, 0 },
        { "self_attn.q_proj.weight", QW_EMBD, QW_EMBD },
        { "self_attn.q_proj.bias", QW_EMBD, 0 },
        { "self_attn.k_proj.weight", QW_KV_HEADS * QW_HEAD_DIM, QW_EMBD },
        { "self_attn.k_proj.bias", QW_KV_HEADS * QW_HEAD_DIM, 0 },
        { "self_attn.v_proj.weight", QW_KV_HEADS * QW_HEAD_DIM, QW_EMBD },
        { "self_attn.v_proj.bias", QW_KV_HEADS * QW_HEAD_DIM, 0 },
        { "self_attn.o_proj.weight", QW_EMBD, QW_EMBD },
        { "post_attention_layernorm.weight", QW_EMBD, 0 },
        { "mlp.gate_proj.weight", QW_FF, QW_EMBD },
        { "mlp.up_proj.weight", QW_FF, QW_EMBD },
        { "mlp.down_proj.weight", QW_EMBD, QW_FF },
    };
    const int nl = (int)(sizeof L / sizeof L[0]), n = 2 + nl * QW_LAYERS;
    struct w_tensor *t = calloc((size_t)n, sizeof *t);
    static char names[2 + 12 * QW_LAYERS][80];
    REQUIRE(t, "calloc");
    t[0] = (struct w_tensor){ "model.embed_tokens.weight", QW_VOCAB, QW_EMBD, NULL };
    for (int il = 0; il < QW_LAYERS; il++) {
        for (int i = 0; i < nl; i++) {
            char *nm = names[1 + il * nl + i];
            snprintf(nm, sizeof names[0], "model.layers.%d.%s", il, L[i].suffix);
            t[1 + il * nl + i] = (struct w_tensor){ nm, L[i].rows, L[i].cols, NULL };
        }
    }
    t[n - 1] = (struct w_tensor){ "model.norm.weight", QW_EMBD, 0, NULL };
    for (int i = 0; i < n; i++) {
        size_t cnt = (size_t)t[i].rows * (size_t)(t[i].cols ? t[i].cols : 1);
        t[i].data = malloc(cnt * sizeof(float));
        REQUIRE(t[i].data, "malloc");
        for (size_t k = 0; k < cnt; k++) t[i].data[k] = rnd();
    }
    /* shard 1: embeddings and layer 0; shard 2: the rest */
    const int split = 1 + nl;
    write_safetensors(dir, "model-00001-of-00002.safetensors", t, 0, split);
    write_safetensors(dir, "model-00002-of-00002.safetensors", t, split, n);
    json_t *wm = json_object();
    for (int i = 0; i < n; i++)
        json_object_set_new(wm, t[i].name,
                            json_string(i < split ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors"));
    write_json(dir, "model.safetensors.index.json", json_pack("{s:{s:i}, s:o}", "metadata", "total_size", 0, "weight_map", wm));
    write_qwen_config(dir, "Qwen2ForCausalLM");
    write_qwen_tokenizer(dir, regex);
    *out = t;
    return n;
}

static void free_tensors(struct w_tensor *t, int n)
{
    for (int i = 0; i < n; i++) free(t[i].data);
    free(t);
}

static void test_qwen2(void)
{
    char dir[PATH_CAP], out[PATH_CAP];
    make_dir(dir, "qwen2");
    struct w_tensor *t = NULL;
    int nt = write_qwen_dir(dir, QWEN2_REGEX, &t);
    /* the output is never one of the checkpoint's files (issue 7, item 6) */
    char own[PATH_CAP];
    static const char *const inputs[] = { "config.json", "tokenizer.json", "model-00002-of-00002.safetensors" };
    for (int i = 0; i < 3; i++) {
        path_join(own, dir, inputs[i]);
        struct stat before, after;
        int rc = stat(own, &before);
        CHECK(rc == 0, "%s exists", own);
        rc = convert(dir, own, PI_TYPE_F32);
        CHECK(rc == -PI_E_INVAL && strstr(pi_errmsg(), "the same file"), "-o %s: %d %s", inputs[i], rc, pi_errmsg());
        CHECK(stat(own, &after) == 0 && after.st_ino == before.st_ino && after.st_size == before.st_size,
              "%s was replaced", inputs[i]);
    }
    path_join(out, tmp_root, "qwen2-f32.gguf");
    CHECK_OK(convert(dir, out, PI_TYPE_F32));

    struct gguf_file *f = NULL;
    CHECK_OK(gguf_open(&f, out));
    if (!f) {
        free_tensors(t, nt);
        return;
    }
    float fv = 0;
    check_str(f, "general.architecture", "qwen2");
    check_u32(f, "qwen2.block_count", QW_LAYERS);
    check_u32(f, "qwen2.attention.head_count_kv", QW_KV_HEADS);
    check_u32(f, "qwen2.attention.key_length", QW_HEAD_DIM);
    CHECK(gguf_get_f32(f, "qwen2.rope.freq_base", &fv) == 0 && fv == 1e6f, "rope base %g", fv);
    check_str(f, "pinfer.ffn_activation", "silu");
    CHECK(gguf_n_tensors(f) == QW_TENSORS, "%zu tensors, want %d", gguf_n_tensors(f), QW_TENSORS);
    CHECK(!gguf_find_tensor(f, "output.weight"), "tied embeddings: no output.weight");
    check_tensor(f, "blk.1.attn_q.bias", PI_TYPE_F32, QW_EMBD, 1);
    check_tensor(f, "blk.1.attn_k.bias", PI_TYPE_F32, QW_KV_HEADS * QW_HEAD_DIM, 1);
    check_tensor(f, "blk.0.attn_v.bias", PI_TYPE_F32, QW_KV_HEADS * QW_HEAD_DIM, 1);
    check_tensor(f, "token_embd.weight", PI_TYPE_F32, QW_EMBD, QW_VOCAB);

    /* qwen2 keeps HF's row order: q/k weights and biases are bit copies. */
    for (int i = 0; i < nt; i++) {
        const char *n = t[i].name;
        if (!strstr(n, "layers.1.self_attn.q_proj") && !strstr(n, "layers.0.self_attn.k_proj")) continue;
        char g[64];
        snprintf(g, sizeof g, "blk.%c.attn_%c.%s", n[13], strstr(n, "q_proj") ? 'q' : 'k',
                 strstr(n, "bias") ? "bias" : "weight");
        const struct gguf_tensor *gt = gguf_find_tensor(f, g);
        size_t nb = (size_t)t[i].rows * (size_t)(t[i].cols ? t[i].cols : 1) * sizeof(float);
        CHECK(gt && gt->nbytes == nb && !memcmp(gt->data, t[i].data, nb), "%s differs from %s", g, n);
    }

    check_str(f, "tokenizer.ggml.model", "gpt2");
    check_str(f, "tokenizer.ggml.pre", "qwen2");
    check_u32(f, "tokenizer.ggml.bos_token_id", QW_ID_ENDOFTEXT); /* config.json */
    check_u32(f, "tokenizer.ggml.eos_token_id", QW_ID_IM_END);    /* tokenizer_config.json wins */
    check_u32(f, "tokenizer.ggml.padding_token_id", QW_ID_ENDOFTEXT);
    enum gguf_type et;
    size_t n = 0;
    const void *data = NULL;
    CHECK(gguf_get_arr(f, "tokenizer.ggml.token_type", &et, &n, &data) == 0 && n == QW_VOCAB, "token_type %zu", n);
    if (n == QW_VOCAB) {
        int32_t ty[QW_VOCAB];
        memcpy(ty, data, sizeof ty);
        CHECK(ty[0] == TOK_TYPE_NORMAL && ty[258] == TOK_TYPE_NORMAL, "normal types %d %d", ty[0], ty[258]);
        CHECK(ty[QW_ID_IM_START] == TOK_TYPE_CONTROL, "<|im_start|> type %d", ty[QW_ID_IM_START]);
        CHECK(ty[QW_ID_TOOL] == TOK_TYPE_USER_DEFINED, "<tool> type %d", ty[QW_ID_TOOL]);
        CHECK(ty[QW_VOCAB - 1] == TOK_TYPE_UNUSED, "padding type %d", ty[QW_VOCAB - 1]);
    }
    const char *s = NULL;
    size_t len;
    CHECK(gguf_get_arr_str(f, "tokenizer.ggml.tokens", QW_VOCAB - 1, &s, &len) == 0 && s && !strcmp(s, "[PAD299]"),
          "padding token '%s'", s ? s : "");
    CHECK(gguf_get_arr_str(f, "tokenizer.ggml.tokens", QW_ID_IM_END, &s, &len) == 0 && s && !strcmp(s, "<|im_end|>"),
          "token %d '%s'", QW_ID_IM_END, s ? s : "");
    CHECK(gguf_get_arr_str(f, "tokenizer.ggml.tokens", ' ', &s, &len) == 0 && s && !strcmp(s, "\xc4\xa0"),
          "byte token of ' ' is '%s'", s ? s : "");
    CHECK(gguf_get_arr(f, "tokenizer.ggml.merges", &et, &n, &data) == 0 && n == 3, "merges %zu", n);
    CHECK(gguf_get_arr_str(f, "tokenizer.ggml.merges", 0, &s, &len) == 0 && s && !strcmp(s, "\xc4\xa0 t"),
          "merge 0 '%s'", s ? s : "");
    CHECK(gguf_get_arr_str(f, "tokenizer.ggml.merges", 2, &s, &len) == 0 && s && !strcmp(s, "\xc4\xa0t he"),
          "merge 2 '%s'", s ? s : "");
    CHECK(gguf_find_key(f, "tokenizer.chat_template") >= 0, "chat_template");
    bool b = true;
    CHECK(gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &b) == 0 && !b, "BPE add_bos defaults to false");

    /* The tokenizer module builds from what we wrote: " the" merges into one token, and
     * <|im_end|> is recognized as a special token. */
    struct pi_tokenizer *tok = NULL;
    CHECK_OK(tok_new_from_gguf(&tok, f));
    if (tok) {
        static const char text[] = " the<|im_end|>";
        static const int32_t want[] = { 258, QW_ID_IM_END };
        int32_t *ids = NULL;
        size_t nid = 0;
        CHECK(!tok_add_bos(tok), "qwen2 adds no BOS");
        CHECK_OK(tok_encode(tok, text, strlen(text), tok_add_bos(tok), true, &ids, &nid));
        CHECK(nid == 2 && ids && !memcmp(ids, want, sizeof want), "encode gave %zu ids (%d ...)", nid,
              nid ? ids[0] : -1);
        free(ids);
        tok_free(tok);
    }
    gguf_close(f);

    /* GPT-2 style: only a ByteLevel step with its built-in regex. */
    char dir2[PATH_CAP];
    make_dir(dir2, "gpt2-pre");
    struct w_tensor *t2 = NULL;
    int nt2 = write_qwen_dir(dir2, NULL, &t2);
    path_join(out, tmp_root, "gpt2-pre.gguf");
    CHECK_OK(convert(dir2, out, PI_TYPE_F16));
    if (!gguf_open(&f, out)) {
        check_str(f, "tokenizer.ggml.pre", "gpt-2");
        check_tensor(f, "blk.0.ffn_up.weight", PI_TYPE_F16, QW_EMBD, QW_FF);
        gguf_close(f);
    }
    free_tensors(t2, nt2);

    /* q4_0: QW_FF and QW_EMBD are multiples of 32, so every 2-D weight quantizes. */
    path_join(out, tmp_root, "qwen2-q4_0.gguf");
    CHECK_OK(convert(dir, out, PI_TYPE_Q4_0));
    if (!gguf_open(&f, out)) {
        check_tensor(f, "blk.0.ffn_down.weight", PI_TYPE_Q4_0, QW_FF, QW_EMBD);
        check_tensor(f, "blk.0.attn_norm.weight", PI_TYPE_F32, QW_EMBD, 1);
        check_u32(f, "general.file_type", 2);
        gguf_close(f);
    }

    /* bf16: weights rounded from the f32 source, norms still f32. */
    path_join(out, tmp_root, "qwen2-bf16.gguf");
    CHECK_OK(convert(dir, out, PI_TYPE_BF16));
    if (!gguf_open(&f, out)) {
        const struct gguf_tensor *g = check_tensor(f, "token_embd.weight", PI_TYPE_BF16, QW_EMBD, QW_VOCAB);
        check_tensor(f, "output_norm.weight", PI_TYPE_F32, QW_EMBD, 1);
        check_u32(f, "general.file_type", 32);
        if (g) {
            pi_bf16 h;
            memcpy(&h, (const char *)g->data + 2 * 5, sizeof h);
            CHECK(h == pi_f32_to_bf16(t[0].data[5]), "bf16 element 5: %04x", h);
        }
        gguf_close(f);
    }

    /* Same checkpoint, a pre-tokenizer regex we do not implement: refused, not guessed. */
    make_dir(dir, "qwen2-odd-pre");
    free_tensors(t, nt);
    nt = write_qwen_dir(dir, ODD_REGEX, &t);
    path_join(out, tmp_root, "odd.gguf");
    int rc = convert(dir, out, PI_TYPE_F16);
    CHECK(rc == -PI_E_UNSUPPORTED && strstr(pi_errmsg(), "cannot map pre-tokenizer"), "odd pre: %d %s", rc, pi_errmsg());
    CHECK(!file_exists(out), "no output after a failure");

    /* A tensor the index lists but its shard lacks. */
    make_dir(dir, "qwen2-bad-index");
    free_tensors(t, nt);
    nt = write_qwen_dir(dir, QWEN2_REGEX, &t);
    write_json(dir, "model.safetensors.index.json",
               json_pack("{s:{s:s}}", "weight_map", "model.extra.weight", "model-00001-of-00002.safetensors"));
    rc = convert(dir, out, PI_TYPE_F16);
    CHECK(rc == -PI_E_FORMAT && strstr(pi_errmsg(), "model.extra.weight"), "bad index: %d %s", rc, pi_errmsg());
    free_tensors(t, nt);
}

/* ---------------------------------------------------------------- errors */

static void link_into(const char *dir, const char *src_dir, const char *name)
{
    char s[PATH_CAP], d[PATH_CAP];
    path_join(s, src_dir, name);
    path_join(d, dir, name);
    int rc = symlink(s, d);
    REQUIRE(rc == 0, "symlink %s", d);
}

static void write_raw_st(const char *dir, const char *header, size_t data_bytes)
{
    size_t hlen = strlen(header), total = 8 + hlen + data_bytes;
    uint8_t *buf = calloc(1, total);
    REQUIRE(buf, "calloc");
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    memcpy(buf + 8, header, hlen);
    write_file(dir, "model.safetensors", buf, total);
    free(buf);
}

static void test_errors(void)
{
    char dir[PATH_CAP], out[PATH_CAP], p[PATH_CAP];
    path_join(out, tmp_root, "err.gguf");
    int rc;

    make_dir(dir, "empty");
    rc = convert(dir, out, PI_TYPE_F16);
    CHECK(rc == -PI_E_NOTFOUND && strstr(pi_errmsg(), "config.json"), "missing config: %d %s", rc, pi_errmsg());

    make_dir(dir, "gpt2arch");
    write_qwen_config(dir, "GPT2LMHeadModel");
    rc = convert(dir, out, PI_TYPE_F16);
    CHECK(rc == -PI_E_UNSUPPORTED && strstr(pi_errmsg(), "GPT2LMHeadModel"), "unknown arch: %d %s", rc, pi_errmsg());

    /* non-default rope (here YaRN) is refused by name, also in the newer rope_parameters form */
    make_dir(dir, "yarn");
    write_qwen_config(dir, "Qwen2ForCausalLM");
    path_join(p, dir, "config.json");
    json_t *cj = json_load_file(p, 0, NULL);
    REQUIRE(cj, "reload config");
    json_object_set_new(cj, "rope_parameters", json_pack("{s:s, s:f}", "rope_type", "yarn", "rope_theta", 1e6));
    write_json(dir, "config.json", cj);
    rc = convert(dir, out, PI_TYPE_F16);
    CHECK(rc == -PI_E_UNSUPPORTED && strstr(pi_errmsg(), "yarn"), "yarn: %d %s", rc, pi_errmsg());

    struct convert_opts bad = { .hf_dir = dir, .out_path = out, .out_type = PI_TYPE_I32, .quiet = true };
    CHECK(convert_hf(&bad) == -PI_E_INVAL, "I32 output type refused");

    /* safetensors reader on hand-made headers */
    make_dir(dir, "st");
    path_join(p, dir, "model.safetensors");
    struct st_set *st = NULL;
    write_raw_st(dir, "{\"a\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}", 16);
    rc = st_open_file(&st, p);
    CHECK(rc == -PI_E_UNSUPPORTED && strstr(pi_errmsg(), "I64") && strstr(pi_errmsg(), "'a'"), "dtype: %d %s", rc,
          pi_errmsg());
    write_raw_st(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8);
    rc = st_open_file(&st, p);
    CHECK(rc == -PI_E_FORMAT && strstr(pi_errmsg(), "'a'"), "size mismatch: %d %s", rc, pi_errmsg());
    write_raw_st(dir, "{\"a\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,8]}}", 4);
    rc = st_open_file(&st, p);
    CHECK(rc == -PI_E_TRUNCATED, "offsets beyond data: %d %s", rc, pi_errmsg());
    write_raw_st(dir, "{\"a\":", 0);
    rc = st_open_file(&st, p);
    CHECK(rc == -PI_E_FORMAT, "bad JSON: %d %s", rc, pi_errmsg());
    write_raw_st(dir, "{\"__metadata__\":{\"x\":\"y\"},\"b\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,8]}}",
                 8);
    CHECK_OK(st_open_file(&st, p));
    if (st) {
        CHECK(st_n_tensors(st) == 1 && st_find(st, "b") && st_find(st, "b")->shape[1] == 2, "one BF16 tensor");
        st_close(st);
    }

}

/* Errors that need the Hugging Face checkpoint itself (its safetensors). */
static void test_errors_hf(const char *hf)
{
    char dir[PATH_CAP], out[PATH_CAP];
    path_join(out, tmp_root, "err-hf.gguf");
    int rc;

    /* the tiny model with its safetensors cut in half */
    make_dir(dir, "truncated");
    link_into(dir, hf, "config.json");
    link_into(dir, hf, "tokenizer.json");
    link_into(dir, hf, "tokenizer.model");
    link_into(dir, hf, "tokenizer_config.json");
    char src[PATH_CAP];
    path_join(src, hf, "model.safetensors");
    FILE *f = fopen(src, "rb");
    REQUIRE(f, "open %s", src);
    static uint8_t half[1 << 20];
    size_t got = fread(half, 1, sizeof half, f);
    fclose(f);
    write_file(dir, "model.safetensors", half, got);
    rc = convert(dir, out, PI_TYPE_F16);
    CHECK(rc == -PI_E_TRUNCATED && strstr(pi_errmsg(), "model.safetensors"), "truncated: %d %s", rc, pi_errmsg());
    CHECK(!file_exists(out), "no output after a failure");

    /* a missing tensor is named */
    make_dir(dir, "missing-tensor");
    link_into(dir, hf, "config.json");
    link_into(dir, hf, "tokenizer.model");
    write_raw_st(dir, "{\"model.embed_tokens.weight\":{\"dtype\":\"F16\",\"shape\":[4096,256],\"data_offsets\":[0,2097152]}}",
                 2097152);
    rc = convert(dir, out, PI_TYPE_F16);
    CHECK(rc == -PI_E_NOTFOUND && strstr(pi_errmsg(), "model.layers.0.input_layernorm.weight"), "missing: %d %s", rc,
          pi_errmsg());
}

/* The build's fixtures (tests/fixture_retype.c: typed GGUFs derived from the embedded F16 file)
 * are what the converter writes from the checkpoint itself, byte for byte. */
static void check_fixture(const char *hf, const char *fixture, const char *type_name)
{
    char out[PATH_CAP];
    path_join(out, tmp_root, "fixture-check.gguf");
    CHECK_OK(convert(hf, out, quant_type_from_name(type_name)));
    size_t na = 0, nb = 0;
    uint8_t *a = slurp_file(out, &na), *b = slurp_file(fixture, &nb);
    CHECK(a && b && na == nb && !memcmp(a, b, na), "%s: %s differs from the converter's %s output (%zu vs %zu bytes)",
          type_name, fixture, type_name, nb, na);
    free(a);
    free(b);
    unlink(out);
}

/* test_convert            the converter on checkpoints written here, and its errors
 * test_convert --hf F16.gguf F32.gguf Q8_0.gguf Q4_0.gguf
 *                         the real tiny checkpoint in PINFER_SHARED (skipped when absent), and the
 *                         repository's fixtures against the converter's output */
int main(int argc, char **argv)
{
    const bool hf_mode = argc > 1 && !strcmp(argv[1], "--hf");
    char hf[PATH_CAP];
    const char *shared = getenv("PINFER_SHARED");
    snprintf(hf, sizeof hf, "%s/models/tiny-relu-llama/model.safetensors", shared ? shared : "../shared");
    if (hf_mode && !file_exists(hf))
        SKIP("%s is absent: the 16 MB Hugging Face checkpoint is not in the repository (the embedded F16 GGUF "
             "and tests/fixtures stand in for it elsewhere)", hf);
    *strrchr(hf, '/') = '\0';
    snprintf(tmp_root, sizeof tmp_root, "/tmp/test_convert.XXXXXX");
    bool made = mkdtemp(tmp_root) != NULL; /* not inside REQUIRE: it evaluates its condition twice */
    REQUIRE(made, "mkdtemp: %s", strerror(errno));
    quant_init();

    if (hf_mode) {
        test_tiny(hf);
        test_errors_hf(hf);
        static const char *const types[] = { "f16", "f32", "q8_0", "q4_0" };
        for (int i = 0; i < 4 && i + 2 < argc; i++)
            check_fixture(hf, argv[i + 2], types[i]);
    } else {
        test_qwen2();
        test_errors();
    }

    nftw(tmp_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return tu_finish("test_convert");
}
