/* QuantizeLinear after DequantizeLinear on the same grid (see passes.h): QDQ models quantize
 * the output of every Reshape, Transpose and MaxPool again although it holds dequantized values
 * of an int8 tensor, and onnxruntime's quantizer writes one QuantizeLinear per reader of a
 * tensor. With the same scalar scale and zero point, q(dq(x)) is x exactly: dq(x) = (x - z) * s
 * and its quotient by s is within a few ulps of the integer x - z, so it rounds back, inside
 * the clamp. So
 *   x_q -> DequantizeLinear -> [Reshape | Transpose | ...]* -> QuantizeLinear -> y_q
 * becomes the data movement alone on the int8 x_q, writing y_q; the float tensors and the
 * DequantizeLinear go where nothing else reads them. A MaxPool selects the largest of its
 * window, never a padding value, and with a positive scale dq is increasing,
 * so the largest dequantized value is the dequantized largest integer: it runs on x_q too
 * (the ResNet stem's pool then reads a quarter of the bytes, and no float copy is made). */
#include "ir/placement.h"
#include "passes/passes.h"

#include "core/alloc.h"
#include "ops/op.h"

#include <stdio.h>
#include <string.h>

#define MAX_MOVES 8

static bool scalar_const(const kn_graph *g, int v) {
    if (v < 0 || !kn_value_is_const(&g->values[v]))
        return false;
    kn_tensor t = kn_value_tensor(&g->values[v]);
    return kn_tensor_numel(&t) == 1;
}

/* Ops that only move elements: their output's values are some of the input's. */
static bool is_move(const kn_node *n) {
    static const char *const ops[] = {"Reshape",   "Transpose", "Squeeze",
                                      "Unsqueeze", "Flatten",   "Identity"};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
        if (kn_node_is(n, "", ops[i]))
            return true;
    return false;
}

/* GlobalMaxPool takes floats only, so MaxPool is the one pool here. */
bool kn_pass_max_selects(const kn_node *n) {
    return kn_node_is(n, "", "MaxPool") && n->n_out == 1 && n->opset >= 12;
}

/* Scale value vs and zero point value vz (per tensor, constant) are a DequantizeLinear's: same
 * float32 scale, same zero point (value and dtype), the zero point explicit. */
static bool grid_of(const kn_graph *g, int vs, int vz, const kn_node *d) {
    if (d->n_in < 3 || !scalar_const(g, vs) || !scalar_const(g, vz) || !scalar_const(g, d->in[1]) ||
        !scalar_const(g, d->in[2]))
        return false;
    kn_tensor qs = kn_value_tensor(&g->values[vs]);
    kn_tensor ds = kn_value_tensor(&g->values[d->in[1]]);
    kn_tensor qz = kn_value_tensor(&g->values[vz]);
    kn_tensor dz = kn_value_tensor(&g->values[d->in[2]]);
    if (qs.dtype != KILN_DTYPE_FLOAT32 || ds.dtype != KILN_DTYPE_FLOAT32 ||
        *(const float *)qs.data != *(const float *)ds.data || qz.dtype != dz.dtype ||
        (qz.dtype != KILN_DTYPE_UINT8 && qz.dtype != KILN_DTYPE_INT8))
        return false;
    return kn_tensor_get_i64(&qz, 0) == kn_tensor_get_i64(&dz, 0);
}

/* A QuantizeLinear and a DequantizeLinear on the same grid (see grid_of). */
static bool same_grid(const kn_graph *g, const kn_node *q, const kn_node *d) {
    return q->n_in >= 3 && kn_node_attr(q, "output_dtype") == NULL &&
           grid_of(g, q->in[1], q->in[2], d);
}

static void replace_reads(kn_graph *g, int from, int to) {
    for (int i = 0; i < g->n_nodes; i++) {
        kn_node *n = &g->nodes[i];
        for (int j = 0; !n->dead && j < n->n_in; j++)
            if (n->in[j] == from)
                n->in[j] = to;
    }
}

/* Copies move node m (its attributes and other inputs) reading x instead of its input 0,
 * writing out (a new value when out < 0). Returns the output value, or -1. */
static int copy_move(kn_graph *g, int m, int x, int out) {
    if (out < 0 && (out = kn_graph_add_value(g, NULL)) < 0)
        return -1;
    int in[KN_MAX_NODE_IO];
    const kn_node *n = &g->nodes[m];
    int n_in = n->n_in;
    memcpy(in, n->in, (size_t)n_in * sizeof(int));
    in[0] = x;
    char name[300];
    snprintf(name, sizeof name, "%s/int8", n->name);
    char op[64];
    snprintf(op, sizeof op, "%s", n->op_type);
    int c = kn_graph_add_node(g, name, op, "", n->opset, n_in, in, 1, &out);
    if (c < 0)
        return -1;
    for (int a = 0; a < g->nodes[m].n_attr; a++)
        if (kn_node_add_attr(g, c, &g->nodes[m].attr[a]) != KILN_OK)
            return -1;
    return out;
}

