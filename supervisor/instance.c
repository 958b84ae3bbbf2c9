/* instance.c — runtime directory, liveness, leftovers and the client side of the control socket
 * (see instance.h). */
#include "instance.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <signal.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "pi_err.h"

#define DIR_MODE 0700
#define DIR_FOREIGN_BITS (S_IRWXG | S_IRWXO)
#define PID_TEXT_MAX 32
#define CLIENT_RECONNECT_MS 10     /* the supervisor may bind a moment after we connect */
#define CLIENT_RESEND_MS INT_MAX   /* never resend a request: "generate" is not idempotent */

int inst_check_name(const char *name)
{
    if (!name || !name[0])
        return pi_fail(PI_E_INVAL, "instance name is empty");
    /* shm allows SHM_PART_MAX characters, but ctl.instance and the stages' copies hold
     * PI_INSTANCE_MAX bytes with the NUL */
    const size_t max = PI_INSTANCE_MAX - 1 < SHM_PART_MAX ? PI_INSTANCE_MAX - 1 : SHM_PART_MAX;
    size_t n = strnlen(name, max + 1);
    if (n > max)
        return pi_fail(PI_E_INVAL, "instance name '%.*s...' is longer than %zu characters", (int)max, name, max);
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
            return pi_fail(PI_E_INVAL, "instance name '%s': character %zu ('%c') is not one of [A-Za-z0-9_]", name,
                           i, c >= 32 && c < 127 ? c : '?');
    }
    return 0;
}

/* The directory that holds every instance of this user. */
static int base_dir(char *buf, size_t cap)
{
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    int n = xdg && xdg[0] ? snprintf(buf, cap, "%s/pinfer", xdg) : snprintf(buf, cap, "/tmp/pinfer-%u", (unsigned)geteuid());
    if (n < 0 || (size_t)n >= cap)
        return pi_fail(PI_E_RANGE, "runtime directory path is longer than %zu bytes (XDG_RUNTIME_DIR too long?)", cap);
    return 0;
}

int inst_dir(const char *name, char *buf, size_t cap)
{
    int rc = inst_check_name(name);
    if (rc)
        return rc;
    char base[INST_PATH_MAX];
    if ((rc = base_dir(base, sizeof base)))
        return rc;
    int n = snprintf(buf, cap, "%s/%s", base, name);
    if (n < 0 || (size_t)n >= cap)
        return pi_fail(PI_E_RANGE, "runtime directory path '%s/%s' is too long", base, name);
    return 0;
}

int inst_path(const char *name, const char *file, char *buf, size_t cap)
{
    char dir[INST_PATH_MAX];
    int rc = inst_dir(name, dir, sizeof dir);
    if (rc)
        return rc;
    int n = snprintf(buf, cap, "%s/%s", dir, file);
    if (n < 0 || (size_t)n >= cap)
        return pi_fail(PI_E_RANGE, "path '%s/%s' is too long", dir, file);
    return 0;
}

int inst_log_path(const char *name, const char *stage, char *buf, size_t cap)
{
    char file[64];
    snprintf(file, sizeof file, INST_LOG_DIR "/%.40s.log", stage);
    return inst_path(name, file, buf, cap);
}

/* mkdir 0700 if absent; then insist it is a directory of ours with no group/other bits. */
static int ensure_private_dir(const char *path)
{
    if (mkdir(path, DIR_MODE) != 0 && errno != EEXIST)
        return pi_fail(errno, "cannot create directory '%s': %s", path, strerror(errno));
    struct stat st;
    if (lstat(path, &st) != 0)
        return pi_fail(errno, "cannot stat '%s': %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return pi_fail(EACCES, "'%s' exists and is not a directory (refusing to use it)", path);
    if (st.st_uid != geteuid())
        return pi_fail(EACCES, "directory '%s' is owned by uid %u, not by us (uid %u): refusing to use it", path,
                       (unsigned)st.st_uid, (unsigned)geteuid());
    if (st.st_mode & DIR_FOREIGN_BITS)
        return pi_fail(EACCES, "directory '%s' has mode %04o; group/other permission bits are not allowed", path,
                       (unsigned)(st.st_mode & 07777));
    return 0;
}

int inst_dir_ensure(const char *name, char *dir, size_t cap)
{
    char base[INST_PATH_MAX], logs[INST_PATH_MAX];
    int rc = base_dir(base, sizeof base);
    if (rc || (rc = inst_dir(name, dir, cap)) || (rc = inst_path(name, INST_LOG_DIR, logs, sizeof logs)))
        return rc;
    if ((rc = ensure_private_dir(base)) || (rc = ensure_private_dir(dir)) || (rc = ensure_private_dir(logs)))
        return rc;
    return 0;
}

pid_t inst_read_pid(const char *name)
{
    char path[INST_PATH_MAX], text[PID_TEXT_MAX];
    if (inst_path(name, INST_PID_FILE, path, sizeof path))
        return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0)
        return 0;
    text[n] = '\0';
    char *end;
    long v = strtol(text, &end, 10);
    if (end == text || v <= 0 || v > INT_MAX)
        return 0;
    return (pid_t)v;
}

