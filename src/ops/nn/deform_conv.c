/* DeformConv: shape inference. */
#include "ops/infer_util.h"
#include "ops/nn/conv_geom.h"

kiln_status kn_infer_deform_conv(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need(c, 3, 5, 1));
    const kn_tensor *x = &c->in[0], *w = &c->in[1], *off = &c->in[2];
    if (!kn_infer_is_float(x->dtype) || w->dtype != x->dtype || off->dtype != x->dtype)
        return kn_error(KILN_ERR_DTYPE, "inputs X, W and offset must be float of one dtype");
    if (x->shape.rank != 4)
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "only 2-D deformable convolution (4-D X) is "
                        "supported, X has rank %d",
                        x->shape.rank);
    kn_conv_geom g;
    KN_TRY(kn_conv_geom_init(c->node, &x->shape, &w->shape, false, &g));
    int64_t og = kn_attr_int(c->node, "offset_group", 1);
    if (og < 1 || g.c_in % og != 0)
        return kn_error(KILN_ERR_MODEL,
                        "attribute 'offset_group' (%lld) must be >= 1 and "
                        "divide the %lld input channels",
                        (long long)og, (long long)g.c_in);
    int64_t kk = g.k[0] * g.k[1];
    kn_shape want = {.rank = 4, .d = {g.n, og * kk * 2, g.out[0], g.out[1]}};
    char b1[96];
    if (!kn_shape_equal(&off->shape, &want))
        return kn_error(KILN_ERR_SHAPE, "input offset must have shape %s",
                        kn_shape_str(&want, b1, sizeof b1));
    if (kn_has_input(c, 3) &&
        (c->in[3].dtype != x->dtype || c->in[3].shape.rank != 1 || c->in[3].shape.d[0] != g.c_out))
        return kn_error(KILN_ERR_SHAPE, "input B must be [%lld] of X's dtype", (long long)g.c_out);
    if (kn_has_input(c, 4)) {
        want.d[1] = og * kk;
        if (c->in[4].dtype != x->dtype || !kn_shape_equal(&c->in[4].shape, &want))
            return kn_error(KILN_ERR_SHAPE, "input mask must have shape %s and X's dtype",
                            kn_shape_str(&want, b1, sizeof b1));
    }
    c->out[0].dtype = x->dtype;
    kn_conv_geom_out_shape(&g, &c->out[0].shape);
    return KILN_OK;
}
