/* Inference for ops that generate or rewrite values in place: ConstantOfShape, Range, EyeLike,
 * Trilu, CumSum, CumProd, OneHot. */
#include "ops/tensor/tensor_ops.h"

#include <math.h>

kiln_status tensor_infer_constant_of_shape(kn_infer_ctx *c) {
    KN_TRY(tensor_need_input(c, 0, "input"));
    int64_t shp[KN_MAX_RANK], n;
    if (c->in[0].dtype != KILN_DTYPE_INT64)
        return kn_error(KILN_ERR_DTYPE, "input 'input' must be int64, not %s",
                        kn_dtype_name(c->in[0].dtype));
    KN_TRY(tensor_read_ints(&c->in[0], "input 'input'", KN_MAX_RANK, shp, &n));
    kn_shape out = {.rank = (int32_t)n};
    for (int64_t i = 0; i < n; i++)
        out.d[i] = shp[i];
    KN_TRY(tensor_check_shape(&out, "input 'input'"));
    int32_t dtype = KILN_DTYPE_FLOAT32;
    const kn_attr *v = kn_node_attr(c->node, "value");
    if (v != NULL) {
        if (v->type != KN_ATTR_TENSOR || v->t == NULL)
            return kn_error(KILN_ERR_MODEL, "attribute 'value' must be a tensor");
        if (kn_shape_numel(&v->t->shape) != 1)
            return kn_error(KILN_ERR_MODEL, "attribute 'value' must hold exactly one element");
        KN_TRY(tensor_check_movable(v->t, "attribute 'value'"));
        dtype = v->t->dtype;
    }
    c->out[0].dtype = dtype;
    c->out[0].shape = out;
    return KILN_OK;
}

/* Element count of Range for integer operands, exact for every int64 value. */
static kiln_status range_count_int(int64_t start, int64_t limit, int64_t delta, int64_t *n) {
    if (delta == 0)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "input 'delta' is zero");
    if ((delta > 0 && limit <= start) || (delta < 0 && limit >= start)) {
        *n = 0;
        return KILN_OK;
    }
    uint64_t span =
        delta > 0 ? (uint64_t)limit - (uint64_t)start : (uint64_t)start - (uint64_t)limit;
    uint64_t step = delta > 0 ? (uint64_t)delta : (uint64_t)0 - (uint64_t)delta;
    uint64_t cnt = span / step + (span % step != 0);
    if (cnt > (uint64_t)KN_MAX_ELEMENTS)
        return kn_error(KILN_ERR_SHAPE, "range has %llu elements, more than the limit of 2^40",
                        (unsigned long long)cnt);
    *n = (int64_t)cnt;
    return KILN_OK;
}

kiln_status tensor_infer_range(kn_infer_ctx *c) {
    static const char *names[3] = {"start", "limit", "delta"};
    int32_t dt = 0;
    for (int i = 0; i < 3; i++) {
        KN_TRY(tensor_need_input(c, i, names[i]));
        const kn_tensor *t = &c->in[i];
        if (kn_shape_numel(&t->shape) != 1 || t->shape.rank > 1)
            return kn_error(KILN_ERR_SHAPE, "input '%s' must be a scalar", names[i]);
        if (i == 0)
            dt = t->dtype;
        else if (t->dtype != dt)
            return kn_error(KILN_ERR_DTYPE, "input '%s' is %s, input 'start' is %s", names[i],
                            kn_dtype_name(t->dtype), kn_dtype_name(dt));
    }
    /* float16 and bfloat16 since opset 27: start + i * delta taken in float32 or float64
     * (stash_type; kiln computes in float64 either way) and rounded once */
    bool narrow = dt == KILN_DTYPE_FLOAT16 || dt == KILN_DTYPE_BFLOAT16;
    if (dt != KILN_DTYPE_FLOAT32 && dt != KILN_DTYPE_FLOAT64 && dt != KILN_DTYPE_INT16 &&
        dt != KILN_DTYPE_INT32 && dt != KILN_DTYPE_INT64 && !narrow)
        return kn_error(KILN_ERR_DTYPE, "Range does not accept %s", kn_dtype_name(dt));
    int64_t stash = kn_attr_int(c->node, "stash_type", KILN_DTYPE_FLOAT32);
    if (narrow && stash != KILN_DTYPE_FLOAT32 && stash != KILN_DTYPE_FLOAT64)
        return kn_error(KILN_ERR_MODEL,
                        "attribute 'stash_type' is %lld; Range takes 1 (float) or "
                        "11 (double)",
                        (long long)stash);
    for (int i = 0; i < 3; i++)
        if (c->in[i].data == NULL)
            return KN_NEED_DATA;
    int64_t n;
    if (kn_dtype_is_integer(dt)) {
        KN_TRY(range_count_int(kn_tensor_get_i64(&c->in[0], 0), kn_tensor_get_i64(&c->in[1], 0),
                               kn_tensor_get_i64(&c->in[2], 0), &n));
    } else {
        double start = kn_tensor_get_f64(&c->in[0], 0), limit = kn_tensor_get_f64(&c->in[1], 0);
        double delta = kn_tensor_get_f64(&c->in[2], 0);
        if (delta == 0.0)
            return kn_error(KILN_ERR_INVALID_ARGUMENT, "input 'delta' is zero");
        double cnt = ceil((limit - start) / delta);
        if (isnan(cnt) || cnt > (double)KN_MAX_ELEMENTS)
            return kn_error(KILN_ERR_SHAPE, "range from %g to %g by %g has too many elements",
                            start, limit, delta);
        n = cnt > 0 ? (int64_t)cnt : 0;
    }
    c->out[0].dtype = dt;
    c->out[0].shape = (kn_shape){.rank = 1, .d = {n}};
    return KILN_OK;
}

