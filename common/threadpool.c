/* threadpool.c — n-1 worker threads that run one job at a time together with the caller.
 *
 * A job is published by bumping a generation counter; workers spin on it briefly (the next job of a
 * layer usually follows within microseconds) and then sleep on it with FUTEX_WAIT, so an idle pool
 * costs nothing. The caller counts finished workers down in `pending` and, if it has to wait long,
 * sleeps on that word in turn. Only one thread may call pool_run at a time.
 *
 * Orders (each release names the acquire it pairs with):
 *   R1 pool_run: job/stop fields written, then gen++ (release)  ->  A1 worker: load gen (acquire),
 *      then reads job/stop.
 *   R2 worker: its fn's writes, then pending-- (release)  ->  A2 pool_run: load pending == 0
 *      (acquire), then the caller reads the results and may overwrite job.
 *   Sleeping uses a Dekker pattern: the sleeper publishes "I am sleeping" and re-checks the word; the
 *   waker changes the word and then checks "is anyone sleeping". Both sides need seq_cst for that
 *   store->load order (S1/S2 below); FUTEX_WAIT itself rechecks the word in the kernel, so a wake
 *   between the recheck and the sleep is not lost. */
#include "threadpool.h"

#include "pi_err.h"

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* Spin iterations (~ tens of microseconds with pause) before sleeping: long enough to catch the next
 * kernel of the same layer, short enough that an idle pool is asleep almost at once. */
#define POOL_SPIN 4096
#define POOL_YIELD_EVERY 64
#define POOL_MAX_THREADS 1024
#define CACHE_LINE 64

struct pi_pool_worker {
    struct pi_pool *pool;
    pthread_t thread;
    int ith;
};

struct pi_pool {
    /* written by the caller, read by workers: one line */
    _Alignas(CACHE_LINE) _Atomic uint32_t gen; /* job generation; futex word of sleeping workers */
    _Atomic uint32_t sleepers;                 /* workers in (or about to enter) FUTEX_WAIT */
    pi_pool_fn fn;                             /* current job, valid for generation gen */
    void *arg;
    bool stop;
    /* written by workers, read by the caller: its own line so workers' decrements do not bounce
     * the line the workers spin on */
    _Alignas(CACHE_LINE) _Atomic uint32_t pending; /* workers not done yet; futex word of the caller */
    _Atomic uint32_t caller_sleeping;
    _Atomic uint32_t park;   /* 1: idle workers sleep now instead of spinning (pool_park) */
    int n_threads;
    int n_started;
    struct pi_pool_worker *workers;
};

static long futex_wait(_Atomic uint32_t *addr, uint32_t expected)
{
    return syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *addr, int n)
{
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

/* Wait until *word != old; returns the new value, read with acquire (A1/A2). */
static uint32_t wait_change(_Atomic uint32_t *word, uint32_t old, _Atomic uint32_t *sleeping_count,
                            _Atomic uint32_t *park)
{
    uint32_t v;
    for (int i = 1; i <= POOL_SPIN; i++) {
        v = atomic_load_explicit(word, memory_order_acquire);
        if (v != old)
            return v;
        /* relaxed: a hint only; sleeping early is always correct, the futex protocol below
         * decides the value */
        if (park && atomic_load_explicit(park, memory_order_relaxed))
            break;
        cpu_relax();
        /* with more threads than free cores the thread we wait for may need this core */
        if (i % POOL_YIELD_EVERY == 0)
            sched_yield();
    }
    for (;;) {
        /* S1: announce, then recheck; pairs with S2 in wake_if_sleeping */
        atomic_fetch_add_explicit(sleeping_count, 1, memory_order_seq_cst);
        v = atomic_load_explicit(word, memory_order_seq_cst);
        if (v == old)
            futex_wait(word, old); /* returns at once if *word already changed */
        atomic_fetch_sub_explicit(sleeping_count, 1, memory_order_relaxed);
        v = atomic_load_explicit(word, memory_order_acquire);
        if (v != old)
            return v;
    }
}

/* Called right after changing *word (with a seq_cst RMW, S2): wake sleepers if any announced. */
static void wake_if_sleeping(_Atomic uint32_t *word, _Atomic uint32_t *sleeping_count, int n)
{
    if (atomic_load_explicit(sleeping_count, memory_order_seq_cst) != 0)
        futex_wake(word, n);
}

static void *worker_main(void *p)
{
    struct pi_pool_worker *w = p;
    struct pi_pool *pool = w->pool;
    uint32_t seen = 0; /* pool_new publishes generation 0 before starting threads */

    for (;;) {
        seen = wait_change(&pool->gen, seen, &pool->sleepers, &pool->park); /* A1 */
        if (pool->stop)
            break;
        pool->fn(pool->arg, w->ith, pool->n_threads);
        /* R2 + S2: results visible to the caller; the seq_cst RMW also orders the sleep check */
        if (atomic_fetch_sub_explicit(&pool->pending, 1, memory_order_seq_cst) == 1)
            wake_if_sleeping(&pool->pending, &pool->caller_sleeping, 1);
    }
    return NULL;
}

/* Publish a new generation (R1 + S2) and wake every sleeping worker. */
static void publish(struct pi_pool *p)
{
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_seq_cst);
    wake_if_sleeping(&p->gen, &p->sleepers, p->n_threads);
}

