/* Fold what follows a Conv / Gemm / MatMul into its epilogue (conventions in passes.h):
 * first a residual Add whose other operand has the output's shape, then one activation (Relu,
 * Clip with constant bounds, Sigmoid, LeakyRelu, HardSigmoid, HardSwish, Gelu, Mish, Tanh, or
 * x * Sigmoid(x) as Swish). A step is taken only when the intermediate value has that single
 * consumer and is not a graph output. When both operands of an Add are such products, the later
 * one takes the Add so that the graph stays in order. */
#include "passes/passes.h"

#include "core/alloc.h"
#include "ir/placement.h"
#include "ops/op.h"

#include <float.h>
#include <stdio.h>
#include <string.h>

typedef struct fuser {
    kn_graph *g;
    int *uses; /* consumers per value (an input listed twice counts twice) */
} fuser;

static bool is_op(const kn_node *n, const char *op) {
    return !n->dead && n->domain[0] == '\0' && strcmp(n->op_type, op) == 0;
}

static bool is_product(const kn_node *n) {
    return is_op(n, "Conv") || is_op(n, "Gemm") || is_op(n, "MatMul");
}

static bool same_shape(const kn_value *a, const kn_value *b) {
    if (a->rank < 0 || a->rank != b->rank || a->dtype != b->dtype)
        return false;
    for (int i = 0; i < a->rank; i++) {
        const kn_dim *x = &a->dims[i], *y = &b->dims[i];
        if (x->sym != NULL || y->sym != NULL) {
            if (x->sym == NULL || y->sym == NULL || strcmp(x->sym, y->sym) != 0)
                return false;
        } else if (x->value < 0 || x->value != y->value) {
            return false;
        }
    }
    return true;
}

static bool same_place(const kn_graph *g, int a, int b) {
    return strcmp(kn_node_backend(&g->nodes[a]), kn_node_backend(&g->nodes[b])) == 0;
}

/* The fused form of an ONNX product: kiln.FusedConv, kiln.FusedGemm, kiln.FusedMatMul. */
static void fused_name(const kn_node *n, char *buf, size_t size) {
    snprintf(buf, size, "Fused%s", n->op_type);
}

/* Whether the backend node i is placed on runs the fused form of it. */
static bool fusible_here(const kn_graph *g, int i) {
    char name[32];
    fused_name(&g->nodes[i], name, sizeof name);
    return kn_backend_has_kernel(kn_node_backend(&g->nodes[i]), KN_DOMAIN, name);
}

/* The only consumer of v, or -1 (several, none, or v is a graph output). */
static int sole_consumer(const fuser *f, int v) {
    return kn_graph_sole_consumer(f->g, f->uses, v);
}

static kiln_status add_attr(kn_graph *g, int node, kn_attr a) {
    if (a.type == KN_ATTR_STRING)
        a.slen = strlen(a.s);
    return kn_node_add_attr(g, node, &a);
}

/* Node pi now writes the output of node ci, which dies. */
static void take_output(fuser *f, int pi, int ci) {
    kn_graph *g = f->g;
    int old = g->nodes[pi].out[0], y = g->nodes[ci].out[0];
    g->nodes[pi].out[0] = y;
    g->values[y].producer = pi;
    g->values[old].producer = -1;
    for (int j = 0; j < g->nodes[ci].n_in; j++)
        if (g->nodes[ci].in[j] >= 0)
            f->uses[g->nodes[ci].in[j]]--;
    g->nodes[ci].dead = true;
}

static kiln_status try_residual(fuser *f, int pi) {
    kn_graph *g = f->g;
    int y = g->nodes[pi].out[0], ci = sole_consumer(f, y);
    if (ci < 0 || !is_op(&g->nodes[ci], "Add") || g->nodes[ci].n_in != 2 ||
        g->nodes[ci].n_out != 1 || !same_place(g, pi, ci))
        return KILN_OK;
    const kn_node *add = &g->nodes[ci];
    int other = add->in[0] == y ? add->in[1] : add->in[0];
    if (other < 0 || other == y || !same_shape(&g->values[y], &g->values[other]) ||
        !same_shape(&g->values[y], &g->values[add->out[0]]) ||
        g->values[y].dtype != KILN_DTYPE_FLOAT32)
        return KILN_OK;
    int op = g->values[other].producer;
    if (op > pi && is_product(&g->nodes[op]) &&
        kn_node_attr(&g->nodes[op], "kiln_activation") == NULL &&
        kn_node_attr(&g->nodes[op], "kiln_residual") == NULL && sole_consumer(f, other) == ci)
        return KILN_OK; /* the later product takes this Add */
    kn_node *p = &g->nodes[pi];
    int slot = strcmp(p->op_type, "MatMul") == 0 ? 2 : 3;
    if (p->n_in > slot && p->in[slot] >= 0)
        return KILN_OK;
    if (p->n_in > slot) { /* a MatMul whose bias took input 3 */
        p->in[slot] = other;
    } else {
        int *in =
            kn_realloc(p->in, (size_t)p->n_in * sizeof(int), (size_t)(slot + 1) * sizeof(int));
        if (in == NULL)
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory fusing a residual Add");
        for (int i = p->n_in; i < slot; i++)
            in[i] = -1;
        in[slot] = other;
        p->in = in;
        p->n_in = slot + 1;
    }
    f->uses[other]++;
    KN_TRY(add_attr(g, pi, (kn_attr){.name = "kiln_residual", .type = KN_ATTR_INT, .i = 1}));
    take_output(f, pi, ci);
    return KILN_OK;
}

