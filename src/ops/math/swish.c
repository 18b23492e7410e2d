/* Swish and SwiGLU (Swish(A) * B, opset 28): shape inference. */
#include "ops/infer_util.h"

kiln_status kn_infer_swish(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need(c, 1, 1, 1));
    if (!kn_infer_is_float(c->in[0].dtype))
        return kn_error(KILN_ERR_DTYPE, "input X must be a float tensor, got %s",
                        kn_dtype_name(c->in[0].dtype));
    c->out[0] = (kn_tensor){.dtype = c->in[0].dtype, .shape = c->in[0].shape};
    return KILN_OK;
}

kiln_status kn_infer_swiglu(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need(c, 2, 2, 1));
    const kn_tensor *a = &c->in[0], *b = &c->in[1];
    if (!kn_infer_is_float(a->dtype) || b->dtype != a->dtype)
        return kn_error(KILN_ERR_DTYPE,
                        "inputs A and B must be float tensors of one type, got %s "
                        "and %s",
                        kn_dtype_name(a->dtype), kn_dtype_name(b->dtype));
    /* no broadcasting: the gate and the value have one shape */
    if (!kn_shape_equal(&a->shape, &b->shape)) {
        char sa[96], sb[96];
        return kn_error(KILN_ERR_SHAPE, "inputs A %s and B %s must have the same shape",
                        kn_shape_str(&a->shape, sa, sizeof sa),
                        kn_shape_str(&b->shape, sb, sizeof sb));
    }
    c->out[0] = (kn_tensor){.dtype = a->dtype, .shape = a->shape};
    return KILN_OK;
}
