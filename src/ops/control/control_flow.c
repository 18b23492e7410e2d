/* If, Loop, Scan and SequenceMap: checks of their bodies against the node. Their output shapes come
 * from running a body (a branch taken, a trip count, shapes that change across iterations), so
 * inference always defers them to execution, where the runtime's subgraph executor
 * (runtime/subgraph.c) runs them and learns the shapes. */
#include "ops/infer_util.h"

#include <string.h>

static kiln_status need_body(const kn_node *n, const char *attr, int n_out, const kn_graph **out) {
    const kn_attr *a = kn_node_attr(n, attr);
    if (a == NULL || a->type != KN_ATTR_GRAPH || a->g == NULL)
        return kn_error(KILN_ERR_MODEL, "needs a subgraph attribute '%s'", attr);
    const kn_graph *g = a->g;
    if (g->n_outer > n->n_in)
        return kn_error(KILN_ERR_MODEL,
                        "subgraph '%s' reads %d enclosing values, the node has %d "
                        "inputs",
                        attr, g->n_outer, n->n_in);
    if (n_out >= 0 && g->n_outputs != n_out)
        return kn_error(KILN_ERR_MODEL, "subgraph '%s' has %d outputs; the node needs %d", attr,
                        g->n_outputs, n_out);
    *out = g;
    return KILN_OK;
}

kiln_status kn_infer_if(kn_infer_ctx *c) {
    const kn_graph *t, *e;
    KN_TRY(need_body(c->node, "then_branch", c->n_out, &t));
    KN_TRY(need_body(c->node, "else_branch", c->n_out, &e));
    if (t->n_inputs != t->n_outer || e->n_inputs != e->n_outer || t->n_outer != e->n_outer ||
        c->n_in != 1 + t->n_outer)
        return kn_error(KILN_ERR_MODEL, "its branches take inputs (If's branches take none)");
    if (c->in[0].dtype != KILN_DTYPE_BOOL)
        return kn_error(KILN_ERR_MODEL, "cond is %s; it must be bool",
                        kn_dtype_name(c->in[0].dtype));
    if (kn_tensor_numel(&c->in[0]) != 1)
        return kn_error(KILN_ERR_SHAPE, "cond must hold one element");
    return KN_NEED_DATA;
}

kiln_status kn_infer_loop(kn_infer_ctx *c) {
    const kn_graph *b;
    KN_TRY(need_body(c->node, "body", -1, &b));
    int formal = c->n_in - b->n_outer, carried = formal - 2;
    if (formal < 2 || b->n_inputs - b->n_outer != formal || b->n_outputs != 1 + c->n_out ||
        c->n_out < carried)
        return kn_error(KILN_ERR_MODEL,
                        "its body takes %d inputs and makes %d outputs; with %d loop-carried "
                        "values it needs %d inputs and 1 + %d + scan outputs",
                        b->n_inputs - b->n_outer, b->n_outputs, carried < 0 ? 0 : carried,
                        carried + 2, carried);
    return KN_NEED_DATA;
}

kiln_status kn_infer_scan(kn_infer_ctx *c) {
    const kn_graph *b;
    KN_TRY(need_body(c->node, "body", -1, &b));
    int64_t m = kn_attr_int(c->node, "num_scan_inputs", -1);
    /* Scan-8's first input, sequence_lens, is not the body's */
    int formal = c->n_in - b->n_outer - (c->node->opset < 9 ? 1 : 0);
    if (m < 1 || m > formal)
        return kn_error(KILN_ERR_MODEL, "num_scan_inputs is %lld with %d inputs", (long long)m,
                        formal);
    if (b->n_inputs - b->n_outer != formal || b->n_outputs != c->n_out || c->n_out < formal - m)
        return kn_error(KILN_ERR_MODEL, "its body's inputs and outputs do not match the node's");
    return KN_NEED_DATA;
}

kiln_status kn_infer_sequence_map(kn_infer_ctx *c) {
    const kn_graph *b;
    KN_TRY(need_body(c->node, "body", c->n_out, &b));
    if (b->n_inputs - b->n_outer != c->n_in - b->n_outer)
        return kn_error(KILN_ERR_MODEL, "its body takes %d inputs; the node has %d",
                        b->n_inputs - b->n_outer, c->n_in - b->n_outer);
    if (c->in[0].dtype != KILN_DTYPE_CONTAINER)
        return kn_error(KILN_ERR_DTYPE, "input 'input_sequence' is %s, not a sequence",
                        kn_dtype_name(c->in[0].dtype));
    return KN_NEED_DATA;
}
