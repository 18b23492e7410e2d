/* MaxRoiPool and MaxUnpool: the rarely used pooling ops. */
#include "backend/cpu/reduction/reduce_impl.h"
#include "ops/nn/pool.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* A scaled roi corner as an integer, bounded (NaN to 0) so the conversion is defined; only
 * corners beyond 2^40, far outside any input, are moved. */
static int64_t roi_coord(float v) {
    float r = roundf(v);
    if (r != r)
        return 0;
    return r <= -0x1p40f ? -((int64_t)1 << 40) : r >= 0x1p40f ? (int64_t)1 << 40 : (int64_t)r;
}

/* One output bin of one roi: the max over its input window, 0 when the window is empty, NaN
 * when the window holds a NaN (as MaxPool: once m is NaN no comparison replaces it). */
static float roi_bin(const float *plane, int64_t w, int64_t y0, int64_t y1, int64_t x0,
                     int64_t x1) {
    if (y1 <= y0 || x1 <= x0)
        return 0;
    float m = -INFINITY;
    for (int64_t y = y0; y < y1; y++)
        for (int64_t x = x0; x < x1; x++) {
            float v = plane[y * w + x];
            m = v > m || v != v ? v : m;
        }
    return m;
}

kiln_status cpu_pool_roi(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0];
    int64_t n = x->shape.d[0], ch = x->shape.d[1], h = x->shape.d[2], w = x->shape.d[3];
    int64_t nroi = k->in[1].shape.d[0], ph = k->out[0].shape.d[2], pw = k->out[0].shape.d[3];
    float scale = kn_attr_float(k->node, "spatial_scale", 1.0f);
    kn_cpu_f32 xv = {0}, rv = {0}, yv = {0};
    KN_TRY(kn_cpu_f32_in(x, &xv));
    kiln_status rc = kn_cpu_f32_in(&k->in[1], &rv);
    if (rc == KILN_OK)
        rc = kn_cpu_f32_out(&k->out[0], &yv);
    for (int64_t r = 0; rc == KILN_OK && r < nroi; r++) {
        const float *roi = rv.p + r * 5;
        if (!(roi[0] > -1.0f && roi[0] < (float)n)) { /* NaN too */
            rc = kn_error(KILN_ERR_SHAPE,
                          "input 1 (rois): roi %lld has batch index %g "
                          "outside [0, %lld)",
                          (long long)r, (double)roi[0], (long long)n);
            break;
        }
        int64_t b = (int64_t)roi[0];
        int64_t xs = roi_coord(roi[1] * scale), ys = roi_coord(roi[2] * scale);
        int64_t xe = roi_coord(roi[3] * scale), ye = roi_coord(roi[4] * scale);
        double bh = (double)(ye - ys + 1 > 1 ? ye - ys + 1 : 1) / (double)ph;
        double bw = (double)(xe - xs + 1 > 1 ? xe - xs + 1 : 1) / (double)pw;
        for (int64_t c = 0; c < ch; c++) {
            const float *plane = xv.p + (b * ch + c) * h * w;
            float *out = yv.p + (r * ch + c) * ph * pw;
            for (int64_t i = 0; i < ph; i++) {
                int64_t y0 = clamp64((int64_t)floor((double)i * bh) + ys, 0, h);
                int64_t y1 = clamp64((int64_t)ceil((double)(i + 1) * bh) + ys, 0, h);
                for (int64_t j = 0; j < pw; j++) {
                    int64_t x0 = clamp64((int64_t)floor((double)j * bw) + xs, 0, w);
                    int64_t x1 = clamp64((int64_t)ceil((double)(j + 1) * bw) + xs, 0, w);
                    out[i * pw + j] = roi_bin(plane, w, y0, y1, x0, x1);
                }
            }
        }
    }
    if (rc == KILN_OK)
        kn_cpu_f32_commit(&k->out[0], &yv);
    kn_cpu_f32_release(&yv);
    kn_cpu_f32_release(&rv);
    kn_cpu_f32_release(&xv);
    return rc;
}

/* Indices address MaxPool's input, whose shape the attributes give; an explicit
 * output_shape only places that tensor in the top-left corner of a larger one. */
static kiln_status unpool_inferred_shape(const kn_kernel_ctx *k, kn_shape *s) {
    const kn_shape *xs = &k->in[0].shape;
    int nsp = xs->rank - 2;
    const int64_t *ks, *st, *pads;
    if (nsp < 1 || kn_attr_ints(k->node, "kernel_shape", &ks) != nsp)
        return kn_error(KILN_ERR_MODEL, "attribute kernel_shape must have %d values", nsp);
    int64_t nst = kn_attr_ints(k->node, "strides", &st);
    int64_t npd = kn_attr_ints(k->node, "pads", &pads);
    *s = *xs;
    for (int i = 0; i < nsp; i++) {
        int64_t stride = nst == nsp ? st[i] : 1;
        int64_t pad = npd == 2 * nsp ? pads[i] + pads[nsp + i] : 0;
        s->d[2 + i] = (xs->d[2 + i] - 1) * stride - pad + ks[i];
    }
    return KILN_OK;
}

kiln_status cpu_pool_unpool(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0];
    kn_tensor *y = &k->out[0];
    const int64_t *ind = k->in[1].data;
    kn_shape inf;
    KN_TRY(unpool_inferred_shape(k, &inf));
    int64_t n = kn_tensor_numel(x), limit = kn_shape_numel(&inf);
    size_t es = kn_dtype_size(x->dtype);
    memset(y->data, 0, kn_tensor_nbytes(y));
    int64_t ys[KN_MAX_RANK];
    kn_shape_strides(&y->shape, ys);
    for (int64_t i = 0; i < n; i++) {
        int64_t idx = ind[i];
        if (idx < 0 || idx >= limit)
            return kn_error(KILN_ERR_SHAPE, "input 1 (I): index %lld at %lld is outside [0, %lld)",
                            (long long)idx, (long long)i, (long long)limit);
        int64_t dst = 0;
        bool inside = true;
        for (int32_t q = inf.rank - 1; q >= 0; q--) {
            int64_t c = idx % inf.d[q];
            idx /= inf.d[q];
            inside = inside && c < y->shape.d[q];
            dst += c * ys[q];
        }
        if (inside)
            memcpy((char *)y->data + dst * (int64_t)es, (const char *)x->data + i * (int64_t)es,
                   es);
    }
    return KILN_OK;
}
