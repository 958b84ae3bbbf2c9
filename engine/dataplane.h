/* dataplane.h — what gpud, cpud and predictord share at start-up: the model from the shared weights
 * image and the act segment, checked against each other. */
#ifndef PI_ENGINE_DATAPLANE_H
#define PI_ENGINE_DATAPLANE_H

#include "act.h"
#include "model.h"
#include "stage.h"

/* Wait for the weights, build the model views over the shared image, attach the act segment and
 * check that its geometry is the model's. */
int dataplane_open(struct stage_rt *rt, struct pi_model **m, struct shm_seg *act_seg, struct act_view *act);

/* Is stage s READY and its process alive? (A stage killed a moment ago stays READY until the
 * supervisor reaps it, so the pid is checked too.) */
bool dataplane_stage_alive(const struct pi_ctl *ctl, enum pi_stage s);

#endif
