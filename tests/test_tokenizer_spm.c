/* test_tokenizer_spm — the SentencePiece tokenizer against the reference model's true token ids.
 *
 * The tokenizer is built from tokenizer.model (spm_model.c) through tok_new, so this test does not
 * depend on the converter. Golden ids: reference.json cases (HF + sentencepiece, BOS included) and
 * train_meta.json tokenizer.hf_vs_spm_mismatches[*].spm (sentencepiece's own output). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "pi_err.h"
#include "spm_model.h"
#include "testutil.h"
#include "tokenizer.h"

#define MODEL_DIR "models/tiny-relu-llama"
#define MODEL_GGUF "models/tiny-relu-llama-f16.gguf" /* in the source tree, converted from MODEL_DIR */
#define EXPECTED_VOCAB 4096
#define BYTE_TOKEN_BASE 3 /* <0x00> is id 3 in this model */
#define N_BYTES 256
#define LONG_TEXT_BYTES 100000
#define PATH_LEN 4096

static const char *fixtures_dir(void)
{
    const char *s = getenv("PINFER_FIXTURES");
    return s ? s : "tests/fixtures";
}

/* out = a/b; a path that does not fit stops the test */
static void join_path(char *out, size_t cap, const char *a, const char *b)
{
    int n = snprintf(out, cap, "%s/%s", a, b);
    REQUIRE(n > 0 && (size_t)n < cap, "path %s/%s too long", a, b);
}

static struct pi_tokenizer *load_spm(const char *path)
{
    struct spm_model m;
    struct pi_tokenizer *t = NULL;
    int rc = spm_model_load(&m, path);
    if (rc < 0)
        SKIP("cannot load %s: %s %s", path, pi_strerror(rc), pi_errmsg());
    CHECK(m.n == EXPECTED_VOCAB, "n pieces %zu", m.n);
    CHECK(m.model_type == 2, "model_type %d", m.model_type);
    CHECK(m.byte_fallback, "byte_fallback");
    CHECK(strcmp(m.normalizer_name, "identity") == 0, "normalizer '%s'", m.normalizer_name);
    CHECK(m.add_dummy_prefix, "add_dummy_prefix");
    CHECK(!m.remove_extra_whitespaces, "remove_extra_whitespaces");
    CHECK(m.unk_id == 0 && m.bos_id == 1 && m.eos_id == 2 && m.pad_id == -1, "ids %d %d %d %d", m.unk_id, m.bos_id,
          m.eos_id, m.pad_id);
    for (int b = 0; b < N_BYTES && m.n == EXPECTED_VOCAB; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        CHECK(strcmp(m.pieces[BYTE_TOKEN_BASE + b], name) == 0 && m.types[BYTE_TOKEN_BASE + b] == TOK_TYPE_BYTE,
              "piece %d = '%s' type %d", BYTE_TOKEN_BASE + b, m.pieces[BYTE_TOKEN_BASE + b],
              m.types[BYTE_TOKEN_BASE + b]);
    }
    struct tok_vocab_desc d = {
        .kind = TOK_KIND_SPM,
        .n_vocab = m.n,
        .tokens = (const char *const *)m.pieces,
        .scores = m.scores,
        .types = m.types,
        .bos = m.bos_id,
        .eos = m.eos_id,
        .unk = m.unk_id,
        .pad = m.pad_id,
        .add_bos = true,
        .add_space_prefix = m.add_dummy_prefix,
    };
    rc = tok_new(&t, &d);
    spm_model_fini(&m);
    REQUIRE(rc == 0, "tok_new: %s %s", pi_strerror(rc), pi_errmsg());
    return t;
}

static void print_ids(const char *what, const int32_t *ids, size_t n)
{
    fprintf(stderr, "  %s (%zu):", what, n);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, " %d", ids[i]);
    fputc('\n', stderr);
}

