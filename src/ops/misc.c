/* The misc family: Resize, Upsample, Einsum, detection and sampling ops, quantization, Det.
 * Resize, Einsum and NonMaxSuppression have files of their own (misc_*.c). */
#include "ops/misc.h"

#include <string.h>

static kiln_status need_inputs(const kn_infer_ctx *c, int lo, int hi, int n_out) {
    if (c->n_in < lo || c->n_in > hi)
        return kn_error(KILN_ERR_MODEL, "%s takes %d to %d inputs, got %d", c->node->op_type, lo,
                        hi, c->n_in);
    for (int i = 0; i < lo; i++)
        if (!kn_has_input(c, i))
            return kn_error(KILN_ERR_MODEL, "input %d is required", i);
    if (c->n_out != n_out)
        return kn_error(KILN_ERR_MODEL, "%s has %d output(s), got %d", c->node->op_type, n_out,
                        c->n_out);
    return KILN_OK;
}

static bool is_float(int32_t dt) {
    return dt == KILN_DTYPE_FLOAT32 || dt == KILN_DTYPE_FLOAT16 || dt == KILN_DTYPE_BFLOAT16 ||
           dt == KILN_DTYPE_FLOAT64;
}

static bool is_quant_int(int32_t dt) {
    return dt == KILN_DTYPE_UINT8 || dt == KILN_DTYPE_INT8 || dt == KILN_DTYPE_UINT16 ||
           dt == KILN_DTYPE_INT16;
}

/* Scale (and zero point) must be per-tensor, per-axis or blocked (opset 21) over x. */
static kiln_status check_qparams(const kn_infer_ctx *c, const char *sname, const char *zname) {
    const kn_node *n = c->node;
    const kn_tensor *x = &c->in[0], *s = &c->in[1];
    int64_t block = n->opset >= 21 ? kn_attr_int(n, "block_size", 0) : 0;
    int64_t numel = kn_shape_numel(&s->shape);
    if (block < 0)
        return kn_error(KILN_ERR_MODEL, "attribute 'block_size' must be >= 0");
    if (block == 0 && numel == 1 && s->shape.rank <= 1) {
        /* per-tensor */
    } else if (block == 0) {
        int64_t axis;
        if (n->opset < 13)
            return kn_error(KILN_ERR_SHAPE, "input %s must be a scalar before opset 13", sname);
        KN_TRY(kn_norm_axis(kn_attr_int(n, "axis", 1), x->shape.rank, &axis));
        if (s->shape.rank != 1 || s->shape.d[0] != x->shape.d[axis])
            return kn_error(KILN_ERR_SHAPE,
                            "input %s must be a scalar or have %lld elements "
                            "(x's axis %lld)",
                            sname, (long long)x->shape.d[axis], (long long)axis);
    } else {
        int64_t axis;
        KN_TRY(kn_norm_axis(kn_attr_int(n, "axis", 1), x->shape.rank, &axis));
        if (s->shape.rank != x->shape.rank)
            return kn_error(KILN_ERR_SHAPE, "blocked input %s must have x's rank", sname);
        for (int i = 0; i < x->shape.rank; i++) {
            int64_t want = i == axis ? (x->shape.d[i] + block - 1) / block : x->shape.d[i];
            if (s->shape.d[i] != want)
                return kn_error(KILN_ERR_SHAPE, "blocked input %s dim %d must be %lld", sname, i,
                                (long long)want);
        }
    }
    if (kn_has_input(c, 2) && !kn_shape_equal(&c->in[2].shape, &s->shape) &&
        !(kn_shape_numel(&c->in[2].shape) == 1 && numel == 1))
        return kn_error(KILN_ERR_SHAPE, "input %s must have the shape of %s", zname, sname);
    return KILN_OK;
}

kiln_status kn_infer_quantize(kn_infer_ctx *c) {
    KN_TRY(need_inputs(c, 2, 3, 1));
    const kn_tensor *x = &c->in[0];
    if (!is_float(x->dtype) && x->dtype != KILN_DTYPE_INT32)
        return kn_error(KILN_ERR_DTYPE, "input x has dtype %s; expected float or int32",
                        kn_dtype_name(x->dtype));
    if (!is_float(c->in[1].dtype))
        return kn_error(KILN_ERR_DTYPE, "input y_scale must be a float tensor");
    int32_t out = KILN_DTYPE_UINT8;
    int64_t attr = c->node->opset >= 21 ? kn_attr_int(c->node, "output_dtype", 0) : 0;
    if (kn_has_input(c, 2))
        out = c->in[2].dtype;
    else if (attr != 0)
        out = (int32_t)attr;
    if (attr != 0 && attr != out)
        return kn_error(KILN_ERR_MODEL, "attribute 'output_dtype' disagrees with y_zero_point");
    if (!is_quant_int(out))
        return kn_error(KILN_ERR_UNSUPPORTED, "quantizing to %s is not supported",
                        kn_dtype_name(out));
    KN_TRY(check_qparams(c, "y_scale", "y_zero_point"));
    c->out[0].dtype = out;
    c->out[0].shape = x->shape;
    return KILN_OK;
}

