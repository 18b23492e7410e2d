/* Pooling ops: MaxPool, AveragePool, LpPool, their global forms, MaxRoiPool and MaxUnpool:
 * attribute parsing, output geometry and shape inference. */
#include "ops/nn/pool.h"

#include <string.h>

static kiln_status read_ints(const kn_node *node, const char *name, int64_t want, int64_t def,
                             int64_t *out) {
    const int64_t *v;
    int64_t n = kn_attr_ints(node, name, &v);
    if (n != 0 && n != want)
        return kn_error(KILN_ERR_MODEL, "attribute %s has %lld values, expected %lld", name,
                        (long long)n, (long long)want);
    for (int64_t i = 0; i < want; i++)
        out[i] = n ? v[i] : def;
    return KILN_OK;
}

static kiln_status read_pads(const kn_node *node, kn_pool_geom *g, bool ceil_mode) {
    const char *auto_pad = kn_attr_string(node, "auto_pad", "NOTSET");
    bool same_upper = strcmp(auto_pad, "SAME_UPPER") == 0;
    bool same_lower = strcmp(auto_pad, "SAME_LOWER") == 0;
    bool valid = strcmp(auto_pad, "VALID") == 0;
    if (!same_upper && !same_lower && !valid && strcmp(auto_pad, "NOTSET") != 0)
        return kn_error(KILN_ERR_MODEL, "attribute auto_pad has unknown value '%s'", auto_pad);
    int64_t pads[2 * KN_POOL_MAX_SPATIAL];
    KN_TRY(read_ints(node, "pads", 2 * g->nsp, 0, pads));
    for (int i = 0; i < g->nsp; i++) {
        int64_t eff = (g->k[i] - 1) * g->d[i] + 1;
        if (same_upper || same_lower) {
            g->out[i] = (g->in[i] + g->s[i] - 1) / g->s[i];
            int64_t total = (g->out[i] - 1) * g->s[i] + eff - g->in[i];
            total = total > 0 ? total : 0;
            g->pb[i] = same_upper ? total / 2 : total - total / 2;
            g->pe[i] = total - g->pb[i];
            continue;
        }
        g->pb[i] = valid ? 0 : pads[i];
        g->pe[i] = valid ? 0 : pads[g->nsp + i];
        if (g->pb[i] < 0 || g->pe[i] < 0 || g->pb[i] > KN_MAX_ELEMENTS ||
            g->pe[i] > KN_MAX_ELEMENTS)
            return kn_error(KILN_ERR_MODEL, "attribute pads must be in [0, 2^40]");
        int64_t span = g->in[i] + g->pb[i] + g->pe[i] - eff;
        if (span < 0)
            return kn_error(KILN_ERR_SHAPE,
                            "spatial dim %d: padded input %lld is smaller than the window %lld", i,
                            (long long)(g->in[i] + g->pb[i] + g->pe[i]), (long long)eff);
        if (ceil_mode && !valid) {
            g->out[i] = (span + g->s[i] - 1) / g->s[i] + 1;
            /* A window starting inside the end padding would see no input. */
            if ((g->out[i] - 1) * g->s[i] >= g->in[i] + g->pb[i])
                g->out[i]--;
        } else {
            g->out[i] = span / g->s[i] + 1;
        }
    }
    return KILN_OK;
}

kiln_status kn_pool_geom_read(const kn_node *node, const kn_shape *x, kn_pool_geom *g) {
    memset(g, 0, sizeof *g);
    if (x->rank < 3 || x->rank - 2 > KN_POOL_MAX_SPATIAL)
        return kn_error(KILN_ERR_UNSUPPORTED, "input 0 must have 1 to 3 spatial dims, got rank %d",
                        x->rank);
    g->nsp = x->rank - 2;
    const int64_t *ks;
    if (kn_attr_ints(node, "kernel_shape", &ks) != g->nsp)
        return kn_error(KILN_ERR_MODEL, "attribute kernel_shape must have %d values", g->nsp);
    for (int i = 0; i < g->nsp; i++) {
        g->in[i] = x->d[2 + i];
        g->k[i] = ks[i];
    }
    KN_TRY(read_ints(node, "strides", g->nsp, 1, g->s));
    KN_TRY(read_ints(node, "dilations", g->nsp, 1, g->d));
    for (int i = 0; i < g->nsp; i++) {
        if (g->k[i] <= 0 || g->s[i] <= 0 || g->d[i] <= 0)
            return kn_error(KILN_ERR_MODEL,
                            "kernel_shape, strides and dilations must be positive (dim %d)", i);
        /* Keeps the window and output arithmetic far from overflowing. */
        if (g->k[i] > KN_MAX_ELEMENTS || g->s[i] > KN_MAX_ELEMENTS ||
            g->d[i] > KN_MAX_ELEMENTS / g->k[i])
            return kn_error(KILN_ERR_MODEL,
                            "kernel_shape, strides or the dilated window exceed 2^40 (dim %d)", i);
    }
    KN_TRY(read_pads(node, g, kn_attr_int(node, "ceil_mode", 0) != 0));
    g->count_include_pad = kn_attr_int(node, "count_include_pad", 0) != 0;
    g->storage_order = kn_attr_int(node, "storage_order", 0);
    const kn_attr *p = kn_node_attr(node, "p");
    g->p = p == NULL ? 2.0 : p->type == KN_ATTR_FLOAT ? (double)p->f : (double)p->i;
    return KILN_OK;
}