/* Encode prompt (BOS added) and compare with the expected JSON id array; decode back. */
static void check_golden(const struct pi_tokenizer *t, const char *prompt, json_t *want)
{
    size_t nw = json_array_size(want);
    int32_t *w = malloc((nw ? nw : 1) * sizeof *w);
    for (size_t i = 0; i < nw; i++)
        w[i] = (int32_t)json_integer_value(json_array_get(want, i));
    for (int ps = 0; ps < 2; ps++) {
        int32_t *ids = NULL;
        size_t n = 0;
        CHECK_OK(tok_encode(t, prompt, strlen(prompt), true, ps, &ids, &n));
        bool same = n == nw && memcmp(ids, w, n * sizeof *ids) == 0;
        CHECK(same, "encode(\"%s\", parse_special=%d) differs from the reference", prompt, ps);
        if (!same) {
            print_ids("got ", ids, n);
            print_ids("want", w, nw);
        }
        free(ids);
    }
    char *text = NULL;
    size_t len = 0;
    CHECK_OK(tok_decode(t, w, nw, true, &text, &len));
    CHECK(text && len == strlen(prompt) && strcmp(text, prompt) == 0, "decode gives \"%s\" for \"%s\"",
          text ? text : "(null)", prompt);
    free(text);
    free(w);
}

static int test_golden(const struct pi_tokenizer *t, const char *dir)
{
    char path[PATH_LEN];
    json_error_t err;
    int n_cases = 0;

    join_path(path, sizeof path, dir, "reference.json");
    json_t *ref = json_load_file(path, 0, &err);
    REQUIRE(ref, "%s: %s (line %d)", path, err.text, err.line);
    json_t *cases = json_object_get(ref, "cases");
    REQUIRE(json_is_array(cases), "reference.json has no cases array");
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i);
        const char *prompt = json_string_value(json_object_get(c, "prompt"));
        json_t *ids = json_object_get(c, "prompt_ids");
        REQUIRE(prompt && json_is_array(ids), "reference case %zu malformed", i);
        check_golden(t, prompt, ids);
        n_cases++;
    }
    json_decref(ref);

    join_path(path, sizeof path, dir, "train_meta.json");
    json_t *meta = json_load_file(path, 0, &err);
    REQUIRE(meta, "%s: %s (line %d)", path, err.text, err.line);
    json_t *mm = json_object_get(json_object_get(meta, "tokenizer"), "hf_vs_spm_mismatches");
    REQUIRE(json_is_array(mm), "train_meta.json has no tokenizer.hf_vs_spm_mismatches");
    for (size_t i = 0; i < json_array_size(mm); i++) {
        json_t *c = json_array_get(mm, i);
        const char *prompt = json_string_value(json_object_get(c, "prompt"));
        json_t *ids = json_object_get(c, "spm"); /* "hf" was a broken HF tokenizer: ignored */
        REQUIRE(prompt && json_is_array(ids), "mismatch case %zu malformed", i);
        check_golden(t, prompt, ids);
        n_cases++;
    }
    json_decref(meta);
    return n_cases;
}

static void check_round_trip(const struct pi_tokenizer *t, const char *s, size_t len)
{
    int32_t *ids = NULL;
    size_t n = 0;
    char *text = NULL;
    size_t tl = 0;
    CHECK_OK(tok_encode(t, s, len, true, false, &ids, &n));
    CHECK(n >= 1 && ids[0] == tok_bos(t), "BOS first");
    for (size_t i = 0; i < n; i++)
        CHECK(ids[i] >= 0 && ids[i] < tok_n_vocab(t) && ids[i] != 0, "id %d at %zu (unk or out of range)", ids[i], i);
    CHECK_OK(tok_decode(t, ids, n, true, &text, &tl));
    CHECK(text && tl == len && memcmp(text, s, len) == 0, "round trip of %zu bytes \"%.40s\" gives %zu bytes \"%.40s\"",
          len, s, tl, text ? text : "");
    free(ids);
    free(text);
}

