/* Dimension expressions for plugin output shapes. kiln always asks a plugin for its output
 * shapes with concrete input dims (at each profile extreme during a build, at each new input
 * shape in a context), so every expression evaluates at once; the builder derives symbolic
 * dims by comparing the results across the profile. */
#ifndef KN_PLUGIN_EXPR_H
#define KN_PLUGIN_EXPR_H

#include "kiln/kiln_plugin.h"

#include <stdbool.h>

#define KN_EXPR_POOL 512

struct kiln_expr {
    int64_t value;
    bool valid; /* false after an invalid operation (division by zero, overflow) */
};

struct kiln_expr_builder {
    struct kiln_expr items[KN_EXPR_POOL];
    int n;
    bool exhausted;
};

const kiln_expr *kn_expr_constant(kiln_expr_builder *b, int64_t value);
const kiln_expr *kn_expr_op(kiln_expr_builder *b, int32_t op, const kiln_expr *x,
                            const kiln_expr *y);
int32_t kn_expr_value(const kiln_expr *e, int64_t *value);

#endif
