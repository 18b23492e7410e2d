/* Kernels that generate or rewrite values: Shape, Size, Dropout (inference), ConstantOfShape,
 * Range, EyeLike, Trilu, CumSum, CumProd, OneHot. */
#include "backend/cpu/tensor/tensor_kernels.h"

#include <string.h>

kiln_status cpu_tensor_run_shape(kn_kernel_ctx *k) {
    int64_t start, end;
    tensor_shape_range(k->node, k->in[0].shape.rank, &start, &end);
    int64_t *o = k->out[0].data;
    for (int64_t i = start; i < end; i++)
        o[i - start] = k->in[0].shape.d[i];
    return KILN_OK;
}

kiln_status cpu_tensor_run_size(kn_kernel_ctx *k) {
    *(int64_t *)k->out[0].data = kn_shape_numel(&k->in[0].shape);
    return KILN_OK;
}

kiln_status cpu_tensor_run_dropout(kn_kernel_ctx *k) {
    if (k->node->opset >= 12 && k->n_in > 2 && k->in[2].dtype != 0 &&
        kn_tensor_get_i64(&k->in[2], 0) != 0) {
        double ratio = k->n_in > 1 && k->in[1].dtype != 0 ? kn_tensor_get_f64(&k->in[1], 0) : 0.5;
        if (ratio != 0.0)
            return kn_error(KILN_ERR_UNSUPPORTED,
                            "training_mode with a non-zero ratio is not supported");
    }
    cpu_tensor_copy(k->pool, k->out[0].data, k->in[0].data, kn_tensor_nbytes(&k->in[0]));
    if (k->n_out > 1 && k->out[1].data != NULL) {
        kn_tensor *m = &k->out[1];
        int64_t n = kn_shape_numel(&m->shape);
        for (int64_t i = 0; i < n; i++)
            kn_tensor_set_f64(m, i, 1.0);
    }
    return KILN_OK;
}

kiln_status cpu_tensor_run_constant_of_shape(kn_kernel_ctx *k) {
    kn_tensor *o = &k->out[0];
    uint64_t zero = 0;
    const void *val = &zero;
    const kn_attr *v = kn_node_attr(k->node, "value");
    if (v != NULL && v->t != NULL && v->t->data != NULL)
        val = v->t->data;
    cpu_tensor_fill(o->data, val, kn_dtype_size(o->dtype), kn_shape_numel(&o->shape));
    return KILN_OK;
}

kiln_status cpu_tensor_run_range(kn_kernel_ctx *k) {
    kn_tensor *o = &k->out[0];
    int64_t n = kn_shape_numel(&o->shape);
    if (kn_dtype_is_integer(o->dtype)) {
        /* Wrapping unsigned arithmetic: every value lies between start and limit, so the
         * result is exact even where i * delta alone would overflow int64. */
        uint64_t start = (uint64_t)kn_tensor_get_i64(&k->in[0], 0);
        uint64_t delta = (uint64_t)kn_tensor_get_i64(&k->in[2], 0);
        for (int64_t i = 0; i < n; i++)
            kn_tensor_set_i64(o, i, (int64_t)(start + (uint64_t)i * delta));
        return KILN_OK;
    }
    double start = kn_tensor_get_f64(&k->in[0], 0), delta = kn_tensor_get_f64(&k->in[2], 0);
    for (int64_t i = 0; i < n; i++)
        kn_tensor_set_f64(o, i, start + (double)i * delta);
    return KILN_OK;
}

kiln_status cpu_tensor_run_eye_like(kn_kernel_ctx *k) {
    kn_tensor *o = &k->out[0];
    memset(o->data, 0, kn_tensor_nbytes(o));
    int64_t rows = o->shape.d[0], cols = o->shape.d[1], diag = kn_attr_int(k->node, "k", 0);
    for (int64_t i = 0; i < rows; i++) {
        int64_t j = i + diag;
        if (j >= 0 && j < cols)
            kn_tensor_set_f64(o, i * cols + j, 1.0);
    }
    return KILN_OK;
}

kiln_status cpu_tensor_run_trilu(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0];
    int64_t diag = 0;
    if (k->n_in > 1 && k->in[1].dtype != 0)
        KN_TRY(tensor_read_scalar_int(&k->in[1], "input 'k'", &diag));
    bool upper = kn_attr_int(k->node, "upper", 1) != 0;
    int32_t r = x->shape.rank;
    int64_t rows = x->shape.d[r - 2], cols = x->shape.d[r - 1];
    int64_t mats = rows * cols > 0 ? kn_shape_numel(&x->shape) / (rows * cols) : 0;
    size_t es = kn_dtype_size(x->dtype);
    char *o = k->out[0].data;
    cpu_tensor_copy(k->pool, o, x->data, kn_tensor_nbytes(x));
    for (int64_t m = 0; m < mats; m++) {
        for (int64_t i = 0; i < rows; i++) {
            char *row = o + (size_t)((m * rows + i) * cols) * es;
            /* Keep j - i >= k (upper) or j - i <= k (lower); zero the rest of the row. */
            int64_t lim = i + diag;
            int64_t z0 = upper ? 0 : lim + 1, z1 = upper ? lim : cols;
            z0 = z0 < 0 ? 0 : z0 > cols ? cols : z0;
            z1 = z1 < 0 ? 0 : z1 > cols ? cols : z1;
            if (z1 > z0)
                memset(row + (size_t)z0 * es, 0, (size_t)(z1 - z0) * es);
        }
    }
    return KILN_OK;
}

