/* Inference and parameter resolution for ops that cut, join and rearrange tensors: Concat,
 * Split, Slice, Pad, CenterCropPad, Transpose, DepthToSpace, SpaceToDepth. */
#include "ops/tensor/tensor_ops.h"

#include <stdio.h>
#include <string.h>

kiln_status tensor_infer_concat(kn_infer_ctx *c) {
    if (c->n_in < 1)
        return kn_error(KILN_ERR_MODEL, "Concat needs at least one input");
    const kn_attr *a = kn_node_attr(c->node, "axis");
    if (a == NULL)
        return kn_error(KILN_ERR_MODEL, "attribute 'axis' is required");
    const kn_tensor *x0 = NULL;
    for (int i = 0; i < c->n_in; i++) {
        if (!kn_has_input(c, i))
            return kn_error(KILN_ERR_MODEL, "input %d is omitted", i);
        if (x0 == NULL)
            x0 = &c->in[i];
    }
    KN_TRY(tensor_check_movable(x0, "input 0"));
    if (x0->shape.rank == 0)
        return kn_error(KILN_ERR_SHAPE, "inputs must have rank >= 1");
    int64_t axis;
    KN_TRY(kn_norm_axis(a->i, x0->shape.rank, &axis));
    kn_shape out = x0->shape;
    out.d[axis] = 0;
    for (int i = 0; i < c->n_in; i++) {
        const kn_tensor *t = &c->in[i];
        if (t->dtype != x0->dtype)
            return kn_error(KILN_ERR_DTYPE, "input %d is %s, input 0 is %s", i,
                            kn_dtype_name(t->dtype), kn_dtype_name(x0->dtype));
        if (t->shape.rank != x0->shape.rank)
            return kn_error(KILN_ERR_SHAPE, "input %d has rank %d, input 0 has rank %d", i,
                            (int)t->shape.rank, (int)x0->shape.rank);
        for (int32_t d = 0; d < out.rank; d++)
            if (d != axis && t->shape.d[d] != x0->shape.d[d])
                return kn_error(KILN_ERR_SHAPE, "input %d has dim %d = %lld, input 0 has %lld", i,
                                (int)d, (long long)t->shape.d[d], (long long)x0->shape.d[d]);
        out.d[axis] += t->shape.d[axis];
    }
    KN_TRY(tensor_check_shape(&out, "concatenated output"));
    c->out[0].dtype = x0->dtype;
    c->out[0].shape = out;
    return KILN_OK;
}

kiln_status tensor_split_resolve(const kn_node *node, int n_in, const kn_tensor *in, int n_out,
                                 int64_t *axis, int64_t *sizes) {
    const kn_tensor *x = &in[0];
    if (n_out < 1)
        return kn_error(KILN_ERR_MODEL, "Split needs at least one output");
    KN_TRY(kn_norm_axis(kn_attr_int(node, "axis", 0), x->shape.rank, axis));
    int64_t dim = x->shape.d[*axis], n = -1;
    if (node->opset < 13) {
        const int64_t *a;
        int64_t cnt = kn_attr_ints(node, "split", &a);
        if (cnt > 0) {
            if (cnt != n_out)
                return kn_error(KILN_ERR_SHAPE, "attribute 'split' has %lld values for %d outputs",
                                (long long)cnt, n_out);
            memcpy(sizes, a, (size_t)cnt * sizeof *sizes);
            n = cnt;
        }
    } else if (n_in > 1 && in[1].dtype != 0) {
        if (in[1].shape.rank != 1 || in[1].shape.d[0] != n_out)
            return kn_error(KILN_ERR_SHAPE, "input 'split' must be 1-D with %d values", n_out);
        KN_TRY(tensor_read_ints(&in[1], "input 'split'", n_out, sizes, &n));
    }
    if (n >= 0) {
        int64_t sum = 0;
        for (int i = 0; i < n_out; i++) {
            if (sizes[i] < 0 || sizes[i] > dim)
                return kn_error(KILN_ERR_SHAPE, "split size %d is %lld (dim is %lld)", i,
                                (long long)sizes[i], (long long)dim);
            sum += sizes[i];
        }
        if (sum != dim)
            return kn_error(KILN_ERR_SHAPE, "split sizes sum to %lld, the axis dim is %lld",
                            (long long)sum, (long long)dim);
        return KILN_OK;
    }
    const kn_attr *num = node->opset >= 18 ? kn_node_attr(node, "num_outputs") : NULL;
    if (num != NULL && num->i != n_out)
        return kn_error(KILN_ERR_MODEL, "attribute 'num_outputs' is %lld but the node has %d",
                        (long long)num->i, n_out);
    if (num == NULL && dim % n_out != 0)
        return kn_error(KILN_ERR_SHAPE, "axis dim %lld does not split into %d equal parts",
                        (long long)dim, n_out);
    int64_t chunk = dim / n_out + (dim % n_out != 0);
    int64_t last = dim - chunk * (n_out - 1);
    if (last < 0)
        return kn_error(KILN_ERR_SHAPE, "axis dim %lld is too small for %d outputs", (long long)dim,
                        n_out);
    for (int i = 0; i < n_out; i++)
        sizes[i] = i == n_out - 1 ? last : chunk;
    return KILN_OK;
}

