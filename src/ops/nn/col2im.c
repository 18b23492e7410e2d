/* Col2Im: shape inference. */
#include "ops/infer_util.h"

#include <string.h>

kiln_status kn_infer_col2im(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need_exact(c, 3, 3, 1));
    const kn_node *n = c->node;
    const kn_tensor *x = &c->in[0], *img = &c->in[1], *blk = &c->in[2];
    if (!kn_infer_is_float(x->dtype))
        return kn_error(KILN_ERR_DTYPE, "input must be a float tensor");
    if (img->dtype != KILN_DTYPE_INT64 || blk->dtype != KILN_DTYPE_INT64 || img->shape.rank != 1 ||
        !kn_shape_equal(&img->shape, &blk->shape))
        return kn_error(KILN_ERR_SHAPE, "image_shape and block_shape must be int64 vectors of "
                                        "one length");
    int64_t nd = img->shape.d[0];
    if (nd < 1 || nd + 2 > KN_MAX_RANK || x->shape.rank != 3)
        return kn_error(KILN_ERR_SHAPE,
                        "input must be [N, C*prod(block), L] with 1 to %d "
                        "spatial dims",
                        KN_MAX_RANK - 2);
    if (img->data == NULL || blk->data == NULL)
        return KN_NEED_DATA;
    const int64_t *is = img->data, *bs = blk->data, *dil = NULL, *pads = NULL, *str = NULL;
    int64_t nd_dil = kn_attr_ints(n, "dilations", &dil);
    int64_t nd_pad = kn_attr_ints(n, "pads", &pads);
    int64_t nd_str = kn_attr_ints(n, "strides", &str);
    if ((nd_dil && nd_dil != nd) || (nd_pad && nd_pad != 2 * nd) || (nd_str && nd_str != nd))
        return kn_error(KILN_ERR_MODEL, "dilations, pads and strides must match %lld dims",
                        (long long)nd);
    int64_t blocks = 1, L = 1;
    for (int64_t i = 0; i < nd; i++) {
        int64_t d = nd_dil ? dil[i] : 1, s = nd_str ? str[i] : 1;
        int64_t p = nd_pad ? pads[i] + pads[nd + i] : 0;
        if (bs[i] < 1 || d < 1 || s < 1 || is[i] < 0)
            return kn_error(KILN_ERR_MODEL, "block, dilation and stride must be positive");
        int64_t span = d * (bs[i] - 1) + 1;
        if (is[i] + p < span)
            return kn_error(KILN_ERR_SHAPE, "block dim %lld does not fit the image", (long long)i);
        blocks *= bs[i];
        L *= (is[i] + p - span) / s + 1;
    }
    if (x->shape.d[1] % blocks != 0 || x->shape.d[2] != L)
        return kn_error(KILN_ERR_SHAPE, "input must be [N, C*%lld, %lld]", (long long)blocks,
                        (long long)L);
    c->out[0].dtype = x->dtype;
    c->out[0].shape.rank = (int32_t)(nd + 2);
    c->out[0].shape.d[0] = x->shape.d[0];
    c->out[0].shape.d[1] = x->shape.d[1] / blocks;
    for (int64_t i = 0; i < nd; i++)
        c->out[0].shape.d[2 + i] = is[i];
    return KILN_OK;
}
