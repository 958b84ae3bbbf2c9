/* synth_vocab.c — a minimal valid SentencePiece vocabulary for synthetic models: <unk> <s> </s>,
 * the 256 byte-fallback tokens, then pieces "▁", printable characters, "▁"+character, and lowercase
 * syllables of 2, 3, 4 ... letters (bare and with "▁") until the vocabulary is full. Every piece's
 * prefixes are pieces too, so SPM merges can reach all of them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "pi_err.h"
#include "synth_internal.h"
#include "tokenizer.h"

#define SV_N_BYTES 256
#define SV_SPACE "\xe2\x96\x81" /* U+2581 "▁", SentencePiece's word-start marker */
#define SV_SPACE_LEN 3
#define SV_PIECE_MAX 32
#define SV_PRINT_FIRST 33 /* '!' */
#define SV_PRINT_LAST 126 /* '~' */
#define SV_LETTERS 26

struct sv_vocab {
    char **tok;
    float *score;
    int32_t *type;
    int32_t n, cap;
};

static int sv_add(struct sv_vocab *v, const char *s, size_t len, enum tok_type type)
{
    if (v->n == v->cap)
        return 0; /* full: callers stop when n == cap */
    char *t = malloc(len + 1);
    if (!t)
        return pi_fail(PI_E_NOMEM, "synth: out of memory for the vocabulary");
    memcpy(t, s, len);
    t[len] = 0;
    v->tok[v->n] = t;
    /* SentencePiece scores are log-probabilities: earlier (shorter) pieces are the likelier ones. */
    v->score[v->n] = type == TOK_TYPE_NORMAL ? -(float)v->n : 0.0f;
    v->type[v->n] = (int32_t)type;
    v->n++;
    return 0;
}

/* A piece, bare and after "▁". */
static int sv_add_word(struct sv_vocab *v, const char *s, size_t len)
{
    char buf[SV_PIECE_MAX + SV_SPACE_LEN];
    int rc = sv_add(v, s, len, TOK_TYPE_NORMAL);
    memcpy(buf, SV_SPACE, SV_SPACE_LEN);
    memcpy(buf + SV_SPACE_LEN, s, len);
    return rc ? rc : sv_add(v, buf, len + SV_SPACE_LEN, TOK_TYPE_NORMAL);
}

static int sv_build(struct sv_vocab *v)
{
    static const char *const control[SYNTH_N_CONTROL] = { "<unk>", "<s>", "</s>" };
    static const enum tok_type control_type[SYNTH_N_CONTROL] = { TOK_TYPE_UNKNOWN, TOK_TYPE_CONTROL,
                                                                 TOK_TYPE_CONTROL };
    char buf[SV_PIECE_MAX];
    int rc = 0;
    for (int i = 0; i < SYNTH_N_CONTROL && !rc; i++)
        rc = sv_add(v, control[i], strlen(control[i]), control_type[i]);
    for (int b = 0; b < SV_N_BYTES && !rc; b++) {
        snprintf(buf, sizeof buf, "<0x%02X>", b);
        rc = sv_add(v, buf, strlen(buf), TOK_TYPE_BYTE);
    }
    if (!rc)
        rc = sv_add(v, SV_SPACE, SV_SPACE_LEN, TOK_TYPE_NORMAL);
    for (int ch = SV_PRINT_FIRST; ch <= SV_PRINT_LAST && !rc; ch++) {
        buf[0] = (char)ch;
        rc = sv_add_word(v, buf, 1);
    }
    /* Syllables of len letters, in counting order (aa, ab, ..., zz, aaa, ...). */
    for (size_t len = 2; !rc && v->n < v->cap && len < SV_PIECE_MAX; len++) {
        size_t digits[SV_PIECE_MAX] = { 0 };
        for (;;) {
            for (size_t k = 0; k < len; k++)
                buf[k] = (char)('a' + digits[k]);
            if ((rc = sv_add_word(v, buf, len)) || v->n == v->cap)
                break;
            size_t k = len;
            while (k > 0 && ++digits[k - 1] == SV_LETTERS)
                digits[--k] = 0;
            if (k == 0)
                break;
        }
    }
    return rc;
}

int synth_vocab_write(struct gguf_writer *w, int32_t n_vocab)
{
    if (n_vocab < SYNTH_VOCAB_MIN)
        return pi_fail(PI_E_INVAL, "synth: vocabulary of %d tokens is below the minimum %d", n_vocab, SYNTH_VOCAB_MIN);
    struct sv_vocab v = { .cap = n_vocab };
    int rc;
    v.tok = calloc((size_t)n_vocab, sizeof *v.tok);
    v.score = calloc((size_t)n_vocab, sizeof *v.score);
    v.type = calloc((size_t)n_vocab, sizeof *v.type);
    if (!v.tok || !v.score || !v.type) {
        rc = pi_fail(PI_E_NOMEM, "synth: out of memory for the vocabulary");
        goto out;
    }
    if ((rc = sv_build(&v)))
        goto out;
    if (v.n != n_vocab) {
        rc = pi_fail(PI_E_INVAL, "synth: could only make %d distinct pieces for a vocabulary of %d", v.n, n_vocab);
        goto out;
    }
    if ((rc = gguf_writer_set_str(w, "tokenizer.ggml.model", "llama")) ||
        (rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tok, NULL, (size_t)v.n)) ||
        (rc = gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, v.score, (size_t)v.n)) ||
        (rc = gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v.type, (size_t)v.n)) ||
        (rc = gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0)) ||
        (rc = gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1)) ||
        (rc = gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2)) ||
        (rc = gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true)) ||
        (rc = gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false)))
        goto out;
out:
    for (int32_t i = 0; v.tok && i < v.n; i++)
        free(v.tok[i]);
    free(v.tok);
    free(v.score);
    free(v.type);
    return rc;
}
