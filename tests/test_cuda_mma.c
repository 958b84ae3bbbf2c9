/* test_cuda_mma — the tensor-core F16 / BF16 kernels (gpud/cuda/cuk_mma.cu) through cuk_gemv,
 * cuk_gemv_split3 and cuk_glu, on random weights of awkward shapes (K not a multiple of the 64-element
 * chunk, rows not a multiple of the 16-row tile), tokens of very different magnitudes (the per-token
 * scale) and an all-zero token:
 *   - batch invariance: every token of a batch of B (1, 3, 8: the decode kernel; 9: the prefill
 *     kernel of small batches; 70, 130: the tiled prefill kernel, one and two blocks of tokens at
 *     its default tiling; PINFER_CUDA_MMA_TILE picks the others) is bitwise the token computed alone;
 *   - accuracy against an f64 reference, token by token: NMSE ≤ 1e-8 (test_cuda_ops's bound for
 *     float weights against the CPU). The hi/lo split keeps ~22 bits of an F16 activation of
 *     magnitude ≥ 2^-2 (~16 bits for BF16; F16 with PINFER_CUDA_MMA_ACT=split); below, f16's subnormal
 *     lo leaves an absolute 2^-25, so the tokens of magnitude 1e-3 are the worst (~1e-9); 3e4 is near
 *     f16's largest value. In the f16 mode (F16's default: x rounded to f16 once, cuk_mma.h) the
 *     same 1e-8 holds against the f64 product of the rounded x, and against x itself the bound that rounding implies
 *     (check_act16 derives it); the bitwise checks below are the same in both modes;
 *   - the epilogues: ADD = SET + y bitwise, RELU, MASK and SPLIT3 from SET bitwise;
 *   - the GLU: dense = gate and up computed apart, combined on the host (ReGLU, dReLU bitwise;
 *     SwiGLU within 1e-6); the sparse path's gathered rows (compact and scattered) bitwise the dense.
 * Skips (77) without a CUDA device or without the CUDA backend (PI_CUDA_NOT_BUILT). */
#ifdef PI_CUDA_NOT_BUILT
#include "testutil.h"
int main(void) { SKIP("built without the CUDA backend (meson -Dcuda=auto|enabled with the toolkit)"); }
#else
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuk.h"
#include "cuk_mma.h"
#include "model.h"
#include "pi_err.h"
#include "quant.h"
#include "testutil.h"

#define BMAX 130

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) /* [-1, 1) */
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void *dev(size_t n)
{
    void *p = NULL;
    REQUIRE(cudaMalloc(&p, n) == cudaSuccess, "cudaMalloc %zu", n);
    return p;
}

static void up(void *d, const void *h, size_t n) { REQUIRE(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice) == cudaSuccess, "copy up"); }
static void down(void *h, const void *d, size_t n)
{
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess, "sync: %s", cudaGetErrorString(cudaGetLastError()));
    REQUIRE(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost) == cudaSuccess, "copy down");
}

/* a weight of n rows × k on the device, and its values as float (host) */
static struct cuk_w make_w(uint32_t type, int64_t k, int64_t n, float *wf)
{
    uint16_t *h = malloc((size_t)(k * n) * 2);
    for (int64_t i = 0; i < k * n; i++) {
        const float v = frand();
        h[i] = type == PI_TYPE_F16 ? pi_f32_to_f16(v) : pi_f32_to_bf16(v);
        wf[i] = type == PI_TYPE_F16 ? pi_f16_to_f32(h[i]) : pi_bf16_to_f32(h[i]);
    }
    struct cuk_w w = { .type = type, .n_in = k, .n_out = n, .q = dev((size_t)(k * n) * 2), .d = NULL };
    up(w.q, h, (size_t)(k * n) * 2);
    free(h);
    return w;
}

