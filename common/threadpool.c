/* threadpool.c — n-1 worker threads that run one job at a time together with the caller.
 *
 * A job is nth slices (nth = the pool size): fn(arg, ith, nth) for each ith, exactly once. Which
 * thread runs which slice is not fixed: every thread, the caller included, claims the next unclaimed
 * slice from one word until none is left. A slice computes the same bytes whoever runs it (kernels
 * split work by ith only), so results do not depend on the scheduling, while a worker that is not
 * getting the CPU no longer holds the job up: the caller takes its slice instead of waiting a
 * scheduler tick for it (the collapse under contention: 2 workers on 2 busy cores went from ~300 to
 * ~3 tok/s when every job waited for every worker).
 *
 * Waiting: workers spin on the job generation briefly (the next job of a layer usually follows within
 * microseconds), then sleep on it with FUTEX_WAIT, so an idle pool costs nothing. A worker that ran
 * slices of a job says so in a word of its own (the job's sequence number and how many it ran); the
 * caller adds up the words of the current job until they and its own slices make the job's count, and
 * if it has to wait long, sleeps on a futex word that a finishing worker bumps when it sees the caller
 * asleep. One shared counter that every worker decremented cost a cache-line transfer per worker in
 * series; the caller's loads of the per-thread words overlap (an empty 58-slice job on the GPU host's
 * 16 vCPUs, 15 threads: 7.2-7.4 -> 5.0-5.1 µs; 16 threads, 59 slices: 6.6-6.8 -> 5.7-5.8).
 *
 * Oversubscription: a slice claimed by a worker that is then preempted still makes the caller wait.
 * The caller measures that wait; when stragglers recur, or when the workers hardly ever get to a
 * slice before the caller has done them all (more threads want the cores than there are), it runs
 * the next jobs alone (every slice itself, in order: the same results) and wakes no worker, then
 * probes the workers again; each failed probe doubles the solo period (bounded).
 *
 * Slices are claimed in ascending order (claim() hands out the next one), and the caller running alone
 * runs them in order: a slice may wait for a lower one (threadpool.h, "Ordered slices").
 *
 * Home jobs (pool_run_home): each thread owns a home range of the slices and claims from its front
 * in a word of its own (generation, front, back), then steals from the BACK of the other ranges, so a
 * range's owner keeps the head it prefetched (below) and a stealer takes what the owner would reach
 * last. The generation in the word makes it start at zero for every job without the caller resetting
 * it: a claim for generation g treats an older generation as nothing claimed and a newer one as "g
 * is over" (every slice of g had been claimed before g+1 was published).
 *
 * Prefetch hints: while a worker waits for the next job it prefetches (into its L2) the region its
 * slot names, the head of its home share of the job after: the cores that finish a job early spend
 * its tail and the gap before the next one loading their next bytes, instead of all cores starting
 * the next job cold at once. The slots are atomics read relaxed: a torn or stale hint only
 * prefetches other lines (a prefetch never faults).
 *
 * Only one thread may call pool_run at a time.
 *
 * Orders (each release names the acquire it pairs with):
 *   R1 pool_run: fn/arg/job_seq/stop written, then `work` = (gen, slice 0) (release), then gen++
 *      (seq_cst)  ->  A1 worker: load gen (acquire), then the claim CAS on `work` (acquire) reads
 *      the job's generation and slice; only after a successful claim are fn/arg read (the job cannot
 *      be replaced before that slice is finished).
 *   R2 worker: its fn's writes, then its done word = (the job's sequence, the slices it ran)
 *      (seq_cst store; once per job, after its last claim failed)  ->  A2 pool_run: the done words
 *      loaded (acquire) add up to the job's slices, then the caller reads the results and may
 *      overwrite fn/arg. The sequence number is read after the A1 acquire that showed the job; a
 *      worker can only have run slices of the job whose number it read (a newer number is written
 *      only once every slice of the older job is done, and then its claims fail: it ran none).
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
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cpu_relax.h"

/* Spin iterations (~ tens of microseconds with pause) before sleeping: long enough to catch the next
 * kernel of the same layer, short enough that an idle pool is asleep almost at once. */