static kiln_status try_elide(kn_graph *g, int qi) {
    const kn_node *q = &g->nodes[qi];
    int y = q->out[0];
    if (y < 0 || g->values[y].is_output || q->in[0] < 0)
        return KILN_OK;
    int moves[MAX_MOVES], n_moves = 0;
    bool selects = false;
    int v = q->in[0], p = g->values[v].producer;
    while (p >= 0 && (is_move(&g->nodes[p]) || kn_pass_max_selects(&g->nodes[p])) &&
           g->nodes[p].n_out == 1 && n_moves < MAX_MOVES) {
        selects = selects || kn_pass_max_selects(&g->nodes[p]);
        moves[n_moves++] = p;
        v = g->nodes[p].in[0];
        p = v >= 0 ? g->values[v].producer : -1;
    }
    if (p < 0 || !kn_node_is(&g->nodes[p], "", "DequantizeLinear") ||
        !same_grid(g, q, &g->nodes[p]))
        return KILN_OK;
    if (selects) { /* the order of the integers is the values' only with a positive scale */
        kn_tensor s = kn_value_tensor(&g->values[q->in[1]]);
        if (!(*(const float *)s.data > 0.0f))
            return KILN_OK;
    }
    int x = g->nodes[p].in[0];
    g->nodes[qi].dead = true;
    g->nodes[qi].out[0] = -1; /* y gets a new producer (or none): sorting must not see two */
    if (n_moves == 0) {
        replace_reads(g, y, x);
        g->values[y].producer = -1;
        return KILN_OK;
    }
    for (int k = n_moves - 1; k >= 0; k--)
        if ((x = copy_move(g, moves[k], x, k == 0 ? y : -1)) < 0)
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory moving int8 tensors");
    return KILN_OK;
}

kiln_status kn_pass_elide_qdq(kn_graph *g) {
    int n = g->n_nodes;
    for (int i = 0; i < n; i++)
        if (kn_node_is(&g->nodes[i], "", "QuantizeLinear"))
            KN_TRY(try_elide(g, i));
    return kn_graph_toposort(g);
}

/* A scalar float32 constant value; -1 on failure. */
static int f32_const(kn_graph *g, float f) {
    int v = kn_graph_add_value(g, NULL);
    kn_tensor t = {.dtype = KILN_DTYPE_FLOAT32, .shape = {.rank = 0}, .data = &f};
    if (v < 0 || kn_value_set_const(g, v, &t) != KILN_OK)
        return -1;
    return v;
}

/* A float32 value shaped like like; -1 on failure. */
static int f32_like(kn_graph *g, int like) {
    int v = kn_graph_add_value(g, NULL);
    if (v < 0)
        return -1;
    kn_value *d = &g->values[v];
    const kn_value *s = &g->values[like];
    d->dtype = KILN_DTYPE_FLOAT32;
    d->rank = s->rank;
    for (int k = 0; k < s->rank && k < KN_MAX_RANK; k++) {
        d->dims[k].value = s->dims[k].value;
        if (s->dims[k].sym != NULL && (d->dims[k].sym = kn_strdup(s->dims[k].sym)) == NULL)
            return -1;
    }
    return v;
}

/* Adds node op(in) writing out, placed where node at is. */
static kiln_status add_float(kn_graph *g, int at, const char *op, int n_in, const int *in,
                             int out) {
    char name[300];
    snprintf(name, sizeof name, "%s/%s", g->nodes[at].name, op);
    int n = kn_graph_add_node(g, name, op, "", 13, n_in, in, 1, &out);
    if (n < 0)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory expanding a QDQ pair");
    return kn_node_copy_placement(g, n, at);
}

/* x -> QuantizeLinear -> DequantizeLinear -> y on the CPU, same grid, the DequantizeLinear
 * the quantized tensor's only reader: y = round(clamp(x / s, lo - z, hi - z)) * s, which is
 * the pair's value exactly (the quantized integer r + z, less z, is r again). */
