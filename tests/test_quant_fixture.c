/* test_quant_fixture — byte-exact with llama.cpp: every quantizer of ours (the reference and the
 * kernel in use) produces the bytes that llama.cpp's ggml-quants.c produced on the same inputs, and
 * every dequantizer the same floats, bit for bit.
 *
 * tests/fixtures/quant/llama_cpp_ref.txt holds, per type and row, the FNV-1a 64 hash of ggml's
 * quantized bytes and of its dequantized f32 values. It was made once by a small C driver linked
 * with ggml-quants.c (built -O2 -ffp-contract=off, i.e. GGML_NATIVE=OFF arithmetic, no importance
 * matrix: the functions llama-quantize calls), on the inputs gen_row() below makes from the seed in
 * the file; the driver carries a copy of gen_row. So CI needs no build of llama.cpp. */
#include "quant.h"
#include "testutil.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FIX_ROWS 12
#define FIX_N 512
#define MAX_ROW_BYTES (FIX_N * 4)
#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

static uint64_t g_state;

/* xorshift64* */
static uint64_t g_next(void)
{
    g_state ^= g_state >> 12;
    g_state ^= g_state << 25;
    g_state ^= g_state >> 27;
    return g_state * 0x2545f4914f6cdd1dull;
}

static float g_unit(void)
{
    return (float)((double)(g_next() >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

/* Row r of the fixture's input: six kinds that exercise the scale searches differently — uniform;
 * sums of uniforms with per-32 magnitudes; small values with rare outliers (x200); zero blocks and
 * values near 1e-5; all positive with steps (the min of the _1/K types); constant stretches. */
static void gen_row(uint64_t seed, int r, float *x, int n)
{
    g_state = seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(r + 1));
    for (int k = 0; k < 4; k++)
        (void)g_next();
    const int kind = r % 6;
    for (int i = 0; i < n; i++) {
        float u = g_unit();
        float v;
        switch (kind) {
        case 0: v = u; break;
        case 1: v = (u + g_unit() + g_unit() + g_unit()) * (0.25f + (float)((i / 32) % 5)); break;
        case 2:
            v = u * 0.1f;
            if (g_next() % 37 == 0)
                v *= 200.0f;
            break;
        case 3: v = ((i / 32) % 3 == 0) ? 0.0f : u * 1e-5f; break;
        case 4: v = 0.5f + 0.5f * u + (float)((i / 64) % 3); break;
        default: v = ((i / 16) % 4 == 0) ? 0.75f : u * 3.0f; break;
        }
        x[i] = v;
    }
}

static uint64_t fnv1a(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = FNV_OFFSET;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= FNV_PRIME;
    }
    return h;
}

int main(void)
{
    const char *src = getenv("PINFER_SOURCE");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/quant/llama_cpp_ref.txt", src ? src : ".");
    FILE *f = fopen(path, "r");
    REQUIRE(f != NULL, "open %s", path);

    uint64_t seed = 0;
    int rows = 0, n = 0, lines = 0;
    char line[512];
    float x[FIX_ROWS][FIX_N];
    bool have_inputs = false;
    /* the types the fixture must cover: a line missing for one of them is a failure too */
    const char *want_types[] = { "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_K", "q3_K", "q4_K",
                                 "q5_K", "q6_K", "iq4_nl", "iq4_xs", "q8_K" };
    int seen[sizeof want_types / sizeof want_types[0]] = { 0 };

    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') {
            unsigned long long s;
            if (sscanf(line, "# seed 0x%llx, %d rows of %d", &s, &rows, &n) == 3) {
                REQUIRE(rows == FIX_ROWS && n == FIX_N, "fixture shape %d x %d", rows, n);
                seed = s;
                for (int r = 0; r < FIX_ROWS; r++)
                    gen_row(seed, r, x[r], FIX_N);
                have_inputs = true;
            }
            continue;
        }
        char name[32];
        int r;
        unsigned long long hq, hd;
        if (sscanf(line, "%31s %d %llx %llx", name, &r, &hq, &hd) != 4)
            continue;
        REQUIRE(have_inputs, "seed line before the data");
        REQUIRE(r >= 0 && r < FIX_ROWS, "row %d", r);
        lines++;
        for (size_t k = 0; k < sizeof want_types / sizeof want_types[0]; k++)
            if (strcmp(name, want_types[k]) == 0)
                seen[k]++;
        const int type = quant_type_from_name(name);
        CHECK(type >= 0, "type %s known", name);
        if (type < 0)
            continue;
        const size_t rb = quant_row_size((uint32_t)type, FIX_N);
        REQUIRE(rb > 0 && rb <= MAX_ROW_BYTES, "%s row size", name);
        uint8_t q[MAX_ROW_BYTES];
        float dq[FIX_N];
        const struct pi_type_traits *impls[2] = { quant_traits_ref((uint32_t)type), quant_traits((uint32_t)type) };
        for (int k = 0; k < 2; k++) {
            memset(q, 0x5a, sizeof q);
            impls[k]->from_float(x[r], q, FIX_N);
            const uint64_t got = fnv1a(q, rb);
            CHECK(got == hq, "%s row %d (kind %d) %s quantizer: bytes differ from llama.cpp (%016" PRIx64
                  " vs %016llx)", name, r, r % 6, k ? "in-use" : "reference", got, hq);
        }
        /* dequantize llama.cpp's bytes: ours, when the quantizer matched; the hash checks both */
        impls[0]->from_float(x[r], q, FIX_N);
        for (int k = 0; k < 2; k++) {
            memset(dq, 0, sizeof dq);
            impls[k]->to_float(q, dq, FIX_N);
            const uint64_t got = fnv1a(dq, sizeof dq);
            CHECK(got == hd, "%s row %d %s dequantizer: floats differ from llama.cpp (%016" PRIx64 " vs %016llx)",
                  name, r, k ? "in-use" : "reference", got, hd);
        }
    }
    fclose(f);
    for (size_t k = 0; k < sizeof want_types / sizeof want_types[0]; k++)
        CHECK(seen[k] == FIX_ROWS, "fixture has %d rows of %s", seen[k], want_types[k]);
    CHECK(lines == FIX_ROWS * (int)(sizeof want_types / sizeof want_types[0]), "%d fixture lines", lines);
    return tu_finish("test_quant_fixture");
}
