/* bench_gemv — multi-threaded GEMV y = W x per weight type, against the machine's memory bandwidth.
 *
 *   bench_gemv [-t THREADS] [-n ITERS] [-T TYPE[,TYPE...]] [-L LEVEL[,LEVEL...]]
 *
 * TYPE: only those weight types (e.g. q4_0,q4_K); LEVEL: the kernel levels to time, each in turn on
 * the same matrix (scalar, avx2, avx512; default: the best this CPU has; a level may repeat, up to 12
 * entries: interleaved rounds). -R ROWS: a matrix of that many rows, not replicated: what the kernels
 * cost when memory is not the limit. -B TOKENS: that many
 * activations per matmul, through quant_gemm_rows in 16-row tiles (the batched matmul's path).
 *
 * First a STREAM-like read and copy of a 1 GiB buffer (the same thread count), then for each type a
 * 11008 x 4096 matrix (an FFN up projection of a 7B model) times a vector, rows split across the pool;
 * quant types quantize x to q8_0 once per GEMV, inside the timed region, as the forward pass does.
 * The matrix is replicated until the working set is well beyond the last-level cache, so each GEMV
 * streams its weights from DRAM as it would in a real model. One JSON line per case. */
#include "pi_err.h"
#include "quant.h"
#include "threadpool.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define STREAM_BYTES (1ull << 30)
#define STREAM_REPS 5
#define GEMV_ROWS_DEFAULT 11008
#define GEMV_COLS 4096
#define WORKING_SET_MIN (256ull << 20) /* several times any LLC we run on: weights come from DRAM */

/* rows of the matrix; -R sets fewer and keeps one copy: the kernels' in-cache speed */
static int gemv_rows = GEMV_ROWS_DEFAULT;
static bool in_cache;
/* -B: tokens per matmul; above 1 the rows go through quant_gemm_rows in the engine's 16-row tiles */
static int batch = 1;
#define GEMM_ROW_TILE 16
#define WARMUP 2
#define CHECK_ROWS 16                  /* rows compared against the scalar reference */
#define ALIGN 64
#define P90 0.9

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* sorts t; the q-quantile by nearest rank */
static double quantile(double *t, int n, double q)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    int i = (int)ceil(q * n) - 1;
    return t[i < 0 ? 0 : i];
}

/* [lo, hi) of `total` items for thread ith of nth, in multiples of `grain` */
static void share(size_t total, size_t grain, int ith, int nth, size_t *lo, size_t *hi)
{
    size_t units = total / grain, per = (units + (size_t)nth - 1) / (size_t)nth;
    size_t a = per * (size_t)ith, b = a + per;
    *lo = (a < units ? a : units) * grain;
    *hi = (b < units ? b : units) * grain;
    if (ith == nth - 1)
        *hi = total;
}

/* ---- STREAM-like bandwidth ---- */

#define READ_PREFETCH_BYTES 3072 /* as the kernels' software prefetch (quant_avx2.c) */

struct stream_job {
    uint8_t *buf;
    size_t bytes;
    bool prefetch;
    uint64_t sink[64];
};

/* read: XOR of every 64-bit word with 8 independent chains, so the loads never wait on each other.
 * Run plain (STREAM-like) and with the kernels' software prefetch: on some machines (a Xeon VM) one
 * core keeps too few misses in flight without it, and the better of the two is the read bandwidth
 * the GEMV is measured against. */
static void stream_read_fn(void *arg, int ith, int nth)
{
    struct stream_job *j = arg;
    size_t lo, hi;
    share(j->bytes, ALIGN, ith, nth, &lo, &hi);
    const uint64_t *p = (const uint64_t *)(j->buf + lo);
    size_t n = (hi - lo) / sizeof(uint64_t);
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        if (j->prefetch) /* one 64-byte line per iteration */
            __builtin_prefetch((const char *)(p + i) + READ_PREFETCH_BYTES);
        a0 ^= p[i], a1 ^= p[i + 1], a2 ^= p[i + 2], a3 ^= p[i + 3];
        a4 ^= p[i + 4], a5 ^= p[i + 5], a6 ^= p[i + 6], a7 ^= p[i + 7];
    }
    j->sink[ith] = a0 ^ a1 ^ a2 ^ a3 ^ a4 ^ a5 ^ a6 ^ a7;
}

