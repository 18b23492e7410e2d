/* Conv, ConvTranspose, Gemm, MatMul and kiln's fused forms of them (kiln.FusedConv,
 * kiln.FusedGemm, kiln.FusedMatMul: the product plus kiln_* attributes and a residual or bias
 * input, passes.h): shape inference. Any float dtype is accepted here, the same for every
 * float input; which dtypes a backend computes in is the backend's answer (its supports). */
#include "ops/nn/conv_geom.h"
#include "ops/op.h"

#include <string.h>

static bool is_fused(const kn_node *n) {
    return strcmp(n->domain, KN_DOMAIN) == 0;
}

/* Input i is a float tensor of input 0's dtype. */
static kiln_status check_float(const kn_infer_ctx *c, int i, const char *what) {
    int32_t t = c->in[i].dtype;
    if (t != KILN_DTYPE_FLOAT32 && t != KILN_DTYPE_FLOAT16 && t != KILN_DTYPE_BFLOAT16 &&
        t != KILN_DTYPE_FLOAT64)
        return kn_error(KILN_ERR_DTYPE, "input %d (%s) has dtype %s; a float type is needed", i,
                        what, kn_dtype_name(t));
    if (t != c->in[0].dtype)
        return kn_error(KILN_ERR_DTYPE, "input %d (%s) has dtype %s, input 0 has %s", i, what,
                        kn_dtype_name(t), kn_dtype_name(c->in[0].dtype));
    return KILN_OK;
}

/* Input 1 (the weights) is of input 0's dtype, or of the 16-bit type kiln_weights names (the
 * precision pass stores a CPU product's weights so, its activations staying float32). */
static kiln_status check_weights(const kn_infer_ctx *c, const char *what) {
    const kn_attr *w = kn_node_attr(c->node, "kiln_weights");
    if (w != NULL && w->type == KN_ATTR_STRING && c->in[0].dtype == KILN_DTYPE_FLOAT32) {
        int32_t want = strcmp(w->s, "bf16") == 0   ? KILN_DTYPE_BFLOAT16
                       : strcmp(w->s, "fp16") == 0 ? KILN_DTYPE_FLOAT16
                                                   : 0;
        if (want == 0)
            return kn_error(KILN_ERR_MODEL, "kiln_weights '%s': expected bf16 or fp16", w->s);
        if (c->in[1].dtype != want)
            return kn_error(KILN_ERR_DTYPE, "input 1 (%s) has dtype %s; kiln_weights says %s", what,
                            kn_dtype_name(c->in[1].dtype), kn_dtype_name(want));
        return KILN_OK;
    }
    return check_float(c, 1, what);
}

/* Validates the fused attributes and, when kiln_residual is set, that input `at` exists and
 * has the output's dtype and shape. Returns in *n_main the inputs before the residual. */
static kiln_status check_fused(const kn_infer_ctx *c, int at, int *n_main) {
    int act;
    float a, b;
    bool residual;
    KN_TRY(kn_fused_attrs(c->node, &act, &a, &b, &residual));
    *n_main = c->n_in;
    if (!residual)
        return KILN_OK;
    if (c->n_in != at + 1 || !kn_has_input(c, at))
        return kn_error(KILN_ERR_MODEL, "kiln_residual is set but input %d is missing", at);
    *n_main = at;
    char b1[96], b2[96];
    if (c->in[at].dtype != c->out[0].dtype || !kn_shape_equal(&c->in[at].shape, &c->out[0].shape))
        return kn_error(
            KILN_ERR_SHAPE, "residual input %d (%s %s) must match the output (%s %s)", at,
            kn_dtype_name(c->in[at].dtype), kn_shape_str(&c->in[at].shape, b1, sizeof b1),
            kn_dtype_name(c->out[0].dtype), kn_shape_str(&c->out[0].shape, b2, sizeof b2));
    return KILN_OK;
}

static kiln_status check_arity(const kn_infer_ctx *c, int min_in, int max_in) {
    if (c->n_in < min_in || c->n_in > max_in)
        return kn_error(KILN_ERR_MODEL, "expects %d to %d inputs, has %d", min_in, max_in, c->n_in);
    for (int i = 0; i < min_in; i++)
        if (!kn_has_input(c, i))
            return kn_error(KILN_ERR_MODEL, "input %d is required", i);
    if (c->n_out != 1)
        return kn_error(KILN_ERR_MODEL, "expects 1 output, has %d", c->n_out);
    return KILN_OK;
}

