/* AVX-512 depthwise kernels:
 * - the general row kernel: 16 outputs per vector, every tap accumulated in a register, the
 *   bias, residual and clamp applied before the single store. Stride 2 de-interleaves two loads.
 *   Near the borders only the lanes whose tap is inside the input are loaded (expand-load or a
 *   masked gather from the first valid element), so no address outside the input is formed;
 * - the flat-plane kernel over padded (or phase-split) planes, for small planes;
 * - the 3x3 row kernel with the weights in registers and valignd taps (dw3_plane);
 * - the 3x3/5x5/7x7 channel-block kernel, one channel per lane after 16x16 transposes (dw_c16);
 * - the padding and phase-splitting passes that feed them. */
#include "backend/cpu/nn/conv.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <stdbool.h>

#define AVX512 __attribute__((target("avx512f")))

/* All n lanes valid, starting at p. */
AVX512 static inline __m512 load_full(const float *p, int64_t sw, int n, __m512i idx2,
                                      __m512i idxs) {
    __mmask16 m = (__mmask16)((1u << n) - 1);
    if (sw == 1)
        return _mm512_maskz_loadu_ps(m, p);
    if (sw == 2) {
        int need = 2 * n - 1;
        __mmask16 m0 = need >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << need) - 1);
        __mmask16 m1 = need <= 16 ? (__mmask16)0 : (__mmask16)((1u << (need - 16)) - 1);
        __m512 lo = _mm512_maskz_loadu_ps(m0, p), hi = _mm512_maskz_loadu_ps(m1, p + 16);
        return _mm512_permutex2var_ps(lo, idx2, hi);
    }
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idxs, p, 4);
}

/* Lanes [a, b) valid; first points at lane a's element. */
AVX512 static inline __m512 load_part(const float *first, int64_t sw, int a, int b, __m512i idxs) {
    __mmask16 m = (__mmask16)(((1u << b) - 1) & ~((1u << a) - 1));
    if (sw == 1)
        return _mm512_maskz_expandloadu_ps(m, first);
    __m512i rel = _mm512_sub_epi32(idxs, _mm512_set1_epi32((int)(a * sw)));
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, rel, first, 4);
}

AVX512 static inline __m512 epilogue(const kn_dw_row *r, __m512 acc, int64_t ow, __mmask16 m,
                                     __m512 vlo, __m512 vhi) {
    if (r->res != NULL)
        acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, r->res + ow));
    if (r->clamp)
        acc = _mm512_min_ps(_mm512_max_ps(acc, vlo), vhi);
    return acc;
}

/* Up to 16 columns at ow with per-tap validity; two accumulators halve the FMA chain. */
AVX512 static void block(const kn_dw_row *r, int64_t ow, __m512i idx2, __m512i idxs, __m512 vlo,
                         __m512 vhi) {
    const kn_conv2d *c = r->c;
    int n = c->ow - ow < 16 ? (int)(c->ow - ow) : 16;
    __mmask16 m = (__mmask16)((1u << n) - 1);
    __m512 acc0 = _mm512_set1_ps(r->bias), acc1 = _mm512_setzero_ps();
    for (int64_t ky = r->ky0; ky < r->ky1; ky++) {
        const float *xr = r->x + (r->oh * c->sh - c->ph + ky * c->dh) * c->w;
        const float *wr = r->w + ky * c->kw;
        for (int64_t kx = 0; kx < c->kw; kx++) {
            int64_t a = r->lo[kx] - ow, b = r->hi[kx] - ow;
            a = a > 0 ? a : 0;
            b = b < n ? b : n;
            if (b <= a)
                continue;
            const float *first = xr + (ow + a) * c->sw - c->pw + kx * c->dw;
            __m512 v = a == 0 && b == n ? load_full(first, c->sw, n, idx2, idxs)
                                        : load_part(first, c->sw, (int)a, (int)b, idxs);
            acc1 = _mm512_fmadd_ps(_mm512_set1_ps(wr[kx]), v, acc1);
            __m512 t = acc0;
            acc0 = acc1;
            acc1 = t;
        }
    }
    __m512 acc = epilogue(r, _mm512_add_ps(acc0, acc1), ow, m, vlo, vhi);
    _mm512_mask_storeu_ps(r->y + ow, m, acc);
}

