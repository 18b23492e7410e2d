/* Checks and readers shared by the infer functions of several categories. */
#include "ops/infer_util.h"

static kiln_status need_inputs(const kn_infer_ctx *c, int lo, int hi) {
    if (c->n_in < lo || c->n_in > hi)
        return kn_error(KILN_ERR_MODEL, "%s takes %d to %d inputs, got %d", c->node->op_type, lo,
                        hi, c->n_in);
    for (int i = 0; i < lo; i++)
        if (!kn_has_input(c, i))
            return kn_error(KILN_ERR_MODEL, "input %d is required", i);
    return KILN_OK;
}

kiln_status kn_infer_need(const kn_infer_ctx *c, int lo, int hi, int max_out) {
    KN_TRY(need_inputs(c, lo, hi));
    if (c->n_out < 1 || c->n_out > max_out)
        return kn_error(KILN_ERR_MODEL, "%s makes 1 to %d outputs, got %d", c->node->op_type,
                        max_out, c->n_out);
    return KILN_OK;
}

kiln_status kn_infer_need_output0(const kn_infer_ctx *c) {
    if (c->n_out < 1 || c->node->out[0] < 0)
        return kn_error(KILN_ERR_MODEL, "%s: output 0 is required (it has no name)",
                        c->node->op_type);
    return KILN_OK;
}

kiln_status kn_infer_need_exact(const kn_infer_ctx *c, int lo, int hi, int n_out) {
    KN_TRY(need_inputs(c, lo, hi));
    if (c->n_out != n_out)
        return kn_error(KILN_ERR_MODEL, "%s has %d output(s), got %d", c->node->op_type, n_out,
                        c->n_out);
    return KILN_OK;
}

bool kn_infer_is_float(int32_t dt) {
    return dt == KILN_DTYPE_FLOAT32 || dt == KILN_DTYPE_FLOAT16 || dt == KILN_DTYPE_BFLOAT16 ||
           dt == KILN_DTYPE_FLOAT64;
}

kiln_status kn_infer_scalar_i64(const kn_infer_ctx *c, int i, const char *name, int64_t *v) {
    const kn_tensor *t = &c->in[i];
    if (!kn_dtype_is_integer(t->dtype))
        return kn_error(KILN_ERR_DTYPE, "input %s must be an integer, got %s", name,
                        kn_dtype_name(t->dtype));
    if (kn_tensor_numel(t) != 1 || t->shape.rank > 1)
        return kn_error(KILN_ERR_SHAPE, "input %s must be a scalar", name);
    if (t->data == NULL)
        return KN_NEED_DATA;
    *v = kn_tensor_get_i64(t, 0);
    return KILN_OK;
}

/* numpy matmul shapes: 1-D operands are promoted and the promoted dims dropped again. */
kiln_status kn_infer_matmul_shape(const kn_shape *a, const kn_shape *b, kn_shape *out) {
    if (a->rank < 1 || b->rank < 1)
        return kn_error(KILN_ERR_SHAPE, "matmul operands must have rank >= 1");
    kn_shape pa = *a, pb = *b;
    if (pa.rank == 1) {
        pa.rank = 2;
        pa.d[1] = pa.d[0];
        pa.d[0] = 1;
    }
    if (pb.rank == 1) {
        pb.rank = 2;
        pb.d[1] = 1;
    }
    if (pa.d[pa.rank - 1] != pb.d[pb.rank - 2])
        return kn_error(KILN_ERR_SHAPE, "matmul inner dims differ: %lld vs %lld",
                        (long long)pa.d[pa.rank - 1], (long long)pb.d[pb.rank - 2]);
    kn_shape ba = pa, bb = pb;
    ba.rank -= 2;
    bb.rank -= 2;
    if (!kn_shape_broadcast(&ba, &bb, out))
        return kn_error(KILN_ERR_SHAPE, "matmul batch dims do not broadcast");
    if (a->rank > 1)
        out->d[out->rank++] = pa.d[pa.rank - 2];
    if (b->rank > 1)
        out->d[out->rank++] = pb.d[pb.rank - 1];
    return KILN_OK;
}
