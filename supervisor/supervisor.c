/* supervisor.c — segments, stage processes, restarts and the main loop (see supervisor.h). */
#include "supervisor.h"

#include <errno.h>
#include <fcntl.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "act.h"
#include "gguf.h"
#include "backend.h"
#include "gpuidx.h"
#include "split.h"
#include "vram_nvml.h"
#include "vram_plan.h"
#include "load.h"
#include "serve.h"
#include "model.h"
#include "pi_err.h"
#include "stage.h"
#include "sup_internal.h"

#define SUP_POLL_MS 50                /* socket receive timeout = the loop's tick */
#define SUP_SEND_TIMEOUT_MS 1000      /* a client that vanished must not block us */
#define SUP_BACKOFF_FIRST_MS 100      /* second restart in a row waits this long, then doubles */
#define SUP_BACKOFF_MAX_MS 5000
#define SUP_BACKOFF_RESET_MS 30000    /* uptime after which a death counts as the first again */
#define SUP_GIVEUP_WINDOW_MS 60000
#define SUP_TERM_GRACE_MS 5000        /* SIGTERM → SIGKILL */
#define SUP_SWEEP_MS 500              /* owner and orphaned-slot checks */
#define SUP_CTL_ALIGN 4096            /* struct pi_ctl starts on its own page */
#define SUP_REPLY_FLUSH_MS 50         /* let nanomsg's worker send the stop reply before close */
#define SUP_CHILD_FD_SCAN 4096       /* descriptors closed one by one where close_range is missing */
#define MS 1000000ull                 /* ns per ms */

/* Start order of the data-plane stages once the weights are READY. */
static const enum pi_stage data_stages[] = { PI_STAGE_PREDICTORD, PI_STAGE_CPUD, PI_STAGE_GPUD };

static volatile sig_atomic_t got_stop_signal;

static void on_stop_signal(int sig)
{
    (void)sig;
    got_stop_signal = 1;
}

static uint64_t now_ns(void) { return inst_now_ns(); }

void sup_log(const char *fmt, ...)
{
    char ts[32];
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S", &tm);
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s supervisor[%d]: ", ts, (int)getpid());
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    fflush(stderr);
    va_end(ap);
}

static void set_state(struct sup *s, enum pi_instance_state st)
{
    /* release: readers that see the new state also see ctl.error written before it */
    atomic_store_explicit(&s->ctl->state, st, memory_order_release);
}

static unsigned inst_state(const struct sup *s)
{
    return atomic_load_explicit(&s->ctl->state, memory_order_relaxed);
}

static struct pi_stage_info *info(struct sup *s, enum pi_stage id) { return &s->ctl->stages[id]; }

static bool stage_required(const struct sup *s, enum pi_stage id)
{
    if (id == PI_STAGE_GPUD)
        return true;
    if (id == PI_STAGE_LOADERD)
        return atomic_load_explicit(&s->winfo->state, memory_order_acquire) != PI_WEIGHTS_READY;
    /* with the weights segment trimmed of its FFN rows (--ram-budget), only cpud can compute them:
     * gpud waits for it, so an instance without cpud would take requests and never finish them */
    if (id == PI_STAGE_CPUD)
        return atomic_load_explicit(&s->ctl->weights_trimmed, memory_order_acquire) != 0;
    /* apid (--http): an apid that cannot start (its address in use, not this machine's) fails the
     * start — the user asked for the HTTP API; once the instance serves, it is optional */
    if (id == PI_STAGE_APID)
        return !s->served;
    return false;
}

/* Tell the starting client how the start ended. "ok" closes the pipe; an error leaves it open until
 * this process exits, so that the client, which waits for EOF, returns only after the cleanup. */
static void notify_ready(struct sup *s, const char *line)
{
    int fd = s->ready_fd;
    if (fd < 0)
        return;
    /* best effort: the starting client may have gone away (EPIPE is ignored, SIGPIPE too) */
    ssize_t w = write(fd, line, strlen(line));
    (void)w;
    if (!strncmp(line, "ok", 2))
        close(fd);
    s->ready_fd = -1;
}

static void set_error(struct sup *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_error(struct sup *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->ctl->error, sizeof s->ctl->error, fmt, ap);
    va_end(ap);
    sup_log("error: %s", s->ctl->error);
}

/* ---- segments ---- */

#define GIB(x) ((double)(x) / (double)(1ull << 30))

