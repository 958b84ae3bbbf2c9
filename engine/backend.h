/* backend.h — what the evaluator (eval.c) asks of a compute device, one layer step at a time
 * (interface v2: batches of sequences, placement, the predictor as an op, masks that stay on the
 * device, an explicit synchronisation contract, a memory report).
 *
 * The residual stream x (n_batch, n_embd), the KV cache, the FFN input, the masks and the weights
 * the backend holds live on the device. One step over a batch (batch.h) of n tokens:
 *
 *   embed(batch)                      x = tok_embd[tok]
 *   for each layer:
 *     attn(layer, batch)              x += attn(attn_norm(x)); K/V written at (seq, pos); token i
 *                                     attends to the cells of its own sequence at positions ≤ pos[i]
 *     predict(layer, n)               mask = predictor(x) per token, on the device    (optional)
 *       or set_mask(n, host mask)     masks computed elsewhere (predictord, the host)
 *     [get_mask(n, host mask)]        masks to the host, for cpud                      (host waits)
 *     [get_h(n, host h)]              x (the FFN input before ffn_norm) to the host    (host waits)
 *     ffn(w, n, sparse)               y_dev = FFN of ffn_norm(x) over the neurons this device holds
 *                                     (dense: all of them; sparse: each token over its own mask);
 *                                     w views the layer's weights (model.h: pi_layer_weights)
 *     ffn_add(layer, n, y_host)       x += y_dev (+ y_host, the cold share computed on the host)
 *   output(batch, logits)             logits of the tokens that want them, in batch order (host waits)
 *
 * Ops enqueue work and return; the host waits only in get_h, get_mask, output, argmax and sync.
 * A backend computes only the FFN neurons its placement gives it: the cold share of a stage that is
 * down is computed on the host (eval.c, with the same masks and order), never by a device that
 * does not hold those neurons.
 *
 * Invariance (docs/ARCHITECTURE.md): for one backend and one placement, token i's results depend
 * only on its own inputs — not on the other tokens of the batch, the batch size, how a prompt was
 * chunked, or the thread count. Every reduction's order is tied to absolute indices (neurons in
 * ascending order, fixed blocks of the output), a token's FFN uses only its own mask, and
 * x += y_dev + y_host is added in that one order.
 *
 * Masks are uint8 (n, n_ff), 1 = predicted active, as the act segment carries them. */
#ifndef PI_ENGINE_BACKEND_H
#define PI_ENGINE_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "batch.h"
#include "model.h"

#define BE_API_VERSION 2

struct be;

/* Element type of the KV cache. Values reach disk and the wire (act/ctl segments): only grow. */
enum be_cache_type { BE_CACHE_F32 = 0, BE_CACHE_F16 = 1 };

struct be_params {
    int32_t n_ctx;     /* KV cells per sequence (the context of one sequence) */
    int32_t n_seq;     /* sequences the KV cache holds (--parallel); 0 = 1 */
    int32_t n_batch;   /* most tokens per step */
    int32_t n_threads; /* host threads the backend may use */
    enum be_cache_type cache_type;
    /* Placement: (n_layer, n_ff), 1 = this backend holds neuron i of layer l (gate, up, down rows)
     * and computes it in ffn(); NULL = every neuron. Copied at open. */
    const uint8_t *on_device;
    /* Whole-layer placement (-ngl): only the first n_gpu_layers layers run here (<= 0: all). */
    int32_t n_gpu_layers;
};

/* Bytes the backend allocated, by kind (device memory for a GPU, host memory for the CPU backend;
 * weights a CPU backend reads in place from the model's mapping count 0). A GPU also reports its
 * compacted hot FFN rows (hot), predictors (pred, else in weights), the CUDA context measured before
 * its first allocation, and cudaMemGetInfo's used and total bytes; hot_neurons: the FFN neurons it
 * computes (all layers). */
struct be_mem {
    uint64_t weights, kv, scratch;
    uint64_t hot, pred, context, device_used, device_total;
    int64_t hot_neurons;
};

/* Per-call FFN counters (all optional to fill; zeroed by the caller). */
struct be_ffn_count {
    uint64_t neurons;   /* Σ over the call of the neurons computed (the batch's union) */
    uint64_t bytes;     /* FFN weight bytes read */
    uint64_t predicted; /* Σ over tokens of the neurons in its mask (sparse) */
};

