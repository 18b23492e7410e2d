/* Kernels that sample an input at computed coordinates: DeformConv (2-D, bilinear samples at
 * offset kernel taps, zero outside the image) and AffineGrid. */
#include "backend/cpu/f32_stage.h"
#include "core/alloc.h"
#include "ops/nn/conv_geom.h"

#include <math.h>

typedef struct deform_job {
    kn_conv_geom g;
    const float *x, *w, *off, *mask, *bias;
    float *y;
    int64_t og;
} deform_job;

static float bilinear(const float *img, int64_t h, int64_t w, float py, float px) {
    /* Also rejects NaN, and keeps the integer conversions below in range. */
    if (!(py > -1.0f && py < (float)h && px > -1.0f && px < (float)w))
        return 0.0f;
    float fy = floorf(py), fx = floorf(px);
    int64_t y0 = (int64_t)fy, x0 = (int64_t)fx;
    float dy = py - fy, dx = px - fx;
    float v = 0.0f;
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            int64_t yy = y0 + a, xx = x0 + b;
            if (yy < 0 || yy >= h || xx < 0 || xx >= w)
                continue;
            float wt = (a ? dy : 1.0f - dy) * (b ? dx : 1.0f - dx);
            v += wt * img[yy * w + xx];
        }
    return v;
}

static void deform_range(void *arg, int64_t begin, int64_t end) {
    const deform_job *j = arg;
    const kn_conv_geom *g = &j->g;
    int64_t ih = g->in[0], iw = g->in[1], oh = g->out[0], ow = g->out[1];
    int64_t kh = g->k[0], kw = g->k[1], cg = g->c_in / g->group, mg = g->c_out / g->group;
    int64_t c_per_og = g->c_in / j->og, osp = oh * ow;
    for (int64_t nm = begin; nm < end; nm++) {
        int64_t b = nm / g->c_out, m = nm % g->c_out, grp = m / mg;
        for (int64_t oi = 0; oi < oh; oi++)
            for (int64_t oj = 0; oj < ow; oj++) {
                float acc = j->bias != NULL ? j->bias[m] : 0.0f;
                for (int64_t c = 0; c < cg; c++) {
                    int64_t ic = grp * cg + c, ogi = ic / c_per_og;
                    const float *img = j->x + (b * g->c_in + ic) * ih * iw;
                    for (int64_t a = 0; a < kh; a++)
                        for (int64_t e = 0; e < kw; e++) {
                            int64_t tap = (ogi * kh + a) * kw + e;
                            const float *o = j->off + (b * j->og * kh * kw * 2 + tap * 2) * osp;
                            float py = (float)(oi * g->stride[0] - g->pad_b[0] + a * g->dil[0]) +
                                       o[oi * ow + oj];
                            float px = (float)(oj * g->stride[1] - g->pad_b[1] + e * g->dil[1]) +
                                       o[osp + oi * ow + oj];
                            float v = bilinear(img, ih, iw, py, px);
                            if (j->mask != NULL)
                                v *= j->mask[(b * j->og * kh * kw + tap) * osp + oi * ow + oj];
                            acc += v * j->w[((m * cg + c) * kh + a) * kw + e];
                        }
                }
                j->y[nm * osp + oi * ow + oj] = acc;
            }
    }
}

kiln_status cpu_extra_deform_conv(kn_kernel_ctx *k) {
    deform_job j = {.og = kn_attr_int(k->node, "offset_group", 1)};
    KN_TRY(kn_conv_geom_init(k->node, &k->in[0].shape, &k->in[1].shape, false, &j.g));
    cpu_xf32 x = {0}, w = {0}, off = {0}, bias = {0}, mask = {0}, y = {0};
    kiln_status rc = cpu_extra_in_f32(&k->in[0], &x);
    if (rc == KILN_OK)
        rc = cpu_extra_in_f32(&k->in[1], &w);
    if (rc == KILN_OK)
        rc = cpu_extra_in_f32(&k->in[2], &off);
    if (rc == KILN_OK && k->n_in > 3 && k->in[3].dtype != 0)
        rc = cpu_extra_in_f32(&k->in[3], &bias);
    if (rc == KILN_OK && k->n_in > 4 && k->in[4].dtype != 0)
        rc = cpu_extra_in_f32(&k->in[4], &mask);
    if (rc == KILN_OK)
        rc = cpu_extra_out_f32(&k->out[0], &y);
    if (rc == KILN_OK) {
        j.x = x.p;
        j.w = w.p;
        j.off = off.p;
        j.bias = bias.p;
        j.mask = mask.p;
        j.y = y.p;
        kn_parallel_for(k->pool, j.g.n * j.g.c_out, 1, deform_range, &j);
        cpu_extra_commit(&k->out[0], &y);
    }
    cpu_extra_release(&y);
    cpu_extra_release(&mask);
    cpu_extra_release(&bias);
    cpu_extra_release(&off);
    cpu_extra_release(&w);
    cpu_extra_release(&x);
    return rc;
}

/* Normalised coordinate of sample i of n along one axis. */
static double grid_coord(int64_t i, int64_t n, bool align) {
    if (align)
        return n > 1 ? -1.0 + 2.0 * (double)i / (double)(n - 1) : -1.0;
    return -1.0 + (2.0 * (double)i + 1.0) / (double)n;
}

kiln_status cpu_extra_affine_grid(kn_kernel_ctx *k) {
    const kn_tensor *theta = &k->in[0];
    kn_tensor *y = &k->out[0];
    bool align = kn_attr_int(k->node, "align_corners", 0) != 0;
    int nd = y->shape.rank - 2; /* 2 or 3 spatial dims */
    int64_t n = y->shape.d[0], d = nd == 3 ? y->shape.d[1] : 1;
    int64_t h = y->shape.d[nd == 3 ? 2 : 1], w = y->shape.d[nd == 3 ? 3 : 2];
    int64_t cols = nd + 1;
    for (int64_t b = 0; b < n; b++)
        for (int64_t z = 0; z < d; z++)
            for (int64_t r = 0; r < h; r++)
                for (int64_t c = 0; c < w; c++) {
                    double p[4] = {grid_coord(c, w, align), grid_coord(r, h, align),
                                   nd == 3 ? grid_coord(z, d, align) : 1.0, 1.0};
                    int64_t base = (((b * d + z) * h + r) * w + c) * nd;
                    for (int o = 0; o < nd; o++) {
                        double acc = 0.0;
                        for (int e = 0; e < cols; e++)
                            acc += kn_tensor_get_f64(theta, (b * nd + o) * cols + e) * p[e];
                        kn_tensor_set_f64(y, base + o, acc);
                    }
                }
    return KILN_OK;
}
