/* pictl restart STAGE — the supervisor sends SIGTERM and respawns the stage (a restart in its
 * counters); we wait until a new process of it is READY. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "instance.h"
#include "pi_err.h"
#include "pictl.h"
#include "stage.h"

#define RESTART_READY_TIMEOUT_MS 30000
#define RESTART_POLL_MS 20

static int wait_new_ready(const struct pi_ctl *ctl, int id, pid_t old_pid, uint32_t old_restarts, pid_t *new_pid)
{
    const struct pi_stage_info *in = &ctl->stages[id];
    for (int waited = 0; waited < RESTART_READY_TIMEOUT_MS; waited += RESTART_POLL_MS) {
        pid_t pid = atomic_load_explicit(&in->pid, memory_order_relaxed);
        uint32_t restarts = atomic_load_explicit(&in->restarts, memory_order_relaxed);
        unsigned st = atomic_load_explicit(&in->state, memory_order_acquire);
        if (pid > 0 && pid != old_pid && restarts > old_restarts && st == PI_STAGE_READY) {
            *new_pid = pid;
            return 0;
        }
        if (st == PI_STAGE_FAILED)
            return pi_fail(PI_E_IO, "%s failed after the restart: %.*s", stage_name((enum pi_stage)id), PI_MSG_MAX,
                           in->last_error[0] ? in->last_error : ctl->error);
        struct timespec ts = { 0, RESTART_POLL_MS * 1000000L };
        nanosleep(&ts, NULL);
    }
    return pi_fail(ETIMEDOUT, "%s was not READY again within %d s", stage_name((enum pi_stage)id),
                   RESTART_READY_TIMEOUT_MS / 1000);
}

int cmd_restart(int argc, char **argv)
{
    static const struct option opts[] = { { "name", required_argument, NULL, 'N' },
                                           { "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 } };
    const char *name = INST_DEFAULT_NAME;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'N')
            name = optarg;
        else if (c == 'h') {
            printf("usage: pictl restart STAGE [--name NAME]   restart loaderd, predictord, cpud, gpud or apid\n");
            return 0;
        } else
            return 2;
    }
    if (optind + 1 != argc) {
        fprintf(stderr, "pictl restart: give one STAGE (loaderd, predictord, cpud, gpud, apid)\n");
        return 2;
    }
    const char *stage = argv[optind];
    int id = stage_from_name(stage);
    if (id < 0) {
        fprintf(stderr, "pictl restart: unknown stage '%s' (loaderd, predictord, cpud, gpud, apid)\n", stage);
        return 2;
    }
    int rc = inst_check_name(name);
    if (rc)
        return pictl_error("restart", "--name", rc);
    struct shm_seg seg;
    const struct pi_ctl *ctl;
    if ((rc = inst_attach_ctl(name, &seg, &ctl)))
        return pictl_error("restart", name, rc == -ENOENT ? pi_fail(ENOENT, "instance '%s' is not running", name) : rc);
    const pid_t old_pid = atomic_load_explicit(&ctl->stages[id].pid, memory_order_relaxed);
    const uint32_t old_restarts = atomic_load_explicit(&ctl->stages[id].restarts, memory_order_relaxed);
    json_t *req = json_pack("{s:s, s:s}", "cmd", "restart", "stage", stage), *reply = NULL;
    rc = inst_command(name, req, INST_REQ_TIMEOUT_MS, &reply);
    json_decref(req);
    json_decref(reply);
    pid_t new_pid = 0;
    if (!rc)
        rc = wait_new_ready(ctl, id, old_pid, old_restarts, &new_pid);
    shm_detach(&seg);
    if (rc)
        return pictl_error("restart", stage, rc);
    printf("restarted %s: pid %d -> %d\n", stage, (int)old_pid, (int)new_pid);
    return 0;
}
