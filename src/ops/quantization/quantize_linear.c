/* QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear: shape inference. */
#include "ops/infer_util.h"

#include "core/narrow_dtype.h"

/* The quantized types: 8- and 16-bit integers, and (opsets 19 and 21) float8 and 4-bit. */
static bool is_quant_int(int32_t dt) {
    return dt == KILN_DTYPE_UINT8 || dt == KILN_DTYPE_INT8 || dt == KILN_DTYPE_UINT16 ||
           dt == KILN_DTYPE_INT16 || (kn_dtype_is_narrow(dt) && dt != KILN_DTYPE_FLOAT8E8M0);
}

/* Scale (and zero point) must be per-tensor, per-axis or blocked (opset 21) over x. */
static kiln_status check_qparams(const kn_infer_ctx *c, const char *sname, const char *zname) {
    const kn_node *n = c->node;
    const kn_tensor *x = &c->in[0], *s = &c->in[1];
    int64_t block = n->opset >= 21 ? kn_attr_int(n, "block_size", 0) : 0;
    int64_t numel = kn_shape_numel(&s->shape);
    if (block < 0)
        return kn_error(KILN_ERR_MODEL, "attribute 'block_size' must be >= 0");
    if (block == 0 && numel == 1 && s->shape.rank <= 1) {
        /* per-tensor */
    } else if (block == 0) {
        int64_t axis;
        if (n->opset < 13)
            return kn_error(KILN_ERR_SHAPE, "input %s must be a scalar before opset 13", sname);
        KN_TRY(kn_norm_axis(kn_attr_int(n, "axis", 1), x->shape.rank, &axis));
        if (s->shape.rank != 1 || s->shape.d[0] != x->shape.d[axis])
            return kn_error(KILN_ERR_SHAPE,
                            "input %s must be a scalar or have %lld elements "
                            "(x's axis %lld)",
                            sname, (long long)x->shape.d[axis], (long long)axis);
    } else {
        int64_t axis;
        KN_TRY(kn_norm_axis(kn_attr_int(n, "axis", 1), x->shape.rank, &axis));
        if (s->shape.rank != x->shape.rank)
            return kn_error(KILN_ERR_SHAPE, "blocked input %s must have x's rank", sname);
        for (int i = 0; i < x->shape.rank; i++) {
            int64_t want = i == axis ? (x->shape.d[i] + block - 1) / block : x->shape.d[i];
            if (s->shape.d[i] != want)
                return kn_error(KILN_ERR_SHAPE, "blocked input %s dim %d must be %lld", sname, i,
                                (long long)want);
        }
    }
    if (kn_has_input(c, 2) && !kn_shape_equal(&c->in[2].shape, &s->shape) &&
        !(kn_shape_numel(&c->in[2].shape) == 1 && numel == 1))
        return kn_error(KILN_ERR_SHAPE, "input %s must have the shape of %s", zname, sname);
    return KILN_OK;
}

kiln_status kn_infer_quantize(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need_exact(c, 2, 3, 1));
    const kn_tensor *x = &c->in[0];
    if (!kn_infer_is_float(x->dtype) && x->dtype != KILN_DTYPE_INT32)
        return kn_error(KILN_ERR_DTYPE, "input x has dtype %s; expected float or int32",
                        kn_dtype_name(x->dtype));
    if (!kn_infer_is_float(c->in[1].dtype))
        return kn_error(KILN_ERR_DTYPE, "input y_scale must be a float tensor");
    int32_t out = KILN_DTYPE_UINT8;
    int64_t attr = c->node->opset >= 21 ? kn_attr_int(c->node, "output_dtype", 0) : 0;
    if (kn_has_input(c, 2))
        out = c->in[2].dtype;
    else if (attr != 0)
        out = (int32_t)attr;
    if (attr != 0 && attr != out)
        return kn_error(KILN_ERR_MODEL, "attribute 'output_dtype' disagrees with y_zero_point");
    if (!is_quant_int(out))
        return kn_error(KILN_ERR_UNSUPPORTED, "quantizing to %s is not supported",
                        kn_dtype_name(out));
    KN_TRY(check_qparams(c, "y_scale", "y_zero_point"));
    c->out[0].dtype = out;
    c->out[0].shape = x->shape;
    return KILN_OK;
}

kiln_status kn_infer_dequantize(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need_exact(c, 2, 3, 1));
    const kn_tensor *x = &c->in[0];
    if (!is_quant_int(x->dtype) && x->dtype != KILN_DTYPE_INT32)
        return kn_error(KILN_ERR_UNSUPPORTED, "dequantizing %s is not supported",
                        kn_dtype_name(x->dtype));
    if (!kn_infer_is_float(c->in[1].dtype))
        return kn_error(KILN_ERR_DTYPE, "input x_scale must be a float tensor");
    if (kn_has_input(c, 2) && c->in[2].dtype != x->dtype)
        return kn_error(KILN_ERR_DTYPE, "input x_zero_point must have x's dtype %s",
                        kn_dtype_name(x->dtype));
    KN_TRY(check_qparams(c, "x_scale", "x_zero_point"));
    c->out[0].dtype = c->in[1].dtype;
    c->out[0].shape = x->shape;
    return KILN_OK;
}

kiln_status kn_infer_dynamic_quantize(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need_exact(c, 1, 1, 3));
    if (c->in[0].dtype != KILN_DTYPE_FLOAT32)
        return kn_error(KILN_ERR_DTYPE, "input x must be float32, got %s",
                        kn_dtype_name(c->in[0].dtype));
    c->out[0].dtype = KILN_DTYPE_UINT8;
    c->out[0].shape = c->in[0].shape;
    c->out[1].dtype = KILN_DTYPE_FLOAT32;
    c->out[1].shape.rank = 0;
    c->out[2].dtype = KILN_DTYPE_UINT8;
    c->out[2].shape.rank = 0;
    return KILN_OK;
}
