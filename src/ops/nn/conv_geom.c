#include "ops/nn/conv_geom.h"

#include "ops/op.h"

#include <string.h>

static kiln_status read_ints(const kn_node *node, const char *name, int count, int64_t def,
                             int64_t *out) {
    const int64_t *v;
    int64_t n = kn_attr_ints(node, name, &v);
    if (n == 0) {
        for (int i = 0; i < count; i++)
            out[i] = def;
        return KILN_OK;
    }
    if (n != count)
        return kn_error(KILN_ERR_MODEL, "attribute '%s' has %lld values, expected %d", name,
                        (long long)n, count);
    memcpy(out, v, (size_t)count * sizeof *out);
    return KILN_OK;
}

static kiln_status check_shapes(const kn_node *node, const kn_shape *x, const kn_shape *w,
                                bool transpose, kn_conv_geom *g) {
    char b1[96], b2[96];
    if (x->rank < 3 || x->rank > KN_MAX_RANK)
        return kn_error(KILN_ERR_SHAPE, "input 0 (X) must have rank 3 to %d, has shape %s",
                        KN_MAX_RANK, kn_shape_str(x, b1, sizeof b1));
    if (w->rank != x->rank)
        return kn_error(KILN_ERR_SHAPE, "input 1 (W) of shape %s must have the rank of X (%s)",
                        kn_shape_str(w, b1, sizeof b1), kn_shape_str(x, b2, sizeof b2));
    g->nsp = x->rank - 2;
    g->n = x->d[0];
    g->c_in = x->d[1];
    g->group = kn_attr_int(node, "group", 1);
    if (g->group < 1)
        return kn_error(KILN_ERR_MODEL, "attribute 'group' must be >= 1, is %lld",
                        (long long)g->group);
    if (g->c_in % g->group != 0)
        return kn_error(KILN_ERR_SHAPE, "X has %lld channels, not a multiple of group %lld",
                        (long long)g->c_in, (long long)g->group);
    if (!transpose) {
        if (w->d[1] * g->group != g->c_in)
            return kn_error(
                KILN_ERR_SHAPE, "W of shape %s needs dim 1 * group (%lld) == X channels (%lld)",
                kn_shape_str(w, b1, sizeof b1), (long long)g->group, (long long)g->c_in);
        if (w->d[0] % g->group != 0)
            return kn_error(KILN_ERR_SHAPE, "W dim 0 (%lld) is not a multiple of group %lld",
                            (long long)w->d[0], (long long)g->group);
        g->c_out = w->d[0];
    } else {
        if (w->d[0] != g->c_in)
            return kn_error(KILN_ERR_SHAPE, "W of shape %s needs dim 0 == X channels (%lld)",
                            kn_shape_str(w, b1, sizeof b1), (long long)g->c_in);
        g->c_out = w->d[1] * g->group;
    }
    for (int i = 0; i < g->nsp; i++) {
        g->in[i] = x->d[i + 2];
        g->k[i] = w->d[i + 2];
    }
    int64_t ks[KN_CONV_MAX_SP];
    KN_TRY(read_ints(node, "kernel_shape", g->nsp, -1, ks));
    for (int i = 0; i < g->nsp; i++)
        if (ks[i] != -1 && ks[i] != g->k[i])
            return kn_error(KILN_ERR_SHAPE,
                            "kernel_shape[%d] = %lld disagrees with W dim %d (%lld)", i,
                            (long long)ks[i], i + 2, (long long)g->k[i]);
    return KILN_OK;
}

