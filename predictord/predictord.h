/* predictord.h — the predictor stage: for each step, which FFN neurons will be active:
 * mask = fc2 · relu(fc1 · h) >= powerinfer.sparse_threshold per token, h the FFN input before
 * ffn_norm. A model without predictors (a plain GGUF; `pictl calibrate` makes a PowerInfer file)
 * gets all-active masks. With --audit-rate (pi_ctl.audit_rate) a sampled fraction of tokens is also
 * evaluated densely to count the neurons that fired but were not predicted: live recall. */
#ifndef PI_PREDICTORD_H
#define PI_PREDICTORD_H

#include "act.h"
#include "model.h"
#include "ops.h"
#include "stage.h"

struct pi_pool;

struct predictord {
    struct stage_rt rt;
    struct pi_model *m;
    struct shm_seg act_seg;
    struct act_view act;
    uint64_t last_epoch, last_seq;
    struct pi_pool *pool;
    struct ops_scratch scratch;
    float *xn, *gate, *up; /* audit: (1, n_embd), (1, n_ff), (1, n_ff) */
    bool have_predictors;
};

int predictord_init(struct predictord *p, int argc, char **argv);
int predictord_run(struct predictord *p);
void predictord_fini(struct predictord *p);

#endif
