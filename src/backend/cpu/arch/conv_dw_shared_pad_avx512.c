/* AVX-512 k x k depthwise (k = 3, 5, 7), stride 1, k / 2 padding on every side, on small planes
 * (kn_cpu_dw_shared_pad_avx512): each plane is copied into a buffer whose rows are w + k / 2
 * floats apart, the k / 2 columns after a row being zeros that serve as the right padding of
 * that row and the left padding of the next one. In that layout every tap of every output is
 * one fixed offset from the output's position (rows above and below the plane are zero too),
 * so the flattened plane is computed 16 positions a vector with plain loads and no masks:
 * 7x7 planes are 4 vectors for 3x3 and 5x5 (pitch 8 and 9), where full padding on both sides
 * (pitch w + k - 1) would take 5 and 6.
 * - The copy in is one masked load and one register expand a vector (the zero columns come
 *   from the expand); planes are copied one ahead of the one computed, so the plane's loads
 *   do not wait on the stores just made.
 * - Taps outer, up to 8 vectors inner (two accumulator chains a vector below 6 vectors), the
 *   weight broadcast once a tap.
 * - The epilogue (bias, residual expanded to the same layout, Clip, Sigmoid or SiLU) runs on the
 *   vectors in registers; a register compress drops the padding columns before one masked
 *   store a vector. */
#include "backend/cpu/nn/conv.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include "backend/cpu/arch/act_avx512.h"

#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f")))
#define INLINE __attribute__((always_inline)) static inline

#define GROUP 8 /* vectors a pass over the taps */

typedef kn_dw_shared_pad_layout layout;

AVX512 INLINE void copy_in(const layout *L, const float *x, float *buf) {
    for (int64_t v = 0; v < L->nv; v++) {
        __m512 in = _mm512_maskz_loadu_ps(L->first[v], x + L->at[v]);
        _mm512_store_ps(buf + L->base + 16 * v, _mm512_maskz_expand_ps(L->mask[v], in));
    }
}

AVX512 INLINE void group(const layout *L, const kn_dwd *d, const float *buf, int64_t v0,
                         const int K, const int NV) {
    const int CH = NV >= 6 ? 1 : 2;
    __m512 acc[GROUP][2];
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++) {
        acc[v][0] = _mm512_set1_ps(d->bias);
        acc[v][1] = _mm512_setzero_ps();
    }
    const float *p = buf + L->base + 16 * v0;
#pragma GCC unroll 49
    for (int t = 0; t < K * K; t++) {
        __m512 w = _mm512_set1_ps(d->wt[t]);
        const float *q = p + L->off[t];
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++)
            acc[v][t % CH] = _mm512_fmadd_ps(w, _mm512_loadu_ps(q + 16 * v), acc[v][t % CH]);
    }
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++) {
        int64_t g = v0 + v;
        __m512 a = CH == 2 ? _mm512_add_ps(acc[v][0], acc[v][1]) : acc[v][0];
        __mmask16 m = L->first[g];
        if (d->res != NULL)
            a = _mm512_add_ps(
                a, _mm512_maskz_expand_ps(L->mask[g], _mm512_maskz_loadu_ps(m, d->res + L->at[g])));
        a = kn_act_in_regs512(d->act, a, d->lo, d->hi);
        _mm512_mask_storeu_ps(d->y + L->at[g], m, _mm512_maskz_compress_ps(L->mask[g], a));
    }
}

AVX512 INLINE void plane(const layout *L, const kn_dwd *d, const float *buf, const int K) {
    int64_t v0 = 0;
    for (; v0 + GROUP <= L->nv; v0 += GROUP)
        group(L, d, buf, v0, K, GROUP);
    switch (L->nv - v0) {
    case 1:
        group(L, d, buf, v0, K, 1);
        break;
    case 2:
        group(L, d, buf, v0, K, 2);
        break;
    case 3:
        group(L, d, buf, v0, K, 3);
        break;
    case 4:
        group(L, d, buf, v0, K, 4);
        break;
    case 5:
        group(L, d, buf, v0, K, 5);
        break;
    case 6:
        group(L, d, buf, v0, K, 6);
        break;
    case 7:
        group(L, d, buf, v0, K, 7);
        break;
    default:
        break;
    }
}

