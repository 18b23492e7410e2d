/* AVX-512 depthwise row kernel: 16 outputs per vector, every tap accumulated in a register, the
 * bias, residual and clamp applied before the single store. Stride 2 de-interleaves two loads.
 * Near the borders only the lanes whose tap is inside the input are loaded (expand-load or a
 * masked gather from the first valid element), so no address outside the input is formed. */
#include "backend/cpu/nn_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

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

AVX512 static void row(const kn_dw_row *r) {
    const kn_conv2d *c = r->c;
    __m512i idx2 = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    __m512i idxs =
        _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                           _mm512_set1_epi32((int)c->sw));
    __m512 vlo = _mm512_set1_ps(r->lo_clamp), vhi = _mm512_set1_ps(r->hi_clamp);
    for (int64_t ow = 0; ow < c->ow; ow += 16) {
        int n = c->ow - ow < 16 ? (int)(c->ow - ow) : 16;
        __mmask16 m = (__mmask16)((1u << n) - 1);
        __m512 acc = _mm512_set1_ps(r->bias);
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
                acc = _mm512_fmadd_ps(_mm512_set1_ps(wr[kx]), v, acc);
            }
        }
        if (r->res != NULL)
            acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, r->res + ow));
        if (r->clamp)
            acc = _mm512_min_ps(_mm512_max_ps(acc, vlo), vhi);
        _mm512_mask_storeu_ps(r->y + ow, m, acc);
    }
}

void kn_cpu_dw_row_avx512(const kn_dw_row *r) {
    row(r);
}

#else

void kn_cpu_dw_row_avx512(const kn_dw_row *r) {
    (void)r;
}

#endif