/* 32 interior columns at ow (every tap inside), stride 1 or 2: four independent chains. */
AVX512 static void interior32(const kn_dw_row *r, int64_t ow, __m512i idx2, __m512 vlo,
                              __m512 vhi) {
    const kn_conv2d *c = r->c;
    __m512 a0 = _mm512_set1_ps(r->bias), a1 = a0, b0 = _mm512_setzero_ps(), b1 = b0;
    for (int64_t ky = r->ky0; ky < r->ky1; ky++) {
        const float *xr = r->x + (r->oh * c->sh - c->ph + ky * c->dh) * c->w + ow * c->sw - c->pw;
        const float *wr = r->w + ky * c->kw;
        for (int64_t kx = 0; kx < c->kw; kx++) {
            const float *p = xr + kx * c->dw;
            __m512 w = _mm512_set1_ps(wr[kx]), v0, v1;
            if (c->sw == 1) {
                v0 = _mm512_loadu_ps(p);
                v1 = _mm512_loadu_ps(p + 16);
            } else {
                v0 = _mm512_permutex2var_ps(_mm512_loadu_ps(p), idx2, _mm512_loadu_ps(p + 16));
                v1 = _mm512_permutex2var_ps(_mm512_loadu_ps(p + 32), idx2,
                                            _mm512_maskz_loadu_ps(0x7FFF, p + 48));
            }
            b0 = _mm512_fmadd_ps(w, v0, b0);
            b1 = _mm512_fmadd_ps(w, v1, b1);
            __m512 t0 = a0, t1 = a1;
            a0 = b0;
            a1 = b1;
            b0 = t0;
            b1 = t1;
        }
    }
    __mmask16 all = (__mmask16)0xFFFF;
    _mm512_storeu_ps(r->y + ow, epilogue(r, _mm512_add_ps(a0, b0), ow, all, vlo, vhi));
    _mm512_storeu_ps(r->y + ow + 16, epilogue(r, _mm512_add_ps(a1, b1), ow + 16, all, vlo, vhi));
}

/* n <= 16 columns at ow, every tap inside: no per-tap checks. */
AVX512 static void interior16(const kn_dw_row *r, int64_t ow, int n, __m512i idx2, __m512i idxs,
                              __m512 vlo, __m512 vhi) {
    const kn_conv2d *c = r->c;
    __mmask16 m = (__mmask16)((1u << n) - 1);
    __m512 acc0 = _mm512_set1_ps(r->bias), acc1 = _mm512_setzero_ps();
    for (int64_t ky = r->ky0; ky < r->ky1; ky++) {
        const float *xr = r->x + (r->oh * c->sh - c->ph + ky * c->dh) * c->w + ow * c->sw - c->pw;
        const float *wr = r->w + ky * c->kw;
        for (int64_t kx = 0; kx < c->kw; kx++) {
            __m512 v = load_full(xr + kx * c->dw, c->sw, n, idx2, idxs);
            acc1 = _mm512_fmadd_ps(_mm512_set1_ps(wr[kx]), v, acc1);
            __m512 t = acc0;
            acc0 = acc1;
            acc1 = t;
        }
    }
    __m512 acc = epilogue(r, _mm512_add_ps(acc0, acc1), ow, m, vlo, vhi);
    _mm512_mask_storeu_ps(r->y + ow, m, acc);
}

AVX512 static void row(const kn_dw_row *r) {
    const kn_conv2d *c = r->c;
    __m512i idx2 = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    __m512i idxs =
        _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                           _mm512_set1_epi32((int)c->sw));
    __m512 vlo = _mm512_set1_ps(r->lo_clamp), vhi = _mm512_set1_ps(r->hi_clamp);
    int64_t ow = 0;
    if (c->sw <= 2) {
        for (; ow < r->left; ow += 16)
            block(r, ow, idx2, idxs, vlo, vhi);
        for (; ow + 32 <= r->right; ow += 32)
            interior32(r, ow, idx2, vlo, vhi);
        for (; ow + 16 <= r->right; ow += 16)
            interior16(r, ow, 16, idx2, idxs, vlo, vhi);
        if (r->right == c->ow && ow < c->ow) {
            interior16(r, ow, (int)(c->ow - ow), idx2, idxs, vlo, vhi);
            return;
        }
    }
    for (; ow < c->ow; ow += 16)
        block(r, ow, idx2, idxs, vlo, vhi);
}

