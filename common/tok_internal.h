/* tok_internal.h — shared between tokenizer.c (construction, special tokens, decode), tok_spm.c
 * (SentencePiece BPE-by-score) and tok_bpe.c (byte-level BPE). Not a public header. */
#ifndef PI_TOK_INTERNAL_H
#define PI_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

#define TOK_N_BYTES 256
#define TOK_MAX_EOG 8

/* ---- hash map: byte string → int32 (open addressing, fixed capacity ≥ 2 × expected keys) ----
 * Keys are not copied: they must outlive the map (they point into the tokenizer's blobs). */
struct tok_map_slot {
    const char *key; /* NULL = empty slot */
    uint32_t len;
    int32_t val;
    uint64_t hash;
};
struct tok_map {
    struct tok_map_slot *slots;
    size_t mask;
    size_t n;
};
int tok_map_init(struct tok_map *m, size_t n_expected);
void tok_map_fini(struct tok_map *m);
/* Insert or (when overwrite) replace; without overwrite the first value stays. */
int tok_map_put(struct tok_map *m, const char *key, size_t len, int32_t val, bool overwrite);
int32_t tok_map_get(const struct tok_map *m, const char *key, size_t len); /* -1 if absent */
/* Look up the key a + ' ' + b without building it (BPE merge "left right"). */
int32_t tok_map_get_pair(const struct tok_map *m, const char *a, size_t alen, const char *b, size_t blen);

/* ---- max-heap of candidate merges: highest prio first, ties → leftmost (smallest left) ---- */
struct tok_bigram {
    int32_t left, right; /* symbol indices */
    double prio;         /* SPM: token score; BPE: -rank */
    size_t size;         /* byte length of the merged text, to detect stale entries */
};
struct tok_heap {
    struct tok_bigram *v;
    size_t n, cap;
};
int tok_heap_push(struct tok_heap *h, const struct tok_bigram *b);
bool tok_heap_pop(struct tok_heap *h, struct tok_bigram *out);
void tok_heap_fini(struct tok_heap *h);

/* A symbol of a word being merged: bytes [off, off + n) of the word; n == 0 once merged away. */
struct tok_sym {
    int32_t prev, next; /* -1 at the ends */
    size_t off, n;
};

/* ---- growable id vector ---- */
struct tok_ids {
    int32_t *v;
    size_t n, cap;
};
int tok_ids_push(struct tok_ids *a, int32_t id);

/* ---- UTF-8 ---- */
/* Decode one code point at s (n > 0 bytes left): returns bytes consumed; *cp = -1 if invalid. */
size_t tok_utf8_decode(const char *s, size_t n, int32_t *cp);
size_t tok_utf8_encode(uint32_t cp, char *out); /* out has room for 4 bytes */

struct tok_bpe; /* byte-level BPE state (tok_bpe.c) */

struct pi_tokenizer {
    enum tok_kind kind;
    int32_t n_vocab;
    char *blob;        /* every token's text, each NUL-terminated */
    size_t *tok_off;   /* [n_vocab] offset into blob */
    uint32_t *tok_len; /* [n_vocab] */
    float *scores;     /* [n_vocab] */
    int32_t *types;    /* [n_vocab] enum tok_type */
    struct tok_map vocab; /* text → id (the last id wins on duplicates, as llama.cpp) */
    int32_t bos, eos, unk, pad;
    bool add_bos, add_eos, add_space_prefix;
    int32_t *special; /* control / user-defined / unknown ids, longest text first */
    size_t n_special;
    int32_t eog[TOK_MAX_EOG];
    size_t n_eog;
    int32_t byte_tok[TOK_N_BYTES]; /* byte → its fallback token, or -1 */
    struct tok_bpe *bpe;           /* TOK_KIND_BPE only */
};

static inline const char *tok_str(const struct pi_tokenizer *t, int32_t id)
{
    return t->blob + t->tok_off[id];
}

/* Encode one fragment of raw text (no special tokens in it), appending to out. */
int tok_spm_encode(const struct pi_tokenizer *t, const char *text, size_t len, bool add_prefix,
                   struct tok_ids *out);
int tok_bpe_encode(const struct pi_tokenizer *t, const char *text, size_t len, struct tok_ids *out);

/* BPE state: pre-tokenizer by name (NULL = "default") and merges. Fills t->byte_tok. */
int tok_bpe_new(struct pi_tokenizer *t, const char *pre, const char *const *merges, size_t n_merges);
void tok_bpe_free(struct tok_bpe *b);
/* Bytes of a byte-level token text (GPT-2 alphabet → bytes); code points outside the alphabet are
 * copied as they are. Writes up to cap bytes, returns the full length. */
size_t tok_bpe_unmap(const struct tok_bpe *b, const char *s, size_t n, char *buf, size_t cap);

#endif