/* copy: first half -> second half */
static void stream_copy_fn(void *arg, int ith, int nth)
{
    struct stream_job *j = arg;
    size_t half = j->bytes / 2, lo, hi;
    share(half, ALIGN, ith, nth, &lo, &hi);
    memcpy(j->buf + half + lo, j->buf + lo, hi - lo);
}

static double bench_stream(struct pi_pool *pool, int threads, pi_pool_fn fn, const char *op, size_t bytes_moved,
                           struct stream_job *j)
{
    double t[STREAM_REPS];
    pool_run(pool, fn, j); /* warm up: page tables, frequency */
    for (int r = 0; r < STREAM_REPS; r++) {
        double t0 = now_us();
        pool_run(pool, fn, j);
        t[r] = now_us() - t0;
    }
    double med = quantile(t, STREAM_REPS, 0.5), p90 = quantile(t, STREAM_REPS, P90);
    double gbps = bytes_moved / (med * 1e3);
    printf("{\"bench\":\"stream\",\"op\":\"%s\",\"threads\":%d,\"bytes\":%zu,\"n\":%d,\"median_us\":%.1f,"
           "\"p90_us\":%.1f,\"gbps\":%.2f}\n", op, threads, bytes_moved, STREAM_REPS, med, p90, gbps);
    fflush(stdout);
    return gbps;
}

/* ---- GEMV ---- */

struct gemv_job {
    uint32_t type;
    const uint8_t *W;
    size_t row_bytes;
    const void *x_vd;
    size_t x_stride; /* bytes between the batch's activations */
    float *y;        /* (batch, gemv_rows) */
};

/* y[r] = W[r,:] . x for this thread's rows */
static void gemv_fn(void *arg, int ith, int nth)
{
    struct gemv_job *j = arg;
    size_t lo, hi;
    share(gemv_rows, 1, ith, nth, &lo, &hi);
    if (batch == 1) {
        quant_gemv_rows(j->type, j->W, j->row_bytes, GEMV_COLS, j->x_vd, j->y, (int64_t)lo, (int64_t)hi);
        return;
    }
    for (size_t t0 = lo; t0 < hi; t0 += GEMM_ROW_TILE)
        quant_gemm_rows(j->type, j->W, j->row_bytes, GEMV_COLS, j->x_vd, j->x_stride, batch, j->y, (size_t)gemv_rows,
                        (int64_t)t0, (int64_t)(t0 + GEMM_ROW_TILE < hi ? t0 + GEMM_ROW_TILE : hi));
}

static uint64_t rng = 0x243f6a8885a308d3ull;

