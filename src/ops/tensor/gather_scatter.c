/* Inference for the indexing ops: Gather, GatherElements, GatherND, ScatterElements (and the
 * older Scatter), ScatterND, TensorScatter. Indices known on the host are validated here already,
 * so a bad shape subgraph fails at build time; kernels validate again at run time. */
#include "ops/tensor/tensor_ops.h"

#include <string.h>

static kiln_status check_index_dtype(const kn_tensor *t, const char *what) {
    if (t->dtype != KILN_DTYPE_INT64 && t->dtype != KILN_DTYPE_INT32)
        return kn_error(KILN_ERR_DTYPE, "%s must be int32 or int64, not %s", what,
                        kn_dtype_name(t->dtype));
    return KILN_OK;
}

kiln_status tensor_infer_gather(kn_infer_ctx *c) {
    KN_TRY(tensor_need_input(c, 0, "data"));
    KN_TRY(tensor_need_input(c, 1, "indices"));
    const kn_tensor *x = &c->in[0], *ind = &c->in[1];
    KN_TRY(tensor_check_movable(x, "input 'data'"));
    KN_TRY(check_index_dtype(ind, "input 'indices'"));
    if (x->shape.rank < 1)
        return kn_error(KILN_ERR_SHAPE, "input 'data' must have rank >= 1");
    int64_t axis;
    KN_TRY(kn_norm_axis(kn_attr_int(c->node, "axis", 0), x->shape.rank, &axis));
    int32_t r = x->shape.rank + ind->shape.rank - 1;
    if (r > KN_MAX_RANK)
        return kn_error(KILN_ERR_SHAPE, "output rank %d exceeds the maximum %d", (int)r,
                        KN_MAX_RANK);
    if (ind->data != NULL)
        KN_TRY(tensor_check_indices(ind, x->shape.d[axis], "input 'indices'"));
    kn_shape out = {.rank = r};
    int32_t k = 0;
    for (int32_t i = 0; i < axis; i++)
        out.d[k++] = x->shape.d[i];
    for (int32_t i = 0; i < ind->shape.rank; i++)
        out.d[k++] = ind->shape.d[i];
    for (int32_t i = (int32_t)axis + 1; i < x->shape.rank; i++)
        out.d[k++] = x->shape.d[i];
    KN_TRY(tensor_check_shape(&out, "gathered output"));
    c->out[0].dtype = x->dtype;
    c->out[0].shape = out;
    return KILN_OK;
}

kiln_status tensor_infer_gather_elements(kn_infer_ctx *c) {
    KN_TRY(tensor_need_input(c, 0, "data"));
    KN_TRY(tensor_need_input(c, 1, "indices"));
    const kn_tensor *x = &c->in[0], *ind = &c->in[1];
    KN_TRY(tensor_check_movable(x, "input 'data'"));
    KN_TRY(check_index_dtype(ind, "input 'indices'"));
    if (x->shape.rank < 1 || ind->shape.rank != x->shape.rank)
        return kn_error(KILN_ERR_SHAPE,
                        "inputs 'data' (rank %d) and 'indices' (rank %d) must "
                        "have the same rank >= 1",
                        (int)x->shape.rank, (int)ind->shape.rank);
    int64_t axis;
    KN_TRY(kn_norm_axis(kn_attr_int(c->node, "axis", 0), x->shape.rank, &axis));
    if (ind->data != NULL)
        KN_TRY(tensor_check_indices(ind, x->shape.d[axis], "input 'indices'"));
    c->out[0].dtype = x->dtype;
    c->out[0].shape = ind->shape;
    return KILN_OK;
}

kiln_status tensor_infer_gather_nd(kn_infer_ctx *c) {
    KN_TRY(tensor_need_input(c, 0, "data"));
    KN_TRY(tensor_need_input(c, 1, "indices"));
    const kn_tensor *x = &c->in[0], *ind = &c->in[1];
    KN_TRY(tensor_check_movable(x, "input 'data'"));
    KN_TRY(check_index_dtype(ind, "input 'indices'"));
    int32_t r = x->shape.rank, q = ind->shape.rank;
    if (r < 1 || q < 1)
        return kn_error(KILN_ERR_SHAPE, "inputs 'data' and 'indices' must have rank >= 1");
    int64_t b = c->node->opset >= 12 ? kn_attr_int(c->node, "batch_dims", 0) : 0;
    if (b < 0 || b >= q || b >= r)
        return kn_error(KILN_ERR_SHAPE, "attribute 'batch_dims' %lld must be in [0, %d)",
                        (long long)b, (int)(q < r ? q : r));
    for (int64_t i = 0; i < b; i++)
        if (x->shape.d[i] != ind->shape.d[i])
            return kn_error(KILN_ERR_SHAPE, "batch dim %lld differs: data %lld, indices %lld",
                            (long long)i, (long long)x->shape.d[i], (long long)ind->shape.d[i]);
    int64_t m = ind->shape.d[q - 1];
    if (m < 1 || m > r - b)
        return kn_error(KILN_ERR_SHAPE, "last dim of 'indices' is %lld (must be in [1, %lld])",
                        (long long)m, (long long)(r - b));
    int64_t orank = q - 1 + r - b - m;
    if (orank > KN_MAX_RANK)
        return kn_error(KILN_ERR_SHAPE, "output rank %lld exceeds the maximum", (long long)orank);
    kn_shape out = {.rank = (int32_t)orank};
    int32_t k = 0;
    for (int32_t i = 0; i < q - 1; i++)
        out.d[k++] = ind->shape.d[i];
    for (int64_t i = b + m; i < r; i++)
        out.d[k++] = x->shape.d[i];
    KN_TRY(tensor_check_shape(&out, "gathered output"));
    c->out[0].dtype = x->dtype;
    c->out[0].shape = out;
    return KILN_OK;
}

