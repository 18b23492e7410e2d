/* Run the products of a QDQ model in int8 (see passes.h): DequantizeLinear(x) and
 * DequantizeLinear(w) into a Conv / MatMul / Gemm whose output (after an optional Relu or
 * Clip) has one QuantizeLinear becomes one kiln.QConv or kiln.QMatMul reading the quantized
 * x and writing the quantized y. The product node is rewritten in place (it already sits
 * before every reader of y), so the graph stays sorted; the DequantizeLinear nodes left
 * without readers go with dead-node elimination. A product fed by DequantizeLinear that does
 * not fit keeps the float path and records why in kiln_int8_reason. */
#include "passes/passes.h"

#include "core/alloc.h"
#include "ops/op.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct qdq {
    kn_graph *g;
    int *uses; /* readers per value, for the values there were when the pass began */
    int n_uses;
} qdq;

static bool is_op(const kn_node *n, const char *op) {
    return !n->dead && n->domain[0] == '\0' && strcmp(n->op_type, op) == 0;
}

static const kn_value *val(const qdq *q, int v) {
    return v >= 0 ? &q->g->values[v] : NULL;
}

static bool is_const(const qdq *q, int v) {
    return v >= 0 && kn_value_is_const(val(q, v));
}

static int64_t numel(const kn_value *v) {
    kn_tensor t = kn_value_tensor(v);
    return kn_tensor_numel(&t);
}

/* The DequantizeLinear producing v with constant scale and zero point, or NULL. */
static const kn_node *dq_of(const qdq *q, int v) {
    int p = v >= 0 ? q->g->values[v].producer : -1;
    if (p < 0 || !is_op(&q->g->nodes[p], "DequantizeLinear"))
        return NULL;
    return &q->g->nodes[p];
}

/* Values added by the pass (v >= n_uses) have no count: no sole consumer is claimed. */
static int sole_consumer(const qdq *q, int v) {
    return v >= q->n_uses ? -1 : kn_graph_sole_consumer(q->g, q->uses, v);
}

static bool scalar_const(const qdq *q, int v) {
    return is_const(q, v) && numel(val(q, v)) == 1;
}

static kiln_status add_attr(kn_graph *g, int node, kn_attr a) {
    if (a.type == KN_ATTR_STRING)
        a.slen = strlen(a.s);
    return kn_node_add_attr(g, node, &a);
}

static kiln_status reason(qdq *q, int i, const char *why) {
    if (kn_node_attr(&q->g->nodes[i], "kiln_int8_reason") != NULL)
        return KILN_OK;
    return add_attr(
        q->g, i, (kn_attr){.name = "kiln_int8_reason", .type = KN_ATTR_STRING, .s = (char *)why});
}

/* A new constant value holding t; -1 on failure. */
static int new_const(qdq *q, const char *base, const kn_tensor *t) {
    char name[300];
    for (int k = 0;; k++) {
        snprintf(name, sizeof name, "%s/int8_%d", base, k);
        if (kn_graph_find_value(q->g, name) < 0)
            break;
    }
    int v = kn_graph_add_value(q->g, name);
    if (v < 0 || kn_value_set_const(q->g, v, t) != KILN_OK)
        return -1;
    return v;
}

/* The float bias for n outputs: a constant float32 [n], or DequantizeLinear of one (the int32
 * bias the quantizer writes). *bias = -1 when there is none. */
static const char *bias_of(qdq *q, int v, int64_t n, int *bias) {
    *bias = -1;
    if (v < 0)
        return NULL;
    const kn_node *d = dq_of(q, v);
    if (d == NULL) {
        if (!is_const(q, v) || val(q, v)->dtype != KILN_DTYPE_FLOAT32 || numel(val(q, v)) != n)
            return "the bias is not a constant float32 vector";
        *bias = v;
        return NULL;
    }
    if (!is_const(q, d->in[0]) || !is_const(q, d->in[1]) || numel(val(q, d->in[0])) != n)
        return "the bias's DequantizeLinear does not read constants";
    kn_tensor b = kn_value_tensor(val(q, d->in[0])), s = kn_value_tensor(val(q, d->in[1]));
    kn_tensor z = d->n_in > 2 && d->in[2] >= 0 ? kn_value_tensor(val(q, d->in[2])) : (kn_tensor){0};
    int64_t ns = kn_tensor_numel(&s), nz = z.dtype ? kn_tensor_numel(&z) : 0;
    float *f = kn_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (f == NULL)
        return "out of memory";
    for (int64_t j = 0; j < n; j++) {
        double zp = nz ? (double)kn_tensor_get_i64(&z, nz > 1 ? j : 0) : 0.0;
        f[j] = (float)(((double)kn_tensor_get_i64(&b, j) - zp) *
                       kn_tensor_get_f64(&s, ns > 1 ? j : 0));
    }
    kn_tensor t = {.dtype = KILN_DTYPE_FLOAT32, .shape = {.rank = 1, .d = {n}}, .data = f};
    *bias = new_const(q, q->g->values[v].name, &t);
    kn_free(f);
    return *bias < 0 ? "out of memory" : NULL;
}

