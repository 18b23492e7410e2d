/* Swish: shape inference. */
#include "ops/infer_util.h"

kiln_status kn_infer_swish(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need(c, 1, 1, 1));
    if (!kn_infer_is_float(c->in[0].dtype))
        return kn_error(KILN_ERR_DTYPE, "input X must be a float tensor, got %s",
                        kn_dtype_name(c->in[0].dtype));
    c->out[0] = (kn_tensor){.dtype = c->in[0].dtype, .shape = c->in[0].shape};
    return KILN_OK;
}
