/* The extra family: ops the other families do not cover. Attention and rotary embedding,
 * signal processing and quantized linear algebra have files of their own (extra_*.c). */
#include "ops/extra_internal.h"

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

const kn_op_schema kn_ops_extra[] = {
    {"", "Attention", 23, 0, kn_infer_attention},
    {"", "RotaryEmbedding", 23, 0, kn_infer_rotary_embedding},
    {"", "HannWindow", 17, 0, kn_infer_window},
    {"", "HammingWindow", 17, 0, kn_infer_window},
    {"", "BlackmanWindow", 17, 0, kn_infer_window},
    {"", "DFT", 17, 0, kn_infer_dft},
    {"", "STFT", 17, 0, kn_infer_stft},
    {"", "MelWeightMatrix", 17, 0, kn_infer_mel_weight_matrix},
    {0},
};
