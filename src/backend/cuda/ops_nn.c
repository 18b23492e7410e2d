/* Normalisation, reductions, pooling and Resize on the GPU (float32, float16, bfloat16 tensors;
 * sums, means and exponentials in float32). */
#include "backend/cuda/cuda_internal.h"

#include <string.h>

#define STREAM(k) ((void *)(k)->stream->s)

static bool f32_io(const kn_node *n, int n_in, const kn_tensor *in, int n_out, const kn_tensor *out,
                   kn_caps *caps) {
    (void)n;
    return kc_all_float(in, n_in > 0 ? 1 : 0, caps, "input") &&
           kc_all_float(out, n_out, caps, "output") &&
           kc_one_type(in, n_in > 0 ? 1 : 0, out[0].dtype, caps);
}

static int norm_axis(int64_t axis, int rank) {
    return (int)(axis < 0 ? axis + rank : axis);
}

/* --- Softmax / LogSoftmax: rows along the last axis (or opset < 13's flattened 2-D) --- */

static bool softmax_rows(const kn_node *n, const kn_shape *s, int64_t *rows, int64_t *len) {
    int axis = norm_axis(kc_attr_int(n, "axis", n->opset < 13 ? 1 : -1), s->rank);
    if (axis < 0 || axis >= s->rank || (n->opset >= 13 && axis != s->rank - 1))
        return false;
    *rows = 1;
    *len = 1;
    for (int d = 0; d < s->rank; d++)
        *(d < axis ? rows : len) *= s->d[d];
    return true;
}

static kiln_status run_softmax(kn_kernel_ctx *k) {
    int64_t rows, len;
    softmax_rows(k->node, &k->in[0].shape, &rows, &len);
    return KC_LAUNCH(kc_softmax(STREAM(k), k->out[0].dtype, k->in[0].data, k->out[0].data, rows,
                                len, strcmp(k->node->op_type, "LogSoftmax") == 0),
                     k->node->op_type);
}

static bool sup_softmax(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                        const kn_tensor *out, kn_caps *caps) {
    int64_t rows, len;
    if (in[0].shape.rank == 0 || !softmax_rows(n, &in[0].shape, &rows, &len))
        return kc_reason(caps, "cuda: %s along a non-last axis runs on the CPU", n->op_type);
    if (rows > 2147483647)
        return kc_reason(caps, "cuda: too many rows");
    return f32_io(n, n_in, in, n_out, out, caps);
}

/* --- LayerNormalization --- */

static void ln_rows(const kn_node *n, const kn_shape *s, int64_t *rows, int64_t *len) {
    int axis = norm_axis(kc_attr_int(n, "axis", -1), s->rank);
    *rows = 1;
    *len = 1;
    for (int d = 0; d < s->rank; d++)
        *(d < axis ? rows : len) *= s->d[d];
}

static kiln_status run_layernorm(kn_kernel_ctx *k) {
    int64_t rows, len;
    ln_rows(k->node, &k->in[0].shape, &rows, &len);
    const void *bias = k->n_in > 2 && k->in[2].dtype ? k->in[2].data : NULL;
    return KC_LAUNCH(kc_layernorm(STREAM(k), k->out[0].dtype, k->in[0].data, k->in[1].data, bias,
                                  k->out[0].data, rows, len,
                                  kc_attr_float(k->node, "epsilon", 1e-5f)),
                     "LayerNormalization");
}

static bool sup_layernorm(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                          const kn_tensor *out, kn_caps *caps) {
    int64_t rows, len;
    if (in[0].shape.rank == 0)
        return kc_reason(caps, "cuda: LayerNormalization of a scalar");
    int axis = norm_axis(kc_attr_int(n, "axis", -1), in[0].shape.rank);
    if (axis < 0 || axis >= in[0].shape.rank)
        return kc_reason(caps, "cuda: LayerNormalization axis out of range");
    ln_rows(n, &in[0].shape, &rows, &len);
    if (kn_tensor_numel(&in[1]) != len ||
        (n_in > 2 && in[2].dtype && kn_tensor_numel(&in[2]) != len))
        return kc_reason(caps, "cuda: LayerNormalization with broadcast scale or bias");
    for (int j = 1; j < n_out; j++)
        if (out[j].dtype != 0)
            return kc_reason(caps, "cuda: LayerNormalization's Mean/InvStdDev outputs");
    if (rows > 2147483647)
        return kc_reason(caps, "cuda: too many rows");
    return kc_all_float(in, n_in, caps, "input") && kc_all_float(out, 1, caps, "output") &&
           kc_one_type(in, n_in, out[0].dtype, caps);
}

