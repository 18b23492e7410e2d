/* AVX-512 im2col panel packer for 2-D convs whose taps read contiguous runs of an input row
 * (stride 1, or stride 2 over the even/odd column halves). A panel's split into output-row
 * segments is computed once and reused for every kernel row; each segment is copied with masked
 * loads and stores instead of a library call, which on short segments (28- or 14-wide maps,
 * 32-wide panels) cost more than the copy itself. */
#include "backend/cpu/nn/conv.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f")))
#define NR 32
#define MAX_SEGS (NR + 2)

AVX512 static inline __mmask16 lanes(int64_t n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

/* n <= 32 floats from s to d. */
AVX512 static inline void copy(float *d, const float *s, int64_t n) {
    _mm512_mask_storeu_ps(d, lanes(n), _mm512_maskz_loadu_ps(lanes(n), s));
    if (n > 16)
        _mm512_mask_storeu_ps(d + 16, lanes(n - 16), _mm512_maskz_loadu_ps(lanes(n - 16), s + 16));
}

AVX512 static inline void zero(float *d, int64_t n) {
    _mm512_mask_storeu_ps(d, lanes(n), _mm512_setzero_ps());
    if (n > 16)
        _mm512_mask_storeu_ps(d + 16, lanes(n - 16), _mm512_setzero_ps());
}

AVX512 static void pack(const kn_im2col2d *g, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
                        float *dst) {
    for (int64_t p = 0; p * NR < nc; p++) {
        float *d = dst + p * kc * NR;
        int64_t col0 = n0 + p * NR, cols = nc - p * NR < NR ? nc - p * NR : NR;
        int64_t soh[MAX_SEGS], sow[MAX_SEGS], slen[MAX_SEGS], sj[MAX_SEGS];
        int ns = 0;
        for (int64_t j = 0, oh = col0 / g->ow, ow = col0 % g->ow; j < cols; ns++) {
            int64_t len = cols - j < g->ow - ow ? cols - j : g->ow - ow;
            soh[ns] = oh * g->sh - g->ph;
            sow[ns] = ow;
            slen[ns] = len;
            sj[ns] = j;
            j += len;
            ow += len;
            if (ow == g->ow) {
                ow = 0;
                oh++;
            }
        }
        int64_t kx = k0 % g->kw, t = k0 / g->kw, ky = t % g->kh, ci = t / g->kh;
        for (int64_t kk = 0; kk < kc; kk++) {
            float *r = d + kk * NR;
            if (cols < NR)
                zero(r + cols, NR - cols);
            const float *xc = g->x + ci * g->plane + g->hoff[kx];
            int64_t xo = g->xoff[kx], wd = g->width[kx], dy = ky * g->dh;
            for (int s = 0; s < ns; s++) {
                int64_t ih = soh[s] + dy, len = slen[s];
                float *o = r + sj[s];
                if (ih < 0 || ih >= g->h) {
                    zero(o, len);
                    continue;
                }
                const float *src = xc + ih * g->row;
                int64_t c0 = sow[s] + xo;
                int64_t lo = c0 >= 0 ? 0 : -c0, hi = wd - c0 < len ? wd - c0 : len;
                if (lo == 0 && hi == len) {
                    copy(o, src + c0, len);
                    continue;
                }
                zero(o, len);
                if (hi > lo)
                    copy(o + lo, src + c0 + lo, hi - lo);
            }
            if (++kx == g->kw) {
                kx = 0;
                if (++ky == g->kh) {
                    ky = 0;
                    ci++;
                }
            }
        }
    }
}

void kn_cpu_im2col_pack_avx512(const kn_im2col2d *g, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
                               float *dst) {
    pack(g, k0, kc, n0, nc, dst);
}

#else

void kn_cpu_im2col_pack_avx512(const kn_im2col2d *g, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
                               float *dst) {
    (void)g;
    (void)k0;
    (void)kc;
    (void)n0;
    (void)nc;
    (void)dst;
}

#endif
