/* Quantized kernels: QLinearMatMul, ConvInteger and QLinearConv. Products accumulate exactly
 * in int64 after the zero points are subtracted; requantization rounds half to even and
 * saturates to the output type. */
#include "backend/cpu/f32_stage.h"
#include "backend/cpu/quantization/saturate.h"
#include "core/alloc.h"
#include "ops/nn/conv_geom.h"

#include <math.h>
#include <stdatomic.h>

/* Values of a quantized tensor minus its zero point (a scalar, or one per index along a dim
 * of extent per_len, stride per_stride). */
static int32_t *dequant_ints(const kn_tensor *t, const kn_tensor *zp, int64_t per_len,
                             int64_t per_stride) {
    int64_t n = kn_tensor_numel(t);
    int32_t *v = kn_malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    if (v == NULL)
        return NULL;
    bool per = zp != NULL && kn_tensor_numel(zp) > 1;
    for (int64_t i = 0; i < n; i++) {
        int64_t z = 0;
        if (zp != NULL)
            z = kn_tensor_get_i64(zp, per ? (i / per_stride) % per_len : 0);
        v[i] = (int32_t)(kn_tensor_get_i64(t, i) - z);
    }
    return v;
}

/* The scale ratio the way the reference forms it: in the scales' own precision. */
static double scale_ratio(int32_t dt, double a, double b, double y) {
    if (dt == KILN_DTYPE_FLOAT16) {
        float ab = kn_half_to_float(kn_float_to_half((float)a * (float)b));
        return kn_half_to_float(kn_float_to_half(ab / (float)y));
    }
    if (dt == KILN_DTYPE_FLOAT32)
        return (double)(((float)a * (float)b) / (float)y);
    return a * b / y;
}

kiln_status kn_cpu_qlinear_matmul(kn_kernel_ctx *k) {
    const kn_tensor *at = &k->in[0], *bt = &k->in[3];
    kn_tensor *y = &k->out[0];
    int64_t kd = at->shape.d[at->shape.rank - 1];
    int64_t m = at->shape.rank > 1 ? at->shape.d[at->shape.rank - 2] : 1;
    int64_t n = bt->shape.rank > 1 ? bt->shape.d[bt->shape.rank - 1] : 1;
    int32_t *a = dequant_ints(at, &k->in[2], 1, 1);
    int32_t *b = dequant_ints(bt, &k->in[5], n, 1);
    kiln_status rc = KILN_OK;
    if (a == NULL || b == NULL) {
        rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "no memory for QLinearMatMul operands");
        goto out;
    }
    /* Batch dims of y, a and b right-aligned; size-1 dims of a or b broadcast. */
    int yb_rank = y->shape.rank - (at->shape.rank > 1) - (bt->shape.rank > 1);
    int ab_rank = at->shape.rank > 2 ? at->shape.rank - 2 : 0;
    int bb_rank = bt->shape.rank > 2 ? bt->shape.rank - 2 : 0;
    int64_t batches = 1;
    for (int i = 0; i < yb_rank; i++)
        batches *= y->shape.d[i];
    int64_t n_bs = kn_tensor_numel(&k->in[4]);
    double as = kn_tensor_get_f64(&k->in[1], 0), ys = kn_tensor_get_f64(&k->in[6], 0);
    double yz = (double)kn_tensor_get_i64(&k->in[7], 0);
    for (int64_t bi = 0; bi < batches; bi++) {
        int64_t aoff = 0, boff = 0, rem = bi, astr = m * kd, bstr = kd * n;
        for (int i = yb_rank - 1; i >= 0; i--) {
            int64_t idx = rem % y->shape.d[i];
            rem /= y->shape.d[i];
            int ia = i - (yb_rank - ab_rank), ib = i - (yb_rank - bb_rank);
            if (ia >= 0) {
                aoff += (at->shape.d[ia] == 1 ? 0 : idx) * astr;
                astr *= at->shape.d[ia];
            }
            if (ib >= 0) {
                boff += (bt->shape.d[ib] == 1 ? 0 : idx) * bstr;
                bstr *= bt->shape.d[ib];
            }
        }
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                int64_t acc = 0;
                for (int64_t e = 0; e < kd; e++)
                    acc += (int64_t)a[aoff + i * kd + e] * b[boff + e * n + j];
                double bs = kn_tensor_get_f64(&k->in[4], n_bs > 1 ? j : 0);
                double r = (double)acc * scale_ratio(k->in[1].dtype, as, bs, ys) + yz;
                kn_cpu_store_saturated(y, (bi * m + i) * n + j, r);
            }
    }
out:
    kn_free(a);
    kn_free(b);
    return rc;
}

typedef struct iconv_job {
    kn_conv_geom g;
    const int32_t *x, *w;
    int64_t *acc; /* [N, M, out...] */
    int64_t in_sp, out_sp, k_sp;
} iconv_job;

