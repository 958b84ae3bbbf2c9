/* test_tokenizer_bpe — byte-level BPE on a small vocabulary built here: the 256 byte symbols of
 * GPT-2's alphabet (token id = byte value), a few merges whose results are derived by hand below,
 * and ChatML specials. Checks segmentations, special-token splitting, the number rules of each
 * pre-tokenizer, and decode(encode(x)) == x on varied (also invalid) UTF-8. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "gguf.h"
#include "pi_err.h"
#include "testutil.h"
#include "tokenizer.h"

#define N_BYTES 256
#define LONG_TEXT_BYTES 100000
#define PATH_LEN 4096

#define G "\xc4\xa0" /* "Ġ", GPT-2's stand-in for the space byte */

/* Merges in rank order; each result is also a token (ids from FIRST_MERGE_ID on, same order). */
static const char *const merges[] = {
    "h e", "l l", G " t", G "t he", "he ll", "hell o", G " w", "o r", G "w or", "l d", G "wor ld", "1 2", "12 3",
};
enum {
    FIRST_MERGE_ID = N_BYTES,
    T_HE = FIRST_MERGE_ID,
    T_LL,
    T_GT,
    T_GTHE,
    T_HELL,
    T_HELLO,
    T_GW,
    T_OR,
    T_GWOR,
    T_LD,
    T_GWORLD,
    T_12,
    T_123,
    T_XYZ, /* a token no merge reaches: only llama3 (ignore_merges) emits it whole */
    T_EOT,
    T_IM_START,
    T_IM_END,
    T_USER, /* user-defined: split even without parse_special */
    N_VOCAB
};
#define N_MERGES (sizeof merges / sizeof merges[0])

static const char *const pre_names[] = {"gpt2", "llama-bpe", "qwen2"};
enum { PRE_GPT2, PRE_LLAMA3, PRE_QWEN2, N_PRE };

/* GPT-2's bytes_to_unicode, written out independently of the library. */
static void byte_token(int b, char *out)
{
    int cp = b, n = 0;
    bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    if (!printable) {
        for (int c = 0; c < b; c++)
            n += !((c >= '!' && c <= '~') || (c >= 0xa1 && c <= 0xac) || (c >= 0xae && c <= 0xff));
        cp = N_BYTES + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp, out[1] = 0;
    } else {
        out[0] = (char)(0xc0 | (cp >> 6)), out[1] = (char)(0x80 | (cp & 0x3f)), out[2] = 0;
    }
}

static char byte_names[N_BYTES][4];

static char merged[N_MERGES][32];

/* The test vocabulary: texts and types of ids 0..N_VOCAB-1. */
static void fill_vocab(const char **toks, int32_t *types)
{
    for (int b = 0; b < N_BYTES; b++) {
        byte_token(b, byte_names[b]);
        toks[b] = byte_names[b];
        types[b] = TOK_TYPE_NORMAL;
    }
    for (size_t i = 0; i < N_MERGES; i++) { /* "a b" → "ab" */
        const char *sp = strchr(merges[i], ' ');
        snprintf(merged[i], sizeof merged[i], "%.*s%s", (int)(sp - merges[i]), merges[i], sp + 1);
        toks[FIRST_MERGE_ID + i] = merged[i];
        types[FIRST_MERGE_ID + i] = TOK_TYPE_NORMAL;
    }
    toks[T_XYZ] = "xyz", types[T_XYZ] = TOK_TYPE_NORMAL;
    toks[T_EOT] = "<|endoftext|>", types[T_EOT] = TOK_TYPE_CONTROL;
    toks[T_IM_START] = "<|im_start|>", types[T_IM_START] = TOK_TYPE_CONTROL;
    toks[T_IM_END] = "<|im_end|>", types[T_IM_END] = TOK_TYPE_CONTROL;
    toks[T_USER] = "<my_tok>", types[T_USER] = TOK_TYPE_USER_DEFINED;
}

static int build(struct pi_tokenizer **t, const char *pre, const char *const *m, size_t n_merges)
{
    const char *toks[N_VOCAB];
    int32_t types[N_VOCAB];
    fill_vocab(toks, types);
    struct tok_vocab_desc d = {
        .kind = TOK_KIND_BPE,
        .pre = pre,
        .n_vocab = N_VOCAB,
        .tokens = toks,
        .types = types,
        .merges = m,
        .n_merges = n_merges,
        .bos = -1,
        .eos = T_EOT,
        .unk = -1,
        .pad = -1,
    };
    return tok_new(t, &d);
}

