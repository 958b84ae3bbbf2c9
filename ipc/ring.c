/* ring.c — SPSC ring in shared memory (layout: ipc/layout.h, API: ipc/ring.h).
 *
 * Indices. tail (producer) and head (consumer) count messages since init, free-running u32; the
 * slot of index i is i & mask, the ring holds tail - head messages (unsigned arithmetic makes the
 * wrap at 2^32 harmless because n_slots divides 2^32). Each side keeps its own index in the
 * process-local struct ring and a cached copy of the other side's, so the fast path reads the
 * other side's cache line only when the cached value says empty/full.
 *
 * Orders (each release names the acquire it pairs with):
 *   R1 ring_commit: slot payload and len written, then store tail (seq_cst, hence release)
 *        -> A1 consumer: load tail (acquire: ring_peek, wait_change), then reads the slot.
 *   R2 ring_release: the consumer's reads of the slot, then store head (seq_cst, hence release)
 *        -> A2 producer: load head (acquire: ring_reserve, wait_change), then overwrites the slot.
 *   R3 ring_init: header fields written, then store magic (release)
 *        -> A3 ring_attach: load magic (acquire), then reads the fields.
 *
 * Sleeping without lost wake-ups (Dekker). A waiter (consumer on empty, producer on full) does
 *   S1 store its sleeping flag = 1 (seq_cst); S2 load the other side's index (seq_cst); if it has
 *   not moved, FUTEX_WAIT(flag, 1).
 * The waker (ring_commit / ring_release) does
 *   S3 store its index (seq_cst: R1/R2 above); S4 load the peer's flag (seq_cst); if 1, exchange
 *   it to 0 and FUTEX_WAKE.
 * S1..S4 are all seq_cst, so they sit in one total order consistent with program order: if the
 * waiter's S2 missed the waker's S3, then S1 < S2 < S3 < S4 and S4 sees the flag set, so the waker
 * wakes it. (Release/acquire alone would allow both loads to read the old values — the classic
 * store->load reordering — and the waiter would sleep through the message.) If the wake comes
 * between S2 and the futex call, the flag is already 0 and FUTEX_WAIT returns EAGAIN at once:
 * the kernel compares the word under its lock. Only the first commit after a sleep pays for the
 * wake syscall (it clears the flag). We use seq_cst operations rather than seq_cst fences because
 * ThreadSanitizer does not model atomic_thread_fence (gcc -Wtsan). */
#include "ring.h"

#include "pi_err.h"

#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cpu_relax.h"

/* Give the core away every this many polls: the dev machine has 2 cores shared by several stages,
 * so a spinning waiter must not starve the process it waits for. */
#define RING_YIELD_EVERY 64
#define NS_PER_MS 1000000ull
#define NS_PER_S 1000000000ull

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

/* Not FUTEX_*_PRIVATE: the waiter and the waker are usually different processes. */
static void futex_wait(_Atomic uint32_t *word, uint32_t expected, const struct timespec *rel)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, expected, rel, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, 1, NULL, NULL, 0);
}

static inline struct ring_slot *slot_at(const struct ring *r, uint32_t idx)
{
    return (struct ring_slot *)(r->slots + (size_t)(idx & r->mask) * r->stride);
}

static uint32_t stride_for(uint32_t slot_size)
{
    uint64_t s = sizeof(struct ring_slot) + (uint64_t)slot_size;
    return (uint32_t)((s + PI_CACHE_LINE - 1) / PI_CACHE_LINE * PI_CACHE_LINE);
}

static bool geometry_ok(uint32_t n_slots, uint32_t slot_size)
{
    return n_slots >= 1 && n_slots <= RING_MAX_SLOTS && (n_slots & (n_slots - 1)) == 0 && slot_size >= 1 &&
           slot_size <= RING_MAX_SLOT_SIZE;
}

size_t ring_bytes(uint32_t n_slots, uint32_t slot_size)
{
    if (!geometry_ok(n_slots, slot_size))
        return 0;
    return sizeof(struct ring_hdr) + (size_t)n_slots * stride_for(slot_size);
}

