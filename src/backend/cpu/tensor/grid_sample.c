/* GridSample over any number of spatial dims. */
#include "backend/cpu/element_access.h"

#include <math.h>
#include <string.h>

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
        return kn_cpu_load_f32(x, base);
    double s = 0.0;
    for (int j = 0; j < t[d].n; j++)
        if (t[d].valid[j] && t[d].w[j] != 0.0)
            s += t[d].w[j] * gs_sum(x, t, strides, nd, d + 1, base + t[d].idx[j] * strides[d]);
    return s;
}

kiln_status kn_cpu_grid_sample(kn_kernel_ctx *k) {
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
                gs_axis(kn_cpu_load_f32(grid, g + nd - 1 - i), x->shape.d[2 + i], mode, pad, align,
                        &t[i]);
            for (int64_t c = 0; c < C; c++) {
                double v = gs_sum(x, t, strides, nd, 0, (b * C + c) * spatial_in);
                kn_cpu_store_f64(y, (b * C + c) * points + pt, v);
            }
        }
    return KILN_OK;
}