#define POOL_SPIN 4096
#define POOL_YIELD_EVERY 64
#define POOL_MAX_THREADS 1024
#define CACHE_LINE 64
/* Straggler detection. A wait for a claimed slice longer than STRAGGLE_SLICES times the caller's own
 * time per slice, and than STRAGGLE_MIN_NS (below that a wait is just a slice finishing), is a
 * worker that lost its core. STRAGGLE_LIMIT of them within STRAGGLE_WINDOW runs: oversubscribed.
 * A virtual machine's vCPUs lose their cores now and then with no other runnable thread of ours:
 * on the GPU host's 16 vCPUs a limit of 2 sent a 7B decode solo 1-8 times per 128 tokens (each a
 * token or so on one thread: 24-30 tok/s against 27-29 with a limit of 8, which never went solo
 * there); real oversubscription straggles in most runs and still trips the limit within a window. */
#define STRAGGLE_SLICES 4
#define STRAGGLE_MIN_NS 200000ull
#define STRAGGLE_WINDOW 32
#ifndef STRAGGLE_LIMIT /* an A/B build may set it */
#define STRAGGLE_LIMIT (STRAGGLE_WINDOW / 4)
#endif
/* Runs in a window where the caller ran every slice itself (no worker got a core, or got there, in
 * time): beyond this many the workers only cost their wake-ups, and the caller goes solo too. */
#define UNHELPED_LIMIT (STRAGGLE_WINDOW * 3 / 4)
/* Solo period after oversubscription was detected, in pool_runs (a decode token is ~10 per layer):
 * doubled while probes keep failing, back to the minimum after a clean probe window. */
#define SOLO_MIN_RUNS 256u
#define SOLO_MAX_RUNS 65536u
/* A prefetching worker checks for the next job every this many bytes (8 lines: well under 1 µs). */
#define PF_CHUNK 512

/* One per thread, each on its own line: the home-range claim word and the prefetch hint. */
struct pi_pool_home {
    _Alignas(CACHE_LINE) _Atomic uint64_t claim; /* (generation << 32) | (front << 16) | back */
    _Atomic uintptr_t pf_ptr;
    _Atomic size_t pf_len;
};

/* One per worker, each on its own line (the caller polls them while their owners claim): the last job
 * the worker ran slices of, (sequence << DONE_COUNT_BITS) | slices. 48 bits of sequence do not wrap
 * in the life of a process (2.8e14 jobs), so a word left from an older job never matches. */
#define DONE_COUNT_BITS 16 /* >= the bits of POOL_MAX_SLICES */
#define DONE_SEQ_MASK ((1ull << (64 - DONE_COUNT_BITS)) - 1)
struct pi_pool_done {
    _Alignas(CACHE_LINE) _Atomic uint64_t word;
};

struct pi_pool_worker {
    struct pi_pool *pool;
    pthread_t thread;
    int ith;
};

struct pi_pool {
    /* written by the caller, read by workers: one line */
    _Alignas(CACHE_LINE) _Atomic uint32_t gen; /* job generation; futex word of sleeping workers */
    _Atomic uint32_t sleepers;                 /* workers in (or about to enter) FUTEX_WAIT */
    pi_pool_fn fn;                             /* current job, valid while one of its slices runs */
    void *arg;
    int n_slices; /* of the current job; read only after a claim of it succeeded (as fn/arg) */
    /* atomic: a worker reads it for every generation, also one it took no slice of, so nothing
     * orders that read before the next write; relaxed suffices, the gen acquire orders the value */
    _Atomic bool stop;
    /* the claim word, CASed by every thread: its own line. (generation << 32) | (slices << 16) |
     * next unclaimed slice: the job's slice count travels in the word a claim CASes, so no claim
     * can pair one job's generation with another job's count */
    _Alignas(CACHE_LINE) _Atomic uint64_t work;
    /* the current job's sequence number (48 bits used); written by the caller before R1 */
    _Atomic uint64_t job_seq;
    /* the caller's sleep: its own line, touched only when the caller sleeps */
    _Alignas(CACHE_LINE) _Atomic uint32_t caller_wake; /* futex word of the caller, bumped to wake it */
    _Atomic uint32_t caller_sleeping;
    _Atomic uint32_t park;   /* 1: idle workers sleep now instead of spinning (pool_park) */
    _Atomic uint32_t spin_us; /* idle workers' spin before sleeping, 0: POOL_SPIN pauses (pool_set_spin_us) */
    _Atomic unsigned long long sleeps; /* workers' futex sleeps (pool_stats.sleeps) */
    int n_threads;
    int slices_per_thread; /* pool_slices_for's; PINFER_POOL_SLICES overrides it (benchmarks) */
    int n_started;
    struct pi_pool_worker *workers;
    struct pi_pool_home *homes; /* (n_threads) */
    struct pi_pool_done *dones; /* (n_threads; [0], the caller's, unused) */
    size_t pf_max;              /* prefetch bound per hint, bytes; 0: hints off */
    bool pf_fresh, pf_dirty;    /* a hint was set since the last job; some slot holds one */
    /* the caller's own bookkeeping (only the pool_run thread touches it) */
    uint32_t window_runs, window_straggles, window_unhelped; /* the current detection window */
    uint32_t solo_left;                     /* runs left to do alone */
    uint32_t solo_period;                   /* the next solo period (backoff) */
    bool probing;                           /* the window after a solo period */
    struct pool_stats stats;
};

