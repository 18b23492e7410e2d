/* The ai.onnx.preview.training optimizers Adagrad, Momentum and Adam: shape inference. */
#include "ops/infer_util.h"

#include <string.h>

/* Inputs R, T, then `per` groups of n tensors (X..., G..., and V/H...); outputs `outs`
 * groups of n shaped like X. */
kiln_status kn_infer_optimizer(kn_infer_ctx *c) {
    const char *op = c->node->op_type;
    int per = strcmp(op, "Adam") == 0 ? 4 : 3, outs = per - 1;
    if (c->n_in < 2 + per || (c->n_in - 2) % per != 0)
        return kn_error(KILN_ERR_MODEL, "%s takes R, T and %d groups of tensors; got %d inputs", op,
                        per, c->n_in);
    int n = (c->n_in - 2) / per;
    if (c->n_out != outs * n)
        return kn_error(KILN_ERR_MODEL, "%s with %d tensors makes %d outputs, got %d", op, n,
                        outs * n, c->n_out);
    if (!kn_infer_is_float(c->in[0].dtype) || kn_tensor_numel(&c->in[0]) != 1)
        return kn_error(KILN_ERR_SHAPE, "input R must be a float scalar");
    if (c->in[1].dtype != KILN_DTYPE_INT64 || kn_tensor_numel(&c->in[1]) != 1)
        return kn_error(KILN_ERR_SHAPE, "input T must be an int64 scalar");
    if (strcmp(op, "Momentum") == 0) {
        const char *mode = kn_attr_string(c->node, "mode", "");
        if (strcmp(mode, "standard") != 0 && strcmp(mode, "nesterov") != 0)
            return kn_error(KILN_ERR_MODEL,
                            "attribute 'mode' must be 'standard' or "
                            "'nesterov', got '%s'",
                            mode);
    }
    for (int i = 0; i < n; i++) {
        const kn_tensor *x = &c->in[2 + i];
        if (x->dtype != KILN_DTYPE_FLOAT32 && x->dtype != KILN_DTYPE_FLOAT64)
            return kn_error(KILN_ERR_DTYPE, "input %d must be float or double", 2 + i);
        for (int g = 1; g < per; g++) {
            const kn_tensor *o = &c->in[2 + g * n + i];
            if (o->dtype != x->dtype || !kn_shape_equal(&o->shape, &x->shape))
                return kn_error(KILN_ERR_SHAPE,
                                "input %d must have the dtype and shape of "
                                "input %d",
                                2 + g * n + i, 2 + i);
        }
        for (int g = 0; g < outs; g++)
            c->out[g * n + i] = (kn_tensor){.dtype = x->dtype, .shape = x->shape};
    }
    return KILN_OK;
}
