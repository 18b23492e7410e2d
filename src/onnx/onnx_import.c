/* ModelProto -> kn_graph: opsets, initializers, inputs, Constant nodes, nodes, value_info and
 * outputs, in that order, then a topological sort. */
#include "onnx/onnx_import.h"

#include "core/alloc.h"
#include "core/fileio.h"
#include "onnx/onnx_private.h"

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* Default-domain opsets kiln's operator table is written against (the newest: ir/graph.h). */
#define KN_ONNX_MIN_OPSET 1

/* Open-addressing map from borrowed strings to ints (value indices, or 0 for a set). */
typedef struct str_map {
    const char **keys;
    int *vals;
    size_t cap, n;
} str_map;

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int map_get(const str_map *m, const char *key) {
    if (m->cap == 0)
        return -1;
    for (size_t i = hash_str(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == NULL)
            return -1;
        if (strcmp(m->keys[i], key) == 0)
            return m->vals[i];
    }
}

static kiln_status map_put(str_map *m, const char *key, int val);

static kiln_status map_grow(str_map *m) {
    str_map bigger = {0};
    bigger.cap = m->cap ? m->cap * 2 : 64;
    bigger.keys = kn_calloc(bigger.cap, sizeof *bigger.keys);
    bigger.vals = kn_calloc(bigger.cap, sizeof *bigger.vals);
    if (bigger.keys == NULL || bigger.vals == NULL) {
        kn_free(bigger.keys);
        kn_free(bigger.vals);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory importing the model");
    }
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i] != NULL)
            map_put(&bigger, m->keys[i], m->vals[i]);
    kn_free(m->keys);
    kn_free(m->vals);
    *m = bigger;
    return KILN_OK;
}

static kiln_status map_put(str_map *m, const char *key, int val) {
    if (2 * (m->n + 1) > m->cap)
        KN_TRY(map_grow(m));
    size_t i = hash_str(key) & (m->cap - 1);
    while (m->keys[i] != NULL && strcmp(m->keys[i], key) != 0)
        i = (i + 1) & (m->cap - 1);
    if (m->keys[i] == NULL)
        m->n++;
    m->keys[i] = key;
    m->vals[i] = val;
    return KILN_OK;
}

static void map_free(str_map *m) {
    kn_free(m->keys);
    kn_free(m->vals);
}

typedef struct importer importer;
struct importer {
    const Onnx__GraphProto *gp;
    importer *parent; /* the enclosing graph's importer when this is a subgraph body */
    int *captures;    /* body values that stand for enclosing-scope values, in order found */
    int n_captures;
    const char *base_dir;
    kn_graph *g;
    str_map values;      /* value name -> index in g */
    str_map node_names;  /* names handed out so far */
    char **names;        /* per proto node: its unique name (owned) */
    char (*labels)[320]; /* per proto node: "node 'n' (Op)" for messages */
    bool *removed;       /* per proto node: a Constant turned into a value */
};

static kiln_status oom(void) {
    return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory importing the model");
}

static kiln_status add_value(importer *im, const char *name, int *index) {
    int v = kn_graph_add_value(im->g, name);
    if (v < 0)
        return oom();
    KN_TRY(map_put(&im->values, im->g->values[v].name, v));
    *index = v;
    return KILN_OK;
}

static kiln_status set_dim(kn_value *v, int i, int64_t value, const char *sym);

/* The value a name refers to in this graph: its own, or (in a body) one of an enclosing scope,
 * which then becomes a capture of this body (and, nested, of every body in between). -1 when no
 * scope has it; *v_out is left alone on error. */
