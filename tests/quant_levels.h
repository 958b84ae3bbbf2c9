/* quant_levels.h — one check of a whole kernel table against the scalar reference, for every
 * kernel level a test can reach (test_quant: the native levels this CPU has; test_quant_avx512_emu:
 * the AVX-512 unit over an emulation of its intrinsics). Header-only, static: each test binary that
 * includes it gets its own copy.
 *
 * Per type and row length, on random data:
 *  - quantize / dequantize / the activation's quantization: the reference's bytes;
 *  - AXPY: the reference's bits (one FMA per element in both);
 *  - vec_dot: the reference within float rounding, and bit for bit for the super-block types;
 *  - the multi-row GEMV and the GEMM tile (several tokens): every value bit for bit the same
 *    level's vec_dot (the invariance: a row's value must not depend on whether it ran alone or in a
 *    batch), rows outside [r0, r1) untouched. */
#ifndef PI_TEST_QUANT_LEVELS_H
#define PI_TEST_QUANT_LEVELS_H

#include "quant.h"
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define QL_FLOAT_TOL 1e-5 /* relative to Σ|x*y|: float accumulation order differs */
#define QL_QUANT_TOL 1e-6 /* relative to Σ|terms|: integer sums per block, float across blocks */
#define QL_ROWS 6

typedef const struct pi_type_traits *(*ql_traits_fn)(uint32_t type);
typedef void (*ql_gemv_fn)(uint32_t type, const void *W, size_t row_bytes, int64_t n, const void *x_vd, float *y,
                           int64_t r0, int64_t r1);
typedef void (*ql_gemm_fn)(uint32_t type, const void *W, size_t row_bytes, int64_t n, const void *X_vd,
                           size_t x_stride, int B, float *Y, size_t y_stride, int64_t r0, int64_t r1);
static ql_gemm_fn ql_gemm; /* the GEMM tile under test (set by ql_check_level) */

/* a CHECK that also clears ok, so that a type stops at its first failing length */
#define QL_CHECK(cond, ...)                                                                        \
    do {                                                                                           \
        const bool ql_c_ = (cond);                                                                 \
        CHECK(ql_c_, __VA_ARGS__);                                                                 \
        ok = ok && ql_c_;                                                                          \
    } while (0)

static uint64_t ql_rng = 0x6a09e667f3bcc909ull;

