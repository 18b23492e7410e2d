/* ai.onnx.ml ArrayFeatureExtractor: shape inference. */
#include "ops/infer_util.h"

kiln_status kn_infer_array_feature_extractor(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need(c, 2, 2, 1));
    const kn_tensor *x = &c->in[0], *y = &c->in[1];
    if (y->dtype != KILN_DTYPE_INT64)
        return kn_error(KILN_ERR_DTYPE, "input Y must be int64");
    if (x->shape.rank < 1)
        return kn_error(KILN_ERR_SHAPE, "input X must have rank >= 1");
    kn_shape out = x->shape;
    if (out.rank == 1) {
        out.rank = 2;
        out.d[0] = 1;
    }
    out.d[out.rank - 1] = kn_tensor_numel(y);
    c->out[0] = (kn_tensor){.dtype = x->dtype, .shape = out};
    return KILN_OK;
}