/* A running sum or product along one axis (CumSum, CumProd: `product` picks the operation and
 * its identity, 0 or 1). */
#define CUMULATE_T(T, ACC, LOAD, STORE)                                                            \
    do {                                                                                           \
        const T *s = x->data;                                                                      \
        T *d = k->out[0].data;                                                                     \
        for (int64_t o = 0; o < outer; o++) {                                                      \
            for (int64_t in = 0; in < inner; in++) {                                               \
                ACC acc = product ? (ACC)1 : (ACC)0;                                               \
                for (int64_t t = 0; t < n; t++) {                                                  \
                    int64_t j = reverse ? n - 1 - t : t;                                           \
                    int64_t p = (o * n + j) * inner + in;                                          \
                    ACC v = LOAD(s[p]);                                                            \
                    if (exclusive)                                                                 \
                        d[p] = STORE(acc);                                                         \
                    acc = product ? (ACC)(acc * v) : (ACC)(acc + v);                               \
                    if (!exclusive)                                                                \
                        d[p] = STORE(acc);                                                         \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    } while (0)

#define SAME(v) (v)

static kiln_status cumulate(kn_kernel_ctx *k, bool product) {
    const kn_tensor *x = &k->in[0];
    int64_t axis_raw, axis, outer, n, inner;
    KN_TRY(tensor_read_scalar_int(&k->in[1], "input 'axis'", &axis_raw));
    KN_TRY(kn_norm_axis(axis_raw, x->shape.rank, &axis));
    tensor_split_dims(&x->shape, axis, &outer, &n, &inner);
    bool exclusive = kn_attr_int(k->node, "exclusive", 0) != 0;
    bool reverse = kn_attr_int(k->node, "reverse", 0) != 0;
    switch (x->dtype) {
    case KILN_DTYPE_FLOAT32:
        CUMULATE_T(float, float, SAME, SAME);
        break;
    case KILN_DTYPE_FLOAT64:
        CUMULATE_T(double, double, SAME, SAME);
        break;
    case KILN_DTYPE_FLOAT16:
        CUMULATE_T(uint16_t, float, kn_half_to_float, kn_float_to_half);
        break;
    case KILN_DTYPE_BFLOAT16:
        CUMULATE_T(uint16_t, float, kn_bf16_to_float, kn_float_to_bf16);
        break;
    /* signed sums and products wrap around as two's complement (as onnxruntime's do), taken
     * unsigned so an overflow is defined */
    case KILN_DTYPE_INT32:
        CUMULATE_T(int32_t, uint32_t, SAME, SAME);
        break;
    case KILN_DTYPE_INT64:
        CUMULATE_T(int64_t, uint64_t, SAME, SAME);
        break;
    case KILN_DTYPE_UINT32:
        CUMULATE_T(uint32_t, uint32_t, SAME, SAME);
        break;
    case KILN_DTYPE_UINT64:
        CUMULATE_T(uint64_t, uint64_t, SAME, SAME);
        break;
    default:
        return kn_error(KILN_ERR_DTYPE, "%s does not accept %s", k->node->op_type,
                        kn_dtype_name(x->dtype));
    }
    return KILN_OK;
}

kiln_status cpu_tensor_run_cumsum(kn_kernel_ctx *k) {
    return cumulate(k, false);
}

kiln_status cpu_tensor_run_cumprod(kn_kernel_ctx *k) {
    return cumulate(k, true);
}

kiln_status cpu_tensor_run_one_hot(kn_kernel_ctx *k) {
    const kn_tensor *ind = &k->in[0], *val = &k->in[2];
    kn_tensor *o = &k->out[0];
    int64_t axis;
    KN_TRY(kn_norm_axis(kn_attr_int(k->node, "axis", -1), o->shape.rank, &axis));
    int64_t depth = o->shape.d[axis], outer = 1, inner = 1;
    for (int64_t i = 0; i < axis; i++)
        outer *= o->shape.d[i];
    for (int32_t i = (int32_t)axis + 1; i < o->shape.rank; i++)
        inner *= o->shape.d[i];
    size_t es = kn_dtype_size(o->dtype);
    const char *off = val->data, *on = (const char *)val->data + es;
    char *dst = o->data;
    cpu_tensor_fill(dst, off, es, kn_shape_numel(&o->shape));
    for (int64_t a = 0; a < outer; a++) {
        for (int64_t i = 0; i < inner; i++) {
            double dv = kn_tensor_get_f64(ind, a * inner + i);
            if (!(dv > -(double)depth - 1.0 && dv < (double)depth))
                continue;
            int64_t v = (int64_t)dv;
            if (v < 0)
                v += depth;
            if (v < 0 || v >= depth)
                continue;
            memcpy(dst + (size_t)((a * depth + v) * inner + i) * es, on, es);
        }
    }
    return KILN_OK;
}