static kiln_status infer_conv_common(kn_infer_ctx *c, bool transpose) {
    KN_TRY(check_arity(c, 2, 4));
    KN_TRY(check_float(c, 0, "X"));
    KN_TRY(check_weights(c, "W"));
    kn_conv_geom g;
    KN_TRY(kn_conv_geom_init(c->node, &c->in[0].shape, &c->in[1].shape, transpose, &g));
    c->out[0].dtype = c->in[0].dtype;
    kn_conv_geom_out_shape(&g, &c->out[0].shape);
    int n_main;
    KN_TRY(check_fused(c, 3, &n_main));
    if (n_main > 3)
        return kn_error(KILN_ERR_MODEL, "expects at most 3 inputs, has %d", c->n_in);
    if (n_main == 3 && kn_has_input(c, 2)) {
        KN_TRY(check_float(c, 2, "B"));
        const kn_shape *b = &c->in[2].shape;
        if (b->rank != 1 || b->d[0] != g.c_out)
            return kn_error(KILN_ERR_SHAPE, "input 2 (B) must have shape [%lld]",
                            (long long)g.c_out);
    }
    return KILN_OK;
}

kiln_status kn_infer_conv(kn_infer_ctx *c) {
    return infer_conv_common(c, false);
}

/* Input 2 (B, [c_out], optional) and, as kiln_residual says, input 3 (Z, the output's dtype
 * and shape) of kiln.FusedDepthwiseConv and kiln.ScaledConv, whose later inputs follow Z. */
static kiln_status check_bias_residual(const kn_infer_ctx *c, int64_t c_out) {
    int act;
    float a, b;
    bool residual;
    KN_TRY(kn_fused_attrs(c->node, &act, &a, &b, &residual));
    if (c->n_in > 2 && kn_has_input(c, 2)) {
        KN_TRY(check_float(c, 2, "B"));
        if (c->in[2].shape.rank != 1 || c->in[2].shape.d[0] != c_out)
            return kn_error(KILN_ERR_SHAPE, "input 2 (B) must have shape [%lld]", (long long)c_out);
    }
    bool has_z = c->n_in > 3 && kn_has_input(c, 3);
    if (residual != has_z)
        return kn_error(KILN_ERR_MODEL, "kiln_residual is %s but input 3 is %s",
                        residual ? "set" : "not set", has_z ? "given" : "missing");
    char b1[96], b2[96];
    if (has_z &&
        (c->in[3].dtype != c->out[0].dtype || !kn_shape_equal(&c->in[3].shape, &c->out[0].shape)))
        return kn_error(KILN_ERR_SHAPE, "residual input 3 (%s %s) must match the output (%s %s)",
                        kn_dtype_name(c->in[3].dtype), kn_shape_str(&c->in[3].shape, b1, sizeof b1),
                        kn_dtype_name(c->out[0].dtype),
                        kn_shape_str(&c->out[0].shape, b2, sizeof b2));
    return KILN_OK;
}

/* kiln.FusedDepthwiseConv (passes.h): kiln.FusedConv's inputs 0-3 (an absent residual is -1)
 * and the input bias xb [C] as input 4 (or -1), groups equal to the input's channels. */
kiln_status kn_infer_fused_depthwise_conv(kn_infer_ctx *c) {
    KN_TRY(check_arity(c, 2, 5));
    KN_TRY(check_float(c, 0, "X"));
    KN_TRY(check_weights(c, "W"));
    kn_conv_geom g;
    KN_TRY(kn_conv_geom_init(c->node, &c->in[0].shape, &c->in[1].shape, false, &g));
    const kn_shape *x = &c->in[0].shape;
    int64_t groups = kn_attr_int(c->node, "group", 1);
    if (x->rank < 3 || x->d[1] != groups || g.c_out != groups)
        return kn_error(KILN_ERR_SHAPE,
                        "a depthwise convolution needs group = input channels = output channels "
                        "(group %lld, %lld in, %lld out)",
                        (long long)groups, (long long)(x->rank > 1 ? x->d[1] : 0),
                        (long long)g.c_out);
    c->out[0].dtype = c->in[0].dtype;
    kn_conv_geom_out_shape(&g, &c->out[0].shape);
    int act;
    float a, b;
    KN_TRY(kn_fused_input_attrs(c->node, &act, &a, &b));
    KN_TRY(check_bias_residual(c, g.c_out));
    if (c->n_in > 4 && kn_has_input(c, 4)) {
        KN_TRY(check_float(c, 4, "XB"));
        if (c->in[4].shape.rank != 1 || c->in[4].shape.d[0] != groups)
            return kn_error(KILN_ERR_SHAPE, "input 4 (XB) must have shape [%lld]",
                            (long long)groups);
    }
    return KILN_OK;
}

/* kiln.ScaledConv (passes.h): kiln.FusedConv's inputs 0-3 (absent ones -1) and the scale S
 * [N or 1, C, 1, 1] as input 4; a 1x1, stride-1, unpadded, ungrouped 2-D convolution. */
