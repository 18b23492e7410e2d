/* AVX-512 3x3 depthwise straight from the unpadded plane (kn_cpu_dw3_direct_avx512): for wide
 * planes, where the padded copy (and for stride 2 the phase split) of every plane cost a pass
 * over a plane that is not in L1, and SiLU another pass after the kernel.
 * - Taps outside the plane are zero: rows outside are skipped, columns outside are masked off
 *   (the one column left of the plane is shifted in with valignd, so no address before the
 *   plane is formed; a load whose lanes are all outside is not issued).
 * - Several output rows at a time share their input rows: each input row's three tap vectors
 *   are made once and feed every output row of the block that reads them.
 * - Stride 2 de-interleaves two loads into even and odd columns (vpermt2ps); the third tap is
 *   one of them shifted by a lane, with the neighbouring column broadcast in.
 * - The epilogue (bias, residual, clamp, sigmoid or SiLU) runs in registers before the only
 *   store. */
#include "backend/cpu/nn/conv.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include "backend/cpu/arch/act_avx512.h"

#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f")))
#define INLINE __attribute__((always_inline)) static inline

AVX512 INLINE __mmask16 lanes(int64_t n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

/* Columns c .. c + 15 of a row of w floats, zero outside [0, w); c >= -1. */
AVX512 INLINE __m512 cols(const float *row, int64_t w, int64_t c) {
    if (c < 0) {
        __m512i v = _mm512_castps_si512(_mm512_maskz_loadu_ps(lanes(w), row));
        return _mm512_castsi512_ps(_mm512_alignr_epi32(v, _mm512_setzero_si512(), 15));
    }
    __mmask16 m = lanes(w - c);
    return m != 0 ? _mm512_maskz_loadu_ps(m, row + c) : _mm512_setzero_ps();
}

/* The three tap vectors of one input row for 16 outputs from column ow0 (stride 1); `edge`:
 * some of their columns may be outside the row. */
AVX512 INLINE void taps_s1(const float *row, int64_t w, int64_t c, bool edge, __m512 t[3]) {
    if (!edge) {
        t[0] = _mm512_loadu_ps(row + c);
        t[1] = _mm512_loadu_ps(row + c + 1);
        t[2] = _mm512_loadu_ps(row + c + 2);
        return;
    }
    t[0] = cols(row, w, c);
    t[1] = cols(row, w, c + 1);
    t[2] = cols(row, w, c + 2);
}

/* Stride 2: output i reads columns c + kx + 2i, c = 2 ow0 - pw with pw 0 or 1. */
AVX512 INLINE void taps_s2(const float *row, int64_t w, int64_t ow0, int pw, bool edge,
                           __m512i even, __m512i odd, __m512 t[3]) {
    int64_t b = 2 * ow0;
    __m512 lo, hi;
    if (!edge) {
        lo = _mm512_loadu_ps(row + b);
        hi = _mm512_loadu_ps(row + b + 16);
    } else {
        lo = cols(row, w, b);
        hi = cols(row, w, b + 16);
    }
    __m512 e = _mm512_permutex2var_ps(lo, even, hi), o = _mm512_permutex2var_ps(lo, odd, hi);
    if (pw == 1) {
        __m512 left = !edge || b > 0 ? _mm512_set1_ps(row[b - 1]) : _mm512_setzero_ps();
        t[0] = _mm512_castsi512_ps(
            _mm512_alignr_epi32(_mm512_castps_si512(o), _mm512_castps_si512(left), 15));
        t[1] = e;
        t[2] = o;
    } else {
        __m512 right = !edge || b + 32 < w ? _mm512_set1_ps(row[b + 32]) : _mm512_setzero_ps();
        t[0] = e;
        t[1] = o;
        t[2] = _mm512_castsi512_ps(
            _mm512_alignr_epi32(_mm512_castps_si512(right), _mm512_castps_si512(e), 1));
    }
}

AVX512 INLINE __m512 finish(const kn_dw3d *d, __m512 v, int64_t at, __mmask16 m) {
    if (d->res != NULL)
        v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, d->res + at));
    if (d->act == KN_ACT_CLIP)
        v = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(d->lo)), _mm512_set1_ps(d->hi));
    else if (d->act == KN_ACT_SWISH)
        v = kn_silu512(v);
    else if (d->act == KN_ACT_SIGMOID)
        v = kn_sigmoid512(v);
    return v;
}