int ring_init(void *mem, size_t mem_size, uint32_t n_slots, uint32_t slot_size)
{
    if ((uintptr_t)mem % PI_CACHE_LINE)
        return pi_fail(PI_E_INVAL, "ring: memory %p is not %d-byte aligned", mem, PI_CACHE_LINE);
    size_t need = ring_bytes(n_slots, slot_size);
    if (need == 0)
        return pi_fail(PI_E_INVAL, "ring: n_slots %u must be a power of two in [1, %u] and slot_size %u in [1, %u]",
                       n_slots, RING_MAX_SLOTS, slot_size, RING_MAX_SLOT_SIZE);
    if (mem_size < need)
        return pi_fail(PI_E_INVAL, "ring: %u slots of %u bytes need %zu bytes, region has %zu", n_slots, slot_size,
                       need, mem_size);
    struct ring_hdr *h = mem;
    memset(h, 0, sizeof *h);
    h->version = PI_RING_VERSION;
    h->n_slots = n_slots;
    h->slot_size = slot_size;
    h->slot_stride = stride_for(slot_size);
    /* R3: publish after the fields (pairs with A3 in ring_attach). */
    atomic_store_explicit(&h->magic, PI_RING_MAGIC, memory_order_release);
    return 0;
}

int ring_attach(struct ring *r, void *mem, size_t mem_size)
{
    memset(r, 0, sizeof *r);
    if ((uintptr_t)mem % PI_CACHE_LINE)
        return pi_fail(PI_E_INVAL, "ring: memory %p is not %d-byte aligned", mem, PI_CACHE_LINE);
    if (mem_size < sizeof(struct ring_hdr))
        return pi_fail(PI_E_FORMAT, "ring: region of %zu bytes is smaller than the %zu-byte ring header", mem_size,
                       sizeof(struct ring_hdr));
    struct ring_hdr *h = mem;
    /* A3: pairs with R3 in ring_init; the geometry read below is the one that was published. */
    uint32_t magic = atomic_load_explicit(&h->magic, memory_order_acquire);
    if (magic != PI_RING_MAGIC)
        return pi_fail(PI_E_FORMAT, "ring: field magic is 0x%08x, expected 0x%08x", magic, PI_RING_MAGIC);
    if (h->version != PI_RING_VERSION)
        return pi_fail(PI_E_FORMAT, "ring: field version is %u, expected %u", h->version, PI_RING_VERSION);
    if (!geometry_ok(h->n_slots, h->slot_size))
        return pi_fail(PI_E_FORMAT, "ring: fields n_slots %u / slot_size %u: invalid geometry", h->n_slots,
                       h->slot_size);
    if (h->slot_stride != stride_for(h->slot_size))
        return pi_fail(PI_E_FORMAT, "ring: field slot_stride is %u, expected %u", h->slot_stride,
                       stride_for(h->slot_size));
    size_t need = ring_bytes(h->n_slots, h->slot_size);
    if (need > mem_size)
        return pi_fail(PI_E_FORMAT, "ring: %u slots of %u bytes need %zu bytes, region has %zu", h->n_slots,
                       h->slot_size, need, mem_size);
    /* Acquire both (A1, A2): we may start producing into slots the consumer just released, or
     * consuming slots the producer just committed. */
    uint32_t tail = atomic_load_explicit(&h->tail, memory_order_acquire);
    uint32_t head = atomic_load_explicit(&h->head, memory_order_acquire);
    if (tail - head > h->n_slots)
        return pi_fail(PI_E_FORMAT, "ring: fields head %u / tail %u: more than %u messages", head, tail, h->n_slots);
    r->hdr = h;
    r->slots = (unsigned char *)mem + sizeof *h;
    r->n_slots = h->n_slots;
    r->mask = h->n_slots - 1;
    r->slot_size = h->slot_size;
    r->stride = h->slot_stride;
    r->spin_limit = RING_SPIN_DEFAULT;
    r->tail = tail;
    r->head_cache = head;
    r->head = head;
    r->tail_cache = tail;
    return 0;
}

void ring_set_spin(struct ring *r, uint32_t spin_limit) { r->spin_limit = spin_limit; }

/* Wake the peer if it announced sleeping. Called right after our seq_cst index store (S3). */
static void wake_peer(_Atomic uint32_t *sleeping, _Atomic uint64_t *wakes)
{
    /* S4: seq_cst, see the header comment. */
    if (atomic_load_explicit(sleeping, memory_order_seq_cst) &&
        /* Relaxed: the flag carries no data (the index store S3 did); 0 means the waiter cleared it
         * itself and will recheck before sleeping again, so no wake is needed. */
        atomic_exchange_explicit(sleeping, 0, memory_order_relaxed)) {
        atomic_fetch_add_explicit(wakes, 1, memory_order_relaxed);
        futex_wake(sleeping);
    }
}

