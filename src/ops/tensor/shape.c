/* Inference for ops that only re-describe or broadcast a tensor's shape: Reshape, Flatten,
 * Squeeze, Unsqueeze, Shape, Size, Identity, Dropout, Expand, Tile. */
#include "ops/tensor/tensor_ops.h"

#include <string.h>

static void set_out(kn_infer_ctx *c, int i, int32_t dtype, const kn_shape *s) {
    if (i < c->n_out) {
        c->out[i].dtype = dtype;
        c->out[i].shape = *s;
    }
}

kiln_status tensor_infer_reshape(kn_infer_ctx *c) {
    KN_TRY(tensor_need_input(c, 0, "data"));
    const kn_tensor *x = &c->in[0];
    KN_TRY(tensor_check_movable(x, "input 'data'"));
    int64_t shp[KN_MAX_RANK], n = 0;
    if (c->node->opset < 5) {
        const int64_t *a = NULL;
        if (kn_node_attr(c->node, "shape") == NULL)
            return kn_error(KILN_ERR_MODEL, "Reshape-%d needs its attribute 'shape'",
                            c->node->opset);
        n = kn_attr_ints(c->node, "shape", &a);
        if (n > KN_MAX_RANK)
            return kn_error(KILN_ERR_SHAPE, "attribute 'shape' has %lld values, at most %d",
                            (long long)n, KN_MAX_RANK);
        if (n > 0)
            memcpy(shp, a, (size_t)n * sizeof *shp);
    } else {
        KN_TRY(tensor_need_input(c, 1, "shape"));
        KN_TRY(tensor_read_ints(&c->in[1], "input 'shape'", KN_MAX_RANK, shp, &n));
    }
    bool allowzero = c->node->opset >= 14 && kn_attr_int(c->node, "allowzero", 0) != 0;
    kn_shape out = {.rank = (int32_t)n};
    int infer_at = -1;
    bool has_zero = false;
    int64_t known = 1;
    for (int64_t i = 0; i < n; i++) {
        int64_t v = shp[i];
        if (v == -1) {
            if (infer_at >= 0)
                return kn_error(KILN_ERR_SHAPE, "input 'shape' has more than one -1");
            infer_at = (int)i;
            continue;
        }
        if (v < -1)
            return kn_error(KILN_ERR_SHAPE, "input 'shape'[%lld] is %lld (must be >= -1)",
                            (long long)i, (long long)v);
        if (v == 0) {
            has_zero = true;
            if (!allowzero) {
                if (i >= x->shape.rank)
                    return kn_error(KILN_ERR_SHAPE,
                                    "input 'shape'[%lld] is 0 (copy) but the input has rank %d",
                                    (long long)i, (int)x->shape.rank);
                v = x->shape.d[i];
            }
        }
        out.d[i] = v;
        if (!tensor_mul_ok(known, v, &known))
            return kn_error(KILN_ERR_SHAPE, "input 'shape' describes more than 2^40 elements");
    }
    if (allowzero && has_zero && infer_at >= 0)
        return kn_error(KILN_ERR_SHAPE, "input 'shape' has both 0 and -1 with allowzero=1");
    int64_t total = kn_shape_numel(&x->shape);
    if (infer_at >= 0) {
        if (known == 0)
            return kn_error(KILN_ERR_SHAPE,
                            "cannot infer the -1 dim of input 'shape': other dims multiply to 0");
        if (total % known != 0)
            return kn_error(KILN_ERR_SHAPE,
                            "cannot reshape %lld elements: not divisible by %lld for the -1 dim",
                            (long long)total, (long long)known);
        out.d[infer_at] = total / known;
        known = total;
    }
    if (known != total) {
        char a[96], b[96];
        return kn_error(KILN_ERR_SHAPE, "cannot reshape %s (%lld elements) to %s",
                        kn_shape_str(&x->shape, a, sizeof a), (long long)total,
                        kn_shape_str(&out, b, sizeof b));
    }
    KN_TRY(tensor_check_shape(&out, "reshaped output"));
    set_out(c, 0, x->dtype, &out);
    return KILN_OK;
}

kiln_status tensor_infer_flatten(kn_infer_ctx *c) {
    KN_TRY(tensor_need_input(c, 0, "input"));
    const kn_tensor *x = &c->in[0];
    KN_TRY(tensor_check_movable(x, "input 'input'"));
    int64_t axis = kn_attr_int(c->node, "axis", 1);
    int32_t r = x->shape.rank;
    if (axis < -(int64_t)r || axis > r)
        return kn_error(KILN_ERR_SHAPE, "attribute 'axis' %lld is out of range [-%d, %d]",
                        (long long)axis, (int)r, (int)r);
    if (axis < 0)
        axis += r;
    kn_shape out = {.rank = 2, .d = {1, 1}};
    for (int32_t i = 0; i < r; i++)
        out.d[i < axis ? 0 : 1] *= x->shape.d[i];
    set_out(c, 0, x->dtype, &out);
    return KILN_OK;
}