void kn_cpu_dw_row_avx512(const kn_dw_row *r) {
    row(r);
}

AVX512 static __mmask16 lanes(int64_t rem) {
    return rem >= 16 ? (__mmask16)0xFFFF : rem <= 0 ? (__mmask16)0 : (__mmask16)((1u << rem) - 1);
}

AVX512 static void plane_flat(const kn_dw_flat *f) {
    int64_t n = (f->oh - 1) * f->wp + f->ow;
    for (int64_t q = 0; q < n; q += 32) {
        __mmask16 m0 = lanes(n - q), m1 = lanes(n - q - 16);
        __m512 a0 = _mm512_set1_ps(f->bias), a1 = a0, b0 = _mm512_setzero_ps(), b1 = b0;
        for (int64_t t = 0; t < f->ntaps; t++) {
            const float *p = f->x + q + f->off[t];
            __m512 w = _mm512_set1_ps(f->w[t]);
            b0 = _mm512_fmadd_ps(w, _mm512_maskz_loadu_ps(m0, p), b0);
            b1 = _mm512_fmadd_ps(w, _mm512_maskz_loadu_ps(m1, p + 16), b1);
            __m512 t0 = a0, t1 = a1;
            a0 = b0;
            a1 = b1;
            b0 = t0;
            b1 = t1;
        }
        _mm512_mask_storeu_ps(f->tmp + q, m0, _mm512_add_ps(a0, b0));
        _mm512_mask_storeu_ps(f->tmp + q + 16, m1, _mm512_add_ps(a1, b1));
    }
    __m512 vlo = _mm512_set1_ps(f->lo), vhi = _mm512_set1_ps(f->hi);
    for (int64_t r = 0; r < f->oh; r++) {
        const float *src = f->tmp + r * f->wp;
        float *dst = f->y + r * f->ow;
        for (int64_t j = 0; j < f->ow; j += 16) {
            __mmask16 m = lanes(f->ow - j);
            __m512 v = _mm512_maskz_loadu_ps(m, src + j);
            if (f->res != NULL)
                v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, f->res + r * f->ow + j));
            if (f->clamp)
                v = _mm512_min_ps(_mm512_max_ps(v, vlo), vhi);
            _mm512_mask_storeu_ps(dst + j, m, v);
        }
    }
}

void kn_cpu_dw_plane_flat_avx512(const kn_dw_flat *f) {
    plane_flat(f);
}

/* 3x3 undilated kernel, row by row over a padded plane (stride 1) or over the four phase planes
 * of one (stride 2: kernel column 0 and 2 read the even-column plane at ow and ow + 1, column 1
 * the odd one). Nine weights stay in registers; a row's three taps come from one load pair and
 * two lane shifts (valignd) instead of three unaligned loads; 32 outputs per step in six
 * independent accumulator chains; the epilogue is applied before the only store. */
