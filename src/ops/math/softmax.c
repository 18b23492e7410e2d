/* Softmax, LogSoftmax and Hardmax: shape inference. */
#include "ops/infer_util.h"
#include "ops/reduction/reduce.h"

kiln_status kn_infer_softmax(kn_infer_ctx *c) {
    const kn_tensor *x = &c->in[0];
    if (!kn_infer_is_float(x->dtype))
        return kn_error(KILN_ERR_DTYPE, "input 0 must be a float type, got %s",
                        kn_dtype_name(x->dtype));
    int64_t outer, n, inner;
    KN_TRY(kn_softmax_geometry(c->node, &x->shape, &outer, &n, &inner));
    c->out[0].dtype = x->dtype;
    c->out[0].shape = x->shape;
    return KILN_OK;
}