bool inst_pid_alive(pid_t pid)
{
    if (pid <= 0 || (kill(pid, 0) != 0 && errno != EPERM))
        return false;
    /* A zombie is dead for us: its parent (init, or a container's pid 1 that never reaps) may keep
     * it in the table long after it exited. /proc/PID/stat: "pid (comm) S ...", comm may hold ')'. */
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return true;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return true;
    buf[n] = '\0';
    const char *rp = strrchr(buf, ')');
    return !(rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X'));
}

static bool ctl_segment_exists(const char *name)
{
    char seg[SHM_NAME_CAP], path[SHM_NAME_CAP + sizeof SHM_DIR];
    if (shm_name(seg, sizeof seg, geteuid(), name, INST_SEG_CTL))
        return false;
    snprintf(path, sizeof path, SHM_DIR "%s", seg);
    struct stat st;
    return stat(path, &st) == 0;
}

bool inst_alive(const char *name, pid_t *pid)
{
    pid_t p = inst_read_pid(name);
    if (pid)
        *pid = p;
    return p > 0 && inst_pid_alive(p) && ctl_segment_exists(name);
}

static int unlink_quiet(const char *path)
{
    if (unlink(path) != 0 && errno != ENOENT)
        return pi_fail(errno, "cannot remove '%s': %s", path, strerror(errno));
    return 0;
}

/* Does pid run "STAGE --instance name"? (cmdline is NUL-separated argv) */
static bool pid_is_stage_of(pid_t pid, const char *name)
{
    char path[64], buf[PATH_MAX + 64];
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    const char *a1 = buf + strlen(buf) + 1;
    if (a1 >= buf + n || strcmp(a1, "--instance"))
        return false;
    const char *a2 = a1 + strlen(a1) + 1;
    return a2 < buf + n && !strcmp(a2, name);
}

/* Stages orphaned by a supervisor that was killed still run attached to the old segments: kill
 * them, or they would keep the weights in memory and fight the new instance's stages. */
static void kill_orphan_stages(const char *name)
{
    struct shm_seg seg;
    const struct pi_ctl *ctl;
    if (inst_attach_ctl(name, &seg, &ctl))
        return;
    for (int i = 0; i < PI_STAGE_COUNT; i++) {
        pid_t pid = atomic_load_explicit(&ctl->stages[i].pid, memory_order_relaxed);
        if (pid > 0 && pid_is_stage_of(pid, name))
            kill(pid, SIGKILL);
    }
    shm_detach(&seg);
}

int inst_cleanup(const char *name)
{
    char path[INST_PATH_MAX];
    kill_orphan_stages(name);
    int rc = shm_remove_instance(name);
    if (rc < 0)
        return rc;
    if ((rc = inst_path(name, INST_SOCK_FILE, path, sizeof path)) || (rc = unlink_quiet(path)))
        return rc;
    return 0;
}

int inst_lock(const char *name, int *fd_out)
{
    char dir[INST_PATH_MAX], path[INST_PATH_MAX];
    int rc = inst_dir_ensure(name, dir, sizeof dir);
    if (rc || (rc = inst_path(name, INST_PID_FILE, path, sizeof path)))
        return rc;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return pi_fail(errno, "cannot open '%s': %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        rc = errno == EWOULDBLOCK ? pi_fail(EBUSY, "instance '%s' is already running (supervisor pid %d)", name,
                                            (int)inst_read_pid(name))
                                  : pi_fail(errno, "cannot lock '%s': %s", path, strerror(errno));
        close(fd);
        return rc;
    }
    /* We hold the lock, so no supervisor of this name runs: a pid left in the file is a dead one's
     * (kill -9 leaves it). Empty it now, or 'pictl start' would read and report that pid before the
     * new supervisor writes its own. */
    if (ftruncate(fd, 0) != 0) {
        rc = pi_fail(errno, "cannot truncate '%s': %s", path, strerror(errno));
        close(fd);
        return rc;
    }
    *fd_out = fd;
    return 0;
}

