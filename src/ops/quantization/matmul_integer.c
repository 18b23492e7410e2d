/* MatMulInteger: shape inference. */
#include "ops/infer_util.h"

kiln_status kn_infer_matmul_integer(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need_exact(c, 2, 4, 1));
    for (int i = 0; i < c->n_in; i++)
        if (kn_has_input(c, i) && c->in[i].dtype != KILN_DTYPE_UINT8 &&
            c->in[i].dtype != KILN_DTYPE_INT8)
            return kn_error(KILN_ERR_DTYPE, "input %d must be uint8 or int8", i);
    if (kn_has_input(c, 2) && c->in[2].dtype != c->in[0].dtype)
        return kn_error(KILN_ERR_DTYPE, "input a_zero_point must have A's dtype");
    if (kn_has_input(c, 3) && c->in[3].dtype != c->in[1].dtype)
        return kn_error(KILN_ERR_DTYPE, "input b_zero_point must have B's dtype");
    const kn_shape *a = &c->in[0].shape, *b = &c->in[1].shape;
    if (kn_has_input(c, 2)) {
        int64_t nz = kn_shape_numel(&c->in[2].shape);
        if (nz != 1 && (c->in[2].shape.rank != 1 || a->rank < 2 || nz != a->d[a->rank - 2]))
            return kn_error(KILN_ERR_SHAPE, "input a_zero_point must be a scalar or have one "
                                            "value per row of A");
    }
    if (kn_has_input(c, 3)) {
        int64_t nz = kn_shape_numel(&c->in[3].shape);
        if (nz != 1 && (c->in[3].shape.rank != 1 || b->rank < 2 || nz != b->d[b->rank - 1]))
            return kn_error(KILN_ERR_SHAPE, "input b_zero_point must be a scalar or have one "
                                            "value per column of B");
    }
    c->out[0].dtype = KILN_DTYPE_INT32;
    return kn_infer_matmul_shape(a, b, &c->out[0].shape);
}