/* What predict_out hands to the host share: buffers and keys in the registered host range */
struct be_stage {
    float *h;        /* (n, n_embd): x, the FFN input */
    uint8_t *mask;   /* (n, n_ff) */
    uint64_t *bits;  /* one token's cold active neurons as bits (n == 1) */
    uint64_t *key_h; /* seq once h is written (may come before the masks) */
    uint64_t *key;   /* seq once h, the masks and bits are written */
    uint64_t seq;
    bool bits_out; /* set by predict_out: bits were written (else the host share lists from the masks) */
};

struct be_ops {
    const char *name;
    int (*open)(struct be **out, const struct pi_model *m, const struct be_params *p);
    void (*close)(struct be *b);
    void (*mem)(const struct be *b, struct be_mem *out);
    int32_t (*n_ctx)(const struct be *b); /* cells per sequence */
    int32_t (*n_seq)(const struct be *b);

    int (*embed)(struct be *b, const struct pi_batch *batch);
    int (*attn)(struct be *b, int layer, const struct pi_batch *batch);
    /* (optional) evaluate layer's predictor on x for n tokens; the masks stay on the device.
     * NULL: the evaluator computes masks on the host and calls set_mask. */
    int (*predict)(struct be *b, int layer, int32_t n);
    int (*set_mask)(struct be *b, int32_t n, const uint8_t *mask);
    int (*get_mask)(struct be *b, int32_t n, uint8_t *mask);
    int (*get_h)(struct be *b, int32_t n, float *h);
    /* w: layer w->layer's weights; a backend that reads weights on the host reads the FFN rows
     * through it (lw_row); one that uploaded its weights at open ignores where they are */
    int (*ffn)(struct be *b, const struct pi_layer_weights *w, int32_t n, bool sparse, struct be_ffn_count *cnt);
    int (*ffn_add)(struct be *b, int layer, int32_t n, const float *y_host);
    /* logits (n_out, n_vocab) of the tokens with batch_wants(), in batch order */
    int (*output)(struct be *b, const struct pi_batch *batch, float *logits);
    /* (optional) the k best logits (1 <= k <= SAMP_BEST_MAX) of each token with batch_wants(), in
     * batch order, as ids (n_out, k) and their logits (n_out, k), in samp_best's order
     * (common/sampling.h): what sampling needs when samp_top_needed() says k suffice, without the
     * whole rows crossing to the host (k = 1: greedy). NULL: output() */
    int (*topk)(struct be *b, const struct pi_batch *batch, int32_t k, int32_t *ids, float *vals);
    /* (optional) the whole step of a decode batch (every token wants its output) — embed, every
     * layer (sparse: each over its predicted masks), output and topk — in one request, with the bits
     * of those ops (a device replays it as one launch: no host round trip a layer). cnt (n_layer):
     * what ffn would have counted for each layer. 1 when it does not apply here (then the caller
     * runs the ops: e.g. too many tokens, neurons not held), 0, or a negative code. */
    int (*step_top)(struct be *b, const struct pi_batch *batch, bool sparse, int32_t k, int32_t *ids, float *vals,
                    struct be_ffn_count *cnt);
    /* forget sequence seq's cells (they may be overwritten from position 0) */
    int (*seq_clear)(struct be *b, int32_t seq);
    /* (optional) complete all pending operations (required if the backend runs asynchronously) */
    int (*sync)(struct be *b);
    /* (optional) let idle worker threads sleep: the caller is about to wait on another stage */
    void (*idle)(struct be *b);
    /* (optional) pin a host range (gpud's act segment) and map it into the device's address space
     * for the hand-off below. A buffer inside it that ffn_add reads is copied asynchronously: the
     * caller leaves it unchanged until the stream has passed the copy. NULL: no hand-off ops. */
    int (*host_register)(struct be *b, void *ptr, size_t bytes);
    /* (optional, with host_register) the per-layer hand-off with a host share of the FFN, with no
     * copy engine and no host thread between the device and the host share's computation; each
     * enqueued behind what is already enqueued. h, mask, the keys and y lie in the registered range.
     *   stage_out(n, h, mask, key, seq): the device writes x (the FFN input, as get_h) into h and,
     *     when mask is not NULL, the masks of the n tokens into mask, then stores seq into *key
     *     (system scope, after a fence): a host thread that acquires *key == seq reads them;
     *   stage_wait(key, seq): the host waits until *key >= seq (the stream may be waiting in a
     *     cold_add): 0 when *key == seq (h and mask hold step seq), 1 when a later step's, or the
     *     device's error;
     *   cold_add(layer, n, key, y, seq): x += y_dev + y_host in ffn_add's order, the device waiting
     *     for y_host: y once *key == seq (the share's writer stores it after y), or cold_buf()
     *     once the host calls cold_release(s), s >= seq;
     *   cold_buf(): (n_batch, n_embd) host floats the device reads after a cold_release;
     *   cold_release(seq): the host's share (or, for an abandoned step, anything) is in cold_buf.
     * Every cold_add must be released, by its key or by cold_release, before the host waits on the
     * device (close releases every step). */
    int (*stage_out)(struct be *b, int32_t n, float *h, uint8_t *mask, uint64_t *key, uint64_t seq);
    /*   predict_out(layer, n, s): predict(layer, n), then stage_out(n, s->h, s->mask, s->key, s->seq) in
     *     one: the device may write h and store seq into *s->key_h before the predictor's products
     *     (the host share's norm overlaps them), and for n == 1 it also writes s->bits, the token's
     *     mask ∧ not on the device in 64-neuron words (bit k of word w: neuron 64 w + k), before *key,
     *     and says so in s->bits_out.
     *     NULL: predict, then stage_out. */
    int (*predict_out)(struct be *b, int layer, int32_t n, struct be_stage *s);
    int (*stage_wait)(struct be *b, const uint64_t *key, uint64_t seq);
    int (*cold_add)(struct be *b, int layer, int32_t n, const uint64_t *key, const float *y, uint64_t seq);
    float *(*cold_buf)(struct be *b);
    void (*cold_release)(struct be *b, uint64_t seq);
};

