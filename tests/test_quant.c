/* test_quant — element types and CPU kernels: f16/bf16 conversion (exhaustive and against F16C),
 * golden q8_0/q4_0 blocks computed by hand from ggml's formulas, quantization error bounds, and the
 * AVX2 kernels against the scalar reference on random data (skipped, not failed, without AVX2), and
 * every kernel level this CPU has (scalar, AVX2, AVX-512), each forced in turn, against the reference
 * with the multi-row GEMV bitwise the level's vec_dot (quant_levels.h). */
#include "pi_err.h"
#include "quant.h"
#include "quant_levels.h"
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define N_RANDOM_F16 (4 * 1024 * 1024 + 3) /* millions of floats, plus a tail for the 8-wide loop */
#define F16_COUNT 65536
#define F16_QUIET 0x0200u
#define F32_SIGN 0x80000000u
#define FLOAT_DOT_TOL 1e-5 /* relative to Σ|x*y|: float accumulation order differs */
#define QUANT_DOT_TOL 1e-6 /* relative to Σ_blocks |dx*dy|*Σ|qx*qy|: integer sums, float across blocks */
#define F16_REL_ERR (1.0 / 2048) /* half an ulp at 11 significant bits */
#define BF16_REL_ERR (1.0 / 256) /* half an ulp at 8 significant bits */
#define F16_SUBNORMAL_HALF_ULP 0x1p-25 /* below 2^-14 f16's spacing is 2^-24 whatever the magnitude */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void)
{
    /* xorshift64*: deterministic, so a failure reproduces */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

/* uniform in [-1, 1) */
static float rng_unit(void)
{
    return (float)((double)(rng_next() >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static bool have_avx2(void)
{
    quant_use_scalar(false);
    return quant_has_avx2();
}

/* ---- names, sizes, unknown types ---- */

static void test_traits(void)
{
    const struct { uint32_t type; const char *name; int blck; size_t size; uint32_t vd; } want[] = {
        { PI_TYPE_F32, "f32", 1, 4, PI_TYPE_F32 },
        { PI_TYPE_F16, "f16", 1, 2, PI_TYPE_F32 },
        { PI_TYPE_BF16, "bf16", 1, 2, PI_TYPE_F32 },
        { PI_TYPE_Q8_0, "q8_0", 32, 34, PI_TYPE_Q8_0 },
        { PI_TYPE_Q4_0, "q4_0", 32, 18, PI_TYPE_Q8_0 },
        /* ggml's type ids and block sizes (ggml-common.h) */
        { PI_TYPE_Q4_1, "q4_1", 32, 20, PI_TYPE_Q8_0 },
        { PI_TYPE_Q5_0, "q5_0", 32, 22, PI_TYPE_Q8_0 },
        { PI_TYPE_Q5_1, "q5_1", 32, 24, PI_TYPE_Q8_0 },
        { PI_TYPE_IQ4_NL, "iq4_nl", 32, 18, PI_TYPE_Q8_0 },
        { PI_TYPE_Q2_K, "q2_K", 256, 84, PI_TYPE_Q8_K },
        { PI_TYPE_Q3_K, "q3_K", 256, 110, PI_TYPE_Q8_K },
        { PI_TYPE_Q4_K, "q4_K", 256, 144, PI_TYPE_Q8_K },
        { PI_TYPE_Q5_K, "q5_K", 256, 176, PI_TYPE_Q8_K },
        { PI_TYPE_Q6_K, "q6_K", 256, 210, PI_TYPE_Q8_K },
        { PI_TYPE_Q8_K, "q8_K", 256, 292, PI_TYPE_Q8_K },
        { PI_TYPE_IQ4_XS, "iq4_xs", 256, 136, PI_TYPE_Q8_K },
    };
    CHECK(PI_TYPE_Q4_1 == 3 && PI_TYPE_Q5_0 == 6 && PI_TYPE_Q5_1 == 7 && PI_TYPE_Q2_K == 10 &&
          PI_TYPE_Q3_K == 11 && PI_TYPE_Q4_K == 12 && PI_TYPE_Q5_K == 13 && PI_TYPE_Q6_K == 14 &&
          PI_TYPE_Q8_K == 15 && PI_TYPE_IQ4_NL == 20 && PI_TYPE_IQ4_XS == 23, "ggml type ids");
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const struct pi_type_traits *t = quant_traits(want[i].type);
        REQUIRE(t != NULL, "type %u has traits", want[i].type);
        CHECK(strcmp(t->name, want[i].name) == 0, "name %s", t->name);
        CHECK(t->blck_size == want[i].blck && t->type_size == want[i].size, "%s block", t->name);
        CHECK(t->is_float_matmul, "%s matmul", t->name);
        CHECK((uint32_t)t->vec_dot_type == want[i].vd, "%s vec_dot_type", t->name);
        CHECK(t->to_float && t->from_float && t->vec_dot, "%s kernels", t->name);
        CHECK(quant_type_from_name(want[i].name) == (int)want[i].type, "from_name %s", want[i].name);
        CHECK(quant_traits_ref(want[i].type) != NULL, "ref traits %s", t->name);
    }
    const struct pi_type_traits *i32 = quant_traits(PI_TYPE_I32);
    REQUIRE(i32 != NULL, "i32 traits");
    CHECK(strcmp(i32->name, "i32") == 0 && i32->blck_size == 1 && i32->type_size == 4, "i32 shape");
    CHECK(!i32->is_float_matmul && !i32->to_float && !i32->from_float && !i32->vec_dot, "i32 has no kernels");
    CHECK(quant_type_from_name("i32") == PI_TYPE_I32, "i32 by name");

    /* Q8_1 (9), the IQ2/IQ3/IQ1 family, I8..F64, TQ*, MXFP4 */
    const uint32_t unknown[] = { 4, 5, 9, 16, 17, 18, 19, 21, 22, 24, 25, 29, 31, 34, 35, 39, PI_TYPE_COUNT,
                                 1000, UINT32_MAX };
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        CHECK(quant_traits(unknown[i]) == NULL, "type %u unknown", unknown[i]);
        CHECK(quant_traits_ref(unknown[i]) == NULL, "ref type %u unknown", unknown[i]);
        CHECK(quant_row_size(unknown[i], 32) == 0, "row size of unknown %u", unknown[i]);
    }
    CHECK(quant_type_from_name("q8_1") == -1, "q8_1 not supported");
    CHECK(quant_type_from_name("q4_k") == -1, "K names as ggml spells them (q4_K)");
    CHECK(quant_type_from_name("") == -1 && quant_type_from_name(NULL) == -1, "empty name");
    CHECK(quant_type_from_name("Q4_0") == -1, "names are lower case as in ggml");

    CHECK(quant_row_size(PI_TYPE_Q4_0, 4096) == 128 * 18, "q4_0 row");
    CHECK(quant_row_size(PI_TYPE_Q8_0, 4096) == 128 * 34, "q8_0 row");
    CHECK(quant_row_size(PI_TYPE_F16, 7) == 14, "f16 row");
    CHECK(quant_row_size(PI_TYPE_BF16, 11008) == 22016, "bf16 row");
    CHECK(quant_row_size(PI_TYPE_F32, 3) == 12, "f32 row");
    CHECK(quant_row_size(PI_TYPE_Q4_0, 33) == 0, "q4_0 needs whole blocks");
    CHECK(quant_row_size(PI_TYPE_Q8_0, 16) == 0, "q8_0 needs whole blocks");
    CHECK(quant_row_size(PI_TYPE_Q8_0, -32) == 0, "negative n");
    CHECK(quant_row_size(PI_TYPE_I32, 5) == 20, "i32 row");
    CHECK(quant_row_size(PI_TYPE_Q4_K, 4096) == 16 * 144, "q4_K row");
    CHECK(quant_row_size(PI_TYPE_Q6_K, 11008) == 43 * 210, "q6_K row");
    CHECK(quant_row_size(PI_TYPE_Q4_K, 4096 + 32) == 0, "q4_K needs whole super-blocks");
}

/* ---- f16 / bf16 conversion ---- */

static void test_f16_exhaustive(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < F16_COUNT; h++) {
        float f = pi_f16_to_f32((pi_f16)h);
        pi_f16 back = pi_f32_to_f16(f);
        if (isnan(f)) {
            /* NaN stays NaN; a signalling one comes back quiet, as with F16C */
            if (back != (h | F16_QUIET))
                bad++;
        } else if (back != h) {
            bad++;
        }
    }
    CHECK(bad == 0, "%d of 65536 halves do not round-trip through f32", bad);

    /* values computed by hand */
    CHECK(pi_f16_to_f32(0x3c00) == 1.0f && pi_f16_to_f32(0xc000) == -2.0f, "1, -2");
    CHECK(pi_f16_to_f32(0x7bff) == 65504.0f, "max half");
    CHECK(pi_f16_to_f32(0x0001) == ldexpf(1.0f, -24), "smallest subnormal");
    CHECK(pi_f16_to_f32(0x03ff) == ldexpf(1023.0f, -24), "largest subnormal");
    CHECK(pi_f16_to_f32(0x0400) == ldexpf(1.0f, -14), "smallest normal");
    CHECK(isinf(pi_f16_to_f32(0x7c00)) && pi_f16_to_f32(0xfc00) < 0, "inf");
    CHECK(f32_bits(pi_f16_to_f32(0x8000)) == F32_SIGN, "-0 keeps its sign");
    CHECK(pi_f32_to_f16(1.0f) == 0x3c00 && pi_f32_to_f16(-2.0f) == 0xc000, "1, -2 back");
    CHECK(pi_f32_to_f16(65504.0f) == 0x7bff, "max half back");
    CHECK(pi_f32_to_f16(65519.99f) == 0x7bff, "just below the overflow tie");
    CHECK(pi_f32_to_f16(65520.0f) == 0x7c00, "overflow tie rounds to inf (even)");
    CHECK(pi_f32_to_f16(1e9f) == 0x7c00 && pi_f32_to_f16(-1e9f) == 0xfc00, "overflow");
    CHECK(pi_f32_to_f16(ldexpf(1.0f, -25)) == 0x0000, "2^-25 ties to even zero");
    CHECK(pi_f32_to_f16(nextafterf(ldexpf(1.0f, -25), 1.0f)) == 0x0001, "just above 2^-25");
    CHECK(pi_f32_to_f16(ldexpf(3.0f, -25)) == 0x0002, "1.5 ulp subnormal ties to even 2");
    CHECK(pi_f32_to_f16(ldexpf(5.0f, -25)) == 0x0002, "2.5 ulp subnormal ties to even 2");
    CHECK(pi_f32_to_f16(ldexpf(2047.0f, -25)) == 0x0400, "subnormal rounding up into the normals");
    CHECK(pi_f32_to_f16(1.0f + ldexpf(1.0f, -11)) == 0x3c00, "tie to even below");
    CHECK(pi_f32_to_f16(1.0f + ldexpf(3.0f, -11)) == 0x3c02, "tie to even above");
    CHECK(pi_f32_to_f16(ldexpf(1.0f, -30)) == 0x0000, "underflow");
    CHECK(pi_f32_to_f16(-ldexpf(1.0f, -30)) == 0x8000, "negative underflow keeps sign");
    CHECK(pi_f32_to_f16(INFINITY) == 0x7c00, "inf back");
    pi_f16 hn = pi_f32_to_f16(NAN);
    CHECK((hn & 0x7c00) == 0x7c00 && (hn & 0x3ff) != 0, "NaN stays NaN (%04x)", hn);
    CHECK((pi_f32_to_f16(bits_f32(0x7f800001)) & 0x3ff) != 0, "NaN with payload only in low bits");
}

static void test_bf16(void)
{
    CHECK(pi_f32_to_bf16(1.0f) == 0x3f80 && pi_bf16_to_f32(0x3f80) == 1.0f, "1");
    CHECK(pi_f32_to_bf16(bits_f32(0x3f808000)) == 0x3f80, "tie, even kept");
    CHECK(pi_f32_to_bf16(bits_f32(0x3f818000)) == 0x3f82, "tie, odd rounds up");
    CHECK(pi_f32_to_bf16(bits_f32(0x3f808001)) == 0x3f81, "above tie");
    CHECK(pi_f32_to_bf16(bits_f32(0x3f807fff)) == 0x3f80, "below tie");
    CHECK(pi_f32_to_bf16(bits_f32(0x7f7fffff)) == 0x7f80, "max float rounds to inf");
    CHECK(pi_f32_to_bf16(INFINITY) == 0x7f80 && pi_f32_to_bf16(-INFINITY) == 0xff80, "inf");
    CHECK(isnan(pi_bf16_to_f32(pi_f32_to_bf16(bits_f32(0x7f800001)))), "NaN with low payload stays NaN");
    CHECK(isnan(pi_bf16_to_f32(pi_f32_to_bf16(bits_f32(0xffffffff)))), "all-ones NaN stays NaN");
    CHECK(pi_f32_to_bf16(-0.0f) == 0x8000, "-0");
    int bad = 0;
    for (uint32_t h = 0; h < F16_COUNT; h++) {
        float f = pi_bf16_to_f32((pi_bf16)h);
        if (!isnan(f) && pi_f32_to_bf16(f) != h)
            bad++;
    }
    CHECK(bad == 0, "%d bf16 values do not round-trip", bad);
}

/* The F16C path (vcvtps2ph in the AVX2 unit's F16 from_float) against pi_f32_to_f16 */
static void test_f16_vs_f16c(void)
{
    if (!have_avx2()) {
        fprintf(stderr, "note: no AVX2/F16C, F16C comparison skipped\n");
        return;
    }
    const struct pi_type_traits *fast = quant_traits(PI_TYPE_F16);
    const struct pi_type_traits *ref = quant_traits_ref(PI_TYPE_F16);
    float *src = malloc(N_RANDOM_F16 * sizeof *src);
    pi_f16 *a = malloc(N_RANDOM_F16 * sizeof *a);
    pi_f16 *b = malloc(N_RANDOM_F16 * sizeof *b);
    REQUIRE(src && a && b, "alloc");
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < N_RANDOM_F16; i++) {
            if (pass == 0) {
                src[i] = bits_f32((uint32_t)rng_next()); /* every class: NaN, inf, subnormal */
            } else {
                /* concentrated on the half range, where rounding matters: exponents 2^-27..2^17 */
                uint32_t r = (uint32_t)rng_next();
                uint32_t e = 100 + (r >> 24) % 45;
                src[i] = bits_f32((r & 0x807fffffu) | (e << 23));
            }
        }
        ref->from_float(src, a, N_RANDOM_F16);
        fast->from_float(src, b, N_RANDOM_F16);
        int bad = 0, first = -1;
        for (int i = 0; i < N_RANDOM_F16; i++)
            if (a[i] != b[i] && bad++ == 0)
                first = i;
        CHECK(bad == 0, "pass %d: %d of %d differ from F16C; first %08x -> %04x vs %04x", pass, bad,
              N_RANDOM_F16, first >= 0 ? f32_bits(src[first]) : 0, first >= 0 ? a[first] : 0,
              first >= 0 ? b[first] : 0);
    }
    /* all halves through vcvtph2ps vs the scalar conversion, bit for bit */
    for (uint32_t h = 0; h < F16_COUNT; h++)
        a[h] = (pi_f16)h;
    float *fa = src, *fb = malloc(F16_COUNT * sizeof *fb);
    REQUIRE(fb != NULL, "alloc");
    ref->to_float(a, fa, F16_COUNT);
    fast->to_float(a, fb, F16_COUNT);
    CHECK(memcmp(fa, fb, F16_COUNT * sizeof(float)) == 0, "f16 to_float differs from F16C");
    free(fb);
    free(src);
    free(a);
    free(b);
}