void inst_remove_dir(const char *name)
{
    char logs[INST_PATH_MAX], dir[INST_PATH_MAX], path[INST_PATH_MAX * 2];
    if (inst_dir(name, dir, sizeof dir) || inst_path(name, INST_LOG_DIR, logs, sizeof logs))
        return;
    DIR *d = opendir(logs);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            snprintf(path, sizeof path, "%s/%s", logs, e->d_name);
            unlink(path);
        }
        closedir(d);
        rmdir(logs);
    }
    inst_cleanup(name);
    if (inst_path(name, INST_PID_FILE, path, sizeof path) == 0)
        unlink(path);
    if (inst_path(name, INST_APID_CONFIG, path, sizeof path) == 0)
        unlink(path);
    rmdir(dir);
}

int inst_attach_ctl(const char *name, struct shm_seg *seg, const struct pi_ctl **ctl)
{
    int rc = shm_attach(seg, name, INST_SEG_CTL, PI_SEG_KIND_CTL, SHM_ATTACH_RDONLY);
    if (rc)
        return rc;
    const struct pi_seg_header *h = seg->hdr;
    const void *p = h->n_offsets >= 1 && h->offsets[0] % alignof(struct pi_ctl) == 0
                        ? shm_at(seg, h->offsets[0], sizeof(struct pi_ctl))
                        : NULL;
    if (!p) {
        rc = pi_fail(PI_E_FORMAT, "segment %s: offsets[0] does not locate a struct pi_ctl (%zu bytes) inside %zu bytes",
                     seg->name, sizeof(struct pi_ctl), seg->size);
        shm_detach(seg);
        return rc;
    }
    *ctl = p;
    return 0;
}

static int set_opt(int s, int level, int opt, int val, const char *what)
{
    if (nn_setsockopt(s, level, opt, &val, sizeof val) < 0)
        return pi_fail(PI_E_IO, "nanomsg: set %s: %s", what, nn_strerror(nn_errno()));
    return 0;
}

