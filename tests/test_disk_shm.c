/* test_disk_shm — the disk tier's request protocol between cpud and loaderd (ipc/ncache_shm.h,
 * cpud/disk_io.c), in one process: a thread plays loaderd.
 *  - no loaderd: cpud reads every request itself (the fallback counter moves);
 *  - a live loaderd: it takes the queued requests (claim CAS) and completes them, cpud reads none;
 *  - a dead loaderd (a reaped child's pid) holding a claim and leaving one queued: cpud takes both
 *    over and reads them;
 *  - a restarted loaderd skips the stale ring entries of requests cpud read itself, and serves the
 *    new ones; a stale entry of a reused slot is served with the slot's current request (its bytes
 *    and its tag are cpud's);
 *  - each read lands the file's bytes at the request's place. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "disk_io.h"
#include "pi_err.h"
#include "testutil.h"

#define SLOTS 16
#define REC 4096

static char inst[32];
static int file_fd = -1;
static uint8_t pattern[SLOTS * 4 * REC];

struct got {
    int n;
    uint64_t tag[64];
    int res[64];
};

static void on_done(void *arg, uint64_t tag, int res)
{
    struct got *g = arg;
    if (g->n < 64) {
        g->tag[g->n] = tag;
        g->res[g->n] = res;
    }
    g->n++;
}

/* the "loaderd": serves sq with pread until stop */
struct fake_loader {
    struct ncshm_view v;
    _Atomic int stop;
    _Atomic int served, skipped;
};

static void *loader_main(void *arg)
{
    struct fake_loader *L = arg;
    const int32_t me = (int32_t)getpid();
    while (!atomic_load(&L->stop)) {
        const void *msg;
        uint32_t len;
        if (ring_peek(&L->v.sq, &msg, &len)) {
            ring_wait_readable(&L->v.sq, 5);
            continue;
        }
        uint64_t tag;
        memcpy(&tag, msg, sizeof tag);
        struct ncshm_rec *r = &L->v.rec[NCACHE_TAG_SLOT(tag)];
        int32_t c = NCSHM_QUEUED;
        if (atomic_compare_exchange_strong(&r->claim, &c, me)) {
            ring_release(&L->v.sq);
            const int res = (int)pread(file_fd, L->v.seg.base + r->dst, r->len, (off_t)r->off);
            const struct ncshm_done d = { .tag = tag, .res = res };
            ring_push(&L->v.cq, &d, sizeof d, 1000);
            atomic_fetch_add(&L->served, 1);
        } else {
            ring_release(&L->v.sq);
            atomic_fetch_add(&L->skipped, 1);
        }
    }
    return NULL;
}

static void loader_start(struct fake_loader *L, pthread_t *t, struct pi_ctl *ctl, struct disk_io *d)
{
    memset(L, 0, sizeof *L);
    REQUIRE(ncshm_attach(&L->v, inst, false) == 0, "attach the segment as loaderd: %s", pi_errmsg());
    atomic_store(&ctl->stages[PI_STAGE_LOADERD].pid, (int32_t)getpid());
    atomic_store(&ctl->stages[PI_STAGE_LOADERD].state, PI_STAGE_READY);
    atomic_store(&d->v.hdr->loader_pid, (int32_t)getpid());
    REQUIRE(pthread_create(t, NULL, loader_main, L) == 0, "thread");
}

static void loader_stop(struct fake_loader *L, pthread_t t)
{
    atomic_store(&L->stop, 1);
    pthread_join(t, NULL);
    ncshm_detach(&L->v);
}

static int submit(struct disk_io *d, int64_t slot, uint32_t n, uint64_t rec)
{
    return d->io.submit(d->io.ctx, file_fd, d->v.mem + (size_t)slot * REC, rec * REC, n * REC,
                        (uint64_t)slot | (uint64_t)n << 32);
}

/* every completion in g is the full length and the slot holds the file's bytes */
static void check_data(struct disk_io *d, const struct got *g, const uint64_t *rec_of_slot, const char *what)
{
    for (int i = 0; i < g->n && i < 64; i++) {
        const int64_t s = NCACHE_TAG_SLOT(g->tag[i]);
        const uint32_t n = NCACHE_TAG_COUNT(g->tag[i]);
        CHECK(g->res[i] == (int)(n * REC), "%s: slot %lld read %d bytes, wanted %u", what, (long long)s, g->res[i],
              n * REC);
        CHECK(!memcmp(d->v.mem + (size_t)s * REC, pattern + rec_of_slot[s] * REC, (size_t)n * REC),
              "%s: slot %lld holds the wrong bytes", what, (long long)s);
    }
}

