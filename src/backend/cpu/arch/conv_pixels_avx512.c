/* AVX-512 tile of the fp32 pixel-row convolution; see conv_pixels_avx512.h. 28 accumulators (14
 * pixels x two vectors of output channels), the panel's two vectors and a broadcast make 31 of
 * the 32 registers; each rows count is its own instance, so the loops over rows unroll. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math", "fp-contract=fast")
#endif

#include "backend/cpu/arch/conv_pixels_avx512.h"

#include "backend/cpu/math/gemm.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include "backend/cpu/arch/act_avx512.h"

#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f")))
#define R_MAX KN_CONV_PIXELS_ROWS
/* Prefetch distances, in K steps: the weights 96 steps (12 KB) ahead, so that a panel's first
 * tile does not wait on memory for each step's two lines (its weights are cold in a model:
 * 0.70 -> 0.45 ms for a 2048 -> 512 1x1 conv at 7x7, one thread); and, in channel planes (block
 * 1), the pixels' line or two 8 channels ahead, which the hardware's prefetchers follow poorly
 * at a plane's stride. docs/perf-notes.md, "Pixel-row 1x1 convs read X in place". */
#define PF_B 96
#define PF_PLANES 8

/* 16 rows of 16 lanes into 16 columns: out[j] lane i = in[i] lane j. */
AVX512 static inline __attribute__((always_inline)) void transpose16(__m512 r[16]) {
    __m512 t[16], s[16];
    for (int p = 0; p < 8; p++) {
        t[2 * p] = _mm512_unpacklo_ps(r[2 * p], r[2 * p + 1]);
        t[2 * p + 1] = _mm512_unpackhi_ps(r[2 * p], r[2 * p + 1]);
    }
    /* s[4q + m], 128-bit lane L: rows 4q .. 4q + 3 of column 4L + m */
    for (int q = 0; q < 4; q++) {
        s[4 * q] = _mm512_shuffle_ps(t[4 * q], t[4 * q + 2], _MM_SHUFFLE(1, 0, 1, 0));
        s[4 * q + 1] = _mm512_shuffle_ps(t[4 * q], t[4 * q + 2], _MM_SHUFFLE(3, 2, 3, 2));
        s[4 * q + 2] = _mm512_shuffle_ps(t[4 * q + 1], t[4 * q + 3], _MM_SHUFFLE(1, 0, 1, 0));
        s[4 * q + 3] = _mm512_shuffle_ps(t[4 * q + 1], t[4 * q + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int m = 0; m < 4; m++) {
        __m512 v0 = _mm512_shuffle_f32x4(s[m], s[4 + m], 0x44);
        __m512 v1 = _mm512_shuffle_f32x4(s[8 + m], s[12 + m], 0x44);
        __m512 w0 = _mm512_shuffle_f32x4(s[m], s[4 + m], 0xEE);
        __m512 w1 = _mm512_shuffle_f32x4(s[8 + m], s[12 + m], 0xEE);
        r[m] = _mm512_shuffle_f32x4(v0, v1, 0x88);
        r[4 + m] = _mm512_shuffle_f32x4(v0, v1, 0xDD);
        r[8 + m] = _mm512_shuffle_f32x4(w0, w1, 0x88);
        r[12 + m] = _mm512_shuffle_f32x4(w0, w1, 0xDD);
    }
}

/* Half h of the tile (channels 16 h ..) from its rows to the output, epilogue included. */
AVX512 static inline __attribute__((always_inline)) void store_half(const kn_conv_pixels_tile *t,
                                                                    __m512 r[16], int h) {
    transpose16(r);
    __mmask16 m = t->valid;
    bool prefix = (m & (m + 1)) == 0;
    int n = t->nr - 16 * h;
    n = n > 16 ? 16 : n;
    for (int j = 0; j < n; j++) {
        int64_t at = (int64_t)(16 * h + j) * t->ld;
        __m512 v = r[j];
        if (t->res != NULL)
            v = _mm512_add_ps(v, prefix ? _mm512_maskz_loadu_ps(m, t->res + at)
                                        : _mm512_maskz_expandloadu_ps(m, t->res + at));
        v = kn_act_in_regs512(t->act, v, t->lo, t->hi);
        if (prefix)
            _mm512_mask_storeu_ps(t->y + at, m, v);
        else
            _mm512_mask_compressstoreu_ps(t->y + at, m, v);
    }
}

/* K over the channel blocks, in each the taps, in each the block's CB channels (CB 1: planes of
 * one channel; CB 16: pixels of 16 channels, a cache line each). */
AVX512 static inline __attribute__((always_inline)) void
products(const int R, const int CB, const kn_conv_pixels_tile *t, __m512 *c0, __m512 *c1) {
    const float *b = t->b;
    const float *ac = t->a;
    for (int64_t cb = 0; cb < t->blocks; cb++, ac += t->bs) {
        for (int64_t tap = 0; tap < t->taps; tap++) {
            const float *a = ac + t->off[tap];
            if (CB == 1) {
                const char *f = (const char *)(a + PF_PLANES * t->bs);
                _mm_prefetch(f, _MM_HINT_T0);
                _mm_prefetch(f + (R - 1) * (int)sizeof(float), _MM_HINT_T0);
            }
            for (int l = 0; l < CB; l++, b += 32) {
                _mm_prefetch((const char *)(b + 32 * PF_B), _MM_HINT_T0);
                _mm_prefetch((const char *)(b + 32 * PF_B + 16), _MM_HINT_T0);
                __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 14
                for (int r = 0; r < R; r++) {
                    __m512 x = _mm512_set1_ps(a[l + r * CB]);
                    c0[r] = _mm512_fmadd_ps(x, b0, c0[r]);
                    c1[r] = _mm512_fmadd_ps(x, b1, c1[r]);
                }
            }
        }
    }
}

AVX512 static inline __attribute__((always_inline)) void tile(const int R,
                                                              const kn_conv_pixels_tile *t) {
    __m512 c0[R_MAX], c1[R_MAX];
#pragma GCC unroll 14
    for (int r = 0; r < R; r++) {
        c0[r] = t->sum_in != NULL ? _mm512_loadu_ps(t->sum_in + 32 * r) : _mm512_setzero_ps();
        c1[r] = t->sum_in != NULL ? _mm512_loadu_ps(t->sum_in + 32 * r + 16) : _mm512_setzero_ps();
    }
    if (t->block == 16)
        products(R, 16, t, c0, c1);
    else
        products(R, 1, t, c0, c1);
    if (t->sum_out != NULL) {
#pragma GCC unroll 14
        for (int r = 0; r < R; r++) {
            _mm512_storeu_ps(t->sum_out + 32 * r, c0[r]);
            _mm512_storeu_ps(t->sum_out + 32 * r + 16, c1[r]);
        }
        return;
    }
    __m512 bias0 = _mm512_setzero_ps(), bias1 = bias0;
    if (t->bias != NULL) {
        bias0 = _mm512_loadu_ps(t->bias);
        bias1 = _mm512_loadu_ps(t->bias + 16);
    }
    __m512 rows[16];
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++)
        rows[r] = r < R ? _mm512_add_ps(c0[r], bias0) : _mm512_setzero_ps();
    store_half(t, rows, 0);
    if (t->nr > 16) {
#pragma GCC unroll 16
        for (int r = 0; r < 16; r++)
            rows[r] = r < R ? _mm512_add_ps(c1[r], bias1) : _mm512_setzero_ps();
        store_half(t, rows, 1);
    }
}

AVX512 void kn_cpu_conv_pixels_tile_avx512(const kn_conv_pixels_tile *t) {
    switch (t->rows) {
#define ROWS(n)                                                                                    \
    case n:                                                                                        \
        tile(n, t);                                                                                \
        break;
        ROWS(1)
        ROWS(2)
        ROWS(3)
        ROWS(4)
        ROWS(5)
        ROWS(6)
        ROWS(7)
        ROWS(8)
        ROWS(9)
        ROWS(10)
        ROWS(11)
        ROWS(12)
        ROWS(13)
        ROWS(14)
#undef ROWS
    default:
        break;
    }
}

AVX512 void kn_cpu_conv_pixels_interleave_avx512(const float *src, int64_t stride, int n,
                                                 int64_t len, float *dst) {
    for (int64_t p = 0; p < len; p += 16) {
        int64_t left = len - p < 16 ? len - p : 16;
        __mmask16 m = (__mmask16)((1u << left) - 1);
        __m512 r[16];
        for (int l = 0; l < 16; l++)
            r[l] = l < n ? _mm512_maskz_loadu_ps(m, src + l * stride + p) : _mm512_setzero_ps();
        transpose16(r);
        for (int64_t j = 0; j < left; j++)
            _mm512_storeu_ps(dst + (p + j) * 16, r[j]);
    }
}

#else

void kn_cpu_conv_pixels_tile_avx512(const kn_conv_pixels_tile *t) {
    (void)t;
}

void kn_cpu_conv_pixels_interleave_avx512(const float *src, int64_t stride, int n, int64_t len,
                                          float *dst) {
    (void)src, (void)stride, (void)n, (void)len, (void)dst;
}

#endif
