/* pictl logs STAGE [-f] — print a stage's log (its stderr, appended across restarts, with a stamp
 * line at each start); STAGE may also be "supervisor". -f follows the file until interrupted. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "instance.h"
#include "pi_err.h"
#include "pictl.h"
#include "stage.h"

#define LOGS_FOLLOW_MS 200
#define LOGS_BUF 65536

static volatile sig_atomic_t logs_stop;

static void on_signal(int sig)
{
    (void)sig;
    logs_stop = 1;
}

/* Copy what is new in fd to stdout. */
static int drain(int fd)
{
    char buf[LOGS_BUF];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n == 0)
            return 0;
        if (n < 0)
            return errno == EINTR ? 0 : -errno;
        if (fwrite(buf, 1, (size_t)n, stdout) != (size_t)n)
            return -EIO;
    }
}

int cmd_logs(int argc, char **argv)
{
    static const struct option opts[] = { { "name", required_argument, NULL, 'N' }, { "follow", no_argument, NULL, 'f' },
                                           { "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 } };
    const char *name = INST_DEFAULT_NAME;
    bool follow = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "fh", opts, NULL)) != -1) {
        if (c == 'N')
            name = optarg;
        else if (c == 'f')
            follow = true;
        else if (c == 'h') {
            printf("usage: pictl logs STAGE [--name NAME] [-f]   STAGE: loaderd, predictord, cpud, gpud, apid, supervisor\n");
            return 0;
        } else
            return 2;
    }
    if (optind + 1 != argc) {
        fprintf(stderr, "pictl logs: give one STAGE (loaderd, predictord, cpud, gpud, apid, supervisor)\n");
        return 2;
    }
    const char *stage = argv[optind];
    if (stage_from_name(stage) < 0 && strcmp(stage, INST_SUPERVISOR_LOG)) {
        fprintf(stderr, "pictl logs: unknown stage '%s' (loaderd, predictord, cpud, gpud, apid, supervisor)\n", stage);
        return 2;
    }
    char path[INST_PATH_MAX];
    int rc = inst_log_path(name, stage, path, sizeof path);
    if (rc)
        return pictl_error("logs", name, rc);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return pictl_error("logs", path, pi_fail(errno, "no log '%s': %s", path, strerror(errno)));
    if (follow) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
    }
    do {
        if ((rc = drain(fd)))
            break;
        fflush(stdout);
        if (follow && !logs_stop) {
            struct timespec ts = { 0, LOGS_FOLLOW_MS * 1000000L };
            nanosleep(&ts, NULL);
        }
    } while (follow && !logs_stop);
    close(fd);
    if (rc)
        return pictl_error("logs", path, pi_fail(-rc, "reading '%s': %s", path, strerror(-rc)));
    return 0;
}