/* ---- golden blocks, computed by hand ---- */

static void test_golden_q8_0(void)
{
    /* amax = 127, so d = 127/127 = 1 (f16 0x3c00) and q = roundf(x): half away from zero */
    float x[QK8_0];
    x[0] = -127.0f; /* -127 = 0x81 */
    x[1] = 2.5f;    /* 3 (ties-to-even would give 2) */
    x[2] = -2.5f;   /* -3 = 0xfd */
    x[3] = 0.49f;   /* 0 */
    x[4] = 100.6f;  /* 101 = 0x65 */
    x[5] = 127.0f;  /* 0x7f */
    for (int j = 6; j < QK8_0; j++)
        x[j] = (float)(j - 16); /* -10 .. 15 */
    const uint8_t want[34] = {
        0x00, 0x3c,                                     /* d = 1.0, little-endian f16 */
        0x81, 0x03, 0xfd, 0x00, 0x65, 0x7f,             /* x[0..5] */
        0xf6, 0xf7, 0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd, /* -10 .. -3 */
        0xfe, 0xff, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, /* -2 .. 5 */
        0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, /* 6 .. 13 */
        0x0e, 0x0f,                                     /* 14, 15 */
    };
    for (int fast = 0; fast < 2; fast++) {
        if (fast && !have_avx2())
            break;
        const struct pi_type_traits *t = fast ? quant_traits(PI_TYPE_Q8_0) : quant_traits_ref(PI_TYPE_Q8_0);
        struct block_q8_0 b;
        memset(&b, 0xaa, sizeof b);
        t->from_float(x, &b, QK8_0);
        CHECK(memcmp(&b, want, sizeof want) == 0, "q8_0 golden bytes (%s)", fast ? "avx2" : "ref");
        float back[QK8_0];
        t->to_float(want, back, QK8_0);
        CHECK(back[0] == -127.0f && back[1] == 3.0f && back[4] == 101.0f && back[31] == 15.0f,
              "q8_0 golden dequant");
    }
}