static int create_ctl(struct sup *s)
{
    const struct sup_config *c = s->cfg;
    const size_t off = SUP_CTL_ALIGN;
    static_assert(sizeof(struct pi_seg_header) <= SUP_CTL_ALIGN, "ctl header fits before the first page");
    int rc = shm_create(&s->ctl_seg, c->name, INST_SEG_CTL, PI_SEG_KIND_CTL, off + sizeof(struct pi_ctl));
    if (rc)
        return rc;
    s->ctl_seg.hdr->n_offsets = 1;
    s->ctl_seg.hdr->offsets[0] = off;
    s->ctl = shm_at(&s->ctl_seg, off, sizeof *s->ctl);
    struct pi_ctl *ctl = s->ctl;
    snprintf(ctl->instance, sizeof ctl->instance, "%s", c->name);
    snprintf(ctl->model_path, sizeof ctl->model_path, "%s", c->model_path);
    ctl->n_threads = c->n_threads;
    ctl->n_ctx = c->n_ctx;
    ctl->n_parallel = c->n_parallel > 0 ? c->n_parallel : SUP_DEFAULT_PARALLEL;
    ctl->cache_type = c->cache_type;
    snprintf(ctl->backend, sizeof ctl->backend, "%s", c->backend[0] ? c->backend : "auto");
    ctl->gpu_ffn_share = c->gpu_ffn_share;
    ctl->ram_budget = c->ram_budget;
    ctl->vram_budget = -1;
    ctl->hot_coverage = -1;
    ctl->n_gpu_layers = c->n_gpu_layers;
    /* Divide -t between gpud and cpud when both compute FFN shares at once (see pi_ctl); when one
     * side has all neurons the two run one after the other and each may use every thread. */
    ctl->gpud_threads = ctl->cpud_threads = c->n_threads;
    if (c->vram_budget < 0 && !c->disable_gpu_index && c->gpu_ffn_share > 0.0f && c->gpu_ffn_share < 1.0f &&
        c->n_threads >= 2) {
        int32_t g = (int32_t)((float)c->n_threads * c->gpu_ffn_share + 0.5f);
        g = g < 1 ? 1 : g > c->n_threads - 1 ? c->n_threads - 1 : g;
        ctl->gpud_threads = g;
        ctl->cpud_threads = c->n_threads - g;
    }
    ctl->audit_rate = c->audit_rate;
    ctl->predict_in = c->predict_in;
    ctl->n_layer = c->model->hp.n_layer;
    ctl->n_embd = c->model->hp.n_embd;
    ctl->n_ff = c->model->hp.n_ff;
    ctl->n_vocab = c->model->hp.n_vocab;
    ctl->supervisor_pid = (uint64_t)getpid();
    atomic_store_explicit(&ctl->state, PI_INST_STARTING, memory_order_relaxed);
    shm_publish(&s->ctl_seg);
    return 0;
}

/* --ram-budget with every FFN neuron on cpud (no gpu_idx set: the CPU backend, or no VRAM budget):
 * no stage reads an FFN row from the weights image (cpud reads them through its neuron cache, gpud
 * waits for cpud), so the image's FFN pages need no memory. Decided here, before the weights segment
 * exists, from the hot set choose_hot_set placed in the act segment. */
static bool weights_trimmed(struct sup *s)
{
    if (!s->cfg->ram_budget)
        return false;
    struct act_view v;
    if (act_view_attach(&v, &s->act_seg))
        return false;
    const size_t n = (size_t)v.hdr->n_layer * (size_t)v.hdr->n_ff;
    for (size_t i = 0; i < n; i++)
        if (v.gpu_idx[i])
            return false;
    return true;
}

/* Allocate every page of the weights segment except the whole pages of the FFN tensors (the pages
 * loaderd's trimmed load neither reads nor writes): the segment's memory is the dense parts from
 * the start, never the file. Returns the bytes left unallocated in *holes. */
static int allocate_trimmed(struct sup *s, uint64_t file_size, uint64_t n_tensors, uint64_t *holes)
{
    uint64_t(*r)[2] = NULL;
    size_t n = 0;
    int rc = loader_skip_ranges(s->cfg->model_path, serve_is_ffn_tensor, &r, &n);
    if (rc)
        return rc;
    const uint64_t img = loader_weights_image_offset(file_size, n_tensors);
    uint64_t at = 0;
    *holes = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        /* sorted and disjoint (loader_skip_ranges); the image is page-aligned, so are the holes */
        rc = shm_allocate(&s->weights_seg, at, img + r[i][0] - at);
        at = img + r[i][1];
        *holes += r[i][1] - r[i][0];
    }
    if (!rc)
        rc = shm_allocate(&s->weights_seg, at, s->weights_seg.size - at);
    free(r);
    return rc;
}

static int create_weights(struct sup *s)
{
    uint64_t file_size, n_tensors;
    int rc = loader_probe_file(s->cfg->model_path, &file_size, &n_tensors);
    if (rc)
        return rc;
    size_t bytes = loader_weights_seg_bytes(file_size, n_tensors);
    if (!bytes)
        return pi_fail(PI_E_RANGE, "weights segment for %llu bytes and %llu tensors overflows",
                       (unsigned long long)file_size, (unsigned long long)n_tensors);
    const bool trim = weights_trimmed(s);
    uint64_t holes = 0;
    if (!trim)
        rc = shm_create(&s->weights_seg, s->cfg->name, LOADER_SEG_WEIGHTS, PI_SEG_KIND_WEIGHTS, bytes);
    else if ((rc = shm_create_lazy(&s->weights_seg, s->cfg->name, LOADER_SEG_WEIGHTS, PI_SEG_KIND_WEIGHTS, bytes)) ==
             0)
        rc = allocate_trimmed(s, file_size, n_tensors, &holes);
    if (rc)
        return rc;
    if ((rc = loader_weights_seg_init(&s->weights_seg, file_size, n_tensors)))
        return rc;
    if (trim) {
        /* before any stage starts: loaderd then skips the FFN pages, gpud and cpud never read them */
        atomic_store_explicit(&s->ctl->weights_trimmed, UINT64_MAX, memory_order_release);
        sup_log("--ram-budget: the weights segment holds the dense tensors only: %.3f of %.3f GiB allocated, the "
                "FFN rows' %.3f GiB left unallocated (cpud reads them from the bundle)",
                GIB(bytes - holes), GIB(bytes), GIB(holes));
    }
    s->winfo = shm_at(&s->weights_seg, s->weights_seg.hdr->offsets[0], sizeof *s->winfo);
    if (!s->winfo)
        return pi_fail(PI_E_FORMAT, "weights segment: info outside the segment");
    shm_publish(&s->weights_seg);
    return 0;
}

