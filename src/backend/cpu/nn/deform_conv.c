/* DeformConv (2-D): bilinear samples at offset kernel taps, zero outside the image. */
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

kiln_status kn_cpu_deform_conv(kn_kernel_ctx *k) {
    deform_job j = {.og = kn_attr_int(k->node, "offset_group", 1)};
    KN_TRY(kn_conv_geom_init(k->node, &k->in[0].shape, &k->in[1].shape, false, &j.g));
    kn_cpu_f32 x = {0}, w = {0}, off = {0}, bias = {0}, mask = {0}, y = {0};
    kiln_status rc = kn_cpu_f32_in(&k->in[0], &x);
    if (rc == KILN_OK)
        rc = kn_cpu_f32_in(&k->in[1], &w);
    if (rc == KILN_OK)
        rc = kn_cpu_f32_in(&k->in[2], &off);
    if (rc == KILN_OK && k->n_in > 3 && k->in[3].dtype != 0)
        rc = kn_cpu_f32_in(&k->in[3], &bias);
    if (rc == KILN_OK && k->n_in > 4 && k->in[4].dtype != 0)
        rc = kn_cpu_f32_in(&k->in[4], &mask);
    if (rc == KILN_OK)
        rc = kn_cpu_f32_out(&k->out[0], &y);
    if (rc == KILN_OK) {
        j.x = x.p;
        j.w = w.p;
        j.off = off.p;
        j.bias = bias.p;
        j.mask = mask.p;
        j.y = y.p;
        kn_parallel_for(k->pool, j.g.n * j.g.c_out, 1, deform_range, &j);
        kn_cpu_f32_commit(&k->out[0], &y);
    }
    kn_cpu_f32_release(&y);
    kn_cpu_f32_release(&mask);
    kn_cpu_f32_release(&bias);
    kn_cpu_f32_release(&off);
    kn_cpu_f32_release(&w);
    kn_cpu_f32_release(&x);
    return rc;
}
