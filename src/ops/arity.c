#include "ops/arity.h"

#include "ir/placement.h"
#include "ops/fused_elementwise.h"
#include "ops/op.h"

#include <string.h>

typedef struct arity_row {
    const char *domain;
    kn_arity arity;
} arity_row;

static const arity_row table[] = {
#define KN_OP(domain, name, since, flags, infer, min_in, max_in, min_out, max_out)                 \
    {domain, {name, min_in, max_in, min_out, max_out}},
#include "ops/op_list.h"
#undef KN_OP
};

const kn_arity *kn_op_arity(const char *name) {
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (table[i].domain[0] == '\0' && strcmp(table[i].arity.name, name) == 0)
            return table[i].arity.min_in < 0 ? NULL : &table[i].arity;
    return NULL;
}
