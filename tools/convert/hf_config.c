/* hf_config.c — config.json → struct hf_config (see hf_config.h). */
#include "hf_config.h"

#include "pi_err.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* transformers' LlamaConfig / Qwen2Config default when a config names no rope base. */
#define HF_DEFAULT_ROPE_THETA 10000.0
/* transformers' default rms_norm_eps for both architectures. */
#define HF_DEFAULT_RMS_EPS 1e-6
#define HF_ROPE_DEFAULT "default"

static const struct {
    const char *hf_name;
    enum hf_arch arch;
    const char *gguf_name;
} hf_archs[] = {
    { "LlamaForCausalLM", HF_ARCH_LLAMA, "llama" },
    { "Qwen2ForCausalLM", HF_ARCH_QWEN2, "qwen2" },
};

/* A positive integer field; absent → def (or an error when def < 0). */
static int hf_get_size(const json_t *root, const char *key, int64_t def, int64_t *out)
{
    const json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        if (def < 0) return pi_fail(PI_E_NOTFOUND, "config.json: missing %s", key);
        *out = def;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) <= 0)
        return pi_fail(PI_E_TYPE, "config.json: %s must be a positive integer", key);
    *out = (int64_t)json_integer_value(v);
    return 0;
}

/* A numeric field (integer or real); absent → def. */
static int hf_get_num(const json_t *obj, const char *key, double def, double *out)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_number(v)) return pi_fail(PI_E_TYPE, "config.json: %s must be a number", key);
    *out = json_number_value(v);
    return 0;
}

/* A token id: integer, or a list whose first entry is used (newer configs list several EOS ids;
 * the first is the primary one), or null/absent → -1. */
static int hf_get_token_id(const json_t *root, const char *key, int32_t *out)
{
    const json_t *v = json_object_get(root, key);
    if (json_is_array(v)) v = json_array_get(v, 0);
    *out = -1;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
        return pi_fail(PI_E_TYPE, "config.json: %s must be a token id", key);
    *out = (int32_t)json_integer_value(v);
    return 0;
}

/* A rope description object (rope_scaling or rope_parameters): only the default rope is supported. */
static int hf_check_rope_type(const json_t *obj, const char *what)
{
    if (!obj || json_is_null(obj)) return 0;
    if (!json_is_object(obj)) return pi_fail(PI_E_TYPE, "config.json: %s must be an object", what);
    const json_t *t = json_object_get(obj, "rope_type");
    if (!t) t = json_object_get(obj, "type"); /* the older spelling */
    if (!t || json_is_null(t)) return 0;
    const char *s = json_string_value(t);
    if (!s) return pi_fail(PI_E_TYPE, "config.json: %s.rope_type must be a string", what);
    if (strcmp(s, HF_ROPE_DEFAULT))
        return pi_fail(PI_E_UNSUPPORTED, "config.json: rope type '%s' in %s is not supported (only default rope)", s,
                       what);
    return 0;
}

static int hf_read_rope(struct hf_config *c, const json_t *root)
{
    int rc;
    double theta;
    const json_t *params = json_object_get(root, "rope_parameters");
    if ((rc = hf_check_rope_type(json_object_get(root, "rope_scaling"), "rope_scaling")) ||
        (rc = hf_check_rope_type(params, "rope_parameters")))
        return rc;
    if ((rc = hf_get_num(root, "rope_theta", HF_DEFAULT_ROPE_THETA, &theta))) return rc;
    if (json_is_object(params) && json_object_get(params, "rope_theta") &&
        (rc = hf_get_num(params, "rope_theta", HF_DEFAULT_ROPE_THETA, &theta)))
        return rc;
    c->rope_theta = (float)theta;
    /* checked as the float the model keeps: 1e-50 would become 0 and 1e300 infinity */
    if (!(c->rope_theta > 0) || !isfinite(c->rope_theta))
        return pi_fail(PI_E_RANGE, "config.json: rope_theta %g must be positive and fit a float", theta);
    return 0;
}

static int hf_read_arch(struct hf_config *c, const json_t *root)
{
    const json_t *archs = json_object_get(root, "architectures");
    const char *name = json_string_value(json_array_get(archs, 0));
    if (!name) return pi_fail(PI_E_NOTFOUND, "config.json: no architectures list");
    for (size_t i = 0; i < sizeof hf_archs / sizeof hf_archs[0]; i++) {
        if (!strcmp(name, hf_archs[i].hf_name)) {
            c->arch = hf_archs[i].arch;
            c->arch_name = hf_archs[i].gguf_name;
            return 0;
        }
    }
    return pi_fail(PI_E_UNSUPPORTED, "config.json: architecture %s is not supported (LlamaForCausalLM, Qwen2ForCausalLM)",
                   name);
}