static kiln_status lookup(importer *im, const char *name, int *v_out) {
    int v = map_get(&im->values, name);
    if (v >= 0 || im->parent == NULL) {
        *v_out = v;
        return KILN_OK;
    }
    int pv;
    KN_TRY(lookup(im->parent, name, &pv));
    if (pv < 0) {
        *v_out = -1;
        return KILN_OK;
    }
    int *caps = kn_realloc(im->captures, (size_t)im->n_captures * sizeof *caps,
                           (size_t)(im->n_captures + 1) * sizeof *caps);
    if (caps == NULL)
        return oom();
    im->captures = caps;
    KN_TRY(add_value(im, name, &v));
    const kn_value *outer = &im->parent->g->values[pv];
    kn_value *val = &im->g->values[v];
    val->is_input = true; /* joins the graph inputs once every body of the node is known */
    val->dtype = outer->dtype;
    val->rank = outer->rank;
    for (int d = 0; d < outer->rank && d < KN_MAX_RANK; d++)
        KN_TRY(set_dim(val, d, outer->dims[d].value, outer->dims[d].sym));
    im->captures[im->n_captures++] = v;
    *v_out = v;
    return KILN_OK;
}

static kiln_status import_opsets(importer *im, const Onnx__ModelProto *m) {
    for (size_t i = 0; i < m->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *os = m->opset_import[i];
        const char *dom = kn_onnx_domain(os->domain);
        int64_t ver = os->has_version ? os->version : 0;
        if (dom[0] == '\0' && (ver < KN_ONNX_MIN_OPSET || ver > KN_ONNX_MAX_OPSET))
            return kn_error(KILN_ERR_UNSUPPORTED,
                            "the model imports opset %lld of the default ONNX domain; kiln "
                            "supports opsets %d to %d",
                            (long long)ver, KN_ONNX_MIN_OPSET, KN_ONNX_MAX_OPSET);
        if (ver < 0 || ver > INT_MAX)
            return kn_error(KILN_ERR_MODEL, "opset import for domain '%s' has version %lld", dom,
                            (long long)ver);
        int64_t prev = kn_graph_opset(im->g, dom);
        if (prev == ver)
            continue;
        if (prev >= 0)
            return kn_error(KILN_ERR_MODEL, "domain '%s' is imported twice (opsets %lld and %lld)",
                            dom, (long long)prev, (long long)ver);
        KN_TRY(kn_graph_add_opset(im->g, dom, ver));
    }
    /* domains only the model's local functions use (their bodies are inlined into the graph) */
    for (size_t f = 0; f < m->n_functions; f++)
        for (size_t i = 0; i < m->functions[f]->n_opset_import; i++) {
            const Onnx__OperatorSetIdProto *os = m->functions[f]->opset_import[i];
            const char *dom = kn_onnx_domain(os->domain);
            int64_t ver = os->has_version ? os->version : 0;
            if (kn_graph_opset(im->g, dom) >= 0)
                continue;
            if (ver < 0 || ver > INT_MAX ||
                (dom[0] == '\0' && (ver < KN_ONNX_MIN_OPSET || ver > KN_ONNX_MAX_OPSET)))
                return kn_error(KILN_ERR_UNSUPPORTED,
                                "local function '%s' imports opset %lld of domain '%s'",
                                kn_onnx_str(m->functions[f]->name), (long long)ver, dom);
            KN_TRY(kn_graph_add_opset(im->g, dom, ver));
        }
    return KILN_OK;
}

static kiln_status set_dim(kn_value *v, int i, int64_t value, const char *sym) {
    kn_free(v->dims[i].sym);
    v->dims[i].sym = NULL;
    v->dims[i].value = value;
    if (sym != NULL) {
        v->dims[i].value = -1;
        v->dims[i].sym = kn_strdup(sym);
        if (v->dims[i].sym == NULL)
            return oom();
    }
    return KILN_OK;
}

/* Copy a declared tensor type onto value vi. `what` is e.g. "graph input 'x'". An input needs a
 * tensor type with an element type; elsewhere a type is advisory and may be partial. */
