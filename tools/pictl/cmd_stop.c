/* pictl stop — ask the supervisor to stop (it terminates the stages and removes the segments,
 * socket and pid file; logs stay) and wait until it is gone. A dead instance's leftovers are
 * cleaned up instead. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "instance.h"
#include "pi_err.h"
#include "pictl.h"

#define STOP_EXIT_WAIT_MS 10000 /* after the reply: the supervisor closes its socket and exits */
#define STOP_POLL_MS 20

static bool wait_gone(pid_t pid, int timeout_ms)
{
    for (int waited = 0; inst_pid_alive(pid); waited += STOP_POLL_MS) {
        if (waited >= timeout_ms)
            return false;
        struct timespec ts = { 0, STOP_POLL_MS * 1000000L };
        nanosleep(&ts, NULL);
    }
    return true;
}

static int count_cb(const char *seg, void *arg)
{
    (void)seg;
    ++*(int *)arg;
    return 0;
}

int inst_stop(const char *name)
{
    char pid_path[INST_PATH_MAX];
    int lock_fd, rc = inst_path(name, INST_PID_FILE, pid_path, sizeof pid_path);
    if (rc)
        return rc;
    if (access(pid_path, F_OK) != 0) {
        /* no pid file, no supervisor (it removes the file last): leftovers of a crash at most */
        int n_segs = 0;
        shm_list_instance(geteuid(), name, count_cb, &n_segs);
        if (!n_segs)
            return pi_fail(ENOENT, "instance '%s' is not running", name);
        rc = inst_cleanup(name);
        return rc < 0 ? rc : 0;
    }
    rc = inst_lock(name, &lock_fd);
    if (rc == 0) {
        /* no supervisor holds the lock: remove what a dead one left, if anything */
        int n_segs = 0;
        shm_list_instance(geteuid(), name, count_cb, &n_segs);
        rc = inst_cleanup(name);
        unlink(pid_path);
        close(lock_fd);
        if (rc < 0)
            return rc;
        return n_segs ? 0 : pi_fail(ENOENT, "instance '%s' is not running", name);
    }
    if (rc != -EBUSY)
        return rc;
    pid_t pid = inst_read_pid(name);
    json_t *req = json_pack("{s:s}", "cmd", "stop"), *reply = NULL;
    rc = req ? inst_command(name, req, INST_STOP_TIMEOUT_MS, &reply) : pi_fail(PI_E_NOMEM, "out of memory");
    json_decref(req);
    json_decref(reply);
    if (wait_gone(pid, STOP_EXIT_WAIT_MS))
        return 0; /* gone: a lost reply does not matter */
    if (rc)
        return rc;
    return pi_fail(ETIMEDOUT, "the supervisor (pid %d) did not exit within %d ms after stopping", (int)pid,
                   STOP_EXIT_WAIT_MS);
}

int cmd_stop(int argc, char **argv)
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
            printf("usage: pictl stop [--name NAME]   stop an instance (default %s)\n", INST_DEFAULT_NAME);
            return 0;
        } else
            return 2;
    }
    if (optind < argc) {
        fprintf(stderr, "pictl stop: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    int rc = inst_check_name(name);
    if (!rc)
        rc = inst_stop(name);
    if (rc)
        return pictl_error("stop", name, rc);
    printf("stopped instance '%s'\n", name);
    return 0;
}
