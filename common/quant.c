/* quant.c — the type traits tables and the run-time choice between the scalar reference kernels
 * (quant_ref.c, quant_kquants.c), the AVX2 ones (quant_avx2*.c) and the AVX-512 ones
 * (quant_avx512.c). */
#include "quant_internal.h"

#include "pi_err.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(PI_HAVE_AVX2_UNIT)
#include <cpuid.h>
#endif

/* One table per level: the reference kernels (filled by the files that own the types), the AVX2
 * ones (a copy with the AVX2 kernels patched in), the AVX-512 ones (a copy of the AVX2 table with
 * the AVX-512 kernels patched in). Written once under pthread_once (quant_init), read-only
 * afterwards; every accessor calls quant_init first. */
static struct pi_type_traits traits_lv[PI_CPU_LEVELS][PI_TYPE_COUNT];
#define traits_ref traits_lv[PI_CPU_SCALAR]
static pthread_once_t quant_once = PTHREAD_ONCE_INIT;
static enum pi_cpu_level level_max = PI_CPU_SCALAR;
static enum pi_cpu_level level_default = PI_CPU_SCALAR; /* what quant_init picks without PINFER_CPU_LEVEL */
/* A switch between correct kernel sets, so relaxed loads suffice: a thread that sees the old value
 * just uses another, equally valid, table. Readers load it once per call. */
static atomic_int level_cur;

static const char *const level_names[PI_CPU_LEVELS] = { "scalar", "avx2", "avx512" };

#if defined(PI_HAVE_AVX2_UNIT)
/* F16C from cpuid (leaf 1, ecx bit 29): clang before 15 has no "f16c" for __builtin_cpu_supports. */
static bool cpu_has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#endif

static void quant_init_once(void)
{
    quant_ref_fill(traits_ref, PI_TYPE_COUNT);
    quant_kquants_fill(traits_ref, PI_TYPE_COUNT);
    for (int t = 0; t < PI_TYPE_COUNT; t++)
        if (traits_ref[t].name && traits_ref[t].sub_size == 0)
            traits_ref[t].sub_size = traits_ref[t].blck_size;
    for (int l = 1; l < PI_CPU_LEVELS; l++)
        memcpy(traits_lv[l], traits_ref, sizeof traits_ref);
#if defined(PI_HAVE_AVX2_UNIT)
    /* __builtin_cpu_supports also checks that the OS saves the wider registers (XCR0) */
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c()) {
        quant_avx2_install(traits_lv[PI_CPU_AVX2], PI_TYPE_COUNT);
        quant_avx2_kquants_install(traits_lv[PI_CPU_AVX2], PI_TYPE_COUNT);
        quant_avx2_kdot_install(traits_lv[PI_CPU_AVX2], PI_TYPE_COUNT);
        quant_avx2_kquantize_install(traits_lv[PI_CPU_AVX2], PI_TYPE_COUNT);
        level_max = PI_CPU_AVX2;
#if defined(PI_HAVE_AVX512_UNIT)
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
            __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vbmi")) {
            memcpy(traits_lv[PI_CPU_AVX512], traits_lv[PI_CPU_AVX2], sizeof traits_ref);
            quant_avx512_install(traits_lv[PI_CPU_AVX512], PI_TYPE_COUNT);
            level_max = PI_CPU_AVX512;
        }
#endif
    }
#endif
    /* the best level the CPU has. AVX-512 needs VBMI too (Ice Lake, Sapphire Rapids, Zen 4 and later):
     * its Q4_0 kernels take eight blocks a step with byte permutes. On the GPU machine's host (Xeon,
     * 2026-12-03, docs/BENCHMARKS.md) they ran one core's Q4_0 GEMV at 1.2-1.9x the AVX2 kernels and
     * hybrid s4 decode at +7-8 % in three rounds of three; the two-block kernels they replaced decoded
     * at 0.5-0.75x AVX2, which is why AVX-512 was opt-in until then. */
    level_default = level_max;
    enum pi_cpu_level want = level_default;
    const char *env = getenv("PINFER_CPU_LEVEL");
    const char *scalar = getenv("PINFER_SCALAR");
    if (scalar && strcmp(scalar, "1") == 0)
        want = PI_CPU_SCALAR;
    else if (env && *env) {
        int l = quant_level_from_name(env);
        if (l < 0 || l > (int)level_max)
            fprintf(stderr, "pinfer: PINFER_CPU_LEVEL=%s: %s; using %s\n", env,
                    l < 0 ? "unknown level (scalar, avx2, avx512)" : "not supported by this CPU or build",
                    level_names[level_default]);
        else
            want = (enum pi_cpu_level)l;
    }
    atomic_store_explicit(&level_cur, (int)want, memory_order_relaxed);
}