static kiln_status conv_pads(const kn_node *node, const char *ap, kn_conv_geom *g) {
    for (int i = 0; i < g->nsp; i++) {
        int64_t ek = (g->k[i] - 1) * g->dil[i] + 1;
        if (strcmp(ap, "NOTSET") == 0 || strcmp(ap, "VALID") == 0) {
            int64_t span = g->in[i] + g->pad_b[i] + g->pad_e[i] - ek;
            if (span < 0)
                return kn_error(KILN_ERR_SHAPE,
                                "spatial dim %d: input %lld plus padding is smaller than the "
                                "dilated kernel %lld",
                                i, (long long)g->in[i], (long long)ek);
            g->out[i] = span / g->stride[i] + 1;
        } else {
            g->out[i] = (g->in[i] + g->stride[i] - 1) / g->stride[i];
            int64_t total = (g->out[i] - 1) * g->stride[i] + ek - g->in[i];
            if (total < 0)
                total = 0;
            bool upper = strcmp(ap, "SAME_UPPER") == 0;
            g->pad_b[i] = upper ? total / 2 : total - total / 2;
            g->pad_e[i] = total - g->pad_b[i];
        }
    }
    (void)node;
    return KILN_OK;
}

static kiln_status transpose_pads(const kn_node *node, const char *ap, kn_conv_geom *g) {
    int64_t opad[KN_CONV_MAX_SP], oshape[KN_CONV_MAX_SP];
    KN_TRY(read_ints(node, "output_padding", g->nsp, 0, opad));
    const int64_t *os;
    int64_t n_os = kn_attr_ints(node, "output_shape", &os);
    if (n_os != 0 && n_os != g->nsp && n_os != g->nsp + 2)
        return kn_error(KILN_ERR_MODEL, "attribute 'output_shape' has %lld values, expected %d",
                        (long long)n_os, g->nsp);
    for (int i = 0; i < g->nsp; i++)
        oshape[i] = n_os == 0 ? -1 : os[n_os - g->nsp + i];
    bool same = strcmp(ap, "SAME_UPPER") == 0 || strcmp(ap, "SAME_LOWER") == 0;
    for (int i = 0; i < g->nsp; i++) {
        if (opad[i] < 0 || opad[i] > KN_MAX_ELEMENTS)
            return kn_error(KILN_ERR_MODEL, "output_padding[%d] is negative or exceeds 2^40", i);
        if (opad[i] > 0 && opad[i] >= g->stride[i] && opad[i] >= g->dil[i])
            return kn_error(KILN_ERR_MODEL,
                            "output_padding[%d] = %lld must be smaller than the stride (%lld) or "
                            "the dilation (%lld) of that axis",
                            i, (long long)opad[i], (long long)g->stride[i], (long long)g->dil[i]);
        if (g->in[i] > 1 && g->stride[i] > KN_MAX_ELEMENTS / (g->in[i] - 1))
            return kn_error(KILN_ERR_SHAPE, "spatial dim %d: output size exceeds 2^40", i);
        int64_t full = g->stride[i] * (g->in[i] - 1) + opad[i] + (g->k[i] - 1) * g->dil[i] + 1;
        if (same) {
            int64_t want = oshape[i] >= 0 ? oshape[i] : g->in[i] * g->stride[i];
            int64_t total = full - want;
            bool upper = strcmp(ap, "SAME_UPPER") == 0;
            g->pad_b[i] = upper ? total / 2 : total - total / 2;
            g->pad_e[i] = total - g->pad_b[i];
            g->out[i] = want;
        } else {
            g->out[i] = oshape[i] >= 0 ? oshape[i] : full - g->pad_b[i] - g->pad_e[i];
        }
        if (g->out[i] < 0)
            return kn_error(KILN_ERR_SHAPE, "spatial dim %d: output size %lld is negative", i,
                            (long long)g->out[i]);
    }
    return KILN_OK;
}

