/* pictl start — validate the model, take the instance lock, clean up a dead instance's leftovers,
 * fork the supervisor as a daemon and wait until it serves (or says why it could not). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h" /* enum be_cache_type */
#include "bundle.h"
#include "instance.h"
#include "model.h"
#include "pi_err.h"
#include "run_opts.h" /* run_opts_ngl_alias, run_opts_warn_ctx */
#include "pictl.h"
#include "supervisor.h"

#define START_TIMEOUT_MS 60000
#define START_FAIL_WAIT_MS 15000    /* after an error line: the supervisor's cleanup */
#define START_TICK_MS 100
#define PROGRESS_AFTER_MS 1000      /* show the load bar only for loads slower than this */
#define PROGRESS_WIDTH 30
#define DEFAULT_CTX 2048
#define READY_LINE_MAX (PI_MSG_MAX + 64)
#define MIB (1024.0 * 1024.0)
#define DAEMON_FD_MAX 1024          /* inherited descriptors closed at most (more is absurd) */

static void progress(const struct pi_ctl *ctl, bool *shown)
{
    unsigned long long done = atomic_load_explicit(&ctl->load_done_bytes, memory_order_relaxed);
    unsigned long long total = atomic_load_explicit(&ctl->load_total_bytes, memory_order_relaxed);
    if (!total)
        return;
    if (done > total)
        done = total;
    int fill = (int)(done * PROGRESS_WIDTH / total);
    char bar[PROGRESS_WIDTH + 1];
    for (int i = 0; i < PROGRESS_WIDTH; i++)
        bar[i] = i < fill ? '#' : '-';
    bar[PROGRESS_WIDTH] = '\0';
    fprintf(stderr, "\rloading [%s] %3d%%  %.0f/%.0f MiB ", bar, (int)(done * 100 / total), done / MIB, total / MIB);
    fflush(stderr);
    *shown = true;
}

/* Parent side: read the supervisor's verdict, showing load progress meanwhile. */
static int wait_ready(const struct start_opts *o, int fd, pid_t sup_pid)
{
    char line[READY_LINE_MAX];
    size_t n = 0;
    struct shm_seg seg = { .fd = -1 };
    const struct pi_ctl *ctl = NULL;
    const bool tty = isatty(STDERR_FILENO);
    bool shown = false, failing = false;
    const unsigned long long t0 = inst_now_ns();
    unsigned long long deadline = t0 + (unsigned long long)START_TIMEOUT_MS * 1000000ull;
    int rc = 0;
    for (;;) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        int pr = poll(&p, 1, START_TICK_MS);
        if (pr > 0) {
            ssize_t r = read(fd, line + n, sizeof line - 1 - n);
            if (r > 0) {
                n += (size_t)r;
                line[n] = '\0';
                if (!strncmp(line, "ok\n", 3))
                    break;
                failing = failing || strchr(line, '\n') || n == sizeof line - 1;
                if (failing)
                    deadline = inst_now_ns() + (unsigned long long)START_FAIL_WAIT_MS * 1000000ull;
                continue;
            }
            if (r < 0 && errno == EINTR)
                continue;
            /* EOF: the supervisor exited (after its cleanup, if it sent an error) */
            line[n] = '\0';
            char *nl = strchr(line, '\n');
            if (nl)
                *nl = '\0';
            rc = !strncmp(line, "error: ", 7) ? pi_fail(PI_E_START, "%s", line + 7)
                                               : pi_fail(PI_E_START, "the supervisor exited during the start (see "
                                                                  "'pictl logs supervisor --name %s')", o->name);
            goto out;
        }
        if (!ctl && inst_attach_ctl(o->name, &seg, &ctl) != 0)
            ctl = NULL;
        const unsigned long long now = inst_now_ns();
        if (ctl && tty && !failing && now - t0 > PROGRESS_AFTER_MS * 1000000ull &&
            atomic_load_explicit(&ctl->state, memory_order_relaxed) == PI_INST_LOADING)
            progress(ctl, &shown);
        if (now > deadline) {
            if (failing) {
                char *nl = strchr(line, '\n');
                if (nl)
                    *nl = '\0';
                rc = pi_fail(PI_E_START, "%s (and the supervisor did not exit)", line + (strncmp(line, "error: ", 7) ? 0 : 7));
            } else {
                kill(sup_pid, SIGTERM);
                rc = pi_fail(ETIMEDOUT, "instance '%s' did not start within %d s (stopping it; see 'pictl logs "
                             "supervisor --name %s')", o->name, START_TIMEOUT_MS / 1000, o->name);
            }
            goto out;
        }
    }
    if (shown)
        fprintf(stderr, "\r%*s\r", PROGRESS_WIDTH + 40, "");
    if (!o->quiet) {
        if (!ctl && inst_attach_ctl(o->name, &seg, &ctl) != 0)
            ctl = NULL;
        if (ctl) {
            double ms = atomic_load_explicit(&ctl->load_ns, memory_order_relaxed) / 1e6;
            double mib = atomic_load_explicit(&ctl->load_total_bytes, memory_order_relaxed) / MIB;
            /* the pid the supervisor wrote into its own segment: the pid file may still have been empty */
            printf("pinfer instance '%s' serving %s (supervisor pid %d): loaded %.1f MiB in %.1f ms (%.2f GiB/s, %s)\n",
                   o->name, ctl->model_path, (int)ctl->supervisor_pid, mib, ms, ms > 0 ? mib / 1024.0 / (ms / 1e3) : 0.0,
                   ctl->load_method[0] ? ctl->load_method : "?");
        } else {
            printf("pinfer instance '%s' serving (supervisor pid %d)\n", o->name, (int)sup_pid);
        }
        fflush(stdout);
    }
