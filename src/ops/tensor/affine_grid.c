/* AffineGrid: shape inference. */
#include "ops/infer_util.h"

kiln_status kn_infer_affine_grid(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need(c, 2, 2, 1));
    const kn_tensor *theta = &c->in[0], *size = &c->in[1];
    if (!kn_infer_is_float(theta->dtype))
        return kn_error(KILN_ERR_DTYPE, "input theta must be a float tensor, got %s",
                        kn_dtype_name(theta->dtype));
    if (size->dtype != KILN_DTYPE_INT64 || size->shape.rank != 1 ||
        (size->shape.d[0] != 4 && size->shape.d[0] != 5))
        return kn_error(KILN_ERR_SHAPE, "input size must be int64 [4] or [5]");
    int nd = (int)size->shape.d[0] - 2;
    if (theta->shape.rank != 3 || theta->shape.d[1] != nd || theta->shape.d[2] != nd + 1)
        return kn_error(KILN_ERR_SHAPE, "input theta must be [N, %d, %d]", nd, nd + 1);
    if (size->data == NULL)
        return KN_NEED_DATA;
    const int64_t *sz = size->data;
    if (sz[0] != theta->shape.d[0])
        return kn_error(KILN_ERR_SHAPE, "size[0] (%lld) must equal theta's batch (%lld)",
                        (long long)sz[0], (long long)theta->shape.d[0]);
    kn_shape out = {.rank = nd + 2};
    out.d[0] = sz[0];
    for (int i = 0; i < nd; i++) {
        if (sz[2 + i] < 0)
            return kn_error(KILN_ERR_SHAPE, "size[%d] must be >= 0", 2 + i);
        out.d[1 + i] = sz[2 + i];
    }
    out.d[nd + 1] = nd;
    c->out[0].dtype = theta->dtype;
    c->out[0].shape = out;
    return KILN_OK;
}
