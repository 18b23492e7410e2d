/* Fuse exporters' attention into kiln.Attention (the pattern is in passes.h). The P.V MatMul
 * becomes the fused node in place (it already sits after everything the pattern reads and
 * carries the placement attributes); the other nodes of the pattern are marked dead and the
 * transposes feeding it die with them unless something else reads them. */
#include "passes/passes.h"

#include "core/alloc.h"
#include "ir/placement.h"
#include "ops/op.h"

#include <string.h>

typedef struct matcher {
    kn_graph *g;
    int *uses; /* consumers per value */
} matcher;

static bool is_op(const kn_node *n, const char *op) {
    return !n->dead && n->domain[0] == '\0' && strcmp(n->op_type, op) == 0;
}

/* The node producing v when it is of op and v has that single consumer (not an output). */
static int single_use_producer(const matcher *m, int v, const char *op) {
    if (v < 0 || m->g->values[v].is_output || m->uses[v] != 1)
        return -1;
    int p = m->g->values[v].producer;
    return p >= 0 && is_op(&m->g->nodes[p], op) && m->g->nodes[p].n_out == 1 ? p : -1;
}

/* The input of a Transpose producing v with exactly this 4-D perm, or -1. */
static int transposed_from(const matcher *m, int v, const int64_t perm[4], int *node) {
    if (v < 0)
        return -1;
    int p = m->g->values[v].producer;
    if (p < 0 || !is_op(&m->g->nodes[p], "Transpose") || m->g->nodes[p].n_in != 1)
        return -1;
    const int64_t *got;
    if (kn_attr_ints(&m->g->nodes[p], "perm", &got) != 4)
        return -1;
    for (int i = 0; i < 4; i++)
        if (got[i] != perm[i])
            return -1;
    int x = m->g->nodes[p].in[0];
    if (x < 0 || m->g->values[x].rank != 4 || m->g->values[x].dtype != KILN_DTYPE_FLOAT32)
        return -1;
    *node = p;
    return x;
}

static bool const_scalar(const kn_graph *g, int v, float *out) {
    kn_shape s;
    if (v < 0 || g->values[v].dtype != KILN_DTYPE_FLOAT32 || !kn_value_is_const(&g->values[v]) ||
        !kn_value_shape(&g->values[v], &s) || kn_shape_numel(&s) != 1)
        return false;
    *out = *(const float *)g->values[v].data;
    return true;
}

