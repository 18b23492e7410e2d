/* ArgMax, ArgMin and TopK: shape inference. */
#include "ops/infer_util.h"
#include "ops/reduction/reduce.h"

kiln_status kn_infer_arg(kn_infer_ctx *c) {
    const kn_tensor *x = &c->in[0];
    if (!(kn_infer_is_float(x->dtype) || kn_dtype_is_integer(x->dtype)))
        return kn_error(KILN_ERR_DTYPE, "input 0 has unsupported type %s", kn_dtype_name(x->dtype));
    if (x->shape.rank == 0)
        return kn_error(KILN_ERR_SHAPE, "input 0 must have rank >= 1");
    int64_t axis;
    KN_TRY(kn_norm_axis(kn_attr_int(c->node, "axis", 0), x->shape.rank, &axis));
    if (x->shape.d[axis] == 0)
        return kn_error(KILN_ERR_SHAPE, "input 0 has an empty dimension at axis %lld",
                        (long long)axis);
    bool keep = kn_attr_int(c->node, "keepdims", 1) != 0;
    kn_shape *o = &c->out[0].shape;
    o->rank = 0;
    for (int32_t i = 0; i < x->shape.rank; i++) {
        if (i != axis)
            o->d[o->rank++] = x->shape.d[i];
        else if (keep)
            o->d[o->rank++] = 1;
    }
    c->out[0].dtype = KILN_DTYPE_INT64;
    return KILN_OK;
}

static kiln_status topk_k(const kn_infer_ctx *c, int64_t *k) {
    if (c->node->opset < 10) {
        const kn_attr *a = kn_node_attr(c->node, "k");
        if (a == NULL)
            return kn_error(KILN_ERR_MODEL, "attribute k is required before opset 10");
        *k = a->i;
        return KILN_OK;
    }
    if (!kn_has_input(c, 1))
        return kn_error(KILN_ERR_MODEL, "input 1 (K) is required");
    const kn_tensor *kt = &c->in[1];
    if (kt->dtype != KILN_DTYPE_INT64)
        return kn_error(KILN_ERR_DTYPE, "input 1 (K) must be int64, got %s",
                        kn_dtype_name(kt->dtype));
    if (kt->shape.rank > 1 || kn_shape_numel(&kt->shape) != 1)
        return kn_error(KILN_ERR_SHAPE, "input 1 (K) must hold exactly one value");
    if (kt->data == NULL)
        return KN_NEED_DATA;
    *k = *(const int64_t *)kt->data;
    return KILN_OK;
}

kiln_status kn_infer_topk(kn_infer_ctx *c) {
    const kn_tensor *x = &c->in[0];
    if (!(kn_infer_is_float(x->dtype) || kn_dtype_is_integer(x->dtype)))
        return kn_error(KILN_ERR_DTYPE, "input 0 has unsupported type %s", kn_dtype_name(x->dtype));
    if (x->shape.rank == 0)
        return kn_error(KILN_ERR_SHAPE, "input 0 must have rank >= 1");
    int64_t axis, k;
    KN_TRY(kn_norm_axis(kn_attr_int(c->node, "axis", -1), x->shape.rank, &axis));
    KN_TRY(topk_k(c, &k));
    if (k < 0 || k > x->shape.d[axis])
        return kn_error(KILN_ERR_SHAPE, "K = %lld must be in [0, %lld] (input 0 dim %lld)",
                        (long long)k, (long long)x->shape.d[axis], (long long)axis);
    for (int i = 0; i < c->n_out && i < 2; i++) {
        c->out[i].shape = x->shape;
        c->out[i].shape.d[axis] = k;
    }
    c->out[0].dtype = x->dtype;
    if (c->n_out > 1)
        c->out[1].dtype = KILN_DTYPE_INT64;
    return KILN_OK;
}
