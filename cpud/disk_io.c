/* disk_io.c — cpud's side of the ncache segment (disk_io.h; protocol in ipc/ncache_shm.h). */
#include "disk_io.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pi_err.h"

static int pread_full(int fd, void *dst, size_t n, uint64_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)dst + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (int)got;
}

/* cheap test, at every submit: the loaderd of the segment is the READY one of the ctl segment */
static bool loader_ready(const struct disk_io *d)
{
    const int32_t pid = atomic_load_explicit(&d->v.hdr->loader_pid, memory_order_acquire);
    const struct pi_stage_info *in = &d->ctl->stages[PI_STAGE_LOADERD];
    return pid > 0 && atomic_load_explicit(&in->pid, memory_order_relaxed) == pid &&
           atomic_load_explicit(&in->state, memory_order_relaxed) == PI_STAGE_READY;
}

bool disk_io_loader_alive(const struct disk_io *d)
{
    return d->v.hdr && loader_ready(d) && ncshm_pid_alive(atomic_load_explicit(&d->v.hdr->loader_pid, memory_order_relaxed));
}

/* read request tag ourselves (its claim is ours) and queue its completion */
static void read_self(struct disk_io *d, uint64_t tag)
{
    const struct ncshm_rec *r = &d->v.rec[NCACHE_TAG_SLOT(tag)];
    const int res = pread_full(d->fd, d->v.seg.base + r->dst, r->len, r->off);
    d->local[d->n_local++] = (struct ncshm_done){ .tag = tag, .res = res };
    d->fallback_reads++;
    if (res > 0)
        d->fallback_bytes += (uint64_t)res;
}

static int dio_submit(void *ctx, int fd, void *dst, uint64_t off, uint32_t len, uint64_t tag)
{
    struct disk_io *d = ctx;
    const int64_t s = NCACHE_TAG_SLOT(tag);
    if (s < 0 || (uint64_t)s >= d->v.hdr->n_tags || (char *)dst < (char *)d->v.mem)
        return -PI_E_INVAL;
    struct ncshm_rec *r = &d->v.rec[s];
    d->fd = fd;
    d->tag[s] = tag;
    r->off = off;
    r->len = len;
    r->dst = (uint64_t)((char *)dst - (char *)d->v.seg.base);
    /* the full tag rides in the ring; the record's fields are published by the claim's release */
    if (loader_ready(d)) {
        atomic_store_explicit(&r->claim, NCSHM_QUEUED, memory_order_release);
        if (ring_push(&d->v.sq, &tag, sizeof tag, 0) == 0) {
            d->out[s] = 1;
            d->n_out++;
            return 0;
        }
    }
    atomic_store_explicit(&r->claim, NCSHM_CPU, memory_order_relaxed); /* never on sq: loaderd cannot see it */
    read_self(d, tag);
    return 0;
}

/* Take the outstanding requests held by a dead loaderd, and (no_loader: none serves the segment)
 * the queued ones too. A live loaderd takes a queued tag before it releases it from sq, so one
 * that died in between leaves the claim with its pid, never a queued tag off the ring. */
static void take_over(struct disk_io *d, bool no_loader)
{
    int32_t dead = 0, live = 0; /* the last pids found dead / alive (usually one loaderd) */
    for (uint64_t s = 0; d->n_out && s < d->v.hdr->n_tags; s++) {
        if (!d->out[s])
            continue;
        struct ncshm_rec *r = &d->v.rec[s];
        int32_t c = atomic_load_explicit(&r->claim, memory_order_acquire);
        if (c > 0 && c != dead) {
            if (c == live || ncshm_pid_alive(c)) {
                live = c;
                continue; /* a live loaderd reads it */
            }
            dead = c;
        }
        if (!(c == NCSHM_QUEUED && no_loader) && !(c > 0 && c == dead))
            continue;
        if (!atomic_compare_exchange_strong_explicit(&r->claim, &c, NCSHM_CPU, memory_order_acq_rel,
                                                     memory_order_acquire))
            continue; /* a restarted loaderd took it first */
        d->out[s] = 0;
        d->n_out--;
        read_self(d, d->tag[s]);
    }
}

