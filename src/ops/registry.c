#include "ir/placement.h"
#include "ops/fused_elementwise.h"
#include "ops/op.h"

#include <string.h>

static const kn_op_schema schemas[] = {
#define KN_OP(domain, name, since, flags, infer, min_in, max_in, min_out, max_out)                 \
    {domain, name, since, flags, infer},
#include "ops/op_list.h"
#undef KN_OP
};
#define N_SCHEMAS (sizeof schemas / sizeof schemas[0])

static const char *canonical_domain(const char *d) {
    if (d == NULL || strcmp(d, "ai.onnx") == 0)
        return "";
    return d;
}

const kn_op_schema *kn_op_find(const char *domain, const char *name) {
    domain = canonical_domain(domain);
    for (size_t i = 0; i < N_SCHEMAS; i++)
        if (strcmp(schemas[i].name, name) == 0 && strcmp(schemas[i].domain, domain) == 0)
            return &schemas[i];
    return NULL;
}

const kn_op_schema *kn_op_next(const kn_op_schema *prev) {
    if (prev == NULL)
        return &schemas[0];
    for (size_t i = 0; i + 1 < N_SCHEMAS; i++)
        if (&schemas[i] == prev)
            return &schemas[i + 1];
    return NULL;
}

kiln_status kn_norm_axis(int64_t axis, int32_t rank, int64_t *out) {
    if (axis < -(int64_t)rank || axis >= (int64_t)rank)
        return kn_error(KILN_ERR_SHAPE, "axis %lld is out of range for rank %d", (long long)axis,
                        rank);
    *out = axis < 0 ? axis + rank : axis;
    return KILN_OK;
}

bool kn_op_is_one_of(const kn_node *n, const char *const *names, size_t count) {
    for (size_t i = 0; i < count; i++)
        if (strcmp(n->op_type, names[i]) == 0)
            return true;
    return false;
}

bool kn_op_is_product(const kn_node *n) {
    static const char *const ops[] = {"Conv",      "ConvTranspose", "Gemm",        "MatMul",
                                      "FusedConv", "FusedGemm",     "FusedMatMul", "ScaledConv"};
    return kn_op_is_one_of(n, ops, sizeof ops / sizeof ops[0]);
}

bool kn_op_moves_data(const kn_node *n) {
    static const char *const ops[] = {"Transpose", "Concat",    "Slice",   "Gather",  "Expand",
                                      "Tile",      "Split",     "Pad",     "Reshape", "Flatten",
                                      "Squeeze",   "Unsqueeze", "Identity"};
    return n->domain[0] == '\0' && kn_op_is_one_of(n, ops, sizeof ops / sizeof ops[0]);
}
