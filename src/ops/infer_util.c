/* The extra family: ops the other families do not cover. Attention and rotary embedding,
 * signal processing, quantized linear algebra, TreeEnsemble and the small ops (training
 * optimizers, TfIdfVectorizer, ml helpers) have files of their own (extra_*.c). */
#include "ops/infer_util.h"

kiln_status kn_extra_need(const kn_infer_ctx *c, int lo, int hi, int max_out) {
    if (c->n_in < lo || c->n_in > hi)
        return kn_error(KILN_ERR_MODEL, "%s takes %d to %d inputs, got %d", c->node->op_type, lo,
                        hi, c->n_in);
    for (int i = 0; i < lo; i++)
        if (!kn_has_input(c, i))
            return kn_error(KILN_ERR_MODEL, "input %d is required", i);
    if (c->n_out < 1 || c->n_out > max_out)
        return kn_error(KILN_ERR_MODEL, "%s makes 1 to %d outputs, got %d", c->node->op_type,
                        max_out, c->n_out);
    return KILN_OK;
}

bool kn_extra_is_float(int32_t dt) {
    return dt == KILN_DTYPE_FLOAT32 || dt == KILN_DTYPE_FLOAT16 || dt == KILN_DTYPE_BFLOAT16 ||
           dt == KILN_DTYPE_FLOAT64;
}

kiln_status kn_extra_scalar_i64(const kn_infer_ctx *c, int i, const char *name, int64_t *v) {
    const kn_tensor *t = &c->in[i];
    if (!kn_dtype_is_integer(t->dtype))
        return kn_error(KILN_ERR_DTYPE, "input %s must be an integer, got %s", name,
                        kn_dtype_name(t->dtype));
    if (kn_tensor_numel(t) != 1 || t->shape.rank > 1)
        return kn_error(KILN_ERR_SHAPE, "input %s must be a scalar", name);
    if (t->data == NULL)
        return KN_NEED_DATA;
    *v = kn_tensor_get_i64(t, 0);
    return KILN_OK;
}

kiln_status kn_infer_affine_grid(kn_infer_ctx *c) {
    KN_TRY(kn_extra_need(c, 2, 2, 1));
    const kn_tensor *theta = &c->in[0], *size = &c->in[1];
    if (!kn_extra_is_float(theta->dtype))
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
