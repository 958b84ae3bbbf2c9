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
 * to the order of the sums. Neurons form fixed groups of 256 by index; a thread takes whole groups,
 * computes their neurons' activations and adds each live neuron's down_t row (its three rows read
 * back to back) into the group's accumulator in ascending neuron order; y then sums, per token, the
 * accumulators of the groups that have a live neuron for it, in group order: the same terms in the
 * same order for any thread count and any batch. Groups and the reduction are one pool job: the
 * reduction's slices come after the groups' and take each group's accumulator as soon as it is
 * written (the pool's ordered slices), so a layer costs one hand-out to the workers, not two.
 * With few live neurons a group the same sums go by columns instead (ffn_split.c): group slices only
 * compute activations, and each column slice adds every group's live rows over its columns; the
 * same operations per element, the same bits, and no group accumulator crosses cores.
 *
 * Under a mask (sparse), token b's activation of neuron i is 0 unless mask[b, i]: a batch may
 * compute the rows of the union of its tokens' masks, but a token's result depends only on its own
 * mask — the same whatever else is in the batch (the engine's invariance contract). */
#ifndef PI_FFN_SPLIT_H
#define PI_FFN_SPLIT_H

#include <stdatomic.h>
#include <stdbool.h>
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
/* Runs of the neurons whose bit is set: bit k of bits[w] is neuron 64 w + k, n_ff neurons ((n_ff + 63)
 * / 64 words; bits past n_ff are ignored). The same runs as ffn_runs_build for the same set. */
int ffn_runs_from_bits(struct ffn_runs *r, const uint64_t *bits, int64_t n_ff);
void ffn_runs_fini(struct ffn_runs *r);

struct ffn_scratch {
    struct ops_scratch xq;  /* n in gate/up's vec_dot_type */
    struct ops_scratch xact; /* xq prepared once for the gathers (quant_gather_act_prepare), per token */
    struct ops_scratch aq;  /* activations in down's vec_dot_type */
    struct ops_scratch drun; /* runs widened to whole blocks of the down weights */
    float *act;             /* (B, n_ff) */
    int64_t act_cap;
    /* down_t path: per neuron group accumulators (see ffn_split.c) */
    float *gacc;
    size_t gacc_cap;
    uint8_t *gused;
    struct ffn_group_rec *grec; /* (n_groups): what each group hands to the column slices (ffn_split.c) */
    int64_t grec_cap;
    uint32_t gstamp;         /* the current pass's stamp (never 0) */
    /* the last input made for ffn_partial (xq: xn itself for F32 gate rows; xact NULL when unused), for
     * B tokens; when ffn_input_prepare made it ahead (in_ready), for which xn and layer: ffn_partial
     * takes it once when called with the same xn, B and layer */
    const char *in_xq, *in_xact;
    size_t in_xq_stride, in_xact_stride;
    const float *in_xn;
    int32_t in_B;
    const struct pi_layer *in_l;
    bool in_ready;
    /* How the down_t AXPYs split over threads (ffn_split.c): FFN_SPLIT_AUTO picks; benchmarks force
     * one. Either gives the same bits. */
    enum ffn_split_mode { FFN_SPLIT_AUTO = 0, FFN_SPLIT_GROUPS, FFN_SPLIT_COLS } split;
};
void ffn_scratch_fini(struct ffn_scratch *s);
/* Takes the lines the caller's thread writes first in the next ffn_partial or ffn_input_prepare (the
 * input: xq, xact, as many bytes as the last one made) into its cache (cache_claim.h) */
void ffn_scratch_claim(struct ffn_scratch *s);

/* ffn_partial's input for B tokens of xn through layer w (xn in gate's vec_dot type, and the gathers'
 * prepared activation), made ahead of the call — beside a device, while the masks are still on their
 * way: the next ffn_partial with the same xn, B and layer takes it instead of making its own (the same
 * operations: the same bits). xn must not change in between. */
int ffn_input_prepare(struct ffn_scratch *s, const struct pi_model *m, const struct pi_layer_weights *w,
                      const float *xn, int32_t B);

/* y = the FFN of the layer w views (its rows from the model or a neuron cache) over the neurons in runs, for B tokens (y is overwritten); mask
 * (B, n_ff) or NULL: token b takes only the neurons of runs with mask[b, i] != 0.
 * *bytes (if not NULL) receives the weight bytes read: gate and up rows of the neurons in runs, plus
 * the down rows read (down_t: only those of live neurons; ffn_down: the widened runs).
 * After the call s->act (B, n_ff) holds the activations of the neurons in runs (0 elsewhere).
 * With a neuron cache in the view (w->slot), every neuron of runs must have its rows present (a
 * slot, or resident in the mapping), the layer must have ffn_down_t, and unmasked runs are dotted
 * row by row (the multi-row GEMV needs rows at a fixed stride). */
int ffn_partial(struct pi_pool *pool, struct ffn_scratch *s, const struct pi_model *m,
                const struct pi_layer_weights *w, const float *xn, int32_t B, const struct ffn_runs *runs,
                const uint8_t *mask, float *y, uint64_t *bytes);

/* The neurons of one token given as a bitmap still on its way (bit k of bits[w]: neuron 64 w + k, as
 * ffn_runs_from_bits reads it): a GPU's cold share, whose bits the device writes into host memory
 * after its predictor. wait(arg) returns true once the bits may be read (it must acquire what their
 * writer released) and false if they never will be; the pool's threads may call it at once. */
struct ffn_bits {
    const uint64_t *bits;
    bool (*wait)(void *arg);
    void *arg;
};

/* ffn_partial for one token over the neurons of src's bits (mask NULL), the pool's job handed out at
 * once: its group slices wait for the bits and take their own words of them, so the workers are
 * running and no run list is built when the bits come. The same operations as ffn_partial over
 * ffn_runs_from_bits' runs: the same bits of y. The layer must have ffn_down_t. Returns 0, a negative
 * code, or 1: the bits never came (src->wait said so; y is not the result). */
int ffn_partial_bits(struct pi_pool *pool, struct ffn_scratch *s, const struct pi_model *m,
                     const struct pi_layer_weights *w, const float *xn, const struct ffn_bits *src, float *y,
                     uint64_t *bytes);

/* The down_t job's timeline, for a benchmark (bench_ffn -T): while a trace is set, each pass of the
 * down_t job records when it was handed out and, per slice, the thread that ran it (a small id per
 * thread), its start and end, the time it spent waiting for groups still being computed (column and
 * reduction slices) and a column slice's time reading its batches' records and in its AXPYs, in
 * ffn_trace_now's clock (the TSC on x86-64). Off (NULL) by default: one load a slice. Set it only
 * while no job runs. */
struct ffn_slice_trace {
    uint64_t start, end, wait;
    uint64_t records, axpy; /* a column slice's time reading its batches' records and in its AXPY calls */
    int32_t tid;
};
struct ffn_trace {
    uint64_t handout;              /* the last pass's hand-out to the pool */
    int32_t n_groups, n_slices;    /* its group slices, and all its slices */
    int32_t cap;
    struct ffn_slice_trace *slice; /* (cap) slices beyond cap are not recorded */
};
void ffn_trace_set(struct ffn_trace *t);
uint64_t ffn_trace_now(void);

#endif
