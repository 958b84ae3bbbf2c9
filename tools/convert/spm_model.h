/* spm_model.h — read a SentencePiece tokenizer.model (a ModelProto protobuf) without libprotobuf.
 *
 * ModelProto: field 1 repeated SentencePiece {1 piece: string, 2 score: float, 3 type: enum
 * (1 NORMAL, 2 UNKNOWN, 3 CONTROL, 4 USER_DEFINED, 5 UNUSED, 6 BYTE; default NORMAL)};
 * field 2 TrainerSpec {3 model_type (1 UNIGRAM, 2 BPE, ...), 35 byte_fallback, 40 unk_id, 41 bos_id,
 * 42 eos_id, 43 pad_id (int32; -1 = none)}; field 3 NormalizerSpec {1 name, 3 add_dummy_prefix
 * (default true), 4 remove_extra_whitespaces (default true)}. The token type numbers equal GGUF's
 * tokenizer.ggml.token_type values. */
#ifndef PI_SPM_MODEL_H
#define PI_SPM_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct spm_model {
    size_t n;          /* number of pieces */
    char **pieces;     /* NUL-terminated UTF-8 */
    float *scores;
    int32_t *types;    /* enum tok_type values */
    int model_type;    /* 1 unigram, 2 bpe */
    bool byte_fallback;
    bool add_dummy_prefix;
    bool remove_extra_whitespaces;
    char *normalizer_name; /* "identity", "nmt_nfkc", ... */
    int32_t unk_id, bos_id, eos_id, pad_id; /* -1 = none */
};

/* 0 or negative code; malformed protobuf → -PI_E_FORMAT naming the field and offset. */
int spm_model_load(struct spm_model *m, const char *path);
int spm_model_parse(struct spm_model *m, const void *data, size_t size);
void spm_model_fini(struct spm_model *m);

#endif
