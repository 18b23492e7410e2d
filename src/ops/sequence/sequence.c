/* Sequence ops: inference and the element lists their kernels share (see sequence.h). */
#include "ops/sequence/sequence.h"

#include "core/alloc.h"
#include "ops/infer_util.h"

#include <stdio.h>
#include <string.h>

void kn_seq_result_free(kn_seq_result *r) {
    kn_free(r->items);
    kn_free(r->starts);
    memset(r, 0, sizeof *r);
}

static kiln_status alloc_items(kn_seq_result *r, int n, bool starts) {
    r->items = kn_calloc((size_t)n + 1, sizeof *r->items);
    if (starts)
        r->starts = kn_calloc((size_t)n + 1, sizeof *r->starts);
    if (r->items == NULL || (starts && r->starts == NULL)) {
        kn_seq_result_free(r);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    r->n = n;
    return KILN_OK;
}

kiln_status kn_seq_position(const kn_tensor *t, const char *name, int n, int extra, int *out) {
    if ((t->dtype != KILN_DTYPE_INT32 && t->dtype != KILN_DTYPE_INT64) || kn_tensor_numel(t) != 1)
        return kn_error(KILN_ERR_MODEL, "input '%s' must be one int32 or int64 element", name);
    int64_t p = kn_tensor_get_i64(t, 0), lim = (int64_t)n + extra;
    if (p < -(int64_t)n || p >= lim)
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "%s %lld is out of range for a sequence of %d elements (allowed: %lld to "
                        "%lld)",
                        name, (long long)p, n, -(long long)n, (long long)(lim - 1));
    *out = (int)(p < 0 ? p + n : p);
    return KILN_OK;
}

static bool have_data(int n_in, const kn_tensor *in) {
    for (int i = 0; i < n_in; i++)
        if (in[i].dtype != 0 && in[i].data == NULL && kn_tensor_nbytes(&in[i]) > 0)
            return false;
    return true;
}

static kiln_status check_dtype(int32_t want, const kn_tensor *t, const char *what) {
    if (want != 0 && t->dtype != want)
        return kn_error(KILN_ERR_DTYPE, "%s is %s; the sequence holds %s", what,
                        kn_dtype_name(t->dtype), kn_dtype_name(want));
    return KILN_OK;
}

static kiln_status construct(int n_in, const kn_tensor *in, kn_seq_result *r) {
    KN_TRY(alloc_items(r, n_in, false));
    r->elem_dtype = in[0].dtype;
    for (int i = 0; i < n_in; i++) {
        char what[32];
        snprintf(what, sizeof what, "input %d", i);
        kiln_status rc = check_dtype(r->elem_dtype, &in[i], what);
        if (rc != KILN_OK) {
            kn_seq_result_free(r);
            return rc;
        }
        r->items[i] = in[i];
    }
    return KILN_OK;
}

/* SequenceInsert (insert) or SequenceErase (!insert). */
static kiln_status insert_erase(int n_in, const kn_tensor *in, bool insert, kn_seq_result *r) {
    kn_container c;
    KN_TRY(kn_container_open(&in[0], "input 'input_sequence'", &c));
    int pos_in = insert ? 2 : 1, pos = insert ? c.count : c.count - 1;
    if (!insert && c.count == 0)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "cannot erase from an empty sequence");
    if (pos_in < n_in && in[pos_in].dtype != 0)
        KN_TRY(kn_seq_position(&in[pos_in], "position", c.count, insert ? 1 : 0, &pos));
    r->kind = KN_CONTAINER_SEQUENCE;
    r->elem_dtype = c.elem_dtype;
    if (insert) {
        KN_TRY(check_dtype(c.count ? c.elem_dtype : 0, &in[1], "input 'tensor'"));
        r->elem_dtype = in[1].dtype;
    }
    KN_TRY(alloc_items(r, c.count + (insert ? 1 : -1), false));
    for (int i = 0, k = 0; i < c.count; i++) {
        if (insert && i == pos)
            r->items[k++] = in[1];
        if (insert || i != pos)
            r->items[k++] = kn_container_item(&c, i);
    }
    if (insert && pos == c.count)
        r->items[c.count] = in[1];
    return KILN_OK;
}