kiln_status tensor_infer_eye_like(kn_infer_ctx *c) {
    KN_TRY(tensor_need_input(c, 0, "input"));
    const kn_tensor *x = &c->in[0];
    if (x->shape.rank != 2)
        return kn_error(KILN_ERR_SHAPE, "input 'input' must be 2-D, has rank %d",
                        (int)x->shape.rank);
    int32_t dt = (int32_t)kn_attr_int(c->node, "dtype", x->dtype);
    kn_tensor probe = {.dtype = dt};
    KN_TRY(tensor_check_movable(&probe, "attribute 'dtype'"));
    c->out[0].dtype = dt;
    c->out[0].shape = x->shape;
    return KILN_OK;
}

kiln_status tensor_infer_trilu(kn_infer_ctx *c) {
    KN_TRY(tensor_need_input(c, 0, "input"));
    const kn_tensor *x = &c->in[0];
    KN_TRY(tensor_check_movable(x, "input 'input'"));
    if (x->shape.rank < 2)
        return kn_error(KILN_ERR_SHAPE, "input 'input' must have rank >= 2, has %d",
                        (int)x->shape.rank);
    if (kn_has_input(c, 1)) {
        int64_t k;
        kiln_status rc = tensor_read_scalar_int(&c->in[1], "input 'k'", &k);
        if (rc != KILN_OK && rc != KN_NEED_DATA)
            return rc;
    }
    c->out[0].dtype = x->dtype;
    c->out[0].shape = x->shape;
    return KILN_OK;
}

kiln_status tensor_infer_cumsum(kn_infer_ctx *c) {
    KN_TRY(tensor_need_input(c, 0, "x"));
    KN_TRY(tensor_need_input(c, 1, "axis"));
    const kn_tensor *x = &c->in[0];
    switch (x->dtype) {
    case KILN_DTYPE_FLOAT32:
    case KILN_DTYPE_FLOAT64:
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16:
    case KILN_DTYPE_INT32:
    case KILN_DTYPE_INT64:
    case KILN_DTYPE_UINT32:
    case KILN_DTYPE_UINT64:
        break;
    default:
        return kn_error(KILN_ERR_DTYPE, "%s does not accept %s", c->node->op_type,
                        kn_dtype_name(x->dtype));
    }
    int64_t axis, norm;
    kiln_status rc = tensor_read_scalar_int(&c->in[1], "input 'axis'", &axis);
    if (rc == KILN_OK)
        KN_TRY(kn_norm_axis(axis, x->shape.rank, &norm));
    else if (rc != KN_NEED_DATA)
        return rc;
    c->out[0].dtype = x->dtype;
    c->out[0].shape = x->shape;
    return KILN_OK;
}

kiln_status tensor_infer_one_hot(kn_infer_ctx *c) {
    KN_TRY(tensor_need_input(c, 0, "indices"));
    KN_TRY(tensor_need_input(c, 1, "depth"));
    KN_TRY(tensor_need_input(c, 2, "values"));
    const kn_tensor *ind = &c->in[0], *dep = &c->in[1], *val = &c->in[2];
    if (!kn_dtype_is_integer(ind->dtype) && !kn_dtype_is_float(ind->dtype))
        return kn_error(KILN_ERR_DTYPE, "input 'indices' must be numeric");
    if (!kn_dtype_is_integer(dep->dtype) && !kn_dtype_is_float(dep->dtype))
        return kn_error(KILN_ERR_DTYPE, "input 'depth' must be numeric");
    if (kn_shape_numel(&dep->shape) != 1 || dep->shape.rank > 1)
        return kn_error(KILN_ERR_SHAPE, "input 'depth' must be a scalar");
    if (val->shape.rank != 1 || val->shape.d[0] != 2)
        return kn_error(KILN_ERR_SHAPE, "input 'values' must be 1-D with 2 elements");
    KN_TRY(tensor_check_movable(val, "input 'values'"));
    if (ind->shape.rank + 1 > KN_MAX_RANK)
        return kn_error(KILN_ERR_SHAPE, "output rank exceeds the maximum %d", KN_MAX_RANK);
    if (dep->data == NULL)
        return KN_NEED_DATA;
    double dv = kn_tensor_get_f64(dep, 0);
    if (!(dv >= 1.0) || dv > (double)KN_MAX_ELEMENTS)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "input 'depth' is %g (must be >= 1)", dv);
    int64_t depth = (int64_t)dv;
    int32_t r = ind->shape.rank + 1;
    int64_t axis;
    KN_TRY(kn_norm_axis(kn_attr_int(c->node, "axis", -1), r, &axis));
    kn_shape out = {.rank = r};
    for (int32_t i = 0, j = 0; i < r; i++)
        out.d[i] = i == axis ? depth : ind->shape.d[j++];
    KN_TRY(tensor_check_shape(&out, "one-hot output"));
    c->out[0].dtype = val->dtype;
    c->out[0].shape = out;
    return KILN_OK;
}
