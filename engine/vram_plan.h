/* vram_plan.h — the exact device-memory plan of gpud's CUDA backend (gpud/cuda/cudev.c), in pure C
 * so that the budget arithmetic, the split solver and the placement are tested without a GPU.
 *
 * Every byte the CUDA backend allocates on the device is one of these kinds, laid out exactly as
 * cudev lays out its arenas (each array rounded up to VRAM_ALIGN bytes; Q8_0/Q4_0 weights repacked
 * into a quant array and an f16 scale array, both [n_out][n_in / 32]):
 *
 *   weights   token_embd, output, output_norm, per layer the attention (q, k, v, o, biases) and the
 *             norms; the whole FFN of a layer held whole (all its neurons on the device, or a file
 *             without ffn_down_t, whose down columns cannot be compacted)
 *   hot       per layer with some but not all neurons on the device: the placed neurons' gate,
 *             up and ffn_down_t rows compacted into three arrays, their ids (int32), and the layer's
 *             cold table (a bit per neuron not placed, for the hybrid hand-off's cold bits) — the
 *             neurons that are not placed are not uploaded at all
 *   pred      the predictors fc1, fc2 (sparse models)
 *   kv        the KV cache: n_layer × {K, V} × n_seq × n_ctx × n_head_kv·head_dim, f16 or f32
 *   scratch   every per-step buffer for n_batch tokens, the cuBLAS workspace and the largest
 *             dequantized weight (both only when n_batch exceeds the GEMV path's 8 tokens); the
 *             weight upload's device staging is carved from it (nothing else uses it before the
 *             first step), so the upload never needs memory beyond the arenas
 *   reserve   what the driver allocates outside our arenas after open: kernel modules loaded on
 *             first launch (ours and cuBLAS's, lazy loading), CUDA graph executables
 *
 * and the CUDA context itself (measured by cudev before its first allocation) is reported apart:
 * a budget B means weights + hot + pred + kv + scratch + reserve ≤ B.
 *
 * Whole-layer placement (-ngl N, llama.cpp's dense partial offload, or the fallback when the
 * non-FFN parts of every layer do not fit): the first N layers are on the device with their whole
 * FFN, the others on the host; token_embd is on the device when layer 0 is (embeddings run there),
 * output and output_norm when every layer is. */
#ifndef PI_VRAM_PLAN_H
#define PI_VRAM_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "model.h"

#define VRAM_ALIGN 256 /* cudev's arena alignment: every array starts on a 256-byte boundary */
/* Driver allocations outside the arenas (lazy-loaded modules, graph executables): measured 1.2–2.5
 * MB after open (bench/gpu/NOTES.md) before cuBLAS's first GEMM loads its kernels; 64 MiB is that
 * with room for cuBLAS's modules, and the GPU test polls the real figure against it. */
#define VRAM_RESERVE ((uint64_t)64 << 20)
/* No budget: all free device memory minus this margin (other processes, fragmentation). */
#define VRAM_FREE_MARGIN ((uint64_t)512 << 20)
#define VRAM_GEMV_MAX 8            /* cudev's CUDEV_GEMV_MAX: larger batches use cuBLAS */
#define VRAM_BLAS_WS ((uint64_t)32 << 20) /* cudev's cuBLAS workspace */

struct vram_params {
    int32_t n_ctx;        /* KV cells per sequence (<= 0: the model's training context) */
    int32_t n_seq;        /* sequences the KV cache holds (<= 0: 1) */
    int32_t n_batch;      /* most tokens per step (<= 0: 64, as cudev) */
    bool kv_f32;          /* f32 KV cache (the GPU default is f16) */
    bool no_sparse;       /* predictors not uploaded (or the model has none) */
    bool whole_layers;    /* whole-layer placement: the first n_gpu_layers layers (else every layer, by neurons) */
    int32_t n_gpu_layers;
    bool blas_prefill;    /* cudev's cuBLAS prefill scratch (benchmarks only; gpud never asks for it) */
    uint64_t reserve;     /* driver allocations beside the arenas: VRAM_RESERVE when a GPU runs the
                             plan, 0 when the budget is only simulated (gpud on the CPU backend) */
};

struct vram_plan {
    uint64_t weights, hot, pred, kv, scratch, reserve;
    uint64_t fixed; /* weights + pred + kv + scratch + reserve: what the budget holds before neurons */
    uint64_t total; /* fixed + hot */
    int64_t neurons;        /* FFN neurons on the device, all layers */
    int64_t neurons_all;    /* n_layer × n_ff */
    int32_t n_gpu_layers;   /* layers on the device (n_layer unless whole-layer placement) */
    bool whole_layers;      /* whole-layer placement */
};

/* Device bytes of one weight tensor as cudev holds it (quant + scale arrays, each aligned); 0 for
 * a tensor that is absent or whose type the GPU kernels do not support. */
uint64_t vram_tensor_bytes(uint32_t type, int64_t n_in, int64_t n_out);
/* Bytes of the KV cache and of the scratch arena for these parameters. */
uint64_t vram_kv_bytes(const struct pi_model *m, const struct vram_params *p, int32_t n_layers);
uint64_t vram_scratch_bytes(const struct pi_model *m, const struct vram_params *p);

/* True when layer's FFN can be held in part (compacted rows): it has ffn_down_t. */
bool vram_layer_compactable(const struct pi_model *m, int layer);
/* Bytes of layer's FFN held whole (gate, up, down and/or down_t as the file has them). */
uint64_t vram_ffn_whole_bytes(const struct pi_model *m, int layer);
/* Bytes of n_hot compacted neurons of a compactable layer (0 < n_hot < n_ff): three row arrays, the
 * id list and the cold table (vram_cold_table_bytes), each aligned. 0 for n_hot 0;
 * vram_ffn_whole_bytes for n_hot = n_ff. */
uint64_t vram_hot_bytes(const struct pi_model *m, int layer, int64_t n_hot);
/* The bytes one more neuron of layer costs, without alignment: gate + up + down_t row + its id. */
uint64_t vram_neuron_bytes(const struct pi_model *m, int layer);
/* The most vram_hot_bytes adds to n × vram_neuron_bytes for any n: the arrays' alignment padding and
 * the cold table (a per-layer cost the split solver reserves like the padding). */
uint64_t vram_hot_slack(const struct pi_model *m, int layer);
/* A compacted layer's cold table: one bit per neuron, 64-bit words (unaligned). */
uint64_t vram_cold_table_bytes(const struct pi_model *m);

/* The plan of a placement: on_device (n_layer × n_ff, 1 = on the device; NULL = all) under the
 * parameters (with whole_layers the placement is ignored). */
int vram_plan_make(const struct pi_model *m, const struct vram_params *p, const uint8_t *on_device,
                   struct vram_plan *out);

/* The largest N such that whole-layer placement of the first N layers fits in budget (0: none
 * fits; n_layer: every layer). */
int32_t vram_max_layers(const struct pi_model *m, const struct vram_params *p, uint64_t budget);

/* The budget when none is given: free device bytes minus VRAM_FREE_MARGIN (0 if below it). */
uint64_t vram_default_budget(uint64_t device_free);

#endif