out:
    if (shown && rc)
        fputc('\n', stderr);
    shm_detach(&seg);
    return rc;
}

/* A daemon holding its caller's pipes open would keep the caller waiting for EOF forever: close
 * every descriptor but stdio, the lock and the ready pipe (the model's mapping needs no fd). */
static void close_inherited(int keep1, int keep2)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return;
    int self = dirfd(d);
    struct dirent *e;
    int fds[DAEMON_FD_MAX], n = 0;
    while ((e = readdir(d)) != NULL && n < DAEMON_FD_MAX) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] != '.' && fd > STDERR_FILENO && fd != self && fd != keep1 && fd != keep2)
            fds[n++] = fd;
    }
    closedir(d);
    for (int i = 0; i < n; i++)
        close(fds[i]);
}

/* Daemon side (grandchild): detach from the terminal and run the supervisor. Never returns. */
static void run_daemon(struct sup_config *cfg)
{
    char log_path[INST_PATH_MAX];
    int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    int log_fd = -1;
    if (inst_log_path(cfg->name, INST_SUPERVISOR_LOG, log_path, sizeof log_path) == 0)
        log_fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (null_fd >= 0)
        dup2(null_fd, STDIN_FILENO);
    dup2(log_fd >= 0 ? log_fd : null_fd, STDOUT_FILENO);
    dup2(log_fd >= 0 ? log_fd : null_fd, STDERR_FILENO);
    close_inherited(cfg->lock_fd, cfg->ready_fd);
    if (chdir("/") != 0) {
        /* keep the cwd: harmless, only a mount it pins */
    }
    int code = supervisor_run(cfg);
    fflush(NULL);
    _exit(code);
}

/* apid's settings (apid/apid.h reads them): written before the supervisor starts, removed when the
 * instance has no --http (a stale file of an earlier start must not apply). */
static int write_apid_config(const struct start_opts *o)
{
    char path[INST_PATH_MAX];
    int rc = inst_path(o->name, INST_APID_CONFIG, path, sizeof path);
    if (rc)
        return rc;
    if (!o->http)
        return unlink(path) == 0 || errno == ENOENT ? 0 : pi_fail(errno, "cannot remove '%s': %s", path, strerror(errno));
    json_t *j = json_pack("{s:s}", "listen", o->http);
    if (j && o->api_key)
        json_object_set_new(j, "api_key", json_string(o->api_key));
    if (j && o->chat_template)
        json_object_set_new(j, "chat_template", json_string(o->chat_template));
    char *text = j ? json_dumps(j, JSON_INDENT(1)) : NULL;
    json_decref(j);
    if (!text)
        return pi_fail(PI_E_NOMEM, "cannot encode %s (is --api-key valid UTF-8?)", path);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    size_t len = strlen(text);
    rc = fd < 0 || write(fd, text, len) != (ssize_t)len ? pi_fail(errno, "cannot write '%s': %s", path, strerror(errno)) : 0;
    if (fd >= 0)
        close(fd);
    free(text);
    return rc;
}

