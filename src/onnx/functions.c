/* Model-local functions (ModelProto.functions, IR 8 on): each call in the main graph is replaced
 * by the function's nodes before import, so the rest of kiln sees a plain graph. Formal inputs
 * and outputs become the call's values, the body's other values and node names are prefixed by
 * the call's name (unique: "<call>/<name>"), attributes the body takes by reference
 * (ref_attr_name) come from the call or the function's defaults, and calls inside a body are
 * inlined in turn (to a bounded depth, so a recursive function is refused, not looped on). The
 * new nodes borrow the model's strings and attributes where unchanged; what is made here is
 * owned by the kn_onnx_inlined and freed with it. */
#include "onnx/onnx_private.h"

#include "core/alloc.h"

#include <stdio.h>
#include <string.h>

#define MAX_DEPTH 16

typedef struct inliner {
    const Onnx__ModelProto *m;
    kn_onnx_inlined *out;
    Onnx__NodeProto **nodes;
    size_t n_nodes, cap_nodes;
} inliner;

static kiln_status oom(void) {
    return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory inlining the model's functions");
}

/* Remembers p so kn_onnx_inlined_free frees it; NULL stays NULL (the caller reports it). */
static void *keep(kn_onnx_inlined *x, void *p) {
    if (p == NULL)
        return NULL;
    if (x->n_allocs == x->cap_allocs) {
        size_t cap = x->cap_allocs ? 2 * x->cap_allocs : 64;
        void **a = kn_realloc(x->allocs, x->cap_allocs * sizeof *a, cap * sizeof *a);
        if (a == NULL) {
            kn_free(p);
            return NULL;
        }
        x->allocs = a;
        x->cap_allocs = cap;
    }
    x->allocs[x->n_allocs++] = p;
    return p;
}

static char *keep_str(kn_onnx_inlined *x, const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *s = keep(x, kn_malloc(la + lb + 2));
    if (s != NULL)
        snprintf(s, la + lb + 2, "%s/%s", a, b);
    return s;
}

static const Onnx__FunctionProto *function_of(const Onnx__ModelProto *m,
                                              const Onnx__NodeProto *np) {
    for (size_t i = 0; i < m->n_functions; i++) {
        const Onnx__FunctionProto *f = m->functions[i];
        if (strcmp(kn_onnx_str(f->name), kn_onnx_str(np->op_type)) == 0 &&
            strcmp(kn_onnx_domain(f->domain), kn_onnx_domain(np->domain)) == 0 &&
            strcmp(kn_onnx_str(f->overload), kn_onnx_str(np->overload)) == 0)
            return f;
    }
    return NULL;
}

static kiln_status push(inliner *in, Onnx__NodeProto *np) {
    if (in->n_nodes == in->cap_nodes) {
        size_t cap = in->cap_nodes ? 2 * in->cap_nodes : 64;
        Onnx__NodeProto **a = kn_realloc(in->nodes, in->cap_nodes * sizeof *a, cap * sizeof *a);
        if (a == NULL)
            return oom();
        in->nodes = a;
        in->cap_nodes = cap;
    }
    in->nodes[in->n_nodes++] = np;
    return KILN_OK;
}

/* One call's scope: formal names to the caller's values, and the prefix for the rest. */
typedef struct scope {
    const Onnx__FunctionProto *f;
    const Onnx__NodeProto *call;
    const char *prefix;
} scope;

/* The caller-side name of a value named `name` inside the body. */
static const char *outer_name(inliner *in, const scope *s, const char *name, kiln_status *rc) {
    if (name[0] == '\0')
        return name;
    for (size_t k = 0; k < s->f->n_input; k++)
        if (strcmp(kn_onnx_str(s->f->input[k]), name) == 0)
            return k < s->call->n_input ? kn_onnx_str(s->call->input[k]) : "";
    for (size_t k = 0; k < s->f->n_output; k++)
        if (strcmp(kn_onnx_str(s->f->output[k]), name) == 0 && k < s->call->n_output &&
            kn_onnx_str(s->call->output[k])[0] != '\0')
            return s->call->output[k];
    const char *r = keep_str(in->out, s->prefix, name);
    if (r == NULL)
        *rc = oom();
    return r != NULL ? r : "";
}

/* The attribute a body node takes: its own, or (by reference) the call's or the default. NULL:
 * the referenced attribute is given nowhere, so the node goes without it. */
static Onnx__AttributeProto *body_attr(inliner *in, const scope *s, Onnx__AttributeProto *ap,
                                       kiln_status *rc) {
    const char *ref = kn_onnx_str(ap->ref_attr_name);
    if (ref[0] == '\0')
        return ap;
    Onnx__AttributeProto *src = NULL;
    for (size_t k = 0; k < s->call->n_attribute && src == NULL; k++)
        if (strcmp(kn_onnx_str(s->call->attribute[k]->name), ref) == 0)
            src = s->call->attribute[k];
    for (size_t k = 0; k < s->f->n_attribute_proto && src == NULL; k++)
        if (strcmp(kn_onnx_str(s->f->attribute_proto[k]->name), ref) == 0)
            src = s->f->attribute_proto[k];
    if (src == NULL)
        return NULL;
    Onnx__AttributeProto *copy = keep(in->out, kn_malloc(sizeof *copy));
    if (copy == NULL) {
        *rc = oom();
        return NULL;
    }
    *copy = *src;
    copy->name = ap->name;
    return copy;
}

static kiln_status expand(inliner *in, Onnx__NodeProto *np, int depth);

