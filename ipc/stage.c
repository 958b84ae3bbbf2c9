/* stage.c — the runtime every stage daemon shares (see stage.h). */
#include "stage.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pi_err.h"

static const char *const stage_names[PI_STAGE_COUNT] = { "loaderd", "predictord", "cpud", "gpud", "apid" };

/* Set from the signal handler: the only state a handler may touch. */
static volatile sig_atomic_t stop_requested;

static void on_stop_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

const char *stage_name(enum pi_stage s) { return (unsigned)s < PI_STAGE_COUNT ? stage_names[s] : "?"; }

int stage_from_name(const char *name)
{
    for (int i = 0; i < PI_STAGE_COUNT; i++)
        if (!strcmp(name, stage_names[i]))
            return i;
    return -1;
}

uint64_t stage_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static void *heartbeat_main(void *arg)
{
    struct stage_rt *rt = arg;
    while (!stop_requested) {
        atomic_store_explicit(&rt->me->heartbeat_ns, stage_now_ns(), memory_order_relaxed);
        sleep_ms(STAGE_HEARTBEAT_MS);
    }
    return NULL;
}

int stage_init(struct stage_rt *rt, enum pi_stage stage, int argc, char **argv)
{
    memset(rt, 0, sizeof *rt);
    rt->ctl_seg.fd = rt->weights_seg.fd = -1;
    rt->stage = stage;
    rt->name = stage_name(stage);
    const char *inst = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--instance") && i + 1 < argc)
            inst = argv[++i];
        else
            return pi_fail(PI_E_INVAL, "%s: unknown argument '%s' (usage: %s --instance NAME)", rt->name, argv[i],
                           rt->name);
    }
    if (!inst)
        return pi_fail(PI_E_INVAL, "%s: --instance NAME is required", rt->name);
    if (strlen(inst) >= sizeof rt->instance)
        return pi_fail(PI_E_INVAL, "%s: instance name '%s' is longer than %zu characters", rt->name, inst,
                       sizeof rt->instance - 1);
    snprintf(rt->instance, sizeof rt->instance, "%s", inst);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    int rc;
    const uint64_t deadline = stage_now_ns() + (uint64_t)STAGE_ATTACH_TIMEOUT_MS * 1000000ull;
    while ((rc = shm_attach(&rt->ctl_seg, inst, "ctl", PI_SEG_KIND_CTL, 0)) == -EAGAIN && stage_now_ns() < deadline)
        sleep_ms(10);
    if (rc)
        return rc;
    rt->ctl = shm_at(&rt->ctl_seg, rt->ctl_seg.hdr->offsets[0], sizeof *rt->ctl);
    if (!rt->ctl || rt->ctl_seg.hdr->n_offsets < 1)
        return pi_fail(PI_E_FORMAT, "%s: ctl segment lacks struct pi_ctl", rt->name);
    rt->me = &rt->ctl->stages[stage];
    atomic_store_explicit(&rt->me->heartbeat_ns, stage_now_ns(), memory_order_relaxed);
    if (pthread_create(&rt->hb_thread, NULL, heartbeat_main, rt) == 0)
        rt->hb_running = true;
    return 0;
}

void stage_fini(struct stage_rt *rt)
{
    if (rt->hb_running) {
        stop_requested = 1;
        pthread_join(rt->hb_thread, NULL);
        rt->hb_running = false;
    }
    shm_detach(&rt->weights_seg);
    shm_detach(&rt->ctl_seg);
}

