/* AVX-512 depthwise row kernel: 16 outputs per vector, every tap accumulated in a register, the
 * bias, residual and clamp applied before the single store. Stride 2 de-interleaves two loads;
 * other strides gather. */
#include "backend/cpu/nn_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

__attribute__((target("avx512f"))) static inline __m512 load_taps(const float *p, int64_t sw, int n,
                                                                  __m512i idx2, __m512i idxs) {
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

__attribute__((target("avx512f"))) static void row(const kn_dw_row *r, int64_t ow0, int64_t ow1) {
    const kn_conv2d *c = r->c;
    __m512i idx2 = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    __m512i idxs =
        _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                           _mm512_set1_epi32((int)c->sw));
    __m512 vlo = _mm512_set1_ps(r->lo), vhi = _mm512_set1_ps(r->hi);
    for (int64_t ow = ow0; ow < ow1; ow += 16) {
        int n = ow1 - ow < 16 ? (int)(ow1 - ow) : 16;
        __mmask16 m = (__mmask16)((1u << n) - 1);
        __m512 acc = _mm512_set1_ps(r->bias);
        for (int64_t ky = r->ky0; ky < r->ky1; ky++) {
            const float *xr = r->x + (r->oh * c->sh - c->ph + ky * c->dh) * c->w;
            const float *wr = r->w + ky * c->kw;
            for (int64_t kx = 0; kx < c->kw; kx++) {
                const float *p = xr + ow * c->sw - c->pw + kx * c->dw;
                acc = _mm512_fmadd_ps(_mm512_set1_ps(wr[kx]), load_taps(p, c->sw, n, idx2, idxs),
                                      acc);
            }
        }
        if (r->res != NULL)
            acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, r->res + ow));
        if (r->clamp)
            acc = _mm512_min_ps(_mm512_max_ps(acc, vlo), vhi);
        _mm512_mask_storeu_ps(r->y + ow, m, acc);
    }
}

void kn_cpu_dw_row_avx512(const kn_dw_row *r, int64_t ow0, int64_t ow1) {
    row(r, ow0, ow1);
}

#else

void kn_cpu_dw_row_avx512(const kn_dw_row *r, int64_t ow0, int64_t ow1) {
    (void)r;
    (void)ow0;
    (void)ow1;
}

#endif
