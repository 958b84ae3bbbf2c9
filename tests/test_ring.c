/* test_ring.c — SPSC ring: geometry and header validation, single-thread semantics (full, empty,
 * wrap of the free-running indices), timeouts, then stress tests with two threads and with two
 * processes, on both the spinning and the futex (spin limit 0) paths. Every message carries a
 * sequence number, a varying length and a pattern derived from both, so a lost, duplicated,
 * reordered or torn message fails the test.
 *
 * Usage: test_ring [--quick]   (--quick: fewer messages, for the ThreadSanitizer build) */
#include "pi_err.h"
#include "ring.h"
#include "shm.h"
#include "testutil.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SEQ_BYTES 8                /* every stress message starts with its u64 sequence number */
#define TIMEOUT_MS 50              /* the timeout under test */
#define TIMEOUT_SLACK_MS 500       /* "promptly": generous for a loaded 2-core machine */
#define STRESS_TIMEOUT_MS 10000    /* a stuck stress test fails instead of hanging */

static long n_spin_msgs = 1000000;   /* per stress run; --quick divides these */
static long n_sleep_msgs = 200000;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void *alloc_ring(uint32_t n_slots, uint32_t slot_size, size_t *size)
{
    *size = ring_bytes(n_slots, slot_size);
    void *mem = NULL;
    REQUIRE(*size && posix_memalign(&mem, PI_CACHE_LINE, *size) == 0, "allocate ring");
    memset(mem, 0xa5, *size); /* ring_init must not rely on zeroed memory */
    return mem;
}

/* ---- message pattern ---- */

static uint32_t msg_len(uint64_t seq, uint32_t slot_size)
{
    return SEQ_BYTES + (uint32_t)((seq * 7919u) % (slot_size - SEQ_BYTES + 1));
}

static void msg_fill(unsigned char *p, uint64_t seq, uint32_t len)
{
    memcpy(p, &seq, SEQ_BYTES);
    for (uint32_t i = SEQ_BYTES; i < len; i++)
        p[i] = (unsigned char)(seq * 31u + i);
}

/* 0 if p/len is message `seq`, else a description in why. */
static int msg_check(const unsigned char *p, uint32_t len, uint64_t seq, uint32_t slot_size, char *why, size_t cap)
{
    uint64_t got;
    if (len < SEQ_BYTES) {
        snprintf(why, cap, "message %llu: length %u", (unsigned long long)seq, len);
        return 1;
    }
    memcpy(&got, p, SEQ_BYTES);
    if (got != seq) {
        snprintf(why, cap, "expected message %llu, got %llu", (unsigned long long)seq, (unsigned long long)got);
        return 1;
    }
    if (len != msg_len(seq, slot_size)) {
        snprintf(why, cap, "message %llu: length %u, expected %u", (unsigned long long)seq, len,
                 msg_len(seq, slot_size));
        return 1;
    }
    for (uint32_t i = SEQ_BYTES; i < len; i++)
        if (p[i] != (unsigned char)(seq * 31u + i)) {
            snprintf(why, cap, "message %llu: byte %u corrupt", (unsigned long long)seq, i);
            return 1;
        }
    return 0;
}

/* ---- geometry and validation ---- */