int stage_attach_weights(struct stage_rt *rt, bool writable, int timeout_ms)
{
    int rc;
    const uint64_t start = stage_now_ns();
    for (;;) {
        rc = shm_attach(&rt->weights_seg, rt->instance, "weights", PI_SEG_KIND_WEIGHTS,
                        writable ? 0 : SHM_ATTACH_RDONLY);
        if (rc != -EAGAIN && rc != -ENOENT)
            break;
        if (stop_requested || (timeout_ms >= 0 && stage_now_ns() - start > (uint64_t)timeout_ms * 1000000ull))
            return pi_fail(ETIMEDOUT, "%s: weights segment did not appear", rt->name);
        sleep_ms(10);
    }
    if (rc)
        return rc;
    const struct pi_seg_header *sh = rt->weights_seg.hdr;
    if (sh->n_offsets < 3)
        return pi_fail(PI_E_FORMAT, "%s: weights segment has %u offsets", rt->name, sh->n_offsets);
    rt->winfo = shm_at(&rt->weights_seg, sh->offsets[0], sizeof *rt->winfo);
    if (!rt->winfo)
        return pi_fail(PI_E_FORMAT, "%s: weights info outside the segment", rt->name);
    if (writable)
        return 0; /* loaderd: it is the one who fills it */
    for (;;) {
        /* acquire: pairs with loaderd's release store of READY after the image was written */
        uint32_t st = atomic_load_explicit(&rt->winfo->state, memory_order_acquire);
        if (st == PI_WEIGHTS_READY)
            break;
        if (st == PI_WEIGHTS_FAILED)
            return pi_fail(PI_E_IO, "%s: the model failed to load: %.200s", rt->name, rt->winfo->error);
        if (stop_requested || (timeout_ms >= 0 && stage_now_ns() - start > (uint64_t)timeout_ms * 1000000ull))
            return pi_fail(ETIMEDOUT, "%s: weights not ready", rt->name);
        sleep_ms(5);
    }
    rt->image_size = rt->winfo->file_size;
    rt->image = shm_at(&rt->weights_seg, sh->offsets[1], rt->image_size);
    if (!rt->image)
        return pi_fail(PI_E_FORMAT, "%s: weights image outside the segment", rt->name);
    return 0;
}

void stage_set_ready(struct stage_rt *rt)
{
    atomic_store_explicit(&rt->me->ready_ns, stage_now_ns(), memory_order_relaxed);
    /* release: everything this stage set up before is visible to whoever sees READY */
    atomic_store_explicit(&rt->me->state, PI_STAGE_READY, memory_order_release);
    fprintf(stderr, "%s: ready (pid %d)\n", rt->name, (int)getpid());
}

bool stage_should_stop(const struct stage_rt *rt)
{
    return stop_requested || atomic_load_explicit(&rt->ctl->state, memory_order_relaxed) == PI_INST_STOPPING;
}

void stage_fail(struct stage_rt *rt, int rc, const char *what)
{
    const char *d = pi_errmsg();
    fprintf(stderr, "%s: %s: %s%s%s\n", rt->name, what, pi_strerror(rc), d[0] ? ": " : "", d);
    if (rt->me)
        snprintf(rt->me->last_error, sizeof rt->me->last_error, "%s: %s%s%s", what, pi_strerror(rc),
                 d[0] ? ": " : "", d);
}

int stage_start_exit_status(int rc)
{
    switch (rc < 0 ? -rc : rc) {
    case PI_E_UNSUPPORTED:
    case PI_E_NOTFOUND:
    case PI_E_TYPE:
    case PI_E_RANGE:
    case PI_E_INVAL:
    case PI_E_NOMEM: /* e.g. a KV cache of -c x --parallel cells that the device or the host cannot hold */
        return STAGE_EXIT_CONFIG;
    default:
        return 1;
    }
}

void stage_prof(struct stage_rt *rt, int layer, uint64_t compute_ns, uint64_t wait_ns, uint64_t bytes)
{
    struct pi_stage_info *me = rt->me;
    const int row = layer < 0 ? 0 : layer >= PI_MAX_LAYERS ? PI_MAX_LAYERS - 1 : layer;
    struct pi_layer_prof *lp = &me->layers[row];
    atomic_fetch_add_explicit(&lp->items, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&lp->compute_ns, compute_ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&lp->wait_ns, wait_ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&lp->bytes, bytes, memory_order_relaxed);
    atomic_fetch_add_explicit(&me->items, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&me->compute_ns, compute_ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&me->wait_ns, wait_ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&me->bytes, bytes, memory_order_relaxed);

    struct pi_trace *tr = &rt->ctl->traces[rt->stage];
    const uint64_t head = atomic_load_explicit(&tr->head, memory_order_relaxed); /* we are the only writer */
    const uint64_t now = stage_now_ns();
    struct pi_trace_event *ev = &tr->ev[head % PI_TRACE_EVENTS];
    ev->ts_ns = now - compute_ns;
    ev->dur_ns = compute_ns > UINT32_MAX ? UINT32_MAX : (uint32_t)compute_ns;
    ev->layer = (int16_t)(layer < INT16_MAX ? layer : INT16_MAX);
    ev->kind = PI_TRACE_COMPUTE;
    ev->pos = 0;
    /* release: the event's fields are visible to a reader that acquires head */
    atomic_store_explicit(&tr->head, head + 1, memory_order_release);
}