extern const struct be_ops be_cpu_ops;
/* Dense partial offload (-ngl, backend_ngl.c): the first be_params.n_gpu_layers layers on the CUDA
 * backend, the rest and the output on the CPU backend; open fails without the CUDA backend. */
extern const struct be_ops be_ngl_ops;
/* Tests: be_ngl_ops.open with another backend for the first layers (the CPU backend in CI). */
int be_ngl_open_on(struct be **out, const struct pi_model *m, const struct be_params *p, const struct be_ops *dev);

/* The backend named name ("cpu"; "cuda" when built with it), or NULL. NULL name = "cpu". */
const struct be_ops *be_find(const char *name);
/* Names of the backends built in, NULL-terminated. */
const char *const *be_names(void);

/* Open the backend `name`: "cpu", "cuda", or "auto" (NULL too: cuda when it is built and a device
 * opens, else cpu; why cuda was not taken goes to *why, which may be NULL). A cache_type < 0 takes
 * the backend's default (f32 on the CPU, f16 on a GPU). 0 or a negative code with a message. */
int be_open_named(const char *name, const struct pi_model *m, const struct be_params *p, int cache_type,
                  const struct be_ops **ops, struct be **out, char *why, size_t why_len);

/* ---- the CPU backend's extras (in-process tools: calibration records activations) ---- */

/* Called in every layer's dense FFN with its input h (B, n_embd) before ffn_norm and the
 * activations act (B, n_ff) of all neurons (not called in sparse mode): what `pictl calibrate`
 * records. pos is the position of the batch's first token. */
typedef void (*be_ffn_hook)(void *user, int layer, int32_t B, int32_t pos, const float *h, const float *act);
void be_cpu_set_ffn_hook(struct be *b, be_ffn_hook fn, void *user);
/* The CPU backend's thread pool (one pool per process: two pools' idle workers would spin). */
struct pi_pool *be_cpu_pool(struct be *b);
/* Tests: the residual stream x (n_batch, n_embd) the next op reads. */
float *be_cpu_x(struct be *b);

#endif
