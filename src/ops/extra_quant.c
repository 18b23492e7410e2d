/* Quantized and deformable linear algebra: QLinearMatMul, ConvInteger, QLinearConv,
 * DeformConv: shape inference. Convolution geometry comes from conv_geom so inference and
 * kernels agree. */
#include "ops/nn/conv_geom.h"
#include "ops/infer_util.h"

static bool is_q8(int32_t dt) {
    return dt == KILN_DTYPE_INT8 || dt == KILN_DTYPE_UINT8;
}

/* A quantization parameter: a scalar, or (when per_len > 0) a 1-D tensor of per_len. */
static kiln_status check_qparam(const kn_infer_ctx *c, int i, const char *name, int32_t dtype,
                                int64_t per_len) {
    const kn_tensor *t = &c->in[i];
    if (dtype == 0 ? !kn_extra_is_float(t->dtype) : t->dtype != dtype)
        return kn_error(KILN_ERR_DTYPE, "input %s has dtype %s; expected %s", name,
                        kn_dtype_name(t->dtype), dtype == 0 ? "float" : kn_dtype_name(dtype));
    int64_t n = kn_tensor_numel(t);
    if (t->shape.rank <= 1 && n == 1)
        return KILN_OK;
    if (per_len > 0 && t->shape.rank == 1 && n == per_len)
        return KILN_OK;
    if (per_len > 0)
        return kn_error(KILN_ERR_SHAPE, "input %s must be a scalar or have %lld elements", name,
                        (long long)per_len);
    return kn_error(KILN_ERR_SHAPE, "input %s must be a scalar", name);
}

/* numpy matmul: 1-D operands are promoted and the promoted dims dropped again. */
static kiln_status matmul_shape(const kn_shape *a, const kn_shape *b, kn_shape *out) {
    if (a->rank < 1 || b->rank < 1)
        return kn_error(KILN_ERR_SHAPE, "inputs a and b must have rank >= 1");
    kn_shape pa = *a, pb = *b;
    if (pa.rank == 1)
        pa = (kn_shape){.rank = 2, .d = {1, a->d[0]}};
    if (pb.rank == 1)
        pb = (kn_shape){.rank = 2, .d = {b->d[0], 1}};
    if (pa.d[pa.rank - 1] != pb.d[pb.rank - 2])
        return kn_error(KILN_ERR_SHAPE, "inner dims of a (%lld) and b (%lld) differ",
                        (long long)pa.d[pa.rank - 1], (long long)pb.d[pb.rank - 2]);
    kn_shape ba = {.rank = pa.rank - 2}, bb = {.rank = pb.rank - 2}, bo;
    for (int i = 0; i < ba.rank; i++)
        ba.d[i] = pa.d[i];
    for (int i = 0; i < bb.rank; i++)
        bb.d[i] = pb.d[i];
    if (!kn_shape_broadcast(&ba, &bb, &bo))
        return kn_error(KILN_ERR_SHAPE, "batch dims of a and b do not broadcast");
    *out = bo;
    if (a->rank > 1)
        out->d[out->rank++] = pa.d[pa.rank - 2];
    if (b->rank > 1)
        out->d[out->rank++] = pb.d[pb.rank - 1];
    return KILN_OK;
}

kiln_status kn_infer_qlinear_matmul(kn_infer_ctx *c) {
    KN_TRY(kn_extra_need(c, 8, 8, 1));
    const kn_tensor *a = &c->in[0], *b = &c->in[3];
    if (!is_q8(a->dtype) || !is_q8(b->dtype) || !is_q8(c->in[7].dtype))
        return kn_error(KILN_ERR_UNSUPPORTED, "inputs a, b and y_zero_point must be int8 or "
                                              "uint8 (float8 is not supported)");
    int64_t n = b->shape.rank >= 2 ? b->shape.d[b->shape.rank - 1] : 0;
    KN_TRY(check_qparam(c, 1, "a_scale", 0, 0));
    KN_TRY(check_qparam(c, 2, "a_zero_point", a->dtype, 0));
    KN_TRY(check_qparam(c, 4, "b_scale", 0, n));
    KN_TRY(check_qparam(c, 5, "b_zero_point", b->dtype, n));
    KN_TRY(check_qparam(c, 6, "y_scale", 0, 0));
    KN_TRY(check_qparam(c, 7, "y_zero_point", c->in[7].dtype, 0));
    c->out[0].dtype = c->in[7].dtype;
    return matmul_shape(&a->shape, &b->shape, &c->out[0].shape);
}

kiln_status kn_infer_conv_integer(kn_infer_ctx *c) {
    KN_TRY(kn_extra_need(c, 2, 4, 1));
    const kn_tensor *x = &c->in[0], *w = &c->in[1];
    if (!is_q8(x->dtype) || !is_q8(w->dtype))
        return kn_error(KILN_ERR_DTYPE, "inputs x and w must be int8 or uint8");
    kn_conv_geom g;
    KN_TRY(kn_conv_geom_init(c->node, &x->shape, &w->shape, false, &g));
    if (kn_has_input(c, 2))
        KN_TRY(check_qparam(c, 2, "x_zero_point", x->dtype, 0));
    if (kn_has_input(c, 3))
        KN_TRY(check_qparam(c, 3, "w_zero_point", w->dtype, g.c_out));
    c->out[0].dtype = KILN_DTYPE_INT32;
    kn_conv_geom_out_shape(&g, &c->out[0].shape);
    return KILN_OK;
}

kiln_status kn_infer_qlinear_conv(kn_infer_ctx *c) {
    KN_TRY(kn_extra_need(c, 8, 9, 1));
    const kn_tensor *x = &c->in[0], *w = &c->in[3];
    if (!is_q8(x->dtype) || !is_q8(w->dtype) || !is_q8(c->in[7].dtype))
        return kn_error(KILN_ERR_DTYPE, "inputs x, w and y_zero_point must be int8 or uint8");
    kn_conv_geom g;
    KN_TRY(kn_conv_geom_init(c->node, &x->shape, &w->shape, false, &g));
    KN_TRY(check_qparam(c, 1, "x_scale", 0, 0));
    KN_TRY(check_qparam(c, 2, "x_zero_point", x->dtype, 0));
    KN_TRY(check_qparam(c, 4, "w_scale", 0, g.c_out));
    KN_TRY(check_qparam(c, 5, "w_zero_point", w->dtype, g.c_out));
    KN_TRY(check_qparam(c, 6, "y_scale", 0, 0));
    KN_TRY(check_qparam(c, 7, "y_zero_point", c->in[7].dtype, 0));
    if (kn_has_input(c, 8)) {
        const kn_tensor *bias = &c->in[8];
        if (bias->dtype != KILN_DTYPE_INT32 || bias->shape.rank != 1 || bias->shape.d[0] != g.c_out)
            return kn_error(KILN_ERR_SHAPE, "input B must be int32 [%lld]", (long long)g.c_out);
    }
    c->out[0].dtype = c->in[7].dtype;
    kn_conv_geom_out_shape(&g, &c->out[0].shape);
    return KILN_OK;
}

kiln_status kn_infer_deform_conv(kn_infer_ctx *c) {
    KN_TRY(kn_extra_need(c, 3, 5, 1));
    const kn_tensor *x = &c->in[0], *w = &c->in[1], *off = &c->in[2];
    if (!kn_extra_is_float(x->dtype) || w->dtype != x->dtype || off->dtype != x->dtype)
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
