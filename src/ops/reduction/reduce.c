/* Reductions, Softmax/LogSoftmax/Hardmax, ArgMax/ArgMin, TopK and the losses built on them
 * (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss): attribute parsing, opset differences
 * and shape inference. */
#include "ops/reduction/reduce.h"

#include <string.h>

static bool is_float_dtype(int32_t dt) {
    return dt == KILN_DTYPE_FLOAT32 || dt == KILN_DTYPE_FLOAT64 || dt == KILN_DTYPE_FLOAT16 ||
           dt == KILN_DTYPE_BFLOAT16;
}

static bool is_numeric_dtype(int32_t dt) {
    return is_float_dtype(dt) || kn_dtype_is_integer(dt);
}

/* ReduceSum took axes as an input from opset 13, every other Reduce* from opset 18. */
static bool axes_is_input(const kn_node *node) {
    int since = strcmp(node->op_type, "ReduceSum") == 0 ? 13 : 18;
    return node->opset >= since;
}

static kiln_status mark_axis(kn_reduce_axes *out, int64_t axis, int32_t rank) {
    int64_t a;
    KN_TRY(kn_norm_axis(axis, rank, &a));
    if (out->mask[a])
        return kn_error(KILN_ERR_MODEL, "axes: axis %lld appears more than once", (long long)axis);
    out->mask[a] = true;
    return KILN_OK;
}

kiln_status kn_reduce_axes_read(const kn_node *node, const kn_shape *x, const kn_tensor *axes_in,
                                kn_reduce_axes *out) {
    memset(out, 0, sizeof *out);
    out->keepdims = kn_attr_int(node, "keepdims", 1) != 0;
    bool noop_empty = kn_attr_int(node, "noop_with_empty_axes", 0) != 0;
    int64_t n_axes = 0;
    if (axes_is_input(node)) {
        if (axes_in != NULL && axes_in->dtype != 0) {
            if (axes_in->dtype != KILN_DTYPE_INT64)
                return kn_error(KILN_ERR_DTYPE, "input 1 (axes) must be int64, got %s",
                                kn_dtype_name(axes_in->dtype));
            if (axes_in->shape.rank > 1)
                return kn_error(KILN_ERR_SHAPE, "input 1 (axes) must be 1-D, got rank %d",
                                axes_in->shape.rank);
            n_axes = kn_shape_numel(&axes_in->shape);
            if (n_axes > 0 && axes_in->data == NULL)
                return KN_NEED_DATA;
            const int64_t *ax = axes_in->data;
            for (int64_t i = 0; i < n_axes; i++)
                KN_TRY(mark_axis(out, ax[i], x->rank));
        }
    } else {
        const int64_t *ax = NULL;
        n_axes = kn_attr_ints(node, "axes", &ax);
        for (int64_t i = 0; i < n_axes; i++)
            KN_TRY(mark_axis(out, ax[i], x->rank));
    }
    if (n_axes == 0) {
        if (noop_empty)
            out->noop = true;
        else
            for (int32_t i = 0; i < x->rank; i++)
                out->mask[i] = true;
    }
    return KILN_OK;
}

void kn_reduce_out_shape(const kn_shape *x, const kn_reduce_axes *a, kn_shape *out) {
    if (a->noop) {
        *out = *x;
        return;
    }
    out->rank = 0;
    for (int32_t i = 0; i < x->rank; i++) {
        if (!a->mask[i])
            out->d[out->rank++] = x->d[i];
        else if (a->keepdims)
            out->d[out->rank++] = 1;
    }
}

void kn_shape_split_axis(const kn_shape *x, int64_t axis, int64_t *outer, int64_t *n,
                         int64_t *inner) {
    *outer = 1;
    *inner = 1;
    for (int64_t i = 0; i < axis; i++)
        *outer *= x->d[i];
    *n = axis < x->rank ? x->d[axis] : 1;
    for (int64_t i = axis + 1; i < x->rank; i++)
        *inner *= x->d[i];
}

kiln_status kn_softmax_geometry(const kn_node *node, const kn_shape *x, int64_t *outer, int64_t *n,
                                int64_t *inner) {
    bool single_axis = node->opset >= 13;
    int64_t axis = kn_attr_int(node, "axis", single_axis ? -1 : 1);
    int64_t a;
    if (x->rank == 0)
        return kn_error(KILN_ERR_SHAPE, "input 0 must have rank >= 1");
    if (single_axis) {
        KN_TRY(kn_norm_axis(axis, x->rank, &a));
        kn_shape_split_axis(x, a, outer, n, inner);
        return KILN_OK;
    }
    /* Before opset 13 axis may equal rank (everything is one row of length 1). */
    if (axis < -(int64_t)x->rank || axis > (int64_t)x->rank)
        return kn_error(KILN_ERR_SHAPE, "axis %lld is out of range for rank %d", (long long)axis,
                        x->rank);
    a = axis < 0 ? axis + x->rank : axis;
    *outer = 1;
    *n = 1;
    *inner = 1;
    for (int64_t i = 0; i < x->rank; i++) {
        if (i < a)
            *outer *= x->d[i];
        else
            *n *= x->d[i];
    }
    return KILN_OK;
}

kiln_status kn_infer_reduce(kn_infer_ctx *c) {
    const kn_tensor *x = &c->in[0];
    const char *op = c->node->op_type;
    bool minmax = strcmp(op, "ReduceMax") == 0 || strcmp(op, "ReduceMin") == 0;
    bool ok = is_float_dtype(x->dtype) || x->dtype == KILN_DTYPE_INT32 ||
              x->dtype == KILN_DTYPE_INT64 || x->dtype == KILN_DTYPE_UINT32 ||
              x->dtype == KILN_DTYPE_UINT64 ||
              (minmax && (x->dtype == KILN_DTYPE_INT8 || x->dtype == KILN_DTYPE_UINT8 ||
                          x->dtype == KILN_DTYPE_BOOL));
    if (!ok)
        return kn_error(KILN_ERR_DTYPE, "input 0 has unsupported type %s", kn_dtype_name(x->dtype));
    kn_reduce_axes a;
    KN_TRY(kn_reduce_axes_read(c->node, &x->shape, kn_has_input(c, 1) ? &c->in[1] : NULL, &a));
    c->out[0].dtype = x->dtype;
    kn_reduce_out_shape(&x->shape, &a, &c->out[0].shape);
    return KILN_OK;
}

kiln_status kn_infer_softmax(kn_infer_ctx *c) {
    const kn_tensor *x = &c->in[0];
    if (!is_float_dtype(x->dtype))
        return kn_error(KILN_ERR_DTYPE, "input 0 must be a float type, got %s",
                        kn_dtype_name(x->dtype));
    int64_t outer, n, inner;
    KN_TRY(kn_softmax_geometry(c->node, &x->shape, &outer, &n, &inner));
    c->out[0].dtype = x->dtype;
    c->out[0].shape = x->shape;
    return KILN_OK;
}

kiln_status kn_infer_arg(kn_infer_ctx *c) {
    const kn_tensor *x = &c->in[0];
    if (!is_numeric_dtype(x->dtype))
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
    if (!is_numeric_dtype(x->dtype))
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

/* NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss: input [N, C, d...], target
 * [N, d...], optional weight [C]. */
kiln_status kn_infer_loss(kn_infer_ctx *c) {
    const kn_tensor *x = &c->in[0], *t = &c->in[1];
    char b1[48], b2[48];
    if (!is_float_dtype(x->dtype))
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