kiln_status tensor_infer_split(kn_infer_ctx *c) {
    KN_TRY(tensor_need_input(c, 0, "input"));
    const kn_tensor *x = &c->in[0];
    KN_TRY(tensor_check_movable(x, "input 'input'"));
    int64_t *sizes = kn_malloc((size_t)c->n_out * sizeof *sizes + 1);
    if (sizes == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    int64_t axis;
    kiln_status rc = tensor_split_resolve(c->node, c->n_in, c->in, c->n_out, &axis, sizes);
    if (rc == KILN_OK) {
        for (int i = 0; i < c->n_out; i++) {
            c->out[i].dtype = x->dtype;
            c->out[i].shape = x->shape;
            c->out[i].shape.d[axis] = sizes[i];
        }
    }
    kn_free(sizes);
    return rc;
}

/* Reads the four slice lists (attributes before opset 10, inputs since). */
static kiln_status slice_lists(const kn_node *node, int n_in, const kn_tensor *in,
                               int64_t lists[4][KN_MAX_RANK], int64_t *count, bool *present) {
    static const char *names[4] = {"starts", "ends", "axes", "steps"};
    for (int k = 0; k < 4; k++) {
        int64_t n = -1;
        if (node->opset < 10) {
            const int64_t *a;
            const kn_attr *at = kn_node_attr(node, names[k]);
            if (at != NULL && k < 3) {
                n = kn_attr_ints(node, names[k], &a);
                if (n > KN_MAX_RANK)
                    return kn_error(KILN_ERR_SHAPE, "attribute '%s' has too many values", names[k]);
                memcpy(lists[k], a, (size_t)n * sizeof(int64_t));
            }
        } else if (k + 1 < n_in && in[k + 1].dtype != 0) {
            char what[32];
            snprintf(what, sizeof what, "input '%s'", names[k]);
            KN_TRY(tensor_read_ints(&in[k + 1], what, KN_MAX_RANK, lists[k], &n));
        }
        present[k] = n >= 0;
        if (k < 2 && !present[k])
            return kn_error(KILN_ERR_MODEL, "'%s' is required", names[k]);
        if (present[k] && k > 0 && n != count[0])
            return kn_error(KILN_ERR_SHAPE, "'%s' has %lld values, 'starts' has %lld", names[k],
                            (long long)n, (long long)count[0]);
        count[k] = n;
    }
    return KILN_OK;
}

kiln_status tensor_slice_resolve(const kn_node *node, int n_in, const kn_tensor *in,
                                 tensor_slice_plan *p) {
    const kn_tensor *x = &in[0];
    int32_t r = x->shape.rank;
    int64_t lists[4][KN_MAX_RANK], count[4];
    bool present[4];
    KN_TRY(slice_lists(node, n_in, in, lists, count, present));
    int64_t n = count[0];
    if (n > r)
        return kn_error(KILN_ERR_SHAPE, "'starts' has %lld values for rank %d", (long long)n,
                        (int)r);
    int64_t axes[KN_MAX_RANK];
    if (present[2]) {
        KN_TRY(tensor_norm_axes(lists[2], n, r, "axes", axes));
    } else {
        for (int64_t k = 0; k < n; k++)
            axes[k] = k;
    }
    p->out = x->shape;
    for (int32_t i = 0; i < r; i++) {
        p->start[i] = 0;
        p->step[i] = 1;
    }
    for (int64_t k = 0; k < n; k++) {
        int64_t a = axes[k], dim = x->shape.d[a];
        int64_t step = present[3] ? lists[3][k] : 1;
        if (step == 0)
            return kn_error(KILN_ERR_INVALID_ARGUMENT, "'steps'[%lld] is zero", (long long)k);
        int64_t s = lists[0][k], e = lists[1][k], len = 0;
        if (s < 0)
            s += dim;
        if (e < 0)
            e += dim;
        if (step > 0) {
            s = s < 0 ? 0 : s > dim ? dim : s;
            e = e < 0 ? 0 : e > dim ? dim : e;
            len = e > s ? (e - s - 1) / step + 1 : 0;
        } else if (dim > 0) {
            s = s < 0 ? 0 : s > dim - 1 ? dim - 1 : s;
            e = e < -1 ? -1 : e > dim - 1 ? dim - 1 : e;
            int64_t mag = step == INT64_MIN ? INT64_MAX : -step;
            len = s > e ? (s - e - 1) / mag + 1 : 0;
        } else {
            s = 0;
        }
        p->start[a] = s;
        /* With at most one element taken the step is never applied; kept as given, a huge one
         * would overflow the kernel's step * stride. */
        p->step[a] = len > 1 ? step : step > 0 ? 1 : -1;
        p->out.d[a] = len;
    }
    return KILN_OK;
}

kiln_status tensor_infer_slice(kn_infer_ctx *c) {
    KN_TRY(tensor_need_input(c, 0, "data"));
    KN_TRY(tensor_check_movable(&c->in[0], "input 'data'"));
    tensor_slice_plan p;
    KN_TRY(tensor_slice_resolve(c->node, c->n_in, c->in, &p));
    c->out[0].dtype = c->in[0].dtype;
    c->out[0].shape = p.out;
    return KILN_OK;
}

static kiln_status pad_mode(const kn_node *node, tensor_pad_mode *m) {
    const char *s = kn_attr_string(node, "mode", "constant");
    if (strcmp(s, "constant") == 0)
        *m = TENSOR_PAD_CONSTANT;
    else if (strcmp(s, "reflect") == 0)
        *m = TENSOR_PAD_REFLECT;
    else if (strcmp(s, "edge") == 0)
        *m = TENSOR_PAD_EDGE;
    else if (strcmp(s, "wrap") == 0)
        *m = TENSOR_PAD_WRAP;
    else
        return kn_error(KILN_ERR_UNSUPPORTED, "attribute 'mode' '%s' is not supported", s);
    return KILN_OK;
}

kiln_status tensor_pad_resolve(const kn_node *node, int n_in, const kn_tensor *in,
                               tensor_pad_plan *p) {
    const kn_tensor *x = &in[0];
    int32_t r = x->shape.rank;
    KN_TRY(pad_mode(node, &p->mode));
    int64_t pads[2 * KN_MAX_RANK], n = 0, axes[KN_MAX_RANK], n_axes = r;
    for (int32_t i = 0; i < r; i++)
        axes[i] = i;
    if (node->opset < 11) {
        const int64_t *a;
        n = kn_attr_ints(node, node->opset < 2 ? "paddings" : "pads", &a);
        if (n > 2 * KN_MAX_RANK)
            return kn_error(KILN_ERR_SHAPE, "attribute 'pads' has too many values");
        if (n > 0) /* absent: no pads (and no array to copy from) */
            memcpy(pads, a, (size_t)n * sizeof *pads);
    } else {
        if (n_in < 2 || in[1].dtype == 0)
            return kn_error(KILN_ERR_MODEL, "input 'pads' is required");
        KN_TRY(tensor_read_ints(&in[1], "input 'pads'", 2 * KN_MAX_RANK, pads, &n));
        if (n_in > 2 && in[2].dtype != 0) {
            if (in[2].dtype != x->dtype)
                return kn_error(KILN_ERR_DTYPE, "input 'constant_value' is %s, data is %s",
                                kn_dtype_name(in[2].dtype), kn_dtype_name(x->dtype));
            if (kn_shape_numel(&in[2].shape) != 1)
                return kn_error(KILN_ERR_SHAPE, "input 'constant_value' must be one value");
        }
        if (node->opset >= 18 && n_in > 3 && in[3].dtype != 0) {
            int64_t raw[KN_MAX_RANK];
            KN_TRY(tensor_read_ints(&in[3], "input 'axes'", KN_MAX_RANK, raw, &n_axes));
            KN_TRY(tensor_norm_axes(raw, n_axes, r, "axes", axes));
        }
    }
    if (n != 2 * n_axes)
        return kn_error(KILN_ERR_SHAPE, "'pads' has %lld values, expected %lld", (long long)n,
                        (long long)(2 * n_axes));
    for (int32_t i = 0; i < r; i++)
        p->before[i] = p->after[i] = 0;
    for (int64_t k = 0; k < n_axes; k++) {
        p->before[axes[k]] = pads[k];
        p->after[axes[k]] = pads[n_axes + k];
    }
    p->out.rank = r;
    for (int32_t i = 0; i < r; i++) {
        int64_t d = x->shape.d[i], b = p->before[i], e = p->after[i];
        if (b > KN_MAX_ELEMENTS || e > KN_MAX_ELEMENTS || b < -d || e < -d || d + b + e < 0)
            return kn_error(KILN_ERR_SHAPE, "pads %lld/%lld on axis %d (dim %lld) are invalid",
                            (long long)b, (long long)e, (int)i, (long long)d);
        if (p->mode != TENSOR_PAD_CONSTANT && d == 0 && (b > 0 || e > 0))
            return kn_error(KILN_ERR_SHAPE, "cannot pad the empty axis %d in this mode", (int)i);
        p->out.d[i] = d + b + e;
    }
    return tensor_check_shape(&p->out, "padded output");
}

kiln_status tensor_infer_pad(kn_infer_ctx *c) {
    KN_TRY(tensor_need_input(c, 0, "data"));
    KN_TRY(tensor_check_movable(&c->in[0], "input 'data'"));
    tensor_pad_plan p;
    KN_TRY(tensor_pad_resolve(c->node, c->n_in, c->in, &p));
    c->out[0].dtype = c->in[0].dtype;
    c->out[0].shape = p.out;
    return KILN_OK;
}

kiln_status tensor_center_crop_pad_resolve(const kn_node *node, int n_in, const kn_tensor *in,
                                           tensor_pad_plan *p) {
    const kn_tensor *x = &in[0];
    int32_t r = x->shape.rank;
    if (n_in < 2 || in[1].dtype == 0)
        return kn_error(KILN_ERR_MODEL, "input 'shape' is required");
    int64_t shp[KN_MAX_RANK], n, axes[KN_MAX_RANK], n_axes = r;
    KN_TRY(tensor_read_ints(&in[1], "input 'shape'", KN_MAX_RANK, shp, &n));
    const int64_t *a;
    int64_t na = kn_attr_ints(node, "axes", &a);
    if (kn_node_attr(node, "axes") != NULL) {
        if (na > KN_MAX_RANK)
            return kn_error(KILN_ERR_SHAPE, "attribute 'axes' has too many values");
        KN_TRY(tensor_norm_axes(a, na, r, "axes", axes));
        n_axes = na;
    } else {
        for (int32_t i = 0; i < r; i++)
            axes[i] = i;
    }
    if (n != n_axes)
        return kn_error(KILN_ERR_SHAPE, "input 'shape' has %lld values for %lld axes", (long long)n,
                        (long long)n_axes);
    p->mode = TENSOR_PAD_CONSTANT;
    p->out = x->shape;
    for (int32_t i = 0; i < r; i++)
        p->before[i] = p->after[i] = 0;
    for (int64_t k = 0; k < n_axes; k++) {
        int64_t dim = x->shape.d[axes[k]], want = shp[k];
        if (want < 0 || want > KN_MAX_ELEMENTS)
            return kn_error(KILN_ERR_SHAPE, "input 'shape'[%lld] is %lld", (long long)k,
                            (long long)want);
        /* Crop or pad evenly, the odd element going to the end (as the reference does). */
        int64_t diff = want - dim, half = (diff < 0 ? -diff : diff) / 2;
        p->before[axes[k]] = diff < 0 ? -half : half;
        p->after[axes[k]] = diff - p->before[axes[k]];
        p->out.d[axes[k]] = want;
    }
    return tensor_check_shape(&p->out, "output");
}

kiln_status tensor_infer_center_crop_pad(kn_infer_ctx *c) {
    KN_TRY(tensor_need_input(c, 0, "input_data"));
    KN_TRY(tensor_check_movable(&c->in[0], "input 'input_data'"));
    tensor_pad_plan p;
    KN_TRY(tensor_center_crop_pad_resolve(c->node, c->n_in, c->in, &p));
    c->out[0].dtype = c->in[0].dtype;
    c->out[0].shape = p.out;
    return KILN_OK;
}

kiln_status tensor_transpose_perm(const kn_node *node, int32_t rank, int64_t *perm) {
    const int64_t *a;
    int64_t n = kn_attr_ints(node, "perm", &a);
    if (kn_node_attr(node, "perm") == NULL) {
        for (int32_t i = 0; i < rank; i++)
            perm[i] = rank - 1 - i;
        return KILN_OK;
    }
    if (n != rank)
        return kn_error(KILN_ERR_SHAPE, "attribute 'perm' has %lld values for rank %d",
                        (long long)n, (int)rank);
    bool seen[KN_MAX_RANK] = {0};
    for (int32_t i = 0; i < rank; i++) {
        if (a[i] < 0 || a[i] >= rank || seen[a[i]])
            return kn_error(KILN_ERR_SHAPE, "attribute 'perm' is not a permutation of 0..%d",
                            (int)rank - 1);
        seen[a[i]] = true;
        perm[i] = a[i];
    }
    return KILN_OK;
}

kiln_status tensor_infer_transpose(kn_infer_ctx *c) {
    KN_TRY(tensor_need_input(c, 0, "data"));
    const kn_tensor *x = &c->in[0];
    KN_TRY(tensor_check_movable(x, "input 'data'"));
    int64_t perm[KN_MAX_RANK];
    KN_TRY(tensor_transpose_perm(c->node, x->shape.rank, perm));
    kn_shape out = {.rank = x->shape.rank};
    for (int32_t i = 0; i < out.rank; i++)
        out.d[i] = x->shape.d[perm[i]];
    c->out[0].dtype = x->dtype;
    c->out[0].shape = out;
    return KILN_OK;
}

static kiln_status block_size(kn_infer_ctx *c, int64_t *b) {
    KN_TRY(tensor_need_input(c, 0, "input"));
    KN_TRY(tensor_check_movable(&c->in[0], "input 'input'"));
    if (c->in[0].shape.rank != 4)
        return kn_error(KILN_ERR_SHAPE, "input 'input' must be 4-D, has rank %d",
                        (int)c->in[0].shape.rank);
    *b = kn_attr_int(c->node, "blocksize", 0);
    if (*b < 1 || *b > 65536)
        return kn_error(KILN_ERR_MODEL, "attribute 'blocksize' is %lld (must be >= 1)",
                        (long long)*b);
    return KILN_OK;
}

kiln_status tensor_infer_depth_to_space(kn_infer_ctx *c) {
    int64_t b;
    KN_TRY(block_size(c, &b));
    const kn_shape *s = &c->in[0].shape;
    const char *mode = kn_attr_string(c->node, "mode", "DCR");
    if (strcmp(mode, "DCR") != 0 && strcmp(mode, "CRD") != 0)
        return kn_error(KILN_ERR_MODEL, "attribute 'mode' is '%s' (must be DCR or CRD)", mode);
    if (s->d[1] % (b * b) != 0)
        return kn_error(KILN_ERR_SHAPE, "channels %lld are not divisible by blocksize^2 = %lld",
                        (long long)s->d[1], (long long)(b * b));
    kn_shape out = {.rank = 4, .d = {s->d[0], s->d[1] / (b * b), s->d[2] * b, s->d[3] * b}};
    c->out[0].dtype = c->in[0].dtype;
    c->out[0].shape = out;
    return KILN_OK;
}

kiln_status tensor_infer_space_to_depth(kn_infer_ctx *c) {
    int64_t b;
    KN_TRY(block_size(c, &b));
    const kn_shape *s = &c->in[0].shape;
    const char *mode = kn_attr_string(c->node, "mode", "DCR");
    if (strcmp(mode, "DCR") != 0 && strcmp(mode, "CRD") != 0)
        return kn_error(KILN_ERR_MODEL, "attribute 'mode' is '%s' (must be DCR or CRD)", mode);
    if (s->d[2] % b != 0 || s->d[3] % b != 0)
        return kn_error(KILN_ERR_SHAPE, "spatial dims %lldx%lld are not divisible by %lld",
                        (long long)s->d[2], (long long)s->d[3], (long long)b);
    kn_shape out = {.rank = 4, .d = {s->d[0], s->d[1] * b * b, s->d[2] / b, s->d[3] / b}};
    c->out[0].dtype = c->in[0].dtype;
    c->out[0].shape = out;
    return KILN_OK;
}
