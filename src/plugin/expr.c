#include "plugin/expr.h"

static const struct kiln_expr invalid = {.value = 0, .valid = false};

const kiln_expr *kn_expr_constant(kiln_expr_builder *b, int64_t value) {
    if (b == NULL || b->n >= KN_EXPR_POOL) {
        if (b)
            b->exhausted = true;
        return &invalid;
    }
    b->items[b->n] = (struct kiln_expr){.value = value, .valid = true};
    return &b->items[b->n++];
}

const kiln_expr *kn_expr_op(kiln_expr_builder *b, int32_t op, const kiln_expr *x,
                            const kiln_expr *y) {
    if (x == NULL || y == NULL || !x->valid || !y->valid)
        return &invalid;
    int64_t a = x->value, c = y->value, r;
    switch (op) {
    case KILN_EXPR_ADD:
        if (__builtin_add_overflow(a, c, &r))
            return &invalid;
        break;
    case KILN_EXPR_SUB:
        if (__builtin_sub_overflow(a, c, &r))
            return &invalid;
        break;
    case KILN_EXPR_MUL:
        if (__builtin_mul_overflow(a, c, &r))
            return &invalid;
        break;
    case KILN_EXPR_FLOOR_DIV:
        if (c == 0)
            return &invalid;
        r = a / c - ((a % c != 0) && ((a < 0) != (c < 0)));
        break;
    case KILN_EXPR_CEIL_DIV:
        if (c == 0)
            return &invalid;
        r = a / c + ((a % c != 0) && ((a < 0) == (c < 0)));
        break;
    case KILN_EXPR_MIN:
        r = a < c ? a : c;
        break;
    case KILN_EXPR_MAX:
        r = a > c ? a : c;
        break;
    default:
        return &invalid;
    }
    return kn_expr_constant(b, r);
}

int32_t kn_expr_value(const kiln_expr *e, int64_t *value) {
    if (e == NULL || !e->valid)
        return 0;
    if (value)
        *value = e->value;
    return 1;
}