static void iconv_range(void *arg, int64_t begin, int64_t end) {
    const iconv_job *j = arg;
    const kn_conv_geom *g = &j->g;
    int64_t cg = g->c_in / g->group, mg = g->c_out / g->group;
    for (int64_t nm = begin; nm < end; nm++) {
        int64_t b = nm / g->c_out, m = nm % g->c_out, grp = m / mg;
        for (int64_t o = 0; o < j->out_sp; o++) {
            int64_t oc[KN_CONV_MAX_SP], rem = o;
            for (int d = g->nsp - 1; d >= 0; d--) {
                oc[d] = rem % g->out[d];
                rem /= g->out[d];
            }
            int64_t acc = 0;
            for (int64_t kf = 0; kf < j->k_sp; kf++) {
                int64_t xoff = 0, krem = kf, xstr = 1;
                bool inside = true;
                for (int d = g->nsp - 1; d >= 0; d--) {
                    int64_t kc = krem % g->k[d];
                    krem /= g->k[d];
                    int64_t xc = oc[d] * g->stride[d] - g->pad_b[d] + kc * g->dil[d];
                    if (xc < 0 || xc >= g->in[d])
                        inside = false;
                    xoff += xc * xstr;
                    xstr *= g->in[d];
                }
                if (!inside)
                    continue;
                for (int64_t c = 0; c < cg; c++) {
                    int64_t xc = (b * g->c_in + grp * cg + c) * j->in_sp + xoff;
                    int64_t wc = (m * cg + c) * j->k_sp + kf;
                    acc += (int64_t)j->x[xc] * j->w[wc];
                }
            }
            j->acc[nm * j->out_sp + o] = acc;
        }
    }
}

/* acc = conv(x - x_zero_point, w - w_zero_point) over int64, [N, M, out...]. */
static kiln_status int_conv(kn_kernel_ctx *k, int xi, int xzi, int wi, int wzi, int64_t **acc,
                            iconv_job *j) {
    const kn_tensor *x = &k->in[xi], *w = &k->in[wi];
    KN_TRY(kn_conv_geom_init(k->node, &x->shape, &w->shape, false, &j->g));
    j->in_sp = j->out_sp = j->k_sp = 1;
    for (int d = 0; d < j->g.nsp; d++) {
        j->in_sp *= j->g.in[d];
        j->out_sp *= j->g.out[d];
        j->k_sp *= j->g.k[d];
    }
    const kn_tensor *xz = xzi < k->n_in && k->in[xzi].dtype != 0 ? &k->in[xzi] : NULL;
    const kn_tensor *wz = wzi < k->n_in && k->in[wzi].dtype != 0 ? &k->in[wzi] : NULL;
    int32_t *xv = dequant_ints(x, xz, 1, 1);
    int64_t per_m = j->g.c_out > 0 ? kn_tensor_numel(w) / j->g.c_out : 1;
    int32_t *wv = dequant_ints(w, wz, j->g.c_out, per_m > 0 ? per_m : 1);
    int64_t cnt = j->g.n * j->g.c_out * j->out_sp;
    *acc = kn_malloc((size_t)(cnt > 0 ? cnt : 1) * sizeof(int64_t));
    kiln_status rc = KILN_OK;
    if (xv == NULL || wv == NULL || *acc == NULL) {
        rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "no memory for the integer convolution");
    } else {
        j->x = xv;
        j->w = wv;
        j->acc = *acc;
        kn_parallel_for(k->pool, j->g.n * j->g.c_out, 1, iconv_range, j);
    }
    kn_free(xv);
    kn_free(wv);
    return rc;
}

kiln_status kn_cpu_conv_integer(kn_kernel_ctx *k) {
    iconv_job j;
    int64_t *acc = NULL;
    kiln_status rc = int_conv(k, 0, 2, 1, 3, &acc, &j);
    if (rc == KILN_OK) {
        int64_t cnt = kn_tensor_numel(&k->out[0]);
        int32_t *y = k->out[0].data;
        for (int64_t i = 0; i < cnt; i++) {
            if (acc[i] > INT32_MAX || acc[i] < INT32_MIN) {
                rc = kn_error(KILN_ERR_SHAPE, "accumulator overflows int32 at output %lld",
                              (long long)i);
                break;
            }
            y[i] = (int32_t)acc[i];
        }
    }
    kn_free(acc);
    return rc;
}

kiln_status kn_cpu_qlinear_conv(kn_kernel_ctx *k) {
    iconv_job j;
    int64_t *acc = NULL;
    kiln_status rc = int_conv(k, 0, 2, 3, 5, &acc, &j);
    if (rc == KILN_OK) {
        kn_tensor *y = &k->out[0];
        const kn_tensor *bias = k->n_in > 8 && k->in[8].dtype != 0 ? &k->in[8] : NULL;
        double xs = kn_tensor_get_f64(&k->in[1], 0), ys = kn_tensor_get_f64(&k->in[6], 0);
        double yz = (double)kn_tensor_get_i64(&k->in[7], 0);
        bool per = kn_tensor_numel(&k->in[4]) > 1;
        for (int64_t nm = 0; nm < j.g.n * j.g.c_out; nm++) {
            int64_t m = nm % j.g.c_out;
            double ws = kn_tensor_get_f64(&k->in[4], per ? m : 0);
            double ratio = scale_ratio(k->in[1].dtype, xs, ws, ys);
            int64_t b = bias != NULL ? kn_tensor_get_i64(bias, m) : 0;
            for (int64_t o = 0; o < j.out_sp; o++)
                kn_cpu_store_saturated(y, nm * j.out_sp + o,
                                       (double)(acc[nm * j.out_sp + o] + b) * ratio + yz);
        }
    }
    kn_free(acc);
    return rc;
}