/* The CUDA backend's parameters the VRAM plan counts: -c cells for each of the --parallel
 * sequences, the act segment's batch, the cache type (f16 unless --cache-type f32). */
static struct vram_params plan_params(const struct sup_config *c)
{
    /* the driver's reserve when gpud will find a GPU (NVML sees one and the CUDA backend is built) */
    uint64_t fr, tot;
    const bool gpu = strcmp(c->backend, "cpu") && be_find("cuda") && vram_nvml_mem(0, &fr, &tot) == 0;
    return (struct vram_params){ .n_ctx = c->n_ctx, .n_seq = c->n_parallel > 0 ? c->n_parallel : SUP_DEFAULT_PARALLEL,
                                 .n_batch = SUP_N_BATCH, .kv_f32 = c->cache_type == BE_CACHE_F32,
                                 .reserve = gpu ? VRAM_RESERVE : 0 };
}

/* No --vram-budget on a GPU: all free memory minus a margin (NVML, before gpud holds a context).
 * Returns the budget, or -1 when the whole model fits (or there is no GPU to ask). */
static int64_t default_budget(const struct sup_config *c, const struct vram_params *vp)
{
    uint64_t fr = 0, tot = 0;
    if (!strcmp(c->backend, "cpu") || vram_nvml_mem(0, &fr, &tot))
        return -1;
    struct vram_plan all;
    if (vram_plan_make(c->model, vp, NULL, &all))
        return -1;
    const uint64_t b = vram_default_budget(fr);
    if (all.total <= b)
        return -1;
    sup_log("no --vram-budget: the whole model needs %.2f GiB on the GPU, %.2f GiB are free: placing the hottest "
            "neurons in %.2f GiB (free minus %.2f GiB)",
            GIB(all.total), GIB(fr), GIB(b), GIB(VRAM_FREE_MARGIN));
    return (int64_t)b;
}

/* Whole-layer placement of the first n layers (-ngl, or the budget's fallback): gpud computes every
 * neuron (the first n layers on the GPU, the others on its host backend), cpud none. */
static int whole_layers(struct sup *s, const struct vram_params *vp, int32_t n, uint8_t *gpu_idx, const char *why)
{
    const struct sup_config *c = s->cfg;
    const int32_t L = c->model->hp.n_layer;
    n = n < L ? n : L;
    memset(gpu_idx, 1, (size_t)L * (size_t)c->model->hp.n_ff);
    struct vram_params w = *vp;
    w.whole_layers = true;
    w.n_gpu_layers = n;
    struct vram_plan pl;
    int rc = vram_plan_make(c->model, &w, NULL, &pl);
    if (rc)
        return rc;
    s->ctl->n_gpu_layers = n;
    s->ctl->vram_planned = n > 0 ? pl.total : 0;
    s->ctl->hot_neurons = pl.neurons;
    /* the activations the GPU's layers cover: their neurons' share of Σ act_freq */
    const size_t F = (size_t)c->model->hp.n_ff;
    uint8_t *on = calloc((size_t)L * F, 1);
    if (on) {
        memset(on, 1, (size_t)n * F);
        s->ctl->hot_coverage = split_coverage(c->model, on);
        free(on);
    }
    sup_log("%s: the first %d of %d layers whole on the GPU (plan %.3f GiB = weights %.3f + predictors %.3f + KV "
            "%.3f + scratch %.3f + reserve %.3f), the rest on the CPU in gpud",
            why, n, L, GIB(pl.total), GIB(pl.weights), GIB(pl.pred), GIB(pl.kv), GIB(pl.scratch), GIB(pl.reserve));
    return 0;
}

/* The per-layer split of FFN neurons between gpud (hot) and cpud: by default the first
 * gpu_ffn_share of each layer (act_seg_init); with a VRAM budget (or, on a GPU without one, the
 * free memory), PowerInfer's gpuidx next to the model (made by the split solver over the exact
 * VRAM plan, hottest neurons first, regenerated when it does not match the model or budget, or
 * when its plan exceeds the budget under this instance's context and sequences); --disable-gpu-index:
 * none on gpud. */