kiln_status kn_infer_dequantize(kn_infer_ctx *c) {
    KN_TRY(need_inputs(c, 2, 3, 1));
    const kn_tensor *x = &c->in[0];
    if (!is_quant_int(x->dtype) && x->dtype != KILN_DTYPE_INT32)
        return kn_error(KILN_ERR_UNSUPPORTED, "dequantizing %s is not supported",
                        kn_dtype_name(x->dtype));
    if (!is_float(c->in[1].dtype))
        return kn_error(KILN_ERR_DTYPE, "input x_scale must be a float tensor");
    if (kn_has_input(c, 2) && c->in[2].dtype != x->dtype)
        return kn_error(KILN_ERR_DTYPE, "input x_zero_point must have x's dtype %s",
                        kn_dtype_name(x->dtype));
    KN_TRY(check_qparams(c, "x_scale", "x_zero_point"));
    c->out[0].dtype = c->in[1].dtype;
    c->out[0].shape = x->shape;
    return KILN_OK;
}

kiln_status kn_infer_dynamic_quantize(kn_infer_ctx *c) {
    KN_TRY(need_inputs(c, 1, 1, 3));
    if (c->in[0].dtype != KILN_DTYPE_FLOAT32)
        return kn_error(KILN_ERR_DTYPE, "input x must be float32, got %s",
                        kn_dtype_name(c->in[0].dtype));
    c->out[0].dtype = KILN_DTYPE_UINT8;
    c->out[0].shape = c->in[0].shape;
    c->out[1].dtype = KILN_DTYPE_FLOAT32;
    c->out[1].shape.rank = 0;
    c->out[2].dtype = KILN_DTYPE_UINT8;
    c->out[2].shape.rank = 0;
    return KILN_OK;
}

/* numpy matmul shapes: 1-D operands are promoted and the promoted dims dropped again. */
static kiln_status matmul_shape(const kn_shape *a, const kn_shape *b, kn_shape *out) {
    if (a->rank < 1 || b->rank < 1)
        return kn_error(KILN_ERR_SHAPE, "matmul operands must have rank >= 1");
    kn_shape pa = *a, pb = *b;
    if (pa.rank == 1) {
        pa.rank = 2;
        pa.d[1] = pa.d[0];
        pa.d[0] = 1;
    }
    if (pb.rank == 1) {
        pb.rank = 2;
        pb.d[1] = 1;
    }
    if (pa.d[pa.rank - 1] != pb.d[pb.rank - 2])
        return kn_error(KILN_ERR_SHAPE, "matmul inner dims differ: %lld vs %lld",
                        (long long)pa.d[pa.rank - 1], (long long)pb.d[pb.rank - 2]);
    kn_shape ba = pa, bb = pb;
    ba.rank -= 2;
    bb.rank -= 2;
    if (!kn_shape_broadcast(&ba, &bb, out))
        return kn_error(KILN_ERR_SHAPE, "matmul batch dims do not broadcast");
    if (a->rank > 1)
        out->d[out->rank++] = pa.d[pa.rank - 2];
    if (b->rank > 1)
        out->d[out->rank++] = pb.d[pb.rank - 1];
    return KILN_OK;
}

kiln_status kn_infer_matmul_integer(kn_infer_ctx *c) {
    KN_TRY(need_inputs(c, 2, 4, 1));
    for (int i = 0; i < c->n_in; i++)
        if (kn_has_input(c, i) && c->in[i].dtype != KILN_DTYPE_UINT8 &&
            c->in[i].dtype != KILN_DTYPE_INT8)
            return kn_error(KILN_ERR_DTYPE, "input %d must be uint8 or int8", i);
    if (kn_has_input(c, 2) && c->in[2].dtype != c->in[0].dtype)
        return kn_error(KILN_ERR_DTYPE, "input a_zero_point must have A's dtype");
    if (kn_has_input(c, 3) && c->in[3].dtype != c->in[1].dtype)
        return kn_error(KILN_ERR_DTYPE, "input b_zero_point must have B's dtype");
    const kn_shape *a = &c->in[0].shape, *b = &c->in[1].shape;
    if (kn_has_input(c, 2)) {
        int64_t nz = kn_shape_numel(&c->in[2].shape);
        if (nz != 1 && (c->in[2].shape.rank != 1 || a->rank < 2 || nz != a->d[a->rank - 2]))
            return kn_error(KILN_ERR_SHAPE, "input a_zero_point must be a scalar or have one "
                                            "value per row of A");
    }
    if (kn_has_input(c, 3)) {
        int64_t nz = kn_shape_numel(&c->in[3].shape);
        if (nz != 1 && (c->in[3].shape.rank != 1 || b->rank < 2 || nz != b->d[b->rank - 1]))
            return kn_error(KILN_ERR_SHAPE, "input b_zero_point must be a scalar or have one "
                                            "value per column of B");
    }
    c->out[0].dtype = KILN_DTYPE_INT32;
    return matmul_shape(a, b, &c->out[0].shape);
}

