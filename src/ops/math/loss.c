/* NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss: shape inference. */
#include "ops/infer_util.h"
#include "ops/reduction/reduce.h"

#include <string.h>

/* NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss: input [N, C, d...], target
 * [N, d...], optional weight [C]. */
kiln_status kn_infer_loss(kn_infer_ctx *c) {
    const kn_tensor *x = &c->in[0], *t = &c->in[1];
    char b1[48], b2[48];
    if (!kn_infer_is_float(x->dtype))
        return kn_error(KILN_ERR_DTYPE, "input 0 must be a float type, got %s",
                        kn_dtype_name(x->dtype));
    if (x->shape.rank < 2)
        return kn_error(KILN_ERR_SHAPE, "input 0 must have rank >= 2, got %d", x->shape.rank);
    if (!kn_has_input(c, 1) || (t->dtype != KILN_DTYPE_INT64 && t->dtype != KILN_DTYPE_INT32))
        return kn_error(KILN_ERR_DTYPE, "input 1 (target) must be int32 or int64");
    bool ok = t->shape.rank == x->shape.rank - 1 && t->shape.d[0] == x->shape.d[0];
    for (int32_t i = 1; ok && i < t->shape.rank; i++)
        ok = t->shape.d[i] == x->shape.d[i + 1];
    if (!ok)
        return kn_error(KILN_ERR_SHAPE,
                        "input 1 (target) of shape %s does not match input 0 %s "
                        "without its class dim",
                        kn_shape_str(&t->shape, b1, sizeof b1),
                        kn_shape_str(&x->shape, b2, sizeof b2));
    if (kn_has_input(c, 2) && (c->in[2].dtype != x->dtype || c->in[2].shape.rank != 1 ||
                               c->in[2].shape.d[0] != x->shape.d[1]))
        return kn_error(KILN_ERR_SHAPE, "input 2 (weight) must be [C = %lld] of input 0's type",
                        (long long)x->shape.d[1]);
    const char *red = kn_attr_string(c->node, "reduction", "mean");
    bool none = strcmp(red, "none") == 0;
    if (!none && strcmp(red, "sum") != 0 && strcmp(red, "mean") != 0)
        return kn_error(KILN_ERR_MODEL, "attribute reduction must be none, sum or mean, got '%s'",
                        red);
    c->out[0].dtype = x->dtype;
    c->out[0].shape = none ? t->shape : (kn_shape){0};
    if (c->n_out > 1 && c->node->out[1] >= 0) {
        c->out[1].dtype = x->dtype;
        c->out[1].shape = x->shape;
    }
    return KILN_OK;
}
