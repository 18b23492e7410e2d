/* Inference for ops whose output size depends on data (NonZero, Compress, Unique) and for
 * ReverseSequence; Unique's computation is shared with its kernel. */
#include "ops/tensor/tensor_ops.h"

#include <string.h>

kiln_status tensor_infer_non_zero(kn_infer_ctx *c) {
    KN_TRY(tensor_need_input(c, 0, "X"));
    const kn_tensor *x = &c->in[0];
    KN_TRY(tensor_check_movable(x, "input 'X'"));
    if (x->data == NULL)
        return KN_NEED_DATA;
    int64_t n = kn_shape_numel(&x->shape), cnt = 0;
    size_t es = kn_dtype_size(x->dtype);
    for (int64_t i = 0; i < n; i++)
        cnt += tensor_elem_nonzero(x->dtype, (const char *)x->data + (size_t)i * es);
    c->out[0].dtype = KILN_DTYPE_INT64;
    c->out[0].shape = (kn_shape){.rank = 2, .d = {x->shape.rank > 0 ? x->shape.rank : 1, cnt}};
    return KILN_OK;
}

kiln_status tensor_infer_compress(kn_infer_ctx *c) {
    KN_TRY(tensor_need_input(c, 0, "input"));
    KN_TRY(tensor_need_input(c, 1, "condition"));
    const kn_tensor *x = &c->in[0], *cond = &c->in[1];
    KN_TRY(tensor_check_movable(x, "input 'input'"));
    if (cond->dtype != KILN_DTYPE_BOOL)
        return kn_error(KILN_ERR_DTYPE, "input 'condition' must be bool, not %s",
                        kn_dtype_name(cond->dtype));
    if (cond->shape.rank != 1)
        return kn_error(KILN_ERR_SHAPE, "input 'condition' must be 1-D");
    const kn_attr *a = kn_node_attr(c->node, "axis");
    int64_t axis = -1, len = kn_shape_numel(&x->shape);
    if (a != NULL) {
        KN_TRY(kn_norm_axis(a->i, x->shape.rank, &axis));
        len = x->shape.d[axis];
    }
    if (cond->shape.d[0] > len)
        return kn_error(KILN_ERR_SHAPE, "input 'condition' has %lld values, the axis has %lld",
                        (long long)cond->shape.d[0], (long long)len);
    if (cond->data == NULL)
        return KN_NEED_DATA;
    int64_t cnt = 0;
    for (int64_t i = 0; i < cond->shape.d[0]; i++)
        cnt += ((const uint8_t *)cond->data)[i] != 0;
    kn_shape out = {.rank = 1, .d = {cnt}};
    if (axis >= 0) {
        out = x->shape;
        out.d[axis] = cnt;
    }
    c->out[0].dtype = x->dtype;
    c->out[0].shape = out;
    return KILN_OK;
}

typedef struct unique_view {
    const char *base;
    size_t es;
    int32_t dtype;
    int64_t outer, n, inner;
} unique_view;

static int slice_cmp(const unique_view *v, int64_t a, int64_t b) {
    for (int64_t o = 0; o < v->outer; o++) {
        for (int64_t i = 0; i < v->inner; i++) {
            size_t pa = (size_t)((o * v->n + a) * v->inner + i) * v->es;
            size_t pb = (size_t)((o * v->n + b) * v->inner + i) * v->es;
            int r = tensor_elem_cmp(v->dtype, v->base + pa, v->base + pb);
            if (r != 0)
                return r;
        }
    }
    return 0;
}

/* Stable bottom-up merge sort of idx[0..n) by slice order; tmp has n entries. */
static void sort_slices(const unique_view *v, int64_t *idx, int64_t *tmp, int64_t n) {
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int64_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                tmp[k++] = slice_cmp(v, idx[j], idx[i]) < 0 ? idx[j++] : idx[i++];
            while (i < mid)
                tmp[k++] = idx[i++];
            while (j < hi)
                tmp[k++] = idx[j++];
        }
        memcpy(idx, tmp, (size_t)n * sizeof *idx);
    }
}

void tensor_unique_free(tensor_unique_result *r) {
    kn_free(r->order);
    kn_free(r->inverse);
    kn_free(r->counts);
    r->order = r->inverse = r->counts = NULL;
}

