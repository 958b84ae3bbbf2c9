/* tiers.h — three-tier placement of FFN neurons under a RAM budget (--ram-budget): GPU, RAM, disk.
 *
 * The RAM budget counts the host-resident weights and the neuron cache (KV cache and scratch are
 * reported beside it, not in it). In order:
 *   1. everything read densely: every tensor of the file except the FFN rows (attention, norms,
 *      embeddings, output, predictors, activation statistics) — exact tensor bytes;
 *   2. the neuron cache: cache_slots records of the bundle (engine/bundle.h), stride bytes each
 *      (the padding to the O_DIRECT alignment counts: it is memory);
 *   3. then the hottest FFN neurons by activation frequency (act_freq, from pictl calibrate), across
 *      all layers, one record each, until the budget is full: the RAM tier. Ties go to the lower
 *      (layer, neuron), so a placement is reproducible. Without act_freq, neuron index order.
 * Neurons the placement gives the GPU (on_gpu) are resident too and counted in step 3 first (gpud
 * uploads them from host memory, and again after a restart). The rest is the disk tier, read on
 * demand from the bundle into the cache. */
#ifndef PI_ENGINE_TIERS_H
#define PI_ENGINE_TIERS_H

#include <stdint.h>

#include "model.h"

/* Values of the tier map; they reach the act segment: only grow. */
enum pi_tier { PI_TIER_DISK = 0, PI_TIER_RAM = 1, PI_TIER_GPU = 2 };

struct tier_report {
    uint64_t budget;
    uint64_t dense_bytes;   /* step 1 */
    uint64_t cache_bytes;   /* step 2 */
    uint64_t record_bytes;  /* one neuron (bundle stride) */
    int64_t gpu_neurons, ram_neurons, disk_neurons;
    uint64_t gpu_bytes, ram_bytes, disk_bytes; /* neuron records per tier */
    double gpu_share, ram_share, disk_share;   /* share of activations (Σ act_freq) per tier */
    bool by_freq;
};

/* Fill tier (n_layer × n_ff) for budget bytes, a cache of cache_slots records of record_bytes, and
 * on_gpu (n_layer × n_ff, 1 = GPU; NULL = none). -PI_E_RANGE naming the bytes when the dense part
 * and the cache alone exceed the budget. */
int tier_place(const struct pi_model *m, uint64_t budget, uint64_t record_bytes, int64_t cache_slots,
               const uint8_t *on_gpu, uint8_t *tier, struct tier_report *r);
/* Bytes of every tensor except the FFN rows (step 1). */
uint64_t tier_dense_bytes(const struct pi_model *m);
/* The default cache: two layers' neurons (prefetching layer L+1 while L computes needs two). */
int64_t tier_default_cache_slots(const struct pi_model *m);

#endif