static kiln_status apply_type(importer *im, int vi, const Onnx__TypeProto *tp, const char *what,
                              bool required) {
    if (required && im->parent != NULL &&
        (tp == NULL || tp->value_case == ONNX__TYPE_PROTO__VALUE__NOT_SET))
        return KILN_OK; /* a body's inputs take their types from the node at run time */
    if (tp == NULL || tp->value_case == ONNX__TYPE_PROTO__VALUE__NOT_SET) {
        if (required)
            return kn_error(KILN_ERR_MODEL, "%s has no type", what);
        return KILN_OK;
    }
    if (tp->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE ||
        tp->value_case == ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE) {
        /* one block of bytes whose size only the data tells (core/container.h) */
        kn_value *v = &im->g->values[vi];
        char sym[300];
        snprintf(sym, sizeof sym, "%.250s_dim0", v->name);
        v->dtype = KILN_DTYPE_CONTAINER;
        const Onnx__TypeProto *elem =
            tp->value_case == ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE && tp->optional_type != NULL
                ? tp->optional_type->elem_type
                : NULL;
        v->container = tp->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE ? KILN_IO_SEQUENCE
                       : elem != NULL && elem->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE
                           ? KILN_IO_OPTIONAL_SEQUENCE
                           : KILN_IO_OPTIONAL;
        for (int i = 1; i < v->rank && i < KN_MAX_RANK; i++)
            KN_TRY(set_dim(v, i, 0, NULL));
        v->rank = 1;
        return set_dim(v, 0, -1, sym);
    }
    if (tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || tp->tensor_type == NULL) {
        if (required)
            return kn_error(KILN_ERR_UNSUPPORTED,
                            "%s is a map or sparse tensor; only dense tensors, sequences and "
                            "optionals are supported",
                            what);
        return KILN_OK;
    }
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    int32_t dtype = tt->has_elem_type ? tt->elem_type : 0;
    if (dtype != 0 || required)
        KN_TRY(kn_onnx_check_dtype(dtype, what));
    if (dtype == KILN_DTYPE_STRING) {
        /* one block of bytes whose size only the data tells (core/strings.h); the declared
         * shape is the block's own business */
        kn_value *v = &im->g->values[vi];
        char sym[300];
        snprintf(sym, sizeof sym, "%.250s_bytes", v->name);
        v->dtype = KILN_DTYPE_STRING;
        for (int i = 1; i < v->rank && i < KN_MAX_RANK; i++)
            KN_TRY(set_dim(v, i, 0, NULL));
        v->rank = 1;
        return set_dim(v, 0, -1, sym);
    }
    const Onnx__TensorShapeProto *sh = tt->shape;
    if (sh != NULL && sh->n_dim > KN_MAX_RANK)
        return kn_error(KILN_ERR_UNSUPPORTED, "%s has rank %zu; kiln supports at most %d", what,
                        sh->n_dim, KN_MAX_RANK);
    kn_value *v = &im->g->values[vi];
    if (dtype != 0)
        v->dtype = dtype;
    if (sh == NULL)
        return KILN_OK;
    int64_t numel = 1;
    for (size_t i = 0; i < sh->n_dim; i++) {
        const Onnx__TensorShapeProto__Dimension *d = sh->dim[i];
        /* Paddle2ONNX and older exporters write an unknown dim as dim_value -1 (or 0 in
         * declarations that are only advisory): read those as unnamed dynamic dims, as
         * onnxruntime does. A 0 on a graph input keeps ONNX's meaning, an empty axis. */
        bool unknown = d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE &&
                       (d->dim_value < 0 || (d->dim_value == 0 && !required));
        if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE && !unknown) {
            int64_t x = d->dim_value;
            if (x > KN_MAX_ELEMENTS || (x > 0 && numel > KN_MAX_ELEMENTS / x))
                return kn_error(KILN_ERR_MODEL, "%s: dim %zu (%lld) is absurdly large", what, i,
                                (long long)x);
            numel *= x;
            KN_TRY(set_dim(v, (int)i, x, NULL));
        } else if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
                   d->dim_param != NULL && d->dim_param[0] != '\0') {
            KN_TRY(set_dim(v, (int)i, -1, d->dim_param));
        } else {
            char sym[300];
            snprintf(sym, sizeof sym, "%.250s_dim%zu", v->name, i);
            KN_TRY(set_dim(v, (int)i, -1, sym));
        }
    }
    for (int i = (int)sh->n_dim; i < v->rank && i < KN_MAX_RANK; i++)
        KN_TRY(set_dim(v, i, 0, NULL));
    v->rank = (int32_t)sh->n_dim;
    return KILN_OK;
}

