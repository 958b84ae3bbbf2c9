/* run_disk.c — the disk tier for pictl run --inproc (run_disk.h). */
#include "run_disk.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bundle.h"
#include "pi_err.h"

#define GIB (1024.0 * 1024.0 * 1024.0)
#define MIB (1024.0 * 1024.0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int run_disk_open(struct run_disk *d, const struct pi_model *m, const char *model_path, const char *bundle_path,
                  double ram_budget_gib, unsigned qd, struct pi_ctx *c)
{
    memset(d, 0, sizeof *d);
    int rc = 0;
    if (bundle_path)
        snprintf(d->bundle, sizeof d->bundle, "%s", bundle_path);
    else if ((rc = bundle_default_path(model_path, d->bundle, sizeof d->bundle)))
        return rc;
    struct bundle_hdr h;
    int fd;
    bool direct;
    if ((rc = bundle_open(d->bundle, m, false, &fd, &direct, &h)))
        return rc;
    close(fd);
    const int64_t L = m->hp.n_layer, F = m->hp.n_ff, slots = tier_default_cache_slots(m);
    d->tier = malloc((size_t)(L * F));
    if (!d->tier)
        return pi_fail(PI_E_NOMEM, "out of memory");
    if ((rc = tier_place(m, (uint64_t)(ram_budget_gib * GIB), h.stride, slots, NULL, d->tier, &d->rep)))
        return rc;
    d->have_sio = stream_io_init(&d->sio, qd) == 0;
    if (!d->have_sio)
        fprintf(stderr, "pictl run: %s; the disk tier reads with pread\n", pi_errmsg());
    const struct ncache_params np = { .path = d->bundle, .tier = d->tier, .window_slots = slots, .window = 1,
                                      .direct = true, .io = d->have_sio ? &d->sio.io : NULL };
    if ((rc = ncache_new(&d->nc, m, &np)))
        return rc;
    d->reader = d->have_sio ? d->sio.name : "pread";
    return ctx_set_ncache(c, d->nc);
}

/* the floor: n random records, read like the streamer reads them (one record each, qd in flight) */
struct floor_ctx {
    int done, err;
};

static void floor_done(void *arg, uint64_t tag, int res)
{
    struct floor_ctx *f = arg;
    (void)tag;
    f->done++;
    if (res < 0 && !f->err)
        f->err = -res;
}

int run_disk_floor(struct run_disk *d, int n)
{
    struct bundle_hdr h;
    int fd;
    bool direct;
    int rc = bundle_open(d->bundle, NULL, true, &fd, &direct, &h);
    if (rc)
        return rc;
    const unsigned qd = d->have_sio ? d->sio.qd : 1;
    void *buf = NULL;
    if (posix_memalign(&buf, h.align, (size_t)qd * h.stride)) {
        close(fd);
        return pi_fail(PI_E_NOMEM, "out of memory");
    }
    uint64_t x = 0x9e3779b97f4a7c15ull;
    const uint64_t records = (uint64_t)h.n_layer * h.n_ff;
    struct floor_ctx f = { 0 };
    const double t0 = now_s();
    for (int i = 0; i < n && !rc; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const uint64_t off = h.data_off + (x % records) * h.stride;
        char *dst = (char *)buf + (size_t)(i % (int)qd) * h.stride;
        if (d->have_sio)
            rc = d->sio.io.submit(&d->sio, fd, dst, off, (uint32_t)h.stride, (uint64_t)i);
        else if (pread(fd, dst, h.stride, (off_t)off) != (ssize_t)h.stride)
            rc = pi_fail(errno ? errno : EIO, "floor: read at offset %llu", (unsigned long long)off);
        if (!rc && d->have_sio && (i + 1) % (int)qd == 0)
            rc = d->sio.io.reap(&d->sio, qd, floor_done, &f);
    }
    while (!rc && d->have_sio && d->sio.inflight + d->sio.queued + d->sio.n_stash > 0)
        rc = d->sio.io.reap(&d->sio, 1, floor_done, &f);
    const double dt = now_s() - t0;
    if (!rc && f.err)
        rc = pi_fail(f.err, "floor: a read failed: %s", strerror(f.err));
    free(buf);
    close(fd);
    if (rc)
        return rc;
    d->floor_mib_s = (double)n * (double)h.stride / MIB / dt;
    struct ncache_stats st;
    ncache_get_stats(d->nc, &st);
    const double per_tok = st.tokens ? (double)(st.bytes_read - st.pinned_bytes) / (double)st.tokens : 0;
    d->floor_ms_per_token = per_tok / MIB / d->floor_mib_s * 1e3;
    return 0;
}