/* MatMul(A, B[K, N]) + constant [N] (or [1, ..., 1, N]): the Add becomes the GEMM's column
 * bias. */
static kiln_status try_bias(fuser *f, int pi) {
    kn_graph *g = f->g;
    kn_node *p = &g->nodes[pi];
    if (!is_op(p, "MatMul") || p->n_in != 2 || p->in[1] < 0)
        return KILN_OK;
    const kn_value *b = &g->values[p->in[1]];
    int y = p->out[0], ci = sole_consumer(f, y);
    if (b->rank != 2 || b->dims[1].sym != NULL || ci < 0 || !is_op(&g->nodes[ci], "Add") ||
        !same_place(g, pi, ci) || g->nodes[ci].n_in != 2 || g->nodes[ci].n_out != 1 ||
        g->values[y].dtype != KILN_DTYPE_FLOAT32 ||
        !same_shape(&g->values[y], &g->values[g->nodes[ci].out[0]]))
        return KILN_OK;
    const kn_node *add = &g->nodes[ci];
    int other = add->in[0] == y ? add->in[1] : add->in[0];
    if (other < 0 || other == y)
        return KILN_OK;
    const kn_value *v = &g->values[other];
    if (v->data == NULL || v->dtype != KILN_DTYPE_FLOAT32 || v->rank < 1 ||
        v->rank > g->values[y].rank || v->dims[v->rank - 1].value != b->dims[1].value)
        return KILN_OK;
    for (int d = 0; d + 1 < v->rank; d++)
        if (v->dims[d].value != 1)
            return KILN_OK;
    int *in = kn_realloc(p->in, (size_t)p->n_in * sizeof(int), 4 * sizeof(int));
    if (in == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory fusing a bias Add");
    in[2] = -1;
    in[3] = other;
    p->in = in;
    p->n_in = 4;
    f->uses[other]++;
    KN_TRY(add_attr(g, pi, (kn_attr){.name = "kiln_bias", .type = KN_ATTR_INT, .i = 1}));
    take_output(f, pi, ci);
    return KILN_OK;
}

static bool const_scalar(const kn_graph *g, int v, float *out) {
    kn_shape s;
    if (v < 0 || g->values[v].dtype != KILN_DTYPE_FLOAT32 || !kn_value_is_const(&g->values[v]) ||
        !kn_value_shape(&g->values[v], &s) || kn_shape_numel(&s) != 1)
        return false;
    *out = *(const float *)g->values[v].data;
    return true;
}

/* Activation node ci reading y: its name and parameters; false if not fusible. */
static bool activation_of(const kn_graph *g, const kn_node *c, int y, const char **name,
                          float *alpha, float *beta) {
    if (c->n_in < 1 || c->in[0] != y || c->n_out != 1)
        return false;
    *alpha = 0.0f;
    *beta = 0.0f;
    if (is_op(c, "Relu") && c->n_in == 1) {
        *name = "Relu";
    } else if (is_op(c, "Sigmoid") && c->n_in == 1) {
        *name = "Sigmoid";
    } else if (is_op(c, "LeakyRelu") && c->n_in == 1) {
        *name = "LeakyRelu";
        *alpha = kn_attr_float(c, "alpha", 0.01f);
    } else if (is_op(c, "HardSigmoid") && c->n_in == 1) {
        *name = "HardSigmoid";
        *alpha = kn_attr_float(c, "alpha", 0.2f);
        *beta = kn_attr_float(c, "beta", 0.5f);
    } else if (is_op(c, "HardSwish") && c->n_in == 1) {
        *name = "HardSwish";
    } else if (is_op(c, "Mish") && c->n_in == 1) {
        *name = "Mish";
    } else if (is_op(c, "Tanh") && c->n_in == 1) {
        *name = "Tanh";
    } else if (is_op(c, "Gelu") && c->n_in == 1) {
        const char *approx = kn_attr_string(c, "approximate", "none");
        if (strcmp(approx, "none") != 0 && strcmp(approx, "tanh") != 0)
            return false;
        *name = approx[0] == 't' ? "GeluTanh" : "Gelu";
    } else if (is_op(c, "Clip")) {
        *name = "Clip";
        *alpha = -FLT_MAX;
        *beta = FLT_MAX;
        if (c->opset < 11) {
            *alpha = kn_attr_float(c, "min", -FLT_MAX);
            *beta = kn_attr_float(c, "max", FLT_MAX);
            return c->n_in == 1;
        }
        if (c->n_in > 1 && c->in[1] >= 0 && !const_scalar(g, c->in[1], alpha))
            return false;
        if (c->n_in > 2 && c->in[2] >= 0 && !const_scalar(g, c->in[2], beta))
            return false;
        return c->n_in <= 3;
    } else {
        return false;
    }
    return true;
}

/* x * Sigmoid(x): y feeds exactly a Sigmoid and a Mul, and the Mul reads y and the Sigmoid. */
static bool swish_of(const fuser *f, int y, int *sig, int *mul) {
    const kn_graph *g = f->g;
    if (y < 0 || g->values[y].is_output || f->uses[y] != 2)
        return false;
    *sig = *mul = -1;
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead || n->n_in < 1)
            continue;
        if (is_op(n, "Sigmoid") && n->n_in == 1 && n->in[0] == y)
            *sig = i;
        else if (is_op(n, "Mul") && n->n_in == 2 && (n->in[0] == y || n->in[1] == y))
            *mul = i;
    }
    if (*sig < 0 || *mul < 0)
        return false;
    int s = g->nodes[*sig].out[0];
    const kn_node *m = &g->nodes[*mul];
    if (g->nodes[*sig].n_out != 1 || m->n_out != 1 || sole_consumer(f, s) != *mul)
        return false;
    return (m->in[0] == y && m->in[1] == s) || (m->in[1] == y && m->in[0] == s);
}

