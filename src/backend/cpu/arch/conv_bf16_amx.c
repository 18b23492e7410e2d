/* AMX-BF16 block of the bf16 convolution (see conv_bf16_amx.h): up to 2 x 2 C tiles (a 32 x 32
 * fp32 block) held in tmm0-3 over the whole of K, two A tiles in tmm4-5 and two B tiles in
 * tmm6-7, each K block loading four tiles for four tdpbf16ps. The tile configuration is
 * arch/amx.c's (every tile 16 rows of 64 bytes). */
#include "backend/cpu/arch/conv_bf16_amx.h"

#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
#include <immintrin.h>
#include <math.h>
#include <stddef.h>

#define AMX __attribute__((target("amx-tile,amx-bf16")))
#define B_STRIDE 128 /* bytes between a B tile's rows (a panel's pair row) */
#define C_STRIDE (32 * sizeof(float))

/* rt and ct are constants in each caller, so the unused tiles' instructions drop out. */
AMX static inline __attribute__((always_inline)) void block(int rt, int ct, const uint16_t *a,
                                                            int64_t pixel_bytes,
                                                            const int64_t *aoff, const uint32_t *b,
                                                            int64_t kblocks, float *c) {
    size_t sa = (size_t)pixel_bytes;
    const char *a1 = (const char *)a + 16 * sa;
    _tile_zero(0);
    if (ct > 1)
        _tile_zero(1);
    if (rt > 1)
        _tile_zero(2);
    if (rt > 1 && ct > 1)
        _tile_zero(3);
    for (int64_t kb = 0; kb < kblocks; kb++) {
        const uint32_t *bk = b + kb * KN_CONV_BF16_KBLOCK_WORDS;
        _tile_loadd(6, bk, B_STRIDE);
        if (ct > 1)
            _tile_loadd(7, bk + 16, B_STRIDE);
        _tile_loadd(4, a + aoff[kb], sa);
        _tile_dpbf16ps(0, 4, 6);
        if (ct > 1)
            _tile_dpbf16ps(1, 4, 7);
        if (rt > 1) {
            _tile_loadd(5, a1 + aoff[kb] * (int64_t)sizeof *a, sa);
            _tile_dpbf16ps(2, 5, 6);
            if (ct > 1)
                _tile_dpbf16ps(3, 5, 7);
        }
    }
    _tile_stored(0, c, C_STRIDE);
    if (ct > 1)
        _tile_stored(1, c + 16, C_STRIDE);
    if (rt > 1)
        _tile_stored(2, c + 16 * 32, C_STRIDE);
    if (rt > 1 && ct > 1)
        _tile_stored(3, c + 16 * 32 + 16, C_STRIDE);
}

AMX void kn_conv_bf16_amx_block(int rt, int ct, const uint16_t *a, int64_t pixel_bytes,
                                const int64_t *aoff, const uint32_t *b, int64_t kblocks, float *c) {
    if (rt > 1 && ct > 1)
        block(2, 2, a, pixel_bytes, aoff, b, kblocks, c);
    else if (rt > 1)
        block(2, 1, a, pixel_bytes, aoff, b, kblocks, c);
    else if (ct > 1)
        block(1, 2, a, pixel_bytes, aoff, b, kblocks, c);
    else
        block(1, 1, a, pixel_bytes, aoff, b, kblocks, c);
}

/* The AMX path runs only where kn_bf16_native(), so AVX512-BF16 is there: vcvtne2ps2bf16 rounds
 * 32 results to nearest even in one instruction (denormals flushed to zero, unlike
 * kn_float_to_bf16; NaN kept quiet). */
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

AVX512 static inline __m512 widen_bf16(__mmask16 m, const uint16_t *p) {
    __m256i h = _mm256_maskz_loadu_epi16(m, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

AVX512 void kn_conv_bf16_rows_avx512(const kn_conv_bf16_rows *r) {
    __mmask16 m0 = r->nr >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << r->nr) - 1);
    __mmask16 m1 = r->nr >= 32   ? (__mmask16)0xFFFF
                   : r->nr <= 16 ? (__mmask16)0
                                 : (__mmask16)((1u << (r->nr - 16)) - 1);
    __m512 b0 = _mm512_loadu_ps(r->bias), b1 = _mm512_loadu_ps(r->bias + 16);
    __mmask32 m = (__mmask32)m0 | (__mmask32)m1 << 16;
    __m512 lo = _mm512_set1_ps(r->lo), hi = _mm512_set1_ps(r->hi);
    bool clamp = r->lo != -INFINITY || r->hi != INFINITY;
    for (int i = 0; i < r->n; i++) {
        float *cr = r->c + r->row[i] * 32;
        __m512 x0 = _mm512_loadu_ps(cr), x1 = _mm512_loadu_ps(cr + 16);
        if (r->add) {
            x0 = _mm512_add_ps(x0, b0);
            x1 = _mm512_add_ps(x1, b1);
            if (r->z != NULL) {
                const uint16_t *z = r->z + r->zoff[i];
                x0 = _mm512_add_ps(x0, widen_bf16(m0, z));
                x1 = _mm512_add_ps(x1, widen_bf16(m1, z + 16));
            }
            if (clamp) {
                x0 = _mm512_min_ps(_mm512_max_ps(x0, lo), hi);
                x1 = _mm512_min_ps(_mm512_max_ps(x1, lo), hi);
            }
        }
        if (!r->store) {
            _mm512_storeu_ps(cr, x0);
            _mm512_storeu_ps(cr + 16, x1);
            continue;
        }
        __m512i h = (__m512i)_mm512_cvtne2ps_pbh(x1, x0);
        _mm512_mask_storeu_epi16(r->y + r->yoff[i], m, h);
    }
}

#else

void kn_conv_bf16_rows_avx512(const kn_conv_bf16_rows *r) {
    (void)r;
}

void kn_conv_bf16_amx_block(int rt, int ct, const uint16_t *a, int64_t pixel_bytes,
                            const int64_t *aoff, const uint32_t *b, int64_t kblocks, float *c) {
    (void)rt, (void)ct, (void)a, (void)pixel_bytes, (void)aoff, (void)b, (void)kblocks, (void)c;
}

#endif