kiln_status kn_infer_scaled_conv(kn_infer_ctx *c) {
    if (c->n_in != 5 || !kn_has_input(c, 4))
        return kn_error(KILN_ERR_MODEL, "expects 5 inputs (X, W, B, Z, S; B and Z may be "
                                        "absent), input 4 (S) is required");
    KN_TRY(check_arity(c, 2, 5));
    KN_TRY(check_float(c, 0, "X"));
    KN_TRY(check_weights(c, "W"));
    KN_TRY(check_float(c, 4, "S"));
    kn_conv_geom g;
    KN_TRY(kn_conv_geom_init(c->node, &c->in[0].shape, &c->in[1].shape, false, &g));
    bool pointwise = g.nsp == 2 && g.group == 1;
    for (int i = 0; i < g.nsp; i++)
        pointwise =
            pointwise && g.k[i] == 1 && g.stride[i] == 1 && g.pad_b[i] == 0 && g.pad_e[i] == 0;
    if (!pointwise)
        return kn_error(KILN_ERR_MODEL, "a ScaledConv is a 1x1, stride-1, unpadded, ungrouped "
                                        "2-D convolution");
    c->out[0].dtype = c->in[0].dtype;
    kn_conv_geom_out_shape(&g, &c->out[0].shape);
    KN_TRY(check_bias_residual(c, g.c_out));
    const kn_shape *s = &c->in[4].shape;
    if (s->rank != 4 || (s->d[0] != 1 && s->d[0] != g.n) || s->d[1] != g.c_in || s->d[2] != 1 ||
        s->d[3] != 1) {
        char b1[96];
        return kn_error(KILN_ERR_SHAPE, "input 4 (S) %s must be [%lld or 1, %lld, 1, 1]",
                        kn_shape_str(s, b1, sizeof b1), (long long)g.n, (long long)g.c_in);
    }
    return KILN_OK;
}

kiln_status kn_check_in_place_inputs(const kn_graph *g) {
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        for (int a = 0; !n->dead && a < n->n_attr; a++) /* If, Loop, Scan bodies */
            if (n->attr[a].type == KN_ATTR_GRAPH && n->attr[a].g != NULL)
                KN_TRY(kn_check_in_place_inputs(n->attr[a].g));
        if (n->dead || strcmp(n->domain, KN_DOMAIN) != 0 ||
            strcmp(n->op_type, "FusedDepthwiseConv") != 0 || n->n_in < 1 || n->in[0] < 0)
            continue;
        int x = n->in[0], readers = 0;
        const kn_value *v = &g->values[x];
        for (int k = 0; k < g->n_nodes; k++)
            for (int j = 0; !g->nodes[k].dead && j < g->nodes[k].n_in; j++)
                readers += g->nodes[k].in[j] == x;
        if (v->producer < 0 || v->is_output || v->is_input || kn_value_is_const(v) || readers != 1)
            return kn_error(KILN_ERR_MODEL,
                            "node '%s' (kiln.FusedDepthwiseConv): its input '%s' must be computed "
                            "by the network for this node alone (it may be rewritten in place)",
                            n->name, v->name);
    }
    return KILN_OK;
}

kiln_status kn_infer_conv_transpose(kn_infer_ctx *c) {
    return infer_conv_common(c, true);
}

kiln_status kn_infer_gemm(kn_infer_ctx *c) {
    KN_TRY(check_arity(c, 2, 4));
    KN_TRY(check_float(c, 0, "A"));
    KN_TRY(check_weights(c, "B"));
    const kn_shape *a = &c->in[0].shape, *b = &c->in[1].shape;
    char b1[96], b2[96];
    if (a->rank != 2 || b->rank != 2)
        return kn_error(KILN_ERR_SHAPE, "A (%s) and B (%s) must be 2-D",
                        kn_shape_str(a, b1, sizeof b1), kn_shape_str(b, b2, sizeof b2));
    bool ta = kn_attr_int(c->node, "transA", 0) != 0, tb = kn_attr_int(c->node, "transB", 0) != 0;
    int64_t m = ta ? a->d[1] : a->d[0], ka = ta ? a->d[0] : a->d[1];
    int64_t kb = tb ? b->d[1] : b->d[0], n = tb ? b->d[0] : b->d[1];
    if (ka != kb)
        return kn_error(KILN_ERR_SHAPE, "inner dims differ: op(A) is %lldx%lld, op(B) %lldx%lld",
                        (long long)m, (long long)ka, (long long)kb, (long long)n);
    c->out[0].dtype = c->in[0].dtype;
    c->out[0].shape = (kn_shape){.rank = 2, .d = {m, n}};
    int n_main;
    KN_TRY(check_fused(c, 3, &n_main));
    if (n_main > 3)
        return kn_error(KILN_ERR_MODEL, "expects at most 3 inputs, has %d", c->n_in);
    if (n_main == 3 && kn_has_input(c, 2)) {
        KN_TRY(check_float(c, 2, "C"));
        kn_shape bc;
        if (c->in[2].shape.rank > 2 ||
            !kn_shape_broadcast(&c->in[2].shape, &c->out[0].shape, &bc) ||
            !kn_shape_equal(&bc, &c->out[0].shape))
            return kn_error(KILN_ERR_SHAPE, "input 2 (C) of shape %s does not broadcast to %s",
                            kn_shape_str(&c->in[2].shape, b1, sizeof b1),
                            kn_shape_str(&c->out[0].shape, b2, sizeof b2));
    }
    return KILN_OK;
}

