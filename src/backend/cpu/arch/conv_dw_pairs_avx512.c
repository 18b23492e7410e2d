/* AVX-512 3x3 and 5x5 depthwise, stride 1, "same" padding, on planes of at most 8 x 8
 * (kn_cpu_dw_pairs_avx512): two output rows a vector, row r in lanes 0-7 and row r + 1 in
 * lanes 8-15, so a 7x7 plane fills 14 of 16 lanes where one row a vector filled 7. For channel
 * blocks (transposes in and out of NCHW) such planes cost more than the arithmetic.
 * - The plane is contiguous, so the two input rows a vector needs, with the columns either side,
 *   are one 32-float window of the flattened plane (zero outside it): two loads, masked at the
 *   plane's ends.
 * - Each tap is one vpermt2ps of the window with a zeroing mask (columns outside the plane,
 *   rows outside it, unused lanes); the window of input rows (ir, ir + 1) feeds every output
 *   row pair that reads it, so a plane is one pass over its windows.
 * - The epilogue runs on the two rows packed together (one permute), before one masked store. */
#include "backend/cpu/nn/conv.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include "backend/cpu/arch/act_avx512.h"

#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f")))
#define INLINE __attribute__((always_inline)) static inline

#define PAIRS 4 /* output row pairs: planes of up to 8 rows */
#define CHAINS 3

AVX512 INLINE __mmask16 lanes(int64_t n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

/* 16 floats from element s of the flattened plane (n floats), zero outside it. Before the
 * plane, the load starts at its first element and the lanes move up by a permute, so no address
 * outside the plane is formed (an expand-load did the same but cost more than the plane). */
AVX512 INLINE __m512 part(const float *x, int64_t n, int64_t s) {
    if (s >= 0)
        return s < n ? _mm512_maskz_loadu_ps(lanes(n - s), x + s) : _mm512_setzero_ps();
    int64_t a = -s;
    if (a >= 16)
        return _mm512_setzero_ps();
    __m512 v = _mm512_maskz_loadu_ps(lanes(16 - a < n ? 16 - a : n), x);
    __m512i from =
        _mm512_sub_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                         _mm512_set1_epi32((int)a));
    return _mm512_maskz_permutexvar_ps((__mmask16)~lanes(a), from, v);
}

AVX512 INLINE void pairs(const kn_dwd *d, const int K) {
    const int P = K / 2;
    int64_t w = d->w, h = d->h, n = h * w;
    __m512 wv[25];
    for (int t = 0; t < K * K; t++)
        wv[t] = _mm512_set1_ps(d->wt[t]);
    /* Tap kx of lane i (row half i / 8, column c = i % 8) is window element (i / 8) w + c + kx,
     * kept where c is an output column and c + kx - P a column of the plane. */
    __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    __m512i col = _mm512_and_si512(iota, _mm512_set1_epi32(7)), vw = _mm512_set1_epi32((int)w);
    __m512i base = _mm512_add_epi32(_mm512_mullo_epi32(_mm512_srli_epi32(iota, 3), vw), col);
    __mmask16 used = _mm512_cmplt_epi32_mask(col, vw);
    __m512i idx[5];
    __mmask16 cm[5];
    for (int kx = 0; kx < K; kx++) {
        idx[kx] = _mm512_add_epi32(base, _mm512_set1_epi32(kx));
        __m512i from = _mm512_add_epi32(col, _mm512_set1_epi32(kx - P));
        cm[kx] = (__mmask16)(used & _mm512_cmpge_epi32_mask(from, _mm512_setzero_si512()) &
                             _mm512_cmplt_epi32_mask(from, vw));
    }
    __m512 acc[PAIRS][CHAINS];
    for (int j = 0; j < PAIRS; j++) {
        acc[j][0] = _mm512_set1_ps(d->bias);
        for (int q = 1; q < CHAINS; q++)
            acc[j][q] = _mm512_setzero_ps();
    }
    const int NI = 2 * (PAIRS - 1) + K;
#pragma GCC unroll 16
    for (int i = 0; i < NI; i++) {
        int64_t ir = i - P;
        __mmask16 rm = (__mmask16)((ir >= 0 && ir < h ? 0x00FF : 0) |
                                   (ir + 1 >= 0 && ir + 1 < h ? 0xFF00 : 0));
        if (rm == 0)
            continue;
        int64_t s = ir * w - P;
        __m512 l0, l1;
        if (s >= 0 && s + 32 <= n) {
            l0 = _mm512_loadu_ps(d->x + s);
            l1 = _mm512_loadu_ps(d->x + s + 16);
        } else {
            l0 = part(d->x, n, s);
            l1 = part(d->x, n, s + 16);
        }
        __m512 t[5];
#pragma GCC unroll 5
        for (int kx = 0; kx < K; kx++)
            t[kx] = _mm512_maskz_permutex2var_ps((__mmask16)(cm[kx] & rm), l0, idx[kx], l1);
#pragma GCC unroll 4
        for (int j = 0; j < PAIRS; j++) {
            int ky = i - 2 * j;
            if (ky < 0 || ky >= K)
                continue;
#pragma GCC unroll 5
            for (int kx = 0; kx < K; kx++) {
                int q = (ky * K + kx) % CHAINS;
                acc[j][q] = _mm512_fmadd_ps(wv[ky * K + kx], t[kx], acc[j][q]);
            }
        }
    }
    /* Lanes 0 .. w - 1 and 8 .. 8 + w - 1 next to each other: the two rows as stored. */
    __m512i compact = _mm512_mask_add_epi32(iota, _mm512_cmpge_epi32_mask(iota, vw), iota,
                                            _mm512_set1_epi32(8 - (int)w));
    for (int j = 0; j < PAIRS && 2 * j < d->oh; j++) {
        __m512 v = _mm512_add_ps(_mm512_add_ps(acc[j][0], acc[j][1]), acc[j][2]);
        v = _mm512_permutexvar_ps(compact, v);
        int64_t at = 2 * j * w, rows = d->oh - 2 * j < 2 ? d->oh - 2 * j : 2;
        __mmask16 m = lanes(rows * w);
        if (d->res != NULL)
            v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, d->res + at));
        if (d->act == KN_ACT_CLIP)
            v = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(d->lo)), _mm512_set1_ps(d->hi));
        else if (d->act == KN_ACT_SWISH)
            v = kn_silu512(v);
        else if (d->act == KN_ACT_SIGMOID)
            v = kn_sigmoid512(v);
        _mm512_mask_storeu_ps(d->y + at, m, v);
    }
}

AVX512 static void pairs_3(const kn_dwd *d) {
    pairs(d, 3);
}

AVX512 static void pairs_5(const kn_dwd *d) {
    pairs(d, 5);
}

bool kn_cpu_dw_pairs_avx512(const kn_dwd *d) {
    int64_t half = d->k / 2;
    if ((d->k != 3 && d->k != 5) || d->stride != 1 || d->ph != half || d->pw != half ||
        d->oh != d->h || d->ow != d->w || d->h > 2 * PAIRS || d->w > 8)
        return false;
    if (d->k == 3)
        pairs_3(d);
    else
        pairs_5(d);
    return true;
}

#else

bool kn_cpu_dw_pairs_avx512(const kn_dwd *d) {
    (void)d;
    return false;
}

#endif