kiln_status kn_infer_det(kn_infer_ctx *c) {
    KN_TRY(need_inputs(c, 1, 1, 1));
    const kn_tensor *x = &c->in[0];
    if (!is_float(x->dtype))
        return kn_error(KILN_ERR_DTYPE, "input X must be a float tensor, got %s",
                        kn_dtype_name(x->dtype));
    if (x->shape.rank < 2 || x->shape.d[x->shape.rank - 1] != x->shape.d[x->shape.rank - 2])
        return kn_error(KILN_ERR_SHAPE, "input X must be [..., M, M]");
    c->out[0].dtype = x->dtype;
    c->out[0].shape = x->shape;
    c->out[0].shape.rank -= 2;
    return KILN_OK;
}

kiln_status kn_infer_roi_align(kn_infer_ctx *c) {
    KN_TRY(need_inputs(c, 3, 3, 1));
    const kn_node *n = c->node;
    const kn_tensor *x = &c->in[0], *rois = &c->in[1], *bi = &c->in[2];
    if (!is_float(x->dtype) || rois->dtype != x->dtype)
        return kn_error(KILN_ERR_DTYPE, "inputs X and rois must be float tensors of one dtype");
    if (bi->dtype != KILN_DTYPE_INT64)
        return kn_error(KILN_ERR_DTYPE, "input batch_indices must be int64");
    if (x->shape.rank != 4)
        return kn_error(KILN_ERR_SHAPE, "input X must have rank 4, got %d", x->shape.rank);
    if (rois->shape.rank != 2 || rois->shape.d[1] != 4)
        return kn_error(KILN_ERR_SHAPE, "input rois must have shape [num_rois, 4]");
    if (bi->shape.rank != 1 || bi->shape.d[0] != rois->shape.d[0])
        return kn_error(KILN_ERR_SHAPE, "input batch_indices must have shape [%lld]",
                        (long long)rois->shape.d[0]);
    const char *mode = kn_attr_string(n, "mode", "avg");
    if (strcmp(mode, "avg") != 0 && strcmp(mode, "max") != 0)
        return kn_error(KILN_ERR_MODEL, "attribute 'mode' is '%s'; expected avg or max", mode);
    if (n->opset >= 16) {
        const char *ct = kn_attr_string(n, "coordinate_transformation_mode", "half_pixel");
        if (strcmp(ct, "half_pixel") != 0 && strcmp(ct, "output_half_pixel") != 0)
            return kn_error(KILN_ERR_MODEL, "attribute 'coordinate_transformation_mode' is '%s'",
                            ct);
    }
    int64_t oh = kn_attr_int(n, "output_height", 1), ow = kn_attr_int(n, "output_width", 1);
    if (oh < 1 || ow < 1 || kn_attr_int(n, "sampling_ratio", 0) < 0)
        return kn_error(KILN_ERR_MODEL, "output_height and output_width must be >= 1 and "
                                        "sampling_ratio >= 0");
    if (bi->data != NULL)
        for (int64_t i = 0; i < bi->shape.d[0]; i++) {
            int64_t b = ((const int64_t *)bi->data)[i];
            if (b < 0 || b >= x->shape.d[0])
                return kn_error(KILN_ERR_SHAPE, "batch_indices[%lld] = %lld is out of range",
                                (long long)i, (long long)b);
        }
    c->out[0].dtype = x->dtype;
    c->out[0].shape = (kn_shape){4, {rois->shape.d[0], x->shape.d[1], oh, ow}};
    return KILN_OK;
}

