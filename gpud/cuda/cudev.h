/* cudev.h — the GPU executor's device context: the model's weights, a KV cache and scratch in the
 * GPU's memory, and the forward-pass steps over a batch of tokens on it (kernels: cuk.h).
 *
 * Everything is allocated when the context opens (weights uploaded from the model's mapped
 * tensors, the KV cache, every scratch buffer for n_batch tokens), so no step allocates; the bytes
 * of each kind are counted and checked against cudaMemGetInfo. A batch is n tokens, each with its
 * own (sequence, position); a token attends only to the cells of its own sequence at positions up
 * to its own. The steps map one to one onto the backend interface's ops:
 *
 *   batch(n, tok, pos, seq)   the batch to the device
 *   embed(n)                  x = token_embd[tok]
 *   attn(layer, n)            x += attn(attn_norm(x)), K/V stored at (seq, pos)
 *   get_x(n, h)               h = x to the host (the FFN input before ffn_norm)
 *   predict(layer, n)         mask = predictor(x) per token, on the device
 *   set_mask / get_mask       masks from / to the host (bytes, (n, n_ff))
 *   ffn(layer, n, masked, to_pending)   FFN of ffn_norm(x): every neuron, or per token its own mask;
 *                             added to x, or written to the pending buffer for ffn_add
 *   ffn_add(n, y_cold)        x += pending (+ y_cold from the host)
 *   output(n, first, logits)  logits of tokens first..n-1 (to the host when logits != NULL)
 *   argmax(n, first, ids)     greedy ids of those tokens, computed on the device
 *   topk(n, first, k, ...)    their k best candidates, computed on the device
 *
 * Batch invariance: every matrix product of every batch is the project's own kernels (F16/BF16 on
 * the tensor cores with a fixed split of K, cuk_mma.h; the other types up to CUDEV_GEMV_MAX tokens
 * a GEMV, more the same kernel tiled as a GEMM, cuk.h), each output element reduced in one order
 * whatever the number of tokens; the sparse FFN of every batch reads each
 * token's own active rows; attention splits a token's cells into chunks fixed by position; norms
 * and RoPE are per token. A token's results are then the same bits whatever else is in the batch
 * and however its prompt was chunked. Only benchmarks can switch the prefill of batches of more
 * than CUDEV_GEMV_MAX tokens to cuBLAS (cudev_blas_prefill: faster, another summation order).
 * cudev_step runs one decode step of one token as a captured CUDA graph. */
#ifndef PI_CUDEV_H
#define PI_CUDEV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"

#define CUDEV_GEMV_MAX 8

struct cudev;

struct cudev_params {
    int32_t n_ctx;   /* KV cells per sequence */
    int32_t n_seq;   /* sequences the cache holds (>= 1) */
    int32_t n_batch; /* most tokens per step */
    bool kv_f32;     /* f32 KV cache (default f16) */
    bool no_sparse;  /* do not upload the predictors */
    /* Placement (n_layer, n_ff), 1 = the neuron is on the device; NULL = every neuron. A layer with
     * ffn_down_t and some neurons off the device holds only its placed neurons' gate, up and down_t
     * rows, compacted (vram_plan.h "hot"), and computes only them; a layer without ffn_down_t holds
     * its whole FFN as soon as one neuron is placed (the caller masks it: cudev_ffn_compact). */
    const uint8_t *on_device;
    /* Whole-layer placement (-ngl): only the first n_gpu_layers layers are on the device (<= 0: all);
     * token_embd is there when layer 0 is, output and output_norm when every layer is. */
    int32_t n_gpu_layers;
    bool blas_prefill; /* benchmarks: create cuBLAS and its scratch, so cudev_blas_prefill can turn it on */
};

/* Device memory by kind (bytes), the kinds of vram_plan.h: weights (non-FFN and whole FFNs), hot
 * (compacted FFN rows and their ids), pred (predictors), kv, scratch (incl. cuBLAS workspace);
 * context: in use before the context allocated anything (CUDA context, cuBLAS handle);
 * device_used: cudaMemGetInfo's total - free now. */