static void test_geometry(void)
{
    CHECK(ring_bytes(0, 8) == 0, "0 slots");
    CHECK(ring_bytes(3, 8) == 0, "3 slots is not a power of two");
    CHECK(ring_bytes(4, 0) == 0, "slot size 0");
    CHECK(ring_bytes(RING_MAX_SLOTS * 2u, 8) == 0, "too many slots");
    CHECK(ring_bytes(1, 8) == sizeof(struct ring_hdr) + PI_CACHE_LINE, "one slot is one line");
    CHECK(ring_bytes(4, 56) == sizeof(struct ring_hdr) + 4 * PI_CACHE_LINE, "8 + 56 fits one line");
    CHECK(ring_bytes(4, 57) == sizeof(struct ring_hdr) + 8 * PI_CACHE_LINE, "8 + 57 needs two lines");

    size_t size;
    unsigned char *mem = alloc_ring(8, 64, &size);
    CHECK(ring_init(mem, size, 6, 64) == -PI_E_INVAL, "init with 6 slots");
    CHECK(ring_init(mem, size - 1, 8, 64) == -PI_E_INVAL, "init with a short region");
    CHECK(ring_init(mem + 8, size - 8, 4, 8) == -PI_E_INVAL, "init misaligned");

    struct ring r;
    CHECK(ring_attach(&r, mem, size) == -PI_E_FORMAT, "attach before init: %s", pi_errmsg());
    CHECK_OK(ring_init(mem, size, 8, 64));
    CHECK_OK(ring_attach(&r, mem, size));
    CHECK(r.n_slots == 8 && r.slot_size == 64, "geometry %u x %u", r.n_slots, r.slot_size);
    CHECK(ring_attach(&r, mem, size - 1) == -PI_E_FORMAT, "attach with a short region");
    CHECK(ring_attach(&r, mem, 100) == -PI_E_FORMAT, "attach with a region smaller than the header");

    struct ring_hdr *h = (struct ring_hdr *)mem;
    h->n_slots = 6;
    CHECK(ring_attach(&r, mem, size) == -PI_E_FORMAT && strstr(pi_errmsg(), "n_slots"), "bad n_slots: %s",
          pi_errmsg());
    h->n_slots = 8;
    h->slot_stride += PI_CACHE_LINE;
    CHECK(ring_attach(&r, mem, size) == -PI_E_FORMAT && strstr(pi_errmsg(), "slot_stride"), "bad stride: %s",
          pi_errmsg());
    h->slot_stride -= PI_CACHE_LINE;
    atomic_store(&h->tail, 9);
    CHECK(ring_attach(&r, mem, size) == -PI_E_FORMAT && strstr(pi_errmsg(), "tail"), "9 messages in 8 slots: %s",
          pi_errmsg());
    atomic_store(&h->tail, 0);
    h->version = 99;
    CHECK(ring_attach(&r, mem, size) == -PI_E_FORMAT && strstr(pi_errmsg(), "version"), "bad version: %s",
          pi_errmsg());
    h->version = PI_RING_VERSION;
    atomic_store(&h->magic, 0x12345678u);
    CHECK(ring_attach(&r, mem, size) == -PI_E_FORMAT && strstr(pi_errmsg(), "magic"), "bad magic: %s",
          pi_errmsg());
    free(mem);
}

/* ---- single thread ---- */

