/* tokenizer.h — tokenizers built from GGUF metadata (llama.cpp key names).
 *
 *   tokenizer.ggml.model        "llama" (SentencePiece: scores + byte fallback + dummy prefix)
 *                               or "gpt2" (byte-level BPE with merges)
 *   tokenizer.ggml.pre          gpt2 pre-tokenizer name: "default", "llama-bpe"/"llama3", "qwen2", ...
 *   tokenizer.ggml.tokens       string array; .scores f32 array; .token_type i32 array
 *                               (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte)
 *   tokenizer.ggml.merges       string array "a b" (gpt2)
 *   tokenizer.ggml.bos_token_id / eos_token_id / unknown_token_id / padding_token_id  (u32)
 *   tokenizer.ggml.add_bos_token / add_eos_token / add_space_prefix (bool)
 *
 * Control and user-defined tokens written in the text (e.g. "<|im_start|>", "<s>") become one token
 * when parse_special is set. Decoding concatenates token pieces as raw bytes, so a character split
 * over several byte tokens is whole once all of them are decoded. */
#ifndef PI_TOKENIZER_H
#define PI_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gguf_file;
struct pi_tokenizer;

enum tok_kind { TOK_KIND_SPM = 1, TOK_KIND_BPE = 2 };

/* Token types as stored in tokenizer.ggml.token_type. */
enum tok_type {
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6,
};

/* Everything a tokenizer is built from, e.g. by a converter or a test without a GGUF. Arrays are
 * copied by tok_new. token_lens, scores and types may be NULL (strlen / 0.0 / TOK_TYPE_NORMAL);
 * merges ("a b", rank = index) are used by TOK_KIND_BPE only; pre names the gpt2 pre-tokenizer
 * (NULL = "default"). Special ids are -1 when absent. */
struct tok_vocab_desc {
    enum tok_kind kind;
    const char *pre;
    size_t n_vocab;
    const char *const *tokens;
    const size_t *token_lens;
    const float *scores;
    const int32_t *types;
    const char *const *merges;
    size_t n_merges;
    int32_t bos, eos, unk, pad;
    bool add_bos, add_eos, add_space_prefix;
};

/* Build from a descriptor: -PI_E_INVAL for an inconsistent one (ids out of range, missing texts,
 * bad token types, a merge that is not "left right"), -PI_E_UNSUPPORTED for an unknown
 * pre-tokenizer. */
int tok_new(struct pi_tokenizer **out, const struct tok_vocab_desc *d);

/* Build from a GGUF's metadata. Unknown tokenizer model or pre-tokenizer → -PI_E_UNSUPPORTED with a
 * message naming it; missing/mismatched arrays → -PI_E_FORMAT. */
int tok_new_from_gguf(struct pi_tokenizer **out, const struct gguf_file *f);
void tok_free(struct pi_tokenizer *t);

enum tok_kind tok_kind(const struct pi_tokenizer *t);
int32_t tok_n_vocab(const struct pi_tokenizer *t);
int32_t tok_bos(const struct pi_tokenizer *t); /* -1 if none */
int32_t tok_eos(const struct pi_tokenizer *t); /* -1 if none */
bool tok_add_bos(const struct pi_tokenizer *t); /* the model wants BOS prepended */
int32_t tok_unk(const struct pi_tokenizer *t); /* -1 if none */
int32_t tok_pad(const struct pi_tokenizer *t); /* -1 if none */
/* Stored text of a token (gpt2: byte-level alphabet; SPM: with "▁"), NULL if id is out of range. */
const char *tok_text(const struct pi_tokenizer *t, int32_t id, size_t *len);
enum tok_type tok_token_type(const struct pi_tokenizer *t, int32_t id); /* 0 if out of range */
/* Id of the token whose stored text is exactly s[0..len), or -1. */
int32_t tok_lookup(const struct pi_tokenizer *t, const char *s, size_t len);
/* Is this an end-of-generation token (EOS, or e.g. <|im_end|> / <|eot_id|>)? */
bool tok_is_eog(const struct pi_tokenizer *t, int32_t id);

/* Encode text (len bytes, any bytes allowed). *out is malloc'd (caller frees); add_bos prepends
 * BOS when the model has one. */
int tok_encode(const struct pi_tokenizer *t, const char *text, size_t len, bool add_bos,
               bool parse_special, int32_t **out, size_t *n_out);

/* Bytes of one token's piece as it appears in the decoded text: SPM "▁" → " ", byte tokens → their
 * byte, gpt2 byte-level unicode → bytes, control tokens → "" (unless render_special).
 * Writes up to cap bytes, returns the full length (like snprintf, no NUL) or a negative code. */
int tok_piece(const struct pi_tokenizer *t, int32_t id, bool render_special, char *buf, size_t cap);

/* Decode a sequence (malloc'd, NUL-terminated, *len excludes NUL). Drops the single leading space
 * SPM's dummy prefix added when strip_leading_space is set (as HF's decoder does for the first
 * token of a text). */
int tok_decode(const struct pi_tokenizer *t, const int32_t *ids, size_t n, bool strip_leading_space,
               char **out, size_t *len);

#endif
