/* layout.h — every struct that lives in shared memory between the pipeline's processes.
 *
 * Rules for everything in this file:
 *   - Shared memory holds OFFSETS, never pointers: each process maps a segment at its own address,
 *     so a pointer written by one stage means nothing to another. Offsets count bytes from the
 *     start of the segment (the segment header) unless a comment says otherwise.
 *   - Fixed-width types only, explicit padding, a static_assert on every size and on every offset
 *     another process relies on (bottom of this file). Enums that reach shared memory have
 *     explicit values and only grow at the end.
 *   - Atomics in shared memory must be lock-free (address-free), asserted below; they are used
 *     with explicit memory orders only (see ipc/ring.c).
 *
 * Segments. A segment is one POSIX shared-memory object named /pinfer-<uid>-<instance>-<segment>
 * (ipc/shm.h), mode 0600, private to the user who started the instance. It begins with a
 * struct pi_seg_header {magic, version, size, kind, n_offsets, offsets[]}: `size` is the whole
 * object in bytes (it must equal the file size), `kind` says which of the layouts below follows,
 * and offsets[0..n_offsets) locate the parts of that layout (their meaning is per kind). The
 * creator writes the header with magic 0, builds the contents, then publishes the magic with a
 * release store (shm_publish); an attacher reads the magic with acquire, so a published segment
 * is always complete.
 *
 *   PI_SEG_KIND_TEST  — used by the tests and benchmarks of ipc/: any contents, usually rings.
 *   (Weights, activations, per-layer ring sets, status pages: added here by their stages.)
 *
 * Rings. A struct ring_hdr (64-byte aligned, at an offset listed in a segment header) is followed
 * by n_slots slots of slot_stride bytes; each slot is a struct ring_slot followed by slot_size
 * payload bytes. The producer owns `tail`, the consumer owns `head`; both are free-running u32
 * (slot = index & (n_slots - 1)), each on its own cache line so the two sides never write the
 * same line in the fast path. cons_sleeping / prod_sleeping are the futex words a side sleeps on
 * when the ring is empty / full, each on its own line. Protocol and barriers: ipc/ring.c. */
#ifndef PI_IPC_LAYOUT_H
#define PI_IPC_LAYOUT_H

#include <assert.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* One x86-64 / arm64 cache line: the unit of false sharing between the two sides of a ring. */
#define PI_CACHE_LINE 64

/* ---- segment header ---- */

#define PI_SEG_MAGIC 0x4d534950u  /* "PISM" little-endian */
#define PI_SEG_VERSION 1u
#define PI_SEG_MAX_OFFSETS 13     /* 24 bytes of fields + 13 * 8 = 128 bytes, two cache lines */

enum pi_seg_kind {
    PI_SEG_KIND_ANY = 0,   /* only as an argument to shm_attach: accept any kind */
    PI_SEG_KIND_TEST = 1,
};

struct pi_seg_header {
    uint32_t magic;          /* PI_SEG_MAGIC once published; 0 while the creator builds it */
    uint32_t version;        /* PI_SEG_VERSION */
    uint64_t size;           /* bytes of the whole object, header included == file size */
    uint32_t kind;           /* enum pi_seg_kind */
    uint32_t n_offsets;      /* used entries of offsets[] */
    uint64_t offsets[PI_SEG_MAX_OFFSETS]; /* byte offsets from the segment start, each <= size */
};

/* ---- SPSC ring ---- */

#define PI_RING_MAGIC 0x474e5250u /* "PRNG" little-endian */
#define PI_RING_VERSION 1u

/* Precedes every slot's payload. Written by the producer before its release of tail, read by the
 * consumer after its acquire of tail: plain fields, ordered by those two. */
struct ring_slot {
    uint32_t len;       /* payload bytes in this message, <= slot_size */
    uint32_t reserved;  /* 0; keeps the payload 8-byte aligned */
};