static void check_ids(const struct pi_tokenizer *t, const char *pre, const char *s, bool ps, const int32_t *want,
                      size_t nw)
{
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK_OK(tok_encode(t, s, strlen(s), true, ps, &ids, &n));
    bool same = n == nw && memcmp(ids, want, n * sizeof *ids) == 0;
    CHECK(same, "[%s] encode(\"%s\")", pre, s);
    if (!same) {
        fprintf(stderr, "  got :");
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n  want:");
        for (size_t i = 0; i < nw; i++)
            fprintf(stderr, " %d", want[i]);
        fputc('\n', stderr);
    }
    free(ids);
}
#define EXPECT(t, pre, s, ps, ...)                                                                                 \
    do {                                                                                                           \
        const int32_t want_[] = {__VA_ARGS__};                                                                     \
        check_ids(t, pre, s, ps, want_, sizeof want_ / sizeof want_[0]);                                           \
    } while (0)

static void check_round_trip(const struct pi_tokenizer *t, const char *pre, const char *s, size_t len)
{
    int32_t *ids = NULL;
    size_t n = 0;
    char *text = NULL;
    size_t tl = 0;
    CHECK_OK(tok_encode(t, s, len, true, false, &ids, &n));
    CHECK_OK(tok_decode(t, ids, n, true, &text, &tl));
    CHECK(text && tl == len && memcmp(text, s, len) == 0, "[%s] round trip of %zu bytes \"%.40s\" gives %zu \"%.40s\"",
          pre, len, s, tl, text ? text : "");
    free(ids);
    free(text);
}

static void test_segmentations(const struct pi_tokenizer *t, int p)
{
    const char *pre = pre_names[p];
    /* h e l l o: he (rank 0), ll (1), he+ll (4), hell+o (5). Ġ w o r l d: Ġw (6), or (7), ld (9),
     * Ġw+or (8), Ġwor+ld (10). Same for every pre-tokenizer: "hello" / " world" are words. */
    EXPECT(t, pre, "hello world", false, T_HELLO, T_GWORLD);
    /* "the" has no merge t+he; in " hello" nothing merges with Ġ */
    EXPECT(t, pre, "the hello", false, 't', T_HE, ' ', T_HELLO);
    /* he (0) before Ġt (2), then Ġt+he (3) */
    EXPECT(t, pre, " the", false, T_GTHE);
    /* the middle space of two is a word of its own (\s+(?!\S)) */
    EXPECT(t, pre, "hello  world", false, T_HELLO, ' ', T_GWORLD);
    /* numbers: gpt2 one word "4123" → 4 + 123; llama3 \p{N}{1,3} "412" "3" → 4 12, 3; qwen2 digit by digit */
    if (p == PRE_GPT2)
        EXPECT(t, pre, "4123", false, '4', T_123);
    else if (p == PRE_LLAMA3)
        EXPECT(t, pre, "4123", false, '4', T_12, '3');
    else
        EXPECT(t, pre, "4123", false, '4', '1', '2', '3');
    /* a word that is a token but unreachable by merges: only llama3 (ignore_merges) takes it whole */
    if (p == PRE_LLAMA3)
        EXPECT(t, pre, "xyz", false, T_XYZ);
    else
        EXPECT(t, pre, "xyz", false, 'x', 'y', 'z');
    /* ChatML: specials are single tokens with parse_special */
    EXPECT(t, pre, "<|im_start|>user\nhi<|im_end|>", true, T_IM_START, 'u', 's', 'e', 'r', '\n', 'h', 'i', T_IM_END);
    EXPECT(t, pre, "<|im_start|><|im_end|><|endoftext|>", true, T_IM_START, T_IM_END, T_EOT);
    /* the user-defined token splits even without parse_special */
    EXPECT(t, pre, "a<my_tok>b", false, 'a', T_USER, 'b');

    int32_t *ids = NULL;
    size_t n = 0;
    const char *chat = "<|im_start|>user\nhi<|im_end|>";
    CHECK_OK(tok_encode(t, chat, strlen(chat), false, false, &ids, &n));
    for (size_t i = 0; i < n; i++)
        CHECK(ids[i] < T_EOT || ids[i] > T_IM_END, "[%s] special id %d without parse_special", pre, ids[i]);
    char *text = NULL;
    size_t len = 0;
    CHECK_OK(tok_decode(t, ids, n, false, &text, &len));
    CHECK(text && strcmp(text, chat) == 0, "[%s] literal ChatML round trip: \"%s\"", pre, text ? text : "");
    free(text);
    free(ids);
}