/* --ram-budget: cpud reads the FFN rows beyond the budget from MODEL.ffnbundle. Checked against the
 * model before anything exists, as the in-process run does: without it cpud cannot start (and with the
 * weights segment trimmed of its FFN rows, no step could end). */
static int check_bundle(const char *model_path, const struct pi_model *m)
{
    char path[PATH_MAX];
    struct bundle_hdr h;
    bool direct = false;
    int fd = -1;
    int rc = bundle_default_path(model_path, path, sizeof path);
    if (!rc)
        rc = bundle_open(path, m, false, &fd, &direct, &h);
    if (fd >= 0)
        close(fd);
    return rc;
}

int inst_start(const struct start_opts *o)
{
    struct pi_model *m = NULL;
    int lock_fd = -1, pipefd[2] = { -1, -1 };
    int rc = inst_check_name(o->name);
    if (rc)
        return rc;
    if (o->n_ctx != 0 && (o->n_ctx < 8 || o->n_ctx >= PI_REQ_MAX_TOKENS))
        return pi_fail(PI_E_RANGE, "context %d out of range: a pipeline instance holds 8 to %d tokens", o->n_ctx,
                       PI_REQ_MAX_TOKENS - 1);
    if (!(o->gpu_ffn_share >= 0.0f && o->gpu_ffn_share <= 1.0f))
        return pi_fail(PI_E_RANGE, "--gpu-ffn-share %g is not in [0, 1]", (double)o->gpu_ffn_share);
    if (o->backend && strcmp(o->backend, "cpu") && strcmp(o->backend, "auto") && !be_find(o->backend))
        return pi_fail(PI_E_UNSUPPORTED, "backend '%s' is not built in (built: cpu)", o->backend);
    if (o->n_parallel < 0 || o->n_parallel > PI_MAX_REQUESTS)
        return pi_fail(PI_E_RANGE, "--parallel %d is not in [1, %d]", o->n_parallel, PI_MAX_REQUESTS);
    /* fail fast, with the reader's message, before anything exists */
    if ((rc = model_load(&m, o->model)))
        return rc;
    const int32_t n_ctx = o->n_ctx ? o->n_ctx : m->hp.n_ctx_train; /* -c 0: the model's */
    if (o->n_ctx_given)
        run_opts_warn_ctx(o->quiet ? "pictl run" : "pictl start", n_ctx, m->hp.n_ctx_train);
    if (n_ctx < 8 || n_ctx >= PI_REQ_MAX_TOKENS) {
        rc = pi_fail(PI_E_RANGE, "the model's context %d (-c 0) is out of range: a pipeline instance holds 8 to %d "
                     "tokens (give -c)", n_ctx, PI_REQ_MAX_TOKENS - 1);
        model_free(m);
        return rc;
    }
    struct sup_config cfg = { .model = m, .n_threads = o->n_threads, .n_ctx = n_ctx, .n_parallel = o->n_parallel,
                              .cache_type = o->cache_type,
                              .gpu_ffn_share = o->ram_budget_gib > 0 && o->vram_budget_gib < 0 ? 0.0f : o->gpu_ffn_share,
                              .ram_budget = o->ram_budget_gib > 0 ? (uint64_t)(o->ram_budget_gib * (1ull << 30)) : 0,
                              .vram_budget = o->vram_budget_gib < 0 ? -1 : (int64_t)(o->vram_budget_gib * (1ull << 30)),
                              .n_gpu_layers = o->n_gpu_layers,
                              .reset_gpu_index = o->reset_gpu_index, .disable_gpu_index = o->disable_gpu_index,
                              .audit_rate = o->audit_rate, .predict_in = o->predict_in, .owner_pid = o->owner_pid, .ready_fd = -1,
                              .http = o->http != NULL };
    snprintf(cfg.name, sizeof cfg.name, "%s", o->name);
    snprintf(cfg.backend, sizeof cfg.backend, "%s", o->backend ? o->backend : "auto");
    char abs_path[PATH_MAX];
    if (!realpath(o->model, abs_path)) {
        rc = pi_fail(errno, "cannot resolve '%s': %s", o->model, strerror(errno));
        goto out;
    }
    if (strlen(abs_path) >= sizeof cfg.model_path) {
        rc = pi_fail(PI_E_RANGE, "model path '%s' is longer than %d bytes", abs_path, PI_PATH_MAX - 1);
        goto out;
    }
    snprintf(cfg.model_path, sizeof cfg.model_path, "%s", abs_path);
    if (cfg.ram_budget && (rc = check_bundle(cfg.model_path, m)))
        goto out;
    if ((rc = inst_lock(o->name, &lock_fd)))
        goto out;
    cfg.lock_fd = lock_fd;
    /* we hold the lock: no supervisor of this name runs, whatever is left is a dead one's */
    if ((rc = inst_cleanup(o->name)) < 0 || (rc = write_apid_config(o)) < 0)
        goto out;
    rc = 0;
    if (o->foreground) {
        rc = supervisor_run(&cfg) ? pi_fail(PI_E_IO, "the instance failed (see the log above)") : 0;
        goto out;
    }
    if (pipe2(pipefd, O_CLOEXEC) != 0) {
        rc = pi_fail(errno, "pipe: %s", strerror(errno));
        goto out;
    }
    fflush(NULL);
    pid_t child = fork();
    if (child < 0) {
        rc = pi_fail(errno, "fork: %s", strerror(errno));
        goto out;
    }
    if (child == 0) {
        /* double fork: the daemon is not our child (no zombie for the caller) nor a session leader
         * (it can never reacquire a controlling terminal) */
        close(pipefd[0]);
        setsid();
        pid_t gc = fork();
        if (gc == 0) {
            cfg.ready_fd = pipefd[1];
            run_daemon(&cfg);
        }
        _exit(gc < 0 ? 1 : 0);
    }
    close(pipefd[1]);
    pipefd[1] = -1;
    int status;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    /* the daemon keeps the lock through its inherited descriptor; ours can go */
    close(lock_fd);
    lock_fd = -1;
    pid_t sup_pid = 0;
    for (int i = 0; i < 50 && !(sup_pid = inst_read_pid(o->name)); i++)
        usleep(1000); /* the daemon writes its pid first thing; only a timeout kill needs it */
    rc = wait_ready(o, pipefd[0], sup_pid);
out:
    if (pipefd[0] >= 0)
        close(pipefd[0]);
    if (pipefd[1] >= 0)
        close(pipefd[1]);
    if (lock_fd >= 0) {
        char path[INST_PATH_MAX];
        if (rc && inst_path(o->name, INST_PID_FILE, path, sizeof path) == 0)
            unlink(path); /* nothing started: leave no pid file */
        close(lock_fd);
    }
    model_free(m);
    return rc;
}