/* the worst NMSE of a token against the f64 product */
static double nmse_ref(const float *got, const float *wf, const float *x, int64_t k, int64_t n, int B)
{
    double worst = 0;
    for (int b = 0; b < B; b++) {
        double e = 0, s = 0;
        for (int64_t r = 0; r < n; r++) {
            double ref = 0;
            for (int64_t i = 0; i < k; i++)
                ref += (double)wf[r * k + i] * (double)x[(int64_t)b * k + i];
            const double d = (double)got[(int64_t)b * n + r] - ref;
            e += d * d, s += ref * ref;
        }
        worst = fmax(worst, s > 0 ? e / s : e);
    }
    return worst;
}

/* The f16 mode's accuracy (cuk_mma_act16). The kernels multiply x̂ = f16(x), rounded to nearest
 * even (the host's pi_f32_to_f16 rounds the same way), with exact products and f32 accumulation.
 * (a) Against the f64 product of x̂ the error is the accumulation's alone: NMSE ≤ 1e-8, the split
 *     mode's bound, not loosened.
 * (b) Against the f64 product of x: x̂_i = x_i (1 + δ_i) with |δ_i| ≤ u = 2^-11 where |x_i| ≥ 2^-14
 *     (f16's normal range), and |x̂_i − x_i| ≤ 2^-25 (half the smallest subnormal) below. Output r's
 *     error from the rounding is e_r = Σ_i w_ri (x̂_i − x_i); over rows of independent zero-mean
 *     weights the cross terms vanish in expectation, so E[Σ_r e_r²] = Σ_r Σ_i w_ri² (x̂_i − x_i)²
 *     ≤ u² Σ_r Σ_i w_ri² x_i² + 2^-50 Σ_r Σ_i w_ri² =: R, and NMSE ≤ R / Σ_r ref_r² in expectation
 *     (≈ u²/3 ≈ 8e-8 for this test's tokens: δ is spread evenly, E[δ²] = u²/3). The check allows
 *     twice that expectation bound (the sums over rows fluctuate: shapes of 16 rows) plus (a)'s
 *     1e-8, and also asks that the rounding be visible (some token's NMSE > 1e-8), i.e. that the
 *     mode is in effect. */
static void check_act16(const char *tn, const float *got, const float *wf, const float *x, int64_t k, int64_t n, int B)
{
    const double u = 1.0 / 2048.0, sub = 1.0 / 33554432.0; /* 2^-11, 2^-25 */
    double worst_h = 0, worst_ratio = 0, worst_x = 0;
    float *xh = malloc((size_t)k * sizeof *xh);
    for (int b = 0; b < B; b++) {
        const float *xb = x + (int64_t)b * k;
        for (int64_t i = 0; i < k; i++)
            xh[i] = pi_f16_to_f32(pi_f32_to_f16(xb[i]));
        double eh = 0, sh = 0, ex = 0, sx = 0, r = 0;
        for (int64_t row = 0; row < n; row++) {
            double ref = 0, refh = 0, wx2 = 0, w2 = 0;
            for (int64_t i = 0; i < k; i++) {
                const double w = wf[row * k + i], xi = xb[i];
                ref += w * xi;
                refh += w * (double)xh[i];
                wx2 += w * w * xi * xi, w2 += w * w;
            }
            const double g = got[(int64_t)b * n + row];
            eh += (g - refh) * (g - refh), sh += refh * refh;
            ex += (g - ref) * (g - ref), sx += ref * ref;
            r += u * u * wx2 + sub * sub * w2;
        }
        const double nh = sh > 0 ? eh / sh : eh, nx = sx > 0 ? ex / sx : ex;
        const double bound = (sx > 0 ? 2 * r / sx : 2 * r) + 1e-8;
        worst_h = fmax(worst_h, nh), worst_x = fmax(worst_x, nx), worst_ratio = fmax(worst_ratio, nx / bound);
    }
    free(xh);
    printf("%s %lld x %lld (f16 activations): worst token NMSE against the f64 product of f16(x) %.3g, of x %.3g "
           "(%.2f of its bound)\n",
           tn, (long long)n, (long long)k, worst_h, worst_x, worst_ratio);
    CHECK(worst_h <= 1e-8, "%s %lldx%lld f16 mode: NMSE against f16(x) %.3g", tn, (long long)n, (long long)k, worst_h);
    CHECK(worst_ratio <= 1.0, "%s %lldx%lld f16 mode: NMSE against x %.3g, %.2f of the rounding's bound", tn,
          (long long)n, (long long)k, worst_x, worst_ratio);
    CHECK(worst_x > 1e-8, "%s %lldx%lld f16 mode: no rounding visible (worst NMSE %.3g): not in effect?", tn,
          (long long)n, (long long)k, worst_x);
}

