/* The CPU kernel of every string op: the evaluation inference sized (ops/text/string_ops.h),
 * copied into the outputs' memory. Equal and Cast take this path when strings are involved. */
#include "backend/cpu/f32_stage.h"
#include "backend/cpu/tensor/tensor_kernels.h"
#include "ops/text/string_ops.h"

#include <string.h>

kiln_status kn_cpu_string_op(kn_kernel_ctx *k) {
    kn_tensor res[2];
    int n_out = k->n_out < 2 ? k->n_out : 2;
    KN_TRY(kn_string_op_eval(k->node, k->n_in, k->in, n_out, res));
    kiln_status rc = KILN_OK;
    for (int i = 0; i < n_out && rc == KILN_OK; i++) {
        if (k->out[i].dtype == 0)
            continue;
        size_t nb = kn_tensor_nbytes(&res[i]);
        if (res[i].dtype != k->out[i].dtype || !kn_shape_equal(&res[i].shape, &k->out[i].shape))
            rc = kn_error(KILN_ERR_INTERNAL, "output %d's size changed since inference", i);
        else if (nb)
            memcpy(k->out[i].data, res[i].data, nb);
    }
    kn_string_results_free(n_out, res);
    return rc;
}

kiln_status kn_cpu_equal(kn_kernel_ctx *k) {
    if (k->in[0].dtype == KILN_DTYPE_STRING)
        return kn_cpu_string_op(k);
    return ew_k_equal(k);
}

kiln_status kn_cpu_cast(kn_kernel_ctx *k) {
    if (k->in[0].dtype == KILN_DTYPE_STRING || k->out[0].dtype == KILN_DTYPE_STRING)
        return kn_cpu_string_op(k);
    if (kn_node_attr(k->node, "kiln_nhwc") != NULL)
        return kn_cpu_cast_layout(k);
    return ew_k_cast(k);
}