/* --- Reduce*: a contiguous run of axes as [outer, n, inner] --- */

static int reduce_op(const char *name) {
    static const char *const names[] = {
        "ReduceSum",       "ReduceMean", "ReduceMax", "ReduceMin",       "ReduceProd",
        "ReduceSumSquare", "ReduceL1",   "ReduceL2",  "ReduceLogSumExp", "ReduceLogSum"};
    for (int i = 0; i < 10; i++)
        if (strcmp(names[i], name) == 0)
            return i;
    return -1;
}

/* Axes from the attribute or (ReduceSum 13+, all 18+) the second input; false when they are
 * not one contiguous run. An empty list reduces everything unless noop_with_empty_axes. */
static bool reduce_shape(const kn_node *n, int n_in, const kn_tensor *in, int64_t *outer,
                         int64_t *len, int64_t *inner, bool *noop) {
    const kn_shape *s = &in[0].shape;
    bool mask[KN_MAX_RANK] = {false};
    const int64_t *axes = NULL;
    int64_t na = kc_attr_ints(n, "axes", &axes);
    bool from_input = n_in > 1 && in[1].dtype != 0;
    if (from_input) {
        if (in[1].data == NULL)
            return false;
        na = kn_tensor_numel(&in[1]);
    }
    *noop = false;
    if (na == 0 && kc_attr_int(n, "noop_with_empty_axes", 0) && from_input) {
        *noop = true;
    }
    for (int64_t i = 0; i < na; i++) {
        int64_t a = from_input ? ((const int64_t *)in[1].data)[i] : axes[i];
        a = norm_axis(a, s->rank);
        if (a < 0 || a >= s->rank)
            return false;
        mask[a] = true;
    }
    if (na == 0 && !*noop)
        for (int d = 0; d < s->rank; d++)
            mask[d] = true;
    int first = -1, last = -1;
    for (int d = 0; d < s->rank; d++)
        if (mask[d]) {
            if (first < 0)
                first = d;
            else if (last != d - 1)
                return false;
            last = d;
        }
    *outer = *len = *inner = 1;
    for (int d = 0; d < s->rank; d++)
        *(first < 0 || d < first ? outer : d <= last ? len : inner) *= s->d[d];
    return true;
}

static kiln_status run_reduce(kn_kernel_ctx *k) {
    int64_t outer, len, inner;
    bool noop;
    reduce_shape(k->node, k->n_in, k->in, &outer, &len, &inner, &noop);
    if (noop)
        return kc_check(cudaMemcpyAsync(k->out[0].data, k->in[0].data, kn_tensor_nbytes(&k->in[0]),
                                        cudaMemcpyDeviceToDevice, k->stream->s),
                        k->node->op_type);
    return KC_LAUNCH(kc_reduce(STREAM(k), k->out[0].dtype, reduce_op(k->node->op_type),
                               k->in[0].data, k->out[0].data, outer, len, inner),
                     k->node->op_type);
}

static bool sup_reduce(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                       const kn_tensor *out, kn_caps *caps) {
    int64_t outer, len, inner;
    bool noop;
    if (n_in > 1 && in[1].dtype != 0 && in[1].dtype != KILN_DTYPE_INT64)
        return kc_reason(caps, "cuda: %s axes of %s", n->op_type, kn_dtype_name(in[1].dtype));
    if (!reduce_shape(n, n_in, in, &outer, &len, &inner, &noop))
        return kc_reason(caps, "cuda: %s over axes not known at build or not adjacent", n->op_type);
    caps->host_in = 0x2;
    return f32_io(n, n_in, in, n_out, out, caps);
}

/* --- Global pooling: a reduction over H*W (kernels_cnn.cu), NCHW or NHWC (kiln_nhwc) --- */

static kiln_status run_global_pool(kn_kernel_ctx *k) {
    const kn_shape *s = &k->in[0].shape;
    int64_t hw = 1;
    for (int d = 2; d < s->rank; d++)
        hw *= s->d[d];
    const int nhwc = kc_nhwc_in(k->node, 0);
    KC_TRY(kc_workspace(k->stream, kc_global_pool_ws(s->d[0], s->d[1], hw, nhwc)));
    return KC_LAUNCH(kc_global_pool(STREAM(k), k->out[0].dtype,
                                    strcmp(k->node->op_type, "GlobalMaxPool") == 0, s->d[0],
                                    s->d[1], hw, nhwc, k->in[0].data, k->out[0].data, k->stream->ws,
                                    k->stream->ws_size),
                     k->node->op_type);
}

