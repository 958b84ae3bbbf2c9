/* test_tmp_guard — common/tmp_guard: a guarded name is removed when SIGINT/SIGTERM/SIGHUP ends the
 * process and the process still dies of that signal; a dropped name is left alone; a process with
 * its own handler keeps it (the stages stop cleanly on SIGTERM); names that do not fit are refused
 * with -1, never an error. Each case runs in a forked child, since the signals end it. */
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"
#include "tmp_guard.h"

static char dir[] = "/tmp/test_tmp_guard.XXXXXX"; /* mkdtemp's template */

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static void touch(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0)
        close(fd);
}

/* Fork; the child runs body (which may die of a signal) and exits 0. Returns the wait status. */
static int in_child(void (*body)(int), int arg)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        body(arg);
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return st;
}

static char path_a[256], path_b[256];

static void guard_and_raise(int sig)
{
    signal(sig, SIG_DFL); /* the case under test: the default action (under nohup SIGHUP comes ignored) */
    touch(path_a);
    touch(path_b);
    tmp_guard_add(path_a);
    tmp_guard_drop(tmp_guard_add(path_b)); /* renamed: no longer ours to remove */
    raise(sig);
    _exit(3); /* not reached when the signal kills */
}

static volatile sig_atomic_t own_handler_ran;
static void own_handler(int sig) { (void)sig; own_handler_ran = 1; }

static void own_handler_kept(int sig)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = own_handler;
    sigaction(sig, &sa, NULL);
    touch(path_a);
    tmp_guard_add(path_a);
    raise(sig);
    _exit(own_handler_ran && exists(path_a) ? 0 : 4);
}

/* An ignored signal (nohup's SIGHUP) stays ignored: the guard takes only default actions over. */
static void ignored_kept(int sig)
{
    signal(sig, SIG_IGN);
    touch(path_a);
    tmp_guard_add(path_a);
    raise(sig);
    _exit(exists(path_a) ? 0 : 5);
}

int main(void)
{
    if (!mkdtemp(dir))
        SKIP("mkdtemp: cannot make a directory under /tmp");
    snprintf(path_a, sizeof path_a, "%s/a.gguf.tmp", dir);
    snprintf(path_b, sizeof path_b, "%s/b.gguf.tmp", dir);

    const int sigs[] = { SIGINT, SIGTERM, SIGHUP };
    for (int i = 0; i < 3; i++) {
        int st = in_child(guard_and_raise, sigs[i]);
        CHECK(WIFSIGNALED(st) && WTERMSIG(st) == sigs[i], "signal %d: the child dies of it (status %#x)", sigs[i], st);
        CHECK(!exists(path_a), "signal %d: the guarded file is removed", sigs[i]);
        CHECK(exists(path_b), "signal %d: a dropped name is left alone", sigs[i]);
        unlink(path_b);
    }

    int st = in_child(ignored_kept, SIGHUP);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "an ignored SIGHUP stays ignored and the file stays (status %#x)", st);
    unlink(path_a);

    st = in_child(own_handler_kept, SIGTERM);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "an own SIGTERM handler runs instead (status %#x)", st);
    CHECK(exists(path_a), "and the file is not removed by the guard");
    unlink(path_a);

    /* in this process: slots run out, too-long names, dropping -1 */
    int slots[TMP_GUARD_SLOTS];
    for (int i = 0; i < TMP_GUARD_SLOTS; i++) {
        slots[i] = tmp_guard_add(path_a);
        CHECK(slots[i] >= 0, "slot %d", i);
    }
    CHECK(tmp_guard_add(path_a) == -1, "no slot left: -1");
    tmp_guard_drop(slots[3]);
    CHECK(tmp_guard_add(path_a) == slots[3], "a dropped slot is reused");
    char *longp = malloc(TMP_GUARD_PATH_MAX + 1);
    memset(longp, 'x', TMP_GUARD_PATH_MAX);
    longp[TMP_GUARD_PATH_MAX] = 0;
    CHECK(tmp_guard_add(longp) == -1, "a name too long: -1");
    free(longp);
    for (int i = 0; i < TMP_GUARD_SLOTS; i++)
        tmp_guard_drop(slots[i]);
    tmp_guard_drop(-1);
    tmp_guard_drop(TMP_GUARD_SLOTS);

    rmdir(dir);
    return tu_finish("test_tmp_guard");
}
