/* A residual Add between int8 layers into the kiln.QConv before it (see passes.h):
 *   QConv -> c_q -> DequantizeLinear -> Add <- DequantizeLinear <- r_q
 *                                       Add -> [Relu] -> QuantizeLinear -> o_q
 * becomes one QConv writing o_q, which reads r_q (and its scale and zero point) as inputs 9 to
 * 11 and c's scale and zero point as 12 and 13: the conv's result is rounded to c's int8 grid
 * as before, then r is added in float, then the activation and o's quantization, so the fused
 * node computes what the nodes it replaces did, in one pass over the block's output. Only
 * where r_q has the conv output's shape, so the kernel adds element by element. */
#include "passes/passes.h"

#include "core/alloc.h"
#include "ops/op.h"

#include <string.h>

/* The node that alone reads v, once (v no graph output), or -1. */
static int sole_reader(const kn_graph *g, int v) {
    if (v < 0 || g->values[v].is_output)
        return -1;
    int found = -1, reads = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        for (int j = 0; !n->dead && j < n->n_in; j++)
            if (n->in[j] == v) {
                found = i;
                reads++;
            }
    }
    return reads == 1 ? found : -1;
}

static bool scalar_const(const kn_graph *g, int v) {
    if (v < 0 || !kn_value_is_const(&g->values[v]))
        return false;
    kn_tensor t = kn_value_tensor(&g->values[v]);
    return kn_tensor_numel(&t) == 1;
}

/* A DequantizeLinear of constant scalar scale and zero point. */
static bool plain_dq(const kn_graph *g, const kn_node *d) {
    return d->n_in >= 3 && scalar_const(g, d->in[1]) && scalar_const(g, d->in[2]);
}

static bool same_shape(const kn_value *a, const kn_value *b) {
    if (a->rank < 0 || a->rank != b->rank)
        return false;
    for (int d = 0; d < a->rank; d++) {
        const kn_dim *x = &a->dims[d], *y = &b->dims[d];
        if (x->sym == NULL ? (y->sym != NULL || x->value != y->value)
                           : (y->sym == NULL || strcmp(x->sym, y->sym) != 0))
            return false;
    }
    return true;
}

static kiln_status try_residual(kn_graph *g, int c) {
    kn_node *conv = &g->nodes[c];
    if (conv->n_in != 9 || kn_node_attr(conv, "kiln_activation") != NULL)
        return KILN_OK;
    int dc = sole_reader(g, conv->out[0]);
    if (dc < 0 || !kn_node_is(&g->nodes[dc], "", "DequantizeLinear") || !plain_dq(g, &g->nodes[dc]))
        return KILN_OK;
    int add = sole_reader(g, g->nodes[dc].out[0]);
    if (add < 0 || !kn_node_is(&g->nodes[add], "", "Add") || g->nodes[add].n_in != 2)
        return KILN_OK;
    const kn_node *a = &g->nodes[add];
    int other = a->in[0] == g->nodes[dc].out[0] ? a->in[1] : a->in[0];
    int dr = other >= 0 ? g->values[other].producer : -1;
    if (dr < 0 || !kn_node_is(&g->nodes[dr], "", "DequantizeLinear") || !plain_dq(g, &g->nodes[dr]))
        return KILN_OK;
    int relu = -1, q = sole_reader(g, a->out[0]);
    if (q >= 0 && kn_node_is(&g->nodes[q], "", "Relu")) {
        relu = q;
        q = sole_reader(g, g->nodes[relu].out[0]);
    }
    if (q < 0 || !kn_node_is(&g->nodes[q], "", "QuantizeLinear") || g->nodes[q].n_in < 3 ||
        !scalar_const(g, g->nodes[q].in[1]) || !scalar_const(g, g->nodes[q].in[2]))
        return KILN_OK;
    const kn_node *dn = &g->nodes[dr];
    if (!same_shape(&g->values[dn->out[0]], &g->values[g->nodes[dc].out[0]]))
        return KILN_OK;
    int *in = kn_malloc(14 * sizeof(int));
    if (in == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory fusing a residual Add");
    memcpy(in, conv->in, 9 * sizeof(int));
    in[6] = g->nodes[q].in[1];
    in[7] = g->nodes[q].in[2];
    in[9] = dn->in[0];
    in[10] = dn->in[1];
    in[11] = dn->in[2];
    in[12] = g->nodes[dc].in[1];
    in[13] = g->nodes[dc].in[2];
    kn_free(conv->in);
    conv->in = in;
    conv->n_in = 14;
    int out = g->nodes[q].out[0];
    g->values[conv->out[0]].producer = -1;
    conv->out[0] = out;
    g->values[out].producer = c;
    g->nodes[dc].dead = g->nodes[add].dead = g->nodes[q].dead = true;
    /* the mark fp32 products carry for a fused residual (inspect shows it) */
    KN_TRY(
        kn_node_add_attr(g, c, &(kn_attr){.name = "kiln_residual", .type = KN_ATTR_INT, .i = 1}));
    if (relu >= 0) {
        g->nodes[relu].dead = true;
        kn_attr act = {.name = "kiln_activation", .type = KN_ATTR_STRING, .s = "Relu"};
        act.slen = strlen(act.s);
        KN_TRY(kn_node_add_attr(g, c, &act));
    }
    return KILN_OK;
}

kiln_status kn_pass_fuse_qadd(kn_graph *g) {
    for (int i = 0; i < g->n_nodes; i++)
        if (kn_node_is(&g->nodes[i], KN_DOMAIN, "QConv"))
            KN_TRY(try_residual(g, i));
    /* A conv may now read a residual made by a node after it (dead-node elimination walks in
     * order), so the fused nodes go first and the rest is sorted. */
    KN_TRY(kn_graph_compact(g));
    return kn_graph_toposort(g);
}
