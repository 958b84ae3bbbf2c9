/* test_threadpool — pool_run calls every ith exactly once per run, results are visible to the caller
 * when it returns, many rapid runs neither lose nor duplicate work, and an idle pool sleeps; with
 * --contention, busy threads on every core must not make it collapse nor change a result bit. Run it
 * under TSan as well (meson setup -Db_sanitize=thread) for the memory orders. */
#include "ops.h"
#include "pi_err.h"
#include "testutil.h"
#include "threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <unistd.h>
#include <string.h>
#include <time.h>

#define MAX_THREADS 4
#define RAPID_RUNS 20000
#define SUM_LEN 100003 /* odd: the last thread's share differs */
#define IDLE_MS 300
#define IDLE_CPU_MAX_MS 30 /* spinning workers would burn ~IDLE_MS each */

struct count_job {
    int nth_seen[MAX_THREADS];
    long calls[MAX_THREADS]; /* written only by thread ith: plain, published by pool_run's ordering */
};

static void count_fn(void *arg, int ith, int nth)
{
    struct count_job *j = arg;
    j->calls[ith]++;
    j->nth_seen[ith] = nth;
}

struct sum_job {
    const uint32_t *v;
    int64_t len;
    uint64_t partial[MAX_THREADS];
};

/* partial[ith] = Σ v[i] over this thread's contiguous share */
static void sum_fn(void *arg, int ith, int nth)
{
    struct sum_job *j = arg;
    int64_t per = (j->len + nth - 1) / nth;
    int64_t lo = ith * per, hi = lo + per < j->len ? lo + per : j->len;
    uint64_t s = 0;
    for (int64_t i = lo; i < hi; i++)
        s += j->v[i];
    j->partial[ith] = s;
}

/* pool_run_n: each of n_slices slices exactly once per run, every one told n_slices */
#define SLICES_MAX 97
struct slice_job {
    _Atomic int calls[SLICES_MAX];
    _Atomic int bad_nth;
};

static void slice_fn(void *arg, int ith, int nth)
{
    struct slice_job *j = arg;
    if (ith < 0 || ith >= SLICES_MAX || nth < 1 || nth > SLICES_MAX) {
        atomic_fetch_add(&j->bad_nth, 1);
        return;
    }
    atomic_fetch_add_explicit(&j->calls[ith], 1, memory_order_relaxed);
}

static void test_slices(int n_threads)
{
    struct pi_pool *p = NULL;
    CHECK_OK(pool_new(&p, n_threads));
    static const int counts[] = { 1, 2, 3, 5, 16, 64, SLICES_MAX };
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        const int ns = counts[c];
        struct slice_job j;
        memset(&j, 0, sizeof j);
        const int runs = 300;
        for (int r = 0; r < runs; r++)
            pool_run_n(p, slice_fn, &j, ns); /* alternating with pool_run below: the counts never mix */
        int ok = atomic_load(&j.bad_nth) == 0;
        for (int i = 0; i < SLICES_MAX; i++)
            ok &= atomic_load(&j.calls[i]) == (i < ns ? runs : 0);
        CHECK(ok, "%d threads, %d slices: each slice once per run", n_threads, ns);
        struct count_job cj;
        memset(&cj, 0, sizeof cj);
        pool_run(p, count_fn, &cj);
        int once = 1;
        for (int i = 0; i < n_threads; i++)
            once &= cj.calls[i] == 1 && cj.nth_seen[i] == n_threads;
        CHECK(once, "%d threads: pool_run after %d-slice runs still runs one slice per thread", n_threads, ns);
    }
    /* the slice count for a job: 4 per thread, none smaller than min_items, never fewer than threads */
    CHECK(pool_slices_for(p, 100000, 16) == n_threads * POOL_SLICES_PER_THREAD, "slices for a big job");
    CHECK(pool_slices_for(p, 16 * n_threads, 16) == n_threads, "a small job gets one slice a thread");
    CHECK(pool_slices_for(p, 8, 16) == n_threads, "never fewer slices than threads");
    pool_free(p);
}