#define DW3_BLOCK(NB)                                                                              \
    do {                                                                                           \
        __m512 acc[2][3];                                                                          \
        for (int b = 0; b < 2; b++)                                                                \
            for (int ky = 0; ky < 3; ky++)                                                         \
                acc[b][ky] = _mm512_setzero_ps();                                                  \
        for (int ky = 0; ky < 3; ky++) {                                                           \
            __m512 t0[2], t1[2], t2[2];                                                            \
            if (!s2) {                                                                             \
                const float *r = src[ky][0] + ow0;                                                 \
                int64_t av = f->wp - ow0;                                                          \
                __m512 v0 = _mm512_maskz_loadu_ps(lanes(av), r);                                   \
                __m512 v1 = _mm512_maskz_loadu_ps(lanes(av - 16), r + 16);                         \
                t0[0] = v0;                                                                        \
                t1[0] = _mm512_castsi512_ps(                                                       \
                    _mm512_alignr_epi32(_mm512_castps_si512(v1), _mm512_castps_si512(v0), 1));     \
                t2[0] = _mm512_castsi512_ps(                                                       \
                    _mm512_alignr_epi32(_mm512_castps_si512(v1), _mm512_castps_si512(v0), 2));     \
                if (NB == 2) {                                                                     \
                    av -= 32;                                                                      \
                    __m512 v2 = _mm512_maskz_loadu_ps(lanes(av < 2 ? av : 2), r + 32);             \
                    t0[1] = v1;                                                                    \
                    t1[1] = _mm512_castsi512_ps(                                                   \
                        _mm512_alignr_epi32(_mm512_castps_si512(v2), _mm512_castps_si512(v1), 1)); \
                    t2[1] = _mm512_castsi512_ps(                                                   \
                        _mm512_alignr_epi32(_mm512_castps_si512(v2), _mm512_castps_si512(v1), 2)); \
                }                                                                                  \
            } else {                                                                               \
                const float *e = src[ky][0] + ow0, *o = src[ky][1] + ow0;                          \
                int64_t av = f->wp - ow0;                                                          \
                __m512 e0 = _mm512_maskz_loadu_ps(lanes(av), e);                                   \
                __m512 e1 = _mm512_maskz_loadu_ps(lanes(av - 16), e + 16);                         \
                t0[0] = e0;                                                                        \
                t1[0] = _mm512_maskz_loadu_ps(lanes(av), o);                                       \
                t2[0] = _mm512_castsi512_ps(                                                       \
                    _mm512_alignr_epi32(_mm512_castps_si512(e1), _mm512_castps_si512(e0), 1));     \
                if (NB == 2) {                                                                     \
                    av -= 32;                                                                      \
                    __m512 e2 = _mm512_maskz_loadu_ps(lanes(av < 1 ? av : 1), e + 32);             \
                    t0[1] = e1;                                                                    \
                    t1[1] = _mm512_maskz_loadu_ps(lanes(av + 16), o + 16);                         \
                    t2[1] = _mm512_castsi512_ps(                                                   \
                        _mm512_alignr_epi32(_mm512_castps_si512(e2), _mm512_castps_si512(e1), 1)); \
                }                                                                                  \
            }                                                                                      \
            for (int b = 0; b < NB; b++) {                                                         \
                acc[b][ky] = _mm512_fmadd_ps(w[ky * 3], t0[b], acc[b][ky]);                        \
                acc[b][ky] = _mm512_fmadd_ps(w[ky * 3 + 1], t1[b], acc[b][ky]);                    \
                acc[b][ky] = _mm512_fmadd_ps(w[ky * 3 + 2], t2[b], acc[b][ky]);                    \
            }                                                                                      \
        }                                                                                          \
        for (int b = 0; b < NB; b++) {                                                             \
            __mmask16 m = lanes(f->ow - ow0 - 16 * b);                                             \
            __m512 v =                                                                             \
                _mm512_add_ps(_mm512_add_ps(acc[b][0], acc[b][1]), _mm512_add_ps(acc[b][2], vb));  \
            if (res != NULL)                                                                       \
                v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, res + ow0 + 16 * b));                \
            if (f->clamp)                                                                          \
                v = _mm512_min_ps(_mm512_max_ps(v, vlo), vhi);                                     \
            _mm512_mask_storeu_ps(y + ow0 + 16 * b, m, v);                                         \
        }                                                                                          \
    } while (0)

/* Rows of at most 16 outputs: two rows per step, so six accumulator chains are in flight
 * instead of three (a lone short row waits on its FMA latency). */
