/* quant_prefetch.h — the software prefetch the CPU kernel units share (quant_avx2.c, quant_avx512.c):
 * how far ahead of the weights being read, to which cache level, and where a prefetch may reach.
 * Included only by units compiled with at least SSE (every x86-64).
 *
 * On a Xeon VM the hardware prefetchers alone keep too few DRAM reads in flight for one core behind a
 * compute loop (GEMV +50-70 % with the software prefetch, 768 B too short, 3-6 KiB alike); on the Zen 4
 * development box it is neutral. Every helper that issues a prefetch is always_inline: as a plain
 * static inline, GCC 12 (-O1 and up) deleted its calls as side-effect free before inlining them, and
 * for a while no GEMV prefetched at all (q4_0 GEMV 79 -> 101 GB/s, F16 97 -> 143 on the GPU host once
 * restored; tests/test_prefetch_kept.py reads the object code so that it cannot happen silently
 * again). */
#ifndef PI_QUANT_PREFETCH_H
#define PI_QUANT_PREFETCH_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#ifndef PREFETCH_BYTES /* an A/B build may set it */
#define PREFETCH_BYTES 3072
#endif

/* Where the software prefetch may reach: past the row's end into the next row (a dense GEMV's rows
 * are contiguous), or only inside it (a single dot, or a gathered row: the bytes after it belong to
 * a neuron that is most likely inactive, and fetching them would waste read bandwidth). */
enum prefetch_reach { PF_ROW, PF_PAST };
#ifndef VEC_DOT_REACH /* a single dot's (an A/B build may set PF_PAST) */
#define VEC_DOT_REACH PF_ROW
#endif

/* The level scattered rows are fetched to: L2 (prefetcht1). The GPU host's Xeon, hybrid s4 at
 * --vram-budget 2.59 (cpud's cold share, 1.5 MB of gathered rows a layer on 15 threads): T1 ahead of
 * T0 in 5 of 5 interleaved rounds, 276.6 -> 290.7 tok/s by medians, cpud's FFN median 50 -> 46 µs;
 * the in-process s4 decode and bench_ffn at 10 % unchanged (docs/BENCHMARKS.md, 2026-12-02 17:18). An
 * A/B build may set _MM_HINT_T0. */
#ifndef GATHER_HINT
#define GATHER_HINT _MM_HINT_T1
#endif

/* The level streamed rows are fetched to, PREFETCH_BYTES ahead: L1. On the dev box's Zen 4 one core's
 * GEMV with _MM_HINT_T1 here ran F16 33 -> 24 GB/s and q4_0 25 -> 22; the GPU host's Xeon, where the
 * gathered rows gained from L2 (GATHER_HINT), is not measured yet: an A/B build may set _MM_HINT_T1. */
#ifndef STREAM_HINT
#define STREAM_HINT _MM_HINT_T0
#endif

#define PF_LINE 64

/* Prefetch while byte `at` of a row of `row` bytes is computed: with pf (a gathered row to come),
 * its byte `at`, so that the next row's lines are requested one by one along this one; else the
 * line PREFETCH_BYTES past `at`, if within the reach */
static inline __attribute__((always_inline)) void prefetch_ahead(const char *x, size_t at, size_t row,
                                                                  enum prefetch_reach reach, const char *pf)
{
    if (pf)
        _mm_prefetch(pf + at, GATHER_HINT);
    else if (reach == PF_PAST || at + PREFETCH_BYTES < row)
        _mm_prefetch(x + at + PREFETCH_BYTES, STREAM_HINT);
}

/* the first PREFETCH_BYTES of a row (the in-row prefetch, or the hardware, takes over along it) */
static inline __attribute__((always_inline)) void prefetch_row_head(const void *row, size_t row_bytes)
{
    for (size_t o = 0; o < row_bytes && o < PREFETCH_BYTES; o += PF_LINE)
        _mm_prefetch((const char *)row + o, GATHER_HINT);
}

/* Gathered rows are scattered, so no hardware prefetcher sees the next one coming: row r + GATHER_AHEAD
 * is requested line by line along row r (the returned pointer, for prefetch_ahead), and at the first
 * row the heads of the ones before it. Spread over the compute rather than a burst of a row's lines
 * at its start (which waits on the core's fill buffers): one core's gathered q4_0 GEMV on the dev box
 * ran at 3.5-4.0 GB/s with no prefetch, 6.1-6.4 with the burst, 6.8-8.7 spread (docs/BENCHMARKS.md,
 * "The AVX2 kernels' software prefetch, restored"). */
#ifndef GATHER_AHEAD
#define GATHER_AHEAD 2
#endif
static inline __attribute__((always_inline)) const char *gather_prefetch(const void *const *rows, int64_t r,
                                                                         int64_t r0, int64_t r1, size_t row_bytes)
{
    if (r == r0)
        for (int64_t k = r0; k < r0 + GATHER_AHEAD && k < r1; k++)
            prefetch_row_head(rows[k], row_bytes);
    return r + GATHER_AHEAD < r1 ? (const char *)rows[r + GATHER_AHEAD] : NULL;
}

/* the lines of rows [k0, k1) at byte `at` (the multi-row AXPYs' next chunk, a line at a time) */
static inline __attribute__((always_inline)) void prefetch_line_of(const void *const *rows, int k0, int k1, size_t at)
{
    for (int k = k0; k < k1; k++)
        _mm_prefetch((const char *)rows[k] + at, GATHER_HINT);
}

#endif
