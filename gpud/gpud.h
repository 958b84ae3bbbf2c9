/* gpud.h — the executor stage: embeddings, attention and KV cache, its share of the FFN, the merge
 * with cpud's share, the output layer and sampling; it owns the sequence state and runs the
 * requests queued in the control segment (CPU backend here; the CUDA backend implements the same
 * per-layer steps). */
#ifndef PI_GPUD_H
#define PI_GPUD_H

#include <stdint.h>

#include "act.h"
#include "backend.h"
#include "batch.h"
#include "eval.h"
#include "model.h"
#include "stage.h"

struct gpud {
    struct stage_rt rt;
    struct pi_model *m;
    const struct be_ops *be_ops; /* the device gpud runs on (the CPU backend until CUDA lands) */
    struct be *be;
    struct shm_seg act_seg;
    struct act_view act;
    uint64_t epoch;      /* this session's epoch */
    uint64_t seq;        /* last step issued */
    uint64_t req_id;     /* request being run */
    bool req_dense;      /* the request asked for every neuron (--dense) */
    bool use_predictor;  /* the model has predictors: route steps through predictord */
    bool pred_on_device; /* the backend runs the predictor itself (a GPU: masks stay there) */
    int64_t *n_cold;     /* (n_layer) neurons with gpu_idx 0: none → cpud is not involved */
    struct eval ev;      /* the evaluator, its FFN step routed through the other stages */
    struct pi_batch_buf bb;
};

int gpud_init(struct gpud *g, int argc, char **argv);
/* Serve requests until a stop is requested. */
int gpud_run(struct gpud *g);
void gpud_fini(struct gpud *g);

/* Route the evaluator's FFN step through predictord and cpud (pipeline.c). */
void gpud_route_ffn(struct gpud *g);

/* The pipelined evaluator (gen_eval_fn): the same result as ctx_eval, with the FFN split between
 * gpud, cpud (its share) and predictord (masks), falling back to computing everything here when
 * a stage is down. */
int gpud_eval(void *self, const int32_t *toks, int32_t n, int32_t pos, float *logits);

#endif
