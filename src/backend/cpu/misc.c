/* The misc family's CPU kernels: the table, Det and NonMaxSuppression. Resize, Einsum,
 * quantization and sampling kernels live in misc_*.c. */
#include "backend/cpu/misc_internal.h"
#include "core/alloc.h"
#include "ops/misc.h"

#include <math.h>
#include <string.h>

void cpu_misc_store_int(kn_tensor *t, int64_t i, double v) {
    double lo, hi;
    switch (t->dtype) {
    case KILN_DTYPE_UINT8:
        lo = 0, hi = 255;
        break;
    case KILN_DTYPE_INT8:
        lo = -128, hi = 127;
        break;
    case KILN_DTYPE_UINT16:
        lo = 0, hi = 65535;
        break;
    case KILN_DTYPE_INT16:
        lo = -32768, hi = 32767;
        break;
    case KILN_DTYPE_INT32:
        lo = -2147483648.0, hi = 2147483647.0;
        break;
    case KILN_DTYPE_UINT32:
        lo = 0, hi = 4294967295.0;
        break;
    default:
        lo = -9223372036854775808.0, hi = 9223372036854774784.0;
        break;
    }
    v = nearbyint(v);
    v = v < lo ? lo : (v > hi ? hi : v);
    if (isnan(v))
        v = 0;
    if (t->dtype == KILN_DTYPE_UINT64)
        ((uint64_t *)t->data)[i] = (uint64_t)v;
    else
        kn_tensor_set_i64(t, i, (int64_t)v);
}

/* LU decomposition with partial pivoting, in double. */
static double det_one(double *a, int64_t n) {
    double det = 1.0;
    for (int64_t c = 0; c < n; c++) {
        int64_t p = c;
        for (int64_t r = c + 1; r < n; r++)
            if (fabs(a[r * n + c]) > fabs(a[p * n + c]))
                p = r;
        if (a[p * n + c] == 0.0)
            return 0.0;
        if (p != c) {
            for (int64_t j = 0; j < n; j++) {
                double t = a[c * n + j];
                a[c * n + j] = a[p * n + j];
                a[p * n + j] = t;
            }
            det = -det;
        }
        double piv = a[c * n + c];
        det *= piv;
        for (int64_t r = c + 1; r < n; r++) {
            double f = a[r * n + c] / piv;
            for (int64_t j = c + 1; j < n; j++)
                a[r * n + j] -= f * a[c * n + j];
        }
    }
    return det;
}

kiln_status cpu_misc_det(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0];
    int64_t n = x->shape.d[x->shape.rank - 1];
    int64_t count = kn_tensor_numel(&k->out[0]);
    double *a = kn_malloc(sizeof(double) * (size_t)(n * n + 1));
    if (a == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory in Det");
    for (int64_t m = 0; m < count; m++) {
        for (int64_t i = 0; i < n * n; i++)
            a[i] = kn_tensor_get_f64(x, m * n * n + i);
        kn_tensor_set_f64(&k->out[0], m, det_one(a, n));
    }
    kn_free(a);
    return KILN_OK;
}

kiln_status cpu_misc_nms(kn_kernel_ctx *k) {
    int64_t *sel, count;
    kiln_status rc = kn_nms_select(k->node, k->n_in, k->in, &sel, &count);
    if (rc != KILN_OK)
        return rc == KN_NEED_DATA ? kn_error(KILN_ERR_INTERNAL, "NMS inputs unknown") : rc;
    if (count != k->out[0].shape.d[0]) {
        kn_free(sel);
        return kn_error(KILN_ERR_INTERNAL, "NMS selected %lld boxes, output holds %lld",
                        (long long)count, (long long)k->out[0].shape.d[0]);
    }
    if (count > 0)
        memcpy(k->out[0].data, sel, sizeof(int64_t) * (size_t)(3 * count));
    kn_free(sel);
    return KILN_OK;
}