struct cudev_mem {
    uint64_t weights, hot, pred, kv, scratch, context, device_used, device_total;
    int64_t hot_neurons; /* FFN neurons computed on the device, all layers */
    double upload_s;     /* weight upload time */
};

/* True when a CUDA device can be used (device 0, compute capability 9.0 or newer: what the kernels
 * are built for); otherwise false with the reason in why. */
bool cudev_available(char *why, size_t cap);

int cudev_open(struct cudev **out, const struct pi_model *m, const struct cudev_params *p);
void cudev_close(struct cudev *d);
void cudev_mem(const struct cudev *d, struct cudev_mem *mem);
bool cudev_sparse_ok(const struct cudev *d); /* predictors and down_t uploaded */
/* True when layer's placement is applied on the device (all neurons there, or compacted rows);
 * false for a layer without ffn_down_t held whole under a partial placement (mask it first). */
bool cudev_ffn_compact(const struct cudev *d, int layer);
/* FFN neurons of layer the device computes (its placed neurons; n_ff when held whole). */
int64_t cudev_layer_hot(const struct cudev *d, int layer);
/* Layers on the device (n_gpu_layers, or n_layer). */
int32_t cudev_n_layers(const struct cudev *d);
const char *cudev_device_name(const struct cudev *d);

int cudev_batch(struct cudev *d, int32_t n, const int32_t *tok, const int32_t *pos, const int32_t *seq);
int cudev_embed(struct cudev *d, int32_t n);
int cudev_attn(struct cudev *d, int layer, int32_t n);
int cudev_get_x(struct cudev *d, int32_t n, float *h);
int cudev_predict(struct cudev *d, int layer, int32_t n);
int cudev_set_mask(struct cudev *d, int32_t n, const uint8_t *mask);
int cudev_get_mask(struct cudev *d, int32_t n, uint8_t *mask);
int cudev_ffn(struct cudev *d, int layer, int32_t n, bool masked, bool to_pending);
int cudev_ffn_add(struct cudev *d, int32_t n, const float *y_cold);
int cudev_output(struct cudev *d, int32_t n, int32_t first, float *logits);
int cudev_argmax(struct cudev *d, int32_t n, int32_t first, int32_t *ids);
/* the k best of the logits rows [first, n) that cudev_output left on the device (cuk_topk.h) */
int cudev_topk(struct cudev *d, int32_t n, int32_t first, int32_t k, int32_t *ids, float *vals);
int cudev_sync(struct cudev *d);
/* Pin [ptr, ptr + bytes) and map it into the device's address space (cudaHostRegister; unregistered
 * at close; at most 4 ranges). ffn_add's y_cold inside a registered range is copied without waiting
 * for it. The hand-off below reads and writes only registered ranges. */
int cudev_host_register(struct cudev *d, void *ptr, size_t bytes);
/* The per-layer hand-off with the host's share of the FFN (cuk_hand.h), enqueued in the stream:
 * stage_out: x (n, n_embd) → h and, when mask is not NULL, the masks (n, n_ff) → mask, written by a
 * kernel into the mapped range, then *key = seq (system-scope release). stage_wait: the host polls
 * the key (not the stream, which may be waiting in a cold_add) until *key >= seq: 0 when it is seq,
 * 1 when a later step's, an error when the stream failed. cold_add: x += pending + the host share,
 * the device waiting for it: y once *key == seq, or cold_buf() once cold_release(s >= seq). Every
 * cold_add must be released by its key or by cold_release before the host waits on the stream;
 * close releases all. */
int cudev_stage_out(struct cudev *d, int32_t n, float *h, uint8_t *mask, uint64_t *key, uint64_t seq);
/* predict_out (engine/backend.h): cudev_predict, then stage_out's kernel with the masks; h may go
 * out from the predictor's first kernel with *key_h = seq (the one-token Q products), and for n == 1
 * bits (when not NULL) receives the token's mask less the layer's placed neurons, 64 a word
 * (*bits_out: it did). */
int cudev_predict_out(struct cudev *d, int layer, int32_t n, float *h, uint8_t *mask, uint64_t *bits, uint64_t *key_h,
                      uint64_t *key, uint64_t seq, bool *bits_out);