enum { OPT_NAME = 1000, OPT_PARALLEL, OPT_CACHE_TYPE, OPT_BACKEND, OPT_GPU_SHARE, OPT_FOREGROUND, OPT_VRAM, OPT_RESET_IDX, OPT_DISABLE_IDX, OPT_AUDIT, OPT_PREDICT_IN, OPT_HTTP, OPT_NGL,
       OPT_RAM, OPT_API_KEY, OPT_API_KEY_FILE, OPT_CHAT_TEMPLATE };

static const struct option start_long[] = {
    { "model", required_argument, NULL, 'm' },
    { "name", required_argument, NULL, OPT_NAME },
    { "threads", required_argument, NULL, 't' },
    { "ctx-size", required_argument, NULL, 'c' },
    { "gpu-ffn-share", required_argument, NULL, OPT_GPU_SHARE },
    { "parallel", required_argument, NULL, OPT_PARALLEL },
    { "cache-type", required_argument, NULL, OPT_CACHE_TYPE },
    { "backend", required_argument, NULL, OPT_BACKEND },
    { "foreground", no_argument, NULL, OPT_FOREGROUND },
    { "vram-budget", required_argument, NULL, OPT_VRAM },
    { "n-gpu-layers", required_argument, NULL, OPT_NGL },
    { "reset-gpu-index", no_argument, NULL, OPT_RESET_IDX },
    { "disable-gpu-index", no_argument, NULL, OPT_DISABLE_IDX },
    { "audit-rate", required_argument, NULL, OPT_AUDIT },
    { "predict-in", required_argument, NULL, OPT_PREDICT_IN },
    { "http", required_argument, NULL, OPT_HTTP },
    { "ram-budget", required_argument, NULL, OPT_RAM },
    { "api-key", required_argument, NULL, OPT_API_KEY },
    { "api-key-file", required_argument, NULL, OPT_API_KEY_FILE },
    { "chat-template", required_argument, NULL, OPT_CHAT_TEMPLATE },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
};