/* Axes from the attribute before opset 13 and from input 1 since; *n = -1 when absent. */
static kiln_status read_axes(kn_infer_ctx *c, int64_t *axes, int64_t *n) {
    *n = -1;
    if (c->node->opset < 13) {
        const kn_attr *a = kn_node_attr(c->node, "axes");
        if (a == NULL)
            return KILN_OK;
        if (a->n > KN_MAX_RANK)
            return kn_error(KILN_ERR_SHAPE, "attribute 'axes' has too many values (%lld)",
                            (long long)a->n);
        memcpy(axes, a->ints, (size_t)a->n * sizeof *axes);
        *n = a->n;
        return KILN_OK;
    }
    if (!kn_has_input(c, 1))
        return KILN_OK;
    return tensor_read_ints(&c->in[1], "input 'axes'", KN_MAX_RANK, axes, n);
}

kiln_status tensor_infer_squeeze(kn_infer_ctx *c) {
    KN_TRY(tensor_need_input(c, 0, "data"));
    const kn_tensor *x = &c->in[0];
    KN_TRY(tensor_check_movable(x, "input 'data'"));
    int64_t axes[KN_MAX_RANK], n;
    KN_TRY(read_axes(c, axes, &n));
    bool drop[KN_MAX_RANK] = {0};
    if (n < 0) {
        for (int i = 0; i < x->shape.rank; i++)
            drop[i] = x->shape.d[i] == 1;
    } else {
        int64_t norm[KN_MAX_RANK];
        KN_TRY(tensor_norm_axes(axes, n, x->shape.rank, "axes", norm));
        for (int64_t i = 0; i < n; i++) {
            if (x->shape.d[norm[i]] != 1)
                return kn_error(KILN_ERR_SHAPE, "cannot squeeze axis %lld: its dim is %lld",
                                (long long)axes[i], (long long)x->shape.d[norm[i]]);
            drop[norm[i]] = true;
        }
    }
    kn_shape out = {0};
    for (int i = 0; i < x->shape.rank; i++)
        if (!drop[i])
            out.d[out.rank++] = x->shape.d[i];
    set_out(c, 0, x->dtype, &out);
    return KILN_OK;
}

kiln_status tensor_infer_unsqueeze(kn_infer_ctx *c) {
    KN_TRY(tensor_need_input(c, 0, "data"));
    const kn_tensor *x = &c->in[0];
    KN_TRY(tensor_check_movable(x, "input 'data'"));
    int64_t axes[KN_MAX_RANK], n;
    KN_TRY(read_axes(c, axes, &n));
    if (n < 0)
        return kn_error(KILN_ERR_MODEL, "axes are required");
    if (x->shape.rank + n > KN_MAX_RANK)
        return kn_error(KILN_ERR_SHAPE, "output rank %lld exceeds the maximum %d",
                        (long long)(x->shape.rank + n), KN_MAX_RANK);
    kn_shape out = {.rank = (int32_t)(x->shape.rank + n)};
    int64_t norm[KN_MAX_RANK];
    KN_TRY(tensor_norm_axes(axes, n, out.rank, "axes", norm));
    bool ins[KN_MAX_RANK] = {0};
    for (int64_t i = 0; i < n; i++)
        ins[norm[i]] = true;
    for (int i = 0, j = 0; i < out.rank; i++)
        out.d[i] = ins[i] ? 1 : x->shape.d[j++];
    set_out(c, 0, x->dtype, &out);
    return KILN_OK;
}

void tensor_shape_range(const kn_node *node, int32_t rank, int64_t *start, int64_t *end) {
    int64_t r = rank, s = 0, e = r;
    if (node->opset >= 15) {
        s = kn_attr_int(node, "start", 0);
        e = kn_attr_int(node, "end", r);
    }
    if (s < 0)
        s += r;
    if (e < 0)
        e += r;
    *start = s < 0 ? 0 : s > r ? r : s;
    *end = e < *start ? *start : e > r ? r : e;
}

kiln_status tensor_infer_shape(kn_infer_ctx *c) {
    KN_TRY(tensor_need_input(c, 0, "data"));
    int64_t start, end;
    tensor_shape_range(c->node, c->in[0].shape.rank, &start, &end);
    kn_shape out = {.rank = 1, .d = {end - start}};
    set_out(c, 0, KILN_DTYPE_INT64, &out);
    return KILN_OK;
}

