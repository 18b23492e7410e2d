#include "ops/op.h"

#include <string.h>

static const kn_op_schema *const families[] = {
    kn_ops_elementwise, kn_ops_tensor, kn_ops_reduce, kn_ops_nn,    kn_ops_pool,
    kn_ops_norm,        kn_ops_rnn,    kn_ops_misc,   kn_ops_extra, kn_ops_memcpy,
};
#define N_FAMILIES (sizeof families / sizeof families[0])

static const char *canonical_domain(const char *d) {
    if (d == NULL || strcmp(d, "ai.onnx") == 0)
        return "";
    return d;
}

const kn_op_schema *kn_op_find(const char *domain, const char *name) {
    domain = canonical_domain(domain);
    for (size_t f = 0; f < N_FAMILIES; f++)
        for (const kn_op_schema *s = families[f]; s->name != NULL; s++)
            if (strcmp(s->name, name) == 0 && strcmp(s->domain, domain) == 0)
                return s;
    return NULL;
}

const kn_op_schema *kn_op_next(const kn_op_schema *prev) {
    size_t f = 0;
    if (prev != NULL) {
        for (f = 0; f < N_FAMILIES; f++) {
            const kn_op_schema *s = families[f];
            while (s->name != NULL && s != prev)
                s++;
            if (s == prev)
                break;
        }
        if (f == N_FAMILIES)
            return NULL;
        if ((prev + 1)->name != NULL)
            return prev + 1;
        f++;
    }
    for (; f < N_FAMILIES; f++)
        if (families[f]->name != NULL)
            return families[f];
    return NULL;
}

kiln_status kn_norm_axis(int64_t axis, int32_t rank, int64_t *out) {
    if (axis < -(int64_t)rank || axis >= (int64_t)rank)
        return kn_error(KILN_ERR_SHAPE, "axis %lld is out of range for rank %d", (long long)axis,
                        rank);
    *out = axis < 0 ? axis + rank : axis;
    return KILN_OK;
}
