/* fuzz_tok_spm — arbitrary bytes into the SentencePiece tokenizer of the embedded model
 * (models/tiny-relu-llama-f16.gguf: 4096 pieces, scores, byte fallback).
 *
 * Input: one flags byte, then the payload.
 *   flags & 1: add BOS; flags & 2: parse special tokens; flags & 4: the payload is token ids
 *   (little-endian int32, any value) to decode instead of text to encode.
 * Oracles: every id encode returns is in the vocabulary; without special-token parsing,
 * decode(encode(text)) == text (byte fallback makes every byte representable; decode drops the
 * dummy-prefix space); decoding any ids either fails with a code or yields a NUL-terminated text of
 * exactly the pieces' lengths. Shared with fuzz_tok_bpe.c through fuzz_tok.h. */
#include "fuzz_tok.h"
#include "gguf.h"

static struct gguf_file *model;
static struct pi_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    if (gguf_open(&model, PI_FUZZ_MODEL) || tok_new_from_gguf(&tok, model)) {
        fprintf(stderr, "fuzz_tok_spm: cannot load %s: %s\n", PI_FUZZ_MODEL, pi_errmsg());
        abort();
    }
    FUZZ_CHECK(tok_kind(tok) == TOK_KIND_SPM);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_tok_one(tok, data, size);
    return 0;
}