/* data, indices and updates present; data movable, indices int32/int64, updates like data. */
static kiln_status check_scatter_inputs(const kn_infer_ctx *c) {
    KN_TRY(tensor_need_input(c, 0, "data"));
    KN_TRY(tensor_need_input(c, 1, "indices"));
    KN_TRY(tensor_need_input(c, 2, "updates"));
    const kn_tensor *x = &c->in[0], *ind = &c->in[1], *upd = &c->in[2];
    KN_TRY(tensor_check_movable(x, "input 'data'"));
    KN_TRY(check_index_dtype(ind, "input 'indices'"));
    if (upd->dtype != x->dtype)
        return kn_error(KILN_ERR_DTYPE, "input 'updates' is %s, data is %s",
                        kn_dtype_name(upd->dtype), kn_dtype_name(x->dtype));
    return KILN_OK;
}

kiln_status tensor_infer_scatter_elements(kn_infer_ctx *c) {
    KN_TRY(check_scatter_inputs(c));
    const kn_tensor *x = &c->in[0], *ind = &c->in[1], *upd = &c->in[2];
    if (x->shape.rank < 1 || ind->shape.rank != x->shape.rank)
        return kn_error(KILN_ERR_SHAPE, "input 'indices' must have the rank of 'data' (%d)",
                        (int)x->shape.rank);
    if (!kn_shape_equal(&ind->shape, &upd->shape))
        return kn_error(KILN_ERR_SHAPE, "inputs 'indices' and 'updates' differ in shape");
    int64_t axis;
    KN_TRY(kn_norm_axis(kn_attr_int(c->node, "axis", 0), x->shape.rank, &axis));
    int red;
    KN_TRY(tensor_scatter_reduction(c->node, &red));
    c->out[0].dtype = x->dtype;
    c->out[0].shape = x->shape;
    return KILN_OK;
}

kiln_status tensor_infer_scatter_nd(kn_infer_ctx *c) {
    KN_TRY(check_scatter_inputs(c));
    const kn_tensor *x = &c->in[0], *ind = &c->in[1], *upd = &c->in[2];
    int32_t r = x->shape.rank, q = ind->shape.rank;
    if (r < 1 || q < 1)
        return kn_error(KILN_ERR_SHAPE, "inputs 'data' and 'indices' must have rank >= 1");
    int64_t k = ind->shape.d[q - 1];
    if (k < 1 || k > r)
        return kn_error(KILN_ERR_SHAPE, "last dim of 'indices' is %lld (must be in [1, %d])",
                        (long long)k, (int)r);
    int64_t urank = q - 1 + r - k;
    bool ok = upd->shape.rank == urank;
    for (int32_t i = 0; ok && i < q - 1; i++)
        ok = upd->shape.d[i] == ind->shape.d[i];
    for (int64_t i = k; ok && i < r; i++)
        ok = upd->shape.d[q - 1 + i - k] == x->shape.d[i];
    if (!ok)
        return kn_error(KILN_ERR_SHAPE,
                        "input 'updates' must have shape indices.shape[:-1] + data.shape[%lld:]",
                        (long long)k);
    int red;
    KN_TRY(tensor_scatter_reduction(c->node, &red));
    c->out[0].dtype = x->dtype;
    c->out[0].shape = x->shape;
    return KILN_OK;
}

kiln_status tensor_infer_tensor_scatter(kn_infer_ctx *c) {
    KN_TRY(tensor_need_input(c, 0, "past_cache"));
    KN_TRY(tensor_need_input(c, 1, "update"));
    const kn_tensor *x = &c->in[0], *upd = &c->in[1];
    KN_TRY(tensor_check_movable(x, "input 'past_cache'"));
    if (upd->dtype != x->dtype)
        return kn_error(KILN_ERR_DTYPE, "input 'update' is %s, past_cache is %s",
                        kn_dtype_name(upd->dtype), kn_dtype_name(x->dtype));
    if (x->shape.rank < 2 || upd->shape.rank != x->shape.rank)
        return kn_error(KILN_ERR_SHAPE, "inputs 'past_cache' and 'update' must have one rank >= 2");
    int64_t axis;
    KN_TRY(kn_norm_axis(kn_attr_int(c->node, "axis", -2), x->shape.rank, &axis));
    if (axis == 0)
        return kn_error(KILN_ERR_MODEL, "attribute 'axis' cannot be the batch axis");
    for (int32_t i = 0; i < x->shape.rank; i++)
        if (i != axis ? upd->shape.d[i] != x->shape.d[i] : upd->shape.d[i] > x->shape.d[i])
            return kn_error(KILN_ERR_SHAPE,
                            "input 'update' dim %d (%lld) does not fit the cache "
                            "(%lld)",
                            (int)i, (long long)upd->shape.d[i], (long long)x->shape.d[i]);
    const char *mode = kn_attr_string(c->node, "mode", "linear");
    if (strcmp(mode, "linear") != 0 && strcmp(mode, "circular") != 0)
        return kn_error(KILN_ERR_MODEL, "attribute 'mode' '%s' is not linear or circular", mode);
    if (kn_has_input(c, 2)) {
        const kn_tensor *w = &c->in[2];
        if (w->dtype != KILN_DTYPE_INT64 || w->shape.rank != 1 || w->shape.d[0] != x->shape.d[0])
            return kn_error(KILN_ERR_SHAPE, "input 'write_indices' must be int64 [batch]");
    }
    c->out[0].dtype = x->dtype;
    c->out[0].shape = x->shape;
    return KILN_OK;
}
