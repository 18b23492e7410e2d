/* Data movement on the GPU: Transpose, Slice, Expand (one strided gather), Concat, Split,
 * Gather.
 * Any dtype of 1, 2, 4 or 8 bytes. */
#include "backend/cuda/cuda_internal.h"

#include <string.h>

#define STREAM(k) ((void *)(k)->stream->s)

static bool plain_size(int32_t dt) {
    size_t es = kn_dtype_size(dt);
    return es == 1 || es == 2 || es == 4 || es == 8;
}

static bool sup_movable(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                        const kn_tensor *out, kn_caps *caps) {
    (void)n_in;
    (void)in;
    (void)n_out;
    if (!plain_size(out[0].dtype))
        return kc_reason(caps, "cuda: %s of %s", n->op_type, kn_dtype_name(out[0].dtype));
    if (out[0].shape.rank > KC_MAX_RANK)
        return kc_reason(caps, "cuda: rank above %d", KC_MAX_RANK);
    return true;
}

/* --- Transpose --- */

static kiln_status run_transpose(kn_kernel_ctx *k) {
    const kn_shape *xs = &k->in[0].shape;
    int r = xs->rank;
    int64_t st[KN_MAX_RANK], src[KN_MAX_RANK];
    kn_shape_strides(xs, st);
    const int64_t *perm;
    int64_t np = kc_attr_ints(k->node, "perm", &perm);
    for (int d = 0; d < r; d++) {
        int p = np == r ? (int)perm[d] : r - 1 - d;
        src[d] = st[p];
    }
    return KC_LAUNCH(kc_strided_copy(STREAM(k), r, k->out[0].shape.d, src, 0, k->in[0].data,
                                     k->out[0].data, (int)kn_dtype_size(k->out[0].dtype)),
                     "Transpose");
}

/* --- Slice --- */

static int64_t read_int(const kn_tensor *t, int64_t i) {
    return t->dtype == KILN_DTYPE_INT32 ? ((const int32_t *)t->data)[i]
                                        : ((const int64_t *)t->data)[i];
}

static kiln_status run_slice(kn_kernel_ctx *k) {
    const kn_shape *xs = &k->in[0].shape;
    int r = xs->rank;
    int64_t st[KN_MAX_RANK], src[KN_MAX_RANK], base = 0;
    kn_shape_strides(xs, st);
    memcpy(src, st, sizeof src);
    const int64_t *a_starts = NULL, *a_ends = NULL, *a_axes = NULL;
    int64_t n = 0, n_axes = 0;
    bool attrs = k->node->opset < 10;
    if (attrs) {
        n = kc_attr_ints(k->node, "starts", &a_starts);
        kc_attr_ints(k->node, "ends", &a_ends);
        n_axes = kc_attr_ints(k->node, "axes", &a_axes);
    } else {
        n = kn_tensor_numel(&k->in[1]);
        n_axes = k->n_in > 3 && k->in[3].dtype ? kn_tensor_numel(&k->in[3]) : 0;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t axis = n_axes ? (attrs ? a_axes[i] : read_int(&k->in[3], i)) : i;
        if (axis < 0)
            axis += r;
        if (axis < 0 || axis >= r)
            return kc_fail(KILN_ERR_MODEL, "Slice: axis out of range");
        int64_t dim = xs->d[axis];
        int64_t s = attrs ? a_starts[i] : read_int(&k->in[1], i);
        int64_t step = !attrs && k->n_in > 4 && k->in[4].dtype ? read_int(&k->in[4], i) : 1;
        if (step == 0)
            return kc_fail(KILN_ERR_MODEL, "Slice: step 0");
        if (s < 0)
            s += dim;
        if (step > 0)
            s = s < 0 ? 0 : s > dim ? dim : s;
        else
            s = s < 0 ? 0 : s > dim - 1 ? dim - 1 : s;
        base += s * st[axis];
        src[axis] = st[axis] * step;
    }
    return KC_LAUNCH(kc_strided_copy(STREAM(k), r, k->out[0].shape.d, src, base, k->in[0].data,
                                     k->out[0].data, (int)kn_dtype_size(k->out[0].dtype)),
                     "Slice");
}

static bool sup_slice(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                      const kn_tensor *out, kn_caps *caps) {
    if (!sup_movable(n, n_in, in, n_out, out, caps))
        return false;
    caps->host_in = 0x1e; /* starts, ends, axes, steps */
    return true;
}

/* --- Expand --- */

static kiln_status run_expand(kn_kernel_ctx *k) {
    const kn_shape *s = &k->in[0].shape;
    kc_bcast bc;
    if (!kc_bcast_init(&bc, &k->out[0].shape, 1, &s))
        return kc_fail(KILN_ERR_SHAPE, "Expand: input does not broadcast to the output");
    return KC_LAUNCH(kc_strided_copy(STREAM(k), bc.rank, bc.dims, bc.strides[0], 0, k->in[0].data,
                                     k->out[0].data, (int)kn_dtype_size(k->out[0].dtype)),
                     "Expand");
}

static bool sup_expand(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                       const kn_tensor *out, kn_caps *caps) {
    if (!sup_movable(n, n_in, in, n_out, out, caps))
        return false;
    caps->host_in = 0x2;
    return true;
}