kiln_status kn_infer_grid_sample(kn_infer_ctx *c) {
    KN_TRY(need_inputs(c, 2, 2, 1));
    const kn_node *n = c->node;
    const kn_tensor *x = &c->in[0], *g = &c->in[1];
    if (!is_float(x->dtype) || !is_float(g->dtype))
        return kn_error(KILN_ERR_DTYPE, "inputs X and grid must be float tensors");
    int32_t r = x->shape.rank;
    if (r < 3 || (n->opset < 20 && r != 4))
        return kn_error(KILN_ERR_SHAPE, "input X must have rank %s, got %d",
                        n->opset < 20 ? "4" : ">= 3", r);
    if (g->shape.rank != r || g->shape.d[0] != x->shape.d[0] || g->shape.d[r - 1] != r - 2)
        return kn_error(KILN_ERR_SHAPE, "input grid must have shape [N, ..., %d] of rank %d", r - 2,
                        r);
    const char *mode = kn_attr_string(n, "mode", n->opset < 20 ? "bilinear" : "linear");
    static const char *const modes16[] = {"bilinear", "nearest", "bicubic"};
    static const char *const modes20[] = {"linear", "nearest", "cubic"};
    const char *const *m = n->opset < 20 ? modes16 : modes20;
    if (strcmp(mode, m[0]) != 0 && strcmp(mode, m[1]) != 0 && strcmp(mode, m[2]) != 0)
        return kn_error(KILN_ERR_MODEL, "attribute 'mode' is '%s'", mode);
    const char *pad = kn_attr_string(n, "padding_mode", "zeros");
    if (strcmp(pad, "zeros") != 0 && strcmp(pad, "border") != 0 && strcmp(pad, "reflection") != 0)
        return kn_error(KILN_ERR_MODEL, "attribute 'padding_mode' is '%s'", pad);
    c->out[0].dtype = x->dtype;
    c->out[0].shape = x->shape;
    for (int i = 2; i < r; i++)
        c->out[0].shape.d[i] = g->shape.d[i - 1];
    return KILN_OK;
}

kiln_status kn_infer_col2im(kn_infer_ctx *c) {
    KN_TRY(need_inputs(c, 3, 3, 1));
    const kn_node *n = c->node;
    const kn_tensor *x = &c->in[0], *img = &c->in[1], *blk = &c->in[2];
    if (!is_float(x->dtype))
        return kn_error(KILN_ERR_DTYPE, "input must be a float tensor");
    if (img->dtype != KILN_DTYPE_INT64 || blk->dtype != KILN_DTYPE_INT64 || img->shape.rank != 1 ||
        !kn_shape_equal(&img->shape, &blk->shape))
        return kn_error(KILN_ERR_SHAPE, "image_shape and block_shape must be int64 vectors of "
                                        "one length");
    int64_t nd = img->shape.d[0];
    if (nd < 1 || nd + 2 > KN_MAX_RANK || x->shape.rank != 3)
        return kn_error(KILN_ERR_SHAPE,
                        "input must be [N, C*prod(block), L] with 1 to %d "
                        "spatial dims",
                        KN_MAX_RANK - 2);
    if (img->data == NULL || blk->data == NULL)
        return KN_NEED_DATA;
    const int64_t *is = img->data, *bs = blk->data, *dil = NULL, *pads = NULL, *str = NULL;
    int64_t nd_dil = kn_attr_ints(n, "dilations", &dil);
    int64_t nd_pad = kn_attr_ints(n, "pads", &pads);
    int64_t nd_str = kn_attr_ints(n, "strides", &str);
    if ((nd_dil && nd_dil != nd) || (nd_pad && nd_pad != 2 * nd) || (nd_str && nd_str != nd))
        return kn_error(KILN_ERR_MODEL, "dilations, pads and strides must match %lld dims",
                        (long long)nd);
    int64_t blocks = 1, L = 1;
    for (int64_t i = 0; i < nd; i++) {
        int64_t d = nd_dil ? dil[i] : 1, s = nd_str ? str[i] : 1;
        int64_t p = nd_pad ? pads[i] + pads[nd + i] : 0;
        if (bs[i] < 1 || d < 1 || s < 1 || is[i] < 0)
            return kn_error(KILN_ERR_MODEL, "block, dilation and stride must be positive");
        int64_t span = d * (bs[i] - 1) + 1;
        if (is[i] + p < span)
            return kn_error(KILN_ERR_SHAPE, "block dim %lld does not fit the image", (long long)i);
        blocks *= bs[i];
        L *= (is[i] + p - span) / s + 1;
    }
    if (x->shape.d[1] % blocks != 0 || x->shape.d[2] != L)
        return kn_error(KILN_ERR_SHAPE, "input must be [N, C*%lld, %lld]", (long long)blocks,
                        (long long)L);
    c->out[0].dtype = x->dtype;
    c->out[0].shape.rank = (int32_t)(nd + 2);
    c->out[0].shape.d[0] = x->shape.d[0];
    c->out[0].shape.d[1] = x->shape.d[1] / blocks;
    for (int64_t i = 0; i < nd; i++)
        c->out[0].shape.d[2 + i] = is[i];
    return KILN_OK;
}
