/* predictord.h — the predictor stage: for each step, which FFN neurons will be active.
 * Without predictor weights (a plain GGUF; trained predictors arrive with `pictl calibrate`) every
 * neuron is predicted active: the plumbing, ring hops and timings are the real ones. */
#ifndef PI_PREDICTORD_H
#define PI_PREDICTORD_H

#include "act.h"
#include "model.h"
#include "stage.h"

struct predictord {
    struct stage_rt rt;
    struct pi_model *m;
    struct shm_seg act_seg;
    struct act_view act;
    uint64_t last_epoch, last_seq;
};

int predictord_init(struct predictord *p, int argc, char **argv);
int predictord_run(struct predictord *p);
void predictord_fini(struct predictord *p);

#endif