kiln_status kn_infer_matmul(kn_infer_ctx *c) {
    bool bias = is_fused(c->node) && kn_attr_int(c->node, "kiln_bias", 0) != 0;
    KN_TRY(check_arity(c, 2, bias ? 4 : 3));
    KN_TRY(check_float(c, 0, "A"));
    KN_TRY(check_weights(c, "B"));
    kn_shape a = c->in[0].shape, b = c->in[1].shape;
    char b1[96], b2[96];
    if (a.rank < 1 || b.rank < 1)
        return kn_error(KILN_ERR_SHAPE, "A (%s) and B (%s) must have rank >= 1",
                        kn_shape_str(&a, b1, sizeof b1), kn_shape_str(&b, b2, sizeof b2));
    bool a1 = a.rank == 1, b1d = b.rank == 1;
    if (a1) {
        a.rank = 2;
        a.d[1] = a.d[0];
        a.d[0] = 1;
    }
    if (b1d) {
        b.rank = 2;
        b.d[1] = 1;
    }
    int64_t m = a.d[a.rank - 2], k = a.d[a.rank - 1], kb = b.d[b.rank - 2], n = b.d[b.rank - 1];
    if (k != kb)
        return kn_error(KILN_ERR_SHAPE, "inner dims differ: A is %s, B is %s",
                        kn_shape_str(&c->in[0].shape, b1, sizeof b1),
                        kn_shape_str(&c->in[1].shape, b2, sizeof b2));
    kn_shape ba = {.rank = a.rank - 2}, bb = {.rank = b.rank - 2}, out;
    for (int i = 0; i < ba.rank; i++)
        ba.d[i] = a.d[i];
    for (int i = 0; i < bb.rank; i++)
        bb.d[i] = b.d[i];
    if (!kn_shape_broadcast(&ba, &bb, &out))
        return kn_error(KILN_ERR_SHAPE, "batch dims of A (%s) and B (%s) do not broadcast",
                        kn_shape_str(&c->in[0].shape, b1, sizeof b1),
                        kn_shape_str(&c->in[1].shape, b2, sizeof b2));
    if (out.rank + 2 > KN_MAX_RANK)
        return kn_error(KILN_ERR_SHAPE, "output rank exceeds %d", KN_MAX_RANK);
    if (!a1)
        out.d[out.rank++] = m;
    if (!b1d)
        out.d[out.rank++] = n;
    c->out[0].dtype = c->in[0].dtype;
    c->out[0].shape = out;
    if (bias) {
        /* kiln_bias (see passes.h): input 3 is a float32 vector of N values added per column;
         * slot 2 holds the residual with kiln_residual, else stays empty. */
        bool residual;
        KN_TRY(kn_fused_attrs(c->node, &(int){0}, &(float){0}, &(float){0}, &residual));
        if (c->n_in != 4 || kn_has_input(c, 2) != residual || !kn_has_input(c, 3) ||
            c->in[3].dtype != c->in[0].dtype || kn_tensor_numel(&c->in[3]) != n || b1d)
            return kn_error(KILN_ERR_MODEL,
                            "kiln_bias needs input 3 to hold %lld values of input 0's "
                            "dtype and input 2 to be the residual exactly when kiln_residual "
                            "is set",
                            (long long)n);
        if (residual && (c->in[2].dtype != c->out[0].dtype ||
                         !kn_shape_equal(&c->in[2].shape, &c->out[0].shape)))
            return kn_error(KILN_ERR_SHAPE, "the residual input 2 must match the output");
        return KILN_OK;
    }
    int n_main;
    KN_TRY(check_fused(c, 2, &n_main));
    if (n_main > 2)
        return kn_error(KILN_ERR_MODEL, "expects 2 inputs, has %d", c->n_in);
    return KILN_OK;
}
