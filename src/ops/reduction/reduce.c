/* Reduce*: attribute parsing, opset differences and shape inference, and the axis handling
 * that Softmax, ArgMax and the losses share with them. */
#include "ops/infer_util.h"
#include "ops/reduction/reduce.h"

#include <string.h>

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
    bool ok = kn_infer_is_float(x->dtype) || x->dtype == KILN_DTYPE_INT32 ||
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
