/* AVX-512 3x3 and 5x5 depthwise straight from the unpadded plane (kn_cpu_dw_direct_avx512):
 * for planes wide enough to fill most of a vector, where the padded copy (for stride 2 also the
 * phase split) of every plane, or the channel-block kernel's transposes, cost more than the
 * arithmetic, and SiLU another pass after the kernel.
 * - Taps outside the plane are zero: rows outside are skipped, columns outside are masked off
 *   (columns left of the plane are shifted in with valignd, so no address before the plane is
 *   formed; a load whose lanes are all outside is not issued). Vectors whose columns are all
 *   inside take plain loads.
 * - Several output rows at a time share their input rows: each input row's K tap vectors are
 *   made once and feed every output row of the block that reads them.
 * - Stride 2 de-interleaves two loads into even and odd columns (vpermt2ps); the other taps are
 *   these shifted by a lane, with the neighbouring column broadcast in.
 * - The epilogue (bias, residual, clamp, sigmoid or SiLU) runs in registers before the only
 *   store. */
#include "backend/cpu/nn/conv.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include "backend/cpu/arch/act_avx512.h"

#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f")))
#define INLINE __attribute__((always_inline)) static inline

/* Output rows a step, measured inside MobileNetV2 and EfficientNet-B0: stride 1, 2 and 6 were
 * no better than 4, and 8 (one chain a row) slower; 3x3 stride 2, 1 and 4 slower than 2; 5x5
 * stride 2, 4 rows (144ch 56->28 0.127 -> 0.112 ms). */
#define DWD_ROWS_S1 4
#define DWD_ROWS_S2 2
#define DWD_ROWS_S2_K5 4
#define DWD_ROWS_MAX 4
#define DWD_KMAX 5