/* Fill, drain, interleave; start_idx exercises the wrap of the u32 indices. */
static void test_single(uint32_t start_idx)
{
    enum { N_SLOTS = 8, SLOT = 48 };
    size_t size;
    void *mem = alloc_ring(N_SLOTS, SLOT, &size);
    REQUIRE(ring_init(mem, size, N_SLOTS, SLOT) == 0, "init");
    CHECK_OK(ring_test_set_index(mem, start_idx));
    struct ring p, c;
    REQUIRE(ring_attach(&p, mem, size) == 0 && ring_attach(&c, mem, size) == 0, "attach");

    unsigned char buf[SLOT + 16];
    const void *msg;
    uint32_t len;
    CHECK(ring_peek(&c, &msg, &len) == -EAGAIN, "empty ring peeks -EAGAIN");
    CHECK(ring_pop(&c, buf, sizeof buf, 0) == -ETIMEDOUT, "pop on empty with timeout 0");
    CHECK(ring_commit(&p, 1) == -PI_E_INVAL, "commit without reserve");

    uint64_t next_push = 0, next_pop = 0;
    char why[128];
    /* rounds of: fill completely, check full, drain some: crosses 2^32 when start_idx is near it */
    for (int round = 0; round < 6; round++) {
        while (ring_count(&p) < N_SLOTS) {
            uint32_t l = msg_len(next_push, SLOT);
            msg_fill(buf, next_push, l);
            CHECK_OK(ring_push(&p, buf, l, 0));
            next_push++;
        }
        CHECK(ring_reserve(&p) == NULL, "full ring: reserve is NULL");
        CHECK(ring_push(&p, buf, 8, 0) == -ETIMEDOUT, "push on full with timeout 0");
        int drain = round % 2 ? N_SLOTS : 3;
        for (int i = 0; i < drain; i++) {
            int n = ring_pop(&c, buf, sizeof buf, 0);
            CHECK(n >= 0 && msg_check(buf, (uint32_t)n, next_pop, SLOT, why, sizeof why) == 0, "pop %d: %s", n,
                  n >= 0 ? why : pi_strerror(n));
            next_pop++;
        }
    }
    uint32_t tail = atomic_load(&p.hdr->tail);
    CHECK(tail - start_idx == next_push, "tail advanced by %llu", (unsigned long long)next_push);
    if (start_idx > UINT32_MAX - 100)
        CHECK(tail < start_idx, "indices wrapped (tail %u, start %u)", tail, start_idx);

    /* zero-copy path */
    while (ring_count(&c) > 0)
        CHECK(ring_pop(&c, buf, sizeof buf, 0) >= 0, "drain");
    unsigned char *slot = ring_reserve(&p);
    REQUIRE(slot != NULL, "reserve on empty ring");
    CHECK((uintptr_t)slot % 8 == 0, "payload 8-byte aligned");
    CHECK(ring_reserve(&p) == slot, "reserve twice gives the same slot");
    memset(slot, 0x5c, SLOT);
    CHECK(ring_commit(&p, SLOT + 1) == -EMSGSIZE, "commit longer than slot");
    CHECK(ring_peek(&c, &msg, &len) == -EAGAIN, "nothing published by a refused commit");
    CHECK_OK(ring_commit(&p, SLOT));
    CHECK(ring_commit(&p, SLOT) == -PI_E_INVAL, "second commit without reserve");
    REQUIRE(ring_peek(&c, &msg, &len) == 0, "peek");
    CHECK(len == SLOT && ((const unsigned char *)msg)[SLOT - 1] == 0x5c, "zero-copy contents");
    CHECK(ring_peek(&c, &msg, &len) == 0 && ring_count(&c) == 1, "peek does not consume");
    ring_release(&c);
    CHECK(ring_count(&c) == 0, "release consumes");
    ring_release(&c); /* no-op on empty */
    CHECK(ring_count(&c) == 0 && atomic_load(&c.hdr->head) == atomic_load(&c.hdr->tail), "release on empty");

    /* sizes */
    CHECK(ring_push(&p, buf, SLOT + 1, 0) == -EMSGSIZE, "push larger than slot");
    CHECK_OK(ring_push(&p, buf, 0, 0));
    CHECK(ring_pop(&c, buf, sizeof buf, 0) == 0, "empty message pops length 0");
    msg_fill(buf, 7, SLOT);
    CHECK_OK(ring_push(&p, buf, SLOT, 0));
    CHECK(ring_pop(&c, buf, SLOT - 1, 0) == -EMSGSIZE, "pop into a short buffer");
    CHECK(ring_count(&c) == 1, "message stays after -EMSGSIZE");
    CHECK(ring_pop(&c, buf, SLOT, 0) == SLOT, "then pops with a big enough buffer");

    /* a corrupt length from a faulty producer: error, dropped, the stream goes on */
    CHECK_OK(ring_push(&p, buf, 8, 0));
    CHECK_OK(ring_push(&p, buf, 9, 0));
    struct ring_slot *s = (struct ring_slot *)((unsigned char *)mem + sizeof(struct ring_hdr) +
                                               (size_t)(c.head & c.mask) * c.stride);
    s->len = 1u << 20;
    CHECK(ring_pop(&c, buf, sizeof buf, 0) == -PI_E_FORMAT, "corrupt length refused: %s", pi_errmsg());
    CHECK(ring_pop(&c, buf, sizeof buf, 0) == 9, "next message after the corrupt one");
    free(mem);
}

