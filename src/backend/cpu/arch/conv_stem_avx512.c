/* AVX-512 block of the direct convolution for few input channels; see conv_stem_avx512.h. Each
 * (vectors, channels) pair is its own instance, so the loops over both unroll into registers:
 * 24 accumulators, four pixel vectors and a broadcast. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math", "fp-contract=fast")
#endif

#include "backend/cpu/arch/conv_stem_avx512.h"

#include "backend/cpu/math/gemm.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include "backend/cpu/arch/act_avx512.h"

#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f")))

AVX512 static inline __attribute__((always_inline)) void block(const int V, const int C,
                                                               const kn_conv_stem_block *b) {
    __m512 acc[KN_CONV_STEM_COUT][4];
#pragma GCC unroll 6
    for (int c = 0; c < C; c++)
#pragma GCC unroll 4
        for (int v = 0; v < V; v++)
            acc[c][v] = _mm512_setzero_ps();
    for (int64_t t = 0; t < b->taps; t++) {
        const float *x = b->x + b->off[t];
        __m512 xv[4];
#pragma GCC unroll 4
        for (int v = 0; v < V; v++)
            xv[v] = _mm512_loadu_ps(x + 16 * v);
#pragma GCC unroll 6
        for (int c = 0; c < C; c++) {
            __m512 wv = _mm512_set1_ps(b->w[c * b->taps + t]);
#pragma GCC unroll 4
            for (int v = 0; v < V; v++)
                acc[c][v] = _mm512_fmadd_ps(wv, xv[v], acc[c][v]);
        }
    }
    for (int c = 0; c < C; c++) {
        __m512 bias = _mm512_set1_ps(b->bias != NULL ? b->bias[c] : 0.0f);
        for (int v = 0; v < V; v++) {
            int left = b->pixels - 16 * v;
            __mmask16 m = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
            int64_t at = c * b->ld + 16 * v;
            __m512 r = _mm512_add_ps(acc[c][v], bias);
            if (b->res != NULL)
                r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(m, b->res + at));
            r = kn_act_in_regs512(b->act, r, b->lo, b->hi);
            _mm512_mask_storeu_ps(b->y + at, m, r);
        }
    }
}

#define CHANNELS(V)                                                                                \
    switch (b->cout) {                                                                             \
    case 1:                                                                                        \
        block(V, 1, b);                                                                            \
        break;                                                                                     \
    case 2:                                                                                        \
        block(V, 2, b);                                                                            \
        break;                                                                                     \
    case 3:                                                                                        \
        block(V, 3, b);                                                                            \
        break;                                                                                     \
    case 4:                                                                                        \
        block(V, 4, b);                                                                            \
        break;                                                                                     \
    case 5:                                                                                        \
        block(V, 5, b);                                                                            \
        break;                                                                                     \
    default:                                                                                       \
        block(V, 6, b);                                                                            \
        break;                                                                                     \
    }

AVX512 void kn_cpu_conv_stem_block_avx512(const kn_conv_stem_block *b) {
    switch ((b->pixels + 15) / 16) {
    case 1:
        CHANNELS(1)
        break;
    case 2:
        CHANNELS(2)
        break;
    case 3:
        CHANNELS(3)
        break;
    default:
        CHANNELS(4)
        break;
    }
}

/* Lanes l with 0 <= at + l < w: the part of 16 floats from column `at` inside the row. */
static inline __mmask16 inside(int64_t at, int64_t w) {
    int64_t lo = at < 0 ? -at : 0, hi = w - at < 16 ? w - at : 16;
    if (hi <= lo)
        return 0;
    return (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}

/* Pixels px .. px + 15 of the row (those before b->pixels stored) x C channels (of which the
 * first b->cout are stored), for a kernel KW wide. */
AVX512 static inline __attribute__((always_inline)) void
block_s2(const int C, const int KW, const kn_conv_stem_s2_block *b, int64_t px) {
    const __m512i even =
        _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    const int G = KN_CONV_STEM_S2_COUT, pairs = (KW + 1) / 2;
    /* the masks of column pair p's two loads: 32 columns from ix + 2 px + 2 p */
    __mmask16 mk[(KN_CONV_STEM_S2_MAX_K + 1) / 2][2];
#pragma GCC unroll 4
    for (int p = 0; p < pairs; p++) {
        int64_t at = b->ix + 2 * px + 2 * p;
        mk[p][0] = inside(at, b->w);
        mk[p][1] = inside(at + 16, b->w);
    }
    /* Every loop over acc is unrolled whole: an index left to run time keeps it in memory. */
    __m512 acc[KN_CONV_STEM_S2_COUT];
#pragma GCC unroll 16
    for (int c = 0; c < C; c++)
        acc[c] = _mm512_setzero_ps();
    for (int64_t ci = 0; ci < b->cin; ci++)
        for (int64_t ky = 0; ky < b->kh; ky++) {
            int64_t iy = b->iy + ky;
            if (iy < 0 || iy >= b->h)
                continue; /* padding rows add nothing */
            const float *row = b->x + (ci * b->h + iy) * b->w + b->ix + 2 * px;
            const float *wt = b->wt + (ci * b->kh + ky) * KW * G; /* G weights a tap */
#pragma GCC unroll 4
            for (int p = 0; p < pairs; p++) {
                __m512 lo = _mm512_maskz_loadu_ps(mk[p][0], row + 2 * p);
                __m512 hi = _mm512_maskz_loadu_ps(mk[p][1], row + 2 * p + 16);
                __m512 e = _mm512_permutex2var_ps(lo, even, hi);
#pragma GCC unroll 16
                for (int c = 0; c < C; c++)
                    acc[c] = _mm512_fmadd_ps(_mm512_set1_ps(wt[2 * p * G + c]), e, acc[c]);
                if (2 * p + 1 < KW) {
                    __m512 o = _mm512_permutex2var_ps(lo, odd, hi);
#pragma GCC unroll 16
                    for (int c = 0; c < C; c++)
                        acc[c] =
                            _mm512_fmadd_ps(_mm512_set1_ps(wt[(2 * p + 1) * G + c]), o, acc[c]);
                }
            }
        }
    int64_t left = b->pixels - px;
    __mmask16 m = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
#pragma GCC unroll 16
    for (int c = 0; c < C; c++) {
        if (c >= b->cout)
            break;
        int64_t at = c * b->ld + px;
        __m512 r = _mm512_add_ps(acc[c], _mm512_set1_ps(b->bias != NULL ? b->bias[c] : 0.0f));
        if (b->res != NULL)
            r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(m, b->res + at));
        r = kn_act_in_regs512(b->act, r, b->lo, b->hi);
        _mm512_mask_storeu_ps(b->y + at, m, r);
    }
}