static void test_golden_q4_0(void)
{
    /* Largest magnitude 8 occurs as +8 (x[0]) before -8 (x[1]): ggml keeps the first, signed, so
     * d = 8 / -8 = -1 (f16 0xbc00), id = -1, q = min(15, (int8)(-x + 8.5)). */
    float x[QK4_0];
    x[0] = 8.0f;   /* q 0 */
    x[1] = -8.0f;  /* 16.5 -> 16, clamped to 15 */
    x[2] = 0.0f;   /* 8 */
    x[3] = 1.5f;   /* 7.0 -> 7 */
    x[4] = -1.5f;  /* 10.0 -> 10 */
    x[5] = 0.49f;  /* 8.01 -> 8 */
    x[6] = 0.51f;  /* 7.99 -> 7 */
    for (int j = 7; j < 16; j++)
        x[j] = (float)(j - 8); /* q = (int)(16.5 - j) = 16 - j: 9 .. 1 */
    for (int k = 0; k < 16; k++)
        x[16 + k] = (float)(k - 7); /* q = (int)(15.5 - k) = 15 - k: 15 .. 0 */
    /* byte j = q[j] | q[j+16] << 4 */
    const uint8_t want[18] = {
        0x00, 0xbc,                                     /* d = -1.0 */
        0xf0, 0xef, 0xd8, 0xc7, 0xba, 0xa8, 0x97, 0x89, /* j 0..7 */
        0x78, 0x67, 0x56, 0x45, 0x34, 0x23, 0x12, 0x01, /* j 8..15 */
    };
    const struct pi_type_traits *t = quant_traits_ref(PI_TYPE_Q4_0);
    struct block_q4_0 b;
    memset(&b, 0xaa, sizeof b);
    t->from_float(x, &b, QK4_0);
    CHECK(memcmp(&b, want, sizeof want) == 0, "q4_0 golden bytes");
    float back[QK4_0];
    quant_traits(PI_TYPE_Q4_0)->to_float(want, back, QK4_0);
    /* (q - 8) * d */
    CHECK(back[0] == 8.0f && back[1] == -7.0f && back[2] == 0.0f && back[3] == 1.0f, "q4_0 dequant 0..3");
    CHECK(back[16] == -7.0f && back[31] == 8.0f, "q4_0 dequant high nibbles");

    /* the golden block dotted with a q8_0 row of ones (d = 1/127: amax 1) by both kernels */
    float ones[QK8_0];
    for (int j = 0; j < QK8_0; j++)
        ones[j] = 1.0f;
    struct block_q8_0 y;
    quant_traits_ref(PI_TYPE_Q8_0)->from_float(ones, &y, QK8_0);
    float dy = pi_f16_to_f32(y.d), sum_back = 0.0f;
    for (int j = 0; j < QK4_0; j++)
        sum_back += back[j];
    float s_ref, s_fast;
    t->vec_dot(QK4_0, &s_ref, want, &y);
    quant_traits(PI_TYPE_Q4_0)->vec_dot(QK4_0, &s_fast, want, &y);
    CHECK(fabsf(s_ref - sum_back * 127 * dy) <= 1e-5f * fabsf(s_ref), "golden dot ref %g vs %g", s_ref,
          sum_back * 127 * dy);
    CHECK(fabsf(s_fast - s_ref) <= 1e-6f * fabsf(s_ref), "golden dot fast %g vs %g", s_fast, s_ref);
}

