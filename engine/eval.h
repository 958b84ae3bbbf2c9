/* eval.h — the one evaluator: a loop over the layers for a batch of tokens (batch.h) on a backend
 * (backend.h), with a pluggable FFN executor.
 *
 *   eval_batch:  embed → per layer: attn, ffn step → output
 *
 * The FFN step is local by default (eval_ffn_local: the predictor on the device or on the host,
 * the device's share of the neurons, the rest on the host) — the in-process engine, and gpud while
 * a stage is down; gpud plugs in a step routed through predictord and cpud (gpud/pipeline.c).
 * Both compute the same thing with the same masks and the same order of sums, so a token's logits
 * do not depend on which stages were up (docs/ARCHITECTURE.md, "Invariance").
 *
 * On top, the in-process context (pi_ctx: the CPU backend with one sequence, plus the FFN counters)
 * that `pictl run --inproc`, perplexity, calibration and the tests use. */
#ifndef PI_ENGINE_EVAL_H
#define PI_ENGINE_EVAL_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "batch.h"
#include "ffn_split.h"
#include "model.h"
#include "ops.h"

struct eval;
struct ncache;

/* One layer's FFN for the n tokens of the batch: on return x has been advanced by ffn_add. */
typedef int (*eval_ffn_fn)(void *user, struct eval *e, int layer, const struct pi_batch *b);

struct eval_ffn_stats {
    uint64_t neurons, tokens, bytes, predicted;
};

/* Host time per phase of the forward pass, for benchmarks (on a device backend: the host's share and
 * the launches, not the kernels' time) */
enum eval_phase { EVAL_ATTN, EVAL_PREDICT, EVAL_FFN, EVAL_OUTPUT, EVAL_PHASES };

struct eval {
    const struct pi_model *m;
    const struct be_ops *ops;
    struct be *be;
    bool sparse;             /* predictors in use (the model has them, and not --dense) */
    const uint8_t *on_device; /* (n_layer, n_ff) the backend's placement, NULL = all */
    int64_t *n_host;         /* (n_layer) neurons not on the device: the host computes them */
    eval_ffn_fn ffn_fn;      /* NULL: eval_ffn_local */
    void *ffn_user;
    /* host side: the predictor when the backend has none, the host's share of the FFN */
    struct pi_pool *pool;
    struct ops_scratch pred;
    struct ffn_scratch ffn;
    struct ffn_runs runs;
    float *h, *xn, *y;       /* (n_batch, n_embd) */
    uint8_t *mask;           /* (n_batch, n_ff) */
    int32_t n_batch;
    struct eval_ffn_stats *stats; /* (n_layer) */
    /* the disk tier (eval_set_ncache): FFN rows through the neuron cache, layer L+1's predicted
     * neurons prefetched while layer L computes */
    struct ncache *nc;
    uint8_t *all, *mask2;    /* (n_ff) ones; (n_batch, n_ff) the next layer's predicted masks */
    struct ffn_runs pruns;
    uint64_t phase_ns[EVAL_PHASES];
    /* decode steps through the backend's step_top (every layer held on it, no disk tier;
     * PINFER_WHOLE_STEP=0 turns it off): counted, and their per-layer counts (n_layer) */
    bool whole_ok;
    uint64_t whole_steps;
    struct be_ffn_count *whole_cnt;
};

struct eval_params {
    int32_t n_batch;          /* most tokens per step (the backend's) */
    bool sparse;              /* use the predictors when the model has them */
    const uint8_t *on_device; /* the placement the backend was opened with (kept, not copied) */
    struct pi_pool *pool;     /* host threads for the host share; NULL: the CPU backend's pool */
};

int eval_init(struct eval *e, const struct pi_model *m, const struct be_ops *ops, struct be *be,
              const struct eval_params *p);
void eval_fini(struct eval *e);

/* Evaluate one step (b->n ≤ n_batch tokens). logits: (batch_n_out(b), n_vocab), the tokens that
 * want logits in batch order (may be NULL when none do). */
int eval_batch(struct eval *e, const struct pi_batch *b, float *logits);
/* The same step, then instead of the logits each wanting token's k best candidates (ids, vals:
 * (batch_n_out(b), k), the backend's topk op; -PI_E_UNSUPPORTED when it has none). */
int eval_batch_top(struct eval *e, const struct pi_batch *b, int32_t k, int32_t *ids, float *vals);

/* The local FFN step: masks (backend predictor, or host predictor + set_mask) when sparse, the
 * device's share, and the host's share of the neurons the device does not hold. */
int eval_ffn_local(struct eval *e, int layer, const struct pi_batch *b);
/* The host's share: y (n, n_embd) = FFN over the neurons of layer not on the device, from h (the
 * FFN input before ffn_norm, from get_h) and masks (NULL: dense). *bytes may be NULL. */