static int choose_hot_set(struct sup *s)
{
    const struct sup_config *c = s->cfg;
    struct act_view v;
    int rc = act_view_attach(&v, &s->act_seg);
    if (rc)
        return rc;
    const size_t n = (size_t)c->model->hp.n_layer * (size_t)c->model->hp.n_ff;
    if (c->disable_gpu_index) {
        memset(v.gpu_idx, 0, n);
        sup_log("gpu index disabled: every FFN neuron is computed by cpud");
        return 0;
    }
    const struct vram_params vp = plan_params(c);
    s->ctl->vram_budget = c->vram_budget;
    if (c->n_gpu_layers >= 0)
        return whole_layers(s, &vp, c->n_gpu_layers, v.gpu_idx, "-ngl");
    const int64_t budget = c->vram_budget >= 0 ? c->vram_budget : default_budget(c, &vp);
    if (budget < 0) {
        struct vram_plan pl;
        if (vram_plan_make(c->model, &vp, v.gpu_idx, &pl) == 0) {
            s->ctl->vram_planned = pl.total;
            s->ctl->hot_neurons = pl.neurons;
            s->ctl->hot_coverage = split_coverage(c->model, v.gpu_idx);
        }
        return 0;
    }
    const uint64_t fixed = split_fixed_bytes(c->model, &vp);
    if (fixed > (uint64_t)budget) {
        const int32_t N = vram_max_layers(c->model, &vp, (uint64_t)budget);
        sup_log("vram budget %.3f GiB: the parts every token needs on the GPU (attention, embeddings, output, "
                "predictors, KV cache for %d x %d cells, scratch, driver reserve) take %.3f GiB (%llu bytes): falling "
                "back to whole-layer placement (llama.cpp's -ngl): the first %d of %d layers on the GPU, the rest on "
                "the CPU",
                GIB(budget), vp.n_seq, vp.n_ctx, GIB(fixed), (unsigned long long)fixed, N, c->model->hp.n_layer);
        return whole_layers(s, &vp, N, v.gpu_idx, "fallback");
    }
    char path[PI_PATH_MAX], dir[INST_PATH_MAX];
    bool generated = false;
    if ((rc = inst_dir(c->name, dir, sizeof dir)))
        return rc;
    rc = gpuidx_load_or_make(c->model_path, dir, c->model, &vp, (uint64_t)budget, c->reset_gpu_index, v.gpu_idx,
                             path, sizeof path, &generated);
    struct vram_plan pl;
    if (!rc && (rc = vram_plan_make(c->model, &vp, v.gpu_idx, &pl)) == 0 && pl.total > (uint64_t)budget) {
        /* an index made for this budget under another context or sequence count */
        sup_log("gpu index %s: its plan needs %.3f GiB under -c %d x %d sequences: regenerated", path, GIB(pl.total),
                vp.n_ctx, vp.n_seq);
        rc = gpuidx_load_or_make(c->model_path, dir, c->model, &vp, (uint64_t)budget, true, v.gpu_idx, path,
                                 sizeof path, &generated);
        if (!rc)
            rc = vram_plan_make(c->model, &vp, v.gpu_idx, &pl);
    }
    if (rc)
        return rc;
    const double cov = split_coverage(c->model, v.gpu_idx);
    char covs[48] = "activation share unknown: no act_freq";
    if (cov >= 0)
        snprintf(covs, sizeof covs, "%.1f%% of activations", 100.0 * cov);
    s->ctl->vram_planned = pl.total;
    s->ctl->hot_neurons = pl.neurons;
    s->ctl->hot_coverage = cov;
    sup_log("gpu index %s (%s): %lld of %zu FFN neurons on gpud (%s) for a budget of %.3f GiB: "
            "plan %.3f GiB = weights %.3f + hot rows %.3f + predictors %.3f + KV %.3f + scratch %.3f + reserve %.3f",
            path, generated ? "generated" : "reused", (long long)pl.neurons, n, covs,
            GIB(budget), GIB(pl.total), GIB(pl.weights), GIB(pl.hot), GIB(pl.pred), GIB(pl.kv), GIB(pl.scratch),
            GIB(pl.reserve));
    return 0;
}

static int create_act(struct sup *s)
{
    const struct pi_hparams *hp = &s->cfg->model->hp;
    struct act_params p = { .n_layer = hp->n_layer, .n_embd = hp->n_embd, .n_ff = hp->n_ff,
                            .n_batch = SUP_N_BATCH, .gpu_ffn_share = s->cfg->gpu_ffn_share };
    size_t bytes = act_seg_bytes(&p);
    if (!bytes)
        return pi_fail(PI_E_INVAL, "act segment: invalid parameters (%s)", pi_errmsg());
    int rc = shm_create(&s->act_seg, s->cfg->name, INST_SEG_ACT, PI_SEG_KIND_ACT, bytes);
    if (rc || (rc = act_seg_init(&s->act_seg, &p)))
        return rc;
    if ((rc = choose_hot_set(s)))
        return rc;
    shm_publish(&s->act_seg);
    return 0;
}

static int open_socket(struct sup *s)
{
    char path[INST_PATH_MAX], url[INST_PATH_MAX + 8];
    int rc = inst_path(s->cfg->name, INST_SOCK_FILE, path, sizeof path);
    if (rc)
        return rc;
    unlink(path); /* a stale socket of a dead supervisor; we hold the instance lock */
    snprintf(url, sizeof url, "ipc://%s", path);
    int maxsize = -1, rcvtimeo = SUP_POLL_MS, sndtimeo = SUP_SEND_TIMEOUT_MS;
    s->sock = nn_socket(AF_SP, NN_REP);
    if (s->sock < 0)
        return pi_fail(PI_E_IO, "nanomsg: socket: %s", nn_strerror(nn_errno()));
    if (nn_setsockopt(s->sock, NN_SOL_SOCKET, NN_RCVMAXSIZE, &maxsize, sizeof maxsize) < 0 ||
        nn_setsockopt(s->sock, NN_SOL_SOCKET, NN_RCVTIMEO, &rcvtimeo, sizeof rcvtimeo) < 0 ||
        nn_setsockopt(s->sock, NN_SOL_SOCKET, NN_SNDTIMEO, &sndtimeo, sizeof sndtimeo) < 0)
        return pi_fail(PI_E_IO, "nanomsg: setsockopt: %s", nn_strerror(nn_errno()));
    if (nn_bind(s->sock, url) < 0)
        return pi_fail(PI_E_IO, "nanomsg: bind %s: %s", url, nn_strerror(nn_errno()));
    return 0;
}