static float ql_unit(void)
{
    ql_rng ^= ql_rng >> 12;
    ql_rng ^= ql_rng << 25;
    ql_rng ^= ql_rng >> 27;
    return (float)((double)((ql_rng * 0x2545f4914f6cdd1dull) >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

static bool ql_same_bits(const void *a, const void *b, size_t n)
{
    return memcmp(a, b, n) == 0;
}

/* one type at one length; returns false after the first failure (so one bug reports once) */
static bool ql_check_type(const char *level, ql_traits_fn traits, ql_gemv_fn gemv, uint32_t type, int64_t n, int kind)
{
    const struct pi_type_traits *ref = quant_traits_ref(type), *fast = traits(type);
    const struct pi_type_traits *vref = quant_traits_ref(ref->vec_dot_type), *vfast = traits(ref->vec_dot_type);
    const size_t wb = quant_row_size(type, n), yb = quant_row_size(ref->vec_dot_type, n);
    const bool fvd = ref->vec_dot_type == PI_TYPE_F32;
    bool ok = true;
    float *x = malloc(QL_ROWS * n * sizeof *x), *y = malloc(n * sizeof *y), *dq = malloc(n * sizeof *dq);
    float *dq2 = malloc(n * sizeof *dq2), *ydq = malloc(n * sizeof *ydq), *a1 = malloc(n * sizeof *a1);
    float *a2 = malloc(n * sizeof *a2);
    uint8_t *w = malloc(QL_ROWS * wb), *w2 = malloc(wb), *yq = malloc(yb + 1), *yq2 = malloc(yb + 1);
    REQUIRE(x && y && dq && dq2 && ydq && a1 && a2 && w && w2 && yq && yq2, "alloc");
    for (int64_t i = 0; i < QL_ROWS * n; i++) {
        const float u = ql_unit();
        /* kind 0: magnitudes varying per 32; 1: heavy-tailed; 2: all positive (the min paths) */
        x[i] = kind == 0 ? u * (1.0f + (float)((i / 32) % 7)) : kind == 1 ? u * u * u * 4.0f : 1.5f + u;
    }
    for (int64_t i = 0; i < n; i++)
        y[i] = ql_unit();
    for (int r = 0; r < QL_ROWS; r++)
        ref->from_float(x + r * n, w + r * wb, n);
    const void *yv = fvd ? (const void *)y : yq;
    if (!fvd) {
        vref->from_float(y, yq, n);
        vfast->from_float(y, yq2, n);
        QL_CHECK(ql_same_bits(yq, yq2, yb), "%s %s n=%ld: activation quantization differs from the reference",
              level, ref->name, (long)n);
        vref->to_float(yq, ydq, n);
    } else {
        memcpy(ydq, y, n * sizeof *y);
    }
    fast->from_float(x, w2, n);
    QL_CHECK(ql_same_bits(w, w2, wb), "%s %s n=%ld kind %d: quantizer differs from the reference", level,
          ref->name, (long)n, kind);
    ref->to_float(w, dq, n);
    fast->to_float(w, dq2, n);
    QL_CHECK(ql_same_bits(dq, dq2, n * sizeof *dq), "%s %s n=%ld: dequantizer differs", level, ref->name,
          (long)n);

    double scale = 1e-30;
    for (int64_t i = 0; i < n; i++)
        scale += fabs((double)dq[i] * ydq[i]);
    float s_ref, s_fast;
    ref->vec_dot(n, &s_ref, w, yv);
    fast->vec_dot(n, &s_fast, w, yv);
    const double tol = fvd ? QL_FLOAT_TOL : QL_QUANT_TOL;
    QL_CHECK(fabs((double)s_fast - s_ref) <= tol * scale, "%s %s n=%ld kind %d: dot %.9g vs ref %.9g (rel %.3g)",
          level, ref->name, (long)n, kind, s_fast, s_ref, fabs((double)s_fast - s_ref) / scale);
    if (ref->blck_size == QK_K)
        QL_CHECK(s_fast == s_ref, "%s %s n=%ld kind %d: dot %.9g not bitwise the reference %.9g", level,
              ref->name, (long)n, kind, s_fast, s_ref);

    const float a = 0.37f;
    for (int64_t i = 0; i < n; i++)
        a1[i] = a2[i] = y[i];
    ref->axpy(n, a1, a, w);
    fast->axpy(n, a2, a, w);
    QL_CHECK(ql_same_bits(a1, a2, n * sizeof *a1), "%s %s n=%ld: axpy differs from the reference", level,
          ref->name, (long)n);

    float yg[QL_ROWS];
    for (int r = 0; r < QL_ROWS; r++)
        yg[r] = -1.0f;
    gemv(type, w, wb, n, yv, yg, 1, QL_ROWS - 1);
    QL_CHECK(yg[0] == -1.0f && yg[QL_ROWS - 1] == -1.0f, "%s %s: gemv wrote outside [r0, r1)", level, ref->name);
    for (int r = 1; r < QL_ROWS - 1; r++) {
        float s;
        fast->vec_dot(n, &s, w + r * wb, yv);
        QL_CHECK(ql_same_bits(&s, &yg[r], sizeof s), "%s %s n=%ld row %d: gemv %.9g is not vec_dot's %.9g bitwise",
              level, ref->name, (long)n, r, yg[r], s);
    }
    /* the GEMM tile: QL_TOKENS activations (a full group of 4 and a remainder), every value the
     * level's vec_dot bit for bit; the activations are the rows of x quantized as activations */
    enum { QL_TOKENS = 5 };
    const size_t xs = fvd ? (size_t)n * sizeof(float) : yb;
    uint8_t *X = malloc(QL_TOKENS * xs);
    float *Y = malloc(QL_TOKENS * QL_ROWS * sizeof *Y);
    REQUIRE(X && Y, "alloc");
    for (int t = 0; t < QL_TOKENS; t++) {
        const float *src = t == 0 ? y : x + (t % QL_ROWS) * n;
        if (fvd)
            memcpy(X + t * xs, src, xs);
        else
            vfast->from_float(src, X + t * xs, n);
    }
    for (int i = 0; i < QL_TOKENS * QL_ROWS; i++)
        Y[i] = -1.0f;
    ql_gemm(type, w, wb, n, X, xs, QL_TOKENS, Y, QL_ROWS, 1, QL_ROWS - 1);
    int bad = 0, outside = 0;
    for (int t = 0; t < QL_TOKENS; t++)
        for (int r = 0; r < QL_ROWS; r++) {
            if (r == 0 || r == QL_ROWS - 1) {
                outside += Y[t * QL_ROWS + r] != -1.0f;
                continue;
            }
            float s;
            fast->vec_dot(n, &s, w + r * wb, X + t * xs);
            bad += !ql_same_bits(&s, &Y[t * QL_ROWS + r], sizeof s);
        }
    QL_CHECK(bad == 0 && outside == 0, "%s %s n=%ld: GEMM tile: %d values not vec_dot's bitwise, %d written outside",
             level, ref->name, (long)n, bad, outside);
    free(X), free(Y);
    free(x), free(y), free(dq), free(dq2), free(ydq), free(a1), free(a2), free(w), free(w2), free(yq), free(yq2);
    return ok;
}

static const uint32_t ql_types[] = { PI_TYPE_F32,  PI_TYPE_F16,  PI_TYPE_BF16, PI_TYPE_Q8_0, PI_TYPE_Q4_0,
                                     PI_TYPE_Q4_1, PI_TYPE_Q5_0, PI_TYPE_Q5_1, PI_TYPE_IQ4_NL, PI_TYPE_Q2_K,
                                     PI_TYPE_Q3_K, PI_TYPE_Q4_K, PI_TYPE_Q5_K, PI_TYPE_Q6_K, PI_TYPE_IQ4_XS };

/* every type at lengths that hit each loop's tails: 1, 2, 3, 5 blocks, odd pairs, 7B rows */
static void ql_check_level(const char *level, ql_traits_fn traits, ql_gemv_fn gemv, ql_gemm_fn gemm)
{
    ql_gemm = gemm;
    const int64_t lens_f[] = { 1, 7, 16, 37, 64, 96, 4096 + 5, 11008 };
    const int64_t lens_32[] = { 32, 64, 96, 160, 4096 + 32, 11008 };
    const int64_t lens_256[] = { 256, 768, 4096, 11008 };
    for (size_t t = 0; t < sizeof ql_types / sizeof ql_types[0]; t++) {
        const int blck = quant_traits_ref(ql_types[t])->blck_size;
        const int64_t *lens = blck == 1 ? lens_f : blck == 32 ? lens_32 : lens_256;
        const size_t nl = blck == 1 ? sizeof lens_f / sizeof lens_f[0]
                          : blck == 32 ? sizeof lens_32 / sizeof lens_32[0]
                                       : sizeof lens_256 / sizeof lens_256[0];
        bool ok = true;
        for (size_t l = 0; ok && l < nl; l++)
            for (int kind = 0; ok && kind < 3; kind++)
                ok = ql_check_type(level, traits, gemv, ql_types[t], lens[l], kind);
    }
}

#endif