#define DW3_TWO_ROWS()                                                                             \
    do {                                                                                           \
        __m512 acc[2][3];                                                                          \
        for (int b = 0; b < 2; b++)                                                                \
            for (int ky = 0; ky < 3; ky++)                                                         \
                acc[b][ky] = _mm512_setzero_ps();                                                  \
        for (int ky = 0; ky < 3; ky++)                                                             \
            for (int b = 0; b < 2; b++) {                                                          \
                __m512 t0, t1, t2;                                                                 \
                int64_t av = f->wp;                                                                \
                if (!s2) {                                                                         \
                    const float *r = src2[b][ky][0];                                               \
                    __m512 v0 = _mm512_maskz_loadu_ps(lanes(av), r);                               \
                    __m512 v1 = _mm512_maskz_loadu_ps(lanes(av - 16), r + 16);                     \
                    t0 = v0;                                                                       \
                    t1 = _mm512_castsi512_ps(                                                      \
                        _mm512_alignr_epi32(_mm512_castps_si512(v1), _mm512_castps_si512(v0), 1)); \
                    t2 = _mm512_castsi512_ps(                                                      \
                        _mm512_alignr_epi32(_mm512_castps_si512(v1), _mm512_castps_si512(v0), 2)); \
                } else {                                                                           \
                    const float *e = src2[b][ky][0], *o = src2[b][ky][1];                          \
                    __m512 e0 = _mm512_maskz_loadu_ps(lanes(av), e);                               \
                    __m512 e1 = _mm512_maskz_loadu_ps(lanes(av - 16), e + 16);                     \
                    t0 = e0;                                                                       \
                    t1 = _mm512_maskz_loadu_ps(lanes(av), o);                                      \
                    t2 = _mm512_castsi512_ps(                                                      \
                        _mm512_alignr_epi32(_mm512_castps_si512(e1), _mm512_castps_si512(e0), 1)); \
                }                                                                                  \
                acc[b][ky] = _mm512_fmadd_ps(w[ky * 3], t0, acc[b][ky]);                           \
                acc[b][ky] = _mm512_fmadd_ps(w[ky * 3 + 1], t1, acc[b][ky]);                       \
                acc[b][ky] = _mm512_fmadd_ps(w[ky * 3 + 2], t2, acc[b][ky]);                       \
            }                                                                                      \
        __mmask16 m = lanes(f->ow);                                                                \
        for (int b = 0; b < 2; b++) {                                                              \
            __m512 v =                                                                             \
                _mm512_add_ps(_mm512_add_ps(acc[b][0], acc[b][1]), _mm512_add_ps(acc[b][2], vb));  \
            if (f->res != NULL)                                                                    \
                v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, f->res + (oh + b) * f->ow));         \
            if (f->clamp)                                                                          \
                v = _mm512_min_ps(_mm512_max_ps(v, vlo), vhi);                                     \
            _mm512_mask_storeu_ps(f->y + (oh + b) * f->ow, m, v);                                  \
        }                                                                                          \
    } while (0)

AVX512 static void dw3_plane(const kn_dw_flat *f, int s2) {
    __m512 w[9];
    for (int t = 0; t < 9; t++)
        w[t] = _mm512_set1_ps(f->w[t]);
    __m512 vlo = _mm512_set1_ps(f->lo), vhi = _mm512_set1_ps(f->hi), vb = _mm512_set1_ps(f->bias);
    int64_t oh = 0;
    if (f->ow <= 16) {
        for (; oh + 1 < f->oh; oh += 2) {
            const float *src2[2][3][2];
            for (int b = 0; b < 2; b++)
                for (int ky = 0; ky < 3; ky++) {
                    if (!s2) {
                        src2[b][ky][0] = src2[b][ky][1] = f->x + (oh + b + ky) * f->wp;
                    } else {
                        const float *pl = f->x + (ky % 2) * 2 * f->phase;
                        src2[b][ky][0] = pl + (oh + b + ky / 2) * f->wp;
                        src2[b][ky][1] = src2[b][ky][0] + f->phase;
                    }
                }
            DW3_TWO_ROWS();
        }
    }
    for (; oh < f->oh; oh++) {
        const float *src[3][2];
        for (int ky = 0; ky < 3; ky++) {
            if (!s2) {
                src[ky][0] = src[ky][1] = f->x + (oh + ky) * f->wp;
            } else {
                const float *pl = f->x + (ky % 2) * 2 * f->phase;
                src[ky][0] = pl + (oh + ky / 2) * f->wp;
                src[ky][1] = src[ky][0] + f->phase;
            }
        }
        float *y = f->y + oh * f->ow;
        const float *res = f->res != NULL ? f->res + oh * f->ow : NULL;
        int64_t ow0 = 0;
        for (; f->ow - ow0 > 16; ow0 += 32)
            DW3_BLOCK(2);
        if (ow0 < f->ow)
            DW3_BLOCK(1);
    }
}

void kn_cpu_dw3_plane_avx512(const kn_dw_flat *f, int stride) {
    dw3_plane(f, stride == 2);
}

/* In-register transpose of a 16 x 16 block: r[i] lane j <-> r[j] lane i. */
AVX512 static inline void transpose16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xDD);
        t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xDD);
    }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
    }
}