static void test_round_trips(const struct pi_tokenizer *t, int p)
{
    static const char *const texts[] = {
        "",
        " ",
        "   ",
        "hello world",
        "  two leading, two trailing  ",
        "multiple     spaces   inside",
        "tab\there\t\tand\ttabs",
        "new\nlines\n\nand\r\ncrlf\n",
        "it's they're we've I'm you'll he'd IT'S",
        "numbers 1 22 333 4444 55555 3.14159 1,000,000",
        "日本語のテキストと中文字符",
        "emoji 🙂🚀👍🏽 and flags 🇫🇷",
        "accents: café naïve Ünïcödé façade — “quotes” ‘single’ …",
        "Ελληνικά, русский, עברית, العربية, हिन्दी",
        "symbols !@#$%^&*()_+-=[]{};':\",./<>?\\|`~",
        "<|im_start|>not parsed<|im_end|>",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        check_round_trip(t, pre_names[p], texts[i], strlen(texts[i]));
    static const char bad[] = "a\xff\xfe b\xc3( \x80\xbf\xe2\x82 end\0z\xf0\x9f";
    check_round_trip(t, pre_names[p], bad, sizeof bad - 1);
}

static void test_long(const struct pi_tokenizer *t, int p)
{
    char path[PATH_LEN];
    const char *fixtures = getenv("PINFER_FIXTURES");
    int k = snprintf(path, sizeof path, "%s/corpus/tinyshakespeare.head.txt", fixtures ? fixtures : "tests/fixtures");
    FILE *fp = k > 0 && (size_t)k < sizeof path ? fopen(path, "rb") : NULL;
    REQUIRE(fp, "cannot read %s", path);
    char *buf = malloc(LONG_TEXT_BYTES + 1);
    size_t n = 0;
    if (fp) {
        n = fread(buf, 1, LONG_TEXT_BYTES, fp);
        fclose(fp);
    }
    for (size_t i = n; i < LONG_TEXT_BYTES; i++) /* pad (or make up) the text */
        buf[i] = "hello world the 4123\n\t xyz"[i % 26];
    check_round_trip(t, pre_names[p], buf, LONG_TEXT_BYTES);
    memset(buf, ' ', LONG_TEXT_BYTES); /* one long whitespace run: regex backtracking */
    check_round_trip(t, pre_names[p], buf, LONG_TEXT_BYTES);
    memset(buf, 'l', LONG_TEXT_BYTES); /* one long word: the merge heap */
    check_round_trip(t, pre_names[p], buf, LONG_TEXT_BYTES);
    free(buf);
}

static void test_misc(const struct pi_tokenizer *t)
{
    char buf[16];
    CHECK(tok_kind(t) == TOK_KIND_BPE && tok_n_vocab(t) == N_VOCAB, "kind / n_vocab");
    CHECK(tok_piece(t, T_GT, false, buf, sizeof buf) == 2 && memcmp(buf, " t", 2) == 0, "Ġt → \" t\"");
    CHECK(tok_piece(t, '\n' /* Ċ */, false, buf, sizeof buf) == 1 && buf[0] == '\n', "Ċ → newline");
    CHECK(tok_piece(t, T_IM_START, false, buf, sizeof buf) == 0, "control hidden");
    CHECK(tok_piece(t, T_IM_START, true, buf, sizeof buf) == 12, "control rendered");
    CHECK(tok_is_eog(t, T_EOT) && tok_is_eog(t, T_IM_END) && !tok_is_eog(t, T_IM_START) && !tok_is_eog(t, 'a'),
          "eog: <|endoftext|> (eos) and <|im_end|>");
    CHECK(tok_bos(t) == -1 && !tok_add_bos(t), "no bos");
    CHECK(tok_lookup(t, G "world", strlen(G "world")) == T_GWORLD, "lookup Ġworld");
}

static void test_errors(void)
{
    struct pi_tokenizer *t = NULL;
    int rc = build(&t, "no-such-pre", merges, N_MERGES);
    CHECK(rc == -PI_E_UNSUPPORTED && !t, "unknown pre → -PI_E_UNSUPPORTED, got %d", rc);
    CHECK(strstr(pi_errmsg(), "no-such-pre") != NULL, "message names the pre-tokenizer: %s", pi_errmsg());
    const char *bad[] = {"h e", "hello"};
    rc = build(&t, "gpt2", bad, 2);
    CHECK(rc == -PI_E_INVAL && !t, "merge without a space → -PI_E_INVAL, got %d (%s)", rc, pi_errmsg());
    CHECK(strstr(pi_errmsg(), "'hello' is not \"left right\"") != NULL, "the message names the merge: %s", pi_errmsg());
    /* no merges at all: bytes only */
    CHECK_OK(build(&t, NULL, NULL, 0));
    if (t) {
        EXPECT(t, "default/no merges", "hi!", false, 'h', 'i', '!');
        tok_free(t);
    }
}

/* What write_gguf leaves out or spoils. */
enum gguf_variant { GV_OK, GV_NO_MODEL, GV_BAD_MODEL, GV_BAD_PRE, GV_SHORT_TYPES, GV_NO_MERGES, GV_BAD_SCORES, GV_BAD_MERGE };

static int write_gguf(const char *path, enum gguf_variant v)
{
    static const char *const bad_merges[] = { "h e", "hello" };
    const char *toks[N_VOCAB];
    int32_t types[N_VOCAB];
    float scores[N_VOCAB] = {0};
    struct gguf_writer *w = NULL;
    int rc;
    fill_vocab(toks, types);
    if ((rc = gguf_writer_new(&w, GGUF_MAGIC_GGUF)) < 0)
        return rc;
    /* the first failure stops the chain and is returned */
    (void)((v != GV_NO_MODEL && (rc = gguf_writer_set_str(w, "tokenizer.ggml.model", v == GV_BAD_MODEL ? "bert" : "gpt2"))) ||
        (rc = gguf_writer_set_str(w, "tokenizer.ggml.pre", v == GV_BAD_PRE ? "bogus-pre" : "qwen2")) ||
        (rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, N_VOCAB)) ||
        (rc = gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types,
                                  v == GV_SHORT_TYPES ? N_VOCAB - 1 : N_VOCAB)) ||
        (v == GV_BAD_SCORES && (rc = gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, 3))) ||
        (v != GV_NO_MERGES && (rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", v == GV_BAD_MERGE ? bad_merges : merges,
                                                             NULL, v == GV_BAD_MERGE ? 2 : N_MERGES))) ||
        (rc = gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", T_EOT)) ||
        (rc = gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", T_EOT)) ||
        (rc = gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false)) ||
        (rc = gguf_writer_write_file(w, path)));
    gguf_writer_free(w);
    return rc;
}