AVX512 INLINE __mmask16 lanes(int64_t n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

AVX512 INLINE __m512 shift_in(__m512 v, __m512 left, const int by) {
    __m512i a = _mm512_castps_si512(v), b = _mm512_castps_si512(left);
    return _mm512_castsi512_ps(by == 1 ? _mm512_alignr_epi32(a, b, 15)
                                       : _mm512_alignr_epi32(a, b, 14));
}

/* Columns c .. c + 15 of a row of w floats, zero outside [0, w); c >= -2. */
AVX512 INLINE __m512 cols(const float *row, int64_t w, int64_t c) {
    if (c < 0) {
        __m512 v = _mm512_maskz_loadu_ps(lanes(w), row);
        return c == -1 ? shift_in(v, _mm512_setzero_ps(), 1) : shift_in(v, _mm512_setzero_ps(), 2);
    }
    __mmask16 m = lanes(w - c);
    return m != 0 ? _mm512_maskz_loadu_ps(m, row + c) : _mm512_setzero_ps();
}

/* One element, zero outside the row. */
AVX512 INLINE __m512 col1(const float *row, int64_t w, int64_t c) {
    return c >= 0 && c < w ? _mm512_set1_ps(row[c]) : _mm512_setzero_ps();
}

/* Where a vector of 16 outputs from column ow0 reads: INSIDE, every column inside the row;
 * LEFT, ow0 = 0 with columns left of the row; RIGHT, columns right of it only. */
enum { INSIDE, LEFT, RIGHT };

/* The loads of a RIGHT vector, the same for every row: masks and offsets (an offset of 0 where
 * the mask is empty, so no address past the row is formed). */
typedef struct edge_plan {
    __mmask16 m[DWD_KMAX];
    int64_t off[DWD_KMAX];
    __mmask16 one[DWD_KMAX]; /* stride 2: the broadcast column is inside */
    int64_t one_off[DWD_KMAX];
} edge_plan;

AVX512 INLINE void plan_right(edge_plan *e, int64_t w, int64_t ow0, const int K, const int S,
                              const int P) {
    if (S == 1) {
        for (int kx = 0; kx < K; kx++) {
            int64_t c = ow0 - P + kx;
            e->m[kx] = lanes(w - c);
            e->off[kx] = e->m[kx] != 0 ? c : 0;
        }
        return;
    }
    int64_t b = 2 * ow0;
    for (int h = 0; h < 2; h++) {
        e->m[h] = lanes(w - b - 16 * h);
        e->off[h] = e->m[h] != 0 ? b + 16 * h : 0;
    }
    for (int kx = 0; kx < K; kx++) {
        const int d = kx - P, par = d & 1, q = (d - par) / 2;
        int64_t c = q < 0 ? b + par - 2 : b + par + 32;
        bool inside = c >= 0 && c < w;
        e->one[kx] = inside ? (__mmask16)0xFFFF : (__mmask16)0;
        e->one_off[kx] = inside ? c : 0;
    }
}

/* The K tap vectors of one input row for 16 outputs from column ow0: output i, tap kx reads
 * column S (ow0 + i) - P + kx. */
AVX512 INLINE void taps(const float *row, int64_t w, int64_t ow0, const int K, const int S,
                        const int P, const int where, const edge_plan *e, __m512 t[DWD_KMAX]) {
    if (S == 1) {
        for (int kx = 0; kx < K; kx++) {
            if (where == INSIDE)
                t[kx] = _mm512_loadu_ps(row + ow0 - P + kx);
            else if (where == LEFT)
                t[kx] = cols(row, w, kx - P);
            else
                t[kx] = _mm512_maskz_loadu_ps(e->m[kx], row + e->off[kx]);
        }
        return;
    }
    __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    int64_t b = where == LEFT ? 0 : 2 * ow0;
    __m512 lo, hi;
    if (where == INSIDE) {
        lo = _mm512_loadu_ps(row + b);
        hi = _mm512_loadu_ps(row + b + 16);
    } else if (where == LEFT) {
        lo = cols(row, w, 0);
        hi = cols(row, w, 16);
    } else {
        lo = _mm512_maskz_loadu_ps(e->m[0], row + e->off[0]);
        hi = _mm512_maskz_loadu_ps(e->m[1], row + e->off[1]);
    }
    __m512 v[2] = {_mm512_permutex2var_ps(lo, even, hi), _mm512_permutex2var_ps(lo, odd, hi)};
    /* Tap kx reads column b + d + 2i, d = kx - P: the even or odd columns (d's parity) moved
     * by q = floor(d / 2) lanes, with the column beyond broadcast in. */
    for (int kx = 0; kx < K; kx++) {
        const int d = kx - P, par = d & 1, q = (d - par) / 2;
        if (q == 0) {
            t[kx] = v[par];
            continue;
        }
        __m512 one;
        if (where == INSIDE)
            one = _mm512_set1_ps(row[q < 0 ? b + par - 2 : b + par + 32]);
        else if (where == LEFT)
            one = q < 0 ? _mm512_setzero_ps() : col1(row, w, par + 32);
        else
            one = _mm512_maskz_mov_ps(e->one[kx], _mm512_set1_ps(row[e->one_off[kx]]));
        t[kx] = q < 0 ? shift_in(v[par], one, 1)
                      : _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(one),
                                                                _mm512_castps_si512(v[par]), 1));
    }
}

AVX512 INLINE __m512 finish(const kn_dwd *d, __m512 v, int64_t at, __mmask16 m) {
    if (d->res != NULL)
        v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, d->res + at));
    return kn_act_in_regs512(d->act, v, d->lo, d->hi);
}

/* 16 columns from ow0 of R output rows from oh0 (K, S, P, R constants, so the loops unroll and
 * each input row's taps go to the accumulators of the output rows that read them). */
