/* ring.h — single-producer/single-consumer message ring inside shared memory.
 *
 * The ring (struct ring_hdr + slots, ipc/layout.h) lives in memory shared by two processes (or
 * threads) and contains no pointers; each side wraps it in its own process-local struct ring.
 * Exactly one producer and one consumer at a time. Messages are 0..slot_size bytes.
 *
 * Zero-copy use:
 *   producer:  void *p = ring_reserve(r);  (NULL: full)  write p;  ring_commit(r, len);
 *   consumer:  ring_peek(r, &p, &len) == 0 (else -EAGAIN: empty)  read p;  ring_release(r);
 *   blocking:  ring_wait_writable / ring_wait_readable first.
 * Copying use: ring_push / ring_pop.
 *
 * Waiting spins briefly (spin_limit polls with a pause instruction, sched_yield every few dozen so
 * a waiting stage never holds a core another process needs), then sleeps on a futex in the shared
 * header (FUTEX_WAIT, not _PRIVATE: it works across processes). timeout_ms: < 0 waits forever,
 * 0 only tries once, > 0 waits at most that long. Wait counters (ring_get_stats) live in the
 * shared header, so a profiler sees both sides. */
#ifndef PI_IPC_RING_H
#define PI_IPC_RING_H

#include "layout.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RING_MAX_SLOTS (1u << 24)        /* bounds the shared geometry a peer can claim */
#define RING_MAX_SLOT_SIZE (1u << 30)    /* so lengths fit an int return value */
#define RING_SPIN_DEFAULT 2000           /* polls before sleeping: ~ tens of µs */

/* Process-local view of a ring: never put this struct in shared memory. */
struct ring {
    struct ring_hdr *hdr;
    unsigned char *slots;        /* first slot, right after hdr */
    uint32_t mask;               /* n_slots - 1 */
    uint32_t n_slots;
    uint32_t slot_size;
    uint32_t stride;
    uint32_t spin_limit;         /* polls before sleeping; 0 = sleep at once (tests, benchmarks) */
    /* producer side (only the producer touches these) */
    uint32_t tail;               /* our copy of hdr->tail (we are its only writer) */
    uint32_t head_cache;         /* last head we read: saves reading the consumer's line */
    bool reserved;               /* ring_reserve succeeded and ring_commit is pending */
    /* consumer side (only the consumer touches these) */
    uint32_t head;               /* our copy of hdr->head */
    uint32_t tail_cache;         /* last tail we read */
};

/* Wait statistics of both sides, read (relaxed) from the shared header. */
struct ring_stats {
    uint32_t n_slots, used;
    uint64_t prod_waits, prod_wait_ns, prod_wakes;
    uint64_t cons_waits, cons_wait_ns, cons_wakes;
};

/* Bytes a ring of n_slots x slot_size needs (header + slots), or 0 if the geometry is invalid
 * (n_slots not a power of two in [1, RING_MAX_SLOTS], slot_size not in [1, RING_MAX_SLOT_SIZE]). */
size_t ring_bytes(uint32_t n_slots, uint32_t slot_size);

/* Creator: lay out an empty ring in mem (64-byte aligned, >= ring_bytes) and publish it. Call
 * once, before any ring_attach; the memory is typically fresh shared memory. */
int ring_init(void *mem, size_t mem_size, uint32_t n_slots, uint32_t slot_size);

/* Either side: validate the shared header (magic, version, geometry within mem_size, indices
 * consistent) and fill the process-local view. -PI_E_FORMAT names the bad field. */
int ring_attach(struct ring *r, void *mem, size_t mem_size);

/* Polls before sleeping for this side's waits (default RING_SPIN_DEFAULT). */
void ring_set_spin(struct ring *r, uint32_t spin_limit);

/* ---- producer ---- */

/* Pointer to the payload of the next free slot (slot_size bytes, 8-byte aligned), or NULL if the
 * ring is full. Calling it again before ring_commit returns the same slot. */
void *ring_reserve(struct ring *r);

/* Publish the reserved slot holding len bytes (release store of tail) and wake the consumer if
 * it sleeps. -EMSGSIZE if len > slot_size, -PI_E_INVAL without a successful ring_reserve; the
 * slot is not published then. */
int ring_commit(struct ring *r, uint32_t len);

/* Wait until a slot is free: 0 or -ETIMEDOUT. */
int ring_wait_writable(struct ring *r, int timeout_ms);

/* Copy msg into the next slot, waiting up to timeout_ms for one: 0, -ETIMEDOUT, or -EMSGSIZE if
 * len > slot_size. */
int ring_push(struct ring *r, const void *msg, size_t len, int timeout_ms);

/* ---- consumer ---- */

/* The oldest message (acquire load of tail): 0 with *msg and *len set, -EAGAIN if the ring is empty,
 * -PI_E_FORMAT if the slot's length exceeds slot_size (a faulty producer; ring_release skips it).
 * The message stays valid until ring_release. */
int ring_peek(struct ring *r, const void **msg, uint32_t *len);

/* Hand the peeked slot back to the producer (release store of head) and wake it if it sleeps on
 * a full ring. No-op on an empty ring. */
void ring_release(struct ring *r);

/* Wait until a message is available: 0 or -ETIMEDOUT. */
int ring_wait_readable(struct ring *r, int timeout_ms);

/* Copy the oldest message into msg, waiting up to timeout_ms for one. Returns its length (>= 0),
 * -ETIMEDOUT, -EMSGSIZE if it is longer than cap (it stays in the ring), or -PI_E_FORMAT for a
 * corrupt length (the slot is dropped, so the stream goes on). */
int ring_pop(struct ring *r, void *msg, size_t cap, int timeout_ms);

/* ---- both ---- */

/* Messages committed but not yet released (a snapshot; exact only on a quiescent ring). */
uint32_t ring_count(const struct ring *r);

void ring_get_stats(const struct ring *r, struct ring_stats *st);

/* Test hook: move head and tail of an EMPTY, not yet attached ring to idx (to test the wrap of
 * the free-running u32 indices without pushing 4 billion messages). -PI_E_INVAL if not empty. */
int ring_test_set_index(void *mem, uint32_t idx);

#endif
