/* Resize and Upsample: attribute parsing and output shapes, shared with the CPU kernel. */
#include "ops/tensor/resize.h"

#include <math.h>
#include <string.h>

typedef struct name_code {
    const char *name;
    int code;
} name_code;

static kiln_status lookup(const kn_node *n, const char *attr, const char *def,
                          const name_code *table, int *out) {
    const char *v = kn_attr_string(n, attr, def);
    for (; table->name != NULL; table++)
        if (strcmp(v, table->name) == 0) {
            *out = table->code;
            return KILN_OK;
        }
    return kn_error(KILN_ERR_UNSUPPORTED, "attribute '%s' value '%s' is not supported", attr, v);
}

static const name_code modes[] = {{"nearest", KN_RESIZE_NEAREST},
                                  {"linear", KN_RESIZE_LINEAR},
                                  {"bilinear", KN_RESIZE_LINEAR},
                                  {"cubic", KN_RESIZE_CUBIC},
                                  {NULL, 0}};
static const name_code coords[] = {{"half_pixel", KN_COORD_HALF_PIXEL},
                                   {"half_pixel_symmetric", KN_COORD_HALF_PIXEL_SYMMETRIC},
                                   {"pytorch_half_pixel", KN_COORD_PYTORCH_HALF_PIXEL},
                                   {"align_corners", KN_COORD_ALIGN_CORNERS},
                                   {"asymmetric", KN_COORD_ASYMMETRIC},
                                   {"tf_half_pixel_for_nn", KN_COORD_TF_HALF_PIXEL_FOR_NN},
                                   {"tf_crop_and_resize", KN_COORD_TF_CROP_AND_RESIZE},
                                   {NULL, 0}};
static const name_code nearests[] = {{"round_prefer_floor", KN_NEAREST_ROUND_PREFER_FLOOR},
                                     {"round_prefer_ceil", KN_NEAREST_ROUND_PREFER_CEIL},
                                     {"floor", KN_NEAREST_FLOOR},
                                     {"ceil", KN_NEAREST_CEIL},
                                     {NULL, 0}};

static kiln_status parse_attrs(const kn_node *n, bool upsample, kn_resize_params *p) {
    KN_TRY(lookup(n, "mode", "nearest", modes, &p->mode));
    bool legacy = upsample || n->opset < 11;
    if (legacy) {
        if (p->mode == KN_RESIZE_CUBIC)
            return kn_error(KILN_ERR_MODEL, "mode 'cubic' needs Resize from opset 11");
        p->coord = KN_COORD_ASYMMETRIC;
        p->nearest = KN_NEAREST_SIMPLE;
        return KILN_OK;
    }
    KN_TRY(lookup(n, "coordinate_transformation_mode", "half_pixel", coords, &p->coord));
    KN_TRY(lookup(n, "nearest_mode", "round_prefer_floor", nearests, &p->nearest));
    if (p->coord == KN_COORD_TF_HALF_PIXEL_FOR_NN && n->opset >= 13)
        return kn_error(KILN_ERR_MODEL, "coordinate_transformation_mode 'tf_half_pixel_for_nn' "
                                        "was removed in opset 13");
    if (p->coord == KN_COORD_HALF_PIXEL_SYMMETRIC && n->opset < 19)
        return kn_error(KILN_ERR_MODEL, "coordinate_transformation_mode 'half_pixel_symmetric' "
                                        "needs opset 19");
    p->cubic_a = kn_attr_float(n, "cubic_coeff_a", -0.75f);
    p->exclude_outside = kn_attr_int(n, "exclude_outside", 0) != 0;
    p->extrapolation = kn_attr_float(n, "extrapolation_value", 0.0f);
    p->antialias = n->opset >= 18 && kn_attr_int(n, "antialias", 0) != 0;
    if (p->antialias && p->mode == KN_RESIZE_NEAREST)
        p->antialias = 0; /* the spec ignores antialias for nearest */
    return KILN_OK;
}

/* Resolves `axes` (opset 18) into a list of distinct axes in [0, rank). */
static kiln_status parse_axes(const kn_node *n, int32_t rank, int64_t *axes, int *n_axes) {
    const int64_t *a = NULL;
    int64_t na = n->opset >= 18 ? kn_attr_ints(n, "axes", &a) : 0;
    if (na == 0) {
        for (int i = 0; i < rank; i++)
            axes[i] = i;
        *n_axes = rank;
        return KILN_OK;
    }
    if (na > rank)
        return kn_error(KILN_ERR_MODEL, "attribute 'axes' has %lld entries for rank %d",
                        (long long)na, rank);
    for (int64_t i = 0; i < na; i++) {
        KN_TRY(kn_norm_axis(a[i], rank, &axes[i]));
        for (int64_t j = 0; j < i; j++)
            if (axes[j] == axes[i])
                return kn_error(KILN_ERR_MODEL, "attribute 'axes' repeats axis %lld",
                                (long long)axes[i]);
    }
    *n_axes = (int)na;
    return KILN_OK;
}