static float rng_unit(void)
{
    rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
    return (float)((double)((rng * 0x2545f4914f6cdd1dull) >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

static int bench_level(struct pi_pool *pool, int threads, int iters, uint32_t type, double read_gbps, uint8_t *W,
                       size_t copies, const float *x, void *x_vd, float *y, double *times);

struct quant_job {
    const struct pi_type_traits *t;
    const float *f;
    uint8_t *W;
    size_t row_bytes;
};

static void quant_rows(void *arg, int ith, int nth)
{
    const struct quant_job *j = arg;
    for (int r = gemv_rows * ith / nth; r < gemv_rows * (ith + 1) / nth; r++)
        j->t->from_float(j->f + (size_t)r * GEMV_COLS, j->W + (size_t)r * j->row_bytes, GEMV_COLS);
}

static int bench_type(struct pi_pool *pool, int threads, int iters, uint32_t type, double read_gbps,
                      const int *levels, int n_levels)
{
    const struct pi_type_traits *t = quant_traits(type);
        const size_t row_bytes = quant_row_size(type, GEMV_COLS);
    const size_t mat_bytes = row_bytes * gemv_rows;
    const size_t copies = in_cache ? 1 : (WORKING_SET_MIN + mat_bytes - 1) / mat_bytes;
    int rc = 0;
    uint8_t *W = aligned_alloc(ALIGN, mat_bytes * copies);
    float *x = malloc(GEMV_COLS * sizeof *x), *y = malloc((size_t)batch * gemv_rows * sizeof *y);
    void *x_vd = aligned_alloc(ALIGN, (size_t)batch * GEMV_COLS * sizeof(float));
    double *times = malloc((size_t)iters * sizeof *times);
    if (!W || !x || !y || !x_vd || !times) {
        rc = pi_fail(PI_E_NOMEM, "bench: %zu bytes for %s weights", mat_bytes * copies, t->name);
        goto fail;
    }
    /* the values in one sequence, then quantized over the pool (the K-quants' reference quantizers
     * run ~3 M weights/s a core: one thread would take longer than the benchmark) */
    float *f = malloc((size_t)gemv_rows * GEMV_COLS * sizeof *f);
    if (!f) {
        rc = pi_fail(PI_E_NOMEM, "bench: the f32 matrix");
        goto fail;
    }
    for (size_t i = 0; i < (size_t)gemv_rows * GEMV_COLS; i++)
        f[i] = rng_unit();
    struct quant_job qj = { .t = t, .f = f, .W = W, .row_bytes = row_bytes };
    pool_run(pool, quant_rows, &qj);
    free(f);
    for (size_t c = 1; c < copies; c++)
        memcpy(W + c * mat_bytes, W, mat_bytes);
    for (int c = 0; c < GEMV_COLS; c++)
        x[c] = rng_unit();

    for (int l = 0; l < n_levels && rc == 0; l++) {
        if ((rc = quant_set_level((enum pi_cpu_level)levels[l])) < 0)
            break;
        rc = bench_level(pool, threads, iters, type, read_gbps, W, copies, x, x_vd, y, times);
    }
fail:
    free(W), free(x), free(y), free(x_vd), free(times);
    return rc;
}

/* the GEMV of one type at the level in use: timed, then checked against the scalar reference */
static int bench_level(struct pi_pool *pool, int threads, int iters, uint32_t type, double read_gbps, uint8_t *W,
                       size_t copies, const float *x, void *x_vd, float *y, double *times)
{
    const struct pi_type_traits *t = quant_traits(type);
    const struct pi_type_traits *vt = quant_traits(t->vec_dot_type);
    const size_t row_bytes = quant_row_size(type, GEMV_COLS);
    const size_t mat_bytes = row_bytes * gemv_rows;
    const size_t xs = t->vec_dot_type == PI_TYPE_F32 ? GEMV_COLS * sizeof(float) : quant_row_size(t->vec_dot_type, GEMV_COLS);
    struct gemv_job job = { .type = type, .row_bytes = row_bytes, .y = y, .x_stride = xs, .x_vd = x_vd };
    for (int it = -WARMUP; it < iters; it++) {
        job.W = W + (size_t)((it + WARMUP) % (int)copies) * mat_bytes;
        double t0 = now_us();
        for (int b = 0; b < batch; b++) { /* the same token B times: the timing does not care */
            if (t->vec_dot_type != PI_TYPE_F32)
                vt->from_float(x, (char *)x_vd + (size_t)b * xs, GEMV_COLS);
            else
                memcpy((char *)x_vd + (size_t)b * xs, x, xs);
        }
        pool_run(pool, gemv_fn, &job);
        double dt = now_us() - t0;
        if (it >= 0)
            times[it] = dt;
    }

    /* the last result against the scalar reference kernels (x quantized by them as well) */
    const struct pi_type_traits *rt = quant_traits_ref(type), *rvt = quant_traits_ref(t->vec_dot_type);
    float *x_ref = malloc(GEMV_COLS * sizeof(float));
    if (!x_ref)
        return pi_fail(PI_E_NOMEM, "bench: reference activation");
    double max_rel = 0;
    {
        if (t->vec_dot_type != PI_TYPE_F32)
            rvt->from_float(x, x_ref, GEMV_COLS);
        else
            memcpy(x_ref, x, GEMV_COLS * sizeof(float));
        for (int r = 0; r < CHECK_ROWS; r++) {
            float s;
            rt->vec_dot(GEMV_COLS, &s, job.W + (size_t)r * row_bytes, x_ref);
            double rel = fabs((double)s - y[r]) / (fabs(s) > 1e-6 ? fabs(s) : 1e-6);
            max_rel = rel > max_rel ? rel : max_rel;
        }
        free(x_ref);
    }

    double med = quantile(times, iters, 0.5), p90 = quantile(times, iters, P90);
    double bytes = (double)mat_bytes + quant_row_size(t->vec_dot_type, GEMV_COLS);
    double gbps = bytes / (med * 1e3);
    printf("{\"bench\":\"gemv\",\"type\":\"%s\",\"threads\":%d,\"rows\":%d,\"cols\":%d,\"n\":%d,"
           "\"batch\":%d,\"median_us\":%.1f,\"p90_us\":%.1f,\"gbps\":%.2f,\"frac_of_read_bw\":%.3f,\"level\":\"%s\","
           "\"copies\":%zu,\"max_rel_err_vs_ref\":%.2g}\n",
           t->name, threads, gemv_rows, GEMV_COLS, iters, batch, med, p90, gbps, gbps / read_gbps,
           quant_level_name(quant_level()), copies, max_rel);
    fflush(stdout);
    return 0;
}

/* -L's entries: a level may repeat (avx2,avx512,avx2,avx512: interleaved rounds on one matrix) */
#define LEVEL_RUNS_MAX 12

int main(int argc, char **argv)
{
    int threads = 2, iters = 20, opt;
    bool only[PI_TYPE_COUNT] = { false }, any_only = false;
    int levels[LEVEL_RUNS_MAX] = { (int)quant_level() }, n_levels = 1;
    while ((opt = getopt(argc, argv, "t:n:T:L:R:B:")) != -1) {
        if (opt == 'B') {
            if ((batch = atoi(optarg)) < 1)
                goto usage;
        } else if (opt == 'R') {
            gemv_rows = atoi(optarg);
            in_cache = true;
            if (gemv_rows < 16)
                goto usage;
        } else if (opt == 't') {
            threads = atoi(optarg);
        } else if (opt == 'n') {
            iters = atoi(optarg);
        } else if (opt == 'T' || opt == 'L') {
            if (opt == 'L')
                n_levels = 0;
            for (char *save = NULL, *tok = strtok_r(optarg, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                if (opt == 'T') {
                    const int ty = quant_type_from_name(tok);
                    if (ty < 0 || !quant_traits((uint32_t)ty)->is_float_matmul)
                        goto usage;
                    only[ty] = any_only = true;
                } else {
                    const int l = quant_level_from_name(tok);
                    if (l < 0 || n_levels == LEVEL_RUNS_MAX)
                        goto usage;
                    if (l > (int)quant_level_max()) {
                        fprintf(stderr, "bench_gemv: level %s not supported on this CPU or build\n", tok);
                        return 77;
                    }
                    levels[n_levels++] = l;
                }
            }
        } else {
            goto usage;
        }
    }
    if (threads < 1 || iters < 1)
        goto usage;

    struct pi_pool *pool = NULL;
    int rc = pool_new(&pool, threads);
    if (rc < 0) {
        fprintf(stderr, "bench_gemv: %s: %s\n", pi_strerror(rc), pi_errmsg());
        return 1;
    }

    struct stream_job sj = { .bytes = STREAM_BYTES, .buf = aligned_alloc(ALIGN, STREAM_BYTES) };
    if (sj.buf == NULL) {
        fprintf(stderr, "bench_gemv: cannot allocate the 1 GiB stream buffer\n");
        pool_free(pool);
        return 1;
    }
    memset(sj.buf, 1, STREAM_BYTES);
    double read_gbps = bench_stream(pool, threads, stream_read_fn, "read", STREAM_BYTES, &sj);
    sj.prefetch = true;
    double read_pf_gbps = bench_stream(pool, threads, stream_read_fn, "read_prefetch", STREAM_BYTES, &sj);
    read_gbps = read_pf_gbps > read_gbps ? read_pf_gbps : read_gbps;
    bench_stream(pool, threads, stream_copy_fn, "copy", STREAM_BYTES, &sj); /* half read + half written */
    free(sj.buf);

    const uint32_t types[] = { PI_TYPE_F32, PI_TYPE_F16, PI_TYPE_BF16, PI_TYPE_Q8_0, PI_TYPE_Q4_0,
                               PI_TYPE_Q4_1, PI_TYPE_Q5_0, PI_TYPE_Q5_1, PI_TYPE_IQ4_NL, PI_TYPE_Q2_K,
                               PI_TYPE_Q3_K, PI_TYPE_Q4_K, PI_TYPE_Q5_K, PI_TYPE_Q6_K, PI_TYPE_IQ4_XS };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        if (any_only && !only[types[i]])
            continue;
        rc = bench_type(pool, threads, iters, types[i], read_gbps, levels, n_levels);
        if (rc < 0) {
            fprintf(stderr, "bench_gemv: %s: %s\n", pi_strerror(rc), pi_errmsg());
            pool_free(pool);
            return 1;
        }
    }
    pool_free(pool);
    return 0;

usage:
    fprintf(stderr, "usage: bench_gemv [-t THREADS] [-n ITERS] [-T TYPE,... (f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 "
                    "iq4_nl q2_K q3_K q4_K q5_K q6_K iq4_xs)] [-L LEVEL,... (scalar avx2 avx512)] [-R ROWS (in cache)] [-B TOKENS]\n");
    return 2;
}