static void test_timeouts(uint32_t spin)
{
    size_t size;
    void *mem = alloc_ring(2, 16, &size);
    REQUIRE(ring_init(mem, size, 2, 16) == 0, "init");
    struct ring p, c;
    REQUIRE(ring_attach(&p, mem, size) == 0 && ring_attach(&c, mem, size) == 0, "attach");
    ring_set_spin(&p, spin);
    ring_set_spin(&c, spin);
    char buf[16] = {0};

    double t0 = now_ms();
    int rc = ring_pop(&c, buf, sizeof buf, TIMEOUT_MS);
    double dt = now_ms() - t0;
    CHECK(rc == -ETIMEDOUT, "pop on empty: %d", rc);
    CHECK(dt >= TIMEOUT_MS - 1 && dt < TIMEOUT_MS + TIMEOUT_SLACK_MS, "pop timed out after %.1f ms (spin %u)", dt,
          spin);
    CHECK(ring_wait_readable(&c, 0) == -ETIMEDOUT, "wait_readable with timeout 0");

    CHECK_OK(ring_push(&p, buf, 4, 0));
    CHECK_OK(ring_push(&p, buf, 4, 0));
    t0 = now_ms();
    rc = ring_push(&p, buf, 4, TIMEOUT_MS);
    dt = now_ms() - t0;
    CHECK(rc == -ETIMEDOUT, "push on full: %d", rc);
    CHECK(dt >= TIMEOUT_MS - 1 && dt < TIMEOUT_MS + TIMEOUT_SLACK_MS, "push timed out after %.1f ms (spin %u)", dt,
          spin);
    CHECK(ring_wait_writable(&p, 0) == -ETIMEDOUT, "wait_writable with timeout 0");
    struct ring_stats st;
    ring_get_stats(&p, &st);
    CHECK(st.used == 2 && st.n_slots == 2, "stats used %u", st.used);
    CHECK(st.prod_wait_ns >= TIMEOUT_MS * 1000000ull * 9 / 10, "producer wait time recorded: %llu ns",
          (unsigned long long)st.prod_wait_ns);
    CHECK(st.cons_wait_ns >= TIMEOUT_MS * 1000000ull * 9 / 10, "consumer wait time recorded: %llu ns",
          (unsigned long long)st.cons_wait_ns);
    if (spin == 0)
        CHECK(st.prod_waits >= 1 && st.cons_waits >= 1, "futex waits recorded: %llu / %llu",
              (unsigned long long)st.prod_waits, (unsigned long long)st.cons_waits);
    free(mem);
}

/* ---- wake-up of a sleeping side (deterministic: we wait until it announced sleeping) ---- */

struct waker_arg {
    struct ring *r;
    int rc;
};

static void *pop_one(void *arg)
{
    struct waker_arg *a = arg;
    char buf[16];
    a->rc = ring_pop(a->r, buf, sizeof buf, STRESS_TIMEOUT_MS);
    return NULL;
}

static void *push_one(void *arg)
{
    struct waker_arg *a = arg;
    char buf[16] = {0};
    a->rc = ring_push(a->r, buf, 4, STRESS_TIMEOUT_MS);
    return NULL;
}

static void wait_flag(_Atomic uint32_t *flag)
{
    double t0 = now_ms();
    while (atomic_load_explicit(flag, memory_order_relaxed) == 0 && now_ms() - t0 < STRESS_TIMEOUT_MS)
        usleep(1000);
    usleep(5000); /* usually inside FUTEX_WAIT by now; correct either way */
}

static void test_wakeups(void)
{
    size_t size;
    void *mem = alloc_ring(1, 16, &size);
    REQUIRE(ring_init(mem, size, 1, 16) == 0, "init");
    struct ring p, c;
    REQUIRE(ring_attach(&p, mem, size) == 0 && ring_attach(&c, mem, size) == 0, "attach");
    ring_set_spin(&p, 0);
    ring_set_spin(&c, 0);
    char buf[16] = {0};
    pthread_t th;

    /* consumer sleeps on empty, producer's commit wakes it */
    struct waker_arg a = {&c, 1};
    REQUIRE(pthread_create(&th, NULL, pop_one, &a) == 0, "thread");
    wait_flag(&p.hdr->cons_sleeping);
    CHECK_OK(ring_push(&p, buf, 4, 0));
    pthread_join(th, NULL);
    CHECK(a.rc == 4, "sleeping consumer woken: %d", a.rc);

    /* producer sleeps on full, consumer's release wakes it */
    CHECK_OK(ring_push(&p, buf, 4, 0));
    struct waker_arg b = {&p, 1};
    REQUIRE(pthread_create(&th, NULL, push_one, &b) == 0, "thread");
    wait_flag(&p.hdr->prod_sleeping);
    CHECK(ring_pop(&c, buf, sizeof buf, 0) == 4, "pop");
    pthread_join(th, NULL);
    CHECK(b.rc == 0, "sleeping producer woken: %d", b.rc);

    struct ring_stats st;
    ring_get_stats(&p, &st);
    CHECK(st.cons_waits >= 1 && st.prod_wakes >= 1, "consumer slept %llu, producer woke it %llu",
          (unsigned long long)st.cons_waits, (unsigned long long)st.prod_wakes);
    CHECK(st.prod_waits >= 1 && st.cons_wakes >= 1, "producer slept %llu, consumer woke it %llu",
          (unsigned long long)st.prod_waits, (unsigned long long)st.cons_wakes);
    CHECK(atomic_load(&p.hdr->cons_sleeping) == 0 && atomic_load(&p.hdr->prod_sleeping) == 0, "flags cleared");
    free(mem);
}