static int write_pid(struct sup *s)
{
    char text[32];
    int n = snprintf(text, sizeof text, "%d\n", (int)getpid());
    if (ftruncate(s->cfg->lock_fd, 0) != 0 || pwrite(s->cfg->lock_fd, text, (size_t)n, 0) != n)
        return pi_fail(errno, "cannot write %s/%s: %s", s->dir, INST_PID_FILE, strerror(errno));
    return 0;
}

/* ---- stages ---- */

static void spawn(struct sup *s, enum pi_stage id)
{
    struct sup_stage *st = &s->st[id];
    struct pi_stage_info *in = info(s, id);
    const char *name = stage_name(id);
    char log_path[INST_PATH_MAX];
    st->next_spawn_ns = 0;
    st->kill_at_ns = 0;
    st->hung_killed = false;
    if (st->spawned_once)
        atomic_fetch_add_explicit(&in->restarts, 1, memory_order_relaxed);
    st->spawned_once = true;

    int log_fd = -1, null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (inst_log_path(s->cfg->name, name, log_path, sizeof log_path) == 0)
        log_fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (log_fd >= 0) {
        char stamp[128];
        time_t t = time(NULL);
        struct tm tm;
        localtime_r(&t, &tm);
        size_t n = strftime(stamp, sizeof stamp, "=== %Y-%m-%d %H:%M:%S ", &tm);
        n += (size_t)snprintf(stamp + n, sizeof stamp - n, "supervisor: starting %s (restart %u) ===\n", name,
                              atomic_load_explicit(&in->restarts, memory_order_relaxed));
        ssize_t w = write(log_fd, stamp, n);
        (void)w;
    }
    char *argv[] = { st->exe, "--instance", (char *)s->cfg->name, NULL };
    const pid_t self = getpid();
    /* STARTING before the child exists: the stage's own store of READY must come after ours */
    atomic_store_explicit(&in->state, PI_STAGE_STARTING, memory_order_relaxed);
    atomic_store_explicit(&in->started_ns, now_ns(), memory_order_relaxed);
    pid_t pid = fork();
    if (pid == 0) {
        /* child: only async-signal-safe calls until execv (nanomsg threads exist in the parent) */
        if (null_fd >= 0)
            dup2(null_fd, STDIN_FILENO);
        if (log_fd >= 0) {
            dup2(log_fd, STDOUT_FILENO);
            dup2(log_fd, STDERR_FILENO);
        }
        /* the stage must not outlive its supervisor: its segments' owner is gone, and nobody
         * would restart or stop it (SIGTERM: it stops like on `pictl stop`) */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != self)
            _exit(1); /* the supervisor died before prctl took effect */
        /* descriptors the stage has no business holding (nanomsg's, inherited ones) */
        if (close_range(STDERR_FILENO + 1, ~0u, 0) != 0)
            for (int fd = STDERR_FILENO + 1; fd < SUP_CHILD_FD_SCAN; fd++)
                close(fd);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = SIG_DFL;
        sigaction(SIGPIPE, &sa, NULL); /* ignored dispositions survive exec: restore */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execv(argv[0], argv);
        static const char msg[] = "supervisor: execv of the stage failed\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        _exit(127);
    }
    if (pid < 0) {
        sup_log("cannot fork %s: %s", name, strerror(errno));
        /* treat as an immediate death so that backoff and give-up apply */
        st->pid = 0;
        st->next_spawn_ns = now_ns() + SUP_BACKOFF_MAX_MS * MS;
    } else {
        st->pid = pid;
        atomic_store_explicit(&in->pid, pid, memory_order_relaxed);
        sup_log("started %s pid %d", name, (int)pid);
    }
    if (log_fd >= 0)
        close(log_fd);
    if (null_fd >= 0)
        close(null_fd);
}