/* The int8 weight as QMatMul wants it, [K, N], transposing a Gemm's transB weight. */
static int weight_kn(qdq *q, int w, bool trans) {
    if (!trans)
        return w;
    kn_tensor t = kn_value_tensor(val(q, w));
    int64_t n = t.shape.d[0], k = t.shape.d[1];
    int8_t *d = kn_malloc((size_t)(n * k > 0 ? n * k : 1));
    if (d == NULL)
        return -1;
    const int8_t *s = t.data;
    for (int64_t i = 0; i < n; i++)
        for (int64_t e = 0; e < k; e++)
            d[e * n + i] = s[i * k + e];
    kn_tensor o = {.dtype = KILN_DTYPE_INT8, .shape = {.rank = 2, .d = {k, n}}, .data = d};
    int v = new_const(q, q->g->values[w].name, &o);
    kn_free(d);
    return v;
}

static kiln_status try_product(qdq *q, int i) {
    kn_graph *g = q->g;
    kn_node *p = &g->nodes[i];
    bool conv = is_op(p, "Conv"), gemm = is_op(p, "Gemm");
    const kn_node *dx = dq_of(q, p->in[0]), *dw = p->n_in > 1 ? dq_of(q, p->in[1]) : NULL;
    if (dx == NULL && dw == NULL)
        return KILN_OK; /* not a QDQ product */
    if (dx == NULL || dw == NULL)
        return reason(q, i, "input or weight is not dequantized");
    if (!scalar_const(q, dx->in[1]) || dx->n_in < 3 || !scalar_const(q, dx->in[2]))
        return reason(q, i, "the input's scale or zero point is not a constant scalar");
    /* Values between nodes have no dtype yet; the zero point's is the input's. */
    int32_t xdt = val(q, dx->in[2])->dtype;
    if (xdt != KILN_DTYPE_UINT8 && xdt != KILN_DTYPE_INT8)
        return reason(q, i, "the input is not int8 or uint8");
    int w = dw->in[0];
    if (!is_const(q, w) || val(q, w)->dtype != KILN_DTYPE_INT8 || !is_const(q, dw->in[1]))
        return reason(q, i, "the weight is not a constant int8 tensor");
    if (dw->n_in > 2 && dw->in[2] >= 0) {
        if (!is_const(q, dw->in[2]))
            return reason(q, i, "the weight's zero point is not constant");
        kn_tensor z = kn_value_tensor(val(q, dw->in[2]));
        for (int64_t e = 0; e < kn_tensor_numel(&z); e++)
            if (kn_tensor_get_i64(&z, e) != 0)
                return reason(q, i, "the weight is not symmetric (zero point not 0)");
    }
    kn_tensor wt = kn_value_tensor(val(q, w));
    bool trans = gemm && kn_attr_int(p, "transB", 0) != 0;
    int64_t n_out, axis = kn_attr_int(dw, "axis", 1);
    if (conv) {
        if (wt.shape.rank != 4 || kn_attr_int(p, "group", 1) != 1)
            return reason(q, i, "only 2-D ungrouped convolutions run in int8");
        n_out = wt.shape.d[0];
        axis = axis < 0 ? axis + 4 : axis;
    } else {
        if (wt.shape.rank != 2)
            return reason(q, i, "the weight is not 2-D");
        if (gemm && (kn_attr_int(p, "transA", 0) != 0 || kn_attr_float(p, "alpha", 1.0f) != 1.0f ||
                     kn_attr_float(p, "beta", 1.0f) != 1.0f))
            return reason(q, i, "Gemm with transA, alpha or beta runs in float");
        n_out = wt.shape.d[trans ? 0 : 1];
        axis = axis < 0 ? axis + 2 : axis;
    }
    int64_t n_ws = numel(val(q, dw->in[1]));
    int64_t ch_axis = conv || trans ? 0 : 1;
    if (n_ws != 1 && (n_ws != n_out || axis != ch_axis))
        return reason(q, i, "the weight's scale is neither per tensor nor per output channel");
    /* The output side: [Relu | Clip] then one QuantizeLinear. */
    int y = p->out[0], act = -1, qn = sole_consumer(q, y);
    if (qn >= 0 && (is_op(&g->nodes[qn], "Relu") || is_op(&g->nodes[qn], "Clip"))) {
        act = qn;
        qn = sole_consumer(q, g->nodes[act].out[0]);
    }
    if (qn < 0 || !is_op(&g->nodes[qn], "QuantizeLinear"))
        return reason(q, i, "the output does not go to one QuantizeLinear");
    const kn_node *qy = &g->nodes[qn];
    if (!scalar_const(q, qy->in[1]) || qy->n_in < 3 || !scalar_const(q, qy->in[2]))
        return reason(q, i, "the output's scale or zero point is not a constant scalar");
    int32_t ydt = val(q, qy->in[2])->dtype;
    if (ydt != KILN_DTYPE_UINT8 && ydt != KILN_DTYPE_INT8)
        return reason(q, i, "the output is not quantized to int8 or uint8");
    float lo = -INFINITY, hi = INFINITY;
    if (act >= 0 && is_op(&g->nodes[act], "Clip")) {
        const kn_node *c = &g->nodes[act];
        if (c->opset < 11) {
            lo = kn_attr_float(c, "min", -INFINITY);
            hi = kn_attr_float(c, "max", INFINITY);
        } else {
            for (int j = 1; j < c->n_in && j < 3; j++) {
                if (c->in[j] < 0)
                    continue;
                if (!scalar_const(q, c->in[j]) || val(q, c->in[j])->dtype != KILN_DTYPE_FLOAT32)
                    return reason(q, i, "Clip's bounds are not constant");
                kn_tensor b = kn_value_tensor(val(q, c->in[j]));
                *(j == 1 ? &lo : &hi) = (float)kn_tensor_get_f64(&b, 0);
            }
        }
    }
    int bias;
    const char *why = bias_of(q, (conv || gemm) && p->n_in > 2 ? p->in[2] : -1, n_out, &bias);
    if (why != NULL)
        return reason(q, i, why);
    int wk = conv ? w : weight_kn(q, w, trans);
    if (wk < 0)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory fusing QDQ");
    /* Values are read again after the additions above may have moved the arrays. */
    dx = dq_of(q, g->nodes[i].in[0]);
    dw = dq_of(q, g->nodes[i].in[1]);
    qy = &g->nodes[qn];
    int in[9] = {dx->in[0], dx->in[1], dx->in[2], wk, dw->in[1], dw->n_in > 2 ? dw->in[2] : -1,
                 qy->in[1], qy->in[2], bias};
    int *ins = kn_malloc(sizeof in);
    if (ins == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory fusing QDQ");
    memcpy(ins, in, sizeof in);
    p = &g->nodes[i];
    for (int j = 0; j < p->n_in; j++)
        if (p->in[j] >= 0 && p->in[j] < q->n_uses)
            q->uses[p->in[j]]--;
    for (int j = 0; j < 9; j++)
        if (in[j] >= 0 && in[j] < q->n_uses)
            q->uses[in[j]]++;
    kn_free(p->in);
    p->in = ins;
    p->n_in = 9;
    int yq = g->nodes[qn].out[0];
    g->values[p->out[0]].producer = -1;
    p->out[0] = yq;
    g->values[yq].producer = i;
    g->nodes[qn].dead = true;
    if (act >= 0)
        g->nodes[act].dead = true;
    KN_TRY(kn_node_set_op(p, KN_DOMAIN, conv ? "QConv" : "QMatMul", 1));
    if (act >= 0) {
        bool relu = strcmp(g->nodes[act].op_type, "Relu") == 0;
        KN_TRY(add_attr(g, i,
                        (kn_attr){.name = "kiln_activation",
                                  .type = KN_ATTR_STRING,
                                  .s = relu ? "Relu" : "Clip"}));
        KN_TRY(add_attr(g, i, (kn_attr){.name = "kiln_alpha", .type = KN_ATTR_FLOAT, .f = lo}));
        KN_TRY(add_attr(g, i, (kn_attr){.name = "kiln_beta", .type = KN_ATTR_FLOAT, .f = hi}));
    }
    return KILN_OK;
}

kiln_status kn_pass_fuse_qdq(kn_graph *g) {
    qdq q = {.g = g, .uses = kn_graph_value_uses(g), .n_uses = g->n_values};
    if (q.uses == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory fusing QDQ");
    kiln_status rc = KILN_OK;
    int n_nodes = g->n_nodes;
    for (int i = 0; i < n_nodes && rc == KILN_OK; i++) {
        const kn_node *n = &g->nodes[i];
        if ((is_op(n, "Conv") || is_op(n, "MatMul") || is_op(n, "Gemm")) && n->n_out == 1 &&
            n->n_in >= 2)
            rc = try_product(&q, i);
    }
    kn_free(q.uses);
    return rc;
}
