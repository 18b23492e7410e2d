/* QLinearMatMul, ConvInteger, QLinearConv: shape inference. */
#include "ops/infer_util.h"
#include "ops/nn/conv_geom.h"

static bool is_q8(int32_t dt) {
    return dt == KILN_DTYPE_INT8 || dt == KILN_DTYPE_UINT8;
}

/* A quantization parameter: a scalar, or (when per_len > 0) a 1-D tensor of per_len. */
static kiln_status check_qparam(const kn_infer_ctx *c, int i, const char *name, int32_t dtype,
                                int64_t per_len) {
    const kn_tensor *t = &c->in[i];
    if (dtype == 0 ? !kn_infer_is_float(t->dtype) : t->dtype != dtype)
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

kiln_status kn_infer_qlinear_matmul(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need(c, 8, 8, 1));
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
    return kn_infer_matmul_shape(&a->shape, &b->shape, &c->out[0].shape);
}

kiln_status kn_infer_conv_integer(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need(c, 2, 4, 1));
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
    KN_TRY(kn_infer_need(c, 8, 9, 1));
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
