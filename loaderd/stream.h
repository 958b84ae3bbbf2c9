/* stream.h — the disk tier's reader: neuron records from the FFN bundle (engine/bundle.h) into the
 * neuron cache (engine/ncache.h) with io_uring — O_DIRECT (the bundle is opened so), reads submitted
 * in batches of STREAM_BATCH as they are queued (the rest at the next reap), up to qd in flight, into registered buffers (READ_FIXED) when the kernel lets this process pin the cache
 * (RLIMIT_MEMLOCK), plain READ otherwise; name says which and why. */
#ifndef PI_LOADERD_STREAM_H
#define PI_LOADERD_STREAM_H

#include <liburing.h>
#include <stdbool.h>
#include <stdint.h>

#include "ncache.h"

#define STREAM_QD 64u /* reads in flight: 8 KiB random reads on the virtio disk gain little past 32-64 */
#define STREAM_BATCH 16u /* queued reads are submitted (one io_uring_enter) every STREAM_BATCH */
/* Async reads: every read with IOSQE_ASYNC (the kernel's io-wq workers issue it), so the submitting
 * thread never blocks on the device's queue (an O_DIRECT read submitted inline waits for a free
 * request tag: an in-process prefetch of a layer's ~650 reads took 280-440 ms/token to hand over on
 * the dev box, 34 ms/token on the GPU host at 50 % of the FFN in RAM), with STREAM_QD_ASYNC reads in
 * flight. The workers compete with the compute threads for cores: on the GPU host's 16 cores a 7B
 * q4_0 at 50 % decoded 1.33x faster with them (hand-over 2.9 ms/token), on the 2-core dev box slower.
 * So the default is async from STREAM_ASYNC_MIN_CORES online cores; PINFER_STREAM_ASYNC=1 / 0 forces
 * it either way. */
#define STREAM_ENV_ASYNC "PINFER_STREAM_ASYNC"
#define STREAM_QD_ASYNC 1024u
#define STREAM_ASYNC_MIN_CORES 8

struct stream_done {
    uint64_t tag;
    int res;
};

struct stream_io {
    struct io_uring ring;
    bool ready, fixed, async;
    unsigned qd;
    unsigned queued;    /* SQEs prepared, not submitted */
    unsigned inflight;  /* submitted, not reaped */
    char *base;         /* the registered region (fixed): reads into it are READ_FIXED, others READ */
    size_t len;
    struct stream_done *stash; /* completions taken while making room in submit, delivered by reap */
    unsigned n_stash, cap_stash;
    char name[160];
    struct ncache_io io;
};

/* 0, or a negative code when io_uring is unavailable (then use pread: ncache_params.io = NULL). */
int stream_io_init(struct stream_io *s, unsigned qd);
void stream_io_fini(struct stream_io *s);

#endif
