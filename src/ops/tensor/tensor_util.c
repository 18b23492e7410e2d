/* Helpers shared by the tensor ops' infer functions and kernels. */
#include "ops/tensor/tensor_ops.h"

#include <string.h>

kiln_status tensor_need_input(const kn_infer_ctx *c, int i, const char *name) {
    if (!kn_has_input(c, i))
        return kn_error(KILN_ERR_MODEL, "input %d ('%s') is required", i, name);
    return KILN_OK;
}

kiln_status tensor_check_movable(const kn_tensor *t, const char *what) {
    if (t->dtype == KILN_DTYPE_STRING)
        return kn_error(KILN_ERR_UNSUPPORTED, "%s: string tensors are not supported", what);
    size_t es = kn_dtype_size(t->dtype);
    if (es != 1 && es != 2 && es != 4 && es != 8)
        return kn_error(KILN_ERR_DTYPE, "%s: unsupported dtype %d", what, (int)t->dtype);
    return KILN_OK;
}

bool tensor_mul_ok(int64_t a, int64_t b, int64_t *out) {
    if (a < 0 || b < 0)
        return false;
    if (a != 0 && b > KN_MAX_ELEMENTS / a)
        return false;
    *out = a * b;
    return true;
}

kiln_status tensor_check_shape(const kn_shape *s, const char *what) {
    if (s->rank < 0 || s->rank > KN_MAX_RANK)
        return kn_error(KILN_ERR_SHAPE, "%s: rank %d exceeds the maximum %d", what, (int)s->rank,
                        KN_MAX_RANK);
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++) {
        if (s->d[i] < 0 || s->d[i] > KN_MAX_ELEMENTS)
            return kn_error(KILN_ERR_SHAPE, "%s: dim %d is %lld (must be in [0, 2^40])", what, i,
                            (long long)s->d[i]);
        if (!tensor_mul_ok(n, s->d[i], &n))
            return kn_error(KILN_ERR_SHAPE, "%s: element count exceeds the limit of 2^40", what);
    }
    return KILN_OK;
}

kiln_status tensor_read_ints(const kn_tensor *t, const char *what, int64_t max_n, int64_t *out,
                             int64_t *n) {
    if (t->dtype != KILN_DTYPE_INT64 && t->dtype != KILN_DTYPE_INT32)
        return kn_error(KILN_ERR_DTYPE, "%s must be int32 or int64, not %s", what,
                        kn_dtype_name(t->dtype));
    if (t->shape.rank > 1)
        return kn_error(KILN_ERR_SHAPE, "%s must be 1-D, has rank %d", what, (int)t->shape.rank);
    int64_t cnt = t->shape.rank == 0 ? 1 : t->shape.d[0];
    if (cnt > max_n)
        return kn_error(KILN_ERR_SHAPE, "%s has %lld values, at most %lld allowed", what,
                        (long long)cnt, (long long)max_n);
    if (t->data == NULL)
        return KN_NEED_DATA;
    for (int64_t i = 0; i < cnt; i++)
        out[i] = t->dtype == KILN_DTYPE_INT64 ? ((const int64_t *)t->data)[i]
                                              : ((const int32_t *)t->data)[i];
    *n = cnt;
    return KILN_OK;
}

kiln_status tensor_read_scalar_int(const kn_tensor *t, const char *what, int64_t *out) {
    if (!kn_dtype_is_integer(t->dtype))
        return kn_error(KILN_ERR_DTYPE, "%s must be an integer, not %s", what,
                        kn_dtype_name(t->dtype));
    if (kn_shape_numel(&t->shape) != 1)
        return kn_error(KILN_ERR_SHAPE, "%s must hold exactly one value", what);
    if (t->data == NULL)
        return KN_NEED_DATA;
    *out = kn_tensor_get_i64(t, 0);
    return KILN_OK;
}

kiln_status tensor_norm_axes(const int64_t *axes, int64_t n, int32_t rank, const char *what,
                             int64_t *out) {
    for (int64_t i = 0; i < n; i++) {
        if (axes[i] < -(int64_t)rank || axes[i] >= rank)
            return kn_error(KILN_ERR_SHAPE, "%s: axis %lld is out of range for rank %d", what,
                            (long long)axes[i], (int)rank);
        out[i] = axes[i] < 0 ? axes[i] + rank : axes[i];
        for (int64_t j = 0; j < i; j++)
            if (out[j] == out[i])
                return kn_error(KILN_ERR_SHAPE, "%s: axis %lld appears twice", what,
                                (long long)axes[i]);
    }
    return KILN_OK;
}

#define CMP3(a, b) ((a) < (b) ? -1 : (a) > (b) ? 1 : 0)