static kiln_status inline_call(inliner *in, const Onnx__FunctionProto *f, Onnx__NodeProto *call,
                               const char *call_name, int depth) {
    char what[300];
    snprintf(what, sizeof what, "node '%.120s' (local function '%.120s')", call_name,
             kn_onnx_str(f->name));
    if (depth >= MAX_DEPTH)
        return kn_error(KILN_ERR_MODEL,
                        "local function '%.120s': local functions call each other more than %d "
                        "deep (a recursive function?)",
                        kn_onnx_str(f->name), MAX_DEPTH);
    if (call->n_input > f->n_input || call->n_output > f->n_output)
        return kn_error(KILN_ERR_MODEL,
                        "%s: the call has %zu inputs and %zu outputs; the "
                        "function takes %zu and makes %zu",
                        what, call->n_input, call->n_output, f->n_input, f->n_output);
    for (size_t k = 0; k < f->n_opset_import; k++) {
        const Onnx__OperatorSetIdProto *os = f->opset_import[k];
        for (size_t j = 0; j < in->m->n_opset_import; j++) {
            const Onnx__OperatorSetIdProto *mo = in->m->opset_import[j];
            if (strcmp(kn_onnx_domain(os->domain), kn_onnx_domain(mo->domain)) == 0 &&
                os->version != mo->version)
                return kn_error(KILN_ERR_UNSUPPORTED,
                                "%s: the function imports opset %lld of domain '%s', the model "
                                "%lld; kiln runs one opset a domain",
                                what, (long long)os->version, kn_onnx_domain(os->domain),
                                (long long)mo->version);
        }
    }
    scope s = {.f = f, .call = call, .prefix = call_name};
    for (size_t i = 0; i < f->n_node; i++) {
        const Onnx__NodeProto *bn = f->node[i];
        kiln_status rc = KILN_OK;
        Onnx__NodeProto *nn = keep(in->out, kn_malloc(sizeof *nn));
        char **ins = keep(in->out, kn_calloc(bn->n_input + 1, sizeof *ins));
        char **outs = keep(in->out, kn_calloc(bn->n_output + 1, sizeof *outs));
        Onnx__AttributeProto **attrs = keep(in->out, kn_calloc(bn->n_attribute + 1, sizeof *attrs));
        if (nn == NULL || ins == NULL || outs == NULL || attrs == NULL)
            return oom();
        *nn = *bn;
        for (size_t k = 0; k < bn->n_input && rc == KILN_OK; k++)
            ins[k] = (char *)outer_name(in, &s, kn_onnx_str(bn->input[k]), &rc);
        for (size_t k = 0; k < bn->n_output && rc == KILN_OK; k++)
            outs[k] = (char *)outer_name(in, &s, kn_onnx_str(bn->output[k]), &rc);
        size_t na = 0;
        for (size_t k = 0; k < bn->n_attribute && rc == KILN_OK; k++) {
            Onnx__AttributeProto *ap = bn->attribute[k];
            if (ap->g != NULL || ap->n_graphs > 0)
                return kn_error(KILN_ERR_UNSUPPORTED,
                                "%s: a subgraph inside a local function "
                                "is not supported",
                                what);
            Onnx__AttributeProto *a = body_attr(in, &s, ap, &rc);
            if (a != NULL)
                attrs[na++] = a;
        }
        KN_TRY(rc);
        char idx[32];
        snprintf(idx, sizeof idx, "%s_%zu", kn_onnx_str(bn->op_type), i);
        nn->name = keep_str(in->out, call_name, kn_onnx_str(bn->name)[0] != '\0' ? bn->name : idx);
        if (nn->name == NULL)
            return oom();
        nn->input = ins;
        nn->output = outs;
        nn->attribute = attrs;
        nn->n_attribute = na;
        KN_TRY(expand(in, nn, depth + 1));
    }
    return KILN_OK;
}

/* np into the flat node list: itself, or the body of the local function it calls. */
static kiln_status expand(inliner *in, Onnx__NodeProto *np, int depth) {
    const Onnx__FunctionProto *f = function_of(in->m, np);
    if (f == NULL)
        return push(in, np);
    char name[64];
    const char *call_name = np->name;
    if (call_name == NULL || call_name[0] == '\0') {
        snprintf(name, sizeof name, "%.40s_call%zu", kn_onnx_str(np->op_type), in->n_nodes);
        call_name = keep_str(in->out, "fn", name);
        if (call_name == NULL)
            return oom();
    }
    return inline_call(in, f, np, call_name, depth);
}

kiln_status kn_onnx_inline_functions(const Onnx__ModelProto *m, kn_onnx_inlined *out) {
    memset(out, 0, sizeof *out);
    inliner in = {.m = m, .out = out};
    const Onnx__GraphProto *gp = m->graph;
    kiln_status rc = KILN_OK;
    for (size_t i = 0; i < gp->n_node && rc == KILN_OK; i++)
        rc = expand(&in, gp->node[i], 0);
    if (rc != KILN_OK) {
        kn_free(in.nodes);
        kn_onnx_inlined_free(out);
        return rc;
    }
    out->graph = *gp;
    out->graph.node = keep(out, in.nodes);
    out->graph.n_node = in.n_nodes;
    if (in.n_nodes > 0 && out->graph.node == NULL) {
        kn_onnx_inlined_free(out);
        return oom();
    }
    return KILN_OK;
}

void kn_onnx_inlined_free(kn_onnx_inlined *x) {
    for (size_t i = 0; i < x->n_allocs; i++)
        kn_free(x->allocs[i]);
    kn_free(x->allocs);
    memset(x, 0, sizeof *x);
}
