/* test_cuk_traits — the CUDA backend's weight encodings (gpud/cuda/cuk_traits.cuh) on the host, so
 * that they are checked without a GPU: the traits' device functions compiled as plain C++ over
 * host stand-ins of the few CUDA intrinsics they use (dp4a, vsub4, byte_perm, ldg, f16). For each
 * of the 10 repacked types and random rows: repack of the CPU's own GGUF blocks, then per lane block
 * deqs() equals the CPU's to_float bit for bit, dot() against a Q8-quantized activation equals the
 * f64 dot of the dequantized row within 1e-5 relative, and axpy() equals a · to_float within 1e-6.
 * Exit 0 pass, 1 fail. */
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <vector>
#define __device__
#define __host__
#define __forceinline__ inline
struct uint4 { unsigned x, y, z, w; };
struct uint2 { unsigned x, y; };
struct float2 { float x, y; };
static float2 make_float2(float a, float b) { return {a, b}; }
extern "C" {
#include "quant.h"
}
struct __half { unsigned short b; };
static inline float __half2float(__half h) { return pi_f16_to_f32(h.b); }
static inline __half __ushort_as_half(unsigned short b) { return __half{b}; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
template <class P> static inline P __ldg(const P *p) { P v; memcpy(&v, p, sizeof v); return v; }
static inline int __dp4a(int a, int b, int c)
{
    for (int k = 0; k < 4; k++) c += (int)(int8_t)(a >> (8 * k)) * (int)(int8_t)(b >> (8 * k));
    return c;
}
static inline unsigned __vsub4(unsigned a, unsigned b)
{
    unsigned r = 0;
    for (int k = 0; k < 4; k++) r |= (unsigned)(uint8_t)((a >> (8 * k)) - (b >> (8 * k))) << (8 * k);
    return r;
}
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s)
{
    uint8_t in[8];
    for (int k = 0; k < 4; k++) in[k] = x >> (8 * k), in[4 + k] = y >> (8 * k);
    unsigned r = 0;
    for (int n = 0; n < 4; n++) r |= (unsigned)in[(s >> (4 * n)) & 7] << (8 * n);
    return r;
}
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
#define CUK_TRAITS_EMU
#include "cuk_traits.cuh"

static uint64_t rs = 88172645463325252ull;
static float frand() { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (float)((rs >> 11) * (1.0 / 9007199254740992.0)) * 2 - 1; }

template <class T> static int check(uint32_t type, const char *name)
{
    const int64_t n_in = 1024, rows = 3, nb = n_in / 32;
    const pi_type_traits *tt = quant_traits(type);
    std::vector<float> w(n_in * rows), ref(n_in * rows), x(n_in);
    for (auto &v : w) v = frand() * (1 + 3 * frand() * frand());
    for (auto &v : x) v = frand();
    const size_t rb = quant_row_size(type, n_in);
    std::vector<uint8_t> raw(rb * rows), q(nb * 16 * rows), sd(T::sbytes(nb) * rows + 16);
    for (int r = 0; r < rows; r++) {
        tt->from_float(&w[r * n_in], &raw[r * rb], n_in);
        tt->to_float(&raw[r * rb], &ref[r * n_in], n_in);
    }
    const int64_t ng = n_in / T::GQ;
    for (int64_t i = 0; i < ng * rows; i++) {
        const int64_t r = i / ng;
        T::repack(&raw[i * T::GB], &q[r * nb * 16], &sd[r * T::sbytes(nb)], nb, i % ng);
    }
    // activation q8 as k_quant_x
    std::vector<int8_t> xq(n_in);
    std::vector<float2> xd(nb);
    for (int64_t b = 0; b < nb; b++) {
        float amax = 0;
        for (int l = 0; l < 32; l++) amax = fmaxf(amax, fabsf(x[b * 32 + l]));
        const float dd = amax / 127.0f, id = dd > 0 ? 1.0f / dd : 0;
        int sum = 0;
        for (int l = 0; l < 32; l++) { xq[b * 32 + l] = (int8_t)lrintf(x[b * 32 + l] * id); sum += xq[b * 32 + l]; }
        const float dh = pi_f16_to_f32(pi_f32_to_f16(dd));
        xd[b] = make_float2(dh, dh * (float)sum);
    }
    int bad = 0;
    double maxrel = 0;
    for (int r = 0; r < rows; r++) {
        const uint8_t *qr = &q[r * nb * 16], *sr = &sd[r * T::sbytes(nb)];
        double dref = 0, mag = 0;
        float acc = 0, ax[32 * 64] = {0};
        for (int64_t b = 0; b < nb; b++) {
            uint4 qq;
            memcpy(&qq, qr + 16 * b, 16);
            typename T::S s;
            T::side(sr, nb, b, s);
            float o[32];
            T::deqs(&qq, s, o);
            for (int e = 0; e < 32; e++)
                if (o[e] != ref[r * n_in + b * 32 + e]) {
                    if (bad++ < 5) printf("%s: row %d elem %lld: gpu %.9g cpu %.9g\n", name, r, (long long)(b * 32 + e), o[e], ref[r * n_in + b * 32 + e]);
                }
            uint4 xv[2];
            memcpy(xv, &xq[b * 32], 32);
            acc = T::dot(&qq, s, xv, xd[b], acc);
            for (int e = 0; e < 32; e++) {
                dref += (double)ref[r * n_in + b * 32 + e] * xq[b * 32 + e] * xd[b].x;
                mag += fabs((double)ref[r * n_in + b * 32 + e] * xq[b * 32 + e] * xd[b].x);
            }
            if (b < 64) T::axpy(&qq, s, 0.5f, ax + 32 * b);
        }
        const double rel = fabs(acc - dref) / mag;
        if (rel > maxrel) maxrel = rel;
        if (rel > 1e-5) { bad++; printf("%s: row %d dot %.9g ref %.9g rel %.3g\n", name, r, acc, dref, rel); }
        for (int e = 0; e < 32 * (nb < 64 ? nb : 64); e++)
            if (fabsf(ax[e] - 0.5f * ref[r * n_in + e]) > 1e-6f * fabsf(ref[r * n_in + e]) + 1e-30f) {
                if (bad++ < 5) printf("%s: axpy elem %d %g vs %g\n", name, e, ax[e], 0.5f * ref[r * n_in + e]);
            }
    }
    printf("%-7s %s (dot rel err %.2g, side %lld bytes/row)\n", name, bad ? "FAIL" : "ok", maxrel, (long long)T::sbytes(nb));
    return bad != 0;
}

int main()
{
    quant_init();
    int f = 0;

    f += check<TQ4_1>(PI_TYPE_Q4_1, "q4_1");
    f += check<TQ5_0>(PI_TYPE_Q5_0, "q5_0");
    f += check<TQ5_1>(PI_TYPE_Q5_1, "q5_1");
    f += check<TIQ4_NL>(PI_TYPE_IQ4_NL, "iq4_nl");
    f += check<TQ2_K>(PI_TYPE_Q2_K, "q2_K");
    f += check<TQ3_K>(PI_TYPE_Q3_K, "q3_K");
    f += check<TQ4_K>(PI_TYPE_Q4_K, "q4_K");
    f += check<TQ5_K>(PI_TYPE_Q5_K, "q5_K");
    f += check<TQ6_K>(PI_TYPE_Q6_K, "q6_K");
    f += check<TIQ4_XS>(PI_TYPE_IQ4_XS, "iq4_xs");
    printf("cuk_traits: %s\n", f ? "FAILED" : "all types ok");
    return f != 0;
}
