/* Depthwise convolution: each channel convolved with its own kernel. One output row is built
 * in place from kh*kw scaled input rows (contiguous for stride 1, so the loop vectorizes), then
 * the residual and activation are applied while the row is in L1. Channels run in parallel. */
#include "backend/cpu/nn_internal.h"

typedef struct dw_job {
    const kn_conv2d *c;
    int64_t channels;
    const float *x, *w;
    const kn_epilogue *ep;
    float *y;
} dw_job;

KN_CLONES static void axpy_s1(float *y, const float *x, float a, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

KN_CLONES static void axpy_s2(float *y, const float *x, float a, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[2 * i];
}

static void axpy_strided(float *y, const float *x, int64_t s, float a, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i * s];
}

static void dw_plane(const dw_job *j, int64_t plane) {
    const kn_conv2d *c = j->c;
    int64_t ch = plane % j->channels;
    const float *x = j->x + plane * c->h * c->w;
    const float *w = j->w + ch * c->kh * c->kw;
    float *y = j->y + plane * c->oh * c->ow;
    float b = j->ep->bias != NULL ? j->ep->bias[ch] : 0.0f;
    for (int64_t oh = 0; oh < c->oh; oh++) {
        float *row = y + oh * c->ow;
        for (int64_t ow = 0; ow < c->ow; ow++)
            row[ow] = b;
        for (int64_t ky = 0; ky < c->kh; ky++) {
            int64_t ih = oh * c->sh - c->ph + ky * c->dh;
            if (ih < 0 || ih >= c->h)
                continue;
            const float *xr = x + ih * c->w;
            for (int64_t kx = 0; kx < c->kw; kx++) {
                int64_t iw0 = kx * c->dw - c->pw;
                int64_t lo = iw0 >= 0 ? 0 : (-iw0 + c->sw - 1) / c->sw;
                int64_t hi = iw0 >= c->w ? 0 : (c->w - iw0 + c->sw - 1) / c->sw;
                hi = hi < c->ow ? hi : c->ow;
                if (hi <= lo)
                    continue;
                float wv = w[ky * c->kw + kx];
                const float *src = xr + iw0 + lo * c->sw;
                if (c->sw == 1)
                    axpy_s1(row + lo, src, wv, hi - lo);
                else if (c->sw == 2)
                    axpy_s2(row + lo, src, wv, hi - lo);
                else
                    axpy_strided(row + lo, src, c->sw, wv, hi - lo);
            }
        }
    }
    kn_epilogue e = *j->ep;
    e.bias = NULL;
    e.residual = e.residual != NULL ? e.residual + plane * c->oh * c->ow : NULL;
    e.ldr = c->ow;
    if (e.residual != NULL || e.act != KN_ACT_NONE)
        kn_epilogue_apply(&e, y, c->ow, 0, 0, c->oh, c->ow);
}

static void dw_range(void *arg, int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; p++)
        dw_plane(arg, p);
}

void kn_cpu_conv_depthwise(kn_threadpool *pool, const kn_conv_geom *g, const float *x,
                           const float *w, const kn_epilogue *ep, float *y) {
    kn_conv2d c;
    kn_conv_as_2d(g, &c);
    dw_job j = {.c = &c, .channels = g->c_in, .x = x, .w = w, .ep = ep, .y = y};
    kn_parallel_for(pool, g->n * g->c_in, 1, dw_range, &j);
}
