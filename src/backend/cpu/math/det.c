/* Det: LU decomposition with partial pivoting, one matrix at a time. */
#include "backend/cpu/cpu.h"
#include "core/alloc.h"

#include <math.h>
#include <string.h>

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

kiln_status kn_cpu_det(kn_kernel_ctx *k) {
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