static long futex_wait(_Atomic uint32_t *addr, uint32_t expected)
{
    return syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *addr, int n)
{
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Wait until *word != old; returns the new value, read with acquire (A1/A2). Spins POOL_SPIN pauses,
 * or spin_us microseconds when that is set (the clock read every POOL_YIELD_EVERY pauses), then sleeps.
 * Before the pauses it prefetches [pf, pf + pf_len) PF_CHUNK bytes at a time, checking the word
 * between chunks (a worker's hint; pf_len 0: none). */
static uint32_t wait_change(_Atomic uint32_t *word, uint32_t old, _Atomic uint32_t *sleeping_count,
                            _Atomic uint32_t *park, unsigned spin_us, _Atomic unsigned long long *sleeps,
                            const char *pf, size_t pf_len)
{
    uint32_t v;
    for (size_t o = 0; o < pf_len; o += PF_CHUNK) {
        v = atomic_load_explicit(word, memory_order_acquire);
        if (v != old)
            return v;
        if (park && atomic_load_explicit(park, memory_order_relaxed))
            break; /* pool_park: sleep now, the cores are wanted elsewhere */
        const size_t e = o + PF_CHUNK < pf_len ? o + PF_CHUNK : pf_len;
        for (size_t a = o; a < e; a += CACHE_LINE)
            __builtin_prefetch(pf + a, 0, 2); /* into L2 (prefetcht1): the next job reads it soon */
    }
    const uint64_t spin_end = spin_us ? now_ns() + (uint64_t)spin_us * 1000u : 0;
    for (int i = 1; spin_us || i <= POOL_SPIN; i++) {
        v = atomic_load_explicit(word, memory_order_acquire);
        if (v != old)
            return v;
        /* relaxed: a hint only; sleeping early is always correct, the futex protocol below
         * decides the value */
        if (park && atomic_load_explicit(park, memory_order_relaxed))
            break;
        cpu_relax();
        /* with more threads than free cores the thread we wait for may need this core */
        if (i % POOL_YIELD_EVERY == 0) {
            sched_yield();
            if (spin_us && now_ns() >= spin_end)
                break;
        }
    }
    if (sleeps)
        atomic_fetch_add_explicit(sleeps, 1, memory_order_relaxed);
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

#define WORK_GEN(w) ((uint32_t)((w) >> 32))
#define WORK_SLICES(w) ((uint32_t)((w) >> 16) & 0xffffu)
#define WORK_NEXT(w) ((uint32_t)(w) & 0xffffu)
/* a home job's word: next = slices + 1, so the shared claim finds nothing to take */
#define WORK_HOME(w) (WORK_NEXT(w) == WORK_SLICES(w) + 1u)
static uint64_t work_word(uint32_t gen, uint32_t slices, uint32_t next)
{
    return (uint64_t)gen << 32 | (uint64_t)slices << 16 | next;
}

/* Claim the next slice of generation g: its index, or -1 when g's slices are all taken (or a newer
 * job replaced it). A1: the acquire CAS pairs with R1's release store of `work`. */
static int claim(struct pi_pool *p, uint32_t g)
{
    uint64_t w = atomic_load_explicit(&p->work, memory_order_acquire);
    for (;;) {
        if (WORK_GEN(w) != g || WORK_NEXT(w) >= WORK_SLICES(w))
            return -1;
        if (atomic_compare_exchange_weak_explicit(&p->work, &w, w + 1, memory_order_acquire, memory_order_acquire))
            return (int)WORK_NEXT(w);
    }
}

void pool_home_range(const struct pi_pool *p, int n_slices, int k, int *s0, int *s1)
{
    *s0 = (int)((long long)k * n_slices / p->n_threads);
    *s1 = (int)((long long)(k + 1) * n_slices / p->n_threads);
}

/* Claim a slice of home range h for generation g of n slices: from the front (its owner) or the back
 * (a stealer); -1 when the range is used up or g is over. Relaxed: the claim only has to be unique
 * (one RMW word); fn/arg were published by R1 and read through the acquire of `work` (A1). */
static int claim_home(struct pi_pool *p, uint32_t g, int n, int h, bool back)
{
    int s0, s1;
    pool_home_range(p, n, h, &s0, &s1);
    if (s0 >= s1)
        return -1;
    _Atomic uint64_t *c = &p->homes[h].claim;
    uint64_t w = atomic_load_explicit(c, memory_order_relaxed);
    for (;;) {
        const uint32_t wg = (uint32_t)(w >> 32);
        uint32_t front = 0, taken_back = 0;
        if (wg == g) {
            front = (uint32_t)(w >> 16) & 0xffffu;
            taken_back = (uint32_t)w & 0xffffu;
        } else if ((int32_t)(wg - g) > 0) {
            return -1; /* a newer job: every slice of g was claimed */
        }
        if ((int)(front + taken_back) >= s1 - s0)
            return -1;
        const uint64_t nw = (uint64_t)g << 32 | (uint64_t)(front + !back) << 16 | (taken_back + back);
        if (atomic_compare_exchange_weak_explicit(c, &w, nw, memory_order_relaxed, memory_order_relaxed))
            return back ? s1 - 1 - (int)taken_back : s0 + (int)front;
    }
}

static void run_slice(struct pi_pool *p, int ith);

/* Worker w ran k slices of job seq: say so (R2; S3: the seq_cst store, then the seq_cst load of
 * caller_sleeping, pairs with the caller's S4 in wait_done), and wake the caller if it sleeps. */
static void slices_done(struct pi_pool *p, int w, uint64_t seq, uint32_t k)
{
    if (!k)
        return; /* a word from an older job counts nothing */
    atomic_store_explicit(&p->dones[w].word, (seq & DONE_SEQ_MASK) << DONE_COUNT_BITS | k, memory_order_seq_cst);
    if (atomic_load_explicit(&p->caller_sleeping, memory_order_seq_cst)) {
        atomic_fetch_add_explicit(&p->caller_wake, 1, memory_order_relaxed);
        futex_wake(&p->caller_wake, 1);
    }
}

/* Slices of job seq the workers have said they ran (A2: loads of order mo, acquire or stronger,
 * independent of each other so that their misses overlap) */
static uint32_t workers_done(struct pi_pool *p, uint64_t seq, memory_order mo)
{
    const uint64_t want = seq & DONE_SEQ_MASK;
    uint32_t sum = 0;
    for (int w = 1; w < p->n_threads; w++) {
        const uint64_t v = atomic_load_explicit(&p->dones[w].word, mo);
        if (v >> DONE_COUNT_BITS == want)
            sum += (uint32_t)(v & ((1u << DONE_COUNT_BITS) - 1));
    }
    return sum;
}

/* The caller waits until the workers have run `want` slices of job seq: spins (as wait_change), then
 * sleeps on caller_wake. S4: caller_sleeping set (seq_cst), then the words re-checked (seq_cst
 * loads): a worker finishing after that check sees the flag (S3) and bumps caller_wake, whose value
 * was read before the flag was set, so FUTEX_WAIT returns at once or is woken. */
static void wait_done(struct pi_pool *p, uint64_t seq, uint32_t want)
{
    for (int i = 1; i <= POOL_SPIN; i++) {
        if (workers_done(p, seq, memory_order_acquire) == want)
            return;
        cpu_relax();
        if (i % POOL_YIELD_EVERY == 0)
            sched_yield();
    }
    for (;;) {
        const uint32_t w0 = atomic_load_explicit(&p->caller_wake, memory_order_relaxed);
        atomic_store_explicit(&p->caller_sleeping, 1, memory_order_seq_cst);
        const bool done = workers_done(p, seq, memory_order_seq_cst) == want;
        if (!done)
            futex_wait(&p->caller_wake, w0);
        atomic_store_explicit(&p->caller_sleeping, 0, memory_order_relaxed);
        if (done || workers_done(p, seq, memory_order_acquire) == want)
            return;
    }
}

/* Thread k's part of home job g: its own range from the front, then the others' from the back; the
 * number of slices it ran (not yet counted done). */
static int run_home(struct pi_pool *p, uint32_t g, int n, int k)
{
    int mine = 0;
    for (int v = 0; v < p->n_threads; v++) {
        const int h = (k + v) % p->n_threads;
        for (int s; (s = claim_home(p, g, n, h, v != 0)) >= 0; mine++)
            run_slice(p, s);
    }
    return mine;
}

/* Run one claimed slice; the claimer counts it done with its others (slices_done) */
static void run_slice(struct pi_pool *p, int ith)
{
    p->fn(p->arg, ith, p->n_slices);
}

static void *worker_main(void *arg)
{
    struct pi_pool_worker *w = arg;
    struct pi_pool *pool = w->pool;
    struct pi_pool_home *me = &pool->homes[w->ith];
    uint32_t seen = 0; /* pool_new publishes generation 0 before starting threads */

    for (;;) {
        /* relaxed: the spin and the prefetch hint are tuning hints, any value is correct */
        size_t pf_len = atomic_load_explicit(&me->pf_len, memory_order_relaxed);
        const char *pf = (const char *)atomic_load_explicit(&me->pf_ptr, memory_order_relaxed);
        pf_len = pf_len < pool->pf_max ? pf_len : pool->pf_max;
        seen = wait_change(&pool->gen, seen, &pool->sleepers, &pool->park,
                           atomic_load_explicit(&pool->spin_us, memory_order_relaxed), &pool->sleeps, pf,
                           pf ? pf_len : 0); /* A1 */
        if (atomic_load_explicit(&pool->stop, memory_order_relaxed))
            break;
        const uint64_t job = atomic_load_explicit(&pool->work, memory_order_acquire); /* A1 */
        const uint64_t seq = atomic_load_explicit(&pool->job_seq, memory_order_relaxed); /* ordered by A1 (R2) */
        if (WORK_GEN(job) == seen && WORK_HOME(job)) {
            slices_done(pool, w->ith, seq, (uint32_t)run_home(pool, seen, (int)WORK_SLICES(job), w->ith));
            continue;
        }
        uint32_t ran = 0;
        for (int ith; (ith = claim(pool, seen)) >= 0; ran++)
            run_slice(pool, ith);
        slices_done(pool, w->ith, seq, ran);
    }
    return NULL;
}

/* Publish a new generation of n slices (R1 + S2), shared or home claims, and wake every sleeping worker. */
static uint32_t publish(struct pi_pool *p, uint32_t n, bool home)
{
    /* only this thread changes gen: a relaxed read of it is its latest value */
    const uint32_t g = atomic_load_explicit(&p->gen, memory_order_relaxed) + 1;
    const bool stop = atomic_load_explicit(&p->stop, memory_order_relaxed);
    atomic_store_explicit(&p->work, work_word(g, n, stop ? n : home ? n + 1 : 0u), memory_order_release); /* R1 */
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_seq_cst);
    wake_if_sleeping(&p->gen, &p->sleepers, p->n_threads);
    return g;
}

static void pool_stop_workers(struct pi_pool *p)
{
    atomic_store_explicit(&p->stop, true, memory_order_relaxed); /* ordered by publish's release (R1) */
    publish(p, 0, false);
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
    *p = (struct pi_pool){ .n_threads = n_threads, .solo_period = SOLO_MIN_RUNS,
                           .slices_per_thread = POOL_SLICES_PER_THREAD };
    const char *spt = getenv("PINFER_POOL_SLICES");
    if (spt && atoi(spt) >= 1 && atoi(spt) <= 64)
        p->slices_per_thread = atoi(spt);
    atomic_init(&p->gen, 0);
    atomic_init(&p->stop, false);
    atomic_init(&p->work, work_word(0, 0, 0)); /* generation 0: nothing to claim */
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->job_seq, 0);
    atomic_init(&p->caller_wake, 0);
    atomic_init(&p->caller_sleeping, 0);
    atomic_init(&p->park, 0);
    atomic_init(&p->spin_us, 0);
    atomic_init(&p->sleeps, 0);
    p->pf_max = (size_t)POOL_PREFETCH_KB << 10;
    const char *pfk = getenv("PINFER_POOL_PREFETCH_KB");
    if (pfk && atoi(pfk) >= 0 && atoi(pfk) <= 65536)
        p->pf_max = (size_t)atoi(pfk) << 10;
    p->workers = calloc((size_t)n_threads, sizeof *p->workers);
    p->homes = aligned_alloc(CACHE_LINE, (size_t)n_threads * sizeof *p->homes);
    p->dones = aligned_alloc(CACHE_LINE, (size_t)n_threads * sizeof *p->dones);
    if (p->workers == NULL || p->homes == NULL || p->dones == NULL) {
        rc = pi_fail(PI_E_NOMEM, "pool: out of memory");
        goto fail;
    }
    for (int i = 0; i < n_threads; i++) {
        atomic_init(&p->homes[i].claim, 0); /* generation 0: nothing claimed of any later job */
        atomic_init(&p->homes[i].pf_ptr, 0);
        atomic_init(&p->homes[i].pf_len, 0);
        atomic_init(&p->dones[i].word, 0); /* sequence 0: no job has it (the first is 1) */
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
    free(p->homes);
    free(p->dones);
    free(p);
    return rc;
}

void pool_free(struct pi_pool *p)
{
    if (p == NULL)
        return;
    if (getenv("PINFER_POOL_STATS")) /* benchmarks: what the contention handling did */
        fprintf(stderr, "[pool] threads %d: runs %llu, caller slices %llu, straggles %llu, solo periods %llu, "
                "solo runs %llu, worker sleeps %llu\n", p->n_threads, p->stats.runs, p->stats.caller_slices,
                p->stats.straggles, p->stats.solo_periods, p->stats.solo_runs,
                atomic_load_explicit(&p->sleeps, memory_order_relaxed));
    pool_stop_workers(p);
    free(p->workers);
    free(p->homes);
    free(p->dones);
    free(p);
}

int pool_size(const struct pi_pool *p)
{
    return p->n_threads;
}

/* After a run with workers: was it held up by a straggler or left to the caller, and is the pool
 * oversubscribed? */
static void account(struct pi_pool *p, bool straggled, bool unhelped)
{
    p->window_straggles += straggled;
    p->window_unhelped += unhelped;
    p->stats.straggles += straggled;
    if (p->window_straggles >= STRAGGLE_LIMIT || p->window_unhelped >= UNHELPED_LIMIT) {
        /* oversubscribed: go solo; a failed probe doubles the next period */
        p->solo_left = p->solo_period;
        if (p->probing && p->solo_period < SOLO_MAX_RUNS)
            p->solo_period *= 2;
        p->probing = false;
        p->window_runs = p->window_straggles = p->window_unhelped = 0;
        p->stats.solo_periods++;
        return;
    }
    if (++p->window_runs >= STRAGGLE_WINDOW) {
        if (p->probing) /* a clean probe: the contention is gone */
            p->solo_period = SOLO_MIN_RUNS;
        p->probing = false;
        p->window_runs = p->window_straggles = p->window_unhelped = 0;
    }
}

void pool_run(struct pi_pool *p, pi_pool_fn fn, void *arg)
{
    pool_run_n(p, fn, arg, p->n_threads);
}

int pool_slices_for(const struct pi_pool *p, long long items, long long min_items)
{
    /* POOL_SLICES_PER_THREAD slices a thread, none under min_items items: a thread that finishes
     * early takes another slice instead of idling while the slowest one streams its share */
    long long n = (long long)p->n_threads * p->slices_per_thread;
    if (min_items > 0 && items / min_items < n)
        n = items / min_items;
    if (n < p->n_threads)
        n = p->n_threads;
    return n > POOL_MAX_SLICES ? POOL_MAX_SLICES : (int)n;
}

void pool_prefetch_set(struct pi_pool *p, int k, const void *ptr, size_t len)
{
    if (k < 1 || k >= p->n_threads || p->pf_max == 0)
        return;
    atomic_store_explicit(&p->homes[k].pf_ptr, (uintptr_t)ptr, memory_order_relaxed);
    atomic_store_explicit(&p->homes[k].pf_len, len, memory_order_relaxed);
    p->pf_fresh = true;
}

size_t pool_prefetch_bytes(const struct pi_pool *p)
{
    return p->n_threads > 1 ? p->pf_max : 0;
}

void pool_prefetch_get(const struct pi_pool *p, int k, const void **ptr, size_t *len)
{
    const bool ok = k >= 1 && k < p->n_threads;
    *ptr = ok ? (const void *)atomic_load_explicit(&p->homes[k].pf_ptr, memory_order_relaxed) : NULL;
    *len = ok ? atomic_load_explicit(&p->homes[k].pf_len, memory_order_relaxed) : 0;
}

/* Before a job: hints set since the last one stay for its workers; otherwise clear the old ones. */
static void prefetch_publish(struct pi_pool *p)
{
    if (p->pf_fresh) {
        p->pf_fresh = false;
        p->pf_dirty = true;
    } else if (p->pf_dirty) {
        for (int k = 1; k < p->n_threads; k++)
            atomic_store_explicit(&p->homes[k].pf_len, 0, memory_order_relaxed);
        p->pf_dirty = false;
    }
}

static void run_job(struct pi_pool *p, pi_pool_fn fn, void *arg, int n, bool home);

void pool_run_n(struct pi_pool *p, pi_pool_fn fn, void *arg, int n_slices)
{
    run_job(p, fn, arg, n_slices < 1 ? 1 : n_slices > POOL_MAX_SLICES ? POOL_MAX_SLICES : n_slices, false);
}

void pool_run_home(struct pi_pool *p, pi_pool_fn fn, void *arg, int n_slices)
{
    run_job(p, fn, arg, n_slices < 1 ? 1 : n_slices > POOL_MAX_SLICES - 1 ? POOL_MAX_SLICES - 1 : n_slices, true);
}

static void run_job(struct pi_pool *p, pi_pool_fn fn, void *arg, int n, bool home)
{
    p->stats.runs++;
    prefetch_publish(p);
    if (p->n_threads == 1 || n == 1) {
        for (int ith = 0; ith < n; ith++)
            fn(arg, ith, n);
        return;
    }
    if (p->solo_left > 0) {
        /* the same slices as with workers, one after the other: the same results */
        for (int ith = 0; ith < n; ith++)
            fn(arg, ith, n);
        p->stats.solo_runs++;
        if (--p->solo_left == 0)
            p->probing = true;
        return;
    }
    atomic_store_explicit(&p->park, 0, memory_order_relaxed); /* back to spinning between jobs */
    /* Previous job fully done (A2 of the last run), so no worker reads fn/arg now. */
    p->fn = fn;
    p->arg = arg;
    p->n_slices = n;
    /* only this thread writes it: relaxed read-modify-write, ordered before the workers by R1 */
    const uint64_t seq = atomic_load_explicit(&p->job_seq, memory_order_relaxed) + 1;
    atomic_store_explicit(&p->job_seq, seq, memory_order_relaxed);
    const uint64_t t0 = now_ns();
    const uint32_t g = publish(p, (uint32_t)n, home); /* R1: the plain and relaxed stores above are ordered before it */

    int mine = 0;
    if (home)
        mine = run_home(p, g, n, 0);
    else
        for (int ith; (ith = claim(p, g)) >= 0; mine++)
            run_slice(p, ith);
    bool straggled = false;
    const uint32_t want = (uint32_t)(n - mine);
    if (want != 0 && workers_done(p, seq, memory_order_acquire) != want) { /* A2 */
        /* every slice is claimed; one still runs on a worker */
        const uint64_t t1 = now_ns();
        wait_done(p, seq, want); /* A2 */
        const uint64_t waited = now_ns() - t1, per_slice = mine ? (t1 - t0) / (uint64_t)mine : 0;
        straggled = waited > STRAGGLE_MIN_NS && (mine == 0 || waited > STRAGGLE_SLICES * per_slice);
    }
    p->stats.caller_slices += (uint64_t)mine;
    account(p, straggled, mine == n);
}

void pool_get_stats(const struct pi_pool *p, struct pool_stats *out)
{
    *out = p->stats;
    out->sleeps = atomic_load_explicit(&p->sleeps, memory_order_relaxed);
}

void pool_park(struct pi_pool *p)
{
    atomic_store_explicit(&p->park, 1, memory_order_relaxed);
}

void pool_set_spin_us(struct pi_pool *p, unsigned us)
{
    atomic_store_explicit(&p->spin_us, us, memory_order_relaxed);
}
