/* Pattern replacement: find every instance of a known subgraph (swish, relu-sigmoid-mul, gelu,
 * layer-norm) and put one plugin node in its place. A match is only taken when its inner
 * values feed nothing outside it and are not graph outputs, so the rewrite cannot change any
 * other result. */
#include "edit/edit.h"

#include "core/alloc.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAX_MEMBERS 12

typedef struct match {
    int members[MAX_MEMBERS]; /* node indices, the last one produces the result */
    int n_members;
    int inputs[3]; /* x, then the pattern's extra inputs (bias, scale) */
    int n_inputs;
} match;

bool kn_edit_pattern_parse(const char *s, kn_edit_pattern *out) {
    static const struct {
        const char *name;
        kn_edit_pattern p;
    } names[] = {{"swish", KN_PATTERN_SWISH},
                 {"relu-sigmoid-mul", KN_PATTERN_RELU_SIGMOID_MUL},
                 {"gelu", KN_PATTERN_GELU},
                 {"layer-norm", KN_PATTERN_LAYER_NORM}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i].name) == 0) {
            *out = names[i].p;
            return true;
        }
    return false;
}

static bool is_op(const kn_graph *g, int node, const char *op) {
    return node >= 0 && !g->nodes[node].dead && g->nodes[node].domain[0] == '\0' &&
           strcmp(g->nodes[node].op_type, op) == 0;
}

static int producer(const kn_graph *g, int v) {
    return v >= 0 ? g->values[v].producer : -1;
}

/* The only node reading value v, or -1 (none, several, or v is a graph output). */
static int sole_consumer(const kn_graph *g, int v) {
    if (v < 0 || g->values[v].is_output)
        return -1;
    int found = -1;
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        for (int j = 0; j < n->n_in; j++)
            if (n->in[j] == v) {
                if (found >= 0 && found != i)
                    return -1;
                found = i;
            }
    }
    return found;
}

static int out0(const kn_graph *g, int node) {
    return g->nodes[node].n_out >= 1 ? g->nodes[node].out[0] : -1;
}

/* For a binary node reading v, the other operand (-1 if v is not one of its two inputs). */
static int other_operand(const kn_graph *g, int node, int v) {
    const kn_node *n = &g->nodes[node];
    if (n->n_in != 2)
        return -1;
    if (n->in[0] == v)
        return n->in[1];
    return n->in[1] == v ? n->in[0] : -1;
}

static bool const_scalar(const kn_graph *g, int v, double want) {
    if (v < 0 || !kn_value_is_const(&g->values[v]) || g->values[v].dtype != KILN_DTYPE_FLOAT32)
        return false;
    kn_tensor t = kn_value_tensor(&g->values[v]);
    return kn_tensor_numel(&t) == 1 && fabs(*(const float *)t.data - want) < 1e-3 * fabs(want);
}

static void add_member(match *m, int node) {
    m->members[m->n_members++] = node;
}

/* A constant Add after the result becomes the bias input. */
static void take_bias(const kn_graph *g, match *m) {
    int last = m->members[m->n_members - 1];
    int add = sole_consumer(g, out0(g, last));
    if (!is_op(g, add, "Add"))
        return;
    int b = other_operand(g, add, out0(g, last));
    if (b >= 0 && kn_value_is_const(&g->values[b])) {
        add_member(m, add);
        m->inputs[m->n_inputs++] = b;
    }
}

/* x * Sigmoid(x) (+ bias), rooted at the Sigmoid. */
static bool match_swish(const kn_graph *g, int s, match *m) {
    if (!is_op(g, s, "Sigmoid"))
        return false;
    int x = g->nodes[s].in[0];
    int mul = sole_consumer(g, out0(g, s));
    if (!is_op(g, mul, "Mul") || other_operand(g, mul, out0(g, s)) != x)
        return false;
    add_member(m, s);
    add_member(m, mul);
    m->inputs[m->n_inputs++] = x;
    take_bias(g, m);
    return true;
}

