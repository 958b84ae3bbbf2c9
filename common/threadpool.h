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

struct pi_pool;
typedef void (*pi_pool_fn)(void *arg, int ith, int nth);

int pool_new(struct pi_pool **out, int n_threads); /* n_threads >= 1, including the caller */
void pool_free(struct pi_pool *p);
int pool_size(const struct pi_pool *p);
void pool_run(struct pi_pool *p, pi_pool_fn fn, void *arg);
/* What the pool did, for benchmarks and tests (counts since pool_new; read by the pool_run thread). */
struct pool_stats {
    unsigned long long runs;          /* pool_run calls */
    unsigned long long caller_slices; /* slices the caller ran itself in runs with workers */
    unsigned long long straggles;     /* runs held up by a preempted worker */
    unsigned long long solo_periods;  /* times oversubscription was detected */
    unsigned long long solo_runs;     /* runs done by the caller alone because of it */
};
void pool_get_stats(const struct pi_pool *p, struct pool_stats *out);
/* Let idle workers sleep at once instead of spinning until the next pool_run: for a pipeline
 * stage about to wait on another process that needs these cores (the next pool_run wakes them). */
void pool_park(struct pi_pool *p);

#endif
