/* Det: shape inference. */
#include "ops/infer_util.h"

kiln_status kn_infer_det(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need_exact(c, 1, 1, 1));
    const kn_tensor *x = &c->in[0];
    if (!kn_infer_is_float(x->dtype))
        return kn_error(KILN_ERR_DTYPE, "input X must be a float tensor, got %s",
                        kn_dtype_name(x->dtype));
    if (x->shape.rank < 2 || x->shape.d[x->shape.rank - 1] != x->shape.d[x->shape.rank - 2])
        return kn_error(KILN_ERR_SHAPE, "input X must be [..., M, M]");
    c->out[0].dtype = x->dtype;
    c->out[0].shape = x->shape;
    c->out[0].shape.rank -= 2;
    return KILN_OK;
}