/* ---- random data: quantization error and AVX2 vs reference ---- */

/* Σ|terms| of the dot, the scale of its rounding error in any summation order; for quant types
 * Σ_blocks |dx dy| Σ |qx qy| */
static double dot_scale(uint32_t type, const void *w, const void *yv, const float *wf, const float *yf,
                        int64_t n)
{
    double s = 0.0;
    if (type == PI_TYPE_Q8_0 || type == PI_TYPE_Q4_0) {
        const struct block_q8_0 *y = yv;
        for (int64_t b = 0; b < n / QK8_0; b++) {
            double dy = pi_f16_to_f32(y[b].d), dx, sumi = 0;
            if (type == PI_TYPE_Q8_0) {
                const struct block_q8_0 *x = w;
                dx = pi_f16_to_f32(x[b].d);
                for (int j = 0; j < QK8_0; j++)
                    sumi += abs(x[b].qs[j] * y[b].qs[j]);
            } else {
                const struct block_q4_0 *x = w;
                dx = pi_f16_to_f32(x[b].d);
                for (int j = 0; j < QK4_0 / 2; j++)
                    sumi += abs(((x[b].qs[j] & 0xf) - 8) * y[b].qs[j]) + abs(((x[b].qs[j] >> 4) - 8) * y[b].qs[j + 16]);
            }
            s += fabs(dx * dy * sumi);
        }
        return s;
    }
    for (int64_t i = 0; i < n; i++)
        s += fabs((double)wf[i] * yf[i]);
    return s;
}

