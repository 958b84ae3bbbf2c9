/* serve.c — loaderd serves the disk tier's reads (serve.h; protocol in ipc/ncache_shm.h). */
#include "serve.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "act.h"
#include "bundle.h"
#include "pi_err.h"

void serve_init(struct serve *s, struct stage_rt *rt)
{
    memset(s, 0, sizeof *s);
    s->rt = rt;
    s->fd = -1;
    s->v.seg.fd = -1;
    const char *f = getenv(SERVE_ENV_FAIL_READ);
    s->fail_at = f ? strtoull(f, NULL, 10) : 0;
}

static void on_done(void *arg, uint64_t tag, int res)
{
    struct serve *s = arg;
    struct ncshm_counters *n = &s->v.hdr->n;
    s->inflight--;
    if (s->fail_at && ++s->n_done == s->fail_at)
        res = -EIO;
    atomic_fetch_add_explicit(&n->l_reads, 1, memory_order_relaxed);
    if (res > 0)
        atomic_fetch_add_explicit(&n->l_bytes, (uint64_t)res, memory_order_relaxed);
    else
        atomic_fetch_add_explicit(&n->l_errors, 1, memory_order_relaxed);
    const struct ncshm_done d = { .tag = tag, .res = res };
    /* cq has a slot per tag and each tag is outstanding once: it cannot be full for long */
    if (ring_push(&s->v.cq, &d, sizeof d, 1000))
        fprintf(stderr, "loaderd: the completion ring to cpud is full; cpud will read tag %llu itself\n",
                (unsigned long long)tag);
}

static void detach(struct serve *s)
{
    if (!s->attached)
        return;
    while (s->inflight && s->sio.io.reap(&s->sio, s->inflight, on_done, s) == 0)
        ; /* no read may land in a mapping we give up */
    s->inflight = 0;
    int32_t me = (int32_t)getpid();
    atomic_compare_exchange_strong(&s->v.hdr->loader_pid, &me, 0);
    stream_io_fini(&s->sio);
    s->have_sio = false;
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
    ncshm_detach(&s->v);
    s->attached = false;
    fprintf(stderr, "loaderd: detached from the neuron cache (generation %llu)\n", (unsigned long long)s->gen);
}

static void note(struct serve *s, const char *what)
{
    char msg[sizeof s->note];
    snprintf(msg, sizeof msg, "%s: %s", what, pi_errmsg());
    if (strcmp(msg, s->note)) {
        fprintf(stderr, "loaderd: neuron cache: %s (cpud reads by itself)\n", msg);
        snprintf(s->note, sizeof s->note, "%s", msg);
    }
}

static void attach(struct serve *s, uint64_t gen)
{
    int rc = ncshm_attach(&s->v, s->rt->instance, false);
    if (rc) {
        if (rc != -EAGAIN && rc != -ENOENT)
            note(s, "attach");
        return;
    }
    if (s->v.hdr->gen != gen) { /* replaced while we looked: the next round sees the new one */
        ncshm_detach(&s->v);
        return;
    }
    struct bundle_hdr h;
    bool direct;
    if ((rc = bundle_open(s->v.hdr->path, NULL, true, &s->fd, &direct, &h))) {
        note(s, "bundle");
        ncshm_detach(&s->v);
        return;
    }
    if ((rc = stream_io_init(&s->sio, 0))) {
        note(s, "io_uring");
        close(s->fd);
        s->fd = -1;
        ncshm_detach(&s->v);
        s->gen = gen; /* not retried for this generation */
        return;
    }
    s->have_sio = true;
    s->sio.io.register_mem(&s->sio, s->v.mem, s->v.hdr->n_tags * s->v.hdr->stride);
    snprintf(s->v.hdr->loader_io, sizeof s->v.hdr->loader_io, "%.120s%s", s->sio.name, direct ? ", O_DIRECT" : ", buffered");
    s->gen = gen;
    s->attached = true;
    s->note[0] = 0;
    /* release: our reader is set up; cpud queues for us from now on */
    atomic_store_explicit(&s->v.hdr->loader_pid, (int32_t)getpid(), memory_order_release);
    fprintf(stderr, "loaderd: serving the neuron cache (generation %llu, %llu slots) from %s with %s\n",
            (unsigned long long)gen, (unsigned long long)s->v.hdr->n_tags, s->v.hdr->path, s->v.hdr->loader_io);
}

/* take the queued requests on sq while there is room in flight; the number submitted */
static unsigned take(struct serve *s)
{
    const int32_t me = (int32_t)getpid();
    const uint64_t base_cap = s->v.seg.size;
    unsigned n = 0;
    while (s->inflight < s->sio.qd) {
        const void *msg;
        uint32_t len;
        if (ring_peek(&s->v.sq, &msg, &len))
            break;
        uint64_t tag = 0;
        if (len == sizeof tag)
            memcpy(&tag, msg, sizeof tag);
        const int64_t slot = NCACHE_TAG_SLOT(tag);
        if (len == sizeof tag && slot >= 0 && (uint64_t)slot < s->v.hdr->n_tags) {
            struct ncshm_rec *r = &s->v.rec[slot];
            int32_t c = NCSHM_QUEUED;
            /* take it before releasing it from sq: dying in between leaves our pid, which cpud takes over */
            if (atomic_compare_exchange_strong_explicit(&r->claim, &c, me, memory_order_acq_rel, memory_order_acquire)) {
                const uint64_t dst = r->dst, rlen = r->len;
                int rc = dst + rlen <= base_cap && rlen ? s->sio.io.submit(&s->sio, s->fd, s->v.seg.base + dst, r->off,
                                                                          (uint32_t)rlen, tag)
                                                        : -PI_E_RANGE;
                s->inflight++;
                if (rc) {
                    on_done(s, tag, rc < 0 ? rc : -rc);
                } else {
                    n++;
                }
            }
        }
        ring_release(&s->v.sq);
    }
    return n;
}

