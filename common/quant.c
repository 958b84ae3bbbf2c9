/* quant.c — the type traits table and the run-time choice between the scalar reference kernels
 * (quant_ref.c, quant_kquants.c) and the AVX2 ones (quant_avx2*.c). */
#include "quant_internal.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(PI_HAVE_AVX2_UNIT)
#include <cpuid.h>
#endif

/* The reference kernels, filled by the files that own the types; and the kernels in use: a copy
 * with the AVX2 kernels patched in. Both written once under pthread_once (quant_init), read-only
 * afterwards; every accessor calls quant_init first. */
static struct pi_type_traits traits_ref[PI_TYPE_COUNT];
static struct pi_type_traits traits_fast[PI_TYPE_COUNT];
static pthread_once_t quant_once = PTHREAD_ONCE_INIT;
static bool quant_avx2_active;
/* A switch between two correct kernel sets, so relaxed loads suffice: a thread that sees the old
 * value just uses the other, equally valid, table. */
static atomic_bool quant_scalar;

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
    memcpy(traits_fast, traits_ref, sizeof traits_fast);
#if defined(PI_HAVE_AVX2_UNIT)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c()) {
        quant_avx2_install(traits_fast, PI_TYPE_COUNT);
        quant_avx2_kquants_install(traits_fast, PI_TYPE_COUNT);
        quant_avx2_active = true;
    }
#endif
    const char *env = getenv("PINFER_SCALAR");
    if (env && strcmp(env, "1") == 0)
        atomic_store_explicit(&quant_scalar, true, memory_order_relaxed);
}

void quant_init(void)
{
    pthread_once(&quant_once, quant_init_once);
}

void quant_use_scalar(bool scalar)
{
    quant_init(); /* so that a later first init cannot override this with the environment's value */
    atomic_store_explicit(&quant_scalar, scalar, memory_order_relaxed);
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
    quant_init();
    if (type >= PI_TYPE_COUNT || traits_ref[type].name == NULL)
        return NULL;
    if (atomic_load_explicit(&quant_scalar, memory_order_relaxed))
        return &traits_ref[type];
    return &traits_fast[type];
}

bool quant_has_avx2(void)
{
    quant_init();
    return quant_avx2_active && !atomic_load_explicit(&quant_scalar, memory_order_relaxed);
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

/* y[r] = W[r,:] · x for r in [r0, r1) */
void quant_gemv_rows(uint32_t type, const void *W, size_t row_bytes, int64_t n, const void *x_vd,
                     float *y, int64_t r0, int64_t r1)
{
    const struct pi_type_traits *t = quant_traits(type);
    if (t == NULL || t->vec_dot == NULL) {
        /* The loader rejects such tensors; if one slips through, poison the output rather than crash. */
        for (int64_t r = r0; r < r1; r++)
            y[r] = NAN;
        return;
    }
#if defined(PI_HAVE_AVX2_UNIT)
    if (t == &traits_fast[type] && quant_avx2_active &&
        quant_avx2_gemv_rows(type, W, row_bytes, n, x_vd, y, r0, r1))
        return;
#endif
    const pi_vec_dot_fn dot = t->vec_dot;
    const char *w = W;
    for (int64_t r = r0; r < r1; r++)
        dot(n, &y[r], w + (size_t)r * row_bytes, x_vd);
}
