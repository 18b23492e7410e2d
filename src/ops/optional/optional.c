/* OptionalHasElement and OptionalGetElement on plain tensors: shape inference. */
#include "ops/infer_util.h"

/* Only tensors reach kiln's graphs (sequences and optionals are rejected at import), so an
 * optional here is either a present tensor or an omitted input. */
kiln_status kn_infer_optional_has_element(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need(c, 0, 1, 1));
    c->out[0].dtype = KILN_DTYPE_BOOL;
    c->out[0].shape.rank = 0;
    return KILN_OK;
}

kiln_status kn_infer_optional_get_element(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need(c, 1, 1, 1));
    c->out[0] = (kn_tensor){.dtype = c->in[0].dtype, .shape = c->in[0].shape};
    return KILN_OK;
}