/* Wait until *idx != blocked (the other side moved): spin, then sleep on *sleeping. Returns 0 or
 * -ETIMEDOUT; *seen is the last value of *idx read, always with acquire (A1 or A2). */
static int wait_change(const struct ring *r, _Atomic uint32_t *idx, uint32_t blocked, _Atomic uint32_t *sleeping,
                       _Atomic uint64_t *waits, _Atomic uint64_t *wait_ns, int timeout_ms, uint32_t *seen)
{
    uint32_t v = atomic_load_explicit(idx, memory_order_acquire);
    if (v != blocked || timeout_ms == 0) {
        *seen = v;
        return v != blocked ? 0 : -ETIMEDOUT;
    }
    uint64_t t0 = now_ns();
    uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : t0 + (uint64_t)timeout_ms * NS_PER_MS;
    int rc = 0;
    for (uint32_t i = 1; i <= r->spin_limit; i++) {
        cpu_relax();
        v = atomic_load_explicit(idx, memory_order_acquire);
        if (v != blocked)
            goto done;
        if (i % RING_YIELD_EVERY == 0) {
            sched_yield();
            if (now_ns() >= deadline) {
                rc = -ETIMEDOUT;
                goto done;
            }
        }
    }
    for (;;) {
        atomic_store_explicit(sleeping, 1, memory_order_seq_cst);   /* S1 */
        v = atomic_load_explicit(idx, memory_order_seq_cst);        /* S2, also acquire (A1/A2) */
        if (v != blocked) {
            /* Relaxed: only saves the peer a needless wake; nothing is published by it. */
            atomic_store_explicit(sleeping, 0, memory_order_relaxed);
            break;
        }
        uint64_t now = now_ns();
        if (now >= deadline) {
            atomic_store_explicit(sleeping, 0, memory_order_relaxed);
            rc = -ETIMEDOUT;
            break;
        }
        struct timespec rel, *relp = NULL;
        if (deadline != UINT64_MAX) {
            uint64_t left = deadline - now;
            rel.tv_sec = (time_t)(left / NS_PER_S);
            rel.tv_nsec = (long)(left % NS_PER_S);
            relp = &rel;
        }
        atomic_fetch_add_explicit(waits, 1, memory_order_relaxed);
        /* Returns on a wake, EAGAIN (flag already cleared by the waker), EINTR or the timeout:
         * every case loops to the re-announce + recheck above. */
        futex_wait(sleeping, 1, relp);
    }
done:
    atomic_fetch_add_explicit(wait_ns, now_ns() - t0, memory_order_relaxed);
    *seen = v;
    return rc;
}

/* ---- producer ---- */

void *ring_reserve(struct ring *r)
{
    if (r->tail - r->head_cache >= r->n_slots) {
        /* A2: pairs with R2; the consumer is done reading the slots it released. */
        r->head_cache = atomic_load_explicit(&r->hdr->head, memory_order_acquire);
        if (r->tail - r->head_cache >= r->n_slots)
            return NULL;
    }
    r->reserved = true;
    return slot_at(r, r->tail) + 1;
}

int ring_commit(struct ring *r, uint32_t len)
{
    if (!r->reserved)
        return pi_fail(PI_E_INVAL, "ring: commit without a reserved slot");
    if (len > r->slot_size)
        return pi_fail(EMSGSIZE, "ring: message of %u bytes exceeds the slot size %u", len, r->slot_size);
    slot_at(r, r->tail)->len = len;
    r->reserved = false;
    r->tail++;
    /* R1 + S3: publishes the slot (pairs with A1) and is the waker's store of the Dekker pair. */
    atomic_store_explicit(&r->hdr->tail, r->tail, memory_order_seq_cst);
    wake_peer(&r->hdr->cons_sleeping, &r->hdr->prod_wakes);
    return 0;
}

int ring_wait_writable(struct ring *r, int timeout_ms)
{
    if (r->tail - r->head_cache < r->n_slots)
        return 0;
    /* Full means head == tail - n_slots; wait for head to move past that. */
    struct ring_hdr *h = r->hdr;
    return wait_change(r, &h->head, r->tail - r->n_slots, &h->prod_sleeping, &h->prod_waits, &h->prod_wait_ns,
                       timeout_ms, &r->head_cache);
}

