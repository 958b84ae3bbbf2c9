/* calibrate.h — `pictl calibrate`: profile a ReLU-family model's FFN activations on a text, train one
 * activation predictor per layer, and write a PowerInfer-format GGUF (magic PWRI) that the sparse
 * engine (and PowerInfer) run: ffn_down stored transposed, fc1/fc2 predictors, a global
 * powerinfer.sparse_threshold, and pinfer.calibration.* / blk.N.act_freq statistics.
 *
 * Threshold. PowerInfer's format has one global threshold (active iff logit >= thr) and predictors
 * without biases, so a per-layer threshold t_l cannot be added as an offset. But the predictor is
 * positively homogeneous in its weights: scaling fc1 and fc2 by sqrt(s) (s > 0) scales the logits by s
 * (relu(s·z) = s·relu(z)). Each layer's own threshold t_l (the largest reaching the recall target on
 * held-out tokens) is made negative if it is not (a lower threshold only adds recall), and the layer
 * is scaled by s_l = T / t_l, so that logit_l >= t_l  <=>  s_l·logit_l >= T with the common
 * T = CAL_GLOBAL_THRESHOLD (-1). This is exact up to the f16 rounding of the stored weights, which the
 * final held-out figures (computed with the stored weights) include.
 *
 * Rank. With --rank R every layer uses R. Otherwise ranks 32, 64, 128, ... up to n_embd are tried per
 * layer and the one with the lowest expected FFN cost per token is kept:
 *     cost(r) = r·(n_embd + n_ff)          predictor multiply-adds
 *             + pred_frac(r) · 3·n_embd·n_ff   the FFN rows the predicted-active neurons make us compute
 * where pred_frac(r) is the held-out fraction of neurons predicted active at the recall target. So a
 * larger rank is taken only when it cuts false positives by more than it costs; the search stops when
 * the next rank's predictor alone costs more than the best total so far. */
#ifndef PI_CALIBRATE_H
#define PI_CALIBRATE_H

#include <stdbool.h>
#include <stdint.h>

#define CAL_GLOBAL_THRESHOLD (-1.0f)

struct cal_opts {
    const char *model;
    const char **data; /* calibration texts (n_data >= 1) */
    int n_data;
    const char **eval; /* optional texts never used for fitting: recall is measured on them too */
    int n_eval;
    const char *out, *report_svg, *json_stats;
    int32_t tokens;      /* training tokens */
    int32_t heldout;     /* held-out tokens (threshold choice and the reported figures) */
    int32_t eval_tokens; /* most tokens recorded from the --eval texts */
    int32_t rank;        /* 0 = search per layer */
    int32_t chunk;       /* positions per evaluated chunk (each starts from an empty cache) */
    int32_t epochs;      /* 0 = the trainer's default */
    int32_t batch;       /* tokens per training step; 0 = default */
    float lr;            /* Adam step; 0 = default */
    int32_t n_threads;
    float recall;        /* target held-out recall per layer */
    uint64_t seed;
    bool f32_pred;       /* store fc1/fc2 as f32 instead of f16 */
    bool quiet;          /* no progress or table */
};

void cal_opts_defaults(struct cal_opts *o);
/* Everything: load, record, train, write. 0 or a negative code with pi_errmsg() set. */
int cal_run(const struct cal_opts *o);

#endif