int tensor_elem_cmp(int32_t dtype, const void *a, const void *b) {
    switch (dtype) {
    case KILN_DTYPE_FLOAT32: {
        float x, y;
        memcpy(&x, a, 4);
        memcpy(&y, b, 4);
        return CMP3(x, y);
    }
    case KILN_DTYPE_FLOAT64: {
        double x, y;
        memcpy(&x, a, 8);
        memcpy(&y, b, 8);
        return CMP3(x, y);
    }
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16: {
        uint16_t x, y;
        memcpy(&x, a, 2);
        memcpy(&y, b, 2);
        float fx = dtype == KILN_DTYPE_FLOAT16 ? kn_half_to_float(x) : kn_bf16_to_float(x);
        float fy = dtype == KILN_DTYPE_FLOAT16 ? kn_half_to_float(y) : kn_bf16_to_float(y);
        return CMP3(fx, fy);
    }
    case KILN_DTYPE_INT8:
        return CMP3(*(const int8_t *)a, *(const int8_t *)b);
    case KILN_DTYPE_INT16: {
        int16_t x, y;
        memcpy(&x, a, 2);
        memcpy(&y, b, 2);
        return CMP3(x, y);
    }
    case KILN_DTYPE_INT32: {
        int32_t x, y;
        memcpy(&x, a, 4);
        memcpy(&y, b, 4);
        return CMP3(x, y);
    }
    case KILN_DTYPE_INT64: {
        int64_t x, y;
        memcpy(&x, a, 8);
        memcpy(&y, b, 8);
        return CMP3(x, y);
    }
    case KILN_DTYPE_UINT16: {
        uint16_t x, y;
        memcpy(&x, a, 2);
        memcpy(&y, b, 2);
        return CMP3(x, y);
    }
    case KILN_DTYPE_UINT32: {
        uint32_t x, y;
        memcpy(&x, a, 4);
        memcpy(&y, b, 4);
        return CMP3(x, y);
    }
    case KILN_DTYPE_UINT64: {
        uint64_t x, y;
        memcpy(&x, a, 8);
        memcpy(&y, b, 8);
        return CMP3(x, y);
    }
    default: /* uint8, bool */
        return CMP3(*(const uint8_t *)a, *(const uint8_t *)b);
    }
}

bool tensor_elem_nonzero(int32_t dtype, const void *p) {
    switch (dtype) {
    case KILN_DTYPE_FLOAT32: {
        float x;
        memcpy(&x, p, 4);
        return x != 0.0f;
    }
    case KILN_DTYPE_FLOAT64: {
        double x;
        memcpy(&x, p, 8);
        return x != 0.0;
    }
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16: {
        uint16_t x;
        memcpy(&x, p, 2);
        return (x & 0x7fff) != 0; /* -0 is zero */
    }
    default: {
        size_t es = kn_dtype_size(dtype);
        const uint8_t *b = p;
        for (size_t i = 0; i < es; i++)
            if (b[i] != 0)
                return true;
        return false;
    }
    }
}

kiln_status tensor_check_indices(const kn_tensor *idx, int64_t dim, const char *what) {
    int64_t n = kn_shape_numel(&idx->shape);
    for (int64_t i = 0; i < n; i++) {
        int64_t v = idx->dtype == KILN_DTYPE_INT64 ? ((const int64_t *)idx->data)[i]
                                                   : ((const int32_t *)idx->data)[i];
        if (v < -dim || v >= dim)
            return kn_error(KILN_ERR_INVALID_ARGUMENT,
                            "%s: index %lld at position %lld is out of range [-%lld, %lld)", what,
                            (long long)v, (long long)i, (long long)dim, (long long)dim);
    }
    return KILN_OK;
}

kiln_status tensor_scatter_reduction(const kn_node *node, int *red) {
    static const char *names[] = {"none", "add", "mul", "max", "min"};
    const char *s = kn_attr_string(node, "reduction", "none");
    for (int i = 0; i < 5; i++) {
        if (strcmp(s, names[i]) == 0) {
            *red = i;
            return KILN_OK;
        }
    }
    return kn_error(KILN_ERR_MODEL,
                    "attribute 'reduction' '%s' is not one of none, add, mul, "
                    "max, min",
                    s);
}

void tensor_split_dims(const kn_shape *s, int64_t axis, int64_t *outer, int64_t *n,
                       int64_t *inner) {
    int64_t o = 1, in = 1;
    for (int64_t i = 0; i < axis; i++)
        o *= s->d[i];
    for (int64_t i = axis + 1; i < s->rank; i++)
        in *= s->d[i];
    *outer = o;
    *n = axis < s->rank ? s->d[axis] : 1;
    *inner = in;
}
