/* Sampling kernels: RoiAlign, GridSample (any number of spatial dims) and Col2Im. */
#include "backend/cpu/misc_internal.h"

#include <math.h>
#include <string.h>

static inline float load(const kn_tensor *t, int64_t i) {
    return t->dtype == KILN_DTYPE_FLOAT32 ? ((const float *)t->data)[i]
                                          : (float)kn_tensor_get_f64(t, i);
}

static inline void put(kn_tensor *t, int64_t i, double v) {
    if (t->dtype == KILN_DTYPE_FLOAT32)
        ((float *)t->data)[i] = (float)v;
    else
        kn_tensor_set_f64(t, i, v);
}

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

kiln_status cpu_misc_roi_align(kn_kernel_ctx *k) {
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
        double x0 = load(rois, r * 4) * scale - off, y0 = load(rois, r * 4 + 1) * scale - off;
        double x1 = load(rois, r * 4 + 2) * scale - off, y1 = load(rois, r * 4 + 3) * scale - off;
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
                                    acc += t.w[j] * load(x, base + t.pos[j]);
                                continue;
                            }
                            double v = t.w[0] * load(x, base + t.pos[0]);
                            for (int j = 1; j < 4; j++) {
                                double u = t.w[j] * load(x, base + t.pos[j]);
                                v = u > v ? u : v;
                            }
                            acc = first || v > acc ? v : acc;
                            first = 0;
                        }
                    }
                    put(y, ((r * C + c) * oh + ph) * ow + pw, is_max ? acc : acc / count);
                }
        }
    }
    return KILN_OK;
}

/* ---- GridSample ---- */

enum { GS_LINEAR, GS_NEAREST, GS_CUBIC };
enum { PAD_ZEROS, PAD_BORDER, PAD_REFLECTION };

typedef struct gs_taps {
    int n;
    int64_t idx[4];
    double w[4];
    int valid[4];
} gs_taps;

static double gs_reflect(double x, double lo, double hi) {
    double range = hi - lo;
    if (range <= 0.0)
        return lo;
    /* floor/fmod, not an int64 cast: the quotient may be huge (or NaN) for wild grids. */
    if (x < lo) {
        double dx = lo - x;
        double n = floor(dx / range);
        double r = dx - n * range;
        return fmod(n, 2.0) == 0.0 ? lo + r : hi - r;
    }
    if (x > hi) {
        double dx = x - hi;
        double n = floor(dx / range);
        double r = dx - n * range;
        return fmod(n, 2.0) == 0.0 ? hi - r : lo + r;
    }
    return x;
}

static void gs_tap(int64_t i, int64_t dim, int pad, double lo, double hi, gs_taps *t, double w) {
    int j = t->n++;
    t->w[j] = w;
    t->valid[j] = 1;
    if (pad == PAD_ZEROS) {
        t->valid[j] = i >= 0 && i < dim;
    } else if (pad == PAD_BORDER) {
        i = i < 0 ? 0 : (i >= dim ? dim - 1 : i);
    } else {
        i = (int64_t)gs_reflect((double)i, lo, hi);
        i = i < 0 ? 0 : (i >= dim ? dim - 1 : i);
    }
    t->idx[j] = i;
}

static void gs_cubic_coeffs(double t, double *c) {
    const double A = -0.75;
    double u = t + 1.0, v = 1.0 - t, z = 2.0 - t;
    c[0] = ((A * u - 5.0 * A) * u + 8.0 * A) * u - 4.0 * A;
    c[1] = ((A + 2.0) * t - (A + 3.0)) * t * t + 1.0;
    c[2] = ((A + 2.0) * v - (A + 3.0)) * v * v + 1.0;
    c[3] = ((A * z - 5.0 * A) * z + 8.0 * A) * z - 4.0 * A;
}

static void gs_axis(double g, int64_t dim, int mode, int pad, int align, gs_taps *t) {
    double lo = align ? 0.0 : -0.5, hi = align ? (double)dim - 1.0 : (double)dim - 0.5;
    double x = (float)(align ? (g + 1.0) / 2.0 * (double)(dim - 1)
                             : ((g + 1.0) * (double)dim - 1.0) / 2.0);
    if (mode == GS_NEAREST)
        x = nearbyint(x);
    if (x < lo || x > hi) {
        if (pad == PAD_BORDER)
            x = x < 0.0 ? 0.0 : (x > (double)(dim - 1) ? (double)(dim - 1) : x);
        else if (pad == PAD_REFLECTION)
            x = gs_reflect(x, lo, hi);
    }
    /* Taps more than a few cells outside read only padding; the bound (NaN included) keeps
     * the int64 conversions below defined. */
    x = x > -4.0 ? (x < (double)dim + 4.0 ? x : (double)dim + 4.0) : -4.0;
    t->n = 0;
    if (mode == GS_NEAREST) {
        gs_tap((int64_t)x, dim, pad, lo, hi, t, 1.0);
        return;
    }
    double x0 = floor(x), f = x - x0;
    if (mode == GS_LINEAR) {
        gs_tap((int64_t)x0, dim, pad, lo, hi, t, 1.0 - f);
        gs_tap((int64_t)x0 + 1, dim, pad, lo, hi, t, f);
        return;
    }
    double c[4];
    gs_cubic_coeffs(f, c);
    for (int j = 0; j < 4; j++)
        gs_tap((int64_t)x0 - 1 + j, dim, pad, lo, hi, t, c[j]);
}