void run_disk_print(const struct run_disk *d, FILE *f)
{
    struct ncache_stats st;
    ncache_get_stats(d->nc, &st);
    const double t = st.tokens ? (double)st.tokens : 1;
    fprintf(f,
            "[disk] budget %.2f GiB: dense %.2f + cache %.2f + RAM tier %.2f GiB (%lld neurons, %.1f%% of activations) | "
            "disk tier %.2f GiB (%lld neurons, %.1f%%) | %s%s | %.1f KiB read/token, hit rate %.1f%% (%llu hits, "
            "%llu prefetched, %llu misses), disk wait %.1f ms/token (+ %.1f handing the prefetch over)",
            (double)d->rep.budget / GIB, (double)d->rep.dense_bytes / GIB, (double)d->rep.cache_bytes / GIB,
            (double)d->rep.ram_bytes / GIB, (long long)d->rep.ram_neurons, 100 * d->rep.ram_share,
            (double)d->rep.disk_bytes / GIB, (long long)d->rep.disk_neurons, 100 * d->rep.disk_share, d->reader,
            d->rep.by_freq ? "" : ", no act_freq: RAM tier by neuron index",
            (double)(st.bytes_read - st.pinned_bytes) / 1024 / t,
            st.needed ? 100.0 * (double)(st.hits + st.prefetched) / (double)st.needed : 0.0,
            (unsigned long long)st.hits, (unsigned long long)st.prefetched, (unsigned long long)st.misses,
            (double)st.wait_ns / 1e6 / t, (double)st.prefetch_ns / 1e6 / t);
    if (d->floor_mib_s > 0)
        fprintf(f, " | floor: random records at %.1f MiB/s = %.1f ms/token", d->floor_mib_s, d->floor_ms_per_token);
    fputc('\n', f);
}

json_t *run_disk_json(const struct run_disk *d)
{
    struct ncache_stats st;
    ncache_get_stats(d->nc, &st);
    const double t = st.tokens ? (double)st.tokens : 1;
    return json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:b, s:I, s:f, s:f, s:I, s:I, s:I, "
                     "s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:f}",
                     "bundle", d->bundle, "reader", d->reader, "budget_bytes", (json_int_t)d->rep.budget,
                     "dense_bytes", (json_int_t)d->rep.dense_bytes, "cache_bytes", (json_int_t)d->rep.cache_bytes,
                     "ram_bytes", (json_int_t)d->rep.ram_bytes, "disk_bytes", (json_int_t)d->rep.disk_bytes,
                     "ram_neurons", (json_int_t)d->rep.ram_neurons, "disk_neurons", (json_int_t)d->rep.disk_neurons,
                     "ram_share", d->rep.ram_share, "disk_share", d->rep.disk_share, "gpu_share", d->rep.gpu_share,
                     "by_freq", d->rep.by_freq, "tokens", (json_int_t)st.tokens, "bytes_read_per_token",
                     (double)(st.bytes_read - st.pinned_bytes) / t, "hit_rate",
                     st.needed ? (double)(st.hits + st.prefetched) / (double)st.needed : 0.0, "hits",
                     (json_int_t)st.hits, "prefetched", (json_int_t)st.prefetched, "misses", (json_int_t)st.misses,
                     "evictions", (json_int_t)st.evictions, "reads", (json_int_t)st.reads, "dense_layers",
                     (json_int_t)st.dense_layers, "dense_extra", (json_int_t)st.dense_extra, "reads_in_flight",
                     (json_int_t)st.in_flight,
                     "disk_wait_ms_per_token", (double)st.wait_ns / 1e6 / t, "prefetch_ms_per_token",
                     (double)st.prefetch_ns / 1e6 / t, "floor_mib_s", d->floor_mib_s,
                     "floor_ms_per_token", d->floor_ms_per_token);
}

void run_disk_close(struct run_disk *d)
{
    ncache_free(d->nc);
    if (d->have_sio)
        stream_io_fini(&d->sio);
    free(d->tier);
    memset(d, 0, sizeof *d);
}
