/* Normalization ops: BatchNormalization, InstanceNormalization, LayerNormalization,
 * RMSNormalization, GroupNormalization, LpNormalization, MeanVarianceNormalization, LRN. */
#include "ops/op.h"

#include <string.h>

static kiln_status need_float(const kn_tensor *t, const char *what) {
    if (!kn_dtype_is_float(t->dtype))
        return kn_error(KILN_ERR_DTYPE, "%s must be a float type, got %s", what,
                        kn_dtype_name(t->dtype));
    return KILN_OK;
}

/* Input i must be a float 1-D tensor of n elements. */
static kiln_status need_vector(const kn_infer_ctx *c, int i, const char *what, int64_t n) {
    if (!kn_has_input(c, i))
        return kn_error(KILN_ERR_MODEL, "input %d (%s) is required", i, what);
    const kn_tensor *t = &c->in[i];
    char buf[32];
    KN_TRY(need_float(t, what));
    if (t->shape.rank != 1 || t->shape.d[0] != n)
        return kn_error(KILN_ERR_SHAPE, "input %d (%s) must have shape [%lld], got %s", i, what,
                        (long long)n, kn_shape_str(&t->shape, buf, sizeof buf));
    return KILN_OK;
}

static kiln_status need_nc(const kn_tensor *x, int32_t min_rank) {
    KN_TRY(need_float(x, "input 0 (X)"));
    if (x->shape.rank < min_rank)
        return kn_error(KILN_ERR_SHAPE, "input 0 (X) must have rank >= %d, got %d", min_rank,
                        x->shape.rank);
    return KILN_OK;
}

static bool output_present(const kn_infer_ctx *c, int i) {
    return i < c->n_out && c->node->out[i] >= 0;
}

kiln_status kn_infer_batchnorm(kn_infer_ctx *c) {
    const kn_tensor *x = &c->in[0];
    KN_TRY(need_nc(x, 2));
    int64_t ch = x->shape.d[1];
    static const char *const names[] = {"scale", "B", "input_mean", "input_var"};
    for (int i = 1; i <= 4; i++)
        KN_TRY(need_vector(c, i, names[i - 1], ch));
    /* Opsets 1-8 carry spatial (0: statistics per activation, not per channel), opsets 1-6
     * also consumed_inputs (an in-place hint for training) and is_test: with Y alone as output
     * every form computes the same inference-mode normalization. */
    if (c->node->opset < 9 && kn_attr_int(c->node, "spatial", 1) == 0)
        return kn_error(KILN_ERR_UNSUPPORTED, "spatial = 0 is not supported");
    bool training = c->node->opset >= 14 && kn_attr_int(c->node, "training_mode", 0) != 0;
    for (int i = 1; i < c->n_out; i++) {
        if (!output_present(c, i))
            continue;
        if (!training || i > 2)
            return kn_error(KILN_ERR_UNSUPPORTED,
                            "output %d is only produced in training mode, which kiln supports "
                            "from opset 14 (training_mode = 1) for outputs 1 and 2",
                            i);
        c->out[i].dtype = c->in[3].dtype;
        c->out[i].shape = c->in[3].shape;
    }
    c->out[0].dtype = x->dtype;
    c->out[0].shape = x->shape;
    return KILN_OK;
}

kiln_status kn_infer_instancenorm(kn_infer_ctx *c) {
    const kn_tensor *x = &c->in[0];
    KN_TRY(need_nc(x, 2));
    KN_TRY(need_vector(c, 1, "scale", x->shape.d[1]));
    KN_TRY(need_vector(c, 2, "B", x->shape.d[1]));
    c->out[0].dtype = x->dtype;
    c->out[0].shape = x->shape;
    return KILN_OK;
}

/* Scale and B must broadcast (numpy rules, one-directional) to X's normalized dims. */
static kiln_status check_broadcast_to(const kn_tensor *t, int i, const kn_shape *x, int64_t axis) {
    char buf[32];
    if (t->shape.rank > x->rank - axis)
        goto fail;
    for (int32_t j = 1; j <= t->shape.rank; j++) {
        int64_t td = t->shape.d[t->shape.rank - j], xd = x->d[x->rank - j];
        if (td != xd && td != 1)
            goto fail;
    }
    return KILN_OK;
fail:
    return kn_error(KILN_ERR_SHAPE,
                    "input %d of shape %s does not broadcast to the normalized dims of X "
                    "(axis %lld)",
                    i, kn_shape_str(&t->shape, buf, sizeof buf), (long long)axis);
}