static void start_usage(void)
{
    printf("usage: pictl start -m MODEL [options]\n"
           "  -m, --model FILE         GGUF model\n"
           "  --name NAME              instance name, [A-Za-z0-9_]{1,31} (default %s)\n"
           "  -t, --threads N          cpud worker threads (default: online cores)\n"
           "  -c, --ctx-size N         context of one sequence (default %d, at most %d; 0: the model's\n"
           "                           trained context); the KV cache holds -c x --parallel cells\n"
           "  --parallel N             sequences decoded at once, in one batch (default %d, at most %d);\n"
           "                           further requests wait queued in order\n"
           "  --cache-type f32|f16     KV cache element type (default f32 on the CPU, f16 on a GPU)\n"
           "  --backend cpu|cuda|auto  gpud's device (default auto: cuda when a GPU is present; gpud's log\n"
           "                           says why not)\n"
           "  --gpu-ffn-share F        fraction of FFN neurons gpud computes (default %.1f: see docs/ARCHITECTURE.md)\n"
           "  --vram-budget GIB        choose gpud's hot neurons with the split solver for this budget\n"
           "                           (PowerInfer's MODEL.generated.gpuidx, regenerated when it does not match)\n"
           "  -ngl, --n-gpu-layers N   dense partial offload (llama.cpp): the first N whole layers on the GPU,\n"
           "                           the rest on the CPU in gpud\n"
           "  --reset-gpu-index        regenerate the gpuidx even if it matches\n"
           "  --ram-budget GIB         host memory for weights + neuron cache: cpud reads the FFN neurons\n"
           "                           that do not fit from MODEL.ffnbundle (pictl bundle)\n"
           "  --disable-gpu-index      no FFN split: cpud computes every neuron\n"
           "  --audit-rate P           fraction of tokens whose predictions are checked densely (default 0)\n"
           "  --predict-in gpud|predictord  where the CPU backend's masks are computed (default gpud: a\n"
           "                           round trip to predictord per layer costs more than the predictor)\n"
           "  --foreground             run the supervisor in this process (logs to stderr)\n"
           "  --http HOST:PORT         serve the OpenAI-compatible HTTP API (apid) there, e.g. 127.0.0.1:8080\n"
           "  --api-key KEY            with --http: require 'Authorization: Bearer KEY' (not on /health)\n"
           "  --api-key-file FILE      the same, the key read from FILE (first line)\n"
           "  --chat-template NAME     with --http: chatml, llama2, llama3, mistral, zephyr, gemma, phi3\n"
           "                           (default: recognised from the model's tokenizer.chat_template)\n",
           INST_DEFAULT_NAME, DEFAULT_CTX, PI_REQ_MAX_TOKENS - 1, SUP_DEFAULT_PARALLEL, PI_MAX_REQUESTS,
           (double)SUP_DEFAULT_GPU_FFN_SHARE);
}

static int parse_int(const char *flag, const char *s, long lo, long hi, int32_t *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) {
        fprintf(stderr, "pictl start: %s expects an integer in [%ld, %ld], got '%s'\n", flag, lo, hi, s);
        return -1;
    }
    *out = (int32_t)v;
    return 0;
}

/* First line of FILE, without its newline; an empty key is refused (it would match nothing). */
static int read_key_file(const char *path, char *key, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f || !fgets(key, (int)cap, f)) {
        fprintf(stderr, "pictl start: cannot read --api-key-file '%s'%s%s\n", path, f ? "" : ": ", f ? "" : strerror(errno));
        if (f)
            fclose(f);
        return -1;
    }
    fclose(f);
    key[strcspn(key, "\r\n")] = '\0';
    if (!key[0]) {
        fprintf(stderr, "pictl start: --api-key-file '%s' holds an empty key\n", path);
        return -1;
    }
    return 0;
}