static int hf_read_act(struct hf_config *c, const json_t *root)
{
    const char *act = json_string_value(json_object_get(root, "hidden_act"));
    if (!act) return pi_fail(PI_E_NOTFOUND, "config.json: missing hidden_act");
    if (!strcmp(act, "silu")) {
        c->act = HF_ACT_SILU;
        c->act_name = "silu";
    } else if (!strcmp(act, "relu")) {
        c->act = HF_ACT_RELU;
        c->act_name = "relu";
    } else {
        return pi_fail(PI_E_UNSUPPORTED, "config.json: hidden_act '%s' is not supported (silu, relu)", act);
    }
    return 0;
}

static int hf_bool(const json_t *root, const char *key, bool def, bool *out)
{
    const json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v)) return pi_fail(PI_E_TYPE, "config.json: %s must be true or false", key);
    *out = json_is_true(v);
    return 0;
}

/* Everything after the architecture: sizes, norms, rope, ids, and their consistency. */
static int hf_read_params(struct hf_config *c, const json_t *root)
{
    int rc;
    double eps;
    bool flag;
    if ((rc = hf_get_size(root, "hidden_size", -1, &c->n_embd)) ||
        (rc = hf_get_size(root, "intermediate_size", -1, &c->n_ff)) ||
        (rc = hf_get_size(root, "num_hidden_layers", -1, &c->n_layer)) ||
        (rc = hf_get_size(root, "num_attention_heads", -1, &c->n_head)) ||
        (rc = hf_get_size(root, "num_key_value_heads", c->n_head, &c->n_head_kv)) ||
        (rc = hf_get_size(root, "head_dim", c->n_embd / c->n_head, &c->head_dim)) ||
        (rc = hf_get_size(root, "max_position_embeddings", -1, &c->n_ctx_train)) ||
        (rc = hf_get_size(root, "vocab_size", -1, &c->n_vocab)) ||
        (rc = hf_get_num(root, "rms_norm_eps", HF_DEFAULT_RMS_EPS, &eps)) ||
        (rc = hf_bool(root, "tie_word_embeddings", false, &c->tie_embeddings)) || (rc = hf_read_act(c, root)) ||
        (rc = hf_read_rope(c, root)) || (rc = hf_get_token_id(root, "bos_token_id", &c->bos_id)) ||
        (rc = hf_get_token_id(root, "eos_token_id", &c->eos_id)) ||
        (rc = hf_get_token_id(root, "pad_token_id", &c->pad_id)))
        return rc;
    c->rms_eps = (float)eps;
    if (!(c->rms_eps > 0) || !isfinite(c->rms_eps)) /* as a float: 1e-95 would become 0 */
        return pi_fail(PI_E_RANGE, "config.json: rms_norm_eps %g must be positive and fit a float", eps);
    if (c->n_head % c->n_head_kv)
        return pi_fail(PI_E_RANGE, "config.json: num_attention_heads %lld is not a multiple of num_key_value_heads %lld",
                       (long long)c->n_head, (long long)c->n_head_kv);
    if (c->head_dim <= 0 || c->head_dim % 2) /* rope rotates pairs */
        return pi_fail(PI_E_RANGE, "config.json: head_dim %lld is not a positive even number", (long long)c->head_dim);
    if (c->n_vocab > INT32_MAX) return pi_fail(PI_E_RANGE, "config.json: vocab_size is too large");
    if ((rc = hf_bool(root, "mlp_bias", false, &flag))) return rc;
    if (flag) return pi_fail(PI_E_UNSUPPORTED, "config.json: mlp_bias is not supported");
    if ((rc = hf_bool(root, "use_sliding_window", false, &flag))) return rc;
    if (flag) return pi_fail(PI_E_UNSUPPORTED, "config.json: use_sliding_window is not supported");
    return 0;
}

int hf_config_load(struct hf_config *c, const char *dir)
{
    int rc;
    char *path = NULL;
    json_t *root = NULL;
    memset(c, 0, sizeof *c);
    if (asprintf(&path, "%s/config.json", dir) < 0) return pi_fail(PI_E_NOMEM, "config.json: out of memory");
    json_error_t jerr;
    root = json_load_file(path, 0, &jerr);
    if (!root) {
        /* jansson reports a missing file as a load error too: say which. */
        rc = strstr(jerr.text, "unable to open") ? pi_fail(PI_E_NOTFOUND, "%s: %s", path, jerr.text)
                                                 : pi_fail(PI_E_FORMAT, "%s: %s (line %d)", path, jerr.text, jerr.line);
        goto fail;
    }
    if (!json_is_object(root)) {
        rc = pi_fail(PI_E_FORMAT, "%s: not a JSON object", path);
        goto fail;
    }
    if ((rc = hf_read_arch(c, root)) || (rc = hf_read_params(c, root))) goto fail;
    json_decref(root);
    free(path);
    return 0;
fail:
    json_decref(root);
    free(path);
    return rc;
}
