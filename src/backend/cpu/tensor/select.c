/* Kernels whose output size depends on data (NonZero, Compress, Unique; their shapes were
 * inferred from the same data) and ReverseSequence. */
#include "backend/cpu/tensor/tensor_kernels.h"

#include <string.h>

kiln_status cpu_tensor_run_non_zero(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0];
    int64_t n = kn_shape_numel(&x->shape), cap = k->out[0].shape.d[1], cnt = 0;
    int32_t r = x->shape.rank > 0 ? x->shape.rank : 1;
    size_t es = kn_dtype_size(x->dtype);
    int64_t *o = k->out[0].data, idx[KN_MAX_RANK] = {0};
    for (int64_t i = 0; i < n; i++) {
        if (tensor_elem_nonzero(x->dtype, (const char *)x->data + (size_t)i * es)) {
            if (cnt == cap)
                return kn_error(KILN_ERR_INTERNAL, "more non-zeros than inferred (%lld)",
                                (long long)cap);
            for (int32_t d = 0; d < r; d++)
                o[d * cap + cnt] = x->shape.rank > 0 ? idx[d] : 0;
            cnt++;
        }
        for (int32_t d = x->shape.rank - 1; d >= 0; d--) {
            if (++idx[d] < x->shape.d[d])
                break;
            idx[d] = 0;
        }
    }
    if (cnt != cap)
        return kn_error(KILN_ERR_INTERNAL, "found %lld non-zeros, inferred %lld", (long long)cnt,
                        (long long)cap);
    return KILN_OK;
}

kiln_status cpu_tensor_run_compress(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0], *cond = &k->in[1];
    const uint8_t *c = cond->data;
    int64_t nc = cond->shape.d[0], outer = 1, n, inner = 1;
    const kn_attr *a = kn_node_attr(k->node, "axis");
    if (a != NULL) {
        int64_t axis;
        KN_TRY(kn_norm_axis(a->i, x->shape.rank, &axis));
        tensor_split_dims(&x->shape, axis, &outer, &n, &inner);
    } else {
        n = kn_shape_numel(&x->shape);
    }
    if (nc > n)
        return kn_error(KILN_ERR_SHAPE, "input 'condition' is longer than the axis");
    int64_t kept = 0;
    for (int64_t j = 0; j < nc; j++)
        kept += c[j] != 0;
    if (kept * outer * inner != kn_shape_numel(&k->out[0].shape))
        return kn_error(KILN_ERR_INTERNAL, "compressed size differs from the inferred one");
    size_t ib = (size_t)inner * kn_dtype_size(x->dtype);
    char *dst = k->out[0].data;
    const char *src = x->data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < nc; j++)
            if (c[j]) {
                memcpy(dst, src + (size_t)(o * n + j) * ib, ib);
                dst += ib;
            }
    return KILN_OK;
}

kiln_status cpu_tensor_run_unique(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0];
    tensor_unique_result r;
    KN_TRY(tensor_unique_compute(k->node, x, &r));
    size_t es = kn_dtype_size(x->dtype);
    int64_t outer = 1, n = r.n_items, inner = 1;
    if (r.axis >= 0)
        tensor_split_dims(&x->shape, r.axis, &outer, &n, &inner);
    kiln_status rc = KILN_OK;
    if (k->out[0].shape.rank < 1 ||
        kn_shape_numel(&k->out[0].shape) != outer * r.n_unique * inner) {
        rc = kn_error(KILN_ERR_INTERNAL, "unique count differs from the inferred one");
        goto done;
    }
    size_t ib = (size_t)inner * es;
    char *y = k->out[0].data;
    const char *src = x->data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t u = 0; u < r.n_unique; u++)
            memcpy(y + (size_t)(o * r.n_unique + u) * ib, src + (size_t)(o * n + r.order[u]) * ib,
                   ib);
    const int64_t *arrays[3] = {r.order, r.inverse, r.counts};
    int64_t lens[3] = {r.n_unique, r.n_items, r.n_unique};
    for (int i = 1; i < k->n_out && i < 4; i++)
        if (k->out[i].data != NULL)
            memcpy(k->out[i].data, arrays[i - 1], (size_t)lens[i - 1] * sizeof(int64_t));
done:
    tensor_unique_free(&r);
    return rc;
}

kiln_status cpu_tensor_run_reverse_sequence(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0], *lens = &k->in[1];
    bool time_first = kn_attr_int(k->node, "time_axis", 0) == 0;
    int64_t t_dim = x->shape.d[time_first ? 0 : 1], b_dim = x->shape.d[time_first ? 1 : 0];
    int64_t inner = 1;
    for (int32_t i = 2; i < x->shape.rank; i++)
        inner *= x->shape.d[i];
    size_t ib = (size_t)inner * kn_dtype_size(x->dtype);
    char *dst = k->out[0].data;
    const char *src = x->data;
    cpu_tensor_copy(k->pool, dst, src, kn_tensor_nbytes(x));
    for (int64_t b = 0; b < b_dim; b++) {
        int64_t len = kn_tensor_get_i64(lens, b);
        if (len < 0 || len > t_dim)
            return kn_error(KILN_ERR_INVALID_ARGUMENT,
                            "input 'sequence_lens'[%lld] is %lld (must be in [0, %lld])",
                            (long long)b, (long long)len, (long long)t_dim);
        for (int64_t t = 0; t < len; t++) {
            int64_t from = len - 1 - t;
            size_t od = (size_t)(time_first ? t * b_dim + b : b * t_dim + t) * ib;
            size_t os = (size_t)(time_first ? from * b_dim + b : b * t_dim + from) * ib;
            memcpy(dst + od, src + os, ib);
        }
    }
    return KILN_OK;
}