static void test_round_trips(const struct pi_tokenizer *t)
{
    static const char *const texts[] = {
        "",
        " ",
        "   ",
        "hello",
        " leading space",
        "   three leading, two trailing  ",
        "multiple     spaces   inside",
        "tab\there\t\tand\ttabs",
        "new\nlines\n\nand\r\ncrlf\n",
        "日本語のテキストと中文字符",
        "emoji 🙂🚀👍🏽 and flags 🇫🇷",
        "accents: café naïve Ünïcödé façade — “quotes” ‘single’ …",
        "Ελληνικά, русский, עברית, العربية, हिन्दी",
        "mixed\t 🙂 \n 日本 ",
        "ROMEO:\nBut soft, what light through yonder window breaks?",
        "<s>not special</s>",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        check_round_trip(t, texts[i], strlen(texts[i]));
    /* bytes that are not UTF-8, and a NUL: byte fallback keeps every byte */
    static const char bad[] = "a\xff\xfe b\xc3( \x80\xbf\xe2\x82 end\0z";
    check_round_trip(t, bad, sizeof bad - 1);
}

static void test_special(const struct pi_tokenizer *t)
{
    int32_t *ids = NULL;
    size_t n = 0;
    const char *s = "a<s>b";

    CHECK_OK(tok_encode(t, s, strlen(s), false, true, &ids, &n));
    size_t n_bos = 0;
    for (size_t i = 0; i < n; i++)
        n_bos += ids[i] == 1;
    CHECK(n_bos == 1 && n >= 3 && ids[0] != 1 && ids[n - 1] != 1, "\"a<s>b\" with parse_special: one <s> in the middle");
    free(ids);

    CHECK_OK(tok_encode(t, s, strlen(s), false, false, &ids, &n));
    for (size_t i = 0; i < n; i++)
        CHECK(ids[i] != 1, "\"a<s>b\" without parse_special must not contain <s> (id 1 at %zu)", i);
    free(ids);

    /* a special token at the start: no dummy prefix for the text after it */
    int32_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    CHECK_OK(tok_encode(t, "<s>hello", 8, false, true, &a, &na));
    CHECK_OK(tok_encode(t, "hello", 5, false, false, &b, &nb));
    CHECK(na >= 2 && a[0] == 1, "\"<s>hello\" starts with <s>");
    CHECK(nb >= 1 && (na - 1 != nb || memcmp(a + 1, b, nb * sizeof *b) != 0),
          "\"hello\" after <s> must not get the dummy prefix that \"hello\" at the start gets");
    char *text = NULL;
    size_t len = 0;
    CHECK_OK(tok_decode(t, a, na, false, &text, &len));
    CHECK(text && strcmp(text, "hello") == 0, "decode(<s>hello) = \"%s\" (control tokens are not rendered)",
          text ? text : "");
    free(text);
    free(a);
    free(b);

    char buf[16];
    CHECK(tok_piece(t, 1, true, buf, sizeof buf) == 3 && memcmp(buf, "<s>", 3) == 0, "render_special <s>");
    CHECK(tok_piece(t, 1, false, buf, sizeof buf) == 0, "<s> hidden");
    CHECK(tok_piece(t, BYTE_TOKEN_BASE + 'A', false, buf, sizeof buf) == 1 && buf[0] == 'A', "<0x41> → 'A'");
    int32_t t_id = tok_lookup(t, "\xe2\x96\x81t", 4);
    CHECK(t_id == 259, "lookup \"▁t\" = %d", t_id);
    CHECK(tok_piece(t, t_id, false, buf, sizeof buf) == 2 && memcmp(buf, " t", 2) == 0, "▁t → \" t\"");
    CHECK(tok_piece(t, t_id, false, buf, 1) == 2, "tok_piece returns the full length when cap is short");
    CHECK(tok_piece(t, tok_n_vocab(t), false, buf, sizeof buf) == -PI_E_RANGE, "out-of-range id");
    CHECK(tok_is_eog(t, 2) && !tok_is_eog(t, 1) && !tok_is_eog(t, -1), "eog = </s>");
    CHECK(tok_add_bos(t) && tok_bos(t) == 1 && tok_eos(t) == 2, "bos/eos");
}

static void test_long(const struct pi_tokenizer *t, const char *dir)
{
    char path[PATH_LEN];
    join_path(path, sizeof path, dir, "corpus/tinyshakespeare.head.txt");
    FILE *fp = fopen(path, "rb");
    REQUIRE(fp, "cannot read %s", path);
    char *buf = malloc(LONG_TEXT_BYTES + 1);
    size_t n = fread(buf, 1, LONG_TEXT_BYTES, fp);
    fclose(fp);
    buf[n] = 0;
    check_round_trip(t, buf, n);
    /* one long run of a single character stresses the merge queue */
    memset(buf, ' ', LONG_TEXT_BYTES);
    check_round_trip(t, buf, LONG_TEXT_BYTES);
    free(buf);
}

static void test_errors(void)
{
    const char *toks[] = {"<unk>", "<s>", "</s>", "a"};
    struct tok_vocab_desc d = {.kind = TOK_KIND_SPM, .n_vocab = 4, .tokens = toks, .bos = 7, .eos = 2, .unk = 0, .pad = -1};
    struct pi_tokenizer *t = NULL;
    CHECK(tok_new(&t, &d) == -PI_E_INVAL && !t, "bos out of range → -PI_E_INVAL");
    d.bos = 1;
    int32_t types[] = {2, 3, 3, 9};
    d.types = types;
    CHECK(tok_new(&t, &d) == -PI_E_INVAL && !t, "bad token type → -PI_E_INVAL");
    d.types = NULL;
    CHECK_OK(tok_new(&t, &d));
    /* no byte tokens and no "b": unk */
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK_OK(tok_encode(t, "ab", 2, false, false, &ids, &n));
    CHECK(n >= 2 && ids[n - 1] == 0, "unknown character → unk (last id %d)", n ? ids[n - 1] : -1);
    free(ids);
    tok_free(t);

    struct spm_model m;
    static const unsigned char trunc[] = {0x0a, 0x20, 0x0a, 0x01}; /* piece length 32 in a 4-byte file */
    CHECK(spm_model_parse(&m, trunc, sizeof trunc) == -PI_E_FORMAT, "truncated protobuf → -PI_E_FORMAT");
    fprintf(stderr, "  (message: %s)\n", pi_errmsg());
    CHECK(spm_model_load(&m, "/nonexistent/tokenizer.model") < 0, "missing file");
}

/* The same golden cases through the converted GGUF (tok_new_from_gguf). */
static void test_gguf(const char *dir)
{
    char path[PATH_LEN];
    const char *src = getenv("PINFER_SOURCE");
    join_path(path, sizeof path, src ? src : ".", MODEL_GGUF);
    struct gguf_file *f = NULL;
    int rc = gguf_open(&f, path);
    if (rc < 0) {
        fprintf(stderr, "note: %s not readable (%s %s): GGUF check skipped\n", path, pi_strerror(rc), pi_errmsg());
        return;
    }
    struct pi_tokenizer *t = NULL;
    rc = tok_new_from_gguf(&t, f);
    CHECK(rc == 0, "tok_new_from_gguf(%s): %s %s", path, pi_strerror(rc), pi_errmsg());
    if (t) {
        CHECK(tok_kind(t) == TOK_KIND_SPM && tok_n_vocab(t) == EXPECTED_VOCAB && tok_bos(t) == 1 && tok_eos(t) == 2 &&
                  tok_add_bos(t),
              "GGUF tokenizer metadata");
        int n = test_golden(t, dir);
        CHECK(n == 12, "%d golden cases through the GGUF", n);
        test_round_trips(t);
        tok_free(t);
    }
    gguf_close(f);
}

int main(void)
{
    char dir[PATH_LEN], path[PATH_LEN];
    join_path(dir, sizeof dir, fixtures_dir(), MODEL_DIR);
    join_path(path, sizeof path, dir, "tokenizer.model");
    struct pi_tokenizer *t = load_spm(path);
    CHECK(tok_kind(t) == TOK_KIND_SPM && tok_n_vocab(t) == EXPECTED_VOCAB, "kind/n_vocab");
    int n_cases = test_golden(t, dir);
    CHECK(n_cases == 12, "%d golden cases (expected 4 + 8)", n_cases);
    test_round_trips(t);
    test_special(t);
    test_long(t, fixtures_dir());
    test_errors();
    test_gguf(dir);
    tok_free(t);
    return tu_finish("test_tokenizer_spm");
}