/* Quantization error of one row: dq = dequant(quant(x)) */
static void check_quant_error(uint32_t type, const float *x, const void *w, const float *dq, int64_t n)
{
    int bad = 0;
    double worst = 0;
    for (int64_t b = 0; b < n / QK8_0; b++) {
        const float *xb = x + b * QK8_0;
        const float *db = dq + b * QK8_0;
        float amax = 0, max = 0;
        for (int j = 0; j < QK8_0; j++)
            if (fabsf(xb[j]) > amax) {
                amax = fabsf(xb[j]);
                max = xb[j];
            }
        double d, d16, bound;
        if (type == PI_TYPE_Q8_0) {
            /* |x - q d| <= d/2, plus the error of storing d as f16 (at most |q| <= 127 times) */
            d = amax / 127.0f;
            d16 = pi_f16_to_f32(((const struct block_q8_0 *)w)[b].d);
            bound = d16 / 2 + 127 * fabs(d16 - d) + 1e-6 * amax;
        } else {
            /* q4_0 rounds to d/2 but the clamp at 15 costs up to d; f16 scale error at most 8 times */
            d = max / -8.0f;
            d16 = pi_f16_to_f32(((const struct block_q4_0 *)w)[b].d);
            bound = fabs(d16) + 8 * fabs(d16 - d) + 1e-6 * amax;
        }
        for (int j = 0; j < QK8_0; j++) {
            double e = fabs((double)db[j] - xb[j]);
            if (e / (amax > 0 ? amax : 1) > worst)
                worst = e / (amax > 0 ? amax : 1);
            if (e > bound)
                bad++;
        }
    }
    CHECK(bad == 0, "%s n=%ld: %d elements beyond the error bound (worst %.3g of amax)",
          quant_traits(type)->name, (long)n, bad, worst);
}

static void test_random_type(uint32_t type, int64_t n, bool avx2)
{
    const struct pi_type_traits *ref = quant_traits_ref(type);
    const struct pi_type_traits *fast = quant_traits(type);
    const struct pi_type_traits *vref = quant_traits_ref(ref->vec_dot_type);
    const struct pi_type_traits *vfast = quant_traits(ref->vec_dot_type);
    const size_t wbytes = quant_row_size(type, n), ybytes = quant_row_size(ref->vec_dot_type, n);
    REQUIRE(wbytes > 0 && ybytes > 0, "row sizes for n=%ld", (long)n);

    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    float *dq = malloc(n * sizeof *dq), *dq2 = malloc(n * sizeof *dq2), *ydq = malloc(n * sizeof *ydq);
    uint8_t *w = malloc(wbytes), *w2 = malloc(wbytes), *yq = malloc(ybytes), *yq2 = malloc(ybytes);
    REQUIRE(x && y && dq && dq2 && ydq && w && w2 && yq && yq2, "alloc");
    for (int64_t i = 0; i < n; i++) {
        /* varying magnitudes per block so that scales differ */
        x[i] = rng_unit() * (1.0f + (float)((i / 32) % 7));
        y[i] = rng_unit();
    }

    ref->from_float(x, w, n);
    ref->to_float(w, dq, n);
    vref->from_float(y, yq, n);
    vref->to_float(yq, ydq, n);

    /* dequant(quant(x)) close to x */
    if (type == PI_TYPE_Q8_0 || type == PI_TYPE_Q4_0) {
        check_quant_error(type, x, w, dq, n);
    } else {
        double tol = type == PI_TYPE_F16 ? F16_REL_ERR : type == PI_TYPE_BF16 ? BF16_REL_ERR : 0.0;
        int bad = 0;
        for (int64_t i = 0; i < n; i++)
            if (fabs((double)dq[i] - x[i]) > fmax(tol * fabs(x[i]), type == PI_TYPE_F16 ? F16_SUBNORMAL_HALF_ULP : 0.0))
                bad++;
        CHECK(bad == 0, "%s n=%ld: %d elements beyond half an ulp", ref->name, (long)n, bad);
    }

    /* the reference dot equals Σ dequant(x) dequant(y) */
    float s_ref;
    ref->vec_dot(n, &s_ref, w, ref->vec_dot_type == PI_TYPE_F32 ? (const void *)y : yq);
    double exact = 0;
    for (int64_t i = 0; i < n; i++)
        exact += (double)dq[i] * ydq[i];
    double scale = dot_scale(type, w, yq, dq, ydq, n);
    bool quant = ref->vec_dot_type == PI_TYPE_Q8_0;
    double tol = quant ? QUANT_DOT_TOL : FLOAT_DOT_TOL;
    CHECK(fabs(s_ref - exact) <= tol * scale, "%s n=%ld: ref dot %.9g vs exact %.9g (scale %g)", ref->name,
          (long)n, s_ref, exact, scale);

    if (avx2) {
        fast->from_float(x, w2, n);
        CHECK(memcmp(w, w2, wbytes) == 0, "%s n=%ld: avx2 from_float bytes differ", ref->name, (long)n);
        vfast->from_float(y, yq2, n);
        CHECK(memcmp(yq, yq2, ybytes) == 0, "%s n=%ld: avx2 activation quantization differs", ref->name,
              (long)n);
        fast->to_float(w, dq2, n);
        CHECK(memcmp(dq, dq2, n * sizeof(float)) == 0, "%s n=%ld: avx2 to_float differs", ref->name, (long)n);
        float s_fast;
        fast->vec_dot(n, &s_fast, w, ref->vec_dot_type == PI_TYPE_F32 ? (const void *)y : yq);
        CHECK(fabs((double)s_fast - s_ref) <= tol * scale, "%s n=%ld: avx2 dot %.9g vs ref %.9g (rel %.3g)",
              ref->name, (long)n, s_fast, s_ref, fabs((double)s_fast - s_ref) / scale);
    }
    free(x), free(y), free(dq), free(dq2), free(ydq), free(w), free(w2), free(yq), free(yq2);
}