static kiln_status import_initializers(importer *im) {
    const Onnx__GraphProto *gp = im->gp;
    if (gp->n_sparse_initializer > 0)
        return kn_error(KILN_ERR_UNSUPPORTED, "sparse initializers are not supported");
    for (size_t i = 0; i < gp->n_initializer; i++) {
        const Onnx__TensorProto *tp = gp->initializer[i];
        const char *name = kn_onnx_str(tp->name);
        char what[300];
        snprintf(what, sizeof what, "initializer '%.250s'", name);
        if (name[0] == '\0')
            return kn_error(KILN_ERR_MODEL, "initializer %zu has no name", i);
        if (map_get(&im->values, name) >= 0)
            return kn_error(KILN_ERR_MODEL, "%s is defined twice", what);
        kn_tensor t;
        KN_TRY(kn_onnx_tensor_convert(tp, im->base_dir, what, &t));
        int v;
        kiln_status rc = add_value(im, name, &v);
        if (rc == KILN_OK)
            rc = kn_value_set_const(im->g, v, &t);
        kn_free(t.data);
        KN_TRY(rc);
    }
    return KILN_OK;
}

static kiln_status import_inputs(importer *im) {
    for (size_t i = 0; i < im->gp->n_input; i++) {
        const Onnx__ValueInfoProto *vi = im->gp->input[i];
        const char *name = kn_onnx_str(vi->name);
        char what[300];
        snprintf(what, sizeof what, "graph input '%.250s'", name);
        if (name[0] == '\0')
            return kn_error(KILN_ERR_MODEL, "graph input %zu has no name", i);
        int v = map_get(&im->values, name);
        if (v >= 0 && kn_value_is_const(&im->g->values[v]))
            continue; /* an initializer listed as input: kept as a constant */
        if (v >= 0)
            return kn_error(KILN_ERR_MODEL, "%s is listed twice", what);
        KN_TRY(add_value(im, name, &v));
        KN_TRY(apply_type(im, v, vi->type, what, true));
        im->g->values[v].is_input = true;
        KN_TRY(kn_graph_add_input(im->g, v));
    }
    return KILN_OK;
}

/* Gives node i a unique name (its own, else "<op_type>_<i>", suffixed on collision). */
static kiln_status name_node(importer *im, size_t i, const Onnx__NodeProto *np) {
    char base[300], name[320];
    if (np->name != NULL && np->name[0] != '\0')
        snprintf(base, sizeof base, "%.290s", np->name);
    else
        snprintf(base, sizeof base, "%.250s_%zu", kn_onnx_str(np->op_type), i);
    snprintf(name, sizeof name, "%s", base);
    for (int k = 2; map_get(&im->node_names, name) >= 0; k++)
        snprintf(name, sizeof name, "%s_%d", base, k);
    im->names[i] = kn_strdup(name);
    if (im->names[i] == NULL)
        return oom();
    KN_TRY(map_put(&im->node_names, im->names[i], 0));
    snprintf(im->labels[i], sizeof im->labels[i], "node '%.200s' (%.100s)", name,
             kn_onnx_str(np->op_type));
    return KILN_OK;
}

static kiln_status import_constant(importer *im, size_t i, const Onnx__NodeProto *np) {
    const char *label = im->labels[i];
    if (np->n_input != 0 || np->n_output != 1 || kn_onnx_str(np->output[0])[0] == '\0')
        return kn_error(KILN_ERR_MODEL, "%s: a Constant takes no inputs and has one named output",
                        label);
    kn_tensor t;
    KN_TRY(kn_onnx_constant_tensor(np, im->base_dir, label, &t));
    int v = map_get(&im->values, np->output[0]);
    kiln_status rc = kn_value_set_const(im->g, v, &t);
    kn_free(t.data);
    im->removed[i] = true;
    return rc;
}

/* First pass over nodes: names, opsets, every output value, and Constant nodes folded into
 * values. Outputs exist before inputs are resolved so nodes out of order still import. */
