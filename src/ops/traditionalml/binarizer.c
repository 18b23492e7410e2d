/* ai.onnx.ml Binarizer: shape inference. */
#include "ops/infer_util.h"

kiln_status kn_infer_binarizer(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need(c, 1, 1, 1));
    const kn_tensor *x = &c->in[0];
    if (!kn_infer_is_float(x->dtype) && x->dtype != KILN_DTYPE_INT32 &&
        x->dtype != KILN_DTYPE_INT64)
        return kn_error(KILN_ERR_DTYPE, "input X must be float, double, int32 or int64");
    c->out[0] = (kn_tensor){.dtype = x->dtype, .shape = x->shape};
    return KILN_OK;
}