static void test_random(void)
{
    const bool avx2 = have_avx2();
    if (!avx2)
        fprintf(stderr, "note: no AVX2/FMA/F16C, AVX2 comparisons skipped\n");
    const uint32_t types[] = { PI_TYPE_F32, PI_TYPE_F16, PI_TYPE_BF16, PI_TYPE_Q8_0, PI_TYPE_Q4_0 };
    /* 1, 2, 3, 5 and 129 blocks, a big row, and lengths off the 8/32-wide loops for float types */
    const int64_t lengths[] = { 32, 64, 96, 160, 4096 + 32, 11008 };
    const int64_t float_lengths[] = { 1, 7, 37, 4096 + 5 };
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++)
            for (int rep = 0; rep < 3; rep++)
                test_random_type(types[t], lengths[l], avx2);
        if (quant_traits(types[t])->blck_size == 1)
            for (size_t l = 0; l < sizeof float_lengths / sizeof float_lengths[0]; l++)
                test_random_type(types[t], float_lengths[l], avx2);
    }
}

/* ---- dispatch and the gemv helper ---- */

static void test_dispatch(void)
{
    quant_use_scalar(true);
    CHECK(!quant_has_avx2(), "scalar forced");
    CHECK(quant_traits(PI_TYPE_Q4_0)->vec_dot == quant_traits_ref(PI_TYPE_Q4_0)->vec_dot, "scalar kernels");
    quant_use_scalar(false);
}

/* PINFER_SCALAR=1 in the environment forces the reference path: checked in a child process, since
 * the environment is read once per process. */
static void test_env_scalar(const char *self)
{
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        setenv("PINFER_SCALAR", "1", 1);
        execl(self, self, "--expect-scalar", (char *)NULL);
        _exit(2);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "PINFER_SCALAR=1 child status %d", status);
}

/* quant_gemv_rows (with the AVX2 multi-row path for q8_0/q4_0) against the reference vec_dot per
 * row; with the scalar kernels forced it must be exactly the reference */