static void describe_status(int status, char *buf, size_t cap)
{
    if (WIFEXITED(status))
        snprintf(buf, cap, "exit status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, cap, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(buf, cap, "wait status 0x%x", (unsigned)status);
}

/* how: the last death's wait status in words; at_once: the stage said its start cannot succeed
 * (STAGE_EXIT_CONFIG), so its own error is the whole story */
static void give_up(struct sup *s, enum pi_stage id, const char *how, bool at_once)
{
    struct sup_stage *st = &s->st[id];
    st->gave_up = true;
    st->next_spawn_ns = 0;
    atomic_store_explicit(&info(s, id)->state, PI_STAGE_FAILED, memory_order_relaxed);
    const bool required = stage_required(s, id);
    const char *last = info(s, id)->last_error;
    const int last_len = (int)sizeof info(s, id)->last_error;
    if (at_once)
        set_error(s, "%s cannot start: %.*s%s", stage_name(id), last_len, last[0] ? last : how,
                  required ? "" : "; continuing without it");
    else
        set_error(s, "%s died %d times within %d s (last: %s%s%.*s)%s", stage_name(id), SUP_GIVEUP_DEATHS,
                  SUP_GIVEUP_WINDOW_MS / 1000, how, last[0] ? ": " : "", last_len, last,
                  required ? "" : "; continuing without it");
    if (!required)
        return;
    if (!s->served) {
        s->stop = true;
        s->exit_code = 1;
        set_state(s, PI_INST_FAILED);
        return;
    }
    set_state(s, PI_INST_FAILED);
    sup_fail_requests(s, s->ctl->error); /* no request in flight can end without a required stage */
}

static void on_death(struct sup *s, enum pi_stage id, int status)
{
    struct sup_stage *st = &s->st[id];
    struct pi_stage_info *in = info(s, id);
    const uint64_t now = now_ns();
    const uint64_t started = atomic_load_explicit(&in->started_ns, memory_order_relaxed);
    char how[96];
    describe_status(status, how, sizeof how);
    st->pid = 0;
    st->kill_at_ns = 0;
    atomic_store_explicit(&in->pid, 0, memory_order_relaxed);
    atomic_store_explicit(&in->last_exit, status, memory_order_relaxed);
    atomic_store_explicit(&in->died_ns, now, memory_order_relaxed);
    atomic_store_explicit(&in->state, PI_STAGE_DOWN, memory_order_relaxed);
    sup_log("%s exited: %s", stage_name(id), how);
    if (s->stop || inst_state(s) == PI_INST_STOPPING)
        return;
    if (st->restart_requested) {
        st->restart_requested = false;
        spawn(s, id);
        return;
    }
    /* the loader gave up on the file: restarting it cannot help, advance() fails the start */
    if (id == PI_STAGE_LOADERD && atomic_load_explicit(&s->winfo->state, memory_order_acquire) == PI_WEIGHTS_FAILED)
        return;
    /* loaderd's job may be done once the image is READY: a clean exit then is not a death */
    if (id == PI_STAGE_LOADERD && WIFEXITED(status) && WEXITSTATUS(status) == 0 && !stage_required(s, id))
        return;
    /* the stage's start failed on the options or the model (a backend without its device, a tensor
     * type it lacks): a restart would fail the same way, so the start fails now. Once the instance has
     * served, the usual restarts apply (a device may come back). */
    if (!s->served && WIFEXITED(status) && WEXITSTATUS(status) == STAGE_EXIT_CONFIG) {
        give_up(s, id, how, true);
        return;
    }
    if (now - started >= SUP_BACKOFF_RESET_MS * MS)
        st->backoff_n = 0;
    st->deaths[st->n_deaths++ % SUP_GIVEUP_DEATHS] = now;
    unsigned recent = 0;
    for (unsigned i = 0; i < SUP_GIVEUP_DEATHS && i < st->n_deaths; i++)
        recent += now - st->deaths[i] <= SUP_GIVEUP_WINDOW_MS * MS;
    if (recent >= SUP_GIVEUP_DEATHS) {
        give_up(s, id, how, false);
        return;
    }
    uint64_t delay_ms = 0;
    if (st->backoff_n > 0) {
        delay_ms = SUP_BACKOFF_FIRST_MS;
        for (unsigned i = 1; i < st->backoff_n && delay_ms < SUP_BACKOFF_MAX_MS; i++)
            delay_ms *= 2;
        if (delay_ms > SUP_BACKOFF_MAX_MS)
            delay_ms = SUP_BACKOFF_MAX_MS;
    }
    st->backoff_n++;
    if (delay_ms == 0) {
        spawn(s, id);
    } else {
        st->next_spawn_ns = now + delay_ms * MS;
        sup_log("restarting %s in %llu ms", stage_name(id), (unsigned long long)delay_ms);
    }
}

static void reap(struct sup *s)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (int i = 0; i < PI_STAGE_COUNT; i++)
            if (s->st[i].pid == pid) {
                on_death(s, (enum pi_stage)i, status);
                break;
            }
    }
}

int sup_restart_stage(struct sup *s, enum pi_stage id)
{
    struct sup_stage *st = &s->st[id];
    if (inst_state(s) == PI_INST_STOPPING)
        return pi_fail(PI_E_INVAL, "the instance is stopping");
    if (!st->spawned_once)
        return pi_fail(PI_E_INVAL, "%s has not been started yet (the instance is %s)", stage_name(id),
                       inst_state_name(inst_state(s)));
    if (st->pid > 0) {
        if (st->restart_requested)
            return pi_fail(PI_E_INVAL, "%s is already restarting", stage_name(id));
        st->restart_requested = true;
        st->kill_at_ns = now_ns() + SUP_TERM_GRACE_MS * MS;
        kill(st->pid, SIGTERM);
        sup_log("restart of %s requested: SIGTERM to pid %d", stage_name(id), (int)st->pid);
        return 0;
    }
    /* down (waiting for its backoff, or given up): a manual restart starts afresh */
    st->gave_up = false;
    st->n_deaths = 0;
    st->backoff_n = 0;
    sup_log("restart of %s requested while down: starting it", stage_name(id));
    spawn(s, id);
    return 0;
}

/* ---- periodic checks ---- */

