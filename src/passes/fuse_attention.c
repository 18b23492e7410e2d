/* Fuse exporters' attention into kiln.Attention (the pattern is in passes.h). The P.V MatMul
 * becomes the fused node in place (it already sits after everything the pattern reads and
 * carries the placement attributes); the other nodes of the pattern are marked dead and the
 * transposes feeding it die with them unless something else reads them. */
#include "passes/passes.h"

#include "core/alloc.h"
#include "ir/placement.h"
#include "ops/op.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* KILN_MERGE_QKV=0 keeps the three projections of a fused attention apart (merge_projections
 * merges them by default: BERT-base fp16 on the H200 0.630 -> 0.519 ms at batch 1, 1.745 ->
 * 1.658 ms at 32, docs/perf-notes-transformer.md). */
static bool merge_on(void) {
    const char *e = getenv("KILN_MERGE_QKV");
    return e == NULL || strcmp(e, "0") != 0;
}

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

/* --- one product for the three projections of a fused attention --- */

/* Whether v is a float32 constant of rank `rank`, its shape into *s. */
static bool const_f32(const kn_graph *g, int v, int rank, kn_shape *s) {
    return v >= 0 && g->values[v].dtype == KILN_DTYPE_FLOAT32 && kn_value_is_const(&g->values[v]) &&
           kn_value_shape(&g->values[v], s) && s->rank == rank;
}

/* The projection x W + b behind v through a Reshape, each intermediate read once: the
 * Reshape, Add and MatMul nodes into nodes[0..2], the constants W [din, dout] and b [dout]
 * (float32) into w and b; returns x, or -1. */
static int projection_of(const matcher *m, int v, int nodes[3], int *w, int *b) {
    const kn_graph *g = m->g;
    int rs = single_use_producer(m, v, "Reshape");
    int add =
        rs >= 0 && g->nodes[rs].n_in == 2 ? single_use_producer(m, g->nodes[rs].in[0], "Add") : -1;
    if (add < 0 || g->nodes[add].n_in != 2)
        return -1;
    for (int side = 0; side < 2; side++) {
        int mm = single_use_producer(m, g->nodes[add].in[side], "MatMul");
        kn_shape ws, bs;
        if (mm < 0 || g->nodes[mm].n_in != 2 || !const_f32(g, g->nodes[mm].in[1], 2, &ws) ||
            !const_f32(g, g->nodes[add].in[1 - side], 1, &bs) || bs.d[0] != ws.d[1])
            continue;
        nodes[0] = rs;
        nodes[1] = add;
        nodes[2] = mm;
        *w = g->nodes[mm].in[1];
        *b = g->nodes[add].in[1 - side];
        return g->nodes[mm].in[0];
    }
    return -1;
}

/* A new float32 value shaped like `like` with its last dim `last`. */
static int value_like(kn_graph *g, int like, int64_t last) {
    int v = kn_graph_add_value(g, NULL);
    if (v < 0)
        return -1;
    const kn_value *l = &g->values[like];
    kn_value *nv = &g->values[v];
    nv->dtype = KILN_DTYPE_FLOAT32;
    nv->rank = l->rank;
    for (int i = 0; i < l->rank; i++) {
        nv->dims[i].value = l->dims[i].value;
        nv->dims[i].sym = NULL;
        if (l->dims[i].sym != NULL && (nv->dims[i].sym = kn_strdup(l->dims[i].sym)) == NULL)
            return -1;
    }
    if (l->rank > 0) {
        kn_free(nv->dims[l->rank - 1].sym);
        nv->dims[l->rank - 1].sym = NULL;
        nv->dims[l->rank - 1].value = last;
    }
    return v;
}

/* A new float32 constant [rows, cols] whose columns are the n matrices src[i] [rows,
 * widths[i]] side by side (rows 1: vectors). */
static int concat_columns(kn_graph *g, const int *src, const int64_t *widths, int n, int64_t rows,
                          int rank) {
    int64_t cols = 0;
    for (int i = 0; i < n; i++)
        cols += widths[i];
    float *d = kn_malloc((size_t)(rows * cols) * sizeof(float));
    if (d == NULL)
        return -1;
    for (int64_t r = 0, off = 0; r < rows; r++, off = 0)
        for (int i = 0; i < n; off += widths[i], i++)
            memcpy(d + r * cols + off, (const float *)g->values[src[i]].data + r * widths[i],
                   (size_t)widths[i] * sizeof(float));
    kn_tensor t = {.dtype = KILN_DTYPE_FLOAT32, .data = d};
    t.shape.rank = rank;
    t.shape.d[0] = rank == 2 ? rows : cols;
    t.shape.d[1] = cols;
    int v = kn_graph_add_value(g, NULL);
    kiln_status rc = v >= 0 ? kn_value_set_const(g, v, &t) : KILN_ERR_OUT_OF_MEMORY;
    kn_free(d);
    return rc == KILN_OK ? v : -1;
}