static void test_gemv_rows(void)
{
    enum { ROWS = 5, MAX_N = 4096 + 32 };
    const uint32_t types[] = { PI_TYPE_F32, PI_TYPE_F16, PI_TYPE_BF16, PI_TYPE_Q8_0, PI_TYPE_Q4_0 };
    const int64_t lengths[] = { 96, 160, 256, MAX_N }; /* tail only, group + tail, groups only, long */
    float *wf = malloc(ROWS * MAX_N * sizeof *wf), *x = malloc(MAX_N * sizeof *x);
    float *wdq = malloc(MAX_N * sizeof *wdq), *xdq = malloc(MAX_N * sizeof *xdq);
    uint8_t *w = malloc(ROWS * MAX_N * sizeof(float)), *xq = malloc(MAX_N * sizeof(float));
    REQUIRE(wf && x && wdq && xdq && w && xq, "alloc");
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++) {
            const int64_t n = lengths[l];
            const struct pi_type_traits *ref = quant_traits_ref(types[t]);
            const struct pi_type_traits *vref = quant_traits_ref(ref->vec_dot_type);
            const size_t rb = quant_row_size(types[t], n);
            for (int64_t i = 0; i < ROWS * n; i++)
                wf[i] = rng_unit() * (1.0f + (float)((i / 32) % 5));
            for (int64_t i = 0; i < n; i++)
                x[i] = rng_unit();
            for (int r = 0; r < ROWS; r++)
                ref->from_float(wf + r * n, w + r * rb, n);
            vref->from_float(x, xq, n);
            vref->to_float(xq, xdq, n);
            const void *xv = ref->vec_dot_type == PI_TYPE_F32 ? (const void *)x : xq;
            for (int scalar = 0; scalar < 2; scalar++) {
                quant_use_scalar(scalar);
                float yv[ROWS] = { -1, -1, -1, -1, -1 };
                quant_gemv_rows(types[t], w, rb, n, xv, yv, 1, ROWS - 1);
                CHECK(yv[0] == -1 && yv[ROWS - 1] == -1, "%s: rows outside [r0, r1) untouched", ref->name);
                for (int r = 1; r < ROWS - 1; r++) {
                    float s;
                    ref->vec_dot(n, &s, w + r * rb, xv);
                    ref->to_float(w + r * rb, wdq, n);
                    double scale = dot_scale(types[t], w + r * rb, xq, wdq, xdq, n);
                    double tol = ref->vec_dot_type == PI_TYPE_Q8_0 ? QUANT_DOT_TOL : FLOAT_DOT_TOL;
                    if (scalar)
                        CHECK(s == yv[r], "%s n=%ld row %d scalar: %.9g vs %.9g", ref->name, (long)n, r, yv[r], s);
                    else
                        CHECK(fabs((double)yv[r] - s) <= tol * scale, "%s n=%ld row %d: %.9g vs ref %.9g",
                              ref->name, (long)n, r, yv[r], s);
                }
            }
            quant_use_scalar(false);
        }
    }
    float yv[2] = { 0, 0 };
    quant_gemv_rows(PI_TYPE_I32, x, 4 * 32, 32, x, yv, 0, 2);
    CHECK(isnan(yv[0]) && isnan(yv[1]), "gemv on a type without kernels poisons, never crashes");
    free(wf), free(x), free(wdq), free(xdq), free(w), free(xq);
}

/* quant_gemv_gather and quant_axpy_rows at the level in use, every type with kernels: bitwise that
 * level's vec_dot per row, and nr axpy calls in order (after a memset when init), on rows at
 * scattered addresses and for every chunk shape (nr across the kernels' chunks of a few rows);
 * quant_axpy_rows_add over a column range: bitwise axpy_rows into a zeroed buffer, then added */
static void check_gather_axpy_rows(const char *level)
{
    enum { NR = 11, N_MAX = 4096 };
    const int64_t lengths[] = { 512, N_MAX };
    float *wf = malloc(N_MAX * sizeof *wf), *x = malloc(N_MAX * sizeof *x);
    float *y1 = malloc(N_MAX * sizeof *y1), *y2 = malloc(N_MAX * sizeof *y2);
    uint8_t *xq = malloc(N_MAX * sizeof(float) + 64);
    REQUIRE(wf && x && y1 && y2 && xq, "alloc");
    for (uint32_t type = 0; type < PI_TYPE_COUNT; type++) {
        const struct pi_type_traits *ref = quant_traits_ref(type), *fast = quant_traits(type);
        if (!ref || !ref->name || !ref->vec_dot || !ref->axpy)
            continue;
        for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++) {
            const int64_t n = lengths[l];
            const size_t rb = quant_row_size(type, n);
            /* rows apart from each other, in the order of neither their addresses nor their index */
            void *rows[NR];
            for (int r = 0; r < NR; r++) {
                rows[(r * 7) % NR] = malloc(rb + 64 * (size_t)r);
                REQUIRE(rows[(r * 7) % NR], "alloc");
            }
            for (int r = 0; r < NR; r++) {
                for (int64_t i = 0; i < n; i++)
                    wf[i] = rng_unit() * (1.0f + (float)((i / 32) % 5));
                ref->from_float(wf, rows[r], n);
            }
            for (int64_t i = 0; i < n; i++)
                x[i] = rng_unit();
            const struct pi_type_traits *vt = quant_traits_ref(ref->vec_dot_type);
            vt->from_float(x, xq, n);
            const void *xv = ref->vec_dot_type == PI_TYPE_F32 ? (const void *)x : xq;
            float g[NR], want;
            quant_gemv_gather(type, n, xv, (const void *const *)rows, NR, g);
            int bad = 0;
            for (int r = 0; r < NR; r++) {
                fast->vec_dot(n, &want, rows[r], xv);
                bad += memcmp(&want, &g[r], sizeof want) != 0;
            }
            CHECK(bad == 0, "%s %s n=%ld: %d gathered rows differ from vec_dot", level, ref->name, (long)n, bad);
            /* the same with the activation prepared once beforehand (the sparse FFN's way), where the
             * level has a prepared form; prepared twice into one buffer: nothing depends on its past */
            const size_t ab = quant_gather_act_bytes(type, n);
            if (ab) {
                void *act = aligned_alloc(64, (ab + 63) / 64 * 64);
                REQUIRE(act, "alloc");
                memset(act, 0x5a, ab);
                quant_gather_act_prepare(type, n, xv, act);
                float ga[NR];
                quant_gemv_gather_act(type, n, xv, act, (const void *const *)rows, NR, ga);
                CHECK(memcmp(g, ga, sizeof g) == 0, "%s %s n=%ld: gather with a prepared activation differs", level,
                      ref->name, (long)n);
                free(act);
            }
            float a[NR];
            for (int r = 0; r < NR; r++)
                a[r] = rng_unit() * 2.0f - 1.0f;
            for (int nr = 1; nr <= NR; nr++) {
                for (int init = 0; init < 2; init++) {
                    for (int64_t i = 0; i < n; i++)
                        y1[i] = y2[i] = init ? NAN : rng_unit();
                    if (init)
                        memset(y1, 0, (size_t)n * sizeof *y1);
                    for (int r = 0; r < nr; r++)
                        fast->axpy(n, y1, a[r], rows[r]);
                    quant_axpy_rows(type, n, y2, a, (const void *const *)rows, nr, init);
                    CHECK(memcmp(y1, y2, (size_t)n * sizeof *y1) == 0, "%s %s n=%ld nr=%d init=%d: axpy_rows differs",
                          level, ref->name, (long)n, nr, init);
                }
                /* rows_add: the rows summed from zero, then added into y; over column ranges of whole
                 * blocks (the sparse FFN by columns), each element the whole row's bits. The widths
                 * (rounded up to whole blocks) reach every part of the float types' kernels: chunks of
                 * 32 columns, of 8, the scalar tail, alone and together; the range starts at an odd
                 * column where a block is one element (loads off the vector alignment). */
                const int64_t widths[] = { n / 4, 32 * 3 + 8 * 2 + 7, 8, 5 };
                const int64_t bs = ref->blck_size, c0 = (n / 2 + 3) / bs * bs;
                float t1[N_MAX];
                quant_axpy_rows(type, n, t1, a, (const void *const *)rows, nr, true);
                const void *seg[NR];
                for (int r = 0; r < nr; r++)
                    seg[r] = (const char *)rows[r] + quant_row_size(type, c0);
                for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
                    const int64_t c1 = c0 + (widths[w] + bs - 1) / bs * bs;
                    for (int64_t i = 0; i < n; i++)
                        y1[i] = y2[i] = rng_unit();
                    for (int64_t i = c0; i < c1; i++)
                        y1[i] += t1[i];
                    quant_axpy_rows_add(type, c1 - c0, y2 + c0, a, seg, nr);
                    CHECK(memcmp(y1, y2, (size_t)n * sizeof *y1) == 0,
                          "%s %s n=%ld nr=%d: axpy_rows_add over [%ld, %ld) differs", level, ref->name, (long)n, nr,
                          (long)c0, (long)c1);
                }
            }
            for (int r = 0; r < NR; r++)
                free(rows[r]);
        }
    }
    free(wf), free(x), free(y1), free(y2), free(xq);
}