static kiln_status need_pool_dtype(const kn_tensor *x, bool ints_ok) {
    bool ok = kn_dtype_is_float(x->dtype) ||
              (ints_ok && (x->dtype == KILN_DTYPE_INT8 || x->dtype == KILN_DTYPE_UINT8));
    if (!ok)
        return kn_error(KILN_ERR_DTYPE, "input 0 has unsupported type %s", kn_dtype_name(x->dtype));
    return KILN_OK;
}

kiln_status kn_infer_pool(kn_infer_ctx *c) {
    const kn_tensor *x = &c->in[0];
    bool is_max = strcmp(c->node->op_type, "MaxPool") == 0;
    KN_TRY(need_pool_dtype(x, is_max));
    kn_pool_geom g;
    KN_TRY(kn_pool_geom_read(c->node, &x->shape, &g));
    kn_shape s = x->shape;
    for (int i = 0; i < g.nsp; i++)
        s.d[2 + i] = g.out[i];
    c->out[0].dtype = x->dtype;
    c->out[0].shape = s;
    if (c->n_out > 1 && c->node->out[1] >= 0) {
        if (!is_max)
            return kn_error(KILN_ERR_MODEL, "only MaxPool has a second output");
        c->out[1].dtype = KILN_DTYPE_INT64;
        c->out[1].shape = s;
    }
    return KILN_OK;
}

kiln_status kn_infer_global_pool(kn_infer_ctx *c) {
    const kn_tensor *x = &c->in[0];
    KN_TRY(need_pool_dtype(x, false));
    if (x->shape.rank < 2)
        return kn_error(KILN_ERR_SHAPE, "input 0 must have rank >= 2, got %d", x->shape.rank);
    c->out[0].dtype = x->dtype;
    c->out[0].shape = x->shape;
    for (int32_t i = 2; i < x->shape.rank; i++)
        c->out[0].shape.d[i] = 1;
    return KILN_OK;
}

kiln_status kn_infer_max_roi_pool(kn_infer_ctx *c) {
    const kn_tensor *x = &c->in[0], *rois = &c->in[1];
    KN_TRY(need_pool_dtype(x, false));
    if (x->shape.rank != 4)
        return kn_error(KILN_ERR_SHAPE, "input 0 must have rank 4, got %d", x->shape.rank);
    if (!kn_has_input(c, 1) || rois->dtype != x->dtype || rois->shape.rank != 2 ||
        rois->shape.d[1] != 5)
        return kn_error(KILN_ERR_SHAPE, "input 1 (rois) must be [num_rois, 5] of input 0's type");
    const int64_t *ps;
    if (kn_attr_ints(c->node, "pooled_shape", &ps) != 2 || ps[0] <= 0 || ps[1] <= 0)
        return kn_error(KILN_ERR_MODEL, "attribute pooled_shape must be 2 positive values");
    c->out[0].dtype = x->dtype;
    c->out[0].shape.rank = 4;
    c->out[0].shape.d[0] = rois->shape.d[0];
    c->out[0].shape.d[1] = x->shape.d[1];
    c->out[0].shape.d[2] = ps[0];
    c->out[0].shape.d[3] = ps[1];
    return KILN_OK;
}

kiln_status kn_infer_max_unpool(kn_infer_ctx *c) {
    const kn_tensor *x = &c->in[0];
    KN_TRY(need_pool_dtype(x, false));
    if (!kn_has_input(c, 1) || c->in[1].dtype != KILN_DTYPE_INT64 ||
        !kn_shape_equal(&c->in[1].shape, &x->shape))
        return kn_error(KILN_ERR_SHAPE, "input 1 (I) must be int64 with input 0's shape");
    c->out[0].dtype = x->dtype;
    if (kn_has_input(c, 2)) {
        const kn_tensor *os = &c->in[2];
        if (os->dtype != KILN_DTYPE_INT64 || os->shape.rank != 1 || os->shape.d[0] != x->shape.rank)
            return kn_error(KILN_ERR_SHAPE, "input 2 (output_shape) must be int64 [%d]",
                            x->shape.rank);
        if (os->data == NULL)
            return KN_NEED_DATA;
        c->out[0].shape.rank = x->shape.rank;
        for (int32_t i = 0; i < x->shape.rank; i++)
            c->out[0].shape.d[i] = ((const int64_t *)os->data)[i];
        if (!kn_shape_valid(&c->out[0].shape))
            return kn_error(KILN_ERR_SHAPE, "input 2 (output_shape) holds a negative dim");
        return KILN_OK;
    }
    if (x->shape.rank < 3 || x->shape.rank - 2 > KN_POOL_MAX_SPATIAL)
        return kn_error(KILN_ERR_UNSUPPORTED, "input 0 must have 1 to 3 spatial dims");
    int nsp = x->shape.rank - 2;
    int64_t k[KN_POOL_MAX_SPATIAL], s[KN_POOL_MAX_SPATIAL], pads[2 * KN_POOL_MAX_SPATIAL];
    const int64_t *ks;
    if (kn_attr_ints(c->node, "kernel_shape", &ks) != nsp)
        return kn_error(KILN_ERR_MODEL, "attribute kernel_shape must have %d values", nsp);
    memcpy(k, ks, (size_t)nsp * sizeof *k);
    KN_TRY(read_ints(c->node, "strides", nsp, 1, s));
    KN_TRY(read_ints(c->node, "pads", 2 * nsp, 0, pads));
    c->out[0].shape = x->shape;
    for (int i = 0; i < nsp; i++) {
        int64_t d = (x->shape.d[2 + i] - 1) * s[i] - pads[i] - pads[nsp + i] + k[i];
        if (d < 0)
            return kn_error(KILN_ERR_SHAPE, "spatial dim %d of the output would be negative", i);
        c->out[0].shape.d[2 + i] = d;
    }
    return KILN_OK;
}