static kiln_status sizes_to_out(const kn_node *n, const kn_tensor *sz, const int64_t *axes,
                                int n_axes, kn_resize_params *p) {
    if (sz->dtype != KILN_DTYPE_INT64)
        return kn_error(KILN_ERR_DTYPE, "input sizes must be int64, got %s",
                        kn_dtype_name(sz->dtype));
    if (sz->shape.rank != 1 || sz->shape.d[0] != n_axes)
        return kn_error(KILN_ERR_SHAPE, "input sizes must have %d elements", n_axes);
    const char *policy =
        n->opset >= 18 ? kn_attr_string(n, "keep_aspect_ratio_policy", "stretch") : "stretch";
    double ratio[KN_MAX_RANK];
    for (int i = 0; i < n_axes; i++) {
        int64_t s = ((const int64_t *)sz->data)[i];
        int64_t a = axes[i];
        if (s < 0)
            return kn_error(KILN_ERR_SHAPE, "sizes[%d] is negative (%lld)", i, (long long)s);
        if (p->in[a] == 0 && s != 0)
            return kn_error(KILN_ERR_SHAPE, "sizes[%d] is %lld for an empty input axis", i,
                            (long long)s);
        ratio[i] = p->in[a] ? (double)s / (double)p->in[a] : 1.0;
        p->out[a] = s;
        p->scale[a] = ratio[i];
    }
    if (strcmp(policy, "stretch") == 0)
        return KILN_OK;
    bool larger = strcmp(policy, "not_larger") == 0;
    if (!larger && strcmp(policy, "not_smaller") != 0)
        return kn_error(KILN_ERR_MODEL, "attribute 'keep_aspect_ratio_policy' is '%s'", policy);
    double s = ratio[0];
    for (int i = 1; i < n_axes; i++)
        s = larger ? fmin(s, ratio[i]) : fmax(s, ratio[i]);
    for (int i = 0; i < n_axes; i++) {
        int64_t a = axes[i];
        p->scale[a] = s;
        p->out[a] = (int64_t)(s * (double)p->in[a] + 0.5);
    }
    return KILN_OK;
}

static kiln_status scales_to_out(const kn_tensor *sc, const int64_t *axes, int n_axes,
                                 kn_resize_params *p) {
    if (!kn_dtype_is_float(sc->dtype))
        return kn_error(KILN_ERR_DTYPE, "input scales must be a float tensor, got %s",
                        kn_dtype_name(sc->dtype));
    if (sc->shape.rank != 1 || sc->shape.d[0] != n_axes)
        return kn_error(KILN_ERR_SHAPE, "input scales must have %d elements, got %lld", n_axes,
                        sc->shape.rank == 1 ? (long long)sc->shape.d[0] : -1LL);
    for (int i = 0; i < n_axes; i++) {
        double s = kn_tensor_get_f64(sc, i);
        int64_t a = axes[i];
        if (!(s > 0.0) || !isfinite(s))
            return kn_error(KILN_ERR_SHAPE, "scales[%d] is %g; must be positive", i, s);
        double o = floor((double)p->in[a] * s);
        if (o > (double)KN_MAX_ELEMENTS)
            return kn_error(KILN_ERR_SHAPE, "scales[%d] = %g makes axis %lld too large", i, s,
                            (long long)a);
        p->scale[a] = s;
        p->out[a] = (int64_t)o;
    }
    return KILN_OK;
}

static kiln_status read_roi(const kn_tensor *roi, const int64_t *axes, int n_axes,
                            kn_resize_params *p) {
    if (roi == NULL || roi->data == NULL || kn_tensor_numel(roi) == 0)
        return KILN_OK;
    if (!kn_dtype_is_float(roi->dtype))
        return kn_error(KILN_ERR_DTYPE, "input roi must be a float tensor");
    if (roi->shape.rank != 1 || roi->shape.d[0] != 2 * n_axes)
        return kn_error(KILN_ERR_SHAPE, "input roi must have %d elements", 2 * n_axes);
    for (int i = 0; i < n_axes; i++) {
        p->roi_start[axes[i]] = kn_tensor_get_f64(roi, i);
        p->roi_end[axes[i]] = kn_tensor_get_f64(roi, n_axes + i);
    }
    return KILN_OK;
}