/* pool_run_home: each slice exactly once per run, mixed with shared-claim runs of other counts (the
 * per-thread claim words carry a generation, never reset), with prefetch hints set before some runs
 * (a real buffer, NULL, lengths past the bound) and none before others; the home ranges cover the
 * slices once, in order. */
static void test_home(int n_threads)
{
    struct pi_pool *p = NULL;
    CHECK_OK(pool_new(&p, n_threads));
    static const int counts[] = { 1, 2, 3, 5, 16, 64, SLICES_MAX };
    static char buf[1 << 16];
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        const int ns = counts[c];
        int next = 0, cover = 1;
        for (int k = 0; k < n_threads; k++) {
            int s0, s1;
            pool_home_range(p, ns, k, &s0, &s1);
            cover &= s0 == next && s1 >= s0;
            next = s1;
        }
        CHECK(cover && next == ns, "%d threads, %d slices: home ranges tile the slices", n_threads, ns);
        struct slice_job j, o;
        memset(&j, 0, sizeof j);
        memset(&o, 0, sizeof o);
        const int runs = 300;
        for (int r = 0; r < runs; r++) {
            for (int k = 0; k < n_threads && r % 3 == 0; k++)
                pool_prefetch_set(p, k, k % 2 ? (const void *)buf : NULL, (size_t)(r % 7) * sizeof buf);
            pool_run_home(p, slice_fn, &j, ns);
            if (r % 5 == 0)
                pool_run_n(p, slice_fn, &o, ns > 2 ? ns - r % 3 : ns);
        }
        int ok = atomic_load(&j.bad_nth) == 0 && atomic_load(&o.bad_nth) == 0;
        for (int i = 0; i < SLICES_MAX; i++)
            ok &= atomic_load(&j.calls[i]) == (i < ns ? runs : 0);
        CHECK(ok, "%d threads, %d home slices: each slice once per run", n_threads, ns);
    }
    pool_free(p);
}

/* ops_matmul_prefetch: worker k's hint is the head of its home share of the next matmul's rows (the
 * rows ops.c's matmul_worker gives its home slices: ceil(rows / slices) rounded up to 16 a slice),
 * the part in the matrix that share starts in; the job after the hints keeps them, a job published
 * with no hint set since the last one clears them. */
static void test_prefetch_hints(void)
{
    enum { T = 4, ROWS_A = 500, ROWS_B = 137, RB = 18, ALIGN_ROWS = 16 };
    static char a[ROWS_A * RB], b[ROWS_B * RB];
    const struct pi_tensor ta = { .name = "a", .ne = { 32, ROWS_A, 1, 1 }, .row_bytes = RB, .data = a },
                           tb = { .name = "b", .ne = { 32, ROWS_B, 1, 1 }, .row_bytes = RB, .data = b };
    const struct pi_tensor *W[2] = { &ta, &tb };
    struct pi_pool *p = NULL;
    CHECK_OK(pool_new(&p, T));
    if (pool_prefetch_bytes(p) == 0) {
        fprintf(stderr, "prefetch hints off (PINFER_POOL_PREFETCH_KB=0): not checked\n");
        pool_free(p);
        return;
    }
    ops_matmul_prefetch(p, W, 2);
    const int64_t total = ROWS_A + ROWS_B;
    const int n = pool_slices_for(p, total, 16);
    const int64_t per = ((total + n - 1) / n + ALIGN_ROWS - 1) / ALIGN_ROWS * ALIGN_ROWS;
    int in_b = 0;
    for (int k = 1; k < T; k++) {
        int s0, s1;
        pool_home_range(p, n, k, &s0, &s1);
        const int64_t r0 = per * s0, r1 = per * s1 < total ? per * s1 : total;
        const char *want = NULL;
        size_t want_len = 0;
        if (r0 < ROWS_A) {
            want = a + r0 * RB;
            want_len = (size_t)((r1 < ROWS_A ? r1 : ROWS_A) - r0) * RB;
        } else if (r0 < total) {
            want = b + (r0 - ROWS_A) * RB;
            want_len = (size_t)(r1 - r0) * RB;
            in_b++;
        }
        const void *ptr;
        size_t len;
        pool_prefetch_get(p, k, &ptr, &len);
        CHECK(ptr == (const void *)want && len == want_len, "worker %d: hint %p+%zu, want %p+%zu (rows %lld..%lld)", k,
              ptr, len, (const void *)want, want_len, (long long)r0, (long long)r1);
    }
    CHECK(in_b == 1, "one worker's share starts in the second matrix (%d)", in_b);
    struct count_job cj;
    memset(&cj, 0, sizeof cj);
    pool_run(p, count_fn, &cj);
    const void *ptr;
    size_t len, kept = 0, left = 0;
    for (int k = 1; k < T; k++) {
        pool_prefetch_get(p, k, &ptr, &len);
        kept += len;
    }
    pool_run(p, count_fn, &cj);
    for (int k = 1; k < T; k++) {
        pool_prefetch_get(p, k, &ptr, &len);
        left += len;
    }
    CHECK(kept > 0 && left == 0, "hints kept through the next job (%zu bytes), cleared by an unhinted one (%zu)", kept,
          left);
    pool_free(p);
}