int eval_host_share(struct eval *e, int layer, int32_t n, const float *h, const uint8_t *mask, float *y,
                    uint64_t *bytes);
/* Masks of layer for n tokens on the host from h (the same predictor as the backend's). */
int eval_host_predict(struct eval *e, int layer, int32_t n, const float *h, uint8_t *mask);
/* Read the FFN rows through a neuron cache (ncache.h; not owned). Needs a sparse evaluator whose
 * backend holds every neuron and reads weights on the host (the CPU backend); NULL turns it off. */
int eval_set_ncache(struct eval *e, struct ncache *nc);
/* Count one FFN call into the layer's statistics. */
void eval_count(struct eval *e, int layer, int32_t n, const struct be_ffn_count *c);

/* ---- the in-process context: the CPU backend, one or more sequences ---- */

struct pi_ctx;

struct pi_ctx_params {
    int32_t n_ctx;     /* KV cache length (tokens) per sequence; 0 = the model's training context */
    int32_t n_batch;   /* most tokens per eval call (prefill chunk); 0 = 64 */
    int32_t n_threads; /* >= 1 */
    int32_t n_seq;     /* sequences; 0 = 1 */
    int32_t cache_type;  /* KV cache elements, enum be_cache_type; < 0: the backend's default */
    const char *backend; /* "cpu" (NULL too), "cuda", or "auto" (be_open_named) */
    /* Sparse FFN: when the model has predictors (a PowerInfer file), each token's FFN computes only
     * the neurons its predictor marks active. Ignored otherwise. */
    bool sparse;
};

int ctx_new(struct pi_ctx **out, const struct pi_model *m, const struct pi_ctx_params *p);
void ctx_free(struct pi_ctx *c);
int32_t ctx_n_ctx(const struct pi_ctx *c);
/* True when the FFN runs sparse (params.sparse and the model has predictors). */
bool ctx_is_sparse(const struct pi_ctx *c);
struct eval *ctx_eval_state(struct pi_ctx *c);

/* The backend the context runs on. */
const char *ctx_backend(const struct pi_ctx *c);
/* Why `--backend auto` did not open the device backend ("cuda: no CUDA device: ..."),
 * or "" when it did or was not asked to choose. */
const char *ctx_backend_why(const struct pi_ctx *c);
/* calibration's recorder: see be_ffn_hook (dense FFN only; CPU backend only) */
void ctx_set_ffn_hook(struct pi_ctx *c, be_ffn_hook fn, void *user);

/* FFN counters of one layer since ctx_new or the last reset, for benchmarks: neurons computed
 * (Σ over calls of the neurons in the batch's union mask, n_ff per call when dense), tokens
 * evaluated, FFN weight bytes read (gate/up/down rows; predictor bytes not included), and, in
 * sparse mode, predicted activations (Σ over tokens of the ones in its mask row). Any pointer may
 * be NULL. */
void ctx_sparse_stats(const struct pi_ctx *c, int layer, uint64_t *neurons, uint64_t *tokens, uint64_t *bytes);
uint64_t ctx_sparse_predicted(const struct pi_ctx *c, int layer);
void ctx_sparse_stats_reset(struct pi_ctx *c);
/* Milliseconds of host time in phase ph (enum eval_phase) since ctx_new or the last reset. */
double ctx_phase_ms(const struct pi_ctx *c, int ph);

/* Evaluate n tokens of sequence 0 at positions pos..pos+n-1 (chunked by n_batch). The KV cache
 * must already hold positions 0..pos-1. logits: n_vocab floats for the last token, or n × n_vocab
 * for every token when all_logits. Returns 0, or -PI_E_RANGE if pos + n exceeds the context. */
int ctx_eval(struct pi_ctx *c, const int32_t *tokens, int32_t n, int32_t pos, float *logits, bool all_logits);
/* The same with, instead of logits, the last token's k best candidates (ids, vals: k each;
 * eval_batch_top), when the backend has topk; else -PI_E_UNSUPPORTED. */
int ctx_eval_top(struct pi_ctx *c, const int32_t *tokens, int32_t n, int32_t pos, int32_t k, int32_t *ids,
                 float *vals);
/* Any batch (seq ids < n_seq); logits as eval_batch. */
int ctx_eval_batch(struct pi_ctx *c, const struct pi_batch *b, float *logits);

/* Tests: the backend's residual stream x (n_batch, n_embd), and one layer's FFN step over it. */
float *ctx_x(struct pi_ctx *c);
int ctx_ffn(struct pi_ctx *c, int layer, int32_t B);
/* The disk tier for this context (eval_set_ncache). */
int ctx_set_ncache(struct pi_ctx *c, struct ncache *nc);
/* The context's thread pool, for a caller's own kernels between steps. */
struct pi_pool *ctx_pool(struct pi_ctx *c);

#endif