/* K x K depthwise (K = 3, 5, 7) over a block of 16 channels, one channel per lane (small
 * planes, where per-plane set-up dominates): input rows are transposed 16 x 16 into `t`, one
 * vector per padded position, so every output is K*K aligned FMAs whatever K is; each output
 * row is transposed back before the epilogue and the stores. K is a constant in each
 * instantiation so the tap loops unroll. */
AVX512 static inline __attribute__((always_inline)) void dw_c16(const kn_dwc16 *f, int64_t c0,
                                                                const int K) {
    int64_t n = f->channels - c0 < 16 ? f->channels - c0 : 16;
    int s = f->stride;
    int64_t hw = f->h * f->w, os = f->oh * f->ow;
    int64_t hp = (f->oh - 1) * s + K, wp = (f->ow - 1) * s + K;
    const float *x = f->x + c0 * hw;
    float *t = f->buf;
    /* Zero only the padding when the buffer is large (up to most of 1 MB); small ones are
     * cleared whole, which is cheaper than walking the borders. */
    __m512 z = _mm512_setzero_ps();
    if (hp * wp <= 1024)
        for (int64_t i = 0; i < hp * wp; i++)
            _mm512_store_ps(t + i * 16, z);
    for (int64_t r = 0; r < hp && hp * wp > 1024; r++) {
        int64_t ih = r - f->ph;
        bool inside = ih >= 0 && ih < f->h;
        for (int64_t c = 0; c < wp; c++) {
            if (inside && c == f->pw)
                c = f->pw + f->w < wp ? f->pw + f->w : wp;
            if (c < wp)
                _mm512_store_ps(t + (r * wp + c) * 16, z);
        }
    }
    for (int64_t ih = 0; ih < f->h; ih++) {
        int64_t r = ih + f->ph;
        if (r >= hp)
            break;
        for (int64_t w0 = 0; w0 < f->w; w0 += 16) {
            __m512 v[16];
            __mmask16 cols = lanes(f->w - w0);
            for (int l = 0; l < 16; l++)
                v[l] = l < n ? _mm512_maskz_loadu_ps(cols, x + l * hw + ih * f->w + w0)
                             : _mm512_setzero_ps();
            transpose16(v);
            for (int k = 0; k < 16 && w0 + k < f->w; k++) {
                int64_t c = w0 + k + f->pw;
                if (c < wp)
                    _mm512_store_ps(t + (r * wp + c) * 16, v[k]);
            }
        }
    }
    /* The taps, 16 at a time from each channel's K*K weights, transposed to one vector a tap. */
    __m512 wv[K * K];
    for (int b = 0; b < K * K; b += 16) {
        __m512 v[16];
        __mmask16 tm = lanes(K * K - b);
        for (int l = 0; l < 16; l++)
            v[l] = l < n ? _mm512_maskz_loadu_ps(tm, f->wt + (c0 + l) * K * K + b)
                         : _mm512_setzero_ps();
        transpose16(v);
        for (int k = 0; k < 16 && b + k < K * K; k++)
            wv[b + k] = v[k];
    }
    __mmask16 m = (__mmask16)((1u << n) - 1);
    __m512 vb = f->bias != NULL ? _mm512_maskz_loadu_ps(m, f->bias + c0) : _mm512_setzero_ps();
    __m512 vlo = _mm512_set1_ps(f->lo), vhi = _mm512_set1_ps(f->hi);
    for (int64_t oh = 0; oh < f->oh; oh++)
        for (int64_t ow0 = 0; ow0 < f->ow; ow0 += 16) {
            __m512 out[16];
            for (int64_t ow = ow0; ow < ow0 + 16; ow += 4) {
                __m512 acc[4] = {vb, vb, vb, vb};
                if (ow < f->ow)
                    for (int ky = 0; ky < K; ky++) {
                        const float *row = t + ((oh * s + ky) * wp + ow * s) * 16;
                        for (int kx = 0; kx < K; kx++)
                            for (int q = 0; q < 4; q++)
                                if (ow + q < f->ow)
                                    acc[q] = _mm512_fmadd_ps(
                                        wv[ky * K + kx], _mm512_load_ps(row + (q * s + kx) * 16),
                                        acc[q]);
                    }
                for (int q = 0; q < 4; q++)
                    out[ow - ow0 + q] = acc[q];
            }
            transpose16(out);
            __mmask16 om = lanes(f->ow - ow0);
            for (int l = 0; l < n; l++) {
                int64_t o = (c0 + l) * os + oh * f->ow + ow0;
                __m512 v = out[l];
                if (f->res != NULL)
                    v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(om, f->res + o));
                if (f->clamp)
                    v = _mm512_min_ps(_mm512_max_ps(v, vlo), vhi);
                _mm512_mask_storeu_ps(f->y + o, om, v);
            }
        }
}