/* Ordered slices: slices [0, ORD_PRODUCERS) each write a value and publish it; the ORD_CONSUMERS
 * slices after them each wait for every producer in order and sum them (a wait on a lower slice,
 * which threadpool.h allows). The job must finish (no deadlock) at any thread count, also when the
 * caller runs it alone, and every consumer sees every value. */
#define ORD_PRODUCERS 23
#define ORD_CONSUMERS 5
struct ord_job {
    uint64_t val[ORD_PRODUCERS];
    _Atomic uint32_t done[ORD_PRODUCERS];
    uint32_t stamp;
    uint64_t sum[ORD_CONSUMERS];
};

static void ord_fn(void *arg, int ith, int nth)
{
    struct ord_job *j = arg;
    (void)nth;
    if (ith < ORD_PRODUCERS) {
        j->val[ith] = (uint64_t)ith * 1000003u + j->stamp;
        atomic_store_explicit(&j->done[ith], j->stamp, memory_order_release);
        return;
    }
    uint64_t s = 0;
    for (int k = 0; k < ORD_PRODUCERS; k++) {
        while (atomic_load_explicit(&j->done[k], memory_order_acquire) != j->stamp)
            sched_yield();
        s += j->val[k];
    }
    j->sum[ith - ORD_PRODUCERS] = s;
}

static void test_ordered(int n_threads)
{
    struct pi_pool *p = NULL;
    CHECK_OK(pool_new(&p, n_threads));
    static struct ord_job j;
    memset(&j, 0, sizeof j);
    int bad = 0;
    for (uint32_t r = 1; r <= 500; r++) {
        j.stamp = r;
        pool_run_n(p, ord_fn, &j, ORD_PRODUCERS + ORD_CONSUMERS);
        uint64_t want = 0;
        for (int k = 0; k < ORD_PRODUCERS; k++)
            want += (uint64_t)k * 1000003u + r;
        for (int c = 0; c < ORD_CONSUMERS; c++)
            bad += j.sum[c] != want;
    }
    CHECK(bad == 0, "%d threads: %d consumer slices missed a lower slice's value", n_threads, bad);
    pool_free(p);
}

/* The caller asleep while a worker finishes: a worker's slice outlasts the caller's spin (it sleeps
 * SLOW_MS), so the caller waits on its futex word and must be woken by that worker's done word (the
 * S3 / S4 pairing in threadpool.c) — promptly, and with the worker's write visible. The caller's own
 * slices hold on until a worker has claimed one, so that a worker always runs the slow one. */
#define SLOW_MS 30
#define SLOW_RUNS 5
struct slow_job {
    pthread_t caller;
    _Atomic int worker_started;
    _Atomic int calls[MAX_THREADS];
    long written[MAX_THREADS]; /* plain: published by the pool's completion */
};

