/* fuzz_hf_tokenizer — any bytes as the tokenizer files of a Hugging Face model directory
 * (tools/convert/hf_tokenizer.c, and spm_model.c for tokenizer.model).
 *
 * The input is cut at FUZZ_SEP lines (fuzz_util.h) into up to four files, written to a private
 * tmpfs directory: tokenizer.json, tokenizer_config.json, tokenizer.model (SentencePiece protobuf),
 * chat_template.jinja; an empty part means the file is absent. The model's config is fixed: the
 * embedded tiny model's (vocab_size 4096, bos 1, eos 2). Oracles: an accepted vocabulary has
 * exactly vocab_size named tokens of valid types, special ids inside it, merges of the form "a b",
 * and its tokenizer.* keys can be set on a GGUF writer. */
#include "fuzz_util.h"
#include "gguf.h"
#include "hf_config.h"
#include "hf_tokenizer.h"
#include "tokenizer.h"

static const char *const files[] = { "tokenizer.json", "tokenizer_config.json", "tokenizer.model",
                                     "chat_template.jinja" };
#define N_FILES (sizeof files / sizeof files[0])

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fuzz_part parts[N_FILES];
    size_t n = fuzz_split(data, size, parts, N_FILES);
    char path[512];
    for (size_t i = 0; i < N_FILES; i++) {
        const bool present = i < n && parts[i].size > 0;
        fuzz_put_file(files[i], present ? parts[i].data : NULL, present ? parts[i].size : 0, path, sizeof path);
    }
    const struct hf_config cfg = {
        .arch = HF_ARCH_LLAMA, .arch_name = "llama", .n_embd = 256, .n_ff = 1024, .n_layer = 6, .n_head = 4,
        .n_head_kv = 2, .head_dim = 64, .n_ctx_train = 1024, .n_vocab = 4096, .rms_eps = 1e-5f,
        .rope_theta = 10000.0f, .act = HF_ACT_RELU, .act_name = "relu", .bos_id = 1, .eos_id = 2, .pad_id = -1,
    };
    struct hf_vocab v;
    if (hf_vocab_load(&v, fuzz_scratch_dir(), &cfg))
        return 0;
    FUZZ_CHECK(v.n == (size_t)cfg.n_vocab && v.model && v.tokens && v.types);
    FUZZ_CHECK(!strcmp(v.model, "llama") ? v.scores != NULL && v.pre == NULL
                                          : !strcmp(v.model, "gpt2") && v.pre != NULL && v.scores == NULL);
    for (size_t i = 0; i < v.n; i++) {
        FUZZ_CHECK(v.tokens[i] != NULL);
        FUZZ_CHECK(v.types[i] >= TOK_TYPE_NORMAL && v.types[i] <= TOK_TYPE_BYTE);
    }
    const int32_t ids[] = { v.bos, v.eos, v.unk, v.pad };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        FUZZ_CHECK(ids[i] >= -1 && ids[i] < (int32_t)v.n);
    for (size_t i = 0; i < v.n_merges; i++)
        FUZZ_CHECK(strchr(v.merges[i], ' ') != NULL);
    struct gguf_writer *w;
    FUZZ_CHECK(gguf_writer_new(&w, GGUF_MAGIC_GGUF) == 0);
    (void)hf_vocab_write(&v, w); /* may refuse (e.g. an empty token); must not crash or leak */
    gguf_writer_free(w);
    hf_vocab_fini(&v);
    return 0;
}
