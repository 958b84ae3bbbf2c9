/* fuzz_tok_bpe — arbitrary bytes into byte-level BPE (GPT-2 style) with each pre-tokenizer.
 *
 * The vocabulary is built here: the 256 byte symbols of GPT-2's byte-to-unicode alphabet (id =
 * byte), merges that build a few words, numbers and multi-byte characters, ChatML control tokens
 * and one user-defined token. Input: one flags byte as in fuzz_tok_spm.c (bits 0-2), bits 3-4 pick
 * the pre-tokenizer (gpt2, llama-bpe, qwen2, gpt2), then the payload; the oracles are the same
 * (fuzz_tok.h), including decode(encode(text)) == text for any bytes. */
#include "fuzz_tok.h"

#define N_BYTES 256
#define SPACE "\xc4\xa0" /* "Ġ": the space byte in GPT-2's alphabet */

static const char *const merges[] = {
    "h e", "l l", SPACE " t", SPACE "t he", "he ll", "hell o", SPACE " w", "o r", SPACE "w or", "l d",
    SPACE "wor ld", "1 2", "12 3", SPACE " " SPACE,
    /* "é" is bytes c3 a9, whose symbols are "Ã" (c3 83) and "©" (c2 a9) */
    "\xc3\x83 \xc2\xa9", "i n", "in g", "\xc4\x8a \xc4\x8a", /* "ĊĊ": two newlines */
};
#define N_MERGES (sizeof merges / sizeof merges[0])
static const struct {
    const char *text;
    int32_t type;
} specials[] = {
    { "<|endoftext|>", TOK_TYPE_CONTROL },
    { "<|im_start|>", TOK_TYPE_CONTROL },
    { "<|im_end|>", TOK_TYPE_CONTROL },
    { "<my_tok>", TOK_TYPE_USER_DEFINED },
};
#define N_SPECIALS (sizeof specials / sizeof specials[0])
#define N_VOCAB (N_BYTES + N_MERGES + N_SPECIALS)

static const char *const pre_names[] = { "gpt2", "llama-bpe", "qwen2", "default" };
#define N_PRE (sizeof pre_names / sizeof pre_names[0])
#define PRE_SHIFT 3

static struct pi_tokenizer *toks[N_PRE];
static char byte_sym[N_BYTES][4];
static char merged[N_MERGES][16];

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the others map to
 * U+0100 upwards in byte order; written as UTF-8. */
static bool gpt2_printable(int b) { return (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff); }

static void byte_symbol(int b, char *out)
{
    int cp = b;
    if (!gpt2_printable(b)) {
        cp = N_BYTES;
        for (int c = 0; c < b; c++)
            cp += !gpt2_printable(c);
    }
    if (cp < 0x80)
        out[0] = (char)cp, out[1] = 0;
    else
        out[0] = (char)(0xc0 | (cp >> 6)), out[1] = (char)(0x80 | (cp & 0x3f)), out[2] = 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    const char *texts[N_VOCAB];
    int32_t types[N_VOCAB];
    for (int b = 0; b < N_BYTES; b++) {
        byte_symbol(b, byte_sym[b]);
        texts[b] = byte_sym[b], types[b] = TOK_TYPE_NORMAL;
    }
    for (size_t i = 0; i < N_MERGES; i++) { /* "a b" → "ab" */
        const char *sp = strchr(merges[i], ' ');
        snprintf(merged[i], sizeof merged[i], "%.*s%s", (int)(sp - merges[i]), merges[i], sp + 1);
        texts[N_BYTES + i] = merged[i], types[N_BYTES + i] = TOK_TYPE_NORMAL;
    }
    for (size_t i = 0; i < N_SPECIALS; i++)
        texts[N_BYTES + N_MERGES + i] = specials[i].text, types[N_BYTES + N_MERGES + i] = specials[i].type;
    for (size_t p = 0; p < N_PRE; p++) {
        struct tok_vocab_desc d = {
            .kind = TOK_KIND_BPE,
            .pre = pre_names[p],
            .n_vocab = N_VOCAB,
            .tokens = texts,
            .types = types,
            .merges = merges,
            .n_merges = N_MERGES,
            .bos = N_BYTES + N_MERGES, /* <|endoftext|>, so that the add-BOS path runs too */
            .eos = N_BYTES + N_MERGES,
            .unk = -1,
            .pad = -1,
            .add_bos = p % 2 == 1,
        };
        if (tok_new(&toks[p], &d)) {
            fprintf(stderr, "fuzz_tok_bpe: cannot build the %s tokenizer: %s\n", pre_names[p], pi_errmsg());
            abort();
        }
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    fuzz_tok_one(toks[(data[0] >> PRE_SHIFT) % N_PRE], data, size);
    return 0;
}