static int dio_reap(void *ctx, unsigned min, void (*done)(void *, uint64_t, int), void *arg)
{
    struct disk_io *d = ctx;
    unsigned got = 0;
    bool timed_out = false;
    for (;;) {
        while (d->n_local) {
            const struct ncshm_done x = d->local[--d->n_local];
            done(arg, x.tag, x.res);
            got++;
        }
        struct ncshm_done x;
        while (ring_pop(&d->v.cq, &x, sizeof x, 0) == (int)sizeof x) {
            const int64_t s = NCACHE_TAG_SLOT(x.tag);
            if (s < 0 || (uint64_t)s >= d->v.hdr->n_tags || !d->out[s])
                continue; /* not ours (cannot happen: each tag is outstanding once) */
            d->out[s] = 0;
            d->n_out--;
            /* our tag, not the ring's: a restarted loaderd may have served a stale sq entry of the
             * slot (an older request's tag) with the current request's record */
            done(arg, d->tag[s], x.res);
            got++;
        }
        if (got >= min || (!d->n_out && !d->n_local))
            return 0;
        /* the cheap test first; /proc only after a wait without news (a killed loaderd is often
         * not reaped yet: its pid still looks READY in the ctl segment) */
        const bool alive = loader_ready(d) && (!timed_out || disk_io_loader_alive(d));
        if (!alive || timed_out) {
            take_over(d, !alive);
            if (d->n_local)
                continue;
        }
        int rc = ring_wait_readable(&d->v.cq, DISK_IO_POLL_MS);
        timed_out = rc == -ETIMEDOUT;
        if (rc && rc != -ETIMEDOUT && rc != -EINTR)
            return rc;
    }
}

void disk_io_init(struct disk_io *d, struct pi_ctl *ctl, const char *instance, const char *bundle_path)
{
    memset(d, 0, sizeof *d);
    d->v.seg.fd = -1;
    d->fd = -1;
    d->ctl = ctl;
    d->instance = instance;
    snprintf(d->path, sizeof d->path, "%s", bundle_path);
    d->io = (struct ncache_io){ .ctx = d, .submit = dio_submit, .reap = dio_reap, .register_mem = NULL,
                                .name = "loaderd (io_uring), pread by cpud while loaderd is down" };
}

int disk_io_alloc(void *arg, int64_t n_slots, uint64_t stride, uint32_t align, void **mem)
{
    struct disk_io *d = arg;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const uint64_t gen = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    const struct ncshm_params p = { .n_tags = (uint64_t)n_slots, .stride = stride, .align = align, .path = d->path };
    int rc = ncshm_create(&d->v, d->instance, &p, gen);
    if (rc)
        return rc;
    d->created = true;
    d->out = calloc((size_t)n_slots, 1);
    d->local = malloc((size_t)n_slots * sizeof *d->local);
    d->tag = malloc((size_t)n_slots * sizeof *d->tag);
    if (!d->out || !d->local || !d->tag)
        return pi_fail(PI_E_NOMEM, "cpud: out of memory");
    snprintf(d->v.hdr->cpud_io, sizeof d->v.hdr->cpud_io, "pread");
    /* release: the segment is published; loaderd attaches when it sees the new generation */
    atomic_store_explicit(&d->ctl->ncache_gen, gen, memory_order_release);
    *mem = d->v.mem;
    return 0;
}

void disk_io_fini(struct disk_io *d)
{
    if (d->created && atomic_load_explicit(&d->ctl->ncache_gen, memory_order_relaxed) == d->v.hdr->gen)
        atomic_store_explicit(&d->ctl->ncache_gen, 0, memory_order_relaxed);
    ncshm_detach(&d->v);
    free(d->out);
    free(d->local);
    free(d->tag);
    d->tag = NULL;
    d->out = NULL;
    d->local = NULL;
}

void disk_io_publish(struct disk_io *d, const struct ncache_stats *st)
{
    struct ncshm_counters *n = &d->v.hdr->n;
#define PUT(f, v) atomic_store_explicit(&n->f, (uint64_t)(v), memory_order_relaxed)
    PUT(c_tokens, st->tokens);
    PUT(c_needed, st->needed);
    PUT(c_hits, st->hits);
    PUT(c_prefetched, st->prefetched);
    PUT(c_misses, st->misses);
    PUT(c_reads, st->reads);
    PUT(c_bytes_read, st->bytes_read - st->pinned_bytes);
    PUT(c_in_flight, st->in_flight);
    PUT(c_wait_ns, st->wait_ns);
    PUT(c_fallback_reads, d->fallback_reads);
    PUT(c_fallback_bytes, d->fallback_bytes);
    PUT(c_evictions, st->evictions);
    PUT(c_pinned, st->pinned);
    PUT(c_slots, st->slots);
    PUT(c_pinned_bytes, st->pinned_bytes);
    PUT(c_cache_bytes, st->cache_bytes);
    PUT(c_prefill_tokens, d->pf_tokens);
    PUT(c_prefill_bytes, d->pf_bytes);
    PUT(c_prefill_reads, d->pf_reads);
    PUT(c_prefill_ns, d->pf_ns);
#undef PUT
}