static bool sup_global_pool(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                            const kn_tensor *out, kn_caps *caps) {
    if (in[0].shape.rank < 3)
        return kc_reason(caps, "cuda: %s of rank %d", n->op_type, in[0].shape.rank);
    if (in[0].shape.rank == 4 && in[0].shape.d[0] <= 65535)
        caps->layouts |= KN_LAYOUT_NHWC_BIT;
    return f32_io(n, n_in, in, n_out, out, caps);
}

/* --- MaxPool / AveragePool, 2-D, NCHW or NHWC (kiln_nhwc) --- */

static kiln_status pool_params(const kn_node *n, const kn_shape *x, const kn_shape *y,
                               kc_pool2d *p) {
    memset(p, 0, sizeof *p);
    const int64_t *ks, *st, *pads, *dil;
    if (kc_attr_ints(n, "kernel_shape", &ks) != 2)
        return KILN_ERR_UNSUPPORTED;
    int64_t nst = kc_attr_ints(n, "strides", &st);
    int64_t npd = kc_attr_ints(n, "pads", &pads);
    int64_t ndl = kc_attr_ints(n, "dilations", &dil);
    const char *ap = kc_attr_string(n, "auto_pad", "NOTSET");
    p->n = x->d[0];
    p->c = x->d[1];
    p->h = x->d[2];
    p->w = x->d[3];
    p->oh = y->d[2];
    p->ow = y->d[3];
    p->kh = (int32_t)ks[0];
    p->kw = (int32_t)ks[1];
    p->sh = nst == 2 ? (int32_t)st[0] : 1;
    p->sw = nst == 2 ? (int32_t)st[1] : 1;
    p->dh = ndl == 2 ? (int32_t)dil[0] : 1;
    p->dw = ndl == 2 ? (int32_t)dil[1] : 1;
    if (strcmp(ap, "NOTSET") == 0) {
        p->ph = npd == 4 ? (int32_t)pads[0] : 0;
        p->pw = npd == 4 ? (int32_t)pads[1] : 0;
    } else if (strcmp(ap, "VALID") == 0) {
        p->ph = p->pw = 0;
    } else {
        /* SAME_UPPER / SAME_LOWER: total padding from the output size, the extra on the end
         * (UPPER) or the start (LOWER). */
        int64_t th = (p->oh - 1) * p->sh + (int64_t)(p->kh - 1) * p->dh + 1 - p->h;
        int64_t tw = (p->ow - 1) * p->sw + (int64_t)(p->kw - 1) * p->dw + 1 - p->w;
        th = th < 0 ? 0 : th;
        tw = tw < 0 ? 0 : tw;
        bool lower = strcmp(ap, "SAME_LOWER") == 0;
        p->ph = (int32_t)(lower ? (th + 1) / 2 : th / 2);
        p->pw = (int32_t)(lower ? (tw + 1) / 2 : tw / 2);
    }
    p->kind = strcmp(n->op_type, "MaxPool") == 0 ? 0 : 1;
    p->count_include_pad = (int32_t)kc_attr_int(n, "count_include_pad", 0);
    return KILN_OK;
}

static kiln_status run_pool(kn_kernel_ctx *k) {
    kc_pool2d p;
    pool_params(k->node, &k->in[0].shape, &k->out[0].shape, &p);
    p.nhwc = kc_nhwc_in(k->node, 0);
    return KC_LAUNCH(kc_pool2d_run(STREAM(k), k->out[0].dtype, &p, k->in[0].data, k->out[0].data),
                     k->node->op_type);
}

static bool sup_pool(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                     const kn_tensor *out, kn_caps *caps) {
    kc_pool2d p;
    if (in[0].shape.rank != 4 || pool_params(n, &in[0].shape, &out[0].shape, &p) != KILN_OK)
        return kc_reason(caps, "cuda: only 2-D %s runs on the GPU so far", n->op_type);
    if (n_out > 1 && out[1].dtype != 0)
        return kc_reason(caps, "cuda: MaxPool's Indices output");
    /* An average window lying wholly in the padding divides by its padded count on the CPU;
     * the kernel's count of in-bounds and padding cells matches it only without ceil_mode's
     * windows past the padding. */
    if (p.kind == 1 && kc_attr_int(n, "ceil_mode", 0))
        return kc_reason(caps, "cuda: AveragePool with ceil_mode runs on the CPU");
    caps->layouts |= KN_LAYOUT_NHWC_BIT;
    return f32_io(n, n_in, in, 1, out, caps);
}

/* --- Resize: nearest or linear over the last two dims of a 4-D tensor --- */