void serve_poll(struct serve *s, int idle_ms)
{
    const uint64_t gen = atomic_load_explicit(&s->rt->ctl->ncache_gen, memory_order_acquire);
    if (s->attached && gen != s->gen)
        detach(s);
    if (!s->attached && gen && gen != s->gen)
        attach(s, gen);
    if (!s->attached) {
        struct timespec ts = { .tv_sec = idle_ms / 1000, .tv_nsec = (long)(idle_ms % 1000) * 1000000L };
        nanosleep(&ts, NULL);
        return;
    }
    const unsigned n = take(s);
    atomic_fetch_add_explicit(&s->v.hdr->n.l_submits, n, memory_order_relaxed);
    atomic_store_explicit(&s->v.hdr->n.l_in_flight, s->inflight, memory_order_relaxed);
    if (s->inflight) {
        /* just submitted: collect what is done and come back for more requests; else wait for one */
        int rc = s->sio.io.reap(&s->sio, n ? 0 : 1, on_done, s);
        if (rc && rc != -EINTR)
            fprintf(stderr, "loaderd: io_uring wait: %s\n", strerror(-rc));
        return;
    }
    ring_wait_readable(&s->v.sq, idle_ms);
}

void serve_fini(struct serve *s) { detach(s); }

void serve_trim_decide(struct stage_rt *rt)
{
    struct pi_ctl *ctl = rt->ctl;
    if (!ctl->ram_budget || atomic_load_explicit(&ctl->weights_trimmed, memory_order_relaxed))
        return; /* no disk tier, or a restarted loaderd: decided already */
    struct shm_seg seg;
    struct act_view a;
    if (shm_attach(&seg, rt->instance, "act", PI_SEG_KIND_ACT, SHM_ATTACH_RDONLY)) {
        fprintf(stderr, "loaderd: no act segment (%s): the weights segment keeps the FFN rows\n", pi_errmsg());
        return;
    }
    bool any = act_view_attach(&a, &seg) != 0;
    const size_t n = any ? 0 : (size_t)a.hdr->n_layer * (size_t)a.hdr->n_ff;
    for (size_t i = 0; i < n && !any; i++)
        any = a.gpu_idx[i] != 0;
    shm_detach(&seg);
    if (any) {
        fprintf(stderr, "loaderd: gpud holds FFN neurons: the weights segment keeps the FFN rows\n");
        return;
    }
    atomic_store_explicit(&ctl->weights_trimmed, UINT64_MAX, memory_order_release);
}

/* blk.N.ffn_{gate,up,down,down_t}.weight */
bool serve_is_ffn_tensor(const char *name)
{
    const char *p = strstr(name, ".ffn_");
    if (strncmp(name, "blk.", 4) || !p)
        return false;
    p += 5;
    return !strcmp(p, "gate.weight") || !strcmp(p, "up.weight") || !strcmp(p, "down.weight") ||
           !strcmp(p, "down_t.weight");
}

int serve_trim_punch(struct stage_rt *rt, const struct loader_weights *w)
{
    struct pi_ctl *ctl = rt->ctl;
    if (!atomic_load_explicit(&ctl->weights_trimmed, memory_order_acquire))
        return 0;
    const uint64_t base = (uint64_t)((const char *)w->image - (const char *)rt->weights_seg.base);
    uint64_t punched = 0;
    /* resident before the punch = the load's peak (pages are only added while loading): the supervisor
     * left the FFN pages unallocated, so this is the dense parts, and the punch frees nothing */
    struct stat st0, st1;
    const bool have0 = fstat(rt->weights_seg.fd, &st0) == 0;
    for (uint32_t k = 0; k < w->info->n_tensors && k < w->dir_cap; k++) {
        const struct pi_tensor_dirent *d = &w->dir[k];
        char name[sizeof d->name + 1];
        memcpy(name, d->name, sizeof d->name);
        name[sizeof d->name] = 0;
        if (!serve_is_ffn_tensor(name))
            continue;
        /* whole pages inside the tensor only: a neighbour's bytes stay */
        const uint64_t a = (base + d->offset + 4095) / 4096 * 4096, b = (base + d->offset + d->nbytes) / 4096 * 4096;
        if (b <= a)
            continue;
        if (fallocate(rt->weights_seg.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)a, (off_t)(b - a)))
            return pi_fail(errno, "loaderd: cannot punch %s out of the weights segment: %s", name, strerror(errno));
        punched += b - a;
    }
    atomic_store_explicit(&ctl->weights_trimmed, punched ? punched : 1, memory_order_release);
    if (have0 && fstat(rt->weights_seg.fd, &st1) == 0)
        fprintf(stderr, "loaderd: --ram-budget: the weights segment (%llu bytes) had %llu bytes resident after the "
                "load, %llu after the trim; its FFN rows (%llu bytes) are read from the bundle by cpud\n",
                (unsigned long long)rt->weights_seg.size, (unsigned long long)st0.st_blocks * 512ull,
                (unsigned long long)st1.st_blocks * 512ull, (unsigned long long)punched);
    return 0;
}