static const int batches[] = { 1, 3, 8, 9, 70, BMAX };
#define NBATCH ((int)(sizeof batches / sizeof batches[0]))

static void test_gemv(uint32_t type, int64_t k, int64_t n, const float *x, void *dx, void *xq, float *dy, uint8_t *dm)
{
    const char *tn = type == PI_TYPE_F16 ? "f16" : "bf16";
    float *wf = malloc((size_t)(k * n) * sizeof *wf);
    struct cuk_w w = make_w(type, k, n, wf);
    float *alone = malloc((size_t)BMAX * n * sizeof *alone), *got = malloc((size_t)BMAX * n * sizeof *got);
    for (int b = 0; b < BMAX; b++) { /* each token alone */
        CHECK_OK(cuk_gemv(&w, (const float *)dx + (int64_t)b * k, 1, dy, CUK_SET, 0.0f, xq, NULL));
        down(alone + (int64_t)b * n, dy, (size_t)n * sizeof(float));
    }
    if (cuk_mma_act16(type))
        check_act16(tn, alone, wf, x, k, n, BMAX);
    else {
        const double e = nmse_ref(alone, wf, x, k, n, BMAX);
        printf("%s %lld x %lld: worst token NMSE against f64 %.3g\n", tn, (long long)n, (long long)k, e);
        CHECK(e <= 1e-8, "%s %lldx%lld: NMSE %.3g", tn, (long long)n, (long long)k, e);
    }
    for (int i = 0; i < NBATCH; i++) {
        const int B = batches[i];
        CHECK_OK(cuk_gemv(&w, dx, B, dy, CUK_SET, 0.0f, xq, NULL));
        down(got, dy, (size_t)B * n * sizeof(float));
        CHECK(!memcmp(got, alone, (size_t)B * n * sizeof(float)), "%s %lldx%lld: batch of %d != alone", tn,
              (long long)n, (long long)k, B);
        /* ADD onto a known y */
        for (int64_t j = 0; j < B * n; j++)
            got[j] = (float)(j % 7) - 3.0f;
        up(dy, got, (size_t)B * n * sizeof(float));
        CHECK_OK(cuk_gemv(&w, dx, B, dy, CUK_ADD, 0.0f, xq, NULL));
        down(got, dy, (size_t)B * n * sizeof(float));
        int bad = 0;
        for (int64_t j = 0; j < B * n; j++)
            bad += got[j] != ((float)(j % 7) - 3.0f) + alone[j];
        CHECK(!bad, "%s B=%d: ADD differs from SET + y at %d outputs", tn, B, bad);
        CHECK_OK(cuk_gemv(&w, dx, B, dy, CUK_RELU, 0.0f, xq, NULL));
        down(got, dy, (size_t)B * n * sizeof(float));
        bad = 0;
        for (int64_t j = 0; j < B * n; j++)
            bad += got[j] != (alone[j] > 0.0f ? alone[j] : 0.0f);
        CHECK(!bad, "%s B=%d: RELU differs at %d outputs", tn, B, bad);
        const float thr = 0.25f;
        CHECK_OK(cuk_gemv(&w, dx, B, dm, CUK_MASK, thr, xq, NULL));
        uint8_t *mk = malloc((size_t)(B * n));
        down(mk, dm, (size_t)(B * n));
        bad = 0;
        for (int64_t j = 0; j < B * n; j++)
            bad += mk[j] != (alone[j] >= thr);
        CHECK(!bad, "%s B=%d: MASK differs at %d outputs", tn, B, bad);
        free(mk);
        /* SPLIT3: rows [0, n0) → y0, [n0, n0 + n1) → y1, the rest → y2 */
        const int64_t n0 = n / 3, n1 = n / 4, n2 = n - n0 - n1;
        float *y0 = dy, *y1 = dy + (int64_t)B * n0, *y2 = y1 + (int64_t)B * n1;
        CHECK_OK(cuk_gemv_split3(&w, dx, B, y0, n0, y1, n1, y2, xq, NULL));
        down(got, dy, (size_t)B * n * sizeof(float));
        bad = 0;
        for (int b = 0; b < B; b++)
            for (int64_t r = 0; r < n; r++) {
                const float v = r < n0        ? got[b * n0 + r]
                                : r < n0 + n1 ? got[B * n0 + b * n1 + r - n0]
                                              : got[B * (n0 + n1) + b * n2 + r - n0 - n1];
                bad += v != alone[(int64_t)b * n + r];
            }
        CHECK(!bad, "%s B=%d: SPLIT3 differs at %d outputs", tn, B, bad);
    }
    cudaFree(w.q);
    free(wf), free(alone), free(got);
}