/* every level up to the best this CPU has, forced with quant_set_level; levels above it refused */
static void test_levels(void)
{
    const enum pi_cpu_level max = quant_level_max();
    for (int l = 0; l < PI_CPU_LEVELS; l++) {
        const int rc = quant_set_level((enum pi_cpu_level)l);
        if (l > (int)max) {
            CHECK(rc == -PI_E_UNSUPPORTED && quant_level() != (enum pi_cpu_level)l, "level %s refused",
                  quant_level_name((enum pi_cpu_level)l));
            fprintf(stderr, "note: level %s not on this CPU, not checked here\n", quant_level_name((enum pi_cpu_level)l));
            continue;
        }
        CHECK(rc == 0 && quant_level() == (enum pi_cpu_level)l, "set level %d", l);
        ql_check_level(quant_level_name((enum pi_cpu_level)l), quant_traits, quant_gemv_rows, quant_gemm_rows);
        check_gather_axpy_rows(quant_level_name((enum pi_cpu_level)l));
        /* the sparse FFN adds by columns only where this says so: these types' rows-add above ran the
         * register-resident kernels */
        if (l == PI_CPU_AVX2)
            CHECK(quant_axpy_rows_add_native(PI_TYPE_Q4_0) && quant_axpy_rows_add_native(PI_TYPE_Q8_0) &&
                      quant_axpy_rows_add_native(PI_TYPE_F16) && quant_axpy_rows_add_native(PI_TYPE_BF16),
                  "avx2: the rows-add kernels of Q4_0, Q8_0, F16 and BF16 reported native");
        fprintf(stderr, "level %s: checked\n", quant_level_name((enum pi_cpu_level)l));
    }
    CHECK(quant_level_from_name("avx512") == PI_CPU_AVX512 && quant_level_from_name("sse") == -1, "level names");
    quant_set_level(max);
}

/* PINFER_CPU_LEVEL=scalar in the environment: the reference kernels (a child process, as above) */
static void test_env_level(const char *self)
{
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        unsetenv("PINFER_SCALAR");
        setenv("PINFER_CPU_LEVEL", "scalar", 1);
        execl(self, self, "--expect-scalar", (char *)NULL);
        _exit(2);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "PINFER_CPU_LEVEL=scalar child status %d", status);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--expect-scalar") == 0)
        return quant_has_avx2() || quant_level() != PI_CPU_SCALAR ? 1 : 0;
    fprintf(stderr, "best kernel level here: %s\n", quant_level_name(quant_level_max()));
    test_levels();
    test_env_level(argv[0]);
    test_traits();
    test_f16_exhaustive();
    test_bf16();
    test_f16_vs_f16c();
    test_golden_q8_0();
    test_golden_q4_0();
    test_random();
    test_dispatch();
    test_env_scalar(argv[0]);
    test_gemv_rows();
    return tu_finish("test_quant");
}