static void check_stages(struct sup *s)
{
    const uint64_t now = now_ns();
    for (int i = 0; i < PI_STAGE_COUNT; i++) {
        struct sup_stage *st = &s->st[i];
        struct pi_stage_info *in = info(s, (enum pi_stage)i);
        if (st->pid == 0 && st->next_spawn_ns && now >= st->next_spawn_ns)
            spawn(s, (enum pi_stage)i);
        if (st->pid > 0 && st->kill_at_ns && now >= st->kill_at_ns) {
            sup_log("%s pid %d ignored SIGTERM for %d ms: SIGKILL", stage_name((enum pi_stage)i), (int)st->pid,
                    SUP_TERM_GRACE_MS);
            kill(st->pid, SIGKILL);
            st->kill_at_ns = 0;
        }
        /* hung: it had a heartbeat since this spawn (so it is not merely slow to start), and that
         * heartbeat is older than STAGE_HUNG_MS; the death is handled (and restarted) when reaped */
        if (st->pid > 0 && !st->hung_killed) {
            const uint64_t hb = atomic_load_explicit(&in->heartbeat_ns, memory_order_relaxed);
            const uint64_t started = atomic_load_explicit(&in->started_ns, memory_order_relaxed);
            if (hb >= started && now > hb && now - hb > STAGE_HUNG_MS * MS) {
                sup_log("%s pid %d: no heartbeat for %llu ms: SIGKILL", stage_name((enum pi_stage)i), (int)st->pid,
                        (unsigned long long)((now - hb) / MS));
                kill(st->pid, SIGKILL);
                st->hung_killed = true;
            }
        }
    }
}

static bool stage_ready(struct sup *s, enum pi_stage id)
{
    /* acquire: pairs with the stage's release store of READY (stage_set_ready) */
    return atomic_load_explicit(&info(s, id)->state, memory_order_acquire) == PI_STAGE_READY;
}

static void advance(struct sup *s)
{
    const unsigned state = inst_state(s);
    if (state == PI_INST_LOADING && !s->data_stages_spawned) {
        /* acquire: pairs with loaderd's release store of READY after the image is complete */
        uint32_t w = atomic_load_explicit(&s->winfo->state, memory_order_acquire);
        if (w == PI_WEIGHTS_FAILED) {
            set_error(s, "%.*s", (int)sizeof s->winfo->error, s->winfo->error);
            set_state(s, PI_INST_FAILED);
            s->stop = true;
            s->exit_code = 1;
            return;
        }
        if (w == PI_WEIGHTS_READY) {
            sup_log("weights ready (%s, %.1f ms)", s->ctl->load_method,
                    atomic_load_explicit(&s->ctl->load_ns, memory_order_relaxed) / 1e6);
            for (size_t i = 0; i < sizeof data_stages / sizeof data_stages[0]; i++)
                spawn(s, data_stages[i]);
            s->data_stages_spawned = true;
        }
        return;
    }
    if ((state == PI_INST_LOADING && s->data_stages_spawned) || (state == PI_INST_FAILED && s->served)) {
        if (s->st[PI_STAGE_GPUD].gave_up || !stage_ready(s, PI_STAGE_GPUD))
            return;
        for (size_t i = 0; i < sizeof data_stages / sizeof data_stages[0]; i++) {
            enum pi_stage id = data_stages[i];
            if (!stage_ready(s, id) && !s->st[id].gave_up && !s->served)
                return;
            if (s->st[id].gave_up && stage_required(s, id)) /* FAILED until `pictl restart` brings it back */
                return;
        }
        /* --http: the first start waits for apid to listen (READY at once) or to fail its start, so
         * that an address it cannot listen on fails the start instead of a serving instance without it */
        if (s->cfg->http && !s->served && !stage_ready(s, PI_STAGE_APID) && !s->st[PI_STAGE_APID].gave_up)
            return;
        set_state(s, PI_INST_SERVING);
        if (!s->served)
            sup_log("serving");
        s->served = true;
        notify_ready(s, "ok\n");
    }
}

static void check_owner(struct sup *s)
{
    pid_t owner = s->cfg->owner_pid;
    if (owner > 0 && !inst_pid_alive(owner)) {
        sup_log("owner process %d is gone: stopping", (int)owner);
        s->stop = true;
    }
}

/* ---- stop ---- */

static void stop_stages(struct sup *s)
{
    set_state(s, PI_INST_STOPPING);
    for (int i = 0; i < PI_STAGE_COUNT; i++)
        if (s->st[i].pid > 0)
            kill(s->st[i].pid, SIGTERM);
    const uint64_t deadline = now_ns() + SUP_TERM_GRACE_MS * MS;
    for (;;) {
        reap(s);
        bool any = false;
        for (int i = 0; i < PI_STAGE_COUNT; i++)
            any |= s->st[i].pid > 0;
        if (!any)
            return;
        if (now_ns() >= deadline)
            break;
        struct timespec ts = { 0, 10 * (long)MS };
        nanosleep(&ts, NULL);
    }
    for (int i = 0; i < PI_STAGE_COUNT; i++) {
        if (s->st[i].pid <= 0)
            continue;
        sup_log("%s pid %d did not stop within %d ms: SIGKILL", stage_name((enum pi_stage)i), (int)s->st[i].pid,
                SUP_TERM_GRACE_MS);
        kill(s->st[i].pid, SIGKILL);
        int status;
        if (waitpid(s->st[i].pid, &status, 0) == s->st[i].pid)
            on_death(s, (enum pi_stage)i, status);
    }
}

