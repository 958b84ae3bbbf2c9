/* instance.h — where a pinfer instance lives on this machine, and how a client talks to it.
 *
 * An instance is named [A-Za-z0-9_]{1,31} (ipc/shm.h's rule, one less for the NUL of
 * pi_ctl.instance; "default" unless --name). Its
 * runtime directory is $XDG_RUNTIME_DIR/pinfer/<name> when XDG_RUNTIME_DIR is set, else
 * /tmp/pinfer-<uid>/<name>; every directory we create there is mode 0700, and an existing one
 * must be a real directory owned by us without group/other bits (anything else is refused: a
 * directory another user controls could redirect our socket or pid file). It holds:
 *
 *   ctl.ipc          the supervisor's nanomsg REP socket (ipc://<dir>/ctl.ipc)
 *   supervisor.pid   the supervisor's pid (decimal, newline)
 *   apid.json        apid's settings when the instance serves HTTP (pictl start --http), 0600
 *   logs/<stage>.log each stage's stderr, appended across restarts; logs/supervisor.log
 *
 * Shared memory (/dev/shm/pinfer-<uid>-<name>-{ctl,weights,act}) is named by ipc/shm.h.
 * An instance is alive when its supervisor pid runs and its ctl segment exists. `stop` removes
 * everything except logs/. */
#ifndef PI_SUPERVISOR_INSTANCE_H
#define PI_SUPERVISOR_INSTANCE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "pipeline_layout.h"
#include "shm.h"

#define INST_DEFAULT_NAME "default"
#define INST_PATH_MAX 512              /* runtime paths; a unix socket path must stay < 108 */
#define INST_SOCK_FILE "ctl.ipc"
#define INST_PID_FILE "supervisor.pid"
#define INST_LOG_DIR "logs"
#define INST_SUPERVISOR_LOG "supervisor"  /* logs/supervisor.log, `pictl logs supervisor` */
#define INST_APID_CONFIG "apid.json"      /* apid's settings (pictl start --http), mode 0600 */
#define INST_SEG_CTL "ctl"
#define INST_SEG_WEIGHTS "weights"
#define INST_SEG_ACT "act"
#define INST_REQ_TIMEOUT_MS 10000      /* a command the supervisor answers without waiting */
#define INST_STOP_TIMEOUT_MS 20000     /* stop: stages get 5 s after SIGTERM, then cleanup */

/* Is name a valid instance name? Records a message naming the bad character otherwise. */
int inst_check_name(const char *name);

/* The runtime directory of an instance (not created). */
int inst_dir(const char *name, char *buf, size_t cap);
/* Create the runtime directory and its logs/ (and their parents under the base), checking owner
 * and mode of every directory on the way. */
int inst_dir_ensure(const char *name, char *dir, size_t cap);
/* <dir>/<file> into buf. */
int inst_path(const char *name, const char *file, char *buf, size_t cap);
/* <dir>/logs/<stage>.log */
int inst_log_path(const char *name, const char *stage, char *buf, size_t cap);

/* The supervisor's pid from supervisor.pid, 0 if the file is absent or unreadable. */
pid_t inst_read_pid(const char *name);
/* kill(pid, 0) says the process exists (EPERM counts: it exists, it is not ours). */
bool inst_pid_alive(pid_t pid);
/* Alive: the supervisor pid runs and the ctl segment exists. *pid gets the supervisor pid (or 0). */
bool inst_alive(const char *name, pid_t *pid);
/* The instance lock: supervisor.pid, created if absent, flock'ed exclusively. The supervisor holds it
 * for its whole life (the fd is inherited across the start's fork), so a second start of the same
 * name fails (-EBUSY, naming the running pid) and whoever gets the lock knows no supervisor of
 * that name runs. Creates the runtime directory. */
int inst_lock(const char *name, int *fd);
/* Remove what a dead instance left behind: stages still running on its segments (killed), its
 * segments and socket (logs and the pid file stay). Only with the instance lock held. */
int inst_cleanup(const char *name);
/* Remove the runtime directory with its logs (an ephemeral instance that ended well). */
void inst_remove_dir(const char *name);

/* Attach the instance's ctl segment read-only; *ctl points into seg (valid until shm_detach). */
int inst_attach_ctl(const char *name, struct shm_seg *seg, const struct pi_ctl **ctl);

/* Send one JSON command to the supervisor and wait up to timeout_ms for its reply. Returns 0 with
 * *reply set (the caller json_decref's it; it may be {"ok":false,...}), or a negative code with a
 * message (no supervisor, timeout, unparsable reply). */
int inst_request(const char *name, json_t *req, int timeout_ms, json_t **reply);
/* inst_request, then turn {"ok":false,"error":E} into -PI_E_INVAL with E as the message. */
int inst_command(const char *name, json_t *req, int timeout_ms, json_t **reply);

/* Path of a stage executable: $PINFER_STAGE_DIR/<stage> when set (tests), else next to pictl
 * (installed), else <builddir>/<stage>/<stage> (pictl runs from <builddir>/tools/). */
int inst_stage_exe(const char *stage, char *buf, size_t cap);

/* The status of an instance as JSON (cmd_status.c): `pictl status --json` and the supervisor's
 * status reply. Reads ctl only (relaxed loads: a snapshot for display). */
json_t *inst_status_json(const struct pi_ctl *ctl);

/* pictl status's state of an instance whose supervisor is gone (the segment keeps the last state) */
#define INST_STATE_DEAD "dead"
/* Names for status output. */
const char *inst_state_name(unsigned s);
const char *inst_stage_state_name(unsigned s);
const char *inst_req_state_name(unsigned s);

/* CLOCK_MONOTONIC in ns (same clock as the stages' heartbeat_ns). */
unsigned long long inst_now_ns(void);

/* Live predictor recall from predictord's audits (--audit-rate), totals and per layer, as JSON
 * (cmd_status.c; shown by status and profile). */
json_t *inst_audit_json(const struct pi_ctl *ctl);

#endif
