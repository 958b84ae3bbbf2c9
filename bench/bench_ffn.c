/* bench_ffn — the sparse FFN (ffn_partial) of a model's layers on its own, against read bandwidth.
 *
 *   bench_ffn MODEL.gguf [-t THREADS] [-n ITERS] [-p FRACTION] [-B TOKENS] [-L LAYERS] [-g GAP_US] [-s SPIN_US]
 *             [-r] [-m auto|groups|cols] [--no-mmap] [-T]
 *
 * Each iteration runs every layer's FFN once (layer after layer, so the weights stream from DRAM as
 * in decode) over random masks keeping FRACTION of the neurons (default 0.1), new masks every
 * iteration (as every decoded token has its own: the same rows each pass would sit in the last-level
 * cache), from a fixed seed (every run and thread count sees the same masks), one token (or B tokens
 * with their own masks); the runs are built inside the timed region, as the FFN step does. Reports
 * per layer microseconds and the weight bytes ffn_partial says it read, as GB/s, one JSON line.
 * -L: only the first LAYERS layers (one layer's live rows fit in the last-level cache: the kernels'
 * cost without DRAM).
 * -g: the caller waits GAP_US between layers (spinning on the clock, as cpud's main thread polls its
 * rings), outside the timed region: the pipeline's pattern, a layer's GPU part between two steps, in
 * which idle workers may fall asleep; -s: the pool's idle spin (pool_set_spin_us, cpud's beside a GPU).
 * -r: the same masks every iteration (with -L 1 the live rows then stay in the caches: the fixed
 * overhead of a layer without its DRAM reads). -m: how the down_t AXPYs split over threads
 * (ffn_scratch.split; auto: ffn_partial's choice).
 * -T: the down_t job's timeline (ffn_trace), averaged over the timed layers, as "trace": µs from the
 * hand-out to the first slice's start, to the last group's end and to the last slice's end; the
 * threads that ran slices; per slice [start, end, wait, records, axpy] (means, µs; start and end from
 * the hand-out; a column slice's wait is the time it spun on groups still being computed, records and
 * axpy its time reading its batches' records and in its AXPY calls: the rest of it is the prefetch of
 * the next AXPY's rows and the loop).
 * "runs_us_mean": the runs' build (in the timed region; cpud builds them before ffn_partial);
 * "noop_job_us_mean": a pool job of as many empty slices as a layer's down_t job, after the same gap
 * (the hand-out to the workers and back alone). "y_hash" is an FNV-1a hash of the bits of every y
 * of every timed iteration: runs whose hashes match computed the same bytes (old vs new code, one
 * thread count vs another). */
#include "ffn_split.h"
#include "model.h"
#include "pi_err.h"
#include "threadpool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PAGE 4096

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * FNV_PRIME;
    return h;
}

/* the down_t path's neuron group (ffn_split.c's AXPY_GROUP), for the empty job's slice count */
#define NOOP_GROUP 256

