/* act.h — the "act" segment: per-layer activation exchange between gpud, predictord and cpud.
 * Created by the supervisor (sizes from the model), used by the data-plane stages. The layout and
 * the ring protocol are described in docs/ARCHITECTURE.md ("Data plane"). */
#ifndef PI_IPC_ACT_H
#define PI_IPC_ACT_H

#include <stddef.h>
#include <stdint.h>

#include "shm.h"

struct act_params {
    int32_t n_layer, n_embd, n_ff;
    int32_t n_batch; /* most tokens per pipeline step (prefill chunk) */
};

/* Bytes of the act segment for these parameters (0 if invalid). */
size_t act_seg_bytes(const struct act_params *p);
/* Lay out a freshly created act segment (seg from shm_create with act_seg_bytes); the caller then
 * calls shm_publish. */
int act_seg_init(struct shm_seg *seg, const struct act_params *p);

#endif
