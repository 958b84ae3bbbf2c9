/* fuzz_tok.h — the tokenizer oracles both tokenizer targets run (see fuzz_tok_spm.c). */
#ifndef PI_FUZZ_TOK_H
#define PI_FUZZ_TOK_H

#include "fuzz_util.h"
#include "pi_err.h"
#include "tokenizer.h"

enum { FUZZ_TOK_ADD_BOS = 1, FUZZ_TOK_SPECIAL = 2, FUZZ_TOK_IDS = 4 };
#define SPM_SPACE "\xe2\x96\x81" /* "▁" */
#define FUZZ_TOK_PIECE_CAP 64 /* a small buffer, so tok_piece's truncation path runs too */

/* Decode ids one piece at a time and as a sequence; the two must agree in length. */
static inline void fuzz_tok_decode(const struct pi_tokenizer *t, const int32_t *ids, size_t n)
{
    size_t pieces = 0;
    bool all_valid = true;
    for (size_t i = 0; i < n; i++) {
        char buf[FUZZ_TOK_PIECE_CAP];
        int len = tok_piece(t, ids[i], false, buf, sizeof buf);
        const bool in_vocab = ids[i] >= 0 && ids[i] < tok_n_vocab(t);
        FUZZ_CHECK((len >= 0) == in_vocab);
        FUZZ_CHECK((tok_text(t, ids[i], NULL) != NULL) == in_vocab);
        FUZZ_CHECK((tok_token_type(t, ids[i]) != 0) == in_vocab);
        if (len < 0) {
            all_valid = false;
            continue;
        }
        pieces += (size_t)len;
        if (in_vocab) { /* a token's stored text finds the token (or an earlier one with the same text) */
            size_t tl;
            const char *txt = tok_text(t, ids[i], &tl);
            int32_t back = tok_lookup(t, txt, tl);
            FUZZ_CHECK(back >= 0);
            size_t bl;
            const char *bt = tok_text(t, back, &bl);
            FUZZ_CHECK(bl == tl && memcmp(bt, txt, tl) == 0);
        }
        (void)tok_is_eog(t, ids[i]);
    }
    char *out = NULL;
    size_t len = 0;
    int rc = tok_decode(t, ids, n, false, &out, &len);
    if (rc == 0) {
        FUZZ_CHECK(out[len] == '\0');
        FUZZ_CHECK(!all_valid || len == pieces);
    } else {
        FUZZ_CHECK(!all_valid);
    }
    free(out);
}

static inline void fuzz_tok_one(const struct pi_tokenizer *t, const uint8_t *data, size_t size)
{
    if (size < 1)
        return;
    const unsigned flags = data[0];
    const char *text = (const char *)data + 1;
    const size_t len = size - 1;
    if (flags & FUZZ_TOK_IDS) {
        size_t n = len / sizeof(int32_t);
        int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
        FUZZ_CHECK(ids != NULL);
        memcpy(ids, text, n * sizeof *ids);
        fuzz_tok_decode(t, ids, n);
        free(ids);
        return;
    }
    const bool add_bos = flags & FUZZ_TOK_ADD_BOS, special = flags & FUZZ_TOK_SPECIAL;
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = tok_encode(t, text, len, add_bos, special, &ids, &n);
    FUZZ_CHECK(rc == 0); /* any bytes are valid text */
    for (size_t i = 0; i < n; i++)
        FUZZ_CHECK(ids[i] >= 0 && ids[i] < tok_n_vocab(t));
    const bool bos = add_bos && tok_bos(t) >= 0;
    FUZZ_CHECK(!bos || (n >= 1 && ids[0] == tok_bos(t)));
    fuzz_tok_decode(t, ids, n);
    if (!special) {
        char *out = NULL;
        size_t out_len = 0;
        const size_t skip = bos ? 1 : 0;
        FUZZ_CHECK(tok_decode(t, ids + skip, n - skip, true, &out, &out_len) == 0);
        /* SentencePiece writes a space as "▁" and decodes every "▁" as a space, so a "▁" in the
         * text comes back as a space (as in HF's and llama.cpp's decoders). */
        size_t want_len = len;
        char *want = malloc(len ? len : 1);
        FUZZ_CHECK(want != NULL);
        if (tok_kind(t) == TOK_KIND_SPM) {
            want_len = 0;
            for (size_t i = 0; i < len; i++) {
                if (i + 3 <= len && !memcmp(text + i, SPM_SPACE, 3)) {
                    want[want_len++] = ' ';
                    i += 2;
                } else {
                    want[want_len++] = text[i];
                }
            }
        } else {
            memcpy(want, text, len);
        }
        if (out_len != want_len || memcmp(out, want, want_len) != 0) {
            fprintf(stderr, "round trip: %zu bytes in, %zu out\n", len, out_len);
            FUZZ_CHECK(!"decode(encode(text)) == text");
        }
        free(want);
        free(out);
    }
    free(ids);
}

#endif