static kiln_status declare_node(importer *im, size_t i) {
    const Onnx__NodeProto *np = im->gp->node[i];
    if (np->op_type == NULL || np->op_type[0] == '\0')
        return kn_error(KILN_ERR_MODEL, "node %zu ('%s') has no op_type", i, kn_onnx_str(np->name));
    KN_TRY(name_node(im, i, np));
    const char *label = im->labels[i];
    const char *dom = kn_onnx_domain(np->domain);
    if (kn_graph_opset(im->g, dom) < 0)
        return kn_error(KILN_ERR_MODEL, "%s: its domain '%s' has no opset import", label, dom);
    for (size_t o = 0; o < np->n_output; o++) {
        const char *out = kn_onnx_str(np->output[o]);
        if (out[0] == '\0')
            continue;
        int v = map_get(&im->values, out);
        if (v >= 0) {
            const kn_value *val = &im->g->values[v];
            const char *what = val->is_input            ? "a graph input"
                               : kn_value_is_const(val) ? "an initializer or constant"
                                                        : "another node's output";
            return kn_error(KILN_ERR_MODEL, "%s: output '%s' is already %s", label, out, what);
        }
        KN_TRY(add_value(im, out, &v));
    }
    if (dom[0] == '\0' && strcmp(np->op_type, "Constant") == 0)
        return import_constant(im, i, np);
    return KILN_OK;
}

/* Most subgraph attributes one node has (If has two). */
#define KN_MAX_BODIES 4

/* A node's subgraph bodies while it is imported, and the enclosing-scope values they read. */
typedef struct bodies {
    kn_graph *g[KN_MAX_BODIES];
    const char *name[KN_MAX_BODIES]; /* attribute names, borrowed from the proto */
    int n;
    int outer[KN_MAX_NODE_IO]; /* values of this graph */
    int n_outer;
} bodies;

static bool attr_is_body(const Onnx__AttributeProto *ap);
static void bodies_free(bodies *bd);
static kiln_status import_bodies(importer *im, const Onnx__NodeProto *np, const char *label,
                                 bodies *bd);

static kiln_status import_node(importer *im, size_t i, int *in, int *out) {
    const Onnx__NodeProto *np = im->gp->node[i];
    const char *label = im->labels[i];
    for (size_t k = 0; k < np->n_input; k++) {
        const char *name = kn_onnx_str(np->input[k]);
        in[k] = -1;
        if (name[0] != '\0')
            KN_TRY(lookup(im, name, &in[k]));
        if (name[0] != '\0' && in[k] < 0)
            return kn_error(KILN_ERR_MODEL,
                            "%s: input '%s' is not produced by any node, graph input or "
                            "initializer",
                            label, name);
    }
    for (size_t k = 0; k < np->n_output; k++) {
        const char *name = kn_onnx_str(np->output[k]);
        out[k] = name[0] == '\0' ? -1 : map_get(&im->values, name);
    }
    const char *dom = kn_onnx_domain(np->domain);
    bodies bd = {0};
    kiln_status rc = import_bodies(im, np, label, &bd);
    int n_in = (int)np->n_input;
    for (int k = 0; rc == KILN_OK && k < bd.n_outer; k++) {
        if (n_in >= KN_MAX_NODE_IO)
            rc = kn_error(KILN_ERR_UNSUPPORTED,
                          "%s: its inputs and the enclosing-scope values its subgraphs read "
                          "number more than %d",
                          label, KN_MAX_NODE_IO);
        else
            in[n_in++] = bd.outer[k];
    }
    int n = -1;
    if (rc == KILN_OK) {
        n = kn_graph_add_node(im->g, im->names[i], np->op_type, dom,
                              (int)kn_graph_opset(im->g, dom), n_in, in, (int)np->n_output, out);
        if (n < 0)
            rc = oom();
    }
    for (int k = 0; k < bd.n && rc == KILN_OK; k++) {
        kn_attr a = {.name = (char *)bd.name[k], .type = KN_ATTR_GRAPH, .g = bd.g[k]};
        rc = kn_node_add_attr(im->g, n, &a);
    }
    bodies_free(&bd);
    KN_TRY(rc);
    for (size_t k = 0; k < np->n_attribute; k++) {
        if (attr_is_body(np->attribute[k]))
            continue;
        kn_attr a;
        rc = kn_onnx_attr_convert(np->attribute[k], im->base_dir, label, &a);
        if (rc == KILN_OK)
            rc = kn_node_add_attr(im->g, n, &a);
        kn_onnx_attr_release(&a);
        KN_TRY(rc);
    }
    return KILN_OK;
}