static bool same_dims(const kn_value *a, const kn_value *b) {
    if (a->rank < 0 || a->rank != b->rank)
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

/* Whether every node of the pattern sits where node `at` does. */
static bool one_place(const kn_graph *g, const int *nodes, int n, int at) {
    for (int i = 0; i < n; i++)
        if (nodes[i] >= 0 && !kn_nodes_same_place(&g->nodes[nodes[i]], &g->nodes[at]))
            return false;
    return true;
}

static void drop(matcher *m, int node) {
    kn_node *n = &m->g->nodes[node];
    for (int j = 0; j < n->n_in; j++)
        if (n->in[j] >= 0)
            m->uses[n->in[j]]--;
    n->dead = true;
}

/* The Q.K MatMul behind the scores v (through an optional Mul or Div by a scalar constant,
 * whose node goes to *mul and factor to *scale), or -1. */
static int scores_of(const matcher *m, int v, float *scale, int *mul) {
    const kn_graph *g = m->g;
    *scale = 1.0f;
    *mul = -1;
    int sc = single_use_producer(m, v, "Mul");
    if (sc < 0)
        sc = single_use_producer(m, v, "Div");
    if (sc >= 0) {
        const kn_node *s = &g->nodes[sc];
        if (s->n_in != 2)
            return -1;
        bool div = strcmp(s->op_type, "Div") == 0;
        float f;
        if (const_scalar(g, s->in[1], &f) && (!div || f != 0.0f)) {
            v = s->in[0];
            *scale = div ? 1.0f / f : f;
        } else if (!div && const_scalar(g, s->in[0], &f)) {
            v = s->in[1];
            *scale = f;
        } else {
            return -1;
        }
        *mul = sc;
    }
    int qk = single_use_producer(m, v, "MatMul");
    return qk >= 0 && g->nodes[qk].n_in == 2 ? qk : -1;
}

/* The pattern ending in the P.V MatMul pv, fused when it is all there. */
static kiln_status try_fuse(matcher *m, int pv) {
    kn_graph *g = m->g;
    static const int64_t heads[4] = {0, 2, 1, 3}, keys[4] = {0, 2, 3, 1};
    const kn_node *n = &g->nodes[pv];
    if (n->n_in != 2 || n->n_out != 1)
        return KILN_OK;
    int t_v = -1, t_q = -1, t_k = -1, t_o = -1, mul = -1, add = -1;
    int v = transposed_from(m, n->in[1], heads, &t_v);
    int sm = single_use_producer(m, n->in[0], "Softmax");
    int y = n->out[0];
    if (v < 0 || sm < 0 || y < 0 || g->values[y].is_output || m->uses[y] != 1)
        return KILN_OK;
    /* the consumer of y: the transpose back to [B, S, H, D] */
    for (int i = pv + 1; i < g->n_nodes && t_o < 0; i++)
        for (int j = 0; j < g->nodes[i].n_in; j++)
            if (g->nodes[i].in[j] == y && !g->nodes[i].dead)
                t_o = i;
    const int64_t *perm;
    if (t_o < 0 || !is_op(&g->nodes[t_o], "Transpose") ||
        kn_attr_ints(&g->nodes[t_o], "perm", &perm) != 4 || memcmp(perm, heads, sizeof heads) != 0)
        return KILN_OK;
    int rank = g->values[g->nodes[sm].in[0]].rank;
    int64_t axis = kn_attr_int(&g->nodes[sm], "axis", g->nodes[sm].opset >= 13 ? -1 : 1);
    if (rank != 4 || (axis != -1 && axis != 3))
        return KILN_OK;
    /* back from the Softmax: [Add mask] <- [Mul | Div scale] <- MatMul(q^T, k^T^T) */
    int x = g->nodes[sm].in[0], mask = -1, qk = -1;
    float scale = 1.0f;
    add = single_use_producer(m, x, "Add");
    if (add >= 0) {
        const kn_node *a = &g->nodes[add];
        if (a->n_in != 2)
            return KILN_OK;
        for (int side = 0; side < 2 && qk < 0; side++) {
            int scores = a->in[side];
            qk = scores_of(m, scores, &scale, &mul);
            mask = a->in[1 - side];
            if (qk >= 0 && !same_dims(&g->values[scores], &g->values[x]))
                return KILN_OK;
        }
        if (qk < 0 || mask < 0 || g->values[mask].dtype != KILN_DTYPE_FLOAT32 ||
            g->values[mask].rank > 4)
            return KILN_OK;
    } else {
        qk = scores_of(m, x, &scale, &mul);
        if (qk < 0)
            return KILN_OK;
    }
    int q = transposed_from(m, g->nodes[qk].in[0], heads, &t_q);
    int k = transposed_from(m, g->nodes[qk].in[1], keys, &t_k);
    if (q < 0 || k < 0)
        return KILN_OK;
    int nodes[] = {t_q, t_k, t_v, qk, mul, add, sm, t_o};
    /* a device's kernel only: the host's is a plain reference, slower than the products */
    if (!one_place(g, nodes, (int)(sizeof nodes / sizeof nodes[0]), pv) ||
        strcmp(kn_node_backend(n), "cpu") == 0 ||
        !kn_backend_has_kernel(kn_node_backend(n), KN_DOMAIN, "Attention"))
        return KILN_OK;

    /* Rewrite pv in place. */
    char *op = kn_strdup("Attention"), *domain = kn_strdup(KN_DOMAIN);
    int *in = kn_malloc(4 * sizeof(int));
    if (op == NULL || domain == NULL || in == NULL) {
        kn_free(op);
        kn_free(domain);
        kn_free(in);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory fusing attention");
    }
    int yo = g->nodes[t_o].out[0];
    drop(m, t_o);
    drop(m, sm);
    drop(m, qk);
    if (mul >= 0)
        drop(m, mul);
    if (add >= 0)
        drop(m, add);
    kn_node *f = &g->nodes[pv];
    for (int j = 0; j < f->n_in; j++)
        m->uses[f->in[j]]--;
    in[0] = q;
    in[1] = k;
    in[2] = v;
    in[3] = mask;
    for (int j = 0; j < 4; j++)
        if (in[j] >= 0)
            m->uses[in[j]]++;
    kn_free(f->in);
    f->in = in;
    f->n_in = mask >= 0 ? 4 : 3;
    kn_free(f->op_type);
    kn_free(f->domain);
    f->op_type = op;
    f->domain = domain;
    f->opset = 1;
    g->values[y].producer = -1;
    f->out[0] = yo;
    g->values[yo].producer = pv;
    /* the transposes of q, k and v die when nothing else reads them */
    int ts[] = {t_q, t_k, t_v};
    for (int i = 0; i < 3; i++)
        if (!g->nodes[ts[i]].dead && m->uses[g->nodes[ts[i]].out[0]] == 0 &&
            !g->values[g->nodes[ts[i]].out[0]].is_output)
            drop(m, ts[i]);
    kn_attr a = {.name = "scale", .type = KN_ATTR_FLOAT, .f = scale};
    return kn_node_add_attr(g, pv, &a);
}

kiln_status kn_pass_fuse_attention(kn_graph *g) {
    matcher m = {.g = g, .uses = kn_graph_value_uses(g)};
    if (m.uses == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory fusing attention");
    kiln_status rc = KILN_OK;
    for (int i = 0; i < g->n_nodes && rc == KILN_OK; i++)
        if (is_op(&g->nodes[i], "MatMul"))
            rc = try_fuse(&m, i);
    kn_free(m.uses);
    return rc;
}
