/* test_quant_types — every quantized type (the 32-element blocks Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 IQ4_NL and
 * the 256-element super-blocks Q2_K..Q6_K IQ4_XS, with Q8_K) on random data:
 *  - ggml's own bounds (tests/test-quantize-fns.cpp): round-trip error sqrt(Σ(x - dq)^2)/n of the
 *    0.1 + 2 cos(i) series below 0.002 (Q2_K 0.0075, Q3_K 0.0040), dot product error |dot - ref|/n
 *    below 0.02 (Q2_K 0.04);
 *  - the reference dot equals Σ dequant(x) dequant(y) in f64 (per-block integer sums are exact: only
 *    float rounding across blocks remains);
 *  - the kernels in use (AVX2 where the CPU has it) against the reference: quantized bytes and
 *    dequantized floats bit for bit, AXPY bit for bit, dot within float rounding of the reference
 *    (the integer part of every block is exact, so a wrong nibble shows up far above that), and the
 *    multi-row GEMV driver the same;
 *  - AXPY y += a dequant(x) against the dequantized row, and an all-zero row quantizes to zeros;
 *  - the partial dot of the super-block types (vec_dot_sub) over sub-block-aligned ranges;
 *  - the K-quant quantizers in use (AVX2: the scale searches eight sub-blocks to a vector) give the
 *    reference's bytes on rows built to take every branch of the searches in some lanes and not in
 *    others: all-zero, flat, tiny (below ggml's 1e-15), one-spike, one-signed, huge and subnormal
 *    sub-blocks mixed with random ones. */
#include "quant.h"
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GGML_TEST_SIZE (32 * 128) /* what ggml's test uses */
#define GGML_MAX_TOTAL_ERROR 0.002
#define GGML_MAX_TOTAL_ERROR_2BITS 0.0075
#define GGML_MAX_TOTAL_ERROR_3BITS 0.0040
#define GGML_MAX_DOT_ERROR 0.02
#define GGML_MAX_DOT_ERROR_LOWBIT 0.04
#define DOT_TOL 1e-6  /* relative to Σ|terms|: float rounding across blocks */
#define AXPY_TOL 1e-6 /* relative to max |y|: a fused vs a split multiply-add per element */

static const uint32_t qtypes[] = { PI_TYPE_Q4_0, PI_TYPE_Q4_1, PI_TYPE_Q5_0, PI_TYPE_Q5_1, PI_TYPE_Q8_0,
                                   PI_TYPE_IQ4_NL, PI_TYPE_Q2_K, PI_TYPE_Q3_K, PI_TYPE_Q4_K, PI_TYPE_Q5_K,
                                   PI_TYPE_Q6_K, PI_TYPE_IQ4_XS, PI_TYPE_Q8_K };
#define N_QTYPES (sizeof qtypes / sizeof qtypes[0])

static uint64_t rng_state = 0x243f6a8885a308d3ull;

