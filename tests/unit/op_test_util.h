/* Helpers shared by the op-family unit tests: tensors over caller data and node attributes. */
#ifndef KILN_OP_TEST_UTIL_H
#define KILN_OP_TEST_UTIL_H

#include "core/tensor.h"
#include "ir/graph.h"

#include <stdarg.h>
#include <string.h>

/* A tensor view of data with rank dims given as int64_t arguments. */
static inline kn_tensor tens(int32_t dtype, const void *data, int rank, ...) {
    kn_tensor t = {.dtype = dtype, .data = (void *)data};
    t.shape.rank = rank;
    va_list ap;
    va_start(ap, rank);
    for (int i = 0; i < rank; i++)
        t.shape.d[i] = va_arg(ap, int64_t);
    va_end(ap);
    return t;
}
#define F32(data, rank, ...) tens(KILN_DTYPE_FLOAT32, data, rank, __VA_ARGS__)
#define NONE ((kn_tensor){0})

static inline kn_attr attr_i(const char *name, int64_t v) {
    return (kn_attr){.name = (char *)name, .type = KN_ATTR_INT, .i = v};
}
static inline kn_attr attr_f(const char *name, float v) {
    return (kn_attr){.name = (char *)name, .type = KN_ATTR_FLOAT, .f = v};
}
static inline kn_attr attr_s(const char *name, const char *v) {
    return (kn_attr){
        .name = (char *)name, .type = KN_ATTR_STRING, .s = (char *)v, .slen = strlen(v)};
}
static inline kn_attr attr_ints(const char *name, int64_t n, const int64_t *v) {
    return (kn_attr){.name = (char *)name, .type = KN_ATTR_INTS, .n = n, .ints = (int64_t *)v};
}

#endif