AVX512 INLINE void chunk(const kn_dwd *d, const __m512 *wv, int64_t oh0, int64_t ow0, const int K,
                         const int S, const int P, const int R, const int where) {
    edge_plan e;
    if (where == RIGHT)
        plan_right(&e, d->w, ow0, K, S, P);
    const int NI = (R - 1) * S + K;
    int64_t ir0 = oh0 * S - d->ph;
    /* Three chains an output row, taps taking turns: one chain of K * K dependent FMAs
     * waited on its own latency on planes one vector wide (two chains: 5x5 240ch 28x28 0.174 ->
     * 0.160 ms, three: 0.159). acc is of a fixed size: acc[R]
     * would be a variable-length array, kept in memory. */
    __m512 acc[DWD_ROWS_MAX][3];
#pragma GCC unroll 8
    for (int j = 0; j < R; j++) {
        acc[j][0] = _mm512_set1_ps(d->bias);
        acc[j][1] = acc[j][2] = _mm512_setzero_ps();
    }
#pragma GCC unroll 16
    for (int i = 0; i < NI; i++) {
        int64_t ir = ir0 + i;
        if (ir < 0 || ir >= d->h)
            continue;
        __m512 t[DWD_KMAX];
        taps(d->x + ir * d->w, d->w, ow0, K, S, P, where, &e, t);
#pragma GCC unroll 8
        for (int j = 0; j < R; j++) {
            int ky = i - j * S;
            if (ky < 0 || ky >= K)
                continue;
#pragma GCC unroll 8
            for (int kx = 0; kx < K; kx++) {
                int c = (ky * K + kx) % 3;
                acc[j][c] = _mm512_fmadd_ps(wv[ky * K + kx], t[kx], acc[j][c]);
            }
        }
    }
    __mmask16 m = lanes(d->ow - ow0);
#pragma GCC unroll 8
    for (int j = 0; j < R; j++) {
        int64_t at = (oh0 + j) * d->ow + ow0;
        _mm512_mask_storeu_ps(
            d->y + at, m,
            finish(d, _mm512_add_ps(_mm512_add_ps(acc[j][0], acc[j][1]), acc[j][2]), at, m));
    }
}

/* R output rows from oh0; vectors whose every column is inside the row skip the masks. */
AVX512 INLINE void block(const kn_dwd *d, const __m512 *wv, int64_t oh0, const int K, const int S,
                         const int P, const int R) {
    int64_t ow0 = 0;
    if (P > 0) {
        chunk(d, wv, oh0, 0, K, S, P, R, LEFT);
        ow0 = 16;
    }
    /* Columns read: stride 1 up to ow0 + 15 - P + K - 1; stride 2 up to 2 ow0 + 32 + 1. */
    for (; ow0 + 16 <= d->ow && (S == 1 ? ow0 + 15 - P + K : 2 * ow0 + 34) <= d->w; ow0 += 16)
        chunk(d, wv, oh0, ow0, K, S, P, R, INSIDE);
    for (; ow0 < d->ow; ow0 += 16)
        chunk(d, wv, oh0, ow0, K, S, P, R, RIGHT);
}

AVX512 INLINE void plane(const kn_dwd *d, const int K, const int S, const int P) {
    __m512 wv[DWD_KMAX * DWD_KMAX];
    for (int t = 0; t < K * K; t++)
        wv[t] = _mm512_set1_ps(d->wt[t]);
    const int R = S == 1 ? DWD_ROWS_S1 : K == 5 ? DWD_ROWS_S2_K5 : DWD_ROWS_S2;
    int64_t oh = 0;
    for (; oh + R <= d->oh; oh += R)
        block(d, wv, oh, K, S, P, R);
    for (; oh < d->oh; oh++)
        block(d, wv, oh, K, S, P, 1);
}

/* One instance per kernel size, stride and left padding. */
#define DWD_INSTANCE(K, S, P)                                                                      \
    AVX512 static void plane_##K##_##S##_##P(const kn_dwd *d) {                                    \
        plane(d, K, S, P);                                                                         \
    }
DWD_INSTANCE(3, 1, 0)
DWD_INSTANCE(3, 1, 1)
DWD_INSTANCE(3, 2, 0)
DWD_INSTANCE(3, 2, 1)
DWD_INSTANCE(5, 1, 1)
DWD_INSTANCE(5, 1, 2)
DWD_INSTANCE(5, 2, 1)
DWD_INSTANCE(5, 2, 2)

bool kn_cpu_dw_direct_avx512(const kn_dwd *d) {
    int key = d->k * 100 + d->stride * 10 + (int)d->pw;
    switch (key) {
    case 310:
        plane_3_1_0(d);
        return true;
    case 311:
        plane_3_1_1(d);
        return true;
    case 320:
        plane_3_2_0(d);
        return true;
    case 321:
        plane_3_2_1(d);
        return true;
    case 511:
        plane_5_1_1(d);
        return true;
    case 512:
        plane_5_1_2(d);
        return true;
    case 521:
        plane_5_2_1(d);
        return true;
    case 522:
        plane_5_2_2(d);
        return true;
    default:
        return false;
    }
}

#else

bool kn_cpu_dw_direct_avx512(const kn_dwd *d) {
    (void)d;
    return false;
}

#endif