kiln_status kn_conv_geom_init(const kn_node *node, const kn_shape *x, const kn_shape *w,
                              bool transpose, kn_conv_geom *g) {
    memset(g, 0, sizeof *g);
    KN_TRY(check_shapes(node, x, w, transpose, g));
    KN_TRY(read_ints(node, "strides", g->nsp, 1, g->stride));
    KN_TRY(read_ints(node, "dilations", g->nsp, 1, g->dil));
    int64_t pads[2 * KN_CONV_MAX_SP];
    KN_TRY(read_ints(node, "pads", 2 * g->nsp, 0, pads));
    for (int i = 0; i < g->nsp; i++) {
        if (g->stride[i] < 1 || g->dil[i] < 1)
            return kn_error(KILN_ERR_MODEL, "strides and dilations must be >= 1 (dim %d)", i);
        if (pads[i] < 0 || pads[i + g->nsp] < 0)
            return kn_error(KILN_ERR_UNSUPPORTED, "negative pads are not supported (dim %d)", i);
        if (g->k[i] < 1)
            return kn_error(KILN_ERR_SHAPE, "kernel dim %d is %lld; must be >= 1", i,
                            (long long)g->k[i]);
        /* Bounds that keep every size computed below far from overflowing. */
        if (g->stride[i] > KN_MAX_ELEMENTS || pads[i] > KN_MAX_ELEMENTS ||
            pads[i + g->nsp] > KN_MAX_ELEMENTS || g->dil[i] > KN_MAX_ELEMENTS / g->k[i])
            return kn_error(KILN_ERR_MODEL,
                            "strides, pads or the dilated kernel exceed 2^40 (dim %d)", i);
        g->pad_b[i] = pads[i];
        g->pad_e[i] = pads[i + g->nsp];
    }
    const char *ap = kn_attr_string(node, "auto_pad", "NOTSET");
    if (strcmp(ap, "VALID") == 0)
        for (int i = 0; i < g->nsp; i++)
            g->pad_b[i] = g->pad_e[i] = 0;
    else if (strcmp(ap, "NOTSET") != 0 && strcmp(ap, "SAME_UPPER") != 0 &&
             strcmp(ap, "SAME_LOWER") != 0)
        return kn_error(KILN_ERR_MODEL, "attribute 'auto_pad' has unknown value '%s'", ap);
    return transpose ? transpose_pads(node, ap, g) : conv_pads(node, ap, g);
}

void kn_conv_geom_out_shape(const kn_conv_geom *g, kn_shape *out) {
    out->rank = g->nsp + 2;
    out->d[0] = g->n;
    out->d[1] = g->c_out;
    for (int i = 0; i < g->nsp; i++)
        out->d[i + 2] = g->out[i];
}

/* The activation named by attribute name_attr (kiln_activation's vocabulary) with its
 * parameters alpha_attr and beta_attr. */
static kiln_status activation_attrs(const kn_node *node, const char *name_attr,
                                    const char *alpha_attr, const char *beta_attr, int *act,
                                    float *alpha, float *beta) {
    /* In kn_act order (backend/cpu/math/gemm.h). */
    static const char *const names[] = {"",      "Relu",      "Clip",        "Sigmoid",
                                        "Swish", "LeakyRelu", "HardSigmoid", "HardSwish",
                                        "Gelu",  "GeluTanh",  "Mish",        "Tanh"};
    const char *a = kn_attr_string(node, name_attr, "");
    *act = -1;
    for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++)
        if (strcmp(a, names[i]) == 0)
            *act = i;
    if (*act < 0)
        return kn_error(KILN_ERR_MODEL, "attribute '%s' has unknown value '%s'", name_attr, a);
    *alpha = kn_attr_float(node, alpha_attr, *act == 5 ? 0.01f : 0.0f);
    *beta = kn_attr_float(node, beta_attr, 0.0f);
    return KILN_OK;
}

kiln_status kn_fused_attrs(const kn_node *node, int *act, float *alpha, float *beta,
                           bool *residual) {
    if (strcmp(node->domain, KN_DOMAIN) != 0) { /* an ONNX op: nothing fused */
        *act = 0;
        *alpha = *beta = 0.0f;
        *residual = false;
        return KILN_OK;
    }
    KN_TRY(activation_attrs(node, "kiln_activation", "kiln_alpha", "kiln_beta", act, alpha, beta));
    *residual = kn_attr_int(node, "kiln_residual", 0) != 0;
    return KILN_OK;
}

kiln_status kn_fused_input_attrs(const kn_node *node, int *act, float *alpha, float *beta) {
    return activation_attrs(node, "kiln_input_activation", "kiln_input_alpha", "kiln_input_beta",
                            act, alpha, beta);
}
