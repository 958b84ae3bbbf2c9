/* hf_tokenizer.h — a Hugging Face tokenizer (tokenizer.model / tokenizer.json +
 * tokenizer_config.json) → GGUF tokenizer.* keys (llama.cpp names, see common/tokenizer.h).
 *
 * Which tokenizer: tokenizer.json with model type "BPE" and a ByteLevel pre-tokenizer or decoder is
 * byte-level BPE → tokenizer.ggml.model "gpt2" (vocab by id, merges, tokenizer.ggml.pre named from
 * the pre-tokenizer's split regex); otherwise tokenizer.model (SentencePiece) → "llama" (pieces,
 * scores, types). Special ids: tokenizer_config.json's bos/eos/unk/pad token strings, else
 * config.json's ids, else the SentencePiece trainer spec. A pre-tokenizer we cannot name exactly is
 * -PI_E_UNSUPPORTED: a guessed one would tokenize differently without any error. */
#ifndef PI_HF_TOKENIZER_H
#define PI_HF_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gguf_writer;
struct hf_config;

/* Pre-tokenizer names written to tokenizer.ggml.pre, as llama.cpp spells them (it knows GPT-2's
 * as "gpt-2"; a "gpt2" there would fail to load). */
#define HF_PRE_GPT2 "gpt-2"
#define HF_PRE_LLAMA3 "llama-bpe"
#define HF_PRE_QWEN2 "qwen2"

/* A tokenizer ready to be written. */
struct hf_vocab {
    const char *model;      /* "llama" or "gpt2" (static) */
    const char *pre;        /* gpt2 only (static), else NULL */
    size_t n;               /* == config vocab_size */
    char **tokens;
    float *scores;          /* llama only, else NULL */
    int32_t *types;         /* enum tok_type */
    char **merges;          /* gpt2: "a b" */
    size_t n_merges;
    int32_t bos, eos, unk, pad; /* -1 = none */
    bool add_bos, add_eos;
    bool has_space_prefix, add_space_prefix; /* llama only */
    char *chat_template;    /* or NULL */
};

/* Read the tokenizer files of DIR (vocabulary sized by cfg->n_vocab). */
int hf_vocab_load(struct hf_vocab *v, const char *dir, const struct hf_config *cfg);
void hf_vocab_fini(struct hf_vocab *v);
/* Set the tokenizer.* keys. */
int hf_vocab_write(const struct hf_vocab *v, struct gguf_writer *w);

#endif