/* ---- stress: producer and consumer ---- */

struct stress {
    struct ring *r;
    long n;
    int zero_copy;     /* consumer alternates pop and peek/release */
    long errors;
    char why[160];
};

static void *stress_produce(void *arg)
{
    struct stress *s = arg;
    unsigned char buf[4096];
    for (long i = 0; i < s->n; i++) {
        uint32_t l = msg_len((uint64_t)i, s->r->slot_size);
        if (i % 3 == 0) { /* zero-copy every third message */
            if (ring_wait_writable(s->r, STRESS_TIMEOUT_MS) != 0)
                goto fail;
            unsigned char *p = ring_reserve(s->r);
            if (!p)
                goto fail;
            msg_fill(p, (uint64_t)i, l);
            if (ring_commit(s->r, l) != 0)
                goto fail;
        } else {
            msg_fill(buf, (uint64_t)i, l);
            if (ring_push(s->r, buf, l, STRESS_TIMEOUT_MS) != 0)
                goto fail;
        }
        continue;
    fail:
        s->errors++;
        snprintf(s->why, sizeof s->why, "producer stuck at message %ld: %s", i, pi_errmsg());
        return NULL;
    }
    return NULL;
}

static void *stress_consume(void *arg)
{
    struct stress *s = arg;
    unsigned char buf[4096];
    for (long i = 0; i < s->n; i++) {
        if (s->zero_copy && i % 2) {
            const void *msg;
            uint32_t len;
            if (ring_wait_readable(s->r, STRESS_TIMEOUT_MS) != 0 || ring_peek(s->r, &msg, &len) != 0) {
                s->errors++;
                snprintf(s->why, sizeof s->why, "consumer stuck at message %ld", i);
                return NULL;
            }
            if (msg_check(msg, len, (uint64_t)i, s->r->slot_size, s->why, sizeof s->why)) {
                s->errors++;
                return NULL;
            }
            ring_release(s->r);
        } else {
            int n = ring_pop(s->r, buf, sizeof buf, STRESS_TIMEOUT_MS);
            if (n < 0) {
                s->errors++;
                snprintf(s->why, sizeof s->why, "consumer stuck at message %ld: %s", i, pi_strerror(n));
                return NULL;
            }
            if (msg_check(buf, (uint32_t)n, (uint64_t)i, s->r->slot_size, s->why, sizeof s->why)) {
                s->errors++;
                return NULL;
            }
        }
    }
    return NULL;
}

static void test_threads(uint32_t n_slots, uint32_t slot_size, uint32_t spin, long n, uint32_t start_idx)
{
    size_t size;
    void *mem = alloc_ring(n_slots, slot_size, &size);
    REQUIRE(ring_init(mem, size, n_slots, slot_size) == 0, "init");
    CHECK_OK(ring_test_set_index(mem, start_idx));
    struct ring p, c;
    REQUIRE(ring_attach(&p, mem, size) == 0 && ring_attach(&c, mem, size) == 0, "attach");
    ring_set_spin(&p, spin);
    ring_set_spin(&c, spin);
    struct stress ps = {.r = &p, .n = n}, cs = {.r = &c, .n = n, .zero_copy = 1};
    pthread_t tp, tc;
    double t0 = now_ms();
    REQUIRE(pthread_create(&tc, NULL, stress_consume, &cs) == 0, "consumer thread");
    REQUIRE(pthread_create(&tp, NULL, stress_produce, &ps) == 0, "producer thread");
    pthread_join(tp, NULL);
    pthread_join(tc, NULL);
    double dt = now_ms() - t0;
    CHECK(ps.errors == 0, "threads %u slots spin %u: %s", n_slots, spin, ps.why);
    CHECK(cs.errors == 0, "threads %u slots spin %u: %s", n_slots, spin, cs.why);
    CHECK(ring_count(&c) == 0, "ring drained");
    struct ring_stats st;
    ring_get_stats(&p, &st);
    fprintf(stderr, "threads: %ld msgs, %u slots x %u B, spin %u: %.0f ms; futex waits prod %llu cons %llu\n", n,
            n_slots, slot_size, spin, dt, (unsigned long long)st.prod_waits, (unsigned long long)st.cons_waits);
    free(mem);
}