int inst_request(const char *name, json_t *req, int timeout_ms, json_t **reply)
{
    char sock_path[INST_PATH_MAX], url[INST_PATH_MAX + 8];
    int rc = inst_path(name, INST_SOCK_FILE, sock_path, sizeof sock_path);
    if (rc)
        return rc;
    *reply = NULL;
    if (access(sock_path, F_OK) != 0)
        return pi_fail(ENOENT, "instance '%s' is not running (no %s)", name, sock_path);
    /* a dead supervisor's socket file would only make us wait for the timeout */
    pid_t pid = inst_read_pid(name);
    if (pid > 0 && !inst_pid_alive(pid))
        return pi_fail(ESRCH, "instance '%s' is dead (supervisor pid %d is gone; 'pictl stop --name %s' cleans up)",
                       name, (int)pid, name);
    snprintf(url, sizeof url, "ipc://%s", sock_path);
    char *text = json_dumps(req, JSON_COMPACT);
    if (!text)
        return pi_fail(PI_E_NOMEM, "cannot encode the request");
    void *msg = NULL;
    int s = nn_socket(AF_SP, NN_REQ);
    if (s < 0) {
        rc = pi_fail(PI_E_IO, "nanomsg: socket: %s", nn_strerror(nn_errno()));
        goto out;
    }
    if ((rc = set_opt(s, NN_SOL_SOCKET, NN_RCVMAXSIZE, -1, "NN_RCVMAXSIZE")) ||
        (rc = set_opt(s, NN_SOL_SOCKET, NN_RECONNECT_IVL, CLIENT_RECONNECT_MS, "NN_RECONNECT_IVL")) ||
        (rc = set_opt(s, NN_SOL_SOCKET, NN_SNDTIMEO, timeout_ms, "NN_SNDTIMEO")) ||
        (rc = set_opt(s, NN_SOL_SOCKET, NN_RCVTIMEO, timeout_ms, "NN_RCVTIMEO")) ||
        (rc = set_opt(s, NN_REQ, NN_REQ_RESEND_IVL, CLIENT_RESEND_MS, "NN_REQ_RESEND_IVL")))
        goto out;
    if (nn_connect(s, url) < 0) {
        rc = pi_fail(PI_E_IO, "nanomsg: connect %s: %s", url, nn_strerror(nn_errno()));
        goto out;
    }
    if (nn_send(s, text, strlen(text), 0) < 0) {
        rc = pi_fail(PI_E_IO, "instance '%s': send: %s", name, nn_strerror(nn_errno()));
        goto out;
    }
    int n = nn_recv(s, &msg, NN_MSG, 0);
    if (n < 0) {
        int e = nn_errno();
        rc = e == ETIMEDOUT ? pi_fail(ETIMEDOUT, "instance '%s' did not answer within %d ms", name, timeout_ms)
                            : pi_fail(PI_E_IO, "instance '%s': receive: %s", name, nn_strerror(e));
        msg = NULL;
        goto out;
    }
    json_error_t jerr;
    *reply = json_loadb(msg, (size_t)n, 0, &jerr);
    if (!*reply || !json_is_object(*reply)) {
        json_decref(*reply);
        *reply = NULL;
        rc = pi_fail(PI_E_FORMAT, "instance '%s' sent an invalid reply: %s", name, jerr.text);
    }
out:
    if (msg)
        nn_freemsg(msg);
    if (s >= 0)
        nn_close(s);
    free(text);
    return rc;
}

int inst_command(const char *name, json_t *req, int timeout_ms, json_t **reply)
{
    int rc = inst_request(name, req, timeout_ms, reply);
    if (rc)
        return rc;
    if (!json_is_true(json_object_get(*reply, "ok"))) {
        const char *e = json_string_value(json_object_get(*reply, "error"));
        rc = pi_fail(PI_E_INVAL, "%s", e ? e : "the supervisor refused the command");
        json_decref(*reply);
        *reply = NULL;
    }
    return rc;
}

int inst_stage_exe(const char *stage, char *buf, size_t cap)
{
    const char *env = getenv("PINFER_STAGE_DIR");
    if (env && env[0]) {
        if (snprintf(buf, cap, "%s/%s", env, stage) >= (int)cap)
            return pi_fail(PI_E_RANGE, "PINFER_STAGE_DIR is too long");
        return access(buf, X_OK) == 0 ? 0 : pi_fail(ENOENT, "stage executable '%s' not found (PINFER_STAGE_DIR)", buf);
    }
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return pi_fail(errno ? errno : ENOENT, "cannot find pictl's own path: %s", strerror(errno));
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash)
        *slash = '\0';
    /* installed: next to pictl */
    if (snprintf(buf, cap, "%s/%s", self, stage) < (int)cap && access(buf, X_OK) == 0)
        return 0;
    /* build tree: pictl is <builddir>/tools/pictl */
    if (snprintf(buf, cap, "%s/../%s/%s", self, stage, stage) < (int)cap && access(buf, X_OK) == 0)
        return 0;
    return pi_fail(ENOENT, "stage executable '%s' not found next to pictl (%s/%s) nor in the build tree (%s)", stage,
                   self, stage, buf);
}

const char *inst_state_name(unsigned s)
{
    static const char *const names[] = { "starting", "loading", "serving", "stopping", "failed" };
    return s < sizeof names / sizeof names[0] ? names[s] : "unknown";
}

const char *inst_stage_state_name(unsigned s)
{
    static const char *const names[] = { "down", "starting", "ready", "failed" };
    return s < sizeof names / sizeof names[0] ? names[s] : "unknown";
}

const char *inst_req_state_name(unsigned s)
{
    static const char *const names[] = { "free", "queued", "running", "done", "failed" };
    return s < sizeof names / sizeof names[0] ? names[s] : "unknown";
}

unsigned long long inst_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}
