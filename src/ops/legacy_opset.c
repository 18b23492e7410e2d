#include "ops/legacy_opset.h"

#include "core/status.h"

#include <string.h>

static bool legacy_binary(const char *op) {
    static const char *const ops[] = {"Add", "Sub", "Mul",   "Div",     "Pow", "And",
                                      "Or",  "Xor", "Equal", "Greater", "Less"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (strcmp(op, ops[i]) == 0)
            return true;
    return false;
}

kiln_status kn_legacy_opset_check(const kn_node *n, const kn_tensor *in) {
    if (n->domain[0] != '\0' || n->opset >= 7 || !legacy_binary(n->op_type) || n->n_in != 2)
        return KILN_OK;
    const kn_shape *a = &in[0].shape, *b = &in[1].shape;
    if (kn_attr_int(n, "broadcast", 0) == 0) {
        /* Without broadcast the two shapes had to be equal. */
        if (!kn_shape_equal(a, b))
            return kn_error(KILN_ERR_SHAPE,
                            "node '%s' (%s, opset %d): inputs of different shapes need "
                            "broadcast=1 before opset 7",
                            n->name, n->op_type, n->opset);
        return KILN_OK;
    }
    if (b->rank > a->rank)
        return kn_error(KILN_ERR_SHAPE,
                        "node '%s' (%s, opset %d): B has rank %d, more than A's %d, which legacy "
                        "broadcasting does not allow",
                        n->name, n->op_type, n->opset, b->rank, a->rank);
    const kn_attr *axis = kn_node_attr(n, "axis");
    int64_t at = axis != NULL ? axis->i : a->rank - b->rank;
    if (at < 0)
        at += a->rank;
    if (at < 0 || at + b->rank > a->rank)
        return kn_error(KILN_ERR_SHAPE,
                        "node '%s' (%s, opset %d): axis %lld does not fit B of rank %d into A of "
                        "rank %d",
                        n->name, n->op_type, n->opset, (long long)(axis ? axis->i : at), b->rank,
                        a->rank);
    /* B aligned at `at` computes what numpy's trailing alignment does when `at` is the suffix
     * or B holds one element; other axes would need B reshaped, which is not done here. */
    int64_t nb = 1;
    for (int d = 0; d < b->rank; d++)
        nb *= b->d[d];
    for (int d = 0; d < b->rank; d++)
        if (b->d[d] != 1 && b->d[d] != a->d[at + d])
            return kn_error(KILN_ERR_SHAPE,
                            "node '%s' (%s, opset %d): B dim %d (%lld) does not match A dim %lld "
                            "(%lld)",
                            n->name, n->op_type, n->opset, d, (long long)b->d[d],
                            (long long)(at + d), (long long)a->d[at + d]);
    if (at != a->rank - b->rank && nb != 1)
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "node '%s' (%s, opset %d): broadcasting B along axis %lld (not A's "
                        "trailing dims) is not supported; re-export the model at opset 7 or later",
                        n->name, n->op_type, n->opset, (long long)at);
    return KILN_OK;
}