static kiln_status split(const kn_node *node, int n_in, const kn_tensor *in, kn_seq_result *r) {
    const kn_tensor *x = &in[0];
    int64_t axis;
    if (kn_norm_axis(kn_attr_int(node, "axis", 0), x->shape.rank, &axis) != KILN_OK)
        return kn_error(KILN_ERR_MODEL, "axis %lld is out of range for rank %d",
                        (long long)kn_attr_int(node, "axis", 0), x->shape.rank);
    int64_t len = x->shape.d[axis];
    bool keep = kn_attr_int(node, "keepdims", 1) != 0;
    const kn_tensor *s = n_in > 1 && in[1].dtype != 0 ? &in[1] : NULL;
    if (s != NULL &&
        ((s->dtype != KILN_DTYPE_INT32 && s->dtype != KILN_DTYPE_INT64) || s->shape.rank > 1))
        return kn_error(KILN_ERR_MODEL, "input 'split' must be an int32 or int64 scalar or 1-D");
    int64_t chunk = 1, count = len;
    if (s != NULL && s->shape.rank == 0) {
        chunk = kn_tensor_get_i64(s, 0);
        if (chunk <= 0)
            return kn_error(KILN_ERR_INVALID_ARGUMENT, "split %lld must be positive",
                            (long long)chunk);
        count = len == 0 ? 0 : (len - 1) / chunk + 1; /* len + chunk could overflow */
    } else if (s != NULL) {
        count = s->shape.d[0];
        int64_t sum = 0;
        for (int64_t i = 0; i < count; i++) {
            int64_t v = kn_tensor_get_i64(s, i);
            if (v < 0)
                return kn_error(KILN_ERR_INVALID_ARGUMENT, "split[%lld] is negative", (long long)i);
            if (v > len - sum) /* sum stays within [0, len], so it cannot overflow */
                return kn_error(KILN_ERR_INVALID_ARGUMENT,
                                "the splits add up to more than axis %lld's %lld", (long long)axis,
                                (long long)len);
            sum += v;
        }
        if (sum != len)
            return kn_error(KILN_ERR_INVALID_ARGUMENT,
                            "the splits add up to %lld; axis %lld has %lld", (long long)sum,
                            (long long)axis, (long long)len);
    }
    if (count > INT32_MAX / 2)
        return kn_error(KILN_ERR_SHAPE, "%lld pieces are too many", (long long)count);
    KN_TRY(alloc_items(r, (int)count, true));
    r->kind = KN_CONTAINER_SEQUENCE;
    r->elem_dtype = x->dtype;
    r->axis = (int)axis;
    for (int64_t i = 0, at = 0; i < count; i++) {
        int64_t size = s == NULL            ? 1
                       : s->shape.rank == 0 ? (at + chunk <= len ? chunk : len - at)
                                            : kn_tensor_get_i64(s, i);
        kn_tensor *t = &r->items[i];
        *t = (kn_tensor){.dtype = x->dtype, .shape = x->shape};
        t->shape.d[axis] = size;
        if (s == NULL && !keep) {
            for (int d = (int)axis; d + 1 < x->shape.rank; d++)
                t->shape.d[d] = x->shape.d[d + 1];
            t->shape.rank--;
        }
        r->starts[i] = at;
        at += size;
    }
    return KILN_OK;
}

kiln_status kn_seq_elements(const kn_node *node, int n_in, const kn_tensor *in, kn_seq_result *r) {
    memset(r, 0, sizeof *r);
    const char *op = node->op_type;
    bool is_split = strcmp(op, "SplitToSequence") == 0;
    /* SplitToSequence reads only its input's shape (and the split sizes) */
    if (!have_data(is_split ? 0 : n_in, in) || (is_split && !have_data(n_in - 1, in + 1)))
        return KN_NEED_DATA;
    if (strcmp(op, "SequenceEmpty") == 0) {
        r->elem_dtype = (int32_t)kn_attr_int(node, "dtype", KILN_DTYPE_FLOAT32);
        return alloc_items(r, 0, false);
    }
    if (strcmp(op, "SequenceConstruct") == 0)
        return construct(n_in, in, r);
    if (strcmp(op, "SequenceInsert") == 0 || strcmp(op, "SequenceErase") == 0)
        return insert_erase(n_in, in, op[8] == 'I', r);
    if (is_split)
        return split(node, n_in, in, r);
    /* Optional: of its input, or empty */
    r->kind = KN_CONTAINER_OPTIONAL;
    if (n_in == 0 || in[0].dtype == 0) {
        r->elem_dtype = (int32_t)kn_attr_int(node, "type", 0);
        return alloc_items(r, 0, false);
    }
    KN_TRY(alloc_items(r, 1, false));
    r->elem_dtype = in[0].dtype;
    r->items[0] = in[0];
    return KILN_OK;
}