static double gs_sum(const kn_tensor *x, const gs_taps *t, const int64_t *strides, int nd, int d,
                     int64_t base) {
    if (d == nd)
        return load(x, base);
    double s = 0.0;
    for (int j = 0; j < t[d].n; j++)
        if (t[d].valid[j] && t[d].w[j] != 0.0)
            s += t[d].w[j] * gs_sum(x, t, strides, nd, d + 1, base + t[d].idx[j] * strides[d]);
    return s;
}

kiln_status cpu_misc_grid_sample(kn_kernel_ctx *k) {
    const kn_node *n = k->node;
    const kn_tensor *x = &k->in[0], *grid = &k->in[1];
    kn_tensor *y = &k->out[0];
    const char *m = kn_attr_string(n, "mode", n->opset < 20 ? "bilinear" : "linear");
    int mode = strcmp(m, "nearest") == 0 ? GS_NEAREST
                                         : (strstr(m, "cubic") != NULL ? GS_CUBIC : GS_LINEAR);
    const char *p = kn_attr_string(n, "padding_mode", "zeros");
    int pad = strcmp(p, "border") == 0
                  ? PAD_BORDER
                  : (strcmp(p, "reflection") == 0 ? PAD_REFLECTION : PAD_ZEROS);
    int align = kn_attr_int(n, "align_corners", 0) != 0;
    int nd = x->shape.rank - 2;
    int64_t N = x->shape.d[0], C = x->shape.d[1], spatial_in = 1, points = 1;
    int64_t strides[KN_MAX_RANK];
    for (int i = nd - 1; i >= 0; i--) {
        strides[i] = spatial_in;
        spatial_in *= x->shape.d[2 + i];
    }
    for (int i = 0; i < nd; i++)
        points *= y->shape.d[2 + i];
    for (int64_t b = 0; b < N; b++)
        for (int64_t pt = 0; pt < points; pt++) {
            gs_taps t[KN_MAX_RANK];
            int64_t g = (b * points + pt) * nd;
            for (int i = 0; i < nd; i++)
                gs_axis(load(grid, g + nd - 1 - i), x->shape.d[2 + i], mode, pad, align, &t[i]);
            for (int64_t c = 0; c < C; c++) {
                double v = gs_sum(x, t, strides, nd, 0, (b * C + c) * spatial_in);
                put(y, (b * C + c) * points + pt, v);
            }
        }
    return KILN_OK;
}

/* ---- Col2Im ---- */

kiln_status cpu_misc_col2im(kn_kernel_ctx *k) {
    const kn_node *n = k->node;
    const kn_tensor *x = &k->in[0];
    kn_tensor *y = &k->out[0];
    const int64_t *img = k->in[1].data, *blk = k->in[2].data, *dil = NULL, *pads = NULL,
                  *str = NULL;
    int nd = (int)k->in[1].shape.d[0];
    int64_t has_dil = kn_attr_ints(n, "dilations", &dil);
    int64_t has_pad = kn_attr_ints(n, "pads", &pads);
    int64_t has_str = kn_attr_ints(n, "strides", &str);
    int64_t cols[KN_MAX_RANK], blocks = 1, L = 1, spatial = 1;
    for (int i = 0; i < nd; i++) {
        int64_t d = has_dil ? dil[i] : 1, s = has_str ? str[i] : 1;
        int64_t p = has_pad ? pads[i] + pads[nd + i] : 0;
        cols[i] = (img[i] + p - (d * (blk[i] - 1) + 1)) / s + 1;
        blocks *= blk[i];
        L *= cols[i];
        spatial *= img[i];
    }
    int64_t N = x->shape.d[0], C = x->shape.d[1] / blocks;
    int64_t total = kn_tensor_numel(y);
    for (int64_t i = 0; i < total; i++)
        put(y, i, 0.0);
    for (int64_t b = 0; b < N; b++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t kb = 0; kb < blocks; kb++) {
                int64_t ko[KN_MAX_RANK], rem = kb;
                for (int i = nd - 1; i >= 0; i--) {
                    ko[i] = rem % blk[i];
                    rem /= blk[i];
                }
                const int64_t row = ((b * C + c) * blocks + kb) * L;
                for (int64_t l = 0; l < L; l++) {
                    int64_t lr = l, pos = 0, ok = 1;
                    int64_t lo[KN_MAX_RANK];
                    for (int i = nd - 1; i >= 0; i--) {
                        lo[i] = lr % cols[i];
                        lr /= cols[i];
                    }
                    for (int i = 0; i < nd && ok; i++) {
                        int64_t s = has_str ? str[i] : 1, d = has_dil ? dil[i] : 1;
                        int64_t pb = has_pad ? pads[i] : 0;
                        int64_t q = lo[i] * s - pb + ko[i] * d;
                        ok = q >= 0 && q < img[i];
                        pos = pos * img[i] + q;
                    }
                    if (!ok)
                        continue;
                    int64_t o = (b * C + c) * spatial + pos;
                    put(y, o, kn_tensor_get_f64(y, o) + load(x, row + l));
                }
            }
    return KILN_OK;
}