AVX512 static void dw_c16_k3(const kn_dwc16 *f, int64_t c0) {
    dw_c16(f, c0, 3);
}

AVX512 static void dw_c16_k5(const kn_dwc16 *f, int64_t c0) {
    dw_c16(f, c0, 5);
}

AVX512 static void dw_c16_k7(const kn_dwc16 *f, int64_t c0) {
    dw_c16(f, c0, 7);
}

void kn_cpu_dw_c16_avx512(const kn_dwc16 *f, int64_t c0) {
    if (f->k == 3)
        dw_c16_k3(f, c0);
    else if (f->k == 5)
        dw_c16_k5(f, c0);
    else
        dw_c16_k7(f, c0);
}

AVX512 static void split_phases(const float *x, int64_t hq, int64_t wq, float *out) {
    __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    int64_t ps = hq * wq;
    for (int64_t r = 0; r < 2 * hq; r++) {
        const float *src = x + r * 2 * wq;
        float *e = out + (r % 2) * 2 * ps + (r / 2) * wq, *o = e + ps;
        for (int64_t j = 0; j < wq; j += 16) {
            __mmask16 m = lanes(wq - j);
            __m512 lo = _mm512_maskz_loadu_ps(lanes(2 * (wq - j)), src + 2 * j);
            __m512 hi = _mm512_maskz_loadu_ps(lanes(2 * (wq - j) - 16), src + 2 * j + 16);
            _mm512_mask_storeu_ps(e + j, m, _mm512_permutex2var_ps(lo, even, hi));
            _mm512_mask_storeu_ps(o + j, m, _mm512_permutex2var_ps(lo, odd, hi));
        }
    }
}

void kn_cpu_dw_split_phases_avx512(const float *x, int64_t hq, int64_t wq, float *out) {
    split_phases(x, hq, wq, out);
}

/* Input column 2k + par goes to column k + d of the phase plane with column parity cp, where
 * par = (cp - pw) mod 2 and d = (pw + par - cp) / 2. */
/* Short runs: a libc call per border column costs more than the row. */
AVX512 static inline void zero(float *p, int64_t n) {
    for (int64_t q = 0; q < n; q += 16)
        _mm512_mask_storeu_ps(p + q, lanes(n - q), _mm512_setzero_ps());
}

AVX512 static void pad_split(const float *x, int64_t h, int64_t w, int64_t ph, int64_t pw,
                             int64_t hq, int64_t wq, int64_t r0, int64_t r1, float *out) {
    __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    int64_t ps = hq * wq;
    for (int64_t r = r0; r < r1; r++) {
        float *rows[2] = {out + (r % 2) * 2 * ps + (r / 2) * wq,
                          out + ((r % 2) * 2 + 1) * ps + (r / 2) * wq};
        int64_t ih = r - ph;
        if (ih < 0 || ih >= h) {
            zero(rows[0], wq);
            zero(rows[1], wq);
            continue;
        }
        const float *src = x + ih * w;
        float *dst[2];
        int64_t n[2];
        for (int par = 0; par < 2; par++) {
            int cp = (par + (int)(pw % 2)) % 2;
            int64_t d = (pw + par - cp) / 2;
            int64_t cnt = (w - par + 1) / 2;
            cnt = cnt < wq - d ? cnt : wq - d;
            cnt = cnt > 0 ? cnt : 0;
            d = d < wq ? d : wq;
            zero(rows[cp], d);
            zero(rows[cp] + d + cnt, wq - d - cnt);
            dst[par] = rows[cp] + d;
            n[par] = cnt;
        }
        for (int64_t k = 0; k < n[0] || k < n[1]; k += 16) {
            __m512 lo = _mm512_maskz_loadu_ps(lanes(w - 2 * k), src + 2 * k);
            __m512 hi = _mm512_maskz_loadu_ps(lanes(w - 2 * k - 16), src + 2 * k + 16);
            _mm512_mask_storeu_ps(dst[0] + k, lanes(n[0] - k),
                                  _mm512_permutex2var_ps(lo, even, hi));
            _mm512_mask_storeu_ps(dst[1] + k, lanes(n[1] - k), _mm512_permutex2var_ps(lo, odd, hi));
        }
    }
}