kiln_status kn_infer_layernorm(kn_infer_ctx *c) {
    const kn_tensor *x = &c->in[0];
    KN_TRY(need_nc(x, 1));
    int64_t axis;
    KN_TRY(kn_norm_axis(kn_attr_int(c->node, "axis", -1), x->shape.rank, &axis));
    if (!kn_has_input(c, 1))
        return kn_error(KILN_ERR_MODEL, "input 1 (Scale) is required");
    for (int i = 1; i <= 2; i++) {
        if (!kn_has_input(c, i))
            continue;
        KN_TRY(need_float(&c->in[i], i == 1 ? "input 1 (Scale)" : "input 2 (B)"));
        KN_TRY(check_broadcast_to(&c->in[i], i, &x->shape, axis));
    }
    int64_t stash = kn_attr_int(c->node, "stash_type", KILN_DTYPE_FLOAT32);
    c->out[0].dtype = x->dtype;
    c->out[0].shape = x->shape;
    for (int i = 1; i <= 2; i++) {
        if (!output_present(c, i))
            continue;
        c->out[i].dtype = (int32_t)stash;
        c->out[i].shape = x->shape;
        for (int32_t j = (int32_t)axis; j < x->shape.rank; j++)
            c->out[i].shape.d[j] = 1;
    }
    return KILN_OK;
}

kiln_status kn_infer_groupnorm(kn_infer_ctx *c) {
    const kn_tensor *x = &c->in[0];
    KN_TRY(need_nc(x, 2));
    const kn_attr *g = kn_node_attr(c->node, "num_groups");
    if (g == NULL)
        return kn_error(KILN_ERR_MODEL, "attribute num_groups is required");
    int64_t ch = x->shape.d[1];
    if (g->i <= 0 || ch % g->i != 0)
        return kn_error(KILN_ERR_MODEL, "num_groups = %lld must be positive and divide C = %lld",
                        (long long)g->i, (long long)ch);
    /* Opset 18 scales per group; opset 21 per channel. */
    int64_t n = c->node->opset >= 21 ? ch : g->i;
    KN_TRY(need_vector(c, 1, "scale", n));
    KN_TRY(need_vector(c, 2, "bias", n));
    c->out[0].dtype = x->dtype;
    c->out[0].shape = x->shape;
    return KILN_OK;
}

kiln_status kn_infer_lpnorm(kn_infer_ctx *c) {
    const kn_tensor *x = &c->in[0];
    KN_TRY(need_nc(x, 1));
    int64_t axis, p = kn_attr_int(c->node, "p", 2);
    KN_TRY(kn_norm_axis(kn_attr_int(c->node, "axis", -1), x->shape.rank, &axis));
    if (p != 1 && p != 2)
        return kn_error(KILN_ERR_MODEL, "attribute p must be 1 or 2, got %lld", (long long)p);
    c->out[0].dtype = x->dtype;
    c->out[0].shape = x->shape;
    return KILN_OK;
}

kiln_status kn_infer_mvn(kn_infer_ctx *c) {
    const kn_tensor *x = &c->in[0];
    KN_TRY(need_nc(x, 1));
    const int64_t *axes;
    int64_t n = kn_attr_ints(c->node, "axes", &axes);
    bool seen[KN_MAX_RANK] = {0};
    for (int64_t i = 0; i < n; i++) {
        int64_t a;
        KN_TRY(kn_norm_axis(axes[i], x->shape.rank, &a));
        if (seen[a])
            return kn_error(KILN_ERR_MODEL, "axes: axis %lld appears more than once",
                            (long long)axes[i]);
        seen[a] = true;
    }
    if (n == 0 && x->shape.rank < 4)
        return kn_error(KILN_ERR_SHAPE, "input 0 must have rank 4 for the default axes [0, 2, 3]");
    c->out[0].dtype = x->dtype;
    c->out[0].shape = x->shape;
    return KILN_OK;
}

kiln_status kn_infer_lrn(kn_infer_ctx *c) {
    const kn_tensor *x = &c->in[0];
    KN_TRY(need_nc(x, 2));
    const kn_attr *size = kn_node_attr(c->node, "size");
    if (size == NULL || size->i <= 0)
        return kn_error(KILN_ERR_MODEL, "attribute size is required and must be positive");
    c->out[0].dtype = x->dtype;
    c->out[0].shape = x->shape;
    return KILN_OK;
}