static kiln_status import_nodes(importer *im) {
    const Onnx__GraphProto *gp = im->gp;
    size_t nn = gp->n_node;
    if (nn > INT_MAX / 2)
        return kn_error(KILN_ERR_UNSUPPORTED, "the graph has too many nodes (%zu)", nn);
    size_t max_io = 1;
    for (size_t i = 0; i < nn; i++) {
        const Onnx__NodeProto *np = gp->node[i];
        if (np->n_input > max_io)
            max_io = np->n_input;
        if (np->n_output > max_io)
            max_io = np->n_output;
    }
    if (max_io > INT_MAX / 2)
        return kn_error(KILN_ERR_MODEL, "a node has %zu inputs or outputs", max_io);
    im->names = kn_calloc(nn + 1, sizeof *im->names);
    im->labels = kn_calloc(nn + 1, sizeof *im->labels);
    im->removed = kn_calloc(nn + 1, sizeof *im->removed);
    int *in = kn_calloc(max_io + KN_MAX_NODE_IO, sizeof(int));
    int *out = kn_calloc(max_io, sizeof(int));
    kiln_status rc = KILN_OK;
    if (im->names == NULL || im->labels == NULL || im->removed == NULL || in == NULL ||
        out == NULL) {
        rc = oom();
        goto out_free;
    }
    for (size_t i = 0; i < nn && rc == KILN_OK; i++)
        rc = declare_node(im, i);
    for (size_t i = 0; i < nn && rc == KILN_OK; i++)
        if (!im->removed[i])
            rc = import_node(im, i, in, out);
out_free:
    kn_free(in);
    kn_free(out);
    return rc;
}

static kiln_status import_value_info(importer *im) {
    for (size_t i = 0; i < im->gp->n_value_info; i++) {
        const Onnx__ValueInfoProto *vi = im->gp->value_info[i];
        int v = map_get(&im->values, kn_onnx_str(vi->name));
        if (v < 0 || kn_value_is_const(&im->g->values[v]) || im->g->values[v].is_input)
            continue;
        char what[300];
        snprintf(what, sizeof what, "value_info '%.250s'", kn_onnx_str(vi->name));
        KN_TRY(apply_type(im, v, vi->type, what, false));
    }
    return KILN_OK;
}

static kiln_status import_outputs(importer *im) {
    for (size_t i = 0; i < im->gp->n_output; i++) {
        const Onnx__ValueInfoProto *vi = im->gp->output[i];
        const char *name = kn_onnx_str(vi->name);
        char what[300];
        snprintf(what, sizeof what, "graph output '%.250s'", name);
        if (name[0] == '\0')
            return kn_error(KILN_ERR_MODEL, "graph output %zu has no name", i);
        int v;
        KN_TRY(lookup(im, name, &v));
        if (v < 0)
            return kn_error(KILN_ERR_MODEL,
                            "%s is not produced by any node, graph input or initializer", what);
        kn_value *val = &im->g->values[v];
        if (val->is_output)
            return kn_error(KILN_ERR_UNSUPPORTED, "%s is listed twice", what);
        if (!kn_value_is_const(val) && !val->is_input)
            KN_TRY(apply_type(im, v, vi->type, what, false));
        im->g->values[v].is_output = true;
        KN_TRY(kn_graph_add_output(im->g, v));
    }
    if (im->gp->n_output == 0)
        return kn_error(KILN_ERR_MODEL, "the graph has no outputs");
    return KILN_OK;
}