void quant_init(void)
{
    pthread_once(&quant_once, quant_init_once);
}

static enum pi_cpu_level level_now(void)
{
    quant_init();
    return (enum pi_cpu_level)atomic_load_explicit(&level_cur, memory_order_relaxed);
}

int quant_set_level(enum pi_cpu_level level)
{
    quant_init(); /* so that a later first init cannot override this with the environment's value */
    if ((int)level < 0 || level > level_max)
        return pi_fail(PI_E_UNSUPPORTED, "quant: kernel level %d (%s) is not supported here (best: %s)", (int)level,
                       (int)level >= 0 && level < PI_CPU_LEVELS ? level_names[level] : "?", level_names[level_max]);
    atomic_store_explicit(&level_cur, (int)level, memory_order_relaxed);
    return 0;
}

enum pi_cpu_level quant_level(void)
{
    return level_now();
}

enum pi_cpu_level quant_level_max(void)
{
    quant_init();
    return level_max;
}

const char *quant_level_name(enum pi_cpu_level level)
{
    return (int)level >= 0 && level < PI_CPU_LEVELS ? level_names[level] : "?";
}

int quant_level_from_name(const char *name)
{
    for (int l = 0; name && l < PI_CPU_LEVELS; l++)
        if (strcmp(name, level_names[l]) == 0)
            return l;
    return -1;
}

void quant_use_scalar(bool scalar)
{
    quant_init();
    quant_set_level(scalar ? PI_CPU_SCALAR : level_default);
}

const struct pi_type_traits *quant_traits_ref(uint32_t type)
{
    quant_init();
    if (type >= PI_TYPE_COUNT || traits_ref[type].name == NULL)
        return NULL;
    return &traits_ref[type];
}

const struct pi_type_traits *quant_traits(uint32_t type)
{
    const enum pi_cpu_level l = level_now();
    if (type >= PI_TYPE_COUNT || traits_ref[type].name == NULL)
        return NULL;
    return &traits_lv[l][type];
}

bool quant_has_avx2(void)
{
    return level_now() >= PI_CPU_AVX2;
}

int quant_type_from_name(const char *name)
{
    if (name == NULL)
        return -1;
    quant_init();
    for (int t = 0; t < PI_TYPE_COUNT; t++)
        if (traits_ref[t].name && strcmp(traits_ref[t].name, name) == 0)
            return t;
    return -1;
}

size_t quant_row_size(uint32_t type, int64_t n)
{
    const struct pi_type_traits *t = quant_traits_ref(type);
    if (t == NULL || n < 0 || n % t->blck_size != 0)
        return 0;
    return (size_t)(n / t->blck_size) * t->type_size;
}

/* the level's kernels of a known type, or NULL */
static const struct pi_type_traits *traits_at(uint32_t type, enum pi_cpu_level l)
{
    return type < PI_TYPE_COUNT && traits_ref[type].name ? &traits_lv[l][type] : NULL;
}

/* Whether level l computes type's dots (resp. AXPYs) with the AVX2 unit's kernels: at AVX2, and at
 * AVX-512 for the types whose kernels it keeps from the AVX2 table (quant_avx512_install patches only
 * its own). Such a level takes the AVX2 unit's multi-row paths for them too, as they give that
 * vec_dot's (axpy's) bits: a row's value does not depend on the path, at every level. */
static bool avx2_dots(uint32_t type, enum pi_cpu_level l)
{
    return l == PI_CPU_AVX2 ||
           (l > PI_CPU_AVX2 && type < PI_TYPE_COUNT && traits_lv[l][type].vec_dot == traits_lv[PI_CPU_AVX2][type].vec_dot);
}

static bool avx2_axpys(uint32_t type, enum pi_cpu_level l)
{
    return l == PI_CPU_AVX2 ||
           (l > PI_CPU_AVX2 && type < PI_TYPE_COUNT && traits_lv[l][type].axpy == traits_lv[PI_CPU_AVX2][type].axpy);
}

/* The loader rejects tensors without kernels; if one slips through, poison the output rather than crash. */
static void poison(float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = NAN;
}