int ring_push(struct ring *r, const void *msg, size_t len, int timeout_ms)
{
    if (len > r->slot_size)
        return pi_fail(EMSGSIZE, "ring: message of %zu bytes exceeds the slot size %u", len, r->slot_size);
    int rc = ring_wait_writable(r, timeout_ms);
    if (rc)
        return rc;
    void *p = ring_reserve(r);
    if (!p) /* head moved but the ring is still full: only corrupt indices do that */
        return pi_fail(PI_E_FORMAT, "ring: inconsistent indices (head %u, tail %u, %u slots)", r->head_cache,
                       r->tail, r->n_slots);
    memcpy(p, msg, len);
    return ring_commit(r, (uint32_t)len);
}

/* ---- consumer ---- */

int ring_peek(struct ring *r, const void **msg, uint32_t *len)
{
    if (r->head == r->tail_cache) {
        /* A1: pairs with R1; the slot's len and payload are visible. */
        r->tail_cache = atomic_load_explicit(&r->hdr->tail, memory_order_acquire);
        if (r->head == r->tail_cache)
            return -EAGAIN;
    }
    const struct ring_slot *s = slot_at(r, r->head);
    uint32_t n = s->len;
    if (n > r->slot_size)
        return pi_fail(PI_E_FORMAT, "ring: message %u has length %u, larger than the slot size %u", r->head, n,
                       r->slot_size);
    *msg = s + 1;
    *len = n;
    return 0;
}

void ring_release(struct ring *r)
{
    if (r->head == r->tail_cache)
        return;
    r->head++;
    /* R2 + S3: our reads of the slot happen before the producer reuses it (pairs with A2), and
     * the waker's store of the Dekker pair for a producer sleeping on a full ring. */
    atomic_store_explicit(&r->hdr->head, r->head, memory_order_seq_cst);
    wake_peer(&r->hdr->prod_sleeping, &r->hdr->cons_wakes);
}

int ring_wait_readable(struct ring *r, int timeout_ms)
{
    if (r->head != r->tail_cache)
        return 0;
    struct ring_hdr *h = r->hdr;
    return wait_change(r, &h->tail, r->head, &h->cons_sleeping, &h->cons_waits, &h->cons_wait_ns, timeout_ms,
                       &r->tail_cache);
}

int ring_pop(struct ring *r, void *msg, size_t cap, int timeout_ms)
{
    int rc = ring_wait_readable(r, timeout_ms);
    if (rc)
        return rc;
    const void *p;
    uint32_t len;
    rc = ring_peek(r, &p, &len);
    if (rc == -PI_E_FORMAT)
        ring_release(r); /* drop the corrupt slot so the stream goes on; the error says why */
    if (rc)
        return rc;
    if (len > cap)
        return pi_fail(EMSGSIZE, "ring: message of %u bytes does not fit the %zu-byte buffer", len, cap);
    memcpy(msg, p, len);
    ring_release(r);
    return (int)len;
}

/* ---- both ---- */

uint32_t ring_count(const struct ring *r)
{
    uint32_t tail = atomic_load_explicit(&r->hdr->tail, memory_order_acquire);
    uint32_t head = atomic_load_explicit(&r->hdr->head, memory_order_acquire);
    return tail - head;
}

void ring_get_stats(const struct ring *r, struct ring_stats *st)
{
    const struct ring_hdr *h = r->hdr;
    /* Relaxed throughout: counters for profiling, no data depends on them. */
    st->n_slots = r->n_slots;
    st->used = ring_count(r);
    st->prod_waits = atomic_load_explicit(&h->prod_waits, memory_order_relaxed);
    st->prod_wait_ns = atomic_load_explicit(&h->prod_wait_ns, memory_order_relaxed);
    st->prod_wakes = atomic_load_explicit(&h->prod_wakes, memory_order_relaxed);
    st->cons_waits = atomic_load_explicit(&h->cons_waits, memory_order_relaxed);
    st->cons_wait_ns = atomic_load_explicit(&h->cons_wait_ns, memory_order_relaxed);
    st->cons_wakes = atomic_load_explicit(&h->cons_wakes, memory_order_relaxed);
}

int ring_test_set_index(void *mem, uint32_t idx)
{
    struct ring_hdr *h = mem;
    uint32_t tail = atomic_load_explicit(&h->tail, memory_order_relaxed);
    uint32_t head = atomic_load_explicit(&h->head, memory_order_relaxed);
    if (tail != head)
        return pi_fail(PI_E_INVAL, "ring: test hook needs an empty ring (head %u, tail %u)", head, tail);
    /* Relaxed: the hook runs before any attach; the later attach's thread creation or fork orders it. */
    atomic_store_explicit(&h->tail, idx, memory_order_relaxed);
    atomic_store_explicit(&h->head, idx, memory_order_relaxed);
    return 0;
}