static kiln_status set_activation(fuser *f, int pi, const char *name, float alpha, float beta) {
    KN_TRY(add_attr(
        f->g, pi, (kn_attr){.name = "kiln_activation", .type = KN_ATTR_STRING, .s = (char *)name}));
    KN_TRY(add_attr(f->g, pi, (kn_attr){.name = "kiln_alpha", .type = KN_ATTR_FLOAT, .f = alpha}));
    return add_attr(f->g, pi, (kn_attr){.name = "kiln_beta", .type = KN_ATTR_FLOAT, .f = beta});
}

static kiln_status try_activation(fuser *f, int pi) {
    kn_graph *g = f->g;
    int y = g->nodes[pi].out[0];
    if (g->values[y].dtype != KILN_DTYPE_FLOAT32)
        return KILN_OK;
    int sig, mul;
    if (swish_of(f, y, &sig, &mul) && same_place(g, pi, sig) && same_place(g, pi, mul)) {
        KN_TRY(set_activation(f, pi, "Swish", 0.0f, 0.0f));
        take_output(f, pi, sig);
        take_output(f, pi, mul);
        return KILN_OK;
    }
    int ci = sole_consumer(f, y);
    const char *name;
    float alpha, beta;
    if (ci < 0 || !same_place(g, pi, ci) ||
        !activation_of(g, &g->nodes[ci], y, &name, &alpha, &beta))
        return KILN_OK;
    KN_TRY(set_activation(f, pi, name, alpha, beta));
    take_output(f, pi, ci);
    return KILN_OK;
}

/* A product that took anything becomes its explicit fused op. */
static kiln_status make_explicit(kn_graph *g, int i) {
    kn_node *n = &g->nodes[i];
    if (kn_node_attr(n, "kiln_activation") == NULL && kn_node_attr(n, "kiln_residual") == NULL &&
        kn_node_attr(n, "kiln_bias") == NULL)
        return KILN_OK;
    char name[32];
    fused_name(n, name, sizeof name);
    return kn_node_set_op(n, KN_DOMAIN, name, 1);
}

kiln_status kn_pass_fuse_activations(kn_graph *g) {
    fuser f = {.g = g, .uses = kn_graph_value_uses(g)};
    if (f.uses == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory fusing activations");
    kiln_status rc = KILN_OK;
    for (int i = 0; i < g->n_nodes && rc == KILN_OK; i++) {
        if (!is_product(&g->nodes[i]) || g->nodes[i].n_out != 1 || g->nodes[i].out[0] < 0 ||
            !fusible_here(g, i))
            continue;
        if (kn_node_attr(&g->nodes[i], "kiln_activation") == NULL &&
            kn_node_attr(&g->nodes[i], "kiln_residual") == NULL)
            rc = try_bias(&f, i);
        if (rc == KILN_OK && kn_node_attr(&g->nodes[i], "kiln_activation") == NULL &&
            kn_node_attr(&g->nodes[i], "kiln_residual") == NULL)
            rc = try_residual(&f, i);
        if (rc == KILN_OK && kn_node_attr(&g->nodes[i], "kiln_activation") == NULL)
            rc = try_activation(&f, i);
    }
    for (int i = 0; i < g->n_nodes && rc == KILN_OK; i++)
        if (is_product(&g->nodes[i]))
            rc = make_explicit(g, i);
    kn_free(f.uses);
    return rc;
}