/* Relu(x) * Sigmoid(x), rooted at the Sigmoid. */
static bool match_rsm(const kn_graph *g, int s, match *m) {
    if (!is_op(g, s, "Sigmoid"))
        return false;
    int x = g->nodes[s].in[0];
    int mul = sole_consumer(g, out0(g, s));
    if (!is_op(g, mul, "Mul"))
        return false;
    int r = producer(g, other_operand(g, mul, out0(g, s)));
    if (!is_op(g, r, "Relu") || g->nodes[r].in[0] != x || sole_consumer(g, out0(g, r)) != mul)
        return false;
    add_member(m, r);
    add_member(m, s);
    add_member(m, mul);
    m->inputs[m->n_inputs++] = x;
    return true;
}

/* x * 0.5 * (1 + Erf(x / sqrt 2)) in the orders exporters write, rooted at the Erf. */
static bool match_gelu(const kn_graph *g, int e, match *m) {
    if (!is_op(g, e, "Erf"))
        return false;
    int d = producer(g, g->nodes[e].in[0]);
    if (sole_consumer(g, out0(g, d)) != e)
        return false;
    int x = -1;
    if (is_op(g, d, "Div") && const_scalar(g, g->nodes[d].in[1], sqrt(2.0)))
        x = g->nodes[d].in[0];
    else if (is_op(g, d, "Mul") && const_scalar(g, g->nodes[d].in[1], sqrt(0.5)))
        x = g->nodes[d].in[0];
    int add = sole_consumer(g, out0(g, e));
    if (x < 0 || !is_op(g, add, "Add") || !const_scalar(g, other_operand(g, add, out0(g, e)), 1.0))
        return false;
    int m1 = sole_consumer(g, out0(g, add));
    if (!is_op(g, m1, "Mul"))
        return false;
    add_member(m, d);
    add_member(m, e);
    add_member(m, add);
    int other = other_operand(g, m1, out0(g, add));
    int half = producer(g, other);
    if (other == x || const_scalar(g, other, 0.5)) { /* (x * a) * 0.5 or (a * 0.5) * x */
        int m2 = sole_consumer(g, out0(g, m1));
        int want = other == x ? -2 : x;
        if (!is_op(g, m2, "Mul"))
            return false;
        int o = other_operand(g, m2, out0(g, m1));
        if (!(want == -2 ? const_scalar(g, o, 0.5) : o == want))
            return false;
        add_member(m, m1);
        add_member(m, m2);
    } else if (is_op(g, half, "Mul") && sole_consumer(g, other) == m1 &&
               other_operand(g, half, x) >= 0 && const_scalar(g, other_operand(g, half, x), 0.5)) {
        add_member(m, half); /* a * (x * 0.5) */
        add_member(m, m1);
    } else {
        return false;
    }
    m->inputs[m->n_inputs++] = x;
    return true;
}

/* mean = ReduceMean(x); d = x - mean; var = ReduceMean(d^2); y = d / Sqrt(var + eps) * scale
 * + bias, rooted at the first ReduceMean. */
static bool match_layer_norm(const kn_graph *g, int r1, match *m) {
    if (!is_op(g, r1, "ReduceMean"))
        return false;
    int x = g->nodes[r1].in[0];
    int sub = sole_consumer(g, out0(g, r1));
    if (!is_op(g, sub, "Sub") || g->nodes[sub].in[0] != x || g->nodes[sub].in[1] != out0(g, r1))
        return false;
    int d = out0(g, sub), pw = -1, div = -1;
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead || n->n_in < 1 || n->in[0] != d)
            continue;
        if (is_op(g, i, "Pow") && const_scalar(g, n->in[1], 2.0) && pw < 0)
            pw = i;
        else if (is_op(g, i, "Div") && div < 0)
            div = i;
        else
            return false;
    }
    if (pw < 0 || div < 0 || g->values[d].is_output)
        return false;
    int r2 = sole_consumer(g, out0(g, pw));
    int add = is_op(g, r2, "ReduceMean") ? sole_consumer(g, out0(g, r2)) : -1;
    int eps = is_op(g, add, "Add") ? other_operand(g, add, out0(g, r2)) : -1;
    int sq = eps >= 0 && kn_value_is_const(&g->values[eps]) ? sole_consumer(g, out0(g, add)) : -1;
    if (!is_op(g, sq, "Sqrt") || g->nodes[div].in[1] != out0(g, sq) ||
        sole_consumer(g, out0(g, sq)) != div)
        return false;
    int mul = sole_consumer(g, out0(g, div));
    int scale = is_op(g, mul, "Mul") ? other_operand(g, mul, out0(g, div)) : -1;
    if (scale < 0 || !kn_value_is_const(&g->values[scale]))
        return false;
    int order[] = {r1, sub, pw, r2, add, sq, div, mul};
    for (int i = 0; i < 8; i++)
        add_member(m, order[i]);
    m->inputs[m->n_inputs++] = x;
    m->inputs[m->n_inputs++] = scale;
    take_bias(g, m);
    return true;
}

