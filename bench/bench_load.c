/* bench_load — model load throughput of loaderd's reader: io_uring O_DIRECT at several queue
 * depths, io_uring buffered, pread, and the whole loader_load into a weights segment (read +
 * validation + directory). One JSON line per case; compare with dd in the same run
 * (bench/bench_load.sh).
 *
 *   bench_load --make FILE MIB   write a GGUF of about MIB MiB (one f16 tensor) and exit
 *   bench_load FILE [REPS]       time each case REPS times (default 3), print the median
 * loader_load_shm writes into a fresh, never-touched segment each time (what loaderd does at
 * start: the page faults of the segment are part of the load); loader_load_shm_prefaulted faults it
 * in untimed first. */
#include "gguf.h"
#include "load.h"
#include "pi_err.h"
#include "quant.h"
#include "shm.h"
#include "uring.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_REPS 3
#define MAX_REPS 16
#define MIB (1024ull * 1024ull)
#define F16_BYTES 2

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void report(const char *name, unsigned qd, uint32_t chunk, uint64_t bytes, double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    double med = t[n / 2], p90 = t[(n * 9) / 10 < n ? (n * 9) / 10 : n - 1];
    printf("{\"bench\":\"load\",\"case\":\"%s\",\"qd\":%u,\"chunk_mib\":%llu,\"bytes\":%llu,\"n\":%d,"
           "\"median_s\":%.4f,\"p90_s\":%.4f,\"median_gbps\":%.3f,\"unit\":\"GB/s\"}\n",
           name, qd, (unsigned long long)(chunk / MIB), (unsigned long long)bytes, n, med, p90,
           (double)bytes / med * 1e-9);
    fflush(stdout);
}

static int make_file(const char *path, uint64_t mib)
{
    int64_t ne = (int64_t)(mib * MIB / F16_BYTES);
    uint16_t *data = malloc((size_t)ne * F16_BYTES);
    if (!data)
        return pi_fail(PI_E_NOMEM, "cannot allocate %llu MiB", (unsigned long long)mib);
    /* non-constant bytes so that nothing along the way can shortcut zero pages */
    for (int64_t i = 0; i < ne; i++)
        data[i] = (uint16_t)(i * 2654435761u >> 16);
    struct gguf_writer *w = NULL;
    int rc = gguf_writer_new(&w, GGUF_MAGIC_GGUF);
    if (!rc)
        rc = gguf_writer_set_str(w, "general.architecture", "bench");
    if (!rc)
        rc = gguf_writer_add_tensor(w, "bench.weight", PI_TYPE_F16, 1, &ne, data);
    if (!rc)
        rc = gguf_writer_write_file(w, path);
    gguf_writer_free(w);
    free(data);
    return rc;
}

