/* threadpool.h — a fixed pool of worker threads for data-parallel kernels.
 *
 * pool_run(p, fn, arg) calls fn(arg, ith, nth) once for every ith in [0, nth), nth = the pool size,
 * and returns when all have finished. Which thread runs which ith is decided at run time (a thread
 * that is not getting the CPU leaves its share to the others), so fn must compute from (arg, ith,
 * nth) alone — the same bytes whoever runs it — and must not wait for another ith. Under CPU
 * contention the caller may run every ith itself, in order. Workers wait on a futex between jobs,
 * so an idle pool burns no CPU (the development machine has 2 cores). */
#ifndef PI_THREADPOOL_H
#define PI_THREADPOOL_H

#include <stddef.h>

struct pi_pool;
typedef void (*pi_pool_fn)(void *arg, int ith, int nth);

int pool_new(struct pi_pool **out, int n_threads); /* n_threads >= 1, including the caller */
void pool_free(struct pi_pool *p);
int pool_size(const struct pi_pool *p);
void pool_run(struct pi_pool *p, pi_pool_fn fn, void *arg);
/* The same with n_slices slices, fn(arg, i, n_slices) for i in [0, n_slices) (1..POOL_MAX_SLICES),
 * claimed one at a time by whichever thread is free: more slices than threads balance a job whose
 * threads run at different speeds (memory-bound GEMVs on many cores).
 * Ordered slices: slices are claimed in ascending order (and the caller running alone runs them in
 * that order), so when slice i starts, every slice below i has started and runs on a thread that
 * holds it. A slice may therefore wait for a LOWER slice's result (never a higher one's): the lowest
 * unfinished slice never waits, so the job always completes. One job can thus compute and then
 * reduce in a fixed order (ffn_split.c) without a second pool_run and its round trip. */
#define POOL_MAX_SLICES 65535
/* slices a thread of a pool_slices_for job: 8 with home jobs (claims on a thread's own word are
 * cheap, and finer slices even out the tail; GPU host, 2026-12-02: with the 1 MB prefetch below,
 * s4 +2 / +7 / +12 % and d4 +6 / +9 / +8 % over 4 slices and 256 KB in 3 interleaved rounds) */
#define POOL_SLICES_PER_THREAD 8
void pool_run_n(struct pi_pool *p, pi_pool_fn fn, void *arg, int n_slices);
/* Home slices: the same job without the ascending order. Thread k of the pool (0 = the caller,
 * 1..n-1 the workers) first runs the slices of its home range (pool_home_range), in order, then takes
 * the unclaimed slices of the other ranges (from k + 1 on, wrapping). A thread thus reads the same
 * part of a matrix job after job, and knows before a job which part it will read first: while it
 * waits for the next job it can prefetch that part (pool_prefetch_set). No slice may wait for another.
 * Claims go to a word per thread, not one word that every thread CASes. n_slices <= POOL_MAX_SLICES - 1. */
void pool_run_home(struct pi_pool *p, pi_pool_fn fn, void *arg, int n_slices);
/* Thread k's home range [*s0, *s1) of a home job of n_slices slices (floor(k n / T), T = pool size). */
void pool_home_range(const struct pi_pool *p, int n_slices, int k, int *s0, int *s1);
/* What worker k (1..T-1) prefetches while it waits for the job after the next one it runs: [ptr, ptr +
 * len), up to the pool's prefetch bound (PINFER_POOL_PREFETCH_KB, default POOL_PREFETCH_KB; 0 turns
 * it off). Set before the job that precedes the one it describes: the workers that finish that job
 * early use its tail and the gap after it to bring the head of their next share into their cache,
 * so every core streams from its first byte. A hint only (a prefetch never faults and changes no
 * result); a job published with no hint set since the last one clears every worker's hint. k = 0 (the
 * caller, busy between jobs) is ignored. */
#define POOL_PREFETCH_KB 1024
void pool_prefetch_set(struct pi_pool *p, int k, const void *ptr, size_t len);
/* The prefetch bound in bytes (0: off), for callers that skip computing hints. */
size_t pool_prefetch_bytes(const struct pi_pool *p);
/* Worker k's hint as it stands (tests; read by the pool_run thread). */
void pool_prefetch_get(const struct pi_pool *p, int k, const void **ptr, size_t *len);
/* A slice count for a job of `items` work items: POOL_SLICES_PER_THREAD per thread, each at least
 * min_items (fewer slices for a small job), never fewer than the threads. */
int pool_slices_for(const struct pi_pool *p, long long items, long long min_items);
/* What the pool did, for benchmarks and tests (counts since pool_new; read by the pool_run thread). */
struct pool_stats {
    unsigned long long runs;          /* pool_run calls */
    unsigned long long caller_slices; /* slices the caller ran itself in runs with workers */
    unsigned long long straggles;     /* runs held up by a preempted worker */
    unsigned long long solo_periods;  /* times oversubscription was detected */
    unsigned long long solo_runs;     /* runs done by the caller alone because of it */
    unsigned long long sleeps;        /* times a worker went to sleep on the futex between jobs */
};
void pool_get_stats(const struct pi_pool *p, struct pool_stats *out);
/* Let idle workers sleep at once instead of spinning until the next pool_run: for a pipeline
 * stage about to wait on another process that needs these cores (the next pool_run wakes them). */
void pool_park(struct pi_pool *p);
/* How long an idle worker spins for the next job before it sleeps, in microseconds (0: the default,
 * POOL_SPIN pauses, some tens of microseconds). A pipeline stage whose jobs come every ~100-300 µs
 * from another process (cpud beside a GPU) sets it above that gap: a futex wake-up of every worker
 * on each job costs tens of microseconds on a virtual machine's vCPUs. pool_park still wins. */
void pool_set_spin_us(struct pi_pool *p, unsigned us);

#endif