static int coord_mode(const char *s) {
    static const char *const names[] = {"half_pixel", "asymmetric", "align_corners",
                                        "pytorch_half_pixel", "tf_half_pixel_for_nn"};
    for (int i = 0; i < 5; i++)
        if (strcmp(names[i], s) == 0)
            return i;
    return -1;
}

static int nearest_mode(const char *s) {
    static const char *const names[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
    for (int i = 0; i < 4; i++)
        if (strcmp(names[i], s) == 0)
            return i;
    return -1;
}

static bool resize_params(const kn_node *n, int n_in, const kn_tensor *in, const kn_tensor *out,
                          kc_resize *r) {
    memset(r, 0, sizeof *r);
    const kn_shape *x = &in[0].shape, *y = &out[0].shape;
    if (x->rank != 4 || y->d[0] != x->d[0] || y->d[1] != x->d[1] || n->opset < 11)
        return false;
    const char *mode = kc_attr_string(n, "mode", "nearest");
    r->mode = strcmp(mode, "nearest") == 0 ? 0 : strcmp(mode, "linear") == 0 ? 1 : -1;
    r->coord = coord_mode(kc_attr_string(n, "coordinate_transformation_mode", "half_pixel"));
    r->nearest_mode = nearest_mode(kc_attr_string(n, "nearest_mode", "round_prefer_floor"));
    if (r->mode < 0 || r->coord < 0 || r->nearest_mode < 0 || kc_attr_int(n, "antialias", 0) ||
        kc_host->attr(n, "axes") != NULL)
        return false;
    r->outer = x->d[0] * x->d[1];
    r->h = x->d[2];
    r->w = x->d[3];
    r->oh = y->d[2];
    r->ow = y->d[3];
    r->scale_h = (float)r->oh / (float)(r->h ? r->h : 1);
    r->scale_w = (float)r->ow / (float)(r->w ? r->w : 1);
    const kn_tensor *sc = n_in > 2 && in[2].dtype ? &in[2] : NULL;
    if (sc != NULL && kn_tensor_numel(sc) == 4) {
        if (sc->data == NULL || sc->dtype != KILN_DTYPE_FLOAT32)
            return false;
        r->scale_h = ((const float *)sc->data)[2];
        r->scale_w = ((const float *)sc->data)[3];
    }
    return true;
}

static kiln_status run_resize(kn_kernel_ctx *k) {
    kc_resize r;
    resize_params(k->node, k->n_in, k->in, k->out, &r);
    return KC_LAUNCH(kc_resize_run(STREAM(k), k->out[0].dtype, &r, k->in[0].data, k->out[0].data),
                     "Resize");
}

static bool sup_resize(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                       const kn_tensor *out, kn_caps *caps) {
    kc_resize r;
    caps->host_in = 0xe; /* roi, scales, sizes */
    bool ok = true;
    if (n_in > 2 && in[2].dtype && kn_tensor_numel(&in[2]) == 4 && in[2].data == NULL)
        ok = false; /* scales computed at run time: resize_params reads them at build */
    if (!ok || !resize_params(n, n_in, in, out, &r))
        return kc_reason(caps, "cuda: only nearest/linear Resize of H and W runs on the GPU");
    return f32_io(n, n_in, in, n_out, out, caps);
}

#define REDUCE(name)                                                                               \
    { {"", name, run_reduce, NULL, NULL}, sup_reduce }

const kc_op kc_ops_nn[] = {
    {{"", "Softmax", run_softmax, NULL, NULL}, sup_softmax},
    {{"", "LogSoftmax", run_softmax, NULL, NULL}, sup_softmax},
    {{"", "LayerNormalization", run_layernorm, NULL, NULL}, sup_layernorm},
    REDUCE("ReduceSum"),
    REDUCE("ReduceMean"),
    REDUCE("ReduceMax"),
    REDUCE("ReduceMin"),
    REDUCE("ReduceProd"),
    REDUCE("ReduceSumSquare"),
    REDUCE("ReduceL1"),
    REDUCE("ReduceL2"),
    REDUCE("ReduceLogSumExp"),
    REDUCE("ReduceLogSum"),
    {{"", "GlobalAveragePool", run_global_pool, NULL, NULL}, sup_global_pool},
    {{"", "GlobalMaxPool", run_global_pool, NULL, NULL}, sup_global_pool},
    {{"", "MaxPool", run_pool, NULL, NULL}, sup_pool},
    {{"", "AveragePool", run_pool, NULL, NULL}, sup_pool},
    {{"", "Resize", run_resize, NULL, NULL}, sup_resize},
    {{NULL, NULL, NULL, NULL, NULL}, NULL},
};
