/* quantize.h — `pictl quantize IN.gguf OUT.gguf TYPE`: re-write a GGUF (or PowerInfer PWRI) file
 * with its weights in another type, choosing per tensor the types llama.cpp's llama-quantize
 * chooses for the same mixture name ("q4_k_m", "q6_k", "q8_0"...), so that the two tools write the
 * same tensor types (and, the quantizers being byte-exact, the same bytes).
 *
 * plan.c holds the choice (pure logic over tensor names and shapes, tested on its own); quantize.c
 * reads, converts and writes. */
#ifndef PI_QUANTIZE_H
#define PI_QUANTIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* A mixture: llama.cpp's name, its general.file_type number (llama_ftype) and the default type
 * of its tensors (what the per-tensor rules start from). */
struct qz_mixture {
    const char *name;   /* "q4_k_m" as llama-quantize spells it (matched case-insensitively) */
    uint32_t ftype;     /* llama_ftype, written as general.file_type */
    uint32_t type;      /* default tensor type (enum pi_type) */
};

/* The mixture of a name, or NULL. */
const struct qz_mixture *qz_mixture_find(const char *name);
/* All mixtures (for usage text): *n set to their number. */
const struct qz_mixture *qz_mixtures(size_t *n);

#define QZ_TYPE_AUTO UINT32_MAX /* no override */

struct qz_params {
    const struct qz_mixture *mix;
    uint32_t output_type;       /* --output-tensor-type, or QZ_TYPE_AUTO */
    uint32_t token_embd_type;   /* --token-embedding-type, or QZ_TYPE_AUTO */
    bool pure;                  /* --pure: the default type everywhere (with the shape fallback) */
    bool leave_output;          /* --leave-output-tensor: output.weight keeps its type */
    bool allow_requantize;      /* --allow-requantize: quantized inputs may be re-quantized */
    bool keep_predictors;       /* --keep-predictors: PowerInfer fc1/fc2 keep their type */
};

/* What the rules read of the model. */
struct qz_model {
    const char *arch;           /* general.architecture */
    int32_t n_layer, n_head, n_head_kv;
    bool powerinfer;            /* PWRI magic: predictor tensors are handled as PowerInfer does */
};

struct qz_tensor {
    const char *name;
    uint32_t n_dims;
    int64_t ne[4];
    uint32_t type;              /* the input's type */
};

/* Per tensor, in file order (the rules count attn_v / ffn_down tensors as they go): the output
 * type, and whether the shape forced a fallback (row length not a multiple of the block). Returns
 * 0, or -PI_E_UNSUPPORTED naming a tensor that would need a re-quantization without
 * allow_requantize. */
int qz_plan(const struct qz_params *p, const struct qz_model *m, const struct qz_tensor *t, size_t n,
            uint32_t *out_type, bool *out_fallback);

struct qz_opts {
    const char *in, *out;
    struct qz_params params;
    bool dry_run;               /* print the plan and the sizes, write nothing */
    int n_threads;
    FILE *log;                  /* per-tensor lines and the summary (NULL: quiet) */
    bool progress;              /* a progress bar on log (a terminal) */
};

/* The whole run. 0 or a negative code with a message. */
int qz_run(const struct qz_opts *o);

#endif
