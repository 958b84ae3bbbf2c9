/* forward.h — the in-process forward pass on the CPU: a context holds the KV cache and scratch and
 * evaluates batches of tokens (prefill = a batch, decode = a batch of one).
 *
 * The per-layer steps are exposed separately (embed, attention, FFN, output) so that the
 * multi-process pipeline can run them in different stages around the same buffers. */
#ifndef PI_FORWARD_H
#define PI_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "model.h"

struct pi_ctx;

struct pi_ctx_params {
    int32_t n_ctx;     /* KV cache length (tokens); 0 = the model's training context */
    int32_t n_batch;   /* most tokens per eval call (prefill chunk); 0 = 64 */
    int32_t n_threads; /* >= 1 */
    /* Sparse FFN: when the model has predictors (a PowerInfer file), each layer's FFN computes only
     * the neurons its predictor marks active for some token of the batch. Ignored otherwise. */
    bool sparse;
};

/* Called in every layer's FFN with its input h (B, n_embd) before ffn_norm and the activations
 * act (B, n_ff) of all neurons (dense path only: not called in sparse mode, whose activations are
 * those of the predicted neurons): what `pictl calibrate` records. */
typedef void (*fwd_ffn_hook)(void *user, int layer, int32_t B, int32_t pos, const float *h, const float *act);
void ctx_set_ffn_hook(struct pi_ctx *c, fwd_ffn_hook fn, void *user);

int ctx_new(struct pi_ctx **out, const struct pi_model *m, const struct pi_ctx_params *p);
void ctx_free(struct pi_ctx *c);
int32_t ctx_n_ctx(const struct pi_ctx *c);
/* True when the FFN runs sparse (params.sparse and the model has predictors). */
bool ctx_is_sparse(const struct pi_ctx *c);

/* FFN counters of one layer since ctx_new or the last reset, for benchmarks: neurons computed
 * (Σ over calls of the neurons in the batch's union mask, n_ff per call when dense), tokens
 * evaluated, FFN weight bytes read (gate/up/down rows; predictor bytes not included), and, in
 * sparse mode, predicted activations (Σ over tokens of the ones in its mask row). Any pointer may
 * be NULL. */
void ctx_sparse_stats(const struct pi_ctx *c, int layer, uint64_t *neurons, uint64_t *tokens, uint64_t *bytes);
uint64_t ctx_sparse_predicted(const struct pi_ctx *c, int layer);
void ctx_sparse_stats_reset(struct pi_ctx *c);

/* Evaluate n tokens at positions pos..pos+n-1 (n may exceed n_batch: it is chunked). The KV cache
 * must already hold positions 0..pos-1. logits: n_vocab floats for the last token, or n × n_vocab
 * for every token when all_logits. Returns 0, or -PI_E_RANGE if pos + n exceeds the context. */
int ctx_eval(struct pi_ctx *c, const int32_t *tokens, int32_t n, int32_t pos, float *logits, bool all_logits);

/* ---- per-layer steps over the context's activation buffer x (B, n_embd) ---- */
int fwd_embed(struct pi_ctx *c, const int32_t *tokens, int32_t B);
/* x += attn(attn_norm(x)) for tokens at pos..pos+B-1; writes their K/V into the cache. */
int fwd_attn(struct pi_ctx *c, int layer, int32_t B, int32_t pos);
/* x += ffn(ffn_norm(x)): over all neurons, or in sparse mode over the predicted ones. PowerInfer
 * layers without ffn_down go through ffn_partial (down_t AXPY) over all neurons when dense. */
int fwd_ffn(struct pi_ctx *c, int layer, int32_t B);
/* logits (B or 1, n_vocab) = output(output_norm(x)); only the last token's when !all. */
int fwd_output(struct pi_ctx *c, int32_t B, float *logits, bool all);
float *fwd_x(struct pi_ctx *c); /* the (n_batch, n_embd) activation buffer */
/* The context's thread pool, for a caller's own kernels between the steps (one pool per process:
 * two pools' idle workers would spin against each other). */
struct pi_pool *ctx_pool(struct pi_ctx *c);

#endif