struct ring_hdr {
    /* line 0: geometry, written once by ring_init before it publishes magic (release) */
    _Atomic uint32_t magic;  /* PI_RING_MAGIC when initialised */
    uint32_t version;        /* PI_RING_VERSION */
    uint32_t n_slots;        /* power of two */
    uint32_t slot_size;      /* payload capacity of a slot in bytes */
    uint32_t slot_stride;    /* bytes from one slot to the next: sizeof(ring_slot) + slot_size,
                                rounded up to a cache line so neighbouring slots never share one */
    uint32_t pad0[11];

    /* line 1: written only by the producer */
    _Atomic uint32_t tail;           /* free-running count of committed messages */
    uint32_t pad1;
    _Atomic uint64_t prod_waits;     /* futex sleeps of the producer on a full ring */
    _Atomic uint64_t prod_wait_ns;   /* total ns the producer waited (spin + sleep) */
    _Atomic uint64_t prod_wakes;     /* futex wakes the producer issued to the consumer */
    uint64_t pad1b[4];

    /* line 2: written only by the consumer */
    _Atomic uint32_t head;           /* free-running count of released messages */
    uint32_t pad2;
    _Atomic uint64_t cons_waits;     /* futex sleeps of the consumer on an empty ring */
    _Atomic uint64_t cons_wait_ns;   /* total ns the consumer waited (spin + sleep) */
    _Atomic uint64_t cons_wakes;     /* futex wakes the consumer issued to the producer */
    uint64_t pad2b[4];

    /* line 3: futex word, 1 while the consumer sleeps (or is about to) on an empty ring */
    _Atomic uint32_t cons_sleeping;
    uint32_t pad3[15];

    /* line 4: futex word, 1 while the producer sleeps (or is about to) on a full ring */
    _Atomic uint32_t prod_sleeping;
    uint32_t pad4[15];
    /* slots follow: n_slots * slot_stride bytes */
};

/* ---- static checks: every process must agree on these bytes ---- */

static_assert(ATOMIC_INT_LOCK_FREE == 2, "shared-memory atomics must be lock-free (address-free)");
static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "shared-memory atomics must be lock-free (address-free)");
static_assert(sizeof(_Atomic uint32_t) == 4 && sizeof(_Atomic uint64_t) == 8, "atomic sizes");

static_assert(sizeof(struct pi_seg_header) == 128, "segment header is 128 bytes");
static_assert(offsetof(struct pi_seg_header, magic) == 0, "seg magic offset");
static_assert(offsetof(struct pi_seg_header, version) == 4, "seg version offset");
static_assert(offsetof(struct pi_seg_header, size) == 8, "seg size offset");
static_assert(offsetof(struct pi_seg_header, kind) == 16, "seg kind offset");
static_assert(offsetof(struct pi_seg_header, n_offsets) == 20, "seg n_offsets offset");
static_assert(offsetof(struct pi_seg_header, offsets) == 24, "seg offsets offset");

static_assert(sizeof(struct ring_slot) == 8, "ring slot header is 8 bytes");
static_assert(offsetof(struct ring_hdr, magic) == 0, "ring magic offset");
static_assert(offsetof(struct ring_hdr, slot_stride) == 16, "ring slot_stride offset");
static_assert(offsetof(struct ring_hdr, tail) == 1 * PI_CACHE_LINE, "producer line");
static_assert(offsetof(struct ring_hdr, prod_waits) == 1 * PI_CACHE_LINE + 8, "producer counters");
static_assert(offsetof(struct ring_hdr, head) == 2 * PI_CACHE_LINE, "consumer line");
static_assert(offsetof(struct ring_hdr, cons_waits) == 2 * PI_CACHE_LINE + 8, "consumer counters");
static_assert(offsetof(struct ring_hdr, cons_sleeping) == 3 * PI_CACHE_LINE, "consumer futex line");
static_assert(offsetof(struct ring_hdr, prod_sleeping) == 4 * PI_CACHE_LINE, "producer futex line");
static_assert(sizeof(struct ring_hdr) == 5 * PI_CACHE_LINE, "ring header is 5 cache lines");

#endif