static float glu_host(int kind, float g, float u)
{
    if (kind == PI_ACT_SWIGLU)
        return g / (1.0f + expf(-g)) * u;
    if (kind == PI_ACT_REGLU)
        return g > 0.0f ? g * u : 0.0f;
    return (g > 0.0f && u > 0.0f) ? g * u : 0.0f;
}

static void test_glu(uint32_t type, int64_t k, int64_t n, void *dx, void *xq, float *dy, int32_t *didx,
                     int32_t *dcnt)
{
    const char *tn = type == PI_TYPE_F16 ? "f16" : "bf16";
    float *wf = malloc((size_t)(k * n) * sizeof *wf);
    struct cuk_w g = make_w(type, k, n, wf), u = make_w(type, k, n, wf);
    const size_t yb = (size_t)BMAX * n * sizeof(float);
    float *gy = malloc(yb), *uy = malloc(yb), *dense = malloc(yb), *got = malloc(yb);
    CHECK_OK(cuk_gemv(&g, dx, BMAX, dy, CUK_SET, 0.0f, xq, NULL));
    down(gy, dy, yb);
    CHECK_OK(cuk_gemv(&u, dx, BMAX, dy, CUK_SET, 0.0f, xq, NULL));
    down(uy, dy, yb);
    int32_t *idx = malloc((size_t)BMAX * n * sizeof *idx), cnt[BMAX];
    for (int b = 0; b < BMAX; b++) { /* token b's rows: every (b % 4 + 2)-th, token 5 none */
        cnt[b] = 0;
        for (int64_t r = 0; r < n && b != 5; r++)
            if (r % (b % 4 + 2) == b % 3)
                idx[(int64_t)b * n + cnt[b]++] = (int32_t)r;
    }
    up(didx, idx, (size_t)BMAX * n * sizeof *idx);
    up(dcnt, cnt, sizeof cnt);
    for (int kind = PI_ACT_SWIGLU; kind <= PI_ACT_DRELU; kind++) {
        CHECK_OK(cuk_glu(&g, &u, dx, 1, dy, kind, NULL, NULL, n, false, xq, NULL));
        down(got, dy, (size_t)n * sizeof(float));
        for (int i = 0; i < NBATCH; i++) {
            const int B = batches[i];
            CHECK_OK(cuk_glu(&g, &u, dx, B, dy, kind, NULL, NULL, n, false, xq, NULL));
            down(dense, dy, (size_t)B * n * sizeof(float));
            CHECK(!memcmp(dense, got, (size_t)n * sizeof(float)), "%s glu %d: token 0 in a batch of %d != alone",
                  tn, kind, B);
        }
        int bad = 0;
        double worst = 0;
        for (int64_t j = 0; j < BMAX * n; j++) {
            const float h = glu_host(kind, gy[j], uy[j]);
            if (kind == PI_ACT_SWIGLU)
                worst = fmax(worst, fabs((double)dense[j] - h) / (fabs(h) + 1e-3));
            else
                bad += dense[j] != h;
        }
        CHECK(!bad && worst < 1e-6, "%s glu %d: dense differs from gate, up apart (%d outputs, worst %.3g)", tn,
              kind, bad, worst);
        for (int compact = 0; compact <= 1; compact++) {
            if (!compact)
                REQUIRE(cudaMemset(dy, 0xff, yb) == cudaSuccess, "memset"); /* NaN: untouched stays NaN */
            CHECK_OK(cuk_glu(&g, &u, dx, BMAX, dy, kind, didx, dcnt, n, compact, xq, NULL));
            down(got, dy, yb);
            bad = 0;
            for (int b = 0; b < BMAX; b++)
                for (int32_t j = 0; j < cnt[b]; j++) {
                    const int64_t r = idx[(int64_t)b * n + j];
                    const float v = got[(int64_t)b * n + (compact ? j : r)];
                    bad += memcmp(&v, &dense[(int64_t)b * n + r], sizeof v) != 0;
                }
            CHECK(!bad, "%s glu %d: gathered rows (%s) differ from dense at %d outputs", tn, kind,
                  compact ? "compact" : "scattered", bad);
        }
    }
    cudaFree(g.q), cudaFree(u.q);
    free(wf), free(gy), free(uy), free(dense), free(got), free(idx);
}

