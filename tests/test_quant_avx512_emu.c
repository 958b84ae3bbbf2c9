/* test_quant_avx512_emu — the AVX-512 kernels (common/quant_avx512.c) built over SIMDe's portable
 * emulation of the intrinsics, against the scalar reference: every kernel of the unit, with its
 * multi-row GEMV bitwise its vec_dot (quant_levels.h). It checks the kernels' logic (lane orders,
 * masks, offsets, tails) on any x86-64; the native build runs the same checks in test_quant on a CPU
 * with AVX-512. Only built where SIMDe's headers are installed. */
#include "quant.h"
#include "quant_levels.h"
#include "testutil.h"

void quant_avx512emu_install(struct pi_type_traits *traits, size_t count);
bool quant_avx512emu_gemv_rows(uint32_t type, const void *W, size_t row_bytes, int64_t n, const void *x_vd,
                               float *y, int64_t r0, int64_t r1);
bool quant_avx512emu_gemm_rows(uint32_t type, const void *W, size_t row_bytes, int64_t n, const void *X_vd,
                               size_t x_stride, int B, float *Y, size_t y_stride, int64_t r0, int64_t r1);

static struct pi_type_traits emu[PI_TYPE_COUNT];

static const struct pi_type_traits *emu_traits(uint32_t type)
{
    return type < PI_TYPE_COUNT && emu[type].name ? &emu[type] : NULL;
}

/* quant_gemv_rows' dispatch for this table: the unit's multi-row path, else its vec_dot per row */
static void emu_gemv(uint32_t type, const void *W, size_t row_bytes, int64_t n, const void *x_vd, float *y,
                     int64_t r0, int64_t r1)
{
    if (quant_avx512emu_gemv_rows(type, W, row_bytes, n, x_vd, y, r0, r1))
        return;
    for (int64_t r = r0; r < r1; r++)
        emu[type].vec_dot(n, &y[r], (const char *)W + (size_t)r * row_bytes, x_vd);
}

static void emu_gemm(uint32_t type, const void *W, size_t row_bytes, int64_t n, const void *X_vd, size_t x_stride,
                     int B, float *Y, size_t y_stride, int64_t r0, int64_t r1)
{
    if (quant_avx512emu_gemm_rows(type, W, row_bytes, n, X_vd, x_stride, B, Y, y_stride, r0, r1))
        return;
    for (int b = 0; b < B; b++)
        emu_gemv(type, W, row_bytes, n, (const char *)X_vd + (size_t)b * x_stride, Y + (size_t)b * y_stride, r0, r1);
}

int main(void)
{
    if (quant_level_max() < PI_CPU_AVX2) { /* the emulation library is compiled with AVX2 flags */
        fprintf(stderr, "skip: no AVX2 here\n");
        return 77;
    }
    /* the unit patches a table of the kernels below it; start from the reference's (the AVX2 ones
     * need not exist here) */
    for (uint32_t t = 0; t < PI_TYPE_COUNT; t++)
        if (quant_traits_ref(t))
            emu[t] = *quant_traits_ref(t);
    quant_avx512emu_install(emu, PI_TYPE_COUNT);
    const uint32_t mine[] = { PI_TYPE_Q4_0, PI_TYPE_Q6_K };
    for (size_t i = 0; i < sizeof mine / sizeof mine[0]; i++)
        CHECK(emu[mine[i]].vec_dot != quant_traits_ref(mine[i])->vec_dot, "%s: AVX-512 dot installed",
              emu[mine[i]].name);
    ql_check_level("avx512-emulated", emu_traits, emu_gemv, emu_gemm);
    return tu_finish("test_quant_avx512_emu");
}