int cmd_start(int argc, char **argv)
{
    static char key[512];
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    struct start_opts o = { .name = INST_DEFAULT_NAME, .n_threads = ncpu > 0 ? (int32_t)ncpu : 1,
                            .n_ctx = DEFAULT_CTX, .gpu_ffn_share = SUP_DEFAULT_GPU_FFN_SHARE, .vram_budget_gib = -1.0, .cache_type = -1,
                            .n_gpu_layers = -1 };
    int c;
    optind = 1;
    run_opts_ngl_alias(argc, argv);
    while ((c = getopt_long(argc, argv, "m:t:c:h", start_long, NULL)) != -1) {
        char *end;
        switch (c) {
        case 'm': o.model = optarg; break;
        case OPT_NAME: o.name = optarg; break;
        case 't': if (parse_int("-t", optarg, 1, 1024, &o.n_threads)) return 2; break;
        case 'c': /* 0: the model's trained context (inst_start) */
            if (!strcmp(optarg, "0"))
                o.n_ctx = 0;
            else if (parse_int("-c (0: the model's context)", optarg, 8, PI_REQ_MAX_TOKENS - 1, &o.n_ctx))
                return 2;
            else
                o.n_ctx_given = true;
            break;
        case OPT_GPU_SHARE:
            o.gpu_ffn_share = strtof(optarg, &end);
            if (*end || end == optarg || !(o.gpu_ffn_share >= 0.0f && o.gpu_ffn_share <= 1.0f)) {
                fprintf(stderr, "pictl start: --gpu-ffn-share expects a number in [0, 1], got '%s'\n", optarg);
                return 2;
            }
            break;
        case OPT_BACKEND:
            if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda") && strcmp(optarg, "auto")) {
                fprintf(stderr, "pictl start: --backend expects cpu, cuda or auto, got '%s'\n", optarg);
                return 2;
            }
            o.backend = optarg;
            break;
        case OPT_CACHE_TYPE:
            if (strcmp(optarg, "f32") && strcmp(optarg, "f16")) {
                fprintf(stderr, "pictl start: --cache-type expects f32 or f16, got '%s'\n", optarg);
                return 2;
            }
            o.cache_type = optarg[1] == '1' ? BE_CACHE_F16 : BE_CACHE_F32;
            break;
        case OPT_PARALLEL: if (parse_int("--parallel", optarg, 1, PI_MAX_REQUESTS, &o.n_parallel)) return 2; break;
        case OPT_FOREGROUND: o.foreground = true; break;
        case OPT_VRAM:
            o.vram_budget_gib = strtod(optarg, &end);
            if (*end || end == optarg || !(o.vram_budget_gib >= 0.0 && o.vram_budget_gib < 1e6)) {
                fprintf(stderr, "pictl start: --vram-budget expects GiB >= 0, got '%s'\n", optarg);
                return 2;
            }
            break;
        case OPT_RAM:
            o.ram_budget_gib = strtod(optarg, &end);
            if (*end || end == optarg || !(o.ram_budget_gib > 0.0 && o.ram_budget_gib < 1e6)) {
                fprintf(stderr, "pictl start: --ram-budget expects GiB > 0, got '%s'\n", optarg);
                return 2;
            }
            break;
        case OPT_NGL: if (parse_int("--n-gpu-layers", optarg, 0, 1 << 20, &o.n_gpu_layers)) return 2; break;
        case OPT_RESET_IDX: o.reset_gpu_index = true; break;
        case OPT_DISABLE_IDX: o.disable_gpu_index = true; break;
        case OPT_AUDIT:
            o.audit_rate = strtof(optarg, &end);
            if (*end || end == optarg || !(o.audit_rate >= 0.0f && o.audit_rate <= 1.0f)) {
                fprintf(stderr, "pictl start: --audit-rate expects a number in [0, 1], got '%s'\n", optarg);
                return 2;
            }
            break;
        case OPT_PREDICT_IN:
            if ((o.predict_in = predict_in_parse(optarg)) < 0) {
                fprintf(stderr, "pictl start: --predict-in expects gpud or predictord, got '%s'\n", optarg);
                return 2;
            }
            break;
        case OPT_HTTP:
            if (!strchr(optarg, ':')) {
                fprintf(stderr, "pictl start: --http expects HOST:PORT (e.g. 127.0.0.1:8080), got '%s'\n", optarg);
                return 2;
            }
            o.http = optarg;
            break;
        case OPT_API_KEY: o.api_key = optarg; break;
        case OPT_API_KEY_FILE:
            if (read_key_file(optarg, key, sizeof key))
                return 2;
            o.api_key = key;
            break;
        case OPT_CHAT_TEMPLATE: o.chat_template = optarg; break;
        case 'h': start_usage(); return 0;
        default: fprintf(stderr, "pictl start: see --help\n"); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "pictl start: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!o.model) {
        fprintf(stderr, "pictl start: -m MODEL is required\n");
        return 2;
    }
    if (!o.http && (o.api_key || o.chat_template)) {
        fprintf(stderr, "pictl start: --api-key and --chat-template need --http\n");
        return 2;
    }
    int rc = inst_start(&o);
    if (rc)
        return pictl_error("start", o.name, rc);
    return 0;
}