/* The fixed heads and head size of a [B, S, H, D] value, or false. */
static bool heads_of(const kn_graph *g, int v, int64_t *h, int64_t *d) {
    const kn_value *x = &g->values[v];
    if (x->rank != 4 || x->dims[2].sym != NULL || x->dims[3].sym != NULL || x->dims[2].value <= 0 ||
        x->dims[3].value <= 0)
        return false;
    *h = x->dims[2].value;
    *d = x->dims[3].value;
    return true;
}

/* Attention node att whose q, k and v are each Reshape(x W + b) of one x into [B, S, H, D], the
 * products and sums on att's device: the three products become one x [Wq Wk Wv] + [bq bk bv]
 * whose [B, S, 3 H D] result att reads as q, k and v through strides (its packed form, attribute
 * heads), so nothing is copied. At batch 1 of BERT-base (M = 128) the three products of d x d
 * leave most of an H200 idle; one of d x 3d fills three times as much of it, in one launch. */
static kiln_status merge_projections(matcher *m, int att) {
    kn_graph *g = m->g;
    int nodes[3][3], w[3], b[3], x = -1;
    int64_t widths[3], din = -1, heads = -1, hd = -1;
    for (int i = 0; i < 3; i++) {
        int xi = g->nodes[att].n_in > i
                     ? projection_of(m, g->nodes[att].in[i], nodes[i], &w[i], &b[i])
                     : -1;
        kn_shape ws;
        int64_t h, d;
        if (xi < 0 || (i > 0 && xi != x) || !const_f32(g, w[i], 2, &ws) ||
            (i > 0 && ws.d[0] != din) || !one_place(g, nodes[i], 3, att) ||
            !heads_of(g, g->nodes[att].in[i], &h, &d) || h * d != ws.d[1] ||
            (i > 0 && (h != heads || d != hd)))
            return KILN_OK;
        x = xi;
        din = ws.d[0];
        widths[i] = ws.d[1];
        heads = h;
        hd = d;
    }
    if (!kn_backend_has_kernel(kn_node_backend(&g->nodes[att]), "", "MatMul"))
        return KILN_OK;
    int wv = concat_columns(g, w, widths, 3, din, 2);
    int bv = concat_columns(g, b, widths, 3, 1, 1);
    int64_t total = widths[0] + widths[1] + widths[2];
    int mo = value_like(g, g->nodes[nodes[0][2]].out[0], total);
    int ao = value_like(g, g->nodes[nodes[0][1]].out[0], total);
    if (wv < 0 || bv < 0 || mo < 0 || ao < 0)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory merging attention projections");
    char name[256];
    snprintf(name, sizeof name, "%s/qkv", g->nodes[nodes[0][2]].name);
    int mm_in[2] = {x, wv}, add_in[2] = {mo, bv};
    int mm_op = g->nodes[nodes[0][2]].opset, add_op = g->nodes[nodes[0][1]].opset;
    int mm = kn_graph_add_node(g, name, "MatMul", "", mm_op, 2, mm_in, 1, &mo);
    snprintf(name, sizeof name, "%s/qkv", g->nodes[nodes[0][1]].name);
    int add = mm < 0 ? -1 : kn_graph_add_node(g, name, "Add", "", add_op, 2, add_in, 1, &ao);
    if (add < 0)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory merging attention projections");
    KN_TRY(kn_node_copy_placement(g, mm, nodes[0][2]));
    KN_TRY(kn_node_copy_placement(g, add, nodes[0][1]));
    /* att reads the packed sums; the Reshapes, sums and products of the three go */
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            g->nodes[nodes[i][j]].dead = true;
    kn_node *a = &g->nodes[att];
    a->in[0] = ao;
    a->in[1] = a->in[2] = -1;
    kn_attr at = {.name = "heads", .type = KN_ATTR_INT, .i = heads};
    return kn_node_add_attr(g, att, &at);
}

kiln_status kn_pass_fuse_attention(kn_graph *g) {
    matcher m = {.g = g, .uses = kn_graph_value_uses(g)};
    if (m.uses == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory fusing attention");
    kiln_status rc = KILN_OK;
    for (int i = 0; i < g->n_nodes && rc == KILN_OK; i++)
        if (is_op(&g->nodes[i], "MatMul"))
            rc = try_fuse(&m, i);
    /* the projections of each fused node (new nodes go at the end; the loop stops before them,
     * and the graph is compacted and sorted again after: dead-node elimination sweeps in that
     * order, and sorting refuses the dead nodes the fusion left reading values it re-produced) */
    int n = merge_on() ? g->n_nodes : 0;
    for (int i = 0; i < n && rc == KILN_OK; i++)
        if (!g->nodes[i].dead && strcmp(g->nodes[i].domain, KN_DOMAIN) == 0 &&
            strcmp(g->nodes[i].op_type, "Attention") == 0)
            rc = merge_projections(&m, i);
    kn_free(m.uses);
    if (rc == KILN_OK && n > 0 && g->n_nodes > n && (rc = kn_graph_compact(g)) == KILN_OK)
        rc = kn_graph_toposort(g);
    return rc;
}