AVX512 static inline __attribute__((always_inline)) void row_s2(const int C, const int KW,
                                                                const kn_conv_stem_s2_block *b) {
    for (int64_t px = 0; px < b->pixels; px += 16)
        block_s2(C, KW, b, px);
}

/* Groups of up to 8 channels compute 8, others 16 (the packed weights past cout are zeros). */
#define S2_WIDTH(KW)                                                                               \
    if (b->cout <= 8)                                                                              \
        row_s2(8, KW, b);                                                                          \
    else                                                                                           \
        row_s2(16, KW, b);

AVX512 void kn_cpu_conv_stem_s2_row_avx512(const kn_conv_stem_s2_block *b) {
    switch (b->kw) {
    case 1:
        S2_WIDTH(1)
        break;
    case 2:
        S2_WIDTH(2)
        break;
    case 3:
        S2_WIDTH(3)
        break;
    case 4:
        S2_WIDTH(4)
        break;
    case 5:
        S2_WIDTH(5)
        break;
    case 6:
        S2_WIDTH(6)
        break;
    default:
        S2_WIDTH(7)
        break;
    }
}

#else

void kn_cpu_conv_stem_block_avx512(const kn_conv_stem_block *b) {
    (void)b;
}

void kn_cpu_conv_stem_s2_row_avx512(const kn_conv_stem_s2_block *b) {
    (void)b;
}

#endif