static void remove_runtime(struct sup *s)
{
    shm_detach(&s->act_seg);
    shm_detach(&s->weights_seg);
    int n = shm_remove_instance(s->cfg->name);
    if (n < 0)
        sup_log("removing segments: %s", pi_errmsg());
    char path[INST_PATH_MAX];
    if (inst_path(s->cfg->name, INST_PID_FILE, path, sizeof path) == 0)
        unlink(path);
    if (inst_path(s->cfg->name, INST_APID_CONFIG, path, sizeof path) == 0)
        unlink(path); /* it may hold the API key */
}

static void close_socket(struct sup *s)
{
    if (s->sock < 0)
        return;
    nn_close(s->sock);
    s->sock = -1;
    char path[INST_PATH_MAX];
    if (inst_path(s->cfg->name, INST_SOCK_FILE, path, sizeof path) == 0)
        unlink(path);
}

/* ---- main loop ---- */

static void serve_one(struct sup *s)
{
    void *msg = NULL;
    int n = nn_recv(s->sock, &msg, NN_MSG, 0);
    if (n < 0)
        return; /* ETIMEDOUT (the tick), EINTR */
    json_t *reply = sup_handle(s, msg, (size_t)n);
    nn_freemsg(msg);
    if (!reply)
        return; /* stop: answered after the cleanup */
    char *text = json_dumps(reply, JSON_COMPACT);
    json_decref(reply);
    if (!text)
        text = strdup("{\"ok\":false,\"error\":\"out of memory\"}");
    if (text && nn_send(s->sock, text, strlen(text), 0) < 0)
        sup_log("reply not sent: %s", nn_strerror(nn_errno()));
    free(text);
}

static void install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

static int setup(struct sup *s)
{
    int rc;
    for (int i = 0; i < PI_STAGE_COUNT; i++)
        if ((i != PI_STAGE_APID || s->cfg->http) &&
            (rc = inst_stage_exe(stage_name((enum pi_stage)i), s->st[i].exe, sizeof s->st[i].exe)))
            return rc;
    if ((rc = write_pid(s)) || (rc = create_ctl(s)))
        return rc;
    /* the act segment first: its hot set decides whether the weights segment holds the FFN rows */
    if ((rc = create_act(s)) || (rc = create_weights(s)) || (rc = open_socket(s)))
        return rc;
    return 0;
}

int supervisor_run(const struct sup_config *cfg)
{
    struct sup sup, *s = &sup;
    memset(s, 0, sizeof *s);
    s->cfg = cfg;
    s->sock = -1;
    s->ready_fd = cfg->ready_fd;
    s->ctl_seg.fd = s->weights_seg.fd = s->act_seg.fd = -1;
    umask(077);
    install_signals();
    int rc = inst_dir(cfg->name, s->dir, sizeof s->dir);
    if (rc == 0)
        rc = setup(s);
    if (rc) {
        char line[PI_MSG_MAX + 16];
        snprintf(line, sizeof line, "error: %s: %s\n", pi_strerror(rc), pi_errmsg());
        sup_log("%s", line);
        if (s->ctl) {
            snprintf(s->ctl->error, sizeof s->ctl->error, "%s", pi_errmsg());
            set_state(s, PI_INST_FAILED);
        }
        notify_ready(s, line);
        close_socket(s);
        shm_detach(&s->ctl_seg);
        remove_runtime(s);
        return 1;
    }
    sup_log("instance '%s': model %s, %d threads, context %d, gpu ffn share %.2f", cfg->name, cfg->model_path,
            cfg->n_threads, cfg->n_ctx, (double)cfg->gpu_ffn_share);
    set_state(s, PI_INST_LOADING);
    spawn(s, PI_STAGE_LOADERD);
    if (cfg->http)
        spawn(s, PI_STAGE_APID);

    uint64_t next_sweep = 0;
    while (!s->stop) {
        serve_one(s);
        reap(s);
        if (got_stop_signal) {
            sup_log("stop signal");
            s->stop = true;
            break;
        }
        check_stages(s);
        advance(s);
        const uint64_t now = now_ns();
        if (now >= next_sweep) {
            check_owner(s);
            sup_sweep_requests(s);
            next_sweep = now + SUP_SWEEP_MS * MS;
        }
    }

    if (s->exit_code != 0) {
        char line[PI_MSG_MAX + 16];
        snprintf(line, sizeof line, "error: %s\n", s->ctl->error);
        notify_ready(s, line);
    } else {
        notify_ready(s, "error: stopped before serving\n");
    }
    sup_log("stopping");
    stop_stages(s);
    sup_fail_requests(s, "the instance stopped");
    sup_queue_fini(s);
    remove_runtime(s);
    if (s->stop_reply && s->sock >= 0) {
        const char *ok = "{\"ok\":true}";
        nn_send(s->sock, ok, strlen(ok), 0);
        struct timespec ts = { 0, SUP_REPLY_FLUSH_MS * (long)MS };
        nanosleep(&ts, NULL);
    }
    close_socket(s);
    shm_detach(&s->ctl_seg);
    sup_log("stopped");
    return s->exit_code;
}
