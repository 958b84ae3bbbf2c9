/* split.h — which FFN neurons go to the GPU under a VRAM budget (PowerInfer's "GPU split"), with
 * exact arithmetic: the bytes are those of the CUDA backend's plan (vram_plan.h), so the device
 * memory gpud allocates never exceeds the budget.
 *
 * The GPU side first holds what every token needs whatever the split (the plan's fixed bytes:
 * embeddings, attention, norms, output, predictors, the KV cache for n_ctx × n_seq cells in the
 * cache's type, scratch, cuBLAS workspace, the driver reserve) plus, per layer whose FFN can be
 * held in part (it has ffn_down_t), the most alignment padding its compacted arrays may need. What
 * the budget leaves goes to neurons, hottest first across all layers: a neuron costs its gate, up
 * and down_t rows and its id (vram_neuron_bytes), and neurons are ranked by act_freq / cost (the
 * activation frequency per byte of VRAM). Files without act_freq in every layer rank by neuron
 * index instead (the first neurons of every layer first). Neurons that do not fit are skipped, so a
 * cheaper layer's neurons can still fill the remainder. A layer without ffn_down_t is held whole
 * or not at all (its down columns cannot be compacted): it is placed as one candidate costing its
 * whole FFN, ranked by its mean frequency per byte.
 *
 * If the fixed bytes do not fit, the split falls back to whole layers (llama.cpp's -ngl): the
 * largest N whose plan fits (vram_max_layers), reported in n_gpu_layers; gpu_idx then marks every
 * neuron of the first N layers. */
#ifndef PI_SPLIT_H
#define PI_SPLIT_H

#include <stdbool.h>
#include <stdint.h>

#include "model.h"
#include "vram_plan.h"

struct split_report {
    uint64_t budget;
    struct vram_plan plan;  /* of the split made (exact bytes by kind) */
    uint64_t fixed_bytes;   /* plan fixed + the compacted arrays' alignment reserve */
    uint64_t neuron_bytes;  /* Σ cost of the neurons placed (without alignment) */
    int64_t neurons;        /* neurons placed, all layers */
    int32_t n_layer;
    int64_t *layer_neurons; /* (n_layer) neurons placed per layer; split_report_fini frees it */
    double covered;         /* share of all activations (Σ act_freq) the placed neurons cover; -1 without act_freq */
    bool by_freq;           /* ranked by act_freq (else by neuron index) */
    bool fixed_fits;        /* fixed_bytes <= budget (else whole-layer fallback) */
    int32_t n_gpu_layers;   /* -1: neurons placed by the solver; else the whole-layer fallback's N */
};

/* Fill gpu_idx (n_layer × n_ff, 1 = neuron on the GPU) for a budget of budget_bytes under the
 * backend parameters vp (context, sequences, batch, cache type; vp->whole_layers is ignored).
 * r (may be NULL) receives the accounting. */
int split_solve(const struct pi_model *m, const struct vram_params *vp, uint64_t budget_bytes, uint8_t *gpu_idx,
                struct split_report *r);
void split_report_fini(struct split_report *r);

/* VRAM bytes of one more FFN neuron of a layer (vram_neuron_bytes). */
uint64_t split_neuron_cost(const struct pi_model *m, int layer);
/* The fixed bytes alone: the plan with no neuron placed plus the alignment reserve. */
uint64_t split_fixed_bytes(const struct pi_model *m, const struct vram_params *vp);
/* Share of all activations (Σ act_freq over every neuron) that gpu_idx's neurons cover; -1 when
 * some layer has no act_freq. */
double split_coverage(const struct pi_model *m, const uint8_t *gpu_idx);

#endif