kiln_status tensor_infer_size(kn_infer_ctx *c) {
    KN_TRY(tensor_need_input(c, 0, "data"));
    kn_shape out = {.rank = 0};
    set_out(c, 0, KILN_DTYPE_INT64, &out);
    return KILN_OK;
}

kiln_status tensor_infer_identity(kn_infer_ctx *c) {
    KN_TRY(tensor_need_input(c, 0, "input"));
    if (c->in[0].dtype != KILN_DTYPE_STRING) /* a string block moves as its bytes */
        KN_TRY(tensor_check_movable(&c->in[0], "input 'input'"));
    set_out(c, 0, c->in[0].dtype, &c->in[0].shape);
    return KILN_OK;
}

kiln_status tensor_infer_dropout(kn_infer_ctx *c) {
    KN_TRY(tensor_need_input(c, 0, "data"));
    const kn_tensor *x = &c->in[0];
    KN_TRY(tensor_check_movable(x, "input 'data'"));
    if (c->node->opset >= 12 && kn_has_input(c, 2) && c->in[2].data != NULL &&
        kn_tensor_get_i64(&c->in[2], 0) != 0) {
        double ratio = 0.5;
        if (kn_has_input(c, 1)) {
            if (c->in[1].data == NULL)
                return KN_NEED_DATA;
            ratio = kn_tensor_get_f64(&c->in[1], 0);
        }
        if (ratio != 0.0)
            return kn_error(KILN_ERR_UNSUPPORTED,
                            "training_mode with a non-zero ratio is not supported");
    }
    set_out(c, 0, x->dtype, &x->shape);
    set_out(c, 1, c->node->opset >= 10 ? KILN_DTYPE_BOOL : x->dtype, &x->shape);
    return KILN_OK;
}

kiln_status tensor_infer_expand(kn_infer_ctx *c) {
    KN_TRY(tensor_need_input(c, 0, "input"));
    KN_TRY(tensor_need_input(c, 1, "shape"));
    const kn_tensor *x = &c->in[0];
    KN_TRY(tensor_check_movable(x, "input 'input'"));
    int64_t shp[KN_MAX_RANK], n;
    KN_TRY(tensor_read_ints(&c->in[1], "input 'shape'", KN_MAX_RANK, shp, &n));
    kn_shape out = {.rank = (int32_t)(n > x->shape.rank ? n : x->shape.rank)};
    for (int32_t i = 0; i < out.rank; i++) {
        int64_t a = i < out.rank - x->shape.rank ? 1 : x->shape.d[i - (out.rank - x->shape.rank)];
        int64_t b = i < out.rank - n ? 1 : shp[i - (out.rank - n)];
        if (b < 0)
            return kn_error(KILN_ERR_SHAPE, "input 'shape' has a negative dim %lld", (long long)b);
        if (a != b && a != 1 && b != 1)
            return kn_error(KILN_ERR_SHAPE,
                            "input dim %lld cannot be expanded to %lld (output axis %d)",
                            (long long)a, (long long)b, (int)i);
        out.d[i] = a == 1 ? b : a;
    }
    KN_TRY(tensor_check_shape(&out, "expanded output"));
    set_out(c, 0, x->dtype, &out);
    return KILN_OK;
}

kiln_status tensor_infer_tile(kn_infer_ctx *c) {
    KN_TRY(tensor_need_input(c, 0, "input"));
    KN_TRY(tensor_need_input(c, 1, "repeats"));
    const kn_tensor *x = &c->in[0];
    KN_TRY(tensor_check_movable(x, "input 'input'"));
    int64_t rep[KN_MAX_RANK], n;
    KN_TRY(tensor_read_ints(&c->in[1], "input 'repeats'", KN_MAX_RANK, rep, &n));
    if (n != x->shape.rank)
        return kn_error(KILN_ERR_SHAPE, "input 'repeats' has %lld values, input has rank %d",
                        (long long)n, (int)x->shape.rank);
    kn_shape out = {.rank = x->shape.rank};
    for (int32_t i = 0; i < out.rank; i++) {
        if (rep[i] < 0)
            return kn_error(KILN_ERR_SHAPE, "input 'repeats'[%d] is negative (%lld)", (int)i,
                            (long long)rep[i]);
        if (!tensor_mul_ok(x->shape.d[i], rep[i], &out.d[i]))
            return kn_error(KILN_ERR_SHAPE, "tiled dim %d exceeds the element limit", (int)i);
    }
    KN_TRY(tensor_check_shape(&out, "tiled output"));
    set_out(c, 0, x->dtype, &out);
    return KILN_OK;
}