static int from_gguf(const char *path, enum gguf_variant v, struct pi_tokenizer **t)
{
    struct gguf_file *f = NULL;
    int rc = write_gguf(path, v);
    REQUIRE(rc == 0, "writing %s: %s %s", path, pi_strerror(rc), pi_errmsg());
    rc = gguf_open(&f, path);
    REQUIRE(rc == 0, "gguf_open(%s): %s %s", path, pi_strerror(rc), pi_errmsg());
    *t = NULL;
    rc = tok_new_from_gguf(t, f);
    gguf_close(f);
    return rc;
}

static void test_gguf(void)
{
    char path[] = "/tmp/test_tokenizer_bpe_XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0, "mkstemp");
    close(fd);
    struct pi_tokenizer *t = NULL;
    int rc = from_gguf(path, GV_OK, &t);
    CHECK(rc == 0, "tok_new_from_gguf: %s %s", pi_strerror(rc), pi_errmsg());
    if (t) {
        CHECK(tok_kind(t) == TOK_KIND_BPE && tok_eos(t) == T_EOT && tok_bos(t) == -1 && !tok_add_bos(t), "GGUF metadata");
        test_segmentations(t, PRE_QWEN2);
        tok_free(t);
    }
    static const struct {
        enum gguf_variant v;
        int rc;
        const char *in_msg;
    } bad[] = {
        {GV_NO_MODEL, -PI_E_NOTFOUND, "tokenizer.ggml.model"},
        {GV_BAD_MODEL, -PI_E_UNSUPPORTED, "bert"},
        {GV_BAD_PRE, -PI_E_UNSUPPORTED, "bogus-pre"},
        {GV_SHORT_TYPES, -PI_E_FORMAT, "token_type"},
        {GV_NO_MERGES, -PI_E_FORMAT, "merges"},
        {GV_BAD_SCORES, -PI_E_FORMAT, "scores"},
        /* the message of the merge survives the code's change to the caller's (once emptied) */
        {GV_BAD_MERGE, -PI_E_FORMAT, "merge 1 'hello' is not \"left right\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rc = from_gguf(path, bad[i].v, &t);
        CHECK(rc == bad[i].rc && !t, "GGUF variant %d: rc %d, expected %d", (int)bad[i].v, rc, bad[i].rc);
        CHECK(strstr(pi_errmsg(), bad[i].in_msg) != NULL, "variant %d message \"%s\" names %s", (int)bad[i].v,
              pi_errmsg(), bad[i].in_msg);
        tok_free(t);
    }
    unlink(path);
}

int main(void)
{
    for (int p = 0; p < N_PRE; p++) {
        struct pi_tokenizer *t = NULL;
        int rc = build(&t, pre_names[p], merges, N_MERGES);
        REQUIRE(rc == 0, "build %s: %s %s", pre_names[p], pi_strerror(rc), pi_errmsg());
        test_segmentations(t, p);
        test_round_trips(t, p);
        test_long(t, p);
        if (p == PRE_GPT2)
            test_misc(t);
        tok_free(t);
    }
    test_errors();
    test_gguf();
    return tu_finish("test_tokenizer_bpe");
}