void kn_seq_split_copy(const kn_seq_result *r, const kn_tensor *src, const kn_container *c) {
    size_t es = kn_dtype_size(src->dtype), inner = es;
    int64_t outer = 1, len = src->shape.d[r->axis];
    for (int d = 0; d < r->axis; d++)
        outer *= src->shape.d[d];
    for (int d = r->axis + 1; d < src->shape.rank; d++)
        inner *= (size_t)src->shape.d[d];
    for (int i = 0; i < r->n; i++) {
        kn_tensor t = kn_container_item(c, i);
        size_t row = (size_t)(kn_shape_numel(&t.shape) / (outer ? outer : 1)) * es;
        for (int64_t o = 0; o < outer && row; o++)
            memcpy((char *)t.data + (size_t)o * row,
                   (const char *)src->data + ((size_t)(o * len + r->starts[i])) * inner, row);
    }
}

/* Every container-making op: its result's size. */
kiln_status kn_infer_seq_make(kn_infer_ctx *c) {
    kn_seq_result r;
    KN_TRY(kn_seq_elements(c->node, c->n_in, c->in, &r));
    c->out[0] = kn_container_tensor(kn_container_bytes(r.n, r.items));
    kn_seq_result_free(&r);
    return KILN_OK;
}

static kiln_status open_input(kn_infer_ctx *c, kn_container *s) {
    if (c->in[0].dtype == KILN_DTYPE_CONTAINER && c->in[0].data == NULL)
        return KN_NEED_DATA;
    return kn_container_open(&c->in[0], "input 'input_sequence'", s);
}

kiln_status kn_infer_sequence_at(kn_infer_ctx *c) {
    kn_container s;
    KN_TRY(open_input(c, &s));
    if (c->in[1].data == NULL)
        return KN_NEED_DATA;
    int pos;
    KN_TRY(kn_seq_position(&c->in[1], "position", s.count, 0, &pos));
    c->out[0] = kn_container_item(&s, pos);
    c->out[0].data = NULL;
    return KILN_OK;
}

kiln_status kn_infer_sequence_length(kn_infer_ctx *c) {
    if (c->in[0].dtype != KILN_DTYPE_CONTAINER)
        return kn_error(KILN_ERR_DTYPE, "input is %s, not a sequence",
                        kn_dtype_name(c->in[0].dtype));
    c->out[0] = (kn_tensor){.dtype = KILN_DTYPE_INT64};
    return KILN_OK;
}

kiln_status kn_seq_concat_shape(const kn_node *node, const kn_container *c, kn_tensor *out,
                                int *axis) {
    if (c->count == 0)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "cannot concatenate an empty sequence");
    bool stack = kn_attr_int(node, "new_axis", 0) != 0;
    kn_tensor first = kn_container_item(c, 0);
    int64_t a = kn_attr_int(node, "axis", 0), norm;
    if (kn_norm_axis(a, first.shape.rank + (stack ? 1 : 0), &norm) != KILN_OK)
        return kn_error(KILN_ERR_MODEL, "axis %lld is out of range for elements of rank %d",
                        (long long)a, first.shape.rank);
    *out = (kn_tensor){.dtype = first.dtype, .shape = first.shape};
    if (stack) {
        out->shape.rank++;
        for (int d = out->shape.rank - 1; d > norm; d--)
            out->shape.d[d] = out->shape.d[d - 1];
        out->shape.d[norm] = 0;
    } else {
        out->shape.d[norm] = 0;
    }
    for (int i = 0; i < c->count; i++) {
        kn_tensor t = kn_container_item(c, i);
        if (t.dtype != first.dtype)
            return kn_error(KILN_ERR_DTYPE, "element %d is %s; element 0 is %s", i,
                            kn_dtype_name(t.dtype), kn_dtype_name(first.dtype));
        bool same = t.shape.rank == first.shape.rank;
        for (int d = 0; same && d < t.shape.rank; d++)
            same = t.shape.d[d] == first.shape.d[d] || (!stack && d == norm);
        if (!same) {
            char s0[128], s1[128];
            return kn_error(KILN_ERR_SHAPE, "element %d has shape %s; element 0 has %s", i,
                            kn_shape_str(&t.shape, s1, sizeof s1),
                            kn_shape_str(&first.shape, s0, sizeof s0));
        }
        out->shape.d[norm] += stack ? 1 : t.shape.d[norm];
    }
    *axis = (int)norm;
    return KILN_OK;
}

kiln_status kn_infer_concat_from_sequence(kn_infer_ctx *c) {
    kn_container s;
    KN_TRY(open_input(c, &s));
    int axis;
    return kn_seq_concat_shape(c->node, &s, &c->out[0], &axis);
}