/* y[r] = W[r,:] · x for r in [r0, r1) */
void quant_gemv_rows(uint32_t type, const void *W, size_t row_bytes, int64_t n, const void *x_vd,
                     float *y, int64_t r0, int64_t r1)
{
    const enum pi_cpu_level l = level_now();
    const struct pi_type_traits *t = traits_at(type, l);
    if (t == NULL || t->vec_dot == NULL) {
        poison(y + r0, r1 - r0);
        return;
    }
    /* each level's multi-row path computes its rows as that level's vec_dot does */
#if defined(PI_HAVE_AVX512_UNIT)
    if (l == PI_CPU_AVX512 && quant_avx512_gemv_rows(type, W, row_bytes, n, x_vd, y, r0, r1))
        return;
#endif
#if defined(PI_HAVE_AVX2_UNIT)
    if (avx2_dots(type, l) && (quant_avx2_gemv_rows(type, W, row_bytes, n, x_vd, y, r0, r1) ||
                             quant_avx2_kdot_gemv_rows(type, W, row_bytes, n, x_vd, y, r0, r1) ||
                             quant_avx2_v32_gemv_rows(type, W, row_bytes, n, x_vd, y, r0, r1)))
        return;
#endif
    const pi_vec_dot_fn dot = t->vec_dot;
    const char *w = W;
    for (int64_t r = r0; r < r1; r++)
        dot(n, &y[r], w + (size_t)r * row_bytes, x_vd);
}

#define CACHE_LINE 64
#define GATHER_PREFETCH_CAP 4096 /* bytes of a row fetched ahead; the hardware takes over along it */
#ifndef GATHER_AHEAD /* rows fetched ahead of the one computed (scattered: no hardware prefetcher sees them) */
#define GATHER_AHEAD 2
#endif

size_t quant_gather_act_bytes(uint32_t type, int64_t n)
{
    const enum pi_cpu_level l = level_now();
#if defined(PI_HAVE_AVX512_UNIT)
    const size_t own = l == PI_CPU_AVX512 ? quant_avx512_gather_act_bytes(type, n) : 0;
    if (own)
        return own;
#endif
#if defined(PI_HAVE_AVX2_UNIT)
    if (avx2_dots(type, l))
        return quant_avx2_gather_act_bytes(type, n);
#endif
    (void)type, (void)n, (void)l;
    return 0;
}

void quant_gather_act_prepare(uint32_t type, int64_t n, const void *x_vd, void *act)
{
    const enum pi_cpu_level l = level_now();
#if defined(PI_HAVE_AVX512_UNIT)
    if (l == PI_CPU_AVX512 && quant_avx512_gather_act_bytes(type, n)) {
        quant_avx512_gather_act_prepare(type, n, x_vd, act);
        return;
    }
#endif
#if defined(PI_HAVE_AVX2_UNIT)
    if (avx2_dots(type, l) && quant_avx2_gather_act_bytes(type, n))
        quant_avx2_gather_act_prepare(type, n, x_vd, act);
#endif
    (void)type, (void)n, (void)x_vd, (void)act, (void)l;
}

void quant_gemv_gather(uint32_t type, int64_t n, const void *x_vd, const void *const *rows, int64_t nrows, float *y)
{
    quant_gemv_gather_act(type, n, x_vd, NULL, rows, nrows, y);
}

void quant_gemv_gather_act(uint32_t type, int64_t n, const void *x_vd, const void *act, const void *const *rows,
                           int64_t nrows, float *y)
{
    const enum pi_cpu_level l = level_now();
    const struct pi_type_traits *t = traits_at(type, l);
    if (t == NULL || t->vec_dot == NULL) {
        poison(y, nrows);
        return;
    }
#if defined(PI_HAVE_AVX512_UNIT)
    if (l == PI_CPU_AVX512 && quant_avx512_gemv_gather(type, n, x_vd, act, rows, nrows, y))
        return;
#endif
#if defined(PI_HAVE_AVX2_UNIT)
    if (avx2_dots(type, l) && quant_avx2_gemv_gather(type, n, x_vd, act, rows, nrows, y))
        return;
#else
    (void)act;
#endif
    const size_t row_bytes = quant_row_size(type, n);
    for (int64_t r = 0; r < nrows; r++) {
        for (int64_t k = r == 0 ? 0 : r + GATHER_AHEAD; k <= r + GATHER_AHEAD && k < nrows; k++)
            for (size_t o = 0; o < row_bytes && o < GATHER_PREFETCH_CAP; o += CACHE_LINE)
                __builtin_prefetch((const char *)rows[k] + o, 0, 3);
        t->vec_dot(n, &y[r], rows[r], x_vd);
    }
}

/* The level's traits of a type with an AXPY kernel, or NULL with y[0..n) poisoned */
static const struct pi_type_traits *axpy_traits(uint32_t type, enum pi_cpu_level l, float *y, int64_t n)
{
    const struct pi_type_traits *t = traits_at(type, l);
    if (t == NULL || t->axpy == NULL) {
        poison(y, n);
        return NULL;
    }
    return t;
}

