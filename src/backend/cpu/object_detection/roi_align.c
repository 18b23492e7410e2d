/* RoiAlign. */
#include "backend/cpu/element_access.h"

#include <math.h>
#include <string.h>

/* ---- RoiAlign ---- */

#define KN_ROI_MAX_SAMPLES (1 << 20)

typedef struct roi_tap {
    int64_t pos[4];
    double w[4];
} roi_tap;

static void roi_bilinear(double y, double x, int64_t h, int64_t w, roi_tap *t) {
    memset(t, 0, sizeof *t);
    if (!(y >= -1.0 && y <= (double)h && x >= -1.0 && x <= (double)w)) /* NaN too */
        return;
    y = y < 0.0 ? 0.0 : y;
    x = x < 0.0 ? 0.0 : x;
    int64_t y0 = (int64_t)y, x0 = (int64_t)x, y1, x1;
    if (y0 >= h - 1) {
        y0 = y1 = h - 1;
        y = (double)y0;
    } else {
        y1 = y0 + 1;
    }
    if (x0 >= w - 1) {
        x0 = x1 = w - 1;
        x = (double)x0;
    } else {
        x1 = x0 + 1;
    }
    double ly = y - (double)y0, lx = x - (double)x0, hy = 1.0 - ly, hx = 1.0 - lx;
    t->pos[0] = y0 * w + x0;
    t->pos[1] = y0 * w + x1;
    t->pos[2] = y1 * w + x0;
    t->pos[3] = y1 * w + x1;
    t->w[0] = hy * hx;
    t->w[1] = hy * lx;
    t->w[2] = ly * hx;
    t->w[3] = ly * lx;
}

kiln_status kn_cpu_roi_align(kn_kernel_ctx *k) {
    const kn_node *n = k->node;
    const kn_tensor *x = &k->in[0], *rois = &k->in[1];
    const int64_t *bi = k->in[2].data;
    kn_tensor *y = &k->out[0];
    int64_t batch = x->shape.d[0], C = x->shape.d[1], H = x->shape.d[2], W = x->shape.d[3];
    int64_t R = y->shape.d[0], oh = y->shape.d[2], ow = y->shape.d[3];
    double scale = kn_attr_float(n, "spatial_scale", 1.0f);
    int64_t ratio = kn_attr_int(n, "sampling_ratio", 0);
    int is_max = strcmp(kn_attr_string(n, "mode", "avg"), "max") == 0;
    int half =
        n->opset >= 16 && strcmp(kn_attr_string(n, "coordinate_transformation_mode", "half_pixel"),
                                 "half_pixel") == 0;
    double off = half ? 0.5 : 0.0;
    for (int64_t r = 0; r < R; r++) {
        if (bi[r] < 0 || bi[r] >= batch)
            return kn_error(KILN_ERR_SHAPE, "batch_indices[%lld] = %lld is out of range",
                            (long long)r, (long long)bi[r]);
        double x0 = kn_cpu_load_f32(rois, r * 4) * scale - off,
               y0 = kn_cpu_load_f32(rois, r * 4 + 1) * scale - off;
        double x1 = kn_cpu_load_f32(rois, r * 4 + 2) * scale - off,
               y1 = kn_cpu_load_f32(rois, r * 4 + 3) * scale - off;
        double rw = x1 - x0, rh = y1 - y0;
        if (!half) {
            rw = rw > 1.0 ? rw : 1.0;
            rh = rh > 1.0 ? rh : 1.0;
        }
        double bh = rh / (double)oh, bw = rw / (double)ow;
        double sh = ratio > 0 ? (double)ratio : ceil(rh / (double)oh);
        double sw = ratio > 0 ? (double)ratio : ceil(rw / (double)ow);
        /* A huge (or NaN) roi or sampling_ratio would mean an endless loop and an undefined
         * conversion: refuse it. */
        if (!(fabs(sh) * fabs(sw) <= KN_ROI_MAX_SAMPLES))
            return kn_error(KILN_ERR_SHAPE,
                            "roi %lld needs %g x %g samples per output bin; at most %d are "
                            "supported",
                            (long long)r, sh, sw, KN_ROI_MAX_SAMPLES);
        int64_t gh = (int64_t)sh, gw = (int64_t)sw;
        double count = gh * gw > 1 ? (double)(gh * gw) : 1.0;
        for (int64_t c = 0; c < C; c++) {
            int64_t base = (bi[r] * C + c) * H * W;
            for (int64_t ph = 0; ph < oh; ph++)
                for (int64_t pw = 0; pw < ow; pw++) {
                    double acc = 0.0;
                    int first = 1;
                    for (int64_t iy = 0; iy < gh; iy++) {
                        double yy = y0 + (double)ph * bh + ((double)iy + 0.5) * bh / (double)gh;
                        for (int64_t ix = 0; ix < gw; ix++) {
                            double xx = x0 + (double)pw * bw + ((double)ix + 0.5) * bw / (double)gw;
                            roi_tap t;
                            roi_bilinear(yy, xx, H, W, &t);
                            if (!is_max) {
                                for (int j = 0; j < 4; j++)
                                    acc += t.w[j] * kn_cpu_load_f32(x, base + t.pos[j]);
                                continue;
                            }
                            double v = t.w[0] * kn_cpu_load_f32(x, base + t.pos[0]);
                            for (int j = 1; j < 4; j++) {
                                double u = t.w[j] * kn_cpu_load_f32(x, base + t.pos[j]);
                                v = u > v ? u : v;
                            }
                            acc = first || v > acc ? v : acc;
                            first = 0;
                        }
                    }
                    kn_cpu_store_f64(y, ((r * C + c) * oh + ph) * ow + pw,
                                     is_max ? acc : acc / count);
                }
        }
    }
    return KILN_OK;
}