/* --- Concat --- */

/* The node's axis attribute on shape s (negative counted from the end), and the element
 * counts before and after it. */
static int64_t split_axis(const kn_kernel_ctx *k, const kn_shape *s, int64_t *outer,
                          int64_t *inner) {
    int64_t axis = kc_attr_int(k->node, "axis", 0);
    if (axis < 0)
        axis += s->rank;
    *outer = *inner = 1;
    for (int d = 0; d < axis; d++)
        *outer *= s->d[d];
    for (int d = (int)axis + 1; d < s->rank; d++)
        *inner *= s->d[d];
    return axis;
}

static kiln_status run_concat(kn_kernel_ctx *k) {
    const kn_shape *ys = &k->out[0].shape;
    int64_t outer, inner, axis = split_axis(k, ys, &outer, &inner);
    int es = (int)kn_dtype_size(k->out[0].dtype);
    int64_t off = 0;
    for (int j = 0; j < k->n_in; j++) {
        if (k->in[j].dtype == 0)
            continue;
        int64_t ix = k->in[j].shape.rank > axis ? k->in[j].shape.d[axis] * inner : 0;
        KC_TRY(KC_LAUNCH(kc_copy_rows(STREAM(k), k->in[j].data, k->out[0].data, outer, ix,
                                      ys->d[axis] * inner, off, es),
                         "Concat"));
        off += ix;
    }
    return KILN_OK;
}

/* --- Split (the sizes are the outputs' shapes; up to 4 outputs, one launch) --- */

static kiln_status run_split(kn_kernel_ctx *k) {
    int64_t outer, inner, axis = split_axis(k, &k->in[0].shape, &outer, &inner);
    void *y[4];
    int64_t widths[4];
    for (int j = 0; j < k->n_out; j++) {
        y[j] = k->out[j].data;
        widths[j] = k->out[j].shape.d[axis] * inner;
    }
    return KC_LAUNCH(kc_split(STREAM(k), k->in[0].data, k->n_out, y, widths, outer,
                              (int)kn_dtype_size(k->out[0].dtype)),
                     "Split");
}

static bool sup_split(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                      const kn_tensor *out, kn_caps *caps) {
    if (n_out < 1 || n_out > 4)
        return kc_reason(caps, "cuda: Split into more than 4 outputs");
    for (int j = 0; j < n_out; j++)
        if (out[j].dtype == 0)
            return kc_reason(caps, "cuda: Split with an omitted output");
    return sup_movable(n, n_in, in, n_out, out, caps);
}

/* --- Gather --- */

static kiln_status run_gather(kn_kernel_ctx *k) {
    const kn_shape *xs = &k->in[0].shape;
    int64_t axis = kc_attr_int(k->node, "axis", 0);
    if (axis < 0)
        axis += xs->rank;
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++)
        outer *= xs->d[d];
    for (int d = (int)axis + 1; d < xs->rank; d++)
        inner *= xs->d[d];
    return KC_LAUNCH(kc_gather(STREAM(k), k->in[0].data, k->in[1].data,
                               k->in[1].dtype == KILN_DTYPE_INT64, k->out[0].data, outer,
                               xs->d[axis], kn_tensor_numel(&k->in[1]), inner,
                               (int)kn_dtype_size(k->out[0].dtype), k->stream->bad_index),
                     "Gather");
}

static bool sup_gather(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                       const kn_tensor *out, kn_caps *caps) {
    if (!sup_movable(n, n_in, in, n_out, out, caps))
        return false;
    if (in[1].dtype != KILN_DTYPE_INT64 && in[1].dtype != KILN_DTYPE_INT32)
        return kc_reason(caps, "cuda: Gather indices of %s", kn_dtype_name(in[1].dtype));
    /* Indices known at build are checked here; run-time ones by the kernel, which raises
     * the stream's flag (reported when the stream is synchronised, as the CPU's error). */
    if (in[1].data != NULL) {
        int64_t dim = 0, axis = kc_attr_int(n, "axis", 0);
        if (axis < 0)
            axis += in[0].shape.rank;
        if (axis >= 0 && axis < in[0].shape.rank)
            dim = in[0].shape.d[axis];
        for (int64_t i = 0; i < kn_tensor_numel(&in[1]); i++) {
            int64_t v = read_int(&in[1], i);
            if (v < -dim || v >= dim)
                return kc_reason(caps, "cuda: Gather index %lld out of range", (long long)v);
        }
    }
    return true;
}

const kc_op kc_ops_tensor[] = {
    {{"", "Transpose", run_transpose, NULL, NULL}, sup_movable},
    {{"", "Slice", run_slice, NULL, NULL}, sup_slice},
    {{"", "Expand", run_expand, NULL, NULL}, sup_expand},
    {{"", "Concat", run_concat, NULL, NULL}, sup_movable},
    {{"", "Split", run_split, NULL, NULL}, sup_split},
    {{"", "Gather", run_gather, NULL, NULL}, sup_gather},
    {{NULL, NULL, NULL, NULL, NULL}, NULL},
};