/* Read the file once with the given method into dst; returns seconds or a negative value. */
static double time_read(const char *path, const char *method, unsigned qd, uint32_t chunk, void *dst, uint64_t size)
{
    bool direct = !strcmp(method, "uring_direct");
    int fd = open(path, O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
    if (fd < 0) {
        fprintf(stderr, "bench_load: open %s: %s\n", path, strerror(errno));
        return -1;
    }
    struct uring_read_opts o = {.direct = direct};
    struct uring_reader r;
    int rc = 0;
    double t0 = now_s();
    if (!strcmp(method, "pread")) {
        rc = uring_pread_file(fd, dst, size, &o);
    } else if ((rc = uring_init(&r, qd)) == 0) {
        r.chunk = chunk;
        rc = uring_read(&r, fd, dst, size, &o);
        uring_fini(&r);
    }
    double dt = now_s() - t0;
    close(fd);
    if (rc) {
        fprintf(stderr, "bench_load: %s: %s: %s\n", method, pi_strerror(rc), pi_errmsg());
        return -1;
    }
    return dt;
}

/* The whole loader_load into a fresh weights segment (what loaderd does at start). */
static double time_loader(const char *path, bool prefault, char *method, size_t cap)
{
    char inst[SHM_PART_MAX + 1];
    snprintf(inst, sizeof inst, "bload%d", (int)getpid());
    uint64_t size, n;
    struct shm_seg seg;
    struct loader_weights w;
    enum loader_outcome out;
    _Atomic uint64_t done = 0;
    struct loader_progress prog = {.done_bytes = &done, .method = method, .method_cap = cap};
    double dt = -1;
    if (loader_probe_file(path, &size, &n) || shm_create(&seg, inst, LOADER_SEG_WEIGHTS, PI_SEG_KIND_WEIGHTS,
                                                         loader_weights_seg_bytes(size, n))) {
        fprintf(stderr, "bench_load: %s\n", pi_errmsg());
        return -1;
    }
    if (loader_weights_seg_init(&seg, size, n) == 0 && loader_weights_view(&seg, &w) == 0) {
        /* MADV_POPULATE_WRITE (Linux 5.14): fault the fresh segment in first, to separate the cost of
         * first-touching shared memory from the read */
        if (prefault && madvise(seg.base, seg.size, MADV_POPULATE_WRITE) != 0)
            fprintf(stderr, "bench_load: MADV_POPULATE_WRITE: %s (timing includes page faults)\n", strerror(errno));
        double t0 = now_s();
        if (loader_load(&w, path, &prog, &out) == 0)
            dt = now_s() - t0;
    }
    if (dt < 0)
        fprintf(stderr, "bench_load: loader_load: %s\n", pi_errmsg());
    shm_detach(&seg);
    shm_remove_instance(inst);
    return dt;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "--make")) {
        int rc = make_file(argv[2], strtoull(argv[3], NULL, 10));
        if (rc)
            fprintf(stderr, "bench_load: %s\n", pi_errmsg());
        return rc ? 1 : 0;
    }
    if (argc < 2) {
        fprintf(stderr, "usage: bench_load FILE [REPS] | bench_load --make FILE MIB\n");
        return 2;
    }
    const char *path = argv[1];
    int reps = argc > 2 ? atoi(argv[2]) : DEFAULT_REPS;
    if (reps < 1 || reps > MAX_REPS)
        reps = DEFAULT_REPS;
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "bench_load: %s: %s\n", path, strerror(errno));
        return 1;
    }
    uint64_t size = (uint64_t)st.st_size;
    void *dst = NULL;
    if (posix_memalign(&dst, URING_ALIGN, uring_dst_bytes(size)) != 0) {
        fprintf(stderr, "bench_load: cannot allocate %llu bytes\n", (unsigned long long)size);
        return 1;
    }
    memset(dst, 0, uring_dst_bytes(size)); /* fault the pages in: time the reads, not page faults */

    static const struct { const char *method; unsigned qd; uint32_t chunk; } cases[] = {
        {"uring_direct", 1, URING_CHUNK}, {"uring_direct", 8, URING_CHUNK}, {"uring_direct", 16, URING_CHUNK},
        {"uring_direct", URING_QD, URING_CHUNK}, {"uring_direct", URING_QD, 1 << 20},
        {"uring_direct", 16, 16 << 20}, {"uring_buffered", URING_QD, URING_CHUNK},
        {"pread", 1, URING_PREAD_CHUNK},
    };
    double t[MAX_REPS];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int n = 0;
        for (int i = 0; i < reps; i++) {
            double dt = time_read(path, cases[c].method, cases[c].qd, cases[c].chunk, dst, size);
            if (dt >= 0)
                t[n++] = dt;
        }
        if (n)
            report(cases[c].method, cases[c].qd, cases[c].chunk, size, t, n);
    }
    char method[LOADER_METHOD_CAP] = "";
    for (int prefault = 0; prefault < 2; prefault++) {
        int n = 0;
        for (int i = 0; i < reps; i++) {
            double dt = time_loader(path, prefault, method, sizeof method);
            if (dt >= 0)
                t[n++] = dt;
        }
        if (n)
            report(prefault ? "loader_load_shm_prefaulted" : "loader_load_shm", URING_QD, URING_CHUNK, size, t, n);
    }
    fprintf(stderr, "bench_load: loader_load used %s\n", method);
    free(dst);
    return 0;
}
