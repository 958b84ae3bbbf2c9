/* disk_io.h — cpud's reader for the neuron cache in the pipeline: the cache's slots live in the
 * "ncache" segment (ipc/ncache_shm.h) and loaderd reads them; cpud only waits for the rows it lacks.
 * While no live loaderd serves the segment, cpud reads (pread, the cache's O_DIRECT fd) the
 * requests still outstanding and the new ones itself — the fallback — and counts them. */
#ifndef PI_CPUD_DISK_IO_H
#define PI_CPUD_DISK_IO_H

#include <stdbool.h>
#include <stdint.h>

#include "ncache.h"
#include "ncache_shm.h"
#include "pipeline_layout.h"

#define DISK_IO_POLL_MS 2 /* a wait for loaderd re-checks that it lives this often */

struct disk_io {
    struct ncshm_view v;
    bool created;
    struct pi_ctl *ctl;
    const char *instance;
    char path[PI_PATH_MAX];
    int fd;                   /* the cache's bundle fd (from submit): for the fallback */
    uint8_t *out;             /* (n_tags) 1 = outstanding at loaderd */
    uint64_t *tag;            /* (n_tags) the full tag of the slot's current request */
    int64_t n_out;
    struct ncshm_done *local; /* completions of fallback reads, delivered by the next reap */
    int64_t n_local;
    uint64_t fallback_reads, fallback_bytes;
    uint64_t pf_tokens, pf_bytes, pf_reads, pf_ns; /* prefill steps (cpud fills them in) */
    struct ncache_io io;
};

/* io.ctx = d; d->io is passed to ncache_new with alloc = disk_io_alloc, alloc_arg = d. */
void disk_io_init(struct disk_io *d, struct pi_ctl *ctl, const char *instance, const char *bundle_path);
int disk_io_alloc(void *arg, int64_t n_slots, uint64_t stride, uint32_t align, void **mem);
/* After ncache_free. */
void disk_io_fini(struct disk_io *d);
/* Copy the cache's counters and ours into the segment (for pictl status / profile / --json-stats). */
void disk_io_publish(struct disk_io *d, const struct ncache_stats *st);
/* A live loaderd serves the segment now. */
bool disk_io_loader_alive(const struct disk_io *d);

#endif
