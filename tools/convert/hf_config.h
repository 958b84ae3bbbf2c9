/* hf_config.h — the hyperparameters of a Hugging Face causal LM, read from its config.json.
 *
 * Supported: architectures LlamaForCausalLM (→ GGUF arch "llama") and Qwen2ForCausalLM ("qwen2"),
 * hidden_act silu or relu, default RoPE only (rope_scaling absent/null, rope_type "default"). The
 * rope base is top-level "rope_theta" or the newer "rope_parameters": {"rope_theta": ...}.
 * Anything else is -PI_E_UNSUPPORTED with a message naming it, never a silent guess. */
#ifndef PI_HF_CONFIG_H
#define PI_HF_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

enum hf_arch { HF_ARCH_LLAMA = 1, HF_ARCH_QWEN2 = 2 };
enum hf_act { HF_ACT_SILU = 1, HF_ACT_RELU = 2 };

struct hf_config {
    enum hf_arch arch;
    const char *arch_name;      /* GGUF general.architecture: "llama" / "qwen2" (static string) */
    int64_t n_embd;             /* hidden_size */
    int64_t n_ff;               /* intermediate_size */
    int64_t n_layer;            /* num_hidden_layers */
    int64_t n_head;             /* num_attention_heads */
    int64_t n_head_kv;          /* num_key_value_heads (default n_head) */
    int64_t head_dim;           /* head_dim (default n_embd / n_head) */
    int64_t n_ctx_train;        /* max_position_embeddings */
    int64_t n_vocab;            /* vocab_size */
    float rms_eps;              /* rms_norm_eps */
    float rope_theta;
    bool tie_embeddings;        /* tie_word_embeddings (default false) */
    enum hf_act act;
    const char *act_name;       /* "silu" / "relu" (static string) */
    int32_t bos_id, eos_id, pad_id; /* from config.json; -1 = not given */
};

/* Read DIR/config.json. */
int hf_config_load(struct hf_config *c, const char *dir);

#endif