int cudev_stage_wait(struct cudev *d, const uint64_t *key, uint64_t seq);
int cudev_cold_add(struct cudev *d, int32_t n, const uint64_t *key, const float *y, uint64_t seq);
float *cudev_cold_buf(struct cudev *d); /* (n_batch, n_embd) pinned host floats; NULL before host_register */
void cudev_cold_release(struct cudev *d, uint64_t seq);
/* Benchmarks: batches of more than CUDEV_GEMV_MAX tokens through cuBLAS GEMMs (f16 activations, the
 * sparse FFN as a masked dense product) — not batch invariant. Needs params.blas_prefill. */
int cudev_blas_prefill(struct cudev *d, bool on);
/* Benchmarks: count the neurons each layer's masked FFN computes (costs a sync per layer; not in
 * graphs). per_layer (n_layer, may be NULL) receives the counts so far; on starts a new count. */
int cudev_count_active(struct cudev *d, bool on, uint64_t *per_layer);

/* Convenience: the whole forward pass of n tokens (chunked by n_batch) of one sequence at
 * pos..pos+n-1; logits (n_vocab) of the last token to the host when logits != NULL, its greedy
 * id in *id when id != NULL. sparse: predictors per layer (when available). */
int cudev_eval(struct cudev *d, const int32_t *tok, int32_t n, int32_t pos, int32_t seq, bool sparse, float *logits,
               int32_t *id);
/* One decode step of one token as a CUDA graph (captured on first use per sparse flag and bucket
 * of positions, replayed after): *next = its greedy successor. */
int cudev_step(struct cudev *d, int32_t tok, int32_t pos, int32_t seq, bool sparse, int32_t *next);
/* A decode step of n ≤ CUDEV_GEMV_MAX tokens (tok, pos, seq: n each, any sequences; seq NULL: all 0)
 * ending in each token's k best candidates (cudev_topk's ids and logits, n × k) instead of a greedy
 * id: a graph per (n, sparse, bucket of positions) for k = 1, and one for the largest k > 1
 * asked for so far (captured again only when a larger k comes; a smaller one reads its prefix). The bits
 * of the eager ops (cudev_attn, cudev_predict, cudev_ffn adding into x, cudev_output, cudev_topk).
 * Only where every layer is whole on the device (cudev_whole): the graph computes every neuron of
 * every layer here. */
int cudev_step_top(struct cudev *d, int32_t n, const int32_t *tok, const int32_t *pos, const int32_t *seq, bool sparse,
                   int32_t k, int32_t *ids, float *vals);
/* every layer, and every neuron of each, is on the device */
bool cudev_whole(const struct cudev *d);

/* Where one eager step of n tokens (tok, at positions pos.., sequence 0: a decode step or a prompt
 * batch) spends GPU time (ms, summed over layers): norm + q/k/v, rope + cache + attention, wo,
 * predictor, FFN, output + argmax; then the predictor's kernels (fc1, fc2, the mask's compaction:
 * parts of pred) and the sparse FFN's with ffn_down_t (norm + gate/up over the listed rows, the
 * AXPY + its chunk sum: parts of ffn). Events between the kernels: eager, no overlap across them
 * (each costs a launch gap, ~5 µs on the H200). */
enum {
    CUDEV_PROF_QKV, CUDEV_PROF_ATTN, CUDEV_PROF_WO, CUDEV_PROF_PRED, CUDEV_PROF_FFN, CUDEV_PROF_OUTPUT,
    CUDEV_PROF_FC1, CUDEV_PROF_FC2, CUDEV_PROF_COMPACT, CUDEV_PROF_GLU, CUDEV_PROF_AXPY,
    CUDEV_PROF_N
};
int cudev_profile(struct cudev *d, const int32_t *tok, int32_t n, int32_t pos, bool sparse, double ms[CUDEV_PROF_N]);

/* HBM read floor: GB/s of a read-only kernel over bytes of device memory (the best of reps). */
int cudev_hbm_read(size_t bytes, int reps, double *gbps);

#endif