#define DW3D_ROWS_S1 4
#define DW3D_ROWS_S2 2
#define DW3D_ROWS_MAX 4

/* 16 columns from ow0 of R output rows from oh0, stride S (constants, so the row loops unroll
 * and each input row's taps go to the accumulators of the output rows that read them). */
AVX512 INLINE void chunk(const kn_dw3d *d, const __m512 wv[9], int64_t oh0, int64_t ow0,
                         const int R, const int S, const bool edge) {
    __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    const int NI = (R - 1) * S + 3;
    int64_t ir0 = oh0 * S - d->ph;
    __m512 acc[DW3D_ROWS_MAX]; /* a fixed size: acc[R] would be a variable-length array */
#pragma GCC unroll 8
    for (int j = 0; j < R; j++)
        acc[j] = _mm512_set1_ps(d->bias);
#pragma GCC unroll 16
    for (int i = 0; i < NI; i++) {
        int64_t ir = ir0 + i;
        if (ir < 0 || ir >= d->h)
            continue;
        const float *row = d->x + ir * d->w;
        __m512 t[3];
        if (S == 1)
            taps_s1(row, d->w, ow0 - d->pw, edge, t);
        else
            taps_s2(row, d->w, ow0, (int)d->pw, edge, even, odd, t);
#pragma GCC unroll 8
        for (int j = 0; j < R; j++) {
            int ky = i - j * S;
            if (ky < 0 || ky > 2)
                continue;
            acc[j] = _mm512_fmadd_ps(wv[ky * 3], t[0], acc[j]);
            acc[j] = _mm512_fmadd_ps(wv[ky * 3 + 1], t[1], acc[j]);
            acc[j] = _mm512_fmadd_ps(wv[ky * 3 + 2], t[2], acc[j]);
        }
    }
    __mmask16 m = lanes(d->ow - ow0);
#pragma GCC unroll 8
    for (int j = 0; j < R; j++) {
        int64_t at = (oh0 + j) * d->ow + ow0;
        _mm512_mask_storeu_ps(d->y + at, m, finish(d, acc[j], at, m));
    }
}

/* Chunks whose every column is inside the row skip the masks. */
AVX512 INLINE void block(const kn_dw3d *d, const __m512 wv[9], int64_t oh0, const int R,
                         const int S) {
    /* Columns ow0 * S - pw .. (ow0 + 15) * S - pw + 2 (+ 1 for stride 2's second load). */
    int64_t ow0 = 0;
    if (d->pw > 0) {
        chunk(d, wv, oh0, 0, R, S, true);
        ow0 = 16;
    }
    for (; ow0 + 16 <= d->ow && (ow0 + 16) * S - d->pw + 2 <= d->w; ow0 += 16)
        chunk(d, wv, oh0, ow0, R, S, false);
    for (; ow0 < d->ow; ow0 += 16)
        chunk(d, wv, oh0, ow0, R, S, true);
}

AVX512 static void dw3_direct(const kn_dw3d *d) {
    __m512 wv[9];
    for (int t = 0; t < 9; t++)
        wv[t] = _mm512_set1_ps(d->wt[t]);
    int64_t oh = 0;
    if (d->stride == 1) {
        for (; oh + DW3D_ROWS_S1 <= d->oh; oh += DW3D_ROWS_S1)
            block(d, wv, oh, DW3D_ROWS_S1, 1);
        for (; oh < d->oh; oh++)
            block(d, wv, oh, 1, 1);
    } else {
        for (; oh + DW3D_ROWS_S2 <= d->oh; oh += DW3D_ROWS_S2)
            block(d, wv, oh, DW3D_ROWS_S2, 2);
        for (; oh < d->oh; oh++)
            block(d, wv, oh, 1, 2);
    }
}

void kn_cpu_dw3_direct_avx512(const kn_dw3d *d) {
    dw3_direct(d);
}

#else

void kn_cpu_dw3_direct_avx512(const kn_dw3d *d) {
    (void)d;
}

#endif
