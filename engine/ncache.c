/* ncache.c — the neuron cache (ncache.h). */
#include "ncache.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "pi_err.h"
#include "tiers.h"

enum { SLOT_EMPTY = 0, SLOT_PENDING = 1, SLOT_READY = 2 };
/* ref of a slot a prefetch assigned, until its first use: still set for the clock, and counted as
 * prefetched (not a hit) when asked for, whether its read is still in flight or done */
enum { REF_PREFETCHED = 2, REF_DENSE = 3 /* read by dense_layer for the neuron's own step: a miss */ };

#define PIN_READ_MAX (1u << 20) /* pinned neurons are read in runs of up to 1 MiB at open */

struct ncache {
    const struct pi_model *m;
    struct bundle_hdr h;
    int fd;
    bool direct;
    char path[4096];
    struct stat st0;            /* the bundle's identity at open */
    char *mem;                  /* n_slots records, h.align-aligned */
    int64_t n_slots, n_pinned;  /* slots [0, n_pinned) pinned, the rest the window */
    int32_t *slot_of;           /* (n_layer · n_ff) slot of a neuron, -1 */
    int64_t *owner;             /* (n_slots) neuron key (layer · n_ff + i), -1 */
    uint64_t *stamp;            /* (n_slots) layer step of the last use */
    uint8_t *state, *ref;       /* (n_slots) SLOT_*, the clock's reference bit */
    int64_t hand;
    uint64_t clock;             /* layer steps so far */
    uint64_t window_steps;      /* window in layer steps */
    const struct ncache_io *io;
    int io_err;                 /* first failed completion, reported by the next call */
    char io_msg[4096 + 256];
    uint64_t fail_at, completed;
    int64_t dense_min;          /* dense_layer's threshold in missing neurons of a layer (0: never) */
    bool own_mem;               /* mem from posix_memalign (else the caller's alloc) */
    int64_t run_s, run_key;     /* assigned slots not yet submitted: run_n neurons from run_key in */
    uint32_t run_n;             /* slots run_s.. (consecutive both), read together by flush_run */
    struct ncache_stats st;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static char *slot_mem(struct ncache *c, int64_t s) { return c->mem + (size_t)s * c->h.stride; }

static void describe(struct ncache *c, int64_t key, uint32_t n, uint64_t off, int res)
{
    /* the offset first: the message may reach a client through a 256-byte field */
    snprintf(c->io_msg, sizeof c->io_msg,
             "read at offset %llu (%llu bytes: layer %lld neurons %lld..%lld) failed: %s; bundle %s",
             (unsigned long long)off, (unsigned long long)n * c->h.stride, (long long)(key / c->h.n_ff),
             (long long)(key % c->h.n_ff), (long long)(key % c->h.n_ff + n - 1), res < 0 ? strerror(-res) : "short read",
             c->path);
}

/* a completion of the read tagged tag: NCACHE_TAG_COUNT slots from NCACHE_TAG_SLOT (res bytes, or -errno) */
static void complete(void *arg, uint64_t tag, int res)
{
    struct ncache *c = arg;
    const int64_t s0 = NCACHE_TAG_SLOT(tag);
    const uint32_t n = NCACHE_TAG_COUNT(tag);
    c->st.in_flight--;
    c->st.reads++;
    if (c->fail_at && ++c->completed == c->fail_at)
        res = -EIO;
    const int64_t key = c->owner[s0];
    if (res >= 0 && (uint64_t)res == (uint64_t)n * c->h.stride) {
        for (uint32_t k = 0; k < n; k++)
            c->state[s0 + k] = SLOT_READY;
        c->st.bytes_read += (uint64_t)res;
        return;
    }
    if (!c->io_err) {
        c->io_err = res < 0 ? -res : EIO;
        describe(c, key, n, bundle_offset(&c->h, (int)(key / c->h.n_ff), key % c->h.n_ff), res);
    }
    for (uint32_t k = 0; k < n; k++) {
        const int64_t s = s0 + k;
        c->state[s] = SLOT_EMPTY;
        if (c->owner[s] >= 0)
            c->slot_of[c->owner[s]] = -1;
        c->owner[s] = -1;
    }
}

int ncache_pread_full(int fd, void *dst, size_t n, uint64_t off)
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

/* start reading the n neurons from key into the slots from s */
static int start_read(struct ncache *c, int64_t s, int64_t key, uint32_t n)
{
    const uint64_t off = bundle_offset(&c->h, (int)(key / c->h.n_ff), key % c->h.n_ff);
    const uint64_t tag = (uint64_t)s | (uint64_t)n << 32;
    const size_t len = (size_t)n * c->h.stride;
    c->st.in_flight++;
    if (c->io) {
        int rc = c->io->submit(c->io->ctx, c->fd, slot_mem(c, s), off, (uint32_t)len, tag);
        if (!rc)
            return 0;
        c->st.in_flight--;
        for (uint32_t k = 0; k < n; k++) { /* unmapped: a later call must not take an empty slot for the neuron */
            c->state[s + k] = SLOT_EMPTY;
            c->slot_of[key + k] = -1;
            c->owner[s + k] = -1;
        }
        return pi_fail(rc < 0 ? -rc : rc, "bundle %s: cannot submit the read at offset %llu: %s", c->path,
                       (unsigned long long)off, pi_strerror(rc));
    }
    complete(c, tag, ncache_pread_full(c->fd, slot_mem(c, s), len, off));
    return 0;
}

/* submit the run of assigned slots */
static int flush_run(struct ncache *c)
{
    const uint32_t n = c->run_n;
    c->run_n = 0;
    return n ? start_read(c, c->run_s, c->run_key, n) : 0;
}

/* slot s was assigned neuron key: extend the run when both follow it, else submit the run first */
static int queue_read(struct ncache *c, int64_t s, int64_t key)
{
    const int64_t F = c->h.n_ff;
    int rc;
    if (c->run_n && s == c->run_s + c->run_n && key == c->run_key + c->run_n && key % F &&
        (uint64_t)(c->run_n + 1) * c->h.stride <= NCACHE_READ_MAX) {
        c->run_n++;
        return 0;
    }
    if ((rc = flush_run(c)))
        return rc;
    c->run_s = s;
    c->run_key = key;
    c->run_n = 1;
    return 0;
}

static int take_error(struct ncache *c)
{
    if (!c->io_err)
        return 0;
    const int e = c->io_err;
    c->io_err = 0;
    return pi_fail(e, "%s", c->io_msg);
}

/* wait until slot s is no longer pending */
static int wait_slot(struct ncache *c, int64_t s)
{
    while (c->state[s] == SLOT_PENDING) {
        int rc = c->io->reap(c->io->ctx, 1, complete, c);
        if (rc)
            return pi_fail(rc < 0 ? -rc : rc, "bundle %s: waiting for reads: %s", c->path, pi_strerror(rc));
    }
    return 0;
}

/* A window slot for a new neuron: the clock hand's first slot not in use at step >= protect and not
 * pending, whose reference bit is clear or whose last use is outside the window. -1: none. */
static int64_t victim(struct ncache *c, uint64_t protect)
{
    const int64_t n = c->n_slots - c->n_pinned;
    for (int64_t k = 0; k < 2 * n; k++) {
        const int64_t s = c->n_pinned + c->hand;
        c->hand = c->hand + 1 == n ? 0 : c->hand + 1;
        if (c->state[s] == SLOT_PENDING || (c->owner[s] >= 0 && c->stamp[s] >= protect))
            continue;
        const bool old = c->stamp[s] + c->window_steps < c->clock;
        if (c->owner[s] >= 0 && c->ref[s] && !old) {
            c->ref[s] = 0; /* second chance */
            continue;
        }
        if (c->owner[s] >= 0) {
            c->slot_of[c->owner[s]] = -1;
            c->st.evictions++;
        }
        c->owner[s] = -1;
        c->state[s] = SLOT_EMPTY;
        return s;
    }
    return -1;
}

static int assign(struct ncache *c, int64_t key, uint64_t stamp, uint64_t protect, int64_t *out)
{
    const int64_t s = victim(c, protect);
    *out = s;
    if (s < 0)
        return 0;
    c->owner[s] = key;
    c->slot_of[key] = (int32_t)s;
    c->stamp[s] = stamp;
    c->ref[s] = 1;
    c->state[s] = SLOT_PENDING;
    return queue_read(c, s, key);
}

/* `need` consecutive window slots that may be taken now: none in flight, none used at step >=
 * protect (the current layer's, and the prefetched neurons of the layer being read), none holding a
 * neuron of this layer (it may be needed: the caller has not stamped its hits yet). -1: none. */
static int64_t find_block(struct ncache *c, int64_t need, uint64_t protect, int64_t key0, int64_t F)
{
    const int64_t n = c->n_slots - c->n_pinned;
    int64_t len = 0;
    for (int64_t k = 0; k < n; k++) {
        const int64_t s = c->n_pinned + k, o = c->owner[s];
        const bool ok = c->state[s] != SLOT_PENDING && (o < 0 || (c->stamp[s] < protect && (o < key0 || o >= key0 + F)));
        len = ok ? len + 1 : 0;
        if (len == need)
            return s - need + 1;
    }
    return -1;
}

/* A chunk whose union of missing neurons in this layer is at least dense_min (a long prompt's is
 * nearly the whole layer): read every neuron of the layer from its first missing one to its last
 * that is not present — the needed ones and the unneeded ones between them — into one block of
 * consecutive slots, so the layer streams in large sequential reads (up to NCACHE_READ_MAX each)
 * instead of one record a read, at the cost of the unneeded records in the gaps. Present neurons
 * (pinned or cached) are not read again: they split the reads. Does nothing (the per-neuron path
 * then reads the misses) below the threshold or when no block of free slots is found. From
 * ncache_layer (stamp = protect = this step; the needed neurons count as misses) and from
 * ncache_prefetch (stamp = the next step, protect = this one; they count as prefetched): a prompt
 * chunk's next layer is mostly read by the prefetch. */
static int dense_layer(struct ncache *c, int layer, const struct ffn_runs *runs, uint64_t stamp, uint64_t protect,
                       uint8_t ref_needed)
{
    const int64_t F = c->h.n_ff, key0 = (int64_t)layer * F;
    int64_t lo = -1, hi = -1, missing = 0;
    for (int32_t k = 0; k < runs->n; k++)
        for (int64_t i = runs->run[k][0]; i < runs->run[k][0] + runs->run[k][1]; i++)
            if (c->slot_of[key0 + i] < 0) {
                missing++;
                lo = lo < 0 ? i : lo;
                hi = i;
            }
    if (!c->dense_min || missing < c->dense_min)
        return 0;
    int64_t need = 0;
    for (int64_t i = lo; i <= hi; i++)
        need += c->slot_of[key0 + i] < 0;
    const int64_t b = find_block(c, need, protect, key0, F);
    if (b < 0)
        return 0;
    for (int64_t s = b; s < b + need; s++) {
        if (c->owner[s] >= 0) {
            c->slot_of[c->owner[s]] = -1;
            c->st.evictions++;
        }
        c->owner[s] = -1;
        c->state[s] = SLOT_EMPTY;
    }
    int64_t s = b;
    int32_t k = 0;
    int rc = 0;
    for (int64_t i = lo; i <= hi && !rc; i++) {
        const int64_t key = key0 + i;
        if (c->slot_of[key] >= 0)
            continue;
        while (k < runs->n && runs->run[k][0] + runs->run[k][1] <= i)
            k++;
        const bool needed = k < runs->n && runs->run[k][0] <= i;
        c->owner[s] = key;
        c->slot_of[key] = (int32_t)s;
        c->stamp[s] = stamp;
        c->ref[s] = needed ? ref_needed : 1;
        c->state[s] = SLOT_PENDING;
        c->st.dense_extra += !needed;
        rc = queue_read(c, s++, key);
    }
    c->st.dense_layers++;
    const int frc = flush_run(c);
    return rc ? rc : frc;
}

int ncache_prefetch(struct ncache *c, int layer, const struct ffn_runs *runs)
{
    const int64_t F = c->h.n_ff;
    const uint64_t next = c->clock + 1; /* the step that will use them */
    if (!c->io)
        return 0;
    const uint64_t t0 = now_ns();
    int rc = take_error(c);
    if (!rc)
        rc = dense_layer(c, layer, runs, next, c->clock, REF_PREFETCHED);
    for (int32_t k = 0; !rc && k < runs->n; k++)
        for (int64_t i = runs->run[k][0]; !rc && i < runs->run[k][0] + runs->run[k][1]; i++) {
            const int64_t key = (int64_t)layer * F + i, s = c->slot_of[key];
            if (s >= 0) {
                if (s >= c->n_pinned && c->stamp[s] < next)
                    c->stamp[s] = next;
                continue;
            }
            int64_t got;
            if ((rc = assign(c, key, next, c->clock, &got)) || got < 0)
                goto out; /* the window is full of what is in use: the rest will be misses */
            c->ref[got] = REF_PREFETCHED;
        }
out:;
    int frc = flush_run(c);
    /* hand the reader what it still holds back (reap without waiting submits it): the reads must run
     * while the caller computes this layer */
    if (!frc)
        frc = c->io->reap(c->io->ctx, 0, complete, c);
    c->st.prefetch_ns += now_ns() - t0;
    return rc ? rc : frc;
}

int ncache_layer(struct ncache *c, int layer, const struct ffn_runs *runs, struct pi_layer_weights *w)
{
    const int64_t F = c->h.n_ff;
    const uint64_t now = ++c->clock;
    int rc = take_error(c);
    if (!rc)
        rc = dense_layer(c, layer, runs, now, now, REF_DENSE);
    for (int32_t k = 0; !rc && k < runs->n; k++)
        for (int64_t i = runs->run[k][0]; !rc && i < runs->run[k][0] + runs->run[k][1]; i++) {
            const int64_t key = (int64_t)layer * F + i;
            int64_t s = c->slot_of[key];
            c->st.needed++;
            if (s >= 0) {
                if (s >= c->n_pinned && c->ref[s] == REF_DENSE)
                    c->st.misses++; /* read by dense_layer just now */
                else if (c->state[s] == SLOT_PENDING || (s >= c->n_pinned && c->ref[s] == REF_PREFETCHED))
                    c->st.prefetched++;
                else
                    c->st.hits++;
                if (s >= c->n_pinned) {
                    c->stamp[s] = now;
                    c->ref[s] = 1;
                }
                continue;
            }
            c->st.misses++;
            if (!(rc = assign(c, key, now, now, &s)) && s < 0)
                rc = pi_fail(PI_E_RANGE, "ncache: no free slot for layer %d (%lld window slots)", layer,
                             (long long)(c->n_slots - c->n_pinned));
        }
    const int frc = flush_run(c);
    if (!rc)
        rc = frc;
    const uint64_t w0 = now_ns();
    for (int32_t k = 0; !rc && k < runs->n; k++)
        for (int64_t i = runs->run[k][0]; !rc && i < runs->run[k][0] + runs->run[k][1]; i++) {
            const int64_t s = c->slot_of[(int64_t)layer * F + i];
            if (s >= 0 && c->state[s] == SLOT_PENDING)
                rc = wait_slot(c, s);
            if (!rc && (c->io_err || c->slot_of[(int64_t)layer * F + i] < 0))
                rc = take_error(c);
            if (!rc && c->slot_of[(int64_t)layer * F + i] < 0)
                rc = pi_fail(PI_E_IO, "ncache: layer %d neuron %lld has no slot after its read", layer, (long long)i);
        }
    c->st.wait_ns += now_ns() - w0;
    if (rc)
        return rc;
    *w = (struct pi_layer_weights){ .l = &c->m->layers[layer], .layer = layer, .slot = c->slot_of + (size_t)layer * F,
                                     .cache = c->mem, .stride = c->h.stride, .up_off = c->h.gate_bytes,
                                     .down_off = c->h.gate_bytes + c->h.up_bytes };
    return 0;
}

int ncache_step(struct ncache *c, int32_t n)
{
    c->st.steps++;
    c->st.tokens += (uint64_t)n;
    struct stat st;
    if (stat(c->path, &st))
        return pi_fail(errno, "bundle %s: it went away while in use: %s", c->path, strerror(errno));
    if (st.st_ino != c->st0.st_ino || st.st_dev != c->st0.st_dev || st.st_size != c->st0.st_size ||
        st.st_mtim.tv_sec != c->st0.st_mtim.tv_sec || st.st_mtim.tv_nsec != c->st0.st_mtim.tv_nsec)
        return pi_fail(PI_E_IO, "bundle %s changed on disk while in use (inode, size or mtime): restart to read it",
                       c->path);
    return take_error(c);
}

void ncache_get_stats(const struct ncache *c, struct ncache_stats *s) { *s = c->st; }

/* read the pinned neurons: consecutive neurons of a layer have consecutive slots and records */
static int load_pinned(struct ncache *c)
{
    const int64_t F = c->h.n_ff, L = c->h.n_layer;
    int64_t s = 0;
    for (int64_t key = 0; key < L * F;) {
        if (c->slot_of[key] != -2) {
            key++;
            continue;
        }
        int64_t n = 1;
        while (key + n < L * F && (key + n) % F && c->slot_of[key + n] == -2 && (uint64_t)(n + 1) * c->h.stride <= PIN_READ_MAX)
            n++;
        const uint64_t off = bundle_offset(&c->h, (int)(key / F), key % F);
        const size_t len = (size_t)n * c->h.stride;
        int got = ncache_pread_full(c->fd, slot_mem(c, s), len, off);
        if (got != (int)len)
            return pi_fail(got < 0 ? -got : PI_E_TRUNCATED, "bundle %s: read of layer %lld neurons %lld.. at offset %llu: %s",
                           c->path, (long long)(key / F), (long long)(key % F), (unsigned long long)off,
                           got < 0 ? strerror(-got) : "short read");
        c->st.bytes_read += len;
        for (int64_t k = 0; k < n; k++, s++) {
            c->slot_of[key + k] = (int32_t)s;
            c->owner[s] = key + k;
            c->state[s] = SLOT_READY;
        }
        key += n;
    }
    return 0;
}

int ncache_new(struct ncache **out, const struct pi_model *m, const struct ncache_params *p)
{
    const int64_t L = m->hp.n_layer, F = m->hp.n_ff;
    if (p->window_slots < 2 * F)
        return pi_fail(PI_E_INVAL, "ncache: %lld window slots (at least two layers, %lld)", (long long)p->window_slots,
                       (long long)(2 * F));
    struct ncache *c = calloc(1, sizeof *c);
    if (!c)
        return pi_fail(PI_E_NOMEM, "ncache: out of memory");
    c->m = m;
    c->fd = -1;
    c->io = p->io;
    snprintf(c->path, sizeof c->path, "%s", p->path);
    int rc = bundle_open(p->path, m, p->direct, &c->fd, &c->direct, &c->h);
    if (!rc && fstat(c->fd, &c->st0))
        rc = pi_fail(errno, "bundle %s: fstat: %s", p->path, strerror(errno));
    if (rc)
        goto fail;
    for (int64_t k = 0; k < L * F; k++)
        c->n_pinned += p->tier[k] == PI_TIER_RAM;
    c->n_slots = c->n_pinned + p->window_slots;
    c->slot_of = malloc((size_t)(L * F) * sizeof *c->slot_of);
    c->owner = malloc((size_t)c->n_slots * sizeof *c->owner);
    c->stamp = calloc((size_t)c->n_slots, sizeof *c->stamp);
    c->state = calloc((size_t)c->n_slots, 1);
    c->ref = calloc((size_t)c->n_slots, 1);
    void *mem = NULL;
    if (c->slot_of && c->owner && c->stamp && c->state && c->ref) {
        if (p->alloc) {
            if ((rc = p->alloc(p->alloc_arg, c->n_slots, c->h.stride, c->h.align, &mem)))
                goto fail;
        } else if (posix_memalign(&mem, c->h.align, (size_t)c->n_slots * c->h.stride)) {
            mem = NULL;
        } else {
            c->own_mem = true;
        }
    }
    if (!mem) {
        rc = pi_fail(PI_E_NOMEM, "ncache: cannot allocate %lld slots of %llu bytes", (long long)c->n_slots,
                     (unsigned long long)c->h.stride);
        goto fail;
    }
    for (int64_t k = 0; k < L * F; k++)
        c->slot_of[k] = p->tier[k] == PI_TIER_RAM ? -2 : -1; /* -2: to pin */
    for (int64_t s = 0; s < c->n_slots; s++)
        c->owner[s] = -1;
    c->window_steps = (uint64_t)(p->window > 0 ? p->window : 1) * (uint64_t)L;
    /* a layer is read densely when at least half its neurons are missing (PINFER_NCACHE_DENSE: another
     * fraction; above 1: never) */
    const char *dense = getenv(NCACHE_ENV_DENSE);
    const double df = dense ? strtod(dense, NULL) : NCACHE_DENSE_DEFAULT;
    c->dense_min = df > 1.0 || df < 0.0 ? 0 : (int64_t)(df * (double)F) > 1 ? (int64_t)(df * (double)F) : 1;
    const char *fail = getenv(NCACHE_ENV_FAIL_READ);
    c->fail_at = fail ? strtoull(fail, NULL, 10) : 0;
    c->mem = mem;
    if ((rc = load_pinned(c)))
        goto fail;
    /* only the window takes reads after open (a registered buffer is at most 1 GiB: the pinned
     * region would often not fit) */
    if (c->io && c->io->register_mem &&
        (rc = c->io->register_mem(c->io->ctx, slot_mem(c, c->n_pinned), (size_t)p->window_slots * c->h.stride)))
        goto fail;
    c->st.pinned = (uint64_t)c->n_pinned;
    c->st.slots = (uint64_t)p->window_slots;
    c->st.pinned_bytes = (uint64_t)c->n_pinned * c->h.stride;
    c->st.cache_bytes = (uint64_t)p->window_slots * c->h.stride;
    *out = c;
    return 0;
fail:
    ncache_free(c);
    return rc;
}

void ncache_free(struct ncache *c)
{
    if (!c)
        return;
    while (c->io && c->st.in_flight > 0 && c->io->reap(c->io->ctx, 1, complete, c) == 0)
        ; /* no read may land in freed memory */
    if (c->io && c->io->register_mem && c->mem)
        c->io->register_mem(c->io->ctx, NULL, 0);
    if (c->fd >= 0)
        close(c->fd);
    if (c->own_mem)
        free(c->mem);
    free(c->slot_of);
    free(c->owner);
    free(c->stamp);
    free(c->state);
    free(c->ref);
    free(c);
}
