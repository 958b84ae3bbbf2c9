/* ncache_shm.h — the "ncache" segment: the disk tier's neuron cache in shared memory, filled by
 * loaderd's io_uring reads on cpud's requests (docs/ARCHITECTURE.md, "The disk tier").
 *
 * Created by cpud when it opens its disk tier (it decides the placement and owns the cache's
 * bookkeeping, engine/ncache.h); a restarted cpud removes the old object and creates a new one,
 * and stores the new segment's generation in pi_ctl.ncache_gen so loaderd re-attaches. Contents
 * (offsets in the segment header):
 *   offsets[0]  struct ncshm_hdr     geometry, the bundle's path, loaderd's pid, counters
 *   offsets[1]  struct ncshm_rec[n_tags]  one read request per cache slot (tag = slot index)
 *   offsets[2]  the slot memory: n_tags records of stride bytes, align-aligned (reads land here)
 *   offsets[3]  ring cpud → loaderd ("sq"): u64 tags of requests to read
 *   offsets[4]  ring loaderd → cpud ("cq"): struct ncshm_done of reads finished
 *
 * A request's life. cpud writes rec[tag] (off, len, dst) and stores claim = NCSHM_QUEUED (release),
 * then pushes tag on sq. loaderd pops tag and takes it with a CAS QUEUED → its pid (a tag already
 * taken — by cpud, see below — is skipped), reads len bytes at off into dst with io_uring, and
 * pushes (tag, res) on cq. cpud reaps cq. Each tag is outstanding at most once, so cq (as many
 * slots as tags) never overflows; sq may (stale tags of a dead loaderd): then cpud reads itself.
 *
 * Fallback. While no live loaderd serves the segment (loader_pid is not the READY loaderd of the
 * ctl segment, or that process is gone or a zombie), cpud takes every outstanding request whose
 * claim is QUEUED or the pid of a dead loaderd (CAS → NCSHM_CPU) and preads it itself. A dead
 * process does no more I/O (the kernel cancels and waits for a task's io_uring requests before it
 * becomes a zombie), so a claim of a dead pid can be taken over; the CAS decides between cpud and a
 * restarted loaderd. Either way the slot gets the same bytes of the same file.
 *
 * Counters: cpud copies its cache counters here after each layer; loaderd adds its own. Relaxed
 * atomics, read by pictl status / profile / generate --json-stats. */
#ifndef PI_IPC_NCACHE_SHM_H
#define PI_IPC_NCACHE_SHM_H

#include <assert.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pipeline_layout.h"
#include "ring.h"
#include "shm.h"

#define PI_SEG_KIND_NCACHE 5u
#define NCSHM_SEG "ncache"

#define NCSHM_QUEUED (-2) /* claim: queued for loaderd; > 0: the loaderd pid that took it */
#define NCSHM_CPU (-1)    /* claim: cpud reads it itself */
#define NCSHM_IDLE 0

struct ncshm_rec {
    _Atomic int32_t claim;
    uint32_t len;
    uint64_t off;   /* in the bundle */
    uint64_t dst;   /* from the start of the segment */
    uint64_t pad;
};

struct ncshm_done {
    uint64_t tag;
    int32_t res;    /* bytes read, or -errno */
    uint32_t pad;
};

/* Counters; `c_` written by cpud (copied from its cache after each layer), `l_` by loaderd. */
struct ncshm_counters {
    _Atomic uint64_t c_tokens, c_needed, c_hits, c_prefetched, c_misses;
    _Atomic uint64_t c_reads, c_bytes_read;    /* reads completed into the cache (any reader), bytes */
    _Atomic uint64_t c_in_flight;              /* requests outstanding now */
    _Atomic uint64_t c_wait_ns;                /* cpud waiting for rows it lacked */
    _Atomic uint64_t c_fallback_reads, c_fallback_bytes; /* read by cpud itself (no live loaderd) */
    _Atomic uint64_t c_evictions;
    _Atomic uint64_t c_pinned, c_slots, c_pinned_bytes, c_cache_bytes;
    _Atomic uint64_t c_prefill_tokens, c_prefill_bytes, c_prefill_reads, c_prefill_ns; /* steps of more than one token */
    _Atomic uint64_t l_reads, l_bytes, l_in_flight, l_errors, l_submits;
    uint64_t reserved[7];
};

struct ncshm_hdr {
    uint64_t gen;            /* cpud: the segment's generation (also pi_ctl.ncache_gen) */
    uint64_t n_tags;         /* requests == cache slots */
    uint64_t stride;         /* bytes of one slot */
    uint32_t align;          /* O_DIRECT alignment of the records */
    uint32_t pad0;
    _Atomic int32_t loader_pid; /* loaderd: the pid serving the segment (0 none) */
    int32_t cpud_pid;
    char path[PI_PATH_MAX];  /* the bundle */
    char loader_io[160];     /* loaderd: its reader, "io_uring qd 64, registered buffers" */
    char cpud_io[160];       /* cpud: its own reader while it serves itself */
    struct ncshm_counters n;
};

#define NCSHM_OFF_HDR 0
#define NCSHM_OFF_REC 1
#define NCSHM_OFF_MEM 2
#define NCSHM_OFF_SQ 3
#define NCSHM_OFF_CQ 4

struct ncshm_params {
    uint64_t n_tags, stride;
    uint32_t align;
    const char *path;
};

/* Process-local view of an attached segment. */
struct ncshm_view {
    struct shm_seg seg;
    struct ncshm_hdr *hdr;
    struct ncshm_rec *rec;
    char *mem;
    struct ring sq, cq;
};

/* Bytes of the segment (0 if absurd). */
size_t ncshm_bytes(const struct ncshm_params *p);
/* Create (removing a leftover of a dead cpud), lay out and publish the segment; v is attached. */
int ncshm_create(struct ncshm_view *v, const char *instance, const struct ncshm_params *p, uint64_t gen);
/* Attach (read-write unless rdonly, then the rings are not usable) and check the layout. */
int ncshm_attach(struct ncshm_view *v, const char *instance, bool rdonly);
void ncshm_detach(struct ncshm_view *v);
/* The process pid exists and is not a zombie (a dead loaderd does no more I/O). */
bool ncshm_pid_alive(int32_t pid);

static_assert(sizeof(struct ncshm_rec) == 32, "ncache request record");
static_assert(sizeof(struct ncshm_done) == 16, "ncache completion");
static_assert(sizeof(struct ncshm_hdr) % 8 == 0, "ncache header");

#endif
