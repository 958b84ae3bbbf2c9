/* model.h — a model's hyperparameters and weight views, loaded from a GGUF.
 *
 * Architectures: "llama" (SwiGLU, or ReGLU when pinfer.ffn_activation = "relu" or the file is a
 * PowerInfer PWRI file), "qwen2" (q/k/v biases, NeoX rope, usually tied output), "bamboo" (dReLU).
 * Weights are views into the mmapped file: nothing is copied. */
#ifndef PI_MODEL_H
#define PI_MODEL_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ops.h"

struct gguf_file;
struct pi_tokenizer;

enum pi_arch { PI_ARCH_LLAMA = 1, PI_ARCH_QWEN2 = 2, PI_ARCH_BAMBOO = 3 };

/* FFN activation: out = down · act(gate·x, up·x) */
enum pi_act {
    PI_ACT_SWIGLU = 1, /* silu(g) * u */
    PI_ACT_REGLU = 2,  /* relu(g) * u */
    PI_ACT_DRELU = 3,  /* relu(g) * relu(u) */
};

/* The gated activation act(g, u) of one FFN neuron. */
static inline float model_glu(enum pi_act a, float g, float u)
{
    switch (a) {
    case PI_ACT_SWIGLU: return g / (1.0f + expf(-g)) * u;
    case PI_ACT_REGLU: return g > 0.0f ? g * u : 0.0f;
    case PI_ACT_DRELU: return (g > 0.0f && u > 0.0f) ? g * u : 0.0f;
    }
    return 0.0f;
}

struct pi_hparams {
    enum pi_arch arch;
    enum pi_act act;
    enum ops_rope_mode rope_mode;
    int32_t n_vocab;
    int32_t n_ctx_train;
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_ff;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;  /* key/value length per head */
    int32_t rope_dim;  /* rotated dims per head */
    float rope_theta;
    float norm_eps;
    bool tied_output;  /* output = token_embd */
    bool powerinfer;   /* a PWRI file: ffn_down_t, predictors */
    float sparse_threshold; /* powerinfer.sparse_threshold (default 0) */
};

struct pi_layer {
    struct pi_tensor attn_norm, wq, wk, wv, wo;
    struct pi_tensor bq, bk, bv; /* data NULL when absent */
    struct pi_tensor ffn_norm, ffn_gate, ffn_up;
    struct pi_tensor ffn_down;   /* [n_ff, n_embd]: row e = output e (absent in PowerInfer files) */
    /* PowerInfer (PWRI) files: the down projection transposed, ne {n_embd, n_ff}: row i is neuron
     * i's output column, so a sparse FFN reads only the rows of active neurons (AXPY). */
    struct pi_tensor ffn_down_t;
    /* The activation predictor: mask = fc2 · relu(fc1 · h) >= sparse_threshold, h the FFN input
     * before ffn_norm. fc1 ne {n_embd, r}, fc2 ne {r, n_ff}. data NULL in dense files. */
    struct pi_tensor fc1, fc2;
    const float *act_freq;       /* pinfer calibration: per-neuron activation frequency (n_ff), or NULL */
};

/* One layer's weights as the FFN reads them (what the evaluator hands to the backend's ffn() and
 * to ffn_partial): the layer's tensors, and where each neuron's three FFN rows are. By default they
 * are rows of the model's tensors (the mapping). With a neuron cache (the disk tier, engine/ncache.h),
 * a neuron whose slot[i] >= 0 has its gate, up and down_t rows back to back in one cache slot:
 *
 *   gate_i = cache + slot[i]·stride,  up_i = gate_i + up_off,  down_t_i = gate_i + down_off
 *
 * byte for byte the model's rows, so the same kernels over the same rows give the same bits. */
struct pi_layer_weights {
    const struct pi_layer *l;
    int layer;
    const int32_t *slot;     /* (n_ff) cache slot of neuron i, < 0: the model's row; NULL: every row from the model */
    const char *cache;       /* slot 0 */
    size_t stride, up_off, down_off;
};

enum pi_ffn_row { PI_ROW_GATE = 0, PI_ROW_UP = 1, PI_ROW_DOWN_T = 2 };

struct pi_model {
    struct gguf_file *gguf;
    struct pi_hparams hp;
    struct pi_tensor token_embd, output_norm, output;
    struct pi_layer *layers; /* n_layer */
    struct pi_tokenizer *tok;
    char *name;
};

/* Load a model and its tokenizer. Unknown architecture, missing tensor, wrong shape → error naming
 * it. */
int model_load(struct pi_model **out, const char *path);
/* How a model's weights are held: the file's mapping (model_load: page cache, 4 KiB pages, nothing
 * read until used — llama.cpp's default too), or the file read into anonymous memory on 2 MiB
 * transparent huge pages (gguf_open_read: a GEMV pays a TLB miss per 2 MiB instead of per 4 KiB, at the
 * cost of zeroing and copying the whole file at load); READ refuses a file that, with an eighth and
 * 64 MiB more for the run, exceeds the memory available (MemAvailable, capped by the memory cgroup's
 * room), naming both. */
enum model_weights { MODEL_WEIGHTS_MAP, MODEL_WEIGHTS_READ };
int model_load_as(struct pi_model **out, const char *path, enum model_weights how);
/* Bytes of m's weights on huge pages now (0 for a mapped file). */
size_t model_huge_bytes(const struct pi_model *m);
/* The same from a file image in memory (the pipeline's shared weights segment); not copied. */
int model_load_image(struct pi_model **out, const void *image, size_t size);
/* The same from an open GGUF, whose ownership passes to the model (closed on failure too). */
int model_from_gguf(struct pi_model **out, struct gguf_file *f);
void model_free(struct pi_model *m);

const char *model_arch_name(enum pi_arch a);
const char *model_act_name(enum pi_act a);
/* Weight bytes of the whole model (the memory a decode step streams once). */
uint64_t model_weight_bytes(const struct pi_model *m);

/* The view of layer's weights in the model's mapping (no cache). */
static inline struct pi_layer_weights model_layer_weights(const struct pi_model *m, int layer)
{
    const struct pi_layer_weights w = { .l = &m->layers[layer], .layer = layer };
    return w;
}

/* The tensor that row kind r of the FFN belongs to. */
static inline const struct pi_tensor *lw_tensor(const struct pi_layer_weights *w, enum pi_ffn_row r)
{
    return r == PI_ROW_GATE ? &w->l->ffn_gate : r == PI_ROW_UP ? &w->l->ffn_up : &w->l->ffn_down_t;
}

/* Neuron i's row of kind r: from its cache slot when it has one, else from the model's tensor. */
static inline const char *lw_row(const struct pi_layer_weights *w, enum pi_ffn_row r, int64_t i)
{
    if (w->slot && w->slot[i] >= 0) {
        const char *base = w->cache + (size_t)w->slot[i] * w->stride;
        return r == PI_ROW_GATE ? base : r == PI_ROW_UP ? base + w->up_off : base + w->down_off;
    }
    const struct pi_tensor *t = lw_tensor(w, r);
    return (const char *)t->data + (size_t)i * t->row_bytes;
}

#endif