static void slow_fn(void *arg, int ith, int nth)
{
    (void)nth;
    struct slow_job *j = arg;
    atomic_fetch_add(&j->calls[ith], 1);
    if (!pthread_equal(pthread_self(), j->caller)) {
        atomic_store(&j->worker_started, 1);
        const struct timespec d = { 0, SLOW_MS * 1000000L };
        nanosleep(&d, NULL);
    } else {
        for (int i = 0; i < 1000000 && !atomic_load(&j->worker_started); i++)
            sched_yield();
    }
    j->written[ith] = 1000 + ith;
}

static double mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void test_caller_sleeps(void)
{
    struct pi_pool *p = NULL;
    CHECK_OK(pool_new(&p, 2));
    for (int r = 0; r < SLOW_RUNS; r++) {
        static struct slow_job j;
        memset(&j, 0, sizeof j);
        j.caller = pthread_self();
        const double t0 = mono_ms();
        pool_run(p, slow_fn, &j);
        const double ms = mono_ms() - t0;
        CHECK(atomic_load(&j.calls[0]) == 1 && atomic_load(&j.calls[1]) == 1, "run %d: each slice once", r);
        CHECK(j.written[0] == 1000 && j.written[1] == 1001, "run %d: the slices' writes are visible", r);
        /* a lost wake-up would leave the caller asleep for good; a slow one shows here */
        CHECK(ms < 20 * SLOW_MS, "run %d: the caller came back after %.1f ms (a worker slept %d ms)", r, ms, SLOW_MS);
    }
    pool_free(p);
}

/* pool_set_spin_us: workers spinning that long catch a job that comes within it without sleeping;
 * with the default spin and the same gap they go to sleep (counted in pool_stats.sleeps). */
#define SPIN_GAP_US 2000
static void test_spin(void)
{
    struct pi_pool *p = NULL;
    CHECK_OK(pool_new(&p, 2));
    struct count_job cj;
    memset(&cj, 0, sizeof cj);
    const struct timespec gap = { .tv_sec = 0, .tv_nsec = SPIN_GAP_US * 1000L };
    struct pool_stats a, b, c;
    pool_run(p, count_fn, &cj);
    pool_get_stats(p, &a);
    for (int r = 0; r < 20; r++) {
        nanosleep(&gap, NULL);
        pool_run(p, count_fn, &cj);
    }
    pool_get_stats(p, &b);
    pool_set_spin_us(p, 200000); /* far above the gap: a busy machine may hold the worker off its core */
    pool_run(p, count_fn, &cj);
    pool_get_stats(p, &a);
    for (int r = 0; r < 20; r++) {
        nanosleep(&gap, NULL);
        pool_run(p, count_fn, &cj);
    }
    pool_get_stats(p, &c);
    CHECK(cj.calls[0] == 42 && cj.calls[1] == 42, "every run ran both slices");
    fprintf(stderr, "spin: default spin %llu sleeps in 20 gaps of %d us, 200 ms spin %llu\n",
            b.sleeps, SPIN_GAP_US, c.sleeps - a.sleeps);
    CHECK(c.sleeps - a.sleeps <= 2, "spinning 200 ms, the worker slept %llu times in 20 gaps of %d us",
          c.sleeps - a.sleeps, SPIN_GAP_US);
    pool_set_spin_us(p, 0);
    pool_free(p);
}

