/* fuzz_hf_config — any bytes as a Hugging Face config.json (tools/convert/hf_config.c).
 *
 * The file is written to a private tmpfs directory and read by hf_config_load, as the converter
 * does. Oracles: a config it accepts satisfies everything hf_config.h promises (positive sizes,
 * heads divisible, even head_dim, positive epsilon and rope base, a known architecture and
 * activation, ids in int32). */
#include <math.h>

#include "fuzz_util.h"
#include "hf_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[512];
    fuzz_put_file("config.json", data, size, path, sizeof path);
    struct hf_config c;
    if (hf_config_load(&c, fuzz_scratch_dir()))
        return 0;
    FUZZ_CHECK(c.arch == HF_ARCH_LLAMA || c.arch == HF_ARCH_QWEN2);
    FUZZ_CHECK(c.arch_name && c.act_name && (c.act == HF_ACT_SILU || c.act == HF_ACT_RELU));
    FUZZ_CHECK(c.n_embd > 0 && c.n_ff > 0 && c.n_layer > 0 && c.n_head > 0 && c.n_head_kv > 0);
    FUZZ_CHECK(c.n_head % c.n_head_kv == 0);
    FUZZ_CHECK(c.head_dim > 0 && c.head_dim % 2 == 0);
    FUZZ_CHECK(c.n_ctx_train > 0 && c.n_vocab > 0 && c.n_vocab <= INT32_MAX);
    FUZZ_CHECK(c.rms_eps > 0 && isfinite(c.rms_eps) && c.rope_theta > 0 && isfinite(c.rope_theta));
    FUZZ_CHECK(c.bos_id >= -1 && c.eos_id >= -1 && c.pad_id >= -1);
    return 0;
}