static bool find_match(const kn_graph *g, kn_edit_pattern p, int root, match *m) {
    memset(m, 0, sizeof *m);
    switch (p) {
    case KN_PATTERN_SWISH:
        return match_swish(g, root, m);
    case KN_PATTERN_RELU_SIGMOID_MUL:
        return match_rsm(g, root, m);
    case KN_PATTERN_GELU:
        return match_gelu(g, root, m);
    case KN_PATTERN_LAYER_NORM:
        return match_layer_norm(g, root, m);
    }
    return false;
}

static kiln_status string_attr(kn_graph *g, int node, const char *name, const char *value) {
    kn_attr a = {
        .name = (char *)name, .type = KN_ATTR_STRING, .s = (char *)value, .slen = strlen(value)};
    return kn_node_add_attr(g, node, &a);
}

static kiln_status replace(kn_graph *g, const match *m, const char *plugin, const char *version,
                           const char *ns, const char *domain, int n_attr, const kn_attr *attrs) {
    int last = m->members[m->n_members - 1];
    int y = out0(g, last);
    char name[600];
    snprintf(name, sizeof name, "%.500s_%.60s", g->nodes[last].name, plugin);
    for (int k = 2; kn_edit_find_node(g, name) >= 0; k++)
        snprintf(name, sizeof name, "%.500s_%.60s_%d", g->nodes[last].name, plugin, k);
    for (int i = 0; i < m->n_members; i++)
        g->nodes[m->members[i]].dead = true;
    int node = kn_graph_add_node(g, name, plugin, domain, 1, m->n_inputs, m->inputs, 1, &y);
    if (node < 0)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory replacing a pattern");
    if (version != NULL)
        KN_TRY(string_attr(g, node, "plugin_version", version));
    if (ns != NULL)
        KN_TRY(string_attr(g, node, "plugin_namespace", ns));
    for (int i = 0; i < n_attr; i++)
        KN_TRY(kn_node_add_attr(g, node, &attrs[i]));
    return KILN_OK;
}

kiln_status kn_edit_replace_pattern(kn_graph *g, kn_edit_pattern pattern, const char *plugin,
                                    const char *version, const char *plugin_namespace,
                                    const char *domain, int n_attr, const kn_attr *attrs,
                                    int *count) {
    if (plugin == NULL || plugin[0] == '\0')
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "replace-pattern: no plugin name given");
    const char *dom = domain != NULL ? domain : "kiln.plugins";
    if (dom[0] == '\0')
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "replace-pattern: a plugin node needs a domain of its own, not the "
                        "default ONNX domain");
    int found = 0, n0 = g->n_nodes;
    for (int i = 0; i < n0; i++) {
        match m;
        if (!find_match(g, pattern, i, &m))
            continue;
        KN_TRY(replace(g, &m, plugin, version, plugin_namespace, dom, n_attr, attrs));
        found++;
    }
    if (count != NULL)
        *count = found;
    /* Dead members still name their outputs: drop them before sorting. */
    KN_TRY(kn_graph_compact(g));
    return kn_graph_toposort(g);
}
