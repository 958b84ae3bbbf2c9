/* convert.h — `pictl convert`: a Hugging Face checkpoint directory (config.json, safetensors,
 * tokenizer files) → a llama.cpp-compatible GGUF, without Python.
 *
 * Tensors stream through one at a time (read, convert, write, free), so peak memory is about the
 * largest tensor, not the model. Norms, biases and other 1-D tensors stay F32; 2-D weights get
 * out_type. llama's q/k weights are re-ordered from Hugging Face's rotate-half layout to GGUF's
 * interleaved pairs, as llama.cpp's convert_hf_to_gguf.py does. */
#ifndef PI_CONVERT_H
#define PI_CONVERT_H

#include <stdbool.h>

struct convert_opts {
    const char *hf_dir;
    const char *out_path;
    int out_type; /* enum pi_type: PI_TYPE_F32, _F16, _BF16, _Q8_0, _Q4_0 */
    bool quiet;   /* no progress lines on stderr */
};

/* 0 or a negative code with pi_errmsg() naming the problem; on failure no file is left at out_path. */
int convert_hf(const struct convert_opts *o);

/* `pictl convert HF_DIR -o OUT.gguf [--type T] [-q]`; argv[0] is "convert". Returns the exit code. */
int convert_main(int argc, char **argv);

#endif