static kiln_status try_expand(kn_graph *g, const int *uses, int qi) {
    const kn_node *q = &g->nodes[qi];
    int t = q->out[0], x = q->in[0];
    if (q->dead || t < 0 || x < 0 || g->values[t].is_output || uses[t] != 1 ||
        g->values[x].dtype != KILN_DTYPE_FLOAT32 || strcmp(kn_node_backend(q), "cpu") != 0)
        return KILN_OK;
    int di = -1;
    for (int i = 0; i < g->n_nodes && di < 0; i++)
        if (!g->nodes[i].dead && g->nodes[i].n_in > 0 && g->nodes[i].in[0] == t)
            di = i;
    if (di < 0 || !kn_node_is(&g->nodes[di], "", "DequantizeLinear") ||
        !same_grid(g, q, &g->nodes[di]) || g->nodes[di].out[0] < 0 ||
        g->values[g->nodes[di].out[0]].dtype != KILN_DTYPE_FLOAT32)
        return KILN_OK;
    int y = g->nodes[di].out[0];
    kn_tensor sc = kn_value_tensor(&g->values[q->in[1]]);
    kn_tensor zc = kn_value_tensor(&g->values[q->in[2]]);
    float s = *(const float *)sc.data, z = (float)kn_tensor_get_i64(&zc, 0);
    bool sgn = zc.dtype == KILN_DTYPE_INT8;
    /* the bounds QuantizeLinear's loop clamps the quotient to */
    float lo = (sgn ? -128.0f : 0.0f) - z, hi = (sgn ? 127.0f : 255.0f) - z;
    int vs = f32_const(g, s), vlo = f32_const(g, lo), vhi = f32_const(g, hi);
    int v1 = f32_like(g, y), v2 = f32_like(g, y), v3 = f32_like(g, y);
    if (vs < 0 || vlo < 0 || vhi < 0 || v1 < 0 || v2 < 0 || v3 < 0)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory expanding a QDQ pair");
    g->nodes[qi].dead = g->nodes[di].dead = true;
    /* both leave the sorted graph: no edges through them remain */
    g->nodes[qi].out[0] = g->nodes[di].out[0] = g->nodes[di].in[0] = -1;
    g->values[y].producer = g->values[t].producer = -1;
    KN_TRY(add_float(g, qi, "Div", 2, (int[]){x, vs}, v1));
    KN_TRY(add_float(g, qi, "Clip", 3, (int[]){v1, vlo, vhi}, v2));
    KN_TRY(add_float(g, qi, "Round", 1, (int[]){v2}, v3));
    return add_float(g, qi, "Mul", 2, (int[]){v3, vs}, y);
}

/* Moves that keep every element where it is: they run on float32 as well at no cost. */
static bool is_reshape(const kn_node *n) {
    static const char *const ops[] = {"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity"};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
        if (kn_node_is(n, "", ops[i]))
            return true;
    return false;
}

/* The only node reading v (uses[v] == 1, not a graph output, read as input 0), or -1. */
static int sole_reader(const kn_graph *g, const int *uses, int v) {
    if (v < 0 || uses[v] != 1 || g->values[v].is_output)
        return -1;
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && g->nodes[i].n_in > 0 && g->nodes[i].in[0] == v)
            return i;
    return -1;
}

/* kiln.QMatMul on the CPU whose bytes only a DequantizeLinear on the product's own output grid
 * reads, directly or through reshapes: the QMatMul writes that DequantizeLinear's float32
 * values itself (kiln_float_output) and the reshapes move them. One pass over the output
 * where there were two. */
static kiln_status try_fold_dq(kn_graph *g, const int *uses, int pi) {
    const kn_node *p = &g->nodes[pi];
    if (p->dead || !kn_node_is(p, KN_DOMAIN, "QMatMul") || p->n_in < 8 || p->n_out != 1 ||
        strcmp(kn_node_backend(p), "cpu") != 0 || kn_node_attr(p, "kiln_float_output") != NULL)
        return KILN_OK;
    int moves[MAX_MOVES], n_moves = 0, v = p->out[0], di;
    while ((di = sole_reader(g, uses, v)) >= 0 && is_reshape(&g->nodes[di]) &&
           g->nodes[di].n_out == 1 && n_moves < MAX_MOVES) {
        moves[n_moves++] = di;
        v = g->nodes[di].out[0];
    }
    if (di < 0 || !kn_node_is(&g->nodes[di], "", "DequantizeLinear"))
        return KILN_OK;
    const kn_node *d = &g->nodes[di];
    int y = d->out[0];
    if (!grid_of(g, p->in[6], p->in[7], d) || y < 0 || g->values[y].dtype != KILN_DTYPE_FLOAT32)
        return KILN_OK;
    kn_attr fout = {.name = "kiln_float_output", .type = KN_ATTR_INT, .i = 1};
    KN_TRY(kn_node_add_attr(g, pi, &fout));
    g->values[g->nodes[pi].out[0]].dtype = KILN_DTYPE_FLOAT32;
    for (int k = 0; k < n_moves - 1; k++)
        g->values[g->nodes[moves[k]].out[0]].dtype = KILN_DTYPE_FLOAT32;
    int last = n_moves > 0 ? moves[n_moves - 1] : pi;
    g->values[g->nodes[last].out[0]].producer = -1;
    g->nodes[last].out[0] = y;
    g->values[y].producer = last;
    g->nodes[di].dead = true;
    g->nodes[di].in[0] = g->nodes[di].out[0] = -1;
    return KILN_OK;
}

kiln_status kn_pass_expand_qdq_pairs(kn_graph *g) {
    int *uses = kn_graph_value_uses(g);
    if (uses == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory counting value readers");
    kiln_status rc = KILN_OK;
    int n = g->n_nodes;
    for (int i = 0; i < n && rc == KILN_OK; i++)
        rc = try_fold_dq(g, uses, i);
    for (int i = 0; i < n && rc == KILN_OK; i++)
        if (kn_node_is(&g->nodes[i], "", "QuantizeLinear"))
            rc = try_expand(g, uses, i);
    kn_free(uses);
    return rc == KILN_OK ? kn_graph_toposort(g) : rc;
}