static void pool_stop_workers(struct pi_pool *p)
{
    p->stop = true;
    publish(p);
    for (int i = 0; i < p->n_started; i++)
        pthread_join(p->workers[i].thread, NULL);
}

int pool_new(struct pi_pool **out, int n_threads)
{
    int rc;
    *out = NULL;
    if (n_threads < 1 || n_threads > POOL_MAX_THREADS)
        return pi_fail(PI_E_INVAL, "pool: %d threads (want 1..%d)", n_threads, POOL_MAX_THREADS);

    struct pi_pool *p = aligned_alloc(CACHE_LINE, sizeof *p);
    if (p == NULL)
        return pi_fail(PI_E_NOMEM, "pool: out of memory");
    *p = (struct pi_pool){ .n_threads = n_threads };
    atomic_init(&p->gen, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->caller_sleeping, 0);
    p->workers = calloc((size_t)n_threads, sizeof *p->workers);
    if (p->workers == NULL) {
        rc = pi_fail(PI_E_NOMEM, "pool: out of memory");
        goto fail;
    }
    for (int i = 1; i < n_threads; i++) {
        struct pi_pool_worker *w = &p->workers[p->n_started];
        w->pool = p;
        w->ith = i;
        int err = pthread_create(&w->thread, NULL, worker_main, w);
        if (err != 0) {
            rc = pi_fail(err, "pool: cannot start worker %d of %d", i, n_threads - 1);
            goto fail;
        }
        p->n_started++;
    }
    *out = p;
    return 0;

fail:
    pool_stop_workers(p);
    free(p->workers);
    free(p);
    return rc;
}

void pool_free(struct pi_pool *p)
{
    if (p == NULL)
        return;
    pool_stop_workers(p);
    free(p->workers);
    free(p);
}

int pool_size(const struct pi_pool *p)
{
    return p->n_threads;
}

void pool_run(struct pi_pool *p, pi_pool_fn fn, void *arg)
{
    if (p->n_threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    atomic_store_explicit(&p->park, 0, memory_order_relaxed); /* back to spinning between jobs */
    /* Previous job fully done (A2 of the last run), so no worker reads fn/arg now. */
    p->fn = fn;
    p->arg = arg;
    atomic_store_explicit(&p->pending, (uint32_t)(p->n_threads - 1), memory_order_relaxed);
    publish(p); /* R1: the relaxed pending store above is ordered before it too */

    fn(arg, 0, p->n_threads);

    uint32_t left = atomic_load_explicit(&p->pending, memory_order_acquire); /* A2 */
    while (left != 0)
        left = wait_change(&p->pending, left, &p->caller_sleeping, NULL); /* A2 */
}

void pool_park(struct pi_pool *p)
{
    atomic_store_explicit(&p->park, 1, memory_order_relaxed);
}