kiln_status kn_resize_params_get(const kn_node *n, int n_in, const kn_tensor *in,
                                 kn_resize_params *p) {
    memset(p, 0, sizeof *p);
    bool upsample = strcmp(n->op_type, "Upsample") == 0;
    KN_TRY(parse_attrs(n, upsample, p));
    if (n_in < 1 || in[0].dtype == 0)
        return kn_error(KILN_ERR_MODEL, "input X is required");
    p->rank = in[0].shape.rank;
    for (int i = 0; i < p->rank; i++) {
        p->in[i] = p->out[i] = in[0].shape.d[i];
        p->scale[i] = 1.0;
        p->roi_start[i] = 0.0;
        p->roi_end[i] = 1.0;
    }
    int64_t axes[KN_MAX_RANK];
    int n_axes;
    KN_TRY(parse_axes(n, p->rank, axes, &n_axes));
    const kn_tensor *roi = NULL, *scales = NULL, *sizes = NULL;
    if (upsample && n->opset < 7) {
        /* Upsample-1 scales the two trailing dims of an NCHW tensor by two attributes. */
        if (p->rank != 4)
            return kn_error(KILN_ERR_SHAPE, "input X must have rank 4 before opset 7, got %d",
                            p->rank);
        float s[4] = {1.0f, 1.0f, kn_attr_float(n, "height_scale", 0.0f),
                      kn_attr_float(n, "width_scale", 0.0f)};
        if (!(s[2] >= 1.0f && s[3] >= 1.0f))
            return kn_error(KILN_ERR_MODEL, "height_scale and width_scale must be >= 1");
        kn_tensor t = {.dtype = KILN_DTYPE_FLOAT32, .shape = {1, {4}}, .data = s};
        return scales_to_out(&t, axes, n_axes, p);
    }
    if (upsample && n->opset < 9) {
        const float *s = NULL;
        if (kn_attr_floats(n, "scales", &s) != p->rank)
            return kn_error(KILN_ERR_MODEL, "attribute 'scales' must have %d values", p->rank);
        kn_tensor t = {.dtype = KILN_DTYPE_FLOAT32, .shape = {1, {p->rank}}, .data = (void *)s};
        return scales_to_out(&t, axes, n_axes, p);
    }
    if (upsample || n->opset < 11) {
        if (n_in < 2 || in[1].dtype == 0)
            return kn_error(KILN_ERR_MODEL, "input scales is required");
        scales = &in[1];
    } else {
        roi = n_in > 1 && in[1].dtype ? &in[1] : NULL;
        scales = n_in > 2 && in[2].dtype ? &in[2] : NULL;
        sizes = n_in > 3 && in[3].dtype ? &in[3] : NULL;
        /* Opsets 11 and 12 require the scales input and mark it unused with an empty tensor. */
        if (scales != NULL && kn_shape_numel(&scales->shape) == 0)
            scales = NULL;
        if (sizes != NULL && kn_shape_numel(&sizes->shape) == 0 && scales != NULL)
            sizes = NULL;
        if ((scales == NULL) == (sizes == NULL))
            return kn_error(KILN_ERR_MODEL, "exactly one of scales and sizes must be given");
    }
    const kn_tensor *src = sizes != NULL ? sizes : scales;
    if (src->data == NULL)
        return KN_NEED_DATA;
    if (sizes != NULL)
        KN_TRY(sizes_to_out(n, sizes, axes, n_axes, p));
    else
        KN_TRY(scales_to_out(scales, axes, n_axes, p));
    if (p->coord == KN_COORD_TF_CROP_AND_RESIZE)
        KN_TRY(read_roi(roi, axes, n_axes, p));
    return KILN_OK;
}

kiln_status kn_infer_resize(kn_infer_ctx *c) {
    kn_resize_params p;
    kiln_status rc = kn_resize_params_get(c->node, c->n_in, c->in, &p);
    if (rc != KILN_OK)
        return rc;
    if (c->n_out != 1)
        return kn_error(KILN_ERR_MODEL, "%s has one output", c->node->op_type);
    if (p.rank == 0)
        return kn_error(KILN_ERR_SHAPE, "input X must have rank >= 1");
    int32_t dt = c->in[0].dtype;
    if (p.mode != KN_RESIZE_NEAREST && !kn_dtype_is_float(dt) && dt != KILN_DTYPE_UINT8 &&
        dt != KILN_DTYPE_INT8 && dt != KILN_DTYPE_INT32)
        return kn_error(KILN_ERR_DTYPE,
                        "input X has dtype %s; linear and cubic modes need a "
                        "float, int8, uint8 or int32 tensor",
                        kn_dtype_name(dt));
    if (kn_dtype_size(dt) == 0)
        return kn_error(KILN_ERR_DTYPE, "input X has unsupported dtype %s", kn_dtype_name(dt));
    c->out[0].dtype = dt;
    c->out[0].shape.rank = p.rank;
    memcpy(c->out[0].shape.d, p.out, sizeof(int64_t) * (size_t)p.rank);
    if (!kn_shape_valid(&c->out[0].shape))
        return kn_error(KILN_ERR_SHAPE, "output shape is too large");
    return KILN_OK;
}