AVX512 INLINE void planes(const layout *L, const kn_dw_shared_pad *s, float *buf, int64_t p0,
                          int64_t p1, const int K) {
    int64_t is = s->d.h * s->d.w, ks = (int64_t)K * K;
    copy_in(L, s->d.x + p0 * is, buf);
    for (int64_t p = p0; p < p1; p++) {
        float *cur = buf + ((p - p0) & 1) * L->stride;
        if (p + 1 < p1)
            copy_in(L, s->d.x + (p + 1) * is, buf + ((p + 1 - p0) & 1) * L->stride);
        int64_t ch = p % s->channels;
        kn_dwd d = s->d;
        d.wt += ch * ks;
        d.bias = s->bias != NULL ? s->bias[ch] : 0.0f;
        d.res = d.res != NULL ? d.res + p * is : NULL;
        d.y += p * is;
        plane(L, &d, cur, K);
    }
}

AVX512 static void planes_3(const layout *L, const kn_dw_shared_pad *s, float *buf, int64_t p0,
                            int64_t p1) {
    planes(L, s, buf, p0, p1, 3);
}

AVX512 static void planes_5(const layout *L, const kn_dw_shared_pad *s, float *buf, int64_t p0,
                            int64_t p1) {
    planes(L, s, buf, p0, p1, 5);
}

AVX512 static void planes_7(const layout *L, const kn_dw_shared_pad *s, float *buf, int64_t p0,
                            int64_t p1) {
    planes(L, s, buf, p0, p1, 7);
}

/* Vectors of the flattened plane at pitch w + k / 2, or 0 where the plane is not this
 * kernel's. */
static int64_t vectors(int64_t h, int64_t w, int k) {
    if ((k != 3 && k != 5 && k != 7) || h < 1 || w < 1 || w + k / 2 > KN_DW_SHARED_PAD_MAX_PITCH)
        return 0;
    int64_t nv = (h * (w + k / 2) + 15) / 16;
    return nv <= KN_DW_SHARED_PAD_MAX_VECTORS ? nv : 0;
}

bool kn_cpu_dw_shared_pad_fits(int64_t h, int64_t w, int k) {
    return vectors(h, w, k) > 0;
}

void kn_cpu_dw_shared_pad_init(kn_dw_shared_pad *s) {
    const kn_dwd *d = &s->d;
    layout *L = &s->layout;
    int K = d->k, P = K / 2;
    L->pitch = d->w + P;
    L->nv = vectors(d->h, d->w, K);
    /* Element (0, 0) sits where P rows and P columns of zeros fit before it, 64-byte aligned. */
    L->base = (P * L->pitch + P + 15) / 16 * 16;
    L->stride = (L->base + 16 * L->nv + P * L->pitch + P + 16 + 15) / 16 * 16;
    int32_t at = 0;
    for (int64_t v = 0; v < L->nv; v++) {
        uint16_t m = 0;
        for (int i = 0; i < 16; i++) {
            int64_t q = 16 * v + i;
            if (q < d->h * L->pitch && q % L->pitch < d->w)
                m |= (uint16_t)(1u << i);
        }
        L->mask[v] = m;
        L->at[v] = at;
        L->first[v] = (uint16_t)((1u << __builtin_popcount(m)) - 1);
        at += __builtin_popcount(m);
    }
    for (int ky = 0; ky < K; ky++)
        for (int kx = 0; kx < K; kx++)
            L->off[ky * K + kx] = (ky - P) * L->pitch + (kx - P);
}

void kn_cpu_dw_shared_pad_avx512(const kn_dw_shared_pad *s, int64_t p0, int64_t p1) {
    const layout *L = &s->layout;
    if (p1 <= p0)
        return;
    float buf[2 * KN_DW_SHARED_PAD_BUFFER] __attribute__((aligned(64)));
    /* Only the zeros around the planes: the copies write every vector in between. */
    for (int b = 0; b < 2; b++) {
        float *z = buf + b * L->stride;
        memset(z, 0, (size_t)L->base * sizeof(float));
        memset(z + L->base + 16 * L->nv, 0,
               (size_t)(L->stride - L->base - 16 * L->nv) * sizeof(float));
    }
    if (s->d.k == 3)
        planes_3(L, s, buf, p0, p1);
    else if (s->d.k == 5)
        planes_5(L, s, buf, p0, p1);
    else
        planes_7(L, s, buf, p0, p1);
}

#else

bool kn_cpu_dw_shared_pad_fits(int64_t h, int64_t w, int k) {
    (void)h;
    (void)w;
    (void)k;
    return false;
}

void kn_cpu_dw_shared_pad_init(kn_dw_shared_pad *s) {
    (void)s;
}

void kn_cpu_dw_shared_pad_avx512(const kn_dw_shared_pad *s, int64_t p0, int64_t p1) {
    (void)s;
    (void)p0;
    (void)p1;
}

#endif