static void noop_slice(void *arg, int ith, int nth)
{
    (void)arg, (void)ith, (void)nth;
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* -T: the timelines' sums over the timed layers, per slice index */
#define TRACE_SLICES 256
struct trace_sum {
    int64_t jobs;
    int32_t n_slices, n_groups;
    double first, groups_end, end, threads;
    double start[TRACE_SLICES], stop[TRACE_SLICES], wait[TRACE_SLICES], rec[TRACE_SLICES], axpy[TRACE_SLICES];
};

static void trace_add(struct trace_sum *ts, const struct ffn_trace *t)
{
    const int32_t n = t->n_slices < TRACE_SLICES ? t->n_slices : TRACE_SLICES;
    uint64_t first = UINT64_MAX, gend = 0, end = 0, seen = 0;
    for (int32_t k = 0; k < n; k++) {
        const struct ffn_slice_trace *s = &t->slice[k];
        first = s->start < first ? s->start : first;
        end = s->end > end ? s->end : end;
        if (k < t->n_groups)
            gend = s->end > gend ? s->end : gend;
        if (s->tid < 64)
            seen |= 1ull << s->tid;
        ts->start[k] += (double)(s->start - t->handout);
        ts->stop[k] += (double)(s->end - t->handout);
        ts->wait[k] += (double)s->wait;
        ts->rec[k] += (double)s->records;
        ts->axpy[k] += (double)s->axpy;
    }
    ts->first += (double)(first - t->handout);
    ts->groups_end += (double)(gend - t->handout);
    ts->end += (double)(end - t->handout);
    ts->threads += __builtin_popcountll(seen);
    ts->n_slices = n;
    ts->n_groups = t->n_groups;
    ts->jobs++;
}

/* the trace clock's ticks per µs, against the monotonic clock over 20 ms */
static double trace_ticks_per_us(void)
{
    const double t0 = now_us();
    const uint64_t c0 = ffn_trace_now();
    while (now_us() - t0 < 20000)
        ;
    return (double)(ffn_trace_now() - c0) / (now_us() - t0);
}

static void trace_print(const struct trace_sum *ts)
{
    if (!ts->jobs)
        return;
    const double k = 1.0 / (trace_ticks_per_us() * (double)ts->jobs);
    printf("{\"trace\":{\"jobs\":%lld,\"group_slices\":%d,\"slices\":%d,\"first_start_us\":%.2f,\"groups_end_us\":%.2f,"
           "\"end_us\":%.2f,\"threads\":%.1f,\"per_slice\":[",
           (long long)ts->jobs, ts->n_groups, ts->n_slices, ts->first * k, ts->groups_end * k, ts->end * k,
           ts->threads / (double)ts->jobs);
    for (int32_t i = 0; i < ts->n_slices; i++)
        printf("%s[%.2f,%.2f,%.2f,%.2f,%.2f]", i ? "," : "", ts->start[i] * k, ts->stop[i] * k, ts->wait[i] * k,
               ts->rec[i] * k, ts->axpy[i] * k);
    printf("]}}\n");
}

int main(int argc, char **argv)
{
    int threads = 1, iters = 5;
    int32_t B = 1;
    int n_layers = 0; /* 0: all */
    int gap_us = 0, spin_us = 0;
    double frac = 0.1;
    bool repeat = false; /* -r: one set of masks for every iteration */
    bool tracing = false; /* -T: the job's timeline */
    enum ffn_split_mode split = FFN_SPLIT_AUTO;
    const char *path = NULL;
    enum model_weights weights = MODEL_WEIGHTS_MAP;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-n") && i + 1 < argc)
            iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-p") && i + 1 < argc)
            frac = atof(argv[++i]);
        else if (!strcmp(argv[i], "-B") && i + 1 < argc)
            B = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-L") && i + 1 < argc)
            n_layers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-g") && i + 1 < argc)
            gap_us = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-s") && i + 1 < argc)
            spin_us = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-m") && i + 1 < argc) {
            const char *v = argv[++i];
            split = !strcmp(v, "groups") ? FFN_SPLIT_GROUPS : !strcmp(v, "cols") ? FFN_SPLIT_COLS : FFN_SPLIT_AUTO;
            if (split == FFN_SPLIT_AUTO && strcmp(v, "auto")) {
                fprintf(stderr, "bench_ffn: -m auto|groups|cols, not '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(argv[i], "-r"))
            repeat = true;
        else if (!strcmp(argv[i], "-T"))
            tracing = true;
        else if (!strcmp(argv[i], "--no-mmap")) /* the weights read into huge pages, as pictl run --no-mmap */
            weights = MODEL_WEIGHTS_READ;
        else if (argv[i][0] != '-' && !path)
            path = argv[i];
        else {
            fprintf(stderr, "usage: bench_ffn MODEL.gguf [-t THREADS] [-n ITERS] [-p FRACTION] [-B TOKENS] [-L LAYERS] "
                            "[-g GAP_US] [-s SPIN_US] [-r] [-m auto|groups|cols] [--no-mmap] [-T]\n");
            return 2;
        }
    }
    if (!path || threads < 1 || iters < 1 || B < 1 || frac <= 0 || frac > 1) {
        fprintf(stderr, "bench_ffn: need a model path, -t >= 1, -n >= 1, -B >= 1 and 0 < -p <= 1\n");
        return 2;
    }
    struct pi_model *m;
    struct pi_pool *pool;
    int rc = model_load_as(&m, path, weights);
    if (rc) {
        fprintf(stderr, "bench_ffn: %s: %s\n", path, pi_errmsg());
        return 1;
    }
    if ((rc = pool_new(&pool, threads))) {
        fprintf(stderr, "bench_ffn: %s\n", pi_errmsg());
        return 1;
    }
    if (spin_us > 0)
        pool_set_spin_us(pool, (unsigned)spin_us);
    const int64_t E = m->hp.n_embd, F = m->hp.n_ff;
    const int L = n_layers > 0 && n_layers < m->hp.n_layer ? n_layers : m->hp.n_layer;
    float *xn = malloc((size_t)B * E * sizeof *xn), *y = malloc((size_t)B * E * sizeof *y);
    const size_t per_it = (size_t)L * B * F; /* the masks of one iteration */
    uint8_t *mask = malloc(per_it * (size_t)(iters + 1)), *sel = calloc((size_t)F, 1);
    struct ffn_runs *runs = calloc(1, sizeof *runs);
    if (!xn || !y || !mask || !sel || !runs) {
        fprintf(stderr, "bench_ffn: out of memory\n");
        return 1;
    }
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    for (int64_t i = 0; i < B * E; i++)
        xn[i] = (float)((double)(rng_next(&seed) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    const uint64_t cut = (uint64_t)(frac * 18446744073709551615.0);
    for (size_t i = 0; i < per_it * (size_t)(iters + 1); i++)
        mask[i] = rng_next(&seed) <= cut;
    /* every page of the FFN tensors touched once: the first touch's page faults are not the kernels' */
    volatile uint8_t sink = 0;
    for (int l = 0; l < L; l++) {
        const struct pi_tensor *t[3] = { &m->layers[l].ffn_gate, &m->layers[l].ffn_up,
                                         m->layers[l].ffn_down_t.data ? &m->layers[l].ffn_down_t : &m->layers[l].ffn_down };
        for (int k = 0; k < 3; k++)
            for (size_t o = 0; o < t[k]->row_bytes * (size_t)t[k]->ne[1]; o += PAGE)
                sink ^= ((const uint8_t *)t[k]->data)[o];
    }
    (void)sink;
    struct ffn_scratch s = { .split = split };
    struct trace_sum ts = { 0 };
    struct ffn_slice_trace tslices[TRACE_SLICES];
    struct ffn_trace tr = { .cap = TRACE_SLICES, .slice = tslices };
    if (tracing)
        ffn_trace_set(&tr);
    double best = 1e300, sum = 0;
    uint64_t bytes_total = 0, y_hash = FNV_OFFSET;
    double runs_sum = 0; /* the runs' build, inside the timed region (cpud builds them in its prep) */
    for (int it = -1; it < iters; it++) { /* it = -1: warm-up */
        uint64_t bytes_it = 0;
        double dt = 0;
        for (int l = 0; l < L; l++) {
            if (gap_us > 0)
                for (const double g0 = now_us(); now_us() - g0 < gap_us;)
                    ;
            const double t0 = now_us();
            const struct pi_layer_weights w = model_layer_weights(m, l);
            const uint8_t *mk = mask + per_it * (size_t)(repeat ? 0 : it + 1) + (size_t)l * B * F;
            uint64_t b;
            rc = ffn_runs_build(runs, sel, 0, mk, B, F);
            const double t1 = now_us();
            if (rc || (rc = ffn_partial(pool, &s, m, &w, xn, B, runs, mk, y, &b))) {
                fprintf(stderr, "bench_ffn: layer %d: %s\n", l, pi_errmsg());
                return 1;
            }
            bytes_it += b;
            dt += now_us() - t0;
            if (tracing && it >= 0)
                trace_add(&ts, &tr);
            if (it >= 0) {
                y_hash = fnv1a(y_hash, y, (size_t)B * E * sizeof *y);
                runs_sum += t1 - t0;
            }
        }
        if (it < 0)
            continue;
        best = dt < best ? dt : best;
        sum += dt;
        bytes_total = bytes_it;
    }
    ffn_trace_set(NULL);
    struct pool_stats ps; /* the pool's own view: runs it did alone (oversubscribed), straggles, sleeps */
    pool_get_stats(pool, &ps);
    /* what a job of as many empty slices as a layer's down_t job costs (the groups and a slice a
     * thread), after the same gap: the hand-out to the workers and back, without the FFN */
    const int noop_slices = (int)((F + NOOP_GROUP - 1) / NOOP_GROUP) + threads;
    double noop_sum = 0;
    for (int k = 0; k < iters * L; k++) {
        if (gap_us > 0)
            for (const double g0 = now_us(); now_us() - g0 < gap_us;)
                ;
        const double t0 = now_us();
        pool_run_n(pool, noop_slice, NULL, noop_slices);
        noop_sum += now_us() - t0;
    }
    printf("{\"model\":\"%s\",\"threads\":%d,\"tokens\":%d,\"fraction\":%.3f,\"layers\":%d,\"down_t\":%s,"
           "\"gap_us\":%d,\"spin_us\":%d,\"us_per_layer_best\":%.1f,\"us_per_layer_mean\":%.1f,\"mb_per_layer\":%.2f,"
           "\"gb_s_best\":%.2f,\"runs_us_mean\":%.1f,\"noop_job_us_mean\":%.1f,\"repeat\":%s,\"split\":\"%s\",\"solo_runs\":%llu,\"straggles\":%llu,\"sleeps\":%llu,\"y_hash\":\"%016llx\"}\n",
           path, threads, B, frac, L, m->layers[0].ffn_down_t.data ? "true" : "false", gap_us, spin_us, best / L, sum / iters / L,
           bytes_total / 1e6 / L, bytes_total / best / 1e3, runs_sum / iters / L, noop_sum / iters / L,
           repeat ? "true" : "false",
           split == FFN_SPLIT_GROUPS ? "groups" : split == FFN_SPLIT_COLS ? "cols" : "auto", ps.solo_runs, ps.straggles,
           ps.sleeps, (unsigned long long)y_hash);
    if (tracing)
        trace_print(&ts);
    ffn_scratch_fini(&s);
    ffn_runs_fini(runs);
    pool_free(pool);
    model_free(m);
    free(xn);
    free(y);
    free(mask);
    free(sel);
    free(runs);
    return 0;
}
