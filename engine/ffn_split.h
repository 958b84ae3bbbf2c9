/* ffn_split.h — the FFN over a subset of its neurons.
 *
 *   y (B, n_embd) = Σ_{i ∈ S} act_i · down[:, i],   act_i = act(gate_i · n, up_i · n)
 *
 * where n (B, n_embd) is the FFN input already normed (ffn_norm(h)). Summing the results for
 * disjoint subsets that cover all neurons gives the dense FFN. gpud computes its hot subset and
 * cpud the cold one with this; S is given as runs of consecutive neurons so that gate and up rows
 * are read contiguously and down rows are read only over the runs. A run boundary that falls
 * inside a quantization block of the down weights costs exactness against the dense path (the
 * activation block is then quantized with zeros in it), so splits are made in whole blocks.
 *
 * PowerInfer layers (ffn_down_t present, whether or not ffn_down is too) use the transposed down
 * projection instead, whatever the subset:
 *
 *   y (B, n_embd) = Σ_{i ∈ S, act_i != 0} act_i · down_t[i]     (AXPY over rows of active neurons)
 *
 * Neurons whose activation is exactly 0 for every token of the batch (ReLU zeros: most of them)
 * cost no down_t read at all; the activations stay f32 (no quantization), so any split is exact up
 * to the order of the sums. Each thread takes an equal share of the neurons, computes their
 * activations and right away adds act_i · down_t[i] into its own (B, n_embd) accumulator (a neuron's
 * gate, up and down_t rows are read back to back); a second pass adds the accumulators in thread
 * order (thread 0's is y itself), so the result is deterministic for a given thread count. */
#ifndef PI_FFN_SPLIT_H
#define PI_FFN_SPLIT_H

#include <stdint.h>

#include "model.h"
#include "ops.h"

struct pi_pool;

struct ffn_runs {
    int32_t n;          /* runs in use */
    int32_t cap;
    int32_t (*run)[2];  /* [start neuron, length] */
    int64_t n_neurons;  /* Σ lengths */
};

/* Runs of neurons i with sel[i] == want and (mask == NULL or any of the n_mask mask rows has
 * mask[row * n_ff + i] != 0). */
int ffn_runs_build(struct ffn_runs *r, const uint8_t *sel, uint8_t want, const uint8_t *mask, int32_t n_mask,
                   int64_t n_ff);
void ffn_runs_fini(struct ffn_runs *r);

struct ffn_scratch {
    struct ops_scratch xq;  /* n in gate/up's vec_dot_type */
    struct ops_scratch aq;  /* activations in down's vec_dot_type */
    struct ops_scratch drun; /* runs widened to whole blocks of the down weights */
    float *act;             /* (B, n_ff) */
    int64_t act_cap;
    /* down_t path */
    float *part;            /* (n_threads - 1, B, n_embd) partial sums of threads 1.. */
    int64_t part_cap;
    int64_t *rows;          /* (n_threads) down_t rows read per thread */
    int rows_cap;
};
void ffn_scratch_fini(struct ffn_scratch *s);

/* y = the FFN of layer `layer` over the neurons in runs, for B tokens (y is overwritten).
 * *bytes (if not NULL) receives the weight bytes read: gate and up rows of the neurons in runs, plus
 * the down rows read (down_t: only those of live neurons; ffn_down: the widened runs).
 * After the call s->act (B, n_ff) holds the activations of the neurons in runs (0 elsewhere). */
int ffn_partial(struct pi_pool *pool, struct ffn_scratch *s, const struct pi_model *m, int layer, const float *xn,
                int32_t B, const struct ffn_runs *runs, float *y, uint64_t *bytes);

#endif