static kiln_status import_body(importer *im) {
    if (im->gp->name != NULL) {
        kn_free(im->g->name);
        im->g->name = kn_strdup(im->gp->name);
        if (im->g->name == NULL)
            return oom();
    }
    KN_TRY(import_initializers(im));
    KN_TRY(import_inputs(im));
    KN_TRY(import_nodes(im));
    KN_TRY(import_value_info(im));
    KN_TRY(import_outputs(im));
    if (im->g->n_nodes == 0) /* inputs or constants straight to outputs */
        return KILN_OK;
    return kn_graph_toposort(im->g);
}

static void importer_free(importer *im) {
    if (im->names != NULL)
        for (size_t i = 0; i < im->gp->n_node; i++)
            kn_free(im->names[i]);
    kn_free(im->names);
    kn_free(im->labels);
    kn_free(im->removed);
    kn_free(im->captures);
    map_free(&im->values);
    map_free(&im->node_names);
}

/* Imports one subgraph attribute of a node of `parent` into *out. */
static kiln_status import_subgraph(importer *parent, const Onnx__GraphProto *gp, const char *label,
                                   const char *attr, kn_graph **out, int **captures,
                                   int *n_captures) {
    importer im = {.gp = gp, .parent = parent, .base_dir = parent->base_dir};
    im.g = kn_graph_create();
    if (im.g == NULL)
        return oom();
    kiln_status rc = KILN_OK;
    for (int k = 0; k < parent->g->n_opsets && rc == KILN_OK; k++)
        rc = kn_graph_add_opset(im.g, parent->g->opsets[k].domain, parent->g->opsets[k].version);
    im.g->ir_version = parent->g->ir_version;
    if (rc == KILN_OK)
        rc = import_body(&im);
    if (rc != KILN_OK) {
        kn_error_prefix(rc, "%s, subgraph '%s': ", label, attr);
        kn_graph_destroy(im.g);
        im.g = NULL;
    }
    *out = im.g;
    *captures = im.captures;
    *n_captures = im.n_captures;
    im.captures = NULL;
    importer_free(&im);
    return rc;
}

static bool attr_is_body(const Onnx__AttributeProto *ap) {
    return ap->g != NULL &&
           (!ap->has_type || ap->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH);
}

static void bodies_free(bodies *bd) {
    for (int k = 0; k < bd->n; k++)
        kn_graph_destroy(bd->g[k]);
    memset(bd, 0, sizeof *bd);
}

/* Imports the node's subgraph attributes, then gives every body the same list of
 * enclosing-scope values (the union of what each reads) as its last graph inputs. */
static kiln_status import_bodies(importer *im, const Onnx__NodeProto *np, const char *label,
                                 bodies *bd) {
    for (size_t k = 0; k < np->n_attribute; k++) {
        const Onnx__AttributeProto *ap = np->attribute[k];
        if (!attr_is_body(ap))
            continue;
        if (bd->n == KN_MAX_BODIES)
            return kn_error(KILN_ERR_MODEL, "%s has more than %d subgraph attributes", label,
                            KN_MAX_BODIES);
        int *caps = NULL, n_caps = 0;
        kiln_status rc =
            import_subgraph(im, ap->g, label, kn_onnx_str(ap->name), &bd->g[bd->n], &caps, &n_caps);
        if (rc != KILN_OK) {
            kn_free(caps);
            return rc;
        }
        bd->name[bd->n] = kn_onnx_str(ap->name);
        kn_graph *g = bd->g[bd->n++];
        for (int c = 0; c < n_caps && rc == KILN_OK; c++) {
            int pv;
            rc = lookup(im, g->values[caps[c]].name, &pv);
            bool seen = false;
            for (int u = 0; u < bd->n_outer; u++)
                seen = seen || bd->outer[u] == pv;
            if (rc == KILN_OK && !seen) {
                if (bd->n_outer == KN_MAX_NODE_IO)
                    rc = kn_error(KILN_ERR_UNSUPPORTED,
                                  "%s: its subgraphs read more than %d enclosing-scope values",
                                  label, KN_MAX_NODE_IO);
                else
                    bd->outer[bd->n_outer++] = pv;
            }
        }
        kn_free(caps);
        KN_TRY(rc);
    }
    for (int k = 0; k < bd->n; k++) {
        kn_graph *g = bd->g[k];
        for (int u = 0; u < bd->n_outer; u++) {
            const char *name = im->g->values[bd->outer[u]].name;
            int v = kn_graph_find_value(g, name);
            bool own = v >= 0 && (g->values[v].producer >= 0 || kn_value_is_const(&g->values[v]));
            for (int k = 0; v >= 0 && k < g->n_inputs; k++)
                own = own || g->inputs[k] == v;
            if (own)
                v = -1; /* the body's own value of that name: this input goes unread */
            if (v < 0 && (v = kn_graph_add_value(g, NULL)) < 0)
                return oom();
            KN_TRY(kn_graph_add_input(g, v));
        }
        g->n_outer = bd->n_outer;
    }
    return KILN_OK;
}

