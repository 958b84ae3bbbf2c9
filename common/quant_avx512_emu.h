/* quant_avx512_emu.h — only for the emulated build of quant_avx512.c (PI_AVX512_EMULATE): SIMDe's
 * portable AVX-512 intrinsics, plus element-wise versions of the few that SIMDe 0.7 lacks. They
 * compute what Intel's pseudocode says lane by lane, so the kernels' logic (layouts, lane orders,
 * masks, offsets) can be checked against the scalar reference on a CPU without AVX-512. The native
 * build never includes this file. */
#ifndef PI_QUANT_AVX512_EMU_H
#define PI_QUANT_AVX512_EMU_H

#define SIMDE_ENABLE_NATIVE_ALIASES
#include <immintrin.h>
#include <simde/x86/avx512.h>
#include <stdint.h>
#include <string.h>

#pragma GCC diagnostic ignored "-Wshadow"

#define EMU_I32(v, a) int32_t a[16]; simde_mm512_storeu_si512((void *)a, v)
#define EMU_F32(v, a) float a[16]; simde_mm512_storeu_ps(a, v)

static inline simde__m512 emu_cvtepi32_ps(simde__m512i v)
{
    EMU_I32(v, a);
    float f[16];
    for (int i = 0; i < 16; i++)
        f[i] = (float)a[i];
    return simde_mm512_loadu_ps(f);
}

static inline simde__m512 emu_cvtph_ps(simde__m256i h)
{
    uint16_t u[16];
    simde_mm256_storeu_si256((void *)u, h);
    float f[16];
    for (int i = 0; i < 16; i++)
        f[i] = _cvtsh_ss(u[i]);
    return simde_mm512_loadu_ps(f);
}

static inline simde__m256i emu_cvtps_ph(simde__m512 v, int rounding)
{
    EMU_F32(v, f);
    uint16_t u[16];
    for (int i = 0; i < 16; i++)
        u[i] = (uint16_t)_cvtss_sh(f[i], 0 /* round to nearest even; only this mode is used */);
    (void)rounding;
    return simde_mm256_loadu_si256((const void *)u);
}

static inline simde__m512 emu_maskz_loadu_ps(uint16_t m, const void *p)
{
    float f[16] = { 0 };
    for (int i = 0; i < 16; i++)
        if (m >> i & 1)
            memcpy(&f[i], (const float *)p + i, sizeof f[i]);
    return simde_mm512_loadu_ps(f);
}

static inline void emu_mask_storeu_ps(void *p, uint16_t m, simde__m512 v)
{
    EMU_F32(v, f);
    for (int i = 0; i < 16; i++)
        if (m >> i & 1)
            memcpy((float *)p + i, &f[i], sizeof f[i]);
}

static inline simde__m256i emu_maskz_loadu_epi16(uint16_t m, const void *p)
{
    uint16_t u[16] = { 0 };
    for (int i = 0; i < 16; i++)
        if (m >> i & 1)
            memcpy(&u[i], (const uint16_t *)p + i, sizeof u[i]);
    return simde_mm256_loadu_si256((const void *)u);
}

static inline void emu_mask_storeu_epi16(void *p, uint16_t m, simde__m256i v)
{
    uint16_t u[16];
    simde_mm256_storeu_si256((void *)u, v);
    for (int i = 0; i < 16; i++)
        if (m >> i & 1)
            memcpy((uint16_t *)p + i, &u[i], sizeof u[i]);
}

static inline simde__m512i emu_cvtepu16_epi32(simde__m256i v)
{
    uint16_t u[16];
    simde_mm256_storeu_si256((void *)u, v);
    int32_t a[16];
    for (int i = 0; i < 16; i++)
        a[i] = u[i];
    return simde_mm512_loadu_si512((const void *)a);
}

static inline simde__m512i emu_cvtepi8_epi32(simde__m128i v)
{
    int8_t b[16];
    simde_mm_storeu_si128((void *)b, v);
    int32_t a[16];
    for (int i = 0; i < 16; i++)
        a[i] = b[i];
    return simde_mm512_loadu_si512((const void *)a);
}

static inline simde__m512i emu_cvtepu8_epi32(simde__m128i v)
{
    uint8_t b[16];
    simde_mm_storeu_si128((void *)b, v);
    int32_t a[16];
    for (int i = 0; i < 16; i++)
        a[i] = b[i];
    return simde_mm512_loadu_si512((const void *)a);
}

#undef _mm512_cvtepi32_ps
#undef _mm512_cvtph_ps
#undef _mm512_cvtps_ph
#undef _mm512_maskz_loadu_ps
#undef _mm512_mask_storeu_ps
#undef _mm256_maskz_loadu_epi16
#undef _mm256_mask_storeu_epi16
#undef _mm512_cvtepu16_epi32
#undef _mm512_cvtepi8_epi32
#undef _mm512_cvtepu8_epi32
#undef _mm512_shuffle_i64x2
#define _mm512_shuffle_i64x2(a, b, imm) simde_mm512_shuffle_i64x2(a, b, imm)
#define _mm512_cvtepi32_ps(v) emu_cvtepi32_ps(v)
#define _mm512_cvtph_ps(h) emu_cvtph_ps(h)
#define _mm512_cvtps_ph(v, r) emu_cvtps_ph(v, r)
#define _mm512_maskz_loadu_ps(m, p) emu_maskz_loadu_ps(m, p)
#define _mm512_mask_storeu_ps(p, m, v) emu_mask_storeu_ps(p, m, v)
#define _mm256_maskz_loadu_epi16(m, p) emu_maskz_loadu_epi16(m, p)
#define _mm256_mask_storeu_epi16(p, m, v) emu_mask_storeu_epi16(p, m, v)
#define _mm512_cvtepu16_epi32(v) emu_cvtepu16_epi32(v)
#define _mm512_cvtepi8_epi32(v) emu_cvtepi8_epi32(v)
#define _mm512_cvtepu8_epi32(v) emu_cvtepu8_epi32(v)

#endif