void quant_axpy_rows(uint32_t type, int64_t n, float *y, const float *a, const void *const *rows, int nr, bool init)
{
    const enum pi_cpu_level l = level_now();
    const struct pi_type_traits *t = axpy_traits(type, l, y, n);
    if (t == NULL)
        return;
#if defined(PI_HAVE_AVX512_UNIT)
    if (l == PI_CPU_AVX512 && quant_avx512_axpy_rows(type, n, y, a, rows, nr, init))
        return;
#endif
#if defined(PI_HAVE_AVX2_UNIT)
    if (avx2_axpys(type, l) && quant_avx2_axpy_rows(type, n, y, a, rows, nr, init))
        return;
#endif
    if (init)
        memset(y, 0, (size_t)n * sizeof *y);
    for (int k = 0; k < nr; k++)
        t->axpy(n, y, a[k], rows[k]);
}

/* quant_axpy_rows_add's fallback sums this many columns at a time on the stack: a multiple of every
 * block size (QK_K), so each tile starts at a whole block of every row */
#define AXPY_ADD_TILE 256

void quant_axpy_rows_add(uint32_t type, int64_t n, float *y, const float *a, const void *const *rows, int nr)
{
    const enum pi_cpu_level l = level_now();
    const struct pi_type_traits *t = axpy_traits(type, l, y, n);
    if (t == NULL)
        return;
#if defined(PI_HAVE_AVX512_UNIT)
    if (l == PI_CPU_AVX512 && quant_avx512_axpy_rows_add(type, n, y, a, rows, nr))
        return;
#endif
#if defined(PI_HAVE_AVX2_UNIT)
    if (avx2_axpys(type, l) && quant_avx2_axpy_rows_add(type, n, y, a, rows, nr))
        return;
#endif
    float tile[AXPY_ADD_TILE];
    for (int64_t c0 = 0; c0 < n; c0 += AXPY_ADD_TILE) {
        const int64_t m = n - c0 < AXPY_ADD_TILE ? n - c0 : AXPY_ADD_TILE;
        const size_t off = quant_row_size(type, c0);
        memset(tile, 0, (size_t)m * sizeof *tile);
        for (int k = 0; k < nr; k++)
            t->axpy(m, tile, a[k], (const char *)rows[k] + off);
        for (int64_t i = 0; i < m; i++)
            y[c0 + i] += tile[i];
    }
}

bool quant_axpy_rows_add_native(uint32_t type)
{
    const enum pi_cpu_level l = level_now();
#if defined(PI_HAVE_AVX512_UNIT)
    if (l == PI_CPU_AVX512 && quant_avx512_has_axpy_rows_add(type))
        return true;
#endif
#if defined(PI_HAVE_AVX2_UNIT)
    return avx2_axpys(type, l) && quant_avx2_has_axpy_rows_add(type);
#else
    (void)type, (void)l;
    return false;
#endif
}

/* the fallback tile: rows that stay in L1/L2 while every token of the batch passes */
#define GEMM_ROW_TILE 16

void quant_gemm_rows(uint32_t type, const void *W, size_t row_bytes, int64_t n, const void *X_vd, size_t x_stride,
                     int B, float *Y, size_t y_stride, int64_t r0, int64_t r1)
{
    if (B == 1) { /* no weights to reuse: one multi-row GEMV, the activation prepared once */
        quant_gemv_rows(type, W, row_bytes, n, X_vd, Y, r0, r1);
        return;
    }
    const enum pi_cpu_level l = level_now();
#if defined(PI_HAVE_AVX512_UNIT)
    if (l == PI_CPU_AVX512 && quant_avx512_gemm_rows(type, W, row_bytes, n, X_vd, x_stride, B, Y, y_stride, r0, r1))
        return;
#endif
#if defined(PI_HAVE_AVX2_UNIT)
    if (avx2_dots(type, l) && quant_avx2_gemm_rows(type, W, row_bytes, n, X_vd, x_stride, B, Y, y_stride, r0, r1))
        return;
#endif
    (void)l;
    for (int64_t t0 = r0; t0 < r1; t0 += GEMM_ROW_TILE) {
        const int64_t t1 = t0 + GEMM_ROW_TILE < r1 ? t0 + GEMM_ROW_TILE : r1;
        for (int b = 0; b < B; b++)
            quant_gemv_rows(type, W, row_bytes, n, (const char *)X_vd + (size_t)b * x_stride, Y + (size_t)b * y_stride,
                            t0, t1);
    }
}