int main(void)
{
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0)
        SKIP("no CUDA device");
    /* k, n; 520 × 300: more than one block of rows of the tiled prefill kernel (128 or 64 rows) and
     * K ranges of 2 chunks with the last 3 empty */
    static const int64_t shapes[][2] = { { 200, 37 }, { 64, 16 }, { 1032, 100 }, { 4096, 48 }, { 520, 300 } };
    const int64_t KMAX = 4096, NMAX = 300;
    float *x = malloc((size_t)BMAX * KMAX * sizeof *x);
    void *dx = dev((size_t)BMAX * KMAX * sizeof(float)), *xq = dev((size_t)BMAX * cuk_xq_row_bytes(KMAX));
    float *dy = dev((size_t)BMAX * NMAX * sizeof(float));
    uint8_t *dm = dev((size_t)BMAX * NMAX);
    int32_t *didx = dev((size_t)BMAX * NMAX * sizeof(int32_t)), *dcnt = dev(BMAX * sizeof(int32_t));
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t k = shapes[s][0], n = shapes[s][1];
        for (int b = 0; b < BMAX; b++) { /* magnitudes 1e-3 .. 1e3; token 2 all zero, token 3 up to 3e4 */
            const float mag = b == 2 ? 0.0f : b == 3 ? 3e4f : powf(10.0f, (float)(b % 7) - 3.0f);
            for (int64_t i = 0; i < k; i++)
                x[(int64_t)b * k + i] = mag * frand();
        }
        up(dx, x, (size_t)BMAX * k * sizeof(float));
        static const uint32_t types[] = { PI_TYPE_F16, PI_TYPE_BF16 };
        for (int t = 0; t < 2; t++) {
            test_gemv(types[t], k, n, x, dx, xq, dy, dm);
            test_glu(types[t], k, n, dx, xq, dy, didx, dcnt);
        }
    }
    cudaFree(dx), cudaFree(xq), cudaFree(dy), cudaFree(dm), cudaFree(didx), cudaFree(dcnt);
    free(x);
    return tu_finish("test_cuda_mma");
}
#endif