kiln_status tensor_unique_compute(const kn_node *node, const kn_tensor *x,
                                  tensor_unique_result *r) {
    memset(r, 0, sizeof *r);
    unique_view v = {.base = x->data, .es = kn_dtype_size(x->dtype), .dtype = x->dtype};
    const kn_attr *a = kn_node_attr(node, "axis");
    r->axis = -1;
    if (a != NULL) {
        KN_TRY(kn_norm_axis(a->i, x->shape.rank, &r->axis));
        tensor_split_dims(&x->shape, r->axis, &v.outer, &v.n, &v.inner);
    } else {
        v.outer = v.inner = 1;
        v.n = kn_shape_numel(&x->shape);
    }
    int64_t n = v.n;
    r->n_items = n;
    size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(int64_t);
    int64_t *sorted = kn_malloc(bytes), *tmp = kn_malloc(bytes);
    r->order = kn_malloc(bytes);
    r->inverse = kn_malloc(bytes);
    r->counts = kn_malloc(bytes);
    kiln_status rc = KILN_OK;
    if (!sorted || !tmp || !r->order || !r->inverse || !r->counts) {
        rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory in Unique");
        goto done;
    }
    for (int64_t i = 0; i < n; i++)
        sorted[i] = i;
    sort_slices(&v, sorted, tmp, n);
    /* Group runs of equal slices; tmp[g] = first index of group g (in sorted order). */
    int64_t g = -1;
    for (int64_t i = 0; i < n; i++) {
        if (i == 0 || slice_cmp(&v, sorted[i - 1], sorted[i]) != 0) {
            g++;
            tmp[g] = sorted[i];
            r->counts[g] = 0;
        }
        r->counts[g]++;
        r->inverse[sorted[i]] = g;
    }
    r->n_unique = g + 1;
    bool want_sorted = kn_attr_int(node, "sorted", 1) != 0;
    if (want_sorted) {
        memcpy(r->order, tmp, (size_t)r->n_unique * sizeof(int64_t));
        goto done;
    }
    /* First-occurrence order: walk elements, number each group when first met. */
    int64_t *rank = sorted, *cnt = r->order;
    for (int64_t u = 0; u < r->n_unique; u++)
        rank[u] = -1;
    int64_t next = 0;
    for (int64_t i = 0; i < n; i++)
        if (rank[r->inverse[i]] < 0)
            rank[r->inverse[i]] = next++;
    for (int64_t u = 0; u < r->n_unique; u++)
        cnt[rank[u]] = r->counts[u];
    memcpy(r->counts, cnt, (size_t)r->n_unique * sizeof(int64_t));
    for (int64_t u = 0; u < r->n_unique; u++)
        r->order[rank[u]] = tmp[u];
    for (int64_t i = 0; i < n; i++)
        r->inverse[i] = rank[r->inverse[i]];
done:
    kn_free(sorted);
    kn_free(tmp);
    if (rc != KILN_OK)
        tensor_unique_free(r);
    return rc;
}

kiln_status tensor_infer_unique(kn_infer_ctx *c) {
    KN_TRY(tensor_need_input(c, 0, "X"));
    const kn_tensor *x = &c->in[0];
    KN_TRY(tensor_check_movable(x, "input 'X'"));
    const kn_attr *a = kn_node_attr(c->node, "axis");
    int64_t axis = -1;
    if (a != NULL)
        KN_TRY(kn_norm_axis(a->i, x->shape.rank, &axis));
    if (x->data == NULL)
        return KN_NEED_DATA;
    tensor_unique_result r;
    KN_TRY(tensor_unique_compute(c->node, x, &r));
    kn_shape y = {.rank = 1, .d = {r.n_unique}};
    if (axis >= 0) {
        y = x->shape;
        y.d[axis] = r.n_unique;
    }
    c->out[0].dtype = x->dtype;
    c->out[0].shape = y;
    kn_shape idx = {.rank = 1, .d = {r.n_unique}}, inv = {.rank = 1, .d = {r.n_items}};
    for (int i = 1; i < c->n_out && i < 4; i++) {
        c->out[i].dtype = KILN_DTYPE_INT64;
        c->out[i].shape = i == 2 ? inv : idx;
    }
    tensor_unique_free(&r);
    return KILN_OK;
}

kiln_status tensor_infer_reverse_sequence(kn_infer_ctx *c) {
    KN_TRY(tensor_need_input(c, 0, "input"));
    KN_TRY(tensor_need_input(c, 1, "sequence_lens"));
    const kn_tensor *x = &c->in[0], *lens = &c->in[1];
    KN_TRY(tensor_check_movable(x, "input 'input'"));
    if (x->shape.rank < 2)
        return kn_error(KILN_ERR_SHAPE, "input 'input' must have rank >= 2");
    int64_t ba = kn_attr_int(c->node, "batch_axis", 1), ta = kn_attr_int(c->node, "time_axis", 0);
    if ((ba != 0 && ba != 1) || (ta != 0 && ta != 1) || ba == ta)
        return kn_error(KILN_ERR_MODEL,
                        "attributes 'batch_axis' (%lld) and 'time_axis' (%lld) "
                        "must be 0 and 1 in some order",
                        (long long)ba, (long long)ta);
    if (lens->dtype != KILN_DTYPE_INT64 && lens->dtype != KILN_DTYPE_INT32)
        return kn_error(KILN_ERR_DTYPE, "input 'sequence_lens' must be int64");
    if (lens->shape.rank != 1 || lens->shape.d[0] != x->shape.d[ba])
        return kn_error(KILN_ERR_SHAPE, "input 'sequence_lens' must be 1-D with %lld values",
                        (long long)x->shape.d[ba]);
    c->out[0].dtype = x->dtype;
    c->out[0].shape = x->shape;
    return KILN_OK;
}