/* Two processes: the ring lives in a real shm segment; the child attaches it by name, so it maps
 * it at a different address and only the offsets in the segment header can lead it there. */
static void test_processes(uint32_t spin, long n)
{
    enum { N_SLOTS = 16, SLOT = 200 };
    char inst[SHM_PART_MAX + 1];
    snprintf(inst, sizeof inst, "tring%ld", (long)getpid());
    size_t rbytes = ring_bytes(N_SLOTS, SLOT);
    size_t off = PI_CACHE_LINE * 2; /* after the 128-byte segment header */
    struct shm_seg seg;
    int rc = shm_create(&seg, inst, "ring", PI_SEG_KIND_TEST, off + rbytes);
    REQUIRE(rc == 0, "shm_create: %s", pi_errmsg());
    seg.hdr->offsets[0] = off;
    seg.hdr->n_offsets = 1;
    REQUIRE(ring_init(shm_at(&seg, off, rbytes), rbytes, N_SLOTS, SLOT) == 0, "ring_init");
    shm_publish(&seg);

    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        struct shm_seg cseg;
        struct ring c;
        struct stress cs = {.r = &c, .n = n, .zero_copy = 1};
        if (shm_attach(&cseg, inst, "ring", PI_SEG_KIND_TEST, 0) != 0 ||
            ring_attach(&c, shm_at(&cseg, cseg.hdr->offsets[0], rbytes), rbytes) != 0) {
            fprintf(stderr, "child attach: %s\n", pi_errmsg());
            _exit(2);
        }
        ring_set_spin(&c, spin);
        stress_consume(&cs);
        if (cs.errors)
            fprintf(stderr, "child: %s\n", cs.why);
        shm_detach(&cseg);
        _exit(cs.errors ? 1 : 0);
    }
    struct ring p;
    REQUIRE(ring_attach(&p, shm_at(&seg, off, rbytes), rbytes) == 0, "attach");
    ring_set_spin(&p, spin);
    struct stress ps = {.r = &p, .n = n};
    double t0 = now_ms();
    stress_produce(&ps);
    CHECK(ps.errors == 0, "processes spin %u: %s", spin, ps.why);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "consumer process failed (status 0x%x)", status);
    struct ring_stats st;
    ring_get_stats(&p, &st);
    fprintf(stderr, "processes: %ld msgs, spin %u: %.0f ms; futex waits prod %llu cons %llu\n", n, spin,
            now_ms() - t0, (unsigned long long)st.prod_waits, (unsigned long long)st.cons_waits);
    shm_detach(&seg);
    CHECK_OK(shm_remove(seg.name));
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--quick") == 0) {
        n_spin_msgs /= 10;
        n_sleep_msgs /= 4;
    }
    test_geometry();
    test_single(0);
    test_single(UINT32_MAX - 12); /* wraps during the rounds */
    test_timeouts(RING_SPIN_DEFAULT);
    test_timeouts(0);
    /* processes before threads: a fork after threads ran is fine here, but keep it simple for TSan */
    test_processes(RING_SPIN_DEFAULT, n_spin_msgs / 2);
    test_processes(0, n_sleep_msgs / 2);
    test_wakeups();
    test_threads(64, 256, RING_SPIN_DEFAULT, n_spin_msgs, UINT32_MAX - 1000);
    test_threads(4, 100, 0, n_sleep_msgs, UINT32_MAX - 3);
    test_threads(1, 64, 0, n_sleep_msgs / 4, 0);
    return tu_finish("ring");
}