int main(void)
{
    snprintf(inst, sizeof inst, "tdshm%d", (int)getpid());
    char path[] = "/tmp/pinfer-dshmXXXXXX";
    file_fd = mkstemp(path);
    REQUIRE(file_fd >= 0, "mkstemp");
    for (size_t i = 0; i < sizeof pattern; i++)
        pattern[i] = (uint8_t)(i * 131 + i / REC);
    REQUIRE(write(file_fd, pattern, sizeof pattern) == (ssize_t)sizeof pattern, "write the file");
    struct pi_ctl *ctl = calloc(1, sizeof *ctl);
    REQUIRE(ctl, "ctl");
    struct disk_io d;
    disk_io_init(&d, ctl, inst, path);
    void *mem = NULL;
    REQUIRE(disk_io_alloc(&d, SLOTS, REC, 4096, &mem) == 0 && mem == d.v.mem, "create the segment: %s", pi_errmsg());
    CHECK(atomic_load(&ctl->ncache_gen) == d.v.hdr->gen && d.v.hdr->gen, "the generation is published");
    uint64_t rec_of[SLOTS] = { 0 };

    /* 1. no loaderd: cpud reads itself */
    struct got g = { 0 };
    rec_of[0] = 5, rec_of[1] = 9;
    CHECK_OK(submit(&d, 0, 1, 5));
    CHECK_OK(submit(&d, 1, 2, 9)); /* slots 1, 2 = records 9, 10 */
    CHECK_OK(d.io.reap(d.io.ctx, 2, on_done, &g));
    CHECK(g.n == 2 && d.fallback_reads == 2 && d.n_out == 0, "no loaderd: %d done, %llu fallback reads", g.n,
          (unsigned long long)d.fallback_reads);
    check_data(&d, &g, rec_of, "no loaderd");

    /* 2. a live loaderd serves everything */
    struct fake_loader L;
    pthread_t t;
    loader_start(&L, &t, ctl, &d);
    g.n = 0;
    for (int s = 3; s < 8; s++) {
        rec_of[s] = (uint64_t)(20 + s);
        CHECK_OK(submit(&d, s, 1, 20 + (uint64_t)s));
    }
    CHECK_OK(d.io.reap(d.io.ctx, 5, on_done, &g));
    CHECK(g.n == 5 && d.fallback_reads == 2 && atomic_load(&L.served) == 5, "live loaderd: %d done, %llu fallback, %d served",
          g.n, (unsigned long long)d.fallback_reads, atomic_load(&L.served));
    check_data(&d, &g, rec_of, "live loaderd");
    loader_stop(&L, t);

    /* 3. a dead loaderd: it took slot 8's request and died; slot 9's is still queued */
    pid_t child = fork();
    if (child == 0)
        _exit(0);
    REQUIRE(child > 0 && waitpid(child, NULL, 0) == child, "a dead pid");
    atomic_store(&ctl->stages[PI_STAGE_LOADERD].pid, (int32_t)child);
    atomic_store(&d.v.hdr->loader_pid, (int32_t)child);
    rec_of[8] = 40, rec_of[9] = 41;
    CHECK_OK(submit(&d, 8, 1, 40));
    CHECK_OK(submit(&d, 9, 1, 41));
    CHECK(d.n_out == 2, "both went to loaderd's ring (%lld)", (long long)d.n_out);
    int32_t c = NCSHM_QUEUED;
    CHECK(atomic_compare_exchange_strong(&d.v.rec[8].claim, &c, (int32_t)child), "the dead loaderd's claim");
    g.n = 0;
    CHECK_OK(d.io.reap(d.io.ctx, 2, on_done, &g));
    CHECK(g.n == 2 && d.fallback_reads == 4 && d.n_out == 0, "dead loaderd: %d done, %llu fallback reads", g.n,
          (unsigned long long)d.fallback_reads);
    check_data(&d, &g, rec_of, "dead loaderd");

    /* 4. the restarted loaderd: the two stale entries (slots 8, 9: read by cpud) are skipped; slot 8
     * reused for another record is served (through the stale entry or its own: either way the
     * current request, with cpud's tag) */
    loader_start(&L, &t, ctl, &d);
    rec_of[8] = 50;
    g.n = 0;
    CHECK_OK(submit(&d, 8, 1, 50));
    CHECK_OK(d.io.reap(d.io.ctx, 1, on_done, &g));
    CHECK(g.n == 1 && g.tag[0] == (8u | 1ull << 32) && d.fallback_reads == 4, "restarted loaderd: %d done, tag %llx",
          g.n, (unsigned long long)g.tag[0]);
    check_data(&d, &g, rec_of, "restarted loaderd");
    usleep(20000); /* let the loader drain the ring */
    CHECK(atomic_load(&L.served) == 1 && atomic_load(&L.skipped) == 2, "served %d, skipped %d stale",
          atomic_load(&L.served), atomic_load(&L.skipped));
    g.n = 0;
    CHECK_OK(d.io.reap(d.io.ctx, 0, on_done, &g));
    CHECK(g.n == 0, "no duplicate completion (%d)", g.n);
    loader_stop(&L, t);

    char name[SHM_NAME_CAP];
    disk_io_fini(&d);
    CHECK(atomic_load(&ctl->ncache_gen) == 0, "fini withdraws the generation");
    if (shm_name(name, sizeof name, geteuid(), inst, NCSHM_SEG) == 0)
        shm_remove(name);
    free(ctl);
    close(file_fd);
    unlink(path);
    return tu_finish("disk_shm");
}
