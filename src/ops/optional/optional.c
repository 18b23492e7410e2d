/* OptionalHasElement and OptionalGetElement: shape inference. An optional arrives as an
 * optional container (core/container.h), as a plain tensor or a sequence (both present), or as
 * an omitted input (empty). */
#include "core/container.h"
#include "ops/infer_util.h"

kiln_status kn_infer_optional_has_element(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need(c, 0, 1, 1));
    c->out[0].dtype = KILN_DTYPE_BOOL;
    c->out[0].shape.rank = 0;
    return KILN_OK;
}

kiln_status kn_infer_optional_get_element(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need(c, 1, 1, 1));
    c->out[0] = (kn_tensor){.dtype = c->in[0].dtype, .shape = c->in[0].shape};
    if (c->in[0].dtype != KILN_DTYPE_CONTAINER)
        return KILN_OK;
    if (c->in[0].data == NULL)
        return KN_NEED_DATA;
    kn_container o;
    KN_TRY(kn_container_open(&c->in[0], "input", &o));
    if (o.kind != KN_CONTAINER_OPTIONAL)
        return KILN_OK; /* a sequence is its own element */
    if (o.count == 0)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "the optional input is empty");
    c->out[0] = kn_container_item(&o, 0);
    c->out[0].data = NULL;
    return KILN_OK;
}
