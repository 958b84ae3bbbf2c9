/* stage.h — what every pipeline stage process does around its own work: attach the instance's
 * control segment, keep a heartbeat, wait for the weights, report READY, notice a stop, record
 * profile rows and trace events.
 *
 * A stage is started by the supervisor as `STAGE --instance NAME` with stderr going to its log file;
 * everything else (model path, threads, context) it reads from the control segment. */
#ifndef PI_IPC_STAGE_H
#define PI_IPC_STAGE_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "pipeline_layout.h"
#include "shm.h"

#define STAGE_HEARTBEAT_MS 50      /* heartbeat period; the supervisor calls a stage hung after
                                      STAGE_HUNG_MS without one */
#define STAGE_HUNG_MS 5000
#define STAGE_ATTACH_TIMEOUT_MS 10000
/* Exit status of a stage whose start failed for a reason that no restart can fix — the options or
 * the model: a backend without its device, an unsupported tensor type, a missing tensor, a bad value,
 * more memory than the device or host has (sysexits' EX_CONFIG). Before the instance first serves,
 * the supervisor fails the start at the first such exit instead of restarting the stage
 * SUP_GIVEUP_DEATHS times. */
#define STAGE_EXIT_CONFIG 78

struct stage_rt {
    enum pi_stage stage;
    const char *name;              /* "gpud", ... */
    char instance[PI_INSTANCE_MAX];
    struct shm_seg ctl_seg, weights_seg;
    struct pi_ctl *ctl;
    struct pi_stage_info *me;      /* &ctl->stages[stage] */
    struct pi_weights_info *winfo; /* after stage_attach_weights */
    const void *image;             /* the model file image in the weights segment */
    uint64_t image_size;
    pthread_t hb_thread;
    bool hb_running;
};

/* Parse `--instance NAME` (argv of the stage's main), attach ctl (waiting for it to be published),
 * start the heartbeat thread and install SIGTERM/SIGINT handlers that request a stop. */
int stage_init(struct stage_rt *rt, enum pi_stage stage, int argc, char **argv);
void stage_fini(struct stage_rt *rt);

/* Attach the weights segment (read-only unless writable) and wait until loaderd marks it READY
 * (or FAILED → -PI_E_IO with its message). timeout_ms < 0: forever (while no stop is requested). */
int stage_attach_weights(struct stage_rt *rt, bool writable, int timeout_ms);

void stage_set_ready(struct stage_rt *rt);
/* A stop was requested (signal, or the instance is STOPPING). */
bool stage_should_stop(const struct stage_rt *rt);
/* Record a fatal error for pictl status before exiting. */
void stage_fail(struct stage_rt *rt, int rc, const char *what);
/* The exit status of a stage whose start failed with rc: STAGE_EXIT_CONFIG where rc says the options
 * or the model are at fault, 1 otherwise (I/O, memory, a device fault: a restart may help). */
int stage_start_exit_status(int rc);

/* Add one work item to this stage's per-layer profile (relaxed atomics) and trace. */
void stage_prof(struct stage_rt *rt, int layer, uint64_t compute_ns, uint64_t wait_ns, uint64_t bytes);

uint64_t stage_now_ns(void); /* CLOCK_MONOTONIC */
const char *stage_name(enum pi_stage s);
int stage_from_name(const char *name); /* or -1 */

#endif
