/* ncache.h — the neuron cache: the disk tier's FFN rows in RAM, read on demand from the bundle
 * (engine/bundle.h) and handed to the FFN through the layer-weights view (model.h).
 *
 * Memory: one aligned region of slots, one bundle record (gate | up | down_t row) each.
 *   - pinned slots: the RAM tier (tiers.h), read once at open, never evicted;
 *   - window slots: disk-tier neurons read when a step needs them and kept while used in the last
 *     `window` tokens; beyond that the least recently used goes first (a clock hand over the
 *     slots finds the first one outside the window, else the oldest not used by the current layer).
 * Every FFN row the sparse FFN reads comes from a slot, so the model's FFN tensors are never
 * touched: the mapping's FFN pages stay unread (not in RAM), and the same bytes through the same
 * kernels give bitwise the in-RAM result.
 *
 * Reads: through an ncache_io (io_uring in loaderd/stream.c: O_DIRECT, batched submissions, many
 * in flight), or pread when none is given. ncache_prefetch starts the reads of a layer's predicted
 * neurons and returns; ncache_layer makes every neuron of its runs present — already there (hit),
 * in flight from a prefetch (waited for), or read now (a miss: never wrong, only slower) — and
 * fills the view. An I/O error fails the call with the file offset in the message.
 * Consecutive neurons of a layer that land in consecutive slots are read together, up to
 * NCACHE_READ_MAX bytes a read; a decode step's scattered neurons stay one record a read. A step
 * whose union of missing neurons in a layer reaches NCACHE_DENSE_DEFAULT of it (a long prompt
 * chunk) reads the layer's span densely: the gaps too, into one block of consecutive slots, so the
 * layer streams in large sequential reads.
 * A read is tagged with its first slot and its number of slots: tag = slot | n << 32.
 *
 * Not thread-safe: one caller (the evaluator's thread) per cache. */
#ifndef PI_ENGINE_NCACHE_H
#define PI_ENGINE_NCACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "bundle.h"
#include "ffn_split.h"
#include "model.h"

/* Asynchronous reads. submit queues one read (len bytes at off into dst) tagged tag; reap submits
 * what is queued and waits for at least min completions, calling done(arg, tag, res) for each
 * (res: bytes read, or -errno). */
struct ncache_io {
    void *ctx;
    int (*submit)(void *ctx, int fd, void *dst, uint64_t off, uint32_t len, uint64_t tag);
    int (*reap)(void *ctx, unsigned min, void (*done)(void *arg, uint64_t tag, int res), void *arg);
    /* (optional) the cache's memory once allocated (registered buffers), and (NULL, 0) when it is
     * freed; NULL: nothing to do */
    int (*register_mem)(void *ctx, void *base, size_t len);
    const char *name; /* for status: "io_uring qd 64, registered buffers", ... */
};

struct ncache_params {
    const char *path;       /* the bundle */
    const uint8_t *tier;    /* (n_layer, n_ff) enum pi_tier; RAM-tier neurons are pinned */
    int64_t window_slots;   /* slots for disk-tier neurons (>= n_ff) */
    int32_t window;         /* steps (decode: tokens) a used neuron stays (0 = 1) */
    bool direct;            /* try O_DIRECT */
    const struct ncache_io *io; /* NULL: pread */
    /* (optional) where the slots live (cpud: the ncache segment in shared memory, so loaderd reads
     * into them): n_slots records of stride bytes, align-aligned, into *mem. The cache does not free
     * it; 0 or a negative code with a message. NULL: posix_memalign. */
    int (*alloc)(void *arg, int64_t n_slots, uint64_t stride, uint32_t align, void **mem);
    void *alloc_arg;
};

struct ncache_stats {
    uint64_t steps, tokens; /* ncache_step calls, Σ of their tokens */
    uint64_t needed;        /* Σ neurons asked for by ncache_layer */
    uint64_t hits;          /* ... present when asked (pinned or cached) */
    uint64_t prefetched;    /* ... brought by a prefetch (arrived, or in flight and waited for) */
    uint64_t misses;        /* ... read synchronously */
    uint64_t reads, bytes_read; /* reads done (one read may bring several consecutive neurons), bytes */
    uint64_t evictions;
    uint64_t dense_layers;  /* layers a chunk read densely (the union over the threshold) */
    uint64_t dense_extra;   /* ... unneeded neurons read with them (the gaps) */
    uint64_t in_flight;     /* reads submitted, not completed (now) */
    uint64_t wait_ns;       /* time ncache_layer waited for reads */
    uint64_t prefetch_ns;   /* time ncache_prefetch took to hand its reads over (a reader with fewer
                               slots in flight than a prefetch has reads blocks there) */
    uint64_t pinned, slots; /* pinned neurons, window slots */
    uint64_t pinned_bytes, cache_bytes;
};

struct ncache;

/* Open the bundle (checked against m), allocate the slots, read the pinned neurons. */
int ncache_new(struct ncache **out, const struct pi_model *m, const struct ncache_params *p);
void ncache_free(struct ncache *c);

/* Start reading layer's neurons in runs that are not present (does not wait). Without an
 * asynchronous reader it does nothing: a synchronous read ahead would only add mispredicted reads. */
int ncache_prefetch(struct ncache *c, int layer, const struct ffn_runs *runs);
/* Make every neuron of layer in runs present and fill *w (valid until the next ncache call). */
int ncache_layer(struct ncache *c, int layer, const struct ffn_runs *runs, struct pi_layer_weights *w);
/* A step of n tokens is done (the window counts steps: a decode step is one token); checks that the
 * bundle file was not changed on disk. */
int ncache_step(struct ncache *c, int32_t n);
void ncache_get_stats(const struct ncache *c, struct ncache_stats *s);
/* n bytes at off into dst with pread, retried over short reads and EINTR: the bytes read (fewer at
 * the end of the file) or -errno. The cache's synchronous path, and cpud's while loaderd is down. */
int ncache_pread_full(int fd, void *dst, size_t n, uint64_t off);
#define NCACHE_READ_MAX (1u << 20)
#define NCACHE_TAG_SLOT(t) ((int64_t)((t) & 0xffffffffu))
#define NCACHE_TAG_COUNT(t) ((uint32_t)((t) >> 32))
/* A step whose missing neurons in a layer reach this fraction of the layer reads the layer from its
 * first to its last missing neuron in large sequential reads, the gaps included (prefill);
 * PINFER_NCACHE_DENSE sets another fraction (above 1: never, for measuring without). */
#define NCACHE_DENSE_DEFAULT 0.5
#define NCACHE_ENV_DENSE "PINFER_NCACHE_DENSE"
/* Test hook: the Nth read (1-based) fails with EIO. */
#define NCACHE_ENV_FAIL_READ "PINFER_NCACHE_FAIL_READ"

#endif