void kn_cpu_dw_pad_split_avx512(const float *x, int64_t h, int64_t w, int64_t ph, int64_t pw,
                                int64_t hq, int64_t wq, float *out) {
    pad_split(x, h, w, ph, pw, hq, wq, 0, 2 * hq, out);
}

void kn_cpu_dw_pad_split_rows_avx512(const float *x, int64_t h, int64_t w, int64_t ph, int64_t pw,
                                     int64_t hq, int64_t wq, int64_t r0, int64_t r1, float *out) {
    pad_split(x, h, w, ph, pw, hq, wq, r0, r1, out);
}

AVX512 static void pad(const float *x, int64_t h, int64_t w, int64_t ph, int64_t pw, int64_t wp,
                       int64_t r0, int64_t r1, float *out) {
    for (int64_t r = r0; r < r1; r++) {
        float *d = out + r * wp;
        int64_t ih = r - ph;
        if (ih < 0 || ih >= h) {
            zero(d, wp);
            continue;
        }
        zero(d, pw);
        const float *s = x + ih * w;
        for (int64_t c = 0; c < w; c += 16)
            _mm512_mask_storeu_ps(d + pw + c, lanes(w - c),
                                  _mm512_maskz_loadu_ps(lanes(w - c), s + c));
        zero(d + pw + w, wp - pw - w);
    }
}

void kn_cpu_dw_pad_avx512(const float *x, int64_t h, int64_t w, int64_t ph, int64_t pw, int64_t hp,
                          int64_t wp, float *out) {
    pad(x, h, w, ph, pw, wp, 0, hp, out);
}

void kn_cpu_dw_pad_rows_avx512(const float *x, int64_t h, int64_t w, int64_t ph, int64_t pw,
                               int64_t wp, int64_t r0, int64_t r1, float *out) {
    pad(x, h, w, ph, pw, wp, r0, r1, out);
}

#else

void kn_cpu_dw_row_avx512(const kn_dw_row *r) {
    (void)r;
}

void kn_cpu_dw_plane_flat_avx512(const kn_dw_flat *f) {
    (void)f;
}

void kn_cpu_dw3_plane_avx512(const kn_dw_flat *f, int stride) {
    (void)f;
    (void)stride;
}

void kn_cpu_dw_c16_avx512(const kn_dwc16 *f, int64_t c0) {
    (void)f;
    (void)c0;
}

void kn_cpu_dw_split_phases_avx512(const float *x, int64_t hq, int64_t wq, float *out) {
    (void)x;
    (void)hq;
    (void)wq;
    (void)out;
}

void kn_cpu_dw_pad_avx512(const float *x, int64_t h, int64_t w, int64_t ph, int64_t pw, int64_t hp,
                          int64_t wp, float *out) {
    (void)x;
    (void)h;
    (void)w;
    (void)ph;
    (void)pw;
    (void)hp;
    (void)wp;
    (void)out;
}

void kn_cpu_dw_pad_split_avx512(const float *x, int64_t h, int64_t w, int64_t ph, int64_t pw,
                                int64_t hq, int64_t wq, float *out) {
    (void)x;
    (void)h;
    (void)w;
    (void)ph;
    (void)pw;
    (void)hq;
    (void)wq;
    (void)out;
}

void kn_cpu_dw_pad_rows_avx512(const float *x, int64_t h, int64_t w, int64_t ph, int64_t pw,
                               int64_t wp, int64_t r0, int64_t r1, float *out) {
    (void)x, (void)h, (void)w, (void)ph, (void)pw, (void)wp, (void)r0, (void)r1, (void)out;
}

void kn_cpu_dw_pad_split_rows_avx512(const float *x, int64_t h, int64_t w, int64_t ph, int64_t pw,
                                     int64_t hq, int64_t wq, int64_t r0, int64_t r1, float *out) {
    (void)x, (void)h, (void)w, (void)ph, (void)pw, (void)hq, (void)wq, (void)r0, (void)r1,
        (void)out;
}

#endif
