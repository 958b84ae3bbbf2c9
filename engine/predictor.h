/* predictor.h — PowerInfer's activation predictor: which FFN neurons a token will activate.
 *
 *   mask[b, i] = (fc2 · relu(fc1 · h_b))_i >= threshold        (1 = predicted active)
 *
 * h (B, n_embd) is the FFN input before ffn_norm (the residual after attention); fc1 ne {n_embd, r},
 * fc2 ne {r, n_ff}, no biases, raw logits; threshold = powerinfer.sparse_threshold (default 0).
 * predictord runs this per layer; the in-process sparse mode (eval.c, on the host or the backend's predict op) too. */
#ifndef PI_PREDICTOR_H
#define PI_PREDICTOR_H

#include <stdbool.h>
#include <stdint.h>

#include "model.h"
#include "ops.h"

struct pi_pool;

/* True when every layer of the model has a predictor (a PowerInfer file). */
bool pred_available(const struct pi_model *m);

/* Evaluate layer l's predictor for B tokens. mask is (B, n_ff), overwritten; *n_active (if not
 * NULL) = number of ones in it (Σ over the batch). s holds the intermediate vectors (grown on
 * demand, reused across calls; free with ops_scratch_fini). -PI_E_INVAL if l has no predictor. */
/* Prefetch hints (ops_prefetch_rows) for the next pred_eval's fc1 job: set before the job before it. */
void pred_prefetch(struct pi_pool *pool, const struct pi_layer *l);
int pred_eval(struct pi_pool *pool, struct ops_scratch *s, const struct pi_layer *l, const float *h, int32_t B,
              float threshold, uint8_t *mask, int64_t *n_active);

/* Weight bytes one evaluation reads (fc1 + fc2). */
uint64_t pred_bytes(const struct pi_layer *l);

#endif