static double now_ms(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void test_pool(int n, const uint32_t *v, uint64_t want_sum)
{
    struct pi_pool *p = NULL;
    CHECK_OK(pool_new(&p, n));
    REQUIRE(p != NULL, "pool of %d", n);
    CHECK(pool_size(p) == n, "size %d", pool_size(p));

    struct count_job cj;
    memset(&cj, 0, sizeof cj);
    int bad_nth = 0, bad_calls = 0;
    double t0 = now_ms(CLOCK_MONOTONIC);
    for (long r = 1; r <= RAPID_RUNS; r++) {
        pool_run(p, count_fn, &cj);
        /* after each return every thread ran exactly once more */
        for (int i = 0; i < n; i++) {
            bad_calls += cj.calls[i] != r;
            bad_nth += cj.nth_seen[i] != n;
        }
    }
    double per_run_us = (now_ms(CLOCK_MONOTONIC) - t0) * 1e3 / RAPID_RUNS;
    CHECK(bad_calls == 0, "n=%d: %d wrong call counts", n, bad_calls);
    CHECK(bad_nth == 0, "n=%d: %d wrong nth", n, bad_nth);
    for (int i = n; i < MAX_THREADS; i++)
        CHECK(cj.calls[i] == 0, "n=%d: ith %d beyond the pool called", n, i);

    /* alternate jobs with different args: the results of each are complete on return */
    for (int r = 0; r < 200; r++) {
        struct sum_job sj = { .v = v, .len = SUM_LEN - r };
        pool_run(p, sum_fn, &sj);
        uint64_t s = 0;
        for (int i = 0; i < n; i++)
            s += sj.partial[i];
        uint64_t want = want_sum;
        for (int64_t i = SUM_LEN - r; i < SUM_LEN; i++)
            want -= v[i];
        CHECK(s == want, "n=%d run %d: sum %llu want %llu", n, r, (unsigned long long)s,
              (unsigned long long)want);
        pool_run(p, count_fn, &cj);
    }

    /* idle: the workers must be asleep, not spinning */
    double c0 = now_ms(CLOCK_PROCESS_CPUTIME_ID);
    struct timespec idle = { .tv_sec = 0, .tv_nsec = IDLE_MS * 1000000L };
    nanosleep(&idle, NULL);
    double cpu = now_ms(CLOCK_PROCESS_CPUTIME_ID) - c0;
    CHECK(cpu < IDLE_CPU_MAX_MS, "n=%d: idle pool used %.1f ms CPU in %d ms", n, cpu, IDLE_MS);

    /* and wakes up again after sleeping */
    long before = cj.calls[n - 1];
    pool_run(p, count_fn, &cj);
    CHECK(cj.calls[n - 1] == before + 1, "n=%d: run after idle", n);

    fprintf(stderr, "n=%d: %.2f us per pool_run, idle CPU %.2f ms\n", n, per_run_us, cpu);
    pool_free(p);
}

/* ---- under CPU contention (issue 7, item 7) ---- */

#define CONT_LEN 200000 /* floats: ~0.1 ms per slice of 2 */
#define CONT_RUNS 300
#define CONT_MAX_RATIO 2.5 /* pool time / the same slices run serially, both under contention */
#define CONT_TRIES 3       /* measurements at most: the best one is compared with CONT_MAX_RATIO */

struct fsum_job {
    const float *v;
    int64_t len;
    float partial[MAX_THREADS];
};

/* partial[ith] = a float sum over this slice, in index order: its bits depend on the slice only */
static void fsum_fn(void *arg, int ith, int nth)
{
    struct fsum_job *j = arg;
    int64_t per = (j->len + nth - 1) / nth;
    int64_t lo = ith * per, hi = lo + per < j->len ? lo + per : j->len;
    float s = 0.0f;
    for (int64_t i = lo; i < hi; i++)
        s += j->v[i] * 1.0001f;
    j->partial[ith] = s;
}

static _Atomic int spin_stop;

static void *spinner(void *arg)
{
    (void)arg;
    while (!atomic_load_explicit(&spin_stop, memory_order_relaxed)) {
    }
    return NULL;
}

/* With as many busy threads as cores competing, a pool of 2 must stay within CONT_MAX_RATIO of the
 * same work done serially (it used to wait a scheduler tick for a preempted worker on every run),
 * and every run's results must be bitwise those of the serial slices. */
static void test_contention(void)
{
    enum { N = 2 };
    float *v = malloc(sizeof(float) * CONT_LEN);
    REQUIRE(v, "alloc");
    for (int64_t i = 0; i < CONT_LEN; i++)
        v[i] = (float)((i * 2654435761u) >> 8) / (float)(1 << 24) - 0.5f;
    struct fsum_job ref = { .v = v, .len = CONT_LEN };
    for (int i = 0; i < N; i++)
        fsum_fn(&ref, i, N);

    struct pi_pool *p = NULL;
    CHECK_OK(pool_new(&p, N));
    REQUIRE(p, "pool");
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int n_spin = ncpu > 0 && ncpu < 64 ? (int)ncpu : 2;
    pthread_t th[64];
    atomic_store(&spin_stop, 0);
    for (int i = 0; i < n_spin; i++)
        REQUIRE(pthread_create(&th[i], NULL, spinner, NULL) == 0, "spinner");

    /* A collapsing pool is slow every time; the scheduler's noise is not: the best of up to
     * CONT_TRIES measurements (each the pool, then the same slices serially) is compared. */
    int differ = 0, tries = 0;
    double t_pool = 0, t_serial = 1, best = 1e30;
    while (tries < CONT_TRIES && best >= CONT_MAX_RATIO) {
        tries++;
        double t0 = now_ms(CLOCK_MONOTONIC);
        for (int r = 0; r < CONT_RUNS; r++) {
            struct fsum_job j = { .v = v, .len = CONT_LEN };
            pool_run(p, fsum_fn, &j);
            differ += memcmp(j.partial, ref.partial, sizeof(float) * N) != 0;
        }
        const double tp = now_ms(CLOCK_MONOTONIC) - t0;
        t0 = now_ms(CLOCK_MONOTONIC);
        for (int r = 0; r < CONT_RUNS; r++) {
            struct fsum_job j = { .v = v, .len = CONT_LEN };
            for (int i = 0; i < N; i++)
                fsum_fn(&j, i, N);
            differ += memcmp(j.partial, ref.partial, sizeof(float) * N) != 0;
        }
        const double ts = now_ms(CLOCK_MONOTONIC) - t0;
        if (tp / ts < best) {
            best = tp / ts;
            t_pool = tp;
            t_serial = ts;
        }
    }
    atomic_store(&spin_stop, 1);
    for (int i = 0; i < n_spin; i++)
        pthread_join(th[i], NULL);

    struct pool_stats st;
    pool_get_stats(p, &st);
    fprintf(stderr, "contention (%d spinners, pool of %d, best of %d): %d runs %.1f ms, serially %.1f ms (ratio %.2f); "
            "straggles %llu, solo periods %llu, solo runs %llu, caller slices %llu\n", n_spin, N, tries, CONT_RUNS, t_pool,
            t_serial, t_pool / t_serial, st.straggles, st.solo_periods, st.solo_runs, st.caller_slices);
    CHECK(differ == 0, "%d runs differ from the serial slices bit for bit", differ);
    CHECK(st.runs == (unsigned long long)CONT_RUNS * (unsigned long long)tries, "stats count %llu runs", st.runs);
    CHECK(t_pool < CONT_MAX_RATIO * t_serial, "under contention the pool took %.1f ms, %.1fx the serial %.1f ms",
          t_pool, t_pool / t_serial, t_serial);
    pool_free(p);
    free(v);
}

int main(int argc, char **argv)
{
    static uint32_t v[SUM_LEN];
    uint64_t sum = 0;
    for (int64_t i = 0; i < SUM_LEN; i++) {
        v[i] = (uint32_t)(i * 2654435761u);
        sum += v[i];
    }
    for (int n = 1; n <= MAX_THREADS; n++) {
        test_pool(n, v, sum);
        test_slices(n);
        test_ordered(n);
        test_home(n);
    }
    test_spin();
    test_prefetch_hints();
    test_caller_sleeps();

    struct pi_pool *p = (struct pi_pool *)&sum;
    CHECK(pool_new(&p, 0) == -PI_E_INVAL && p == NULL, "zero threads rejected");
    CHECK(pool_new(&p, -3) == -PI_E_INVAL, "negative threads rejected");
    pool_free(NULL);

    /* create and destroy quickly, with and without jobs */
    for (int i = 0; i < 50; i++) {
        struct pi_pool *q = NULL;
        CHECK_OK(pool_new(&q, 1 + i % MAX_THREADS));
        if (i % 2) {
            struct count_job cj;
            memset(&cj, 0, sizeof cj);
            pool_run(q, count_fn, &cj);
            CHECK(cj.calls[0] == 1, "quick run");
        }
        pool_free(q);
    }
    if (argc > 1 && !strcmp(argv[1], "--contention"))
        test_contention();
    return tu_finish("test_threadpool");
}
