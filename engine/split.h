/* split.h — which FFN neurons go to the GPU under a VRAM budget (PowerInfer's "GPU split").
 *
 * The GPU side must first hold what every token needs whatever the split ("fixed" bytes):
 *   attention weights (q, k, v, o and their biases), norms (attn, ffn, output), the output matrix
 *   (token_embd when tied; an untied token_embd stays on the host, as llama.cpp does), the
 *   predictors (fc1, fc2) and the KV cache (f32: n_layer × n_ctx × n_head_kv × head_dim × 2 × 4).
 * What the budget leaves goes to neurons, hottest first across all layers: a neuron costs its gate
 * row + up row + down_t row (a plain file's ffn_down: its share of the column, n_embd elements), and
 * neurons are ranked by act_freq / cost (the activation frequency per byte of VRAM). Files without
 * act_freq in every layer rank by neuron index instead (the first neurons of every layer first).
 * Neurons that do not fit are skipped, so a cheaper layer's neurons can still fill the remainder. */
#ifndef PI_SPLIT_H
#define PI_SPLIT_H

#include <stdbool.h>
#include <stdint.h>

#include "model.h"

struct split_report {
    uint64_t budget;
    uint64_t attn_bytes;    /* wq, wk, wv, wo (+ biases) of all layers */
    uint64_t norm_bytes;    /* attn_norm, ffn_norm of all layers, output_norm */
    uint64_t output_bytes;  /* the output matrix */
    uint64_t pred_bytes;    /* fc1 + fc2 of all layers */
    uint64_t kv_bytes;      /* the f32 KV cache for n_ctx tokens */
    uint64_t fixed_bytes;   /* sum of the five above */
    uint64_t neuron_bytes;  /* FFN rows of the neurons placed on the GPU */
    int64_t neurons;        /* neurons placed, all layers */
    int32_t n_layer;
    int32_t n_ctx;          /* the context length accounted for */
    int64_t *layer_neurons; /* (n_layer) neurons placed per layer; split_report_fini frees it */
    bool by_freq;           /* ranked by act_freq (else by neuron index) */
    bool fixed_fits;        /* fixed_bytes <= budget (else nothing is placed) */
};

/* Fill gpu_idx (n_layer × n_ff, 1 = neuron on the GPU) for a budget of budget_bytes and a context of
 * n_ctx tokens (<= 0: the model's training context). r (may be NULL) receives the accounting. */
int split_solve(const struct pi_model *m, int32_t n_ctx, uint64_t budget_bytes, uint8_t *gpu_idx,
                struct split_report *r);
void split_report_fini(struct split_report *r);

/* VRAM bytes of one FFN neuron of a layer (gate row + up row + down row). */
uint64_t split_neuron_cost(const struct pi_model *m, int layer);
/* The fixed bytes alone (fills the byte fields of r except neuron_bytes). */
uint64_t split_fixed_bytes(const struct pi_model *m, int32_t n_ctx, struct split_report *r);

#endif
