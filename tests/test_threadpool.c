/* test_threadpool — pool_run calls every ith exactly once per run, results are visible to the caller
 * when it returns, many rapid runs neither lose nor duplicate work, and an idle pool sleeps. Run it
 * under TSan as well (meson setup -Db_sanitize=thread) for the memory orders. */
#include "pi_err.h"
#include "testutil.h"
#include "threadpool.h"

#include <stdint.h>
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

int main(void)
{
    static uint32_t v[SUM_LEN];
    uint64_t sum = 0;
    for (int64_t i = 0; i < SUM_LEN; i++) {
        v[i] = (uint32_t)(i * 2654435761u);
        sum += v[i];
    }
    for (int n = 1; n <= MAX_THREADS; n++)
        test_pool(n, v, sum);

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
    return tu_finish("test_threadpool");
}