static uint64_t rng_next(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

static float rng_unit(void)
{
    return (float)((double)(rng_next() >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

/* ggml's generate_data */
static void cos_data(float offset, int64_t n, float *dst)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = (float)(0.1 + 2 * cosf((float)i + offset));
}

static void test_ggml_bounds(uint32_t type)
{
    const struct pi_type_traits *t = quant_traits(type);
    const struct pi_type_traits *vt = quant_traits(t->vec_dot_type);
    const int64_t n = GGML_TEST_SIZE;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *dq = malloc(n * sizeof *dq);
    uint8_t *qx = malloc(n * 4), *qy = malloc(n * 4);
    REQUIRE(x && y && dq && qx && qy, "alloc");
    cos_data(0.0f, n, x);
    cos_data(1.0f, n, y);
    t->from_float(x, qx, n);
    t->to_float(qx, dq, n);
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += ((double)x[i] - dq[i]) * ((double)x[i] - dq[i]);
    const double err = sqrt(sum) / (double)n;
    const double max_err = type == PI_TYPE_Q2_K ? GGML_MAX_TOTAL_ERROR_2BITS
                           : type == PI_TYPE_Q3_K ? GGML_MAX_TOTAL_ERROR_3BITS : GGML_MAX_TOTAL_ERROR;
    CHECK(err < max_err, "%s: total quantization error %.5f >= %.4f", t->name, err, max_err);
    if (type != PI_TYPE_Q8_K) {
        vt->from_float(y, qy, n);
        float r;
        t->vec_dot(n, &r, qx, qy);
        double ref = 0;
        for (int64_t i = 0; i < n; i++)
            ref += (double)x[i] * y[i];
        const double derr = fabs(r - ref) / (double)n;
        const double max_derr = type == PI_TYPE_Q2_K ? GGML_MAX_DOT_ERROR_LOWBIT : GGML_MAX_DOT_ERROR;
        CHECK(derr < max_derr, "%s: dot product error %.5f >= %.3f", t->name, derr, max_derr);
    }
    free(x), free(y), free(dq), free(qx), free(qy);
}

/* Σ|dq_x[i] dq_y[i]|: the size of the rounding error of a dot in any summation order */
static double abs_dot(const float *a, const float *b, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += fabs((double)a[i] * b[i]);
    return s;
}

static void test_random_type(uint32_t type, int64_t n, int kind)
{
    const struct pi_type_traits *ref = quant_traits_ref(type), *fast = quant_traits(type);
    const struct pi_type_traits *vref = quant_traits_ref(ref->vec_dot_type);
    const size_t wb = quant_row_size(type, n), yb = quant_row_size(ref->vec_dot_type, n);
    REQUIRE(wb > 0 && yb > 0, "%s n=%ld row sizes", ref->name, (long)n);
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *dq = malloc(n * sizeof *dq);
    float *dq2 = malloc(n * sizeof *dq2), *ydq = malloc(n * sizeof *ydq);
    float *a1 = malloc(n * sizeof *a1), *a2 = malloc(n * sizeof *a2);
    uint8_t *w = malloc(wb), *w2 = malloc(wb), *yq = malloc(yb);
    REQUIRE(x && y && dq && dq2 && ydq && a1 && a2 && w && w2 && yq, "alloc");
    for (int64_t i = 0; i < n; i++) {
        float u = rng_unit();
        /* kind 0: magnitudes varying per 32; 1: heavy-tailed; 2: all positive (the min paths) */
        x[i] = kind == 0 ? u * (1.0f + (float)((i / 32) % 7))
               : kind == 1 ? u * u * u * 4.0f
                           : 1.5f + u;
        y[i] = rng_unit();
    }
    ref->from_float(x, w, n);
    fast->from_float(x, w2, n);
    CHECK(memcmp(w, w2, wb) == 0, "%s n=%ld kind %d: quantizer in use differs from the reference", ref->name,
          (long)n, kind);
    ref->to_float(w, dq, n);
    fast->to_float(w, dq2, n);
    CHECK(memcmp(dq, dq2, n * sizeof *dq) == 0, "%s n=%ld: dequantizer in use differs", ref->name, (long)n);

    vref->from_float(y, yq, n);
    vref->to_float(yq, ydq, n);
    double exact = 0;
    for (int64_t i = 0; i < n; i++)
        exact += (double)dq[i] * ydq[i];
    const double scale = abs_dot(dq, ydq, n) + 1e-30;
    float s_ref, s_fast;
    ref->vec_dot(n, &s_ref, w, yq);
    fast->vec_dot(n, &s_fast, w, yq);
    CHECK(fabs(s_ref - exact) <= DOT_TOL * scale, "%s n=%ld kind %d: ref dot %.9g vs exact %.9g (rel %.3g)",
          ref->name, (long)n, kind, s_ref, exact, fabs(s_ref - exact) / scale);
    CHECK(fabs((double)s_fast - s_ref) <= DOT_TOL * scale, "%s n=%ld kind %d: dot in use %.9g vs ref %.9g",
          ref->name, (long)n, kind, s_fast, s_ref);
    /* the super-block types' AVX2 dots do the reference's float operations per super-block */
    if (ref->blck_size == QK_K)
        CHECK(s_fast == s_ref, "%s n=%ld kind %d: dot in use %.9g not bitwise the reference %.9g", ref->name,
              (long)n, kind, s_fast, s_ref);

    /* AXPY: in use = reference bit for bit; both = y + a dq within rounding */
    const float a = 0.37f;
    double ymax = 0;
    for (int64_t i = 0; i < n; i++) {
        a1[i] = a2[i] = y[i];
    }
    ref->axpy(n, a1, a, w);
    fast->axpy(n, a2, a, w);
    CHECK(memcmp(a1, a2, n * sizeof *a1) == 0, "%s n=%ld: axpy in use differs from the reference", ref->name,
          (long)n);
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        ymax = fmax(ymax, fabs((double)y[i] + (double)a * dq[i]));
    for (int64_t i = 0; i < n; i++)
        if (fabs((double)a1[i] - ((double)y[i] + (double)a * dq[i])) > AXPY_TOL * ymax)
            bad++;
    CHECK(bad == 0, "%s n=%ld: %d axpy elements off y + a dequant(x)", ref->name, (long)n, bad);

    /* quant_gemv_rows: 3 rows, the middle one checked against the reference dot */
    uint8_t *W = malloc(3 * wb);
    REQUIRE(W != NULL, "alloc");
    for (int r = 0; r < 3; r++)
        memcpy(W + r * wb, w, wb);
    float yv[3] = { -1, -1, -1 };
    quant_gemv_rows(type, W, wb, n, yq, yv, 1, 2);
    CHECK(yv[0] == -1 && yv[2] == -1, "%s gemv: rows outside [r0, r1) untouched", ref->name);
    CHECK(fabs((double)yv[1] - s_ref) <= DOT_TOL * scale, "%s n=%ld gemv %.9g vs ref %.9g", ref->name, (long)n,
          yv[1], s_ref);
    free(W);
    free(x), free(y), free(dq), free(dq2), free(ydq), free(a1), free(a2), free(w), free(w2), free(yq);
}

/* vec_dot_sub (the super-block types): over [0, n) bitwise vec_dot's reference; over random
 * sub-block-aligned ranges Σ dequant(x) dequant(y) of the range within float rounding; every other
 * type cuts rows at whole blocks (sub_size = blck_size, no vec_dot_sub) */
static void test_vec_dot_sub(uint32_t type)
{
    const struct pi_type_traits *ref = quant_traits_ref(type), *fast = quant_traits(type);
    CHECK(fast->sub_size == ref->sub_size && fast->vec_dot_sub == ref->vec_dot_sub, "%s: sub traits", ref->name);
    if (!ref->vec_dot_sub) {
        CHECK(ref->sub_size == ref->blck_size, "%s: sub_size %d = block %d", ref->name, ref->sub_size, ref->blck_size);
        return;
    }
    CHECK(ref->sub_size > 0 && ref->blck_size % ref->sub_size == 0 && ref->sub_size % 16 == 0,
          "%s: sub_size %d divides the block and is whole Q8_K sums", ref->name, ref->sub_size);
    const int64_t n = 1024;
    const struct pi_type_traits *vref = quant_traits_ref(ref->vec_dot_type);
    float x[1024], y[1024], dq[1024], ydq[1024];
    uint8_t w[1024 * 4], yq[1024 * 4];
    for (int64_t i = 0; i < n; i++) {
        x[i] = rng_unit() * (1.0f + (float)((i / 16) % 5));
        y[i] = rng_unit();
    }
    ref->from_float(x, w, n);
    ref->to_float(w, dq, n);
    vref->from_float(y, yq, n);
    vref->to_float(yq, ydq, n);
    float whole, full;
    ref->vec_dot(n, &whole, w, yq);
    ref->vec_dot_sub(0, n, &full, w, yq);
    CHECK(whole == full, "%s: vec_dot_sub over the row %.9g vs vec_dot %.9g", ref->name, full, whole);
    const int64_t g = ref->sub_size;
    for (int rep = 0; rep < 200; rep++) {
        int64_t a = (int64_t)(rng_next() % (uint64_t)(n / g)) * g, b = (int64_t)(rng_next() % (uint64_t)(n / g)) * g;
        if (a > b) {
            int64_t t = a;
            a = b;
            b = t;
        }
        b += g;
        float s;
        ref->vec_dot_sub(a, b, &s, w, yq);
        double exact = 0, scale = 1e-30;
        for (int64_t i = a; i < b; i++) {
            exact += (double)dq[i] * ydq[i];
            scale += fabs((double)dq[i] * ydq[i]);
        }
        if (fabs(s - exact) > DOT_TOL * scale + 1e-6 * scale) {
            CHECK(false, "%s: vec_dot_sub [%lld, %lld) %.9g vs %.9g", ref->name, (long long)a, (long long)b, s, exact);
            break;
        }
    }
}

static void test_zero_rows(uint32_t type)
{
    const struct pi_type_traits *t = quant_traits(type);
    const int64_t n = 512;
    float x[512] = { 0 }, dq[512];
    uint8_t q[512 * 4];
    memset(q, 0xa5, sizeof q);
    t->from_float(x, q, n);
    t->to_float(q, dq, n);
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (dq[i] != 0.0f)
            bad++;
    CHECK(bad == 0, "%s: %d nonzero values from an all-zero row", t->name, bad);
}


/* one 16-value piece of an edge-case row (see the header): pattern p at magnitude m */
static void edge_piece(int p, float m, float *x)
{
    for (int i = 0; i < 16; i++) {
        const float u = rng_unit();
        switch (p) {
        case 0: x[i] = 0.0f; break;                            /* all zero */
        case 1: x[i] = -m; break;                              /* flat, negative */
        case 2: x[i] = m; break;                               /* flat, positive */
        case 3: x[i] = i == 5 ? m * u : 0.0f; break;           /* one spike */
        case 4: x[i] = 1e-17f * u; break;                      /* below the all-zero threshold */
        case 5: x[i] = m * (1.0f + u); break;                  /* one-signed, positive */
        case 6: x[i] = -m * (1.0f + u); break;                 /* one-signed, negative */
        case 7: x[i] = 1e-39f * u; break;                      /* subnormal */
        case 8: x[i] = i % 2 ? m : -m; break;                  /* two values */
        default: x[i] = m * u * u * u; break;                  /* heavy-tailed random */
        }
    }
}

static void test_kquantize_edges(uint32_t type)
{
    enum { ROWS = 64, N = 4 * QK_K };
    const struct pi_type_traits *ref = quant_traits_ref(type), *t = quant_traits(type);
    const size_t rb = quant_row_size(type, N);
    float *x = malloc(N * sizeof *x);
    uint8_t *a = malloc(rb), *b = malloc(rb);
    REQUIRE(x && a && b, "alloc");
    int bad = 0;
    for (int r = 0; r < ROWS; r++) {
        for (int k = 0; k < N / 16; k++) {
            const int p = (int)(rng_next() % 12);
            const float m = powf(10.0f, (float)((int)(rng_next() % 17) - 8));
            edge_piece(p, m, x + 16 * k);
        }
        ref->from_float(x, a, N);
        memset(b, 0x5a, rb);
        t->from_float(x, b, N);
        bad += memcmp(a, b, rb) != 0;
    }
    CHECK(bad == 0, "%s: the quantizer in use differs from the reference on %d of %d edge-case rows", ref->name, bad,
          ROWS);
    free(x), free(a), free(b);
}

int main(void)
{
    for (size_t i = 0; i < N_QTYPES; i++) {
        REQUIRE(quant_traits(qtypes[i]) && quant_traits(qtypes[i])->vec_dot, "type %u has kernels", qtypes[i]);
        test_ggml_bounds(qtypes[i]);
        test_zero_rows(qtypes[i]);
        test_vec_dot_sub(qtypes[i]);
        if (quant_traits(qtypes[i])->blck_size == QK_K)
            test_kquantize_edges(qtypes[i]);
        const int64_t lens32[] = { 32, 96, 4096 + 32 };
        const int64_t lens256[] = { 256, 768, 4096, 11008 };
        const bool k = quant_traits(qtypes[i])->blck_size == QK_K;
        const int64_t *lens = k ? lens256 : lens32;
        const size_t nl = k ? sizeof lens256 / sizeof lens256[0] : sizeof lens32 / sizeof lens32[0];
        for (size_t l = 0; l < nl; l++)
            for (int kind = 0; kind < 3; kind++)
                test_random_type(qtypes[i], lens[l], kind);
    }
    fprintf(stderr, "kernels in use: %s\n", quant_has_avx2() ? "avx2" : "scalar");
    if (quant_has_avx2()) {
        /* every type but Q8_K (whose dot is only for tests) has its own AVX2 dot and AXPY */
        for (size_t i = 0; i < N_QTYPES; i++) {
            if (qtypes[i] == PI_TYPE_Q8_K)
                continue;
            CHECK(quant_traits(qtypes[i])->vec_dot != quant_traits_ref(qtypes[i])->vec_dot &&
                      quant_traits(qtypes[i])->axpy != quant_traits_ref(qtypes[i])->axpy,
                  "%s: AVX2 kernels installed", quant_traits(qtypes[i])->name);
        }
        const uint32_t vq[] = { PI_TYPE_Q2_K, PI_TYPE_Q4_K, PI_TYPE_Q5_K, PI_TYPE_Q6_K };
        for (size_t i = 0; i < sizeof vq / sizeof vq[0]; i++)
            CHECK(quant_traits(vq[i])->from_float != quant_traits_ref(vq[i])->from_float,
                  "%s: the AVX2 quantizer is installed", quant_traits(vq[i])->name);
    }
    return tu_finish("test_quant_types");
}
