/* threadpool.h — a fixed pool of worker threads for data-parallel kernels.
 *
 * pool_run(p, fn, arg) calls fn(arg, ith, nth) on every thread (the caller is thread 0) and returns
 * when all have finished. Workers wait on a futex between jobs, so an idle pool burns no CPU (the
 * development machine has 2 cores). */
#ifndef PI_THREADPOOL_H
#define PI_THREADPOOL_H

struct pi_pool;
typedef void (*pi_pool_fn)(void *arg, int ith, int nth);

int pool_new(struct pi_pool **out, int n_threads); /* n_threads >= 1, including the caller */
void pool_free(struct pi_pool *p);
int pool_size(const struct pi_pool *p);
void pool_run(struct pi_pool *p, pi_pool_fn fn, void *arg);
/* Let idle workers sleep at once instead of spinning until the next pool_run: for a pipeline
 * stage about to wait on another process that needs these cores (the next pool_run wakes them). */
void pool_park(struct pi_pool *p);

#endif
