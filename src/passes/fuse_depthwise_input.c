/* Move a convolution's bias and clamp activation (Relu, Clip) into the depthwise convolution
 * that alone reads its output (conventions in passes.h):
 *
 *   kiln.FusedConv(x, w, b) [act]  ->  y  ->  Conv / kiln.FusedConv (depthwise, groups = C)
 *
 * becomes
 *
 *   kiln.FusedConv(x, w)  ->  y'  ->  kiln.FusedDepthwiseConv(y', wd, bd, z, b)
 *                                       [kiln_input_activation = act]
 *
 * so the depthwise kernel computes act(y' + b) as it loads each input, and the expansion layer's
 * epilogue (a pass that reads and writes its whole output: the largest tensors of MobileNetV2)
 * disappears. Padded positions stay zero: the activation applies to the
 * values read, not to the padding. Only where both nodes sit on a device backend with a kernel
 * for kiln.FusedDepthwiseConv: not on the host, whose convolutions apply their epilogue in the
 * GEMM's registers at no extra pass (its kernel for the op serves other backends). */
#include "passes/passes.h"

#include "core/alloc.h"
#include "ir/placement.h"
#include "ops/op.h"

#include <stdlib.h>
#include <string.h>

/* KILN_FUSE_DEPTHWISE_INPUT=0 leaves every pair apart (a switch for measuring the fusion). */
static bool fusion_on(void) {
    const char *e = getenv("KILN_FUSE_DEPTHWISE_INPUT");
    return e == NULL || strcmp(e, "0") != 0;
}

/* Whether node d is a 2-D depthwise convolution (groups = input channels = output channels,
 * weights [C, 1, kh, kw] constant) whose epilogue, if any, is its own. */
static bool depthwise(const kn_graph *g, const kn_node *d) {
    if (!(kn_node_is(d, "", "Conv") || kn_node_is(d, KN_DOMAIN, "FusedConv")) || d->n_in < 2 ||
        d->n_out != 1 || d->in[0] < 0 || d->in[1] < 0)
        return false;
    const kn_value *x = &g->values[d->in[0]], *w = &g->values[d->in[1]];
    int64_t groups = kn_attr_int(d, "group", 1);
    return x->rank == 4 && w->rank == 4 && kn_value_is_const(w) && groups > 1 &&
           x->dims[1].sym == NULL && x->dims[1].value == groups && w->dims[0].value == groups &&
           w->dims[1].value == 1;
}

/* Whether node p is a convolution with a clamp for its activation (Relu, Clip) and nothing
 * after it but the activation (no residual: the residual is added before the activation, and
 * cannot move). Only a clamp moves: it costs two instructions at each of a value's loads (K*K
 * of them with one output a thread), where SiLU, sigmoid and the like cost an exponential and a
 * division at every load, more than the pass they save; they stay in the convolution's
 * epilogue (on the CUDA backend one pass after cuDNN's convolution, as the in-place prologue
 * was). */
static bool clamped_conv(const kn_node *p) {
    const kn_attr *act = kn_node_attr(p, "kiln_activation");
    return kn_node_is(p, KN_DOMAIN, "FusedConv") && p->n_out == 1 && p->out[0] >= 0 &&
           act != NULL && act->type == KN_ATTR_STRING &&
           (strcmp(act->s, "Relu") == 0 || strcmp(act->s, "Clip") == 0) &&
           kn_attr_int(p, "kiln_residual", 0) == 0 && (p->n_in <= 3 || p->in[3] < 0);
}

/* Copy node p's attribute `from` (if any) to node d as `to`, then drop it from p. */
static kiln_status move_attr(kn_graph *g, int pi, int di, const char *from, const char *to) {
    kn_node *p = &g->nodes[pi];
    for (int i = 0; i < p->n_attr; i++) {
        if (strcmp(p->attr[i].name, from) != 0)
            continue;
        kn_attr a = p->attr[i];
        a.name = (char *)to;
        KN_TRY(kn_node_add_attr(g, di, &a));
        p = &g->nodes[pi];
        kn_attr_free(&p->attr[i]);
        memmove(&p->attr[i], &p->attr[i + 1], (size_t)(p->n_attr - i - 1) * sizeof p->attr[0]);
        p->n_attr--;
        return KILN_OK;
    }
    return KILN_OK;
}

/* Rewrite the pair p -> d (checked by the caller). */
static kiln_status fuse(kn_graph *g, int pi, int di) {
    kn_node *d = &g->nodes[di];
    KN_TRY(kn_node_grow_inputs(d, 5));
    kn_node *p = &g->nodes[pi];
    if (p->n_in > 2) { /* the bias moves: input 2 of p becomes input 4 of d */
        d->in[4] = p->in[2];
        p->n_in = 2;
    }
    KN_TRY(kn_node_set_op(d, KN_DOMAIN, "FusedDepthwiseConv", 1));
    KN_TRY(move_attr(g, pi, di, "kiln_activation", "kiln_input_activation"));
    KN_TRY(move_attr(g, pi, di, "kiln_alpha", "kiln_input_alpha"));
    return move_attr(g, pi, di, "kiln_beta", "kiln_input_beta");
}

kiln_status kn_pass_fuse_depthwise_input(kn_graph *g) {
    if (!fusion_on())
        return KILN_OK;
    int *uses = kn_graph_value_uses(g);
    if (uses == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory fusing depthwise inputs");
    kiln_status rc = KILN_OK;
    for (int pi = 0; pi < g->n_nodes && rc == KILN_OK; pi++) {
        const kn_node *p = &g->nodes[pi];
        if (!clamped_conv(p))
            continue;
        int di = kn_graph_sole_consumer(g, uses, p->out[0]);
        if (di < 0 || g->nodes[di].in[0] != p->out[0] || !depthwise(g, &g->nodes[di]))
            continue;
        const char *where = kn_node_backend(&g->nodes[di]);
        if (strcmp(where, kn_node_backend(p)) != 0 || strcmp(where, KN_BACKEND_HOST) == 0 ||
            !kn_backend_has_kernel(where, KN_DOMAIN, "FusedDepthwiseConv"))
            continue;
        rc = fuse(g, pi, di);
    }
    kn_free(uses);
    return rc;
}
