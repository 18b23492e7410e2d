/* LinearAttention (opset 27): the recurrent linear attention of DeltaNet, Gated DeltaNet, GLA
 * and RetNet layers (update rules linear, gated, delta, gated_delta). Shape inference. */
#include "ops/infer_util.h"

#include <string.h>

kiln_status kn_infer_linear_attention(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need(c, 3, 6, 2));
    KN_TRY(kn_infer_need_output0(c));
    const kn_node *n = c->node;
    const kn_tensor *q = &c->in[0], *k = &c->in[1], *v = &c->in[2];
    char b1[96];
    int64_t hq = kn_attr_int(n, "q_num_heads", 0), hkv = kn_attr_int(n, "kv_num_heads", 0);
    if (hq <= 0 || hkv <= 0 || hq % hkv != 0)
        return kn_error(KILN_ERR_MODEL,
                        "attributes 'q_num_heads' (%lld) and 'kv_num_heads' (%lld) are required, "
                        "the first a positive multiple of the second",
                        (long long)hq, (long long)hkv);
    const char *rule = kn_attr_string(n, "update_rule", "gated_delta");
    bool gated = strcmp(rule, "gated") == 0 || strcmp(rule, "gated_delta") == 0;
    bool delta = strcmp(rule, "delta") == 0 || strcmp(rule, "gated_delta") == 0;
    if (!gated && !delta && strcmp(rule, "linear") != 0)
        return kn_error(KILN_ERR_MODEL,
                        "attribute 'update_rule' is '%.40s'; expected linear, gated, delta or "
                        "gated_delta",
                        rule);
    if (!kn_infer_is_float(q->dtype) || q->dtype == KILN_DTYPE_FLOAT64)
        return kn_error(KILN_ERR_DTYPE, "query is %s; the op takes float, float16 or bfloat16",
                        kn_dtype_name(q->dtype));
    for (int i = 1; i < 6; i++)
        if (i != 3 && kn_has_input(c, i) && c->in[i].dtype != q->dtype)
            return kn_error(KILN_ERR_DTYPE, "input %d is %s, query is %s", i,
                            kn_dtype_name(c->in[i].dtype), kn_dtype_name(q->dtype));
    for (int i = 0; i < 3; i++)
        if (c->in[i].shape.rank != 3)
            return kn_error(KILN_ERR_SHAPE, "input %d %s must be [batch, length, heads * size]", i,
                            kn_shape_str(&c->in[i].shape, b1, sizeof b1));
    int64_t b = q->shape.d[0], t = q->shape.d[1];
    if (k->shape.d[0] != b || v->shape.d[0] != b || k->shape.d[1] != t || v->shape.d[1] != t)
        return kn_error(KILN_ERR_SHAPE, "query, key and value must share batch and length");
    if (q->shape.d[2] % hq != 0 || k->shape.d[2] % hkv != 0 || v->shape.d[2] % hkv != 0)
        return kn_error(KILN_ERR_SHAPE, "the last dims of query, key and value must divide by "
                                        "their head counts");
    int64_t dk = q->shape.d[2] / hq, dv = v->shape.d[2] / hkv;
    if (k->shape.d[2] / hkv != dk)
        return kn_error(KILN_ERR_SHAPE, "key's head size (%lld) must equal query's (%lld)",
                        (long long)(k->shape.d[2] / hkv), (long long)dk);
    kn_shape state = {.rank = 4, .d = {b, hkv, dk, dv}};
    int32_t sdt = q->dtype;
    if (kn_has_input(c, 3)) {
        if (!kn_shape_equal(&c->in[3].shape, &state))
            return kn_error(KILN_ERR_SHAPE, "past_state %s must be [batch, kv heads, %lld, %lld]",
                            kn_shape_str(&c->in[3].shape, b1, sizeof b1), (long long)dk,
                            (long long)dv);
        sdt = c->in[3].dtype;
        if (!kn_infer_is_float(sdt) || sdt == KILN_DTYPE_FLOAT64)
            return kn_error(KILN_ERR_DTYPE, "past_state is %s", kn_dtype_name(sdt));
    }
    if (gated != kn_has_input(c, 4))
        return kn_error(KILN_ERR_MODEL, "update rule '%s' %s the decay input", rule,
                        gated ? "needs" : "takes no");
    if (delta != kn_has_input(c, 5))
        return kn_error(KILN_ERR_MODEL, "update rule '%s' %s the beta input", rule,
                        delta ? "needs" : "takes no");
    if (gated) {
        const kn_shape *g = &c->in[4].shape;
        if (g->rank != 3 || g->d[0] != b || g->d[1] != t || (g->d[2] != hkv && g->d[2] != hkv * dk))
            return kn_error(KILN_ERR_SHAPE,
                            "decay %s must be [batch, length, kv heads] or [batch, length, kv "
                            "heads * %lld]",
                            kn_shape_str(g, b1, sizeof b1), (long long)dk);
    }
    if (delta) {
        const kn_shape *be = &c->in[5].shape;
        if (be->rank != 3 || be->d[0] != b || be->d[1] != t || (be->d[2] != hkv && be->d[2] != 1))
            return kn_error(KILN_ERR_SHAPE, "beta %s must be [batch, length, kv heads or 1]",
                            kn_shape_str(be, b1, sizeof b1));
    }
    c->out[0] = (kn_tensor){.dtype = q->dtype, .shape = {.rank = 3, .d = {b, t, hq * dv}}};
    if (c->n_out > 1)
        c->out[1] = (kn_tensor){.dtype = sdt, .shape = state};
    return KILN_OK;
}
