/* kiln.QConv and kiln.QMatMul: the int8 products kn_pass_fuse_qdq makes of
 * DequantizeLinear -> Conv / MatMul / Gemm -> QuantizeLinear (see passes.h for the inputs). */
#include "ops/infer_util.h"
#include "ops/nn/conv_geom.h"

static bool is_q8(int32_t dt) {
    return dt == KILN_DTYPE_INT8 || dt == KILN_DTYPE_UINT8;
}

static kiln_status check_common(const kn_infer_ctx *c, int64_t n_out_ch) {
    if (!is_q8(c->in[0].dtype) || c->in[3].dtype != KILN_DTYPE_INT8 || !is_q8(c->in[7].dtype))
        return kn_error(KILN_ERR_DTYPE, "x and y must be int8 or uint8 and w int8");
    int64_t ns = kn_tensor_numel(&c->in[4]);
    if (ns != 1 && ns != n_out_ch)
        return kn_error(KILN_ERR_SHAPE, "w_scale must have 1 or %lld elements",
                        (long long)n_out_ch);
    if (kn_has_input(c, 8) &&
        (c->in[8].dtype != KILN_DTYPE_FLOAT32 || kn_tensor_numel(&c->in[8]) != n_out_ch))
        return kn_error(KILN_ERR_SHAPE, "bias must be float32 [%lld]", (long long)n_out_ch);
    return KILN_OK;
}

/* Inputs 9 to 13 (kn_pass_fuse_qadd): a residual r, its scale and zero point, and the scale
 * and zero point the conv's own result is rounded to before r is added; r has the output's
 * shape. */
kiln_status kn_infer_qconv(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need(c, 8, 14, 1));
    kn_conv_geom g;
    KN_TRY(kn_conv_geom_init(c->node, &c->in[0].shape, &c->in[3].shape, false, &g));
    KN_TRY(check_common(c, g.c_out));
    c->out[0].dtype = c->in[7].dtype;
    kn_conv_geom_out_shape(&g, &c->out[0].shape);
    if (kn_has_input(c, 9)) {
        if (c->n_in < 14 || !is_q8(c->in[9].dtype) || !is_q8(c->in[11].dtype) ||
            !is_q8(c->in[13].dtype))
            return kn_error(KILN_ERR_DTYPE, "the residual must be int8 or uint8 with its scale "
                                            "and zero point");
        if (!kn_shape_equal(&c->in[9].shape, &c->out[0].shape))
            return kn_error(KILN_ERR_SHAPE, "the residual must have the output's shape");
    }
    return KILN_OK;
}

kiln_status kn_infer_qmatmul(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need(c, 8, 9, 1));
    const kn_shape *b = &c->in[3].shape;
    if (b->rank != 2)
        return kn_error(KILN_ERR_SHAPE, "w must be 2-D [K, N]");
    KN_TRY(check_common(c, b->d[1]));
    /* kiln_float_output: the DequantizeLinear of y folded in (kn_pass_expand_qdq_pairs) */
    c->out[0].dtype =
        kn_attr_int(c->node, "kiln_float_output", 0) ? KILN_DTYPE_FLOAT32 : c->in[7].dtype;
    return kn_infer_matmul_shape(&c->in[0].shape, b, &c->out[0].shape);
}
