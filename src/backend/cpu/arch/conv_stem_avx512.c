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

#else

void kn_cpu_conv_stem_block_avx512(const kn_conv_stem_block *b) {
    (void)b;
}

#endif