kiln_status kn_onnx_import(const void *data, size_t size, const char *base_dir, kn_graph **out) {
    if (data == NULL || out == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "model bytes or output is NULL");
    *out = NULL;
    if (size == 0)
        return kn_error(KILN_ERR_MODEL, "the model is empty (0 bytes)");
    if (!kn_onnx_nesting_ok(data, size, &onnx__model_proto__descriptor, KN_ONNX_MAX_NESTING))
        return kn_error(KILN_ERR_MODEL,
                        "not a usable ONNX model: messages nest more than %d levels deep",
                        KN_ONNX_MAX_NESTING);
    bool pb_oom = false;
    ProtobufCAllocator pb = kn_onnx_pb_allocator;
    pb.allocator_data = &pb_oom;
    Onnx__ModelProto *m = onnx__model_proto__unpack(&pb, size, (const uint8_t *)data);
    if (m == NULL && pb_oom)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory while parsing the model");
    if (m == NULL)
        return kn_error(KILN_ERR_MODEL,
                        "not a valid ONNX model: protobuf parsing failed (truncated or corrupt "
                        "bytes, %zu bytes read)",
                        size);
    kiln_status rc;
    importer im = {0};
    kn_onnx_inlined inlined = {0};
    im.gp = m->graph;
    im.base_dir = base_dir;
    if (im.gp == NULL) {
        rc = kn_error(KILN_ERR_MODEL, "the model has no graph");
        goto out_free_model;
    }
    if (m->n_functions > 0) {
        rc = kn_onnx_inline_functions(m, &inlined);
        if (rc != KILN_OK)
            goto out_free_model;
        im.gp = &inlined.graph;
    }
    im.g = kn_graph_create();
    if (im.g == NULL) {
        rc = oom();
        goto out_free_model;
    }
    rc = import_opsets(&im, m);
    im.g->ir_version = m->has_ir_version ? m->ir_version : 0;
    if (rc == KILN_OK)
        rc = import_body(&im);
    if (rc == KILN_OK) {
        *out = im.g;
        im.g = NULL;
    } else {
        kn_onnx_one_line_error(rc);
    }
    if (im.g != NULL)
        kn_graph_destroy(im.g);
    importer_free(&im);
out_free_model:
    kn_onnx_inlined_free(&inlined);
    onnx__model_proto__free_unpacked(m, &kn_onnx_pb_allocator);
    return rc;
}

kiln_status kn_onnx_import_file(const char *path, kn_graph **out) {
    const void *data;
    size_t size;
    KN_TRY(kn_file_map(path, &data, &size));
    const char *slash = strrchr(path, '/');
    char *dir = slash == NULL ? kn_strdup(".") : kn_strndup(path, (size_t)(slash - path));
    kiln_status rc;
    if (dir == NULL)
        rc = oom();
    else
        rc = kn_onnx_import(data, size, dir[0] != '\0' ? dir : "/", out);
    kn_free(dir);
    kn_file_unmap(data, size);
    if (rc != KILN_OK)
        kn_error_prefix(rc, "'%s': ", path);
    return rc;
}
