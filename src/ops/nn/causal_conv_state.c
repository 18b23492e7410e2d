/* CausalConvWithState (opset 27): the stateful causal depthwise 1-D convolution of Gated DeltaNet
 * and Mamba layers. Shape inference. */
#include "ops/infer_util.h"

#include <string.h>

kiln_status kn_infer_causal_conv_state(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need(c, 2, 4, 2));
    KN_TRY(kn_infer_need_output0(c));
    const kn_tensor *x = &c->in[0], *w = &c->in[1];
    char b1[96], b2[96];
    if (!kn_infer_is_float(x->dtype) || x->dtype == KILN_DTYPE_FLOAT64)
        return kn_error(KILN_ERR_DTYPE, "input is %s; the op takes float, float16 or bfloat16",
                        kn_dtype_name(x->dtype));
    for (int i = 1; i < c->n_in; i++)
        if (kn_has_input(c, i) && c->in[i].dtype != x->dtype)
            return kn_error(KILN_ERR_DTYPE, "input %d is %s, input 0 is %s", i,
                            kn_dtype_name(c->in[i].dtype), kn_dtype_name(x->dtype));
    if (x->shape.rank != 3)
        return kn_error(KILN_ERR_SHAPE, "input must be [batch, channels, length], not %s",
                        kn_shape_str(&x->shape, b1, sizeof b1));
    int64_t b = x->shape.d[0], ch = x->shape.d[1];
    if (w->shape.rank != 3 || w->shape.d[0] != ch || w->shape.d[1] != 1 || w->shape.d[2] < 1)
        return kn_error(KILN_ERR_SHAPE, "weight %s must be [channels (%lld), 1, k >= 1]",
                        kn_shape_str(&w->shape, b1, sizeof b1), (long long)ch);
    int64_t k = w->shape.d[2];
    if (kn_has_input(c, 2) && (c->in[2].shape.rank != 1 || c->in[2].shape.d[0] != ch))
        return kn_error(KILN_ERR_SHAPE, "bias %s must be [channels (%lld)]",
                        kn_shape_str(&c->in[2].shape, b1, sizeof b1), (long long)ch);
    kn_shape state = {.rank = 3, .d = {b, ch, k - 1}};
    if (kn_has_input(c, 3) && !kn_shape_equal(&c->in[3].shape, &state))
        return kn_error(KILN_ERR_SHAPE, "past_state %s must be [batch, channels, k - 1] = %s",
                        kn_shape_str(&c->in[3].shape, b1, sizeof b1),
                        kn_shape_str(&state, b2, sizeof b2));
    const char *act = kn_attr_string(c->node, "activation", "none");
    if (strcmp(act, "none") != 0 && strcmp(act, "silu") != 0 && strcmp(act, "swish") != 0)
        return kn_error(KILN_ERR_MODEL,
                        "attribute 'activation' is '%.40s'; expected none, silu "
                        "or swish",
                        act);
    c->out[0] = (kn_tensor){.dtype = x->dtype, .shape = x->shape};
    if (c->n_out > 1)
        c->out[1] = (kn_tensor){.dtype = x->dtype, .shape = state};
    return KILN_OK;
}
