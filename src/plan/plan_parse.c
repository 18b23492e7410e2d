/* The GRAPH and PROFILES sections of a plan, parsed into the IR. Every count is checked against
 * the bytes left before anything is allocated, every index against what it indexes, and the
 * resulting graph against the rules the runtime relies on (one producer per value, nodes in
 * topological order, constants never written). */
#include "plan/plan_parse.h"

#include "core/alloc.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cursor {
    const kn_plan_reader *r;
    const uint8_t *p;
    uint64_t size, pos;
    const char *sec;
    char where[96]; /* the record being read, for messages */
    int depth;      /* subgraph bodies entered (If, Loop, Scan attributes) */
} cursor;

/* Bodies nested deeper than this are refused (the ONNX importer's limit is lower). */
#define KN_PLAN_MAX_BODY_DEPTH 64

static kiln_status rd_graph_record(cursor *c, kn_graph *g);

static kiln_status fail(const cursor *c, const char *fmt, ...) KN_PRINTF(2, 3);
static kiln_status fail(const cursor *c, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    kn_error(KILN_ERR_PLAN, "plan %s section, %s: %s", c->sec, c->where, msg);
    return KILN_ERR_PLAN;
}

static kiln_status oom(void) {
    kn_error(KILN_ERR_OUT_OF_MEMORY, "plan reader: out of memory");
    return KILN_ERR_OUT_OF_MEMORY;
}

static uint64_t left(const cursor *c) {
    return c->size - c->pos;
}

static kiln_status rd(cursor *c, void *dst, size_t n, const char *what) {
    if (left(c) < n) {
        memset(dst, 0, n); /* callers' fields are then never read uninitialised */
        return fail(c, "truncated reading %s", what);
    }
    memcpy(dst, c->p + c->pos, n);
    c->pos += n;
    return KILN_OK;
}

static kiln_status rd_u32(cursor *c, uint32_t *v, const char *what) {
    return rd(c, v, sizeof *v, what);
}
static kiln_status rd_i32(cursor *c, int32_t *v, const char *what) {
    return rd(c, v, sizeof *v, what);
}
static kiln_status rd_u64(cursor *c, uint64_t *v, const char *what) {
    return rd(c, v, sizeof *v, what);
}
static kiln_status rd_i64(cursor *c, int64_t *v, const char *what) {
    return rd(c, v, sizeof *v, what);
}

static kiln_status rd_zero32(cursor *c) {
    uint32_t v;
    KN_TRY(rd_u32(c, &v, "a reserved field"));
    return v == 0 ? KILN_OK : fail(c, "reserved field is %u, not 0", v);
}

/* A count of items of at least `item` bytes each, bounded by the bytes left and by INT_MAX. */
static kiln_status rd_count(cursor *c, uint32_t *n, uint64_t item, const char *what) {
    KN_TRY(rd_u32(c, n, what));
    if (*n > INT_MAX || (uint64_t)*n * item > left(c))
        return fail(c, "%s %u does not fit in the %llu bytes left", what, *n,
                    (unsigned long long)left(c));
    return KILN_OK;
}

/* A string reference. `opt`: KN_PLAN_NO_STRING gives NULL. `bytes`: NUL bytes allowed inside
 * (attribute strings); names may not hold them. */
static kiln_status rd_str(cursor *c, const char *what, bool opt, bool bytes, const char **s,
                          size_t *len) {
    uint32_t ref;
    KN_TRY(rd_u32(c, &ref, what));
    *s = NULL;
    if (len)
        *len = 0;
    if (ref == KN_PLAN_NO_STRING) {
        if (opt)
            return KILN_OK;
        return fail(c, "%s is missing", what);
    }
    if (ref >= c->r->n_str)
        return fail(c, "%s refers to string %u of %u", what, ref, c->r->n_str);
    uint32_t off, n;
    memcpy(&off, c->r->str_entries + (size_t)ref * KN_PLAN_STRING_ENTRY, sizeof off);
    memcpy(&n, c->r->str_entries + (size_t)ref * KN_PLAN_STRING_ENTRY + 4, sizeof n);
    *s = c->r->str_blob + off;
    if (!bytes && memchr(*s, 0, n))
        return fail(c, "%s contains a NUL byte", what);
    if (len)
        *len = n;
    return KILN_OK;
}

static bool dtype_known(int32_t t) {
    /* float8, 4- and 2-bit values are stored one byte each, as kiln holds them in memory */
    return (t >= KILN_DTYPE_UNDEFINED && t <= KILN_DTYPE_UINT64) ||
           (t >= KILN_DTYPE_BFLOAT16 && t <= KILN_DTYPE_INT2) ||
           t == KILN_DTYPE_CONTAINER; /* bytes, checked where an op opens them */
}

/* Shape and data of a constant or tensor attribute: dims fixed and sane, bytes inside WEIGHTS,
 * 64-byte aligned and exactly numel * element size long. */
static kiln_status check_data(cursor *c, int32_t dtype, const kn_shape *s, uint64_t off,
                              uint64_t size, void **data) {
    size_t esize = kn_dtype_size(dtype);
    if (esize == 0)
        return fail(c, "data of dtype %d cannot be stored", (int)dtype);
    if (!kn_shape_valid(s))
        return fail(c, "data has an invalid shape");
    uint64_t want = (uint64_t)kn_shape_numel(s) * esize;
    uint64_t wsize = c->r->sec_size[KN_PLAN_SEC_WEIGHTS];
    if (size != want)
        return fail(c, "data is %llu bytes, its shape needs %llu", (unsigned long long)size,
                    (unsigned long long)want);
    if (off % KN_PLAN_ALIGN != 0 || off > wsize || size > wsize - off)
        return fail(c, "data [%llu, +%llu) is not an aligned range of WEIGHTS (%llu bytes)",
                    (unsigned long long)off, (unsigned long long)size, (unsigned long long)wsize);
    *data = (void *)(c->r->sec[KN_PLAN_SEC_WEIGHTS] + off);
    return KILN_OK;
}

static kiln_status rd_value(cursor *c, kn_value *v) {
    const char *name;
    int32_t dtype, rank;
    uint32_t flags;
    KN_TRY(rd_str(c, "name", false, false, &name, NULL));
    KN_TRY(rd_i32(c, &dtype, "dtype"));
    KN_TRY(rd_i32(c, &rank, "rank"));
    KN_TRY(rd_u32(c, &flags, "flags"));
    if (!dtype_known(dtype))
        return fail(c, "unknown dtype %d", (int)dtype);
    if (rank < -1 || rank > KN_MAX_RANK)
        return fail(c, "rank %d is out of range", (int)rank);
    if ((flags & ~(KN_PLAN_VALUE_CONST | KN_PLAN_VALUE_KIND_MASK)) ||
        ((flags & KN_PLAN_VALUE_KIND_MASK) && dtype != KILN_DTYPE_CONTAINER))
        return fail(c, "unknown flags 0x%x", flags);
    if (!(v->name = kn_strdup(name)))
        return oom();
    v->container = (int32_t)((flags & KN_PLAN_VALUE_KIND_MASK) >> KN_PLAN_VALUE_KIND_SHIFT);
    v->dtype = dtype;
    v->rank = rank;
    v->producer = -1;
    uint64_t off, size;
    KN_TRY(rd_u64(c, &off, "a data offset"));
    KN_TRY(rd_u64(c, &size, "a data size"));
    kn_shape shape = {.rank = rank < 0 ? 0 : rank};
    bool fixed = true;
    for (int d = 0; d < rank; d++) {
        int64_t dv;
        const char *sym;
        KN_TRY(rd_i64(c, &dv, "a dim"));
        KN_TRY(rd_str(c, "a dim symbol", true, false, &sym, NULL));
        KN_TRY(rd_zero32(c));
        if (dv < -1 || dv > KN_MAX_ELEMENTS || (sym && dv != -1))
            return fail(c, "dim %d is %lld%s", d, (long long)dv, sym ? " with a symbol" : "");
        v->dims[d].value = dv;
        if (sym && !(v->dims[d].sym = kn_strdup(sym)))
            return oom();
        fixed = fixed && dv >= 0;
        shape.d[d] = dv;
    }
    if (!(flags & KN_PLAN_VALUE_CONST)) {
        if (off || size)
            return fail(c, "a non-constant has data");
        return KILN_OK;
    }
    if (rank < 0 || !fixed)
        return fail(c, "a constant has an unknown or symbolic shape");
    return check_data(c, dtype, &shape, off, size, &v->data);
}

static kiln_status rd_attr(cursor *c, kn_graph *g, int node) {
    const char *name;
    uint32_t type, n = 0;
    KN_TRY(rd_str(c, "attribute name", false, false, &name, NULL));
    KN_TRY(rd_u32(c, &type, "attribute type"));
    kn_attr a = {.name = (char *)name, .type = (int32_t)type};
    kn_tensor t = {0};
    void *items = NULL;
    kiln_status rc = KILN_OK;
    switch (type) {
    case KN_ATTR_FLOAT:
        rc = rd(c, &a.f, sizeof a.f, "a float attribute");
        break;
    case KN_ATTR_INT:
        rc = rd_i64(c, &a.i, "an int attribute");
        break;
    case KN_ATTR_STRING: {
        const char *s;
        rc = rd_str(c, "a string attribute", false, true, &s, &a.slen);
        a.s = (char *)s;
        break;
    }
    case KN_ATTR_TENSOR:
        KN_TRY(rd_i32(c, &t.dtype, "a tensor attribute dtype"));
        KN_TRY(rd_i32(c, &t.shape.rank, "a tensor attribute rank"));
        if (t.shape.rank < 0 || t.shape.rank > KN_MAX_RANK)
            return fail(c, "tensor attribute '%s' has rank %d", name, (int)t.shape.rank);
        for (int d = 0; d < t.shape.rank; d++)
            KN_TRY(rd_i64(c, &t.shape.d[d], "a tensor attribute dim"));
        uint64_t off, size;
        KN_TRY(rd_u64(c, &off, "a data offset"));
        KN_TRY(rd_u64(c, &size, "a data size"));
        KN_TRY(check_data(c, t.dtype, &t.shape, off, size, &t.data));
        a.t = &t;
        break;
    case KN_ATTR_GRAPH: {
        uint32_t n_outer;
        KN_TRY(rd_u32(c, &n_outer, "a subgraph's enclosing-value count"));
        KN_TRY(rd_zero32(c));
        if (c->depth >= KN_PLAN_MAX_BODY_DEPTH)
            return fail(c, "subgraphs nest more than %d deep", KN_PLAN_MAX_BODY_DEPTH);
        if ((a.g = kn_graph_create()) == NULL)
            return oom();
        char where[sizeof c->where];
        memcpy(where, c->where, sizeof where);
        c->depth++;
        rc = rd_graph_record(c, a.g);
        c->depth--;
        if (rc == KILN_OK && n_outer > (uint32_t)a.g->n_inputs)
            rc = fail(c, "subgraph '%s' has %u enclosing values but %d inputs", name, n_outer,
                      a.g->n_inputs);
        if (rc == KILN_OK)
            a.g->n_outer = (int)n_outer;
        memcpy(c->where, where, sizeof where);
        break;
    }
    case KN_ATTR_FLOATS:
    case KN_ATTR_INTS:
    case KN_ATTR_STRINGS: {
        size_t item = type == KN_ATTR_FLOATS ? sizeof(float)
                      : type == KN_ATTR_INTS ? sizeof(int64_t)
                                             : sizeof(uint32_t);
        KN_TRY(rd_count(c, &n, item, "attribute element count"));
        a.n = n;
        if (n == 0)
            break;
        items = kn_calloc(n, type == KN_ATTR_STRINGS ? sizeof(char *) : item);
        if (!items)
            return oom();
        if (type != KN_ATTR_STRINGS) {
            rc = rd(c, items, (size_t)n * item, "attribute elements");
            if (type == KN_ATTR_FLOATS)
                a.floats = items;
            else
                a.ints = items;
            break;
        }
        const char **strs = items;
        for (uint32_t i = 0; i < n && rc == KILN_OK; i++)
            rc = rd_str(c, "a strings attribute element", false, false, &strs[i], NULL);
        a.strings = (char **)strs;
        break;
    }
    default:
        return fail(c, "attribute '%s' has unknown type %u", name, type);
    }
    if (rc == KILN_OK)
        rc = kn_node_add_attr(g, node, &a);
    kn_graph_destroy(a.g);
    kn_free(items);
    return rc;
}

static kiln_status rd_indices(cursor *c, kn_graph *g, uint32_t n, int *out, const char *what) {
    for (uint32_t i = 0; i < n; i++) {
        int32_t v;
        KN_TRY(rd_i32(c, &v, what));
        if (v < -1 || v >= g->n_values)
            return fail(c, "%s %u refers to value %d of %d", what, i, (int)v, g->n_values);
        out[i] = v;
    }
    return KILN_OK;
}

static kiln_status rd_node(cursor *c, kn_graph *g) {
    const char *name, *op, *domain;
    int32_t opset;
    uint32_t flags, n_in, n_out, n_attr;
    KN_TRY(rd_str(c, "name", false, false, &name, NULL));
    KN_TRY(rd_str(c, "op_type", false, false, &op, NULL));
    KN_TRY(rd_str(c, "domain", false, false, &domain, NULL));
    KN_TRY(rd_i32(c, &opset, "opset"));
    KN_TRY(rd_u32(c, &flags, "flags"));
    if (!op[0])
        return fail(c, "empty op_type");
    if (flags & ~KN_PLAN_NODE_DEAD)
        return fail(c, "unknown flags 0x%x", flags);
    KN_TRY(rd_u32(c, &n_in, "input count"));
    KN_TRY(rd_u32(c, &n_out, "output count"));
    KN_TRY(rd_u32(c, &n_attr, "attribute count"));
    if (n_in > INT_MAX || n_out > INT_MAX || n_attr > INT_MAX ||
        ((uint64_t)n_in + n_out) * 4 + (uint64_t)n_attr * 8 > left(c))
        return fail(c, "%u inputs, %u outputs and %u attributes do not fit in %llu bytes", n_in,
                    n_out, n_attr, (unsigned long long)left(c));
    int *idx = kn_malloc(((size_t)n_in + n_out + 1) * sizeof(int));
    if (!idx)
        return oom();
    kiln_status rc = rd_indices(c, g, n_in, idx, "input");
    if (rc == KILN_OK)
        rc = rd_indices(c, g, n_out, idx + n_in, "output");
    int node = -1;
    if (rc == KILN_OK) {
        node =
            kn_graph_add_node(g, name, op, domain, opset, (int)n_in, idx, (int)n_out, idx + n_in);
        rc = node < 0 ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
    }
    kn_free(idx);
    if (rc != KILN_OK)
        return rc;
    g->nodes[node].dead = (flags & KN_PLAN_NODE_DEAD) != 0;
    for (uint32_t i = 0; i < n_attr; i++)
        KN_TRY(rd_attr(c, g, node));
    return KILN_OK;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static kiln_status check_unique_names(cursor *c, const kn_graph *g) {
    const char **names = kn_malloc(((size_t)g->n_values + 1) * sizeof(char *));
    if (!names)
        return oom();
    for (int i = 0; i < g->n_values; i++)
        names[i] = g->values[i].name;
    qsort(names, (size_t)g->n_values, sizeof(char *), cmp_str);
    kiln_status rc = KILN_OK;
    for (int i = 1; i < g->n_values && rc == KILN_OK; i++)
        if (strcmp(names[i - 1], names[i]) == 0)
            rc = fail(c, "value name '%s' is defined twice", names[i]);
    kn_free(names);
    return rc;
}

/* Nodes in order, each reading only graph inputs, constants and outputs of earlier live nodes;
 * no value produced twice; no constant or graph input overwritten; every output produced. */
static kiln_status check_dataflow(cursor *c, kn_graph *g) {
    int *prod = kn_malloc(((size_t)g->n_values + 1) * sizeof(int));
    if (!prod)
        return oom();
    for (int v = 0; v < g->n_values; v++)
        prod[v] = -1;
    kiln_status rc = KILN_OK;
    for (int i = 0; i < g->n_nodes && rc == KILN_OK; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        snprintf(c->where, sizeof c->where, "node %d '%s'", i, n->name);
        for (int k = 0; k < n->n_in && rc == KILN_OK; k++) {
            int v = n->in[k];
            if (v >= 0 && !g->values[v].is_input && !kn_value_is_const(&g->values[v]) &&
                prod[v] < 0)
                rc = fail(c, "reads value '%s' before any node produces it", g->values[v].name);
        }
        for (int k = 0; k < n->n_out && rc == KILN_OK; k++) {
            int v = n->out[k];
            if (v < 0)
                continue;
            if (prod[v] >= 0 || g->values[v].is_input || kn_value_is_const(&g->values[v]))
                rc = fail(c,
                          "writes value '%s', which is a graph input, a constant or written "
                          "by another node",
                          g->values[v].name);
            prod[v] = i;
        }
    }
    snprintf(c->where, sizeof c->where, "graph outputs");
    for (int i = 0; i < g->n_outputs && rc == KILN_OK; i++) {
        const kn_value *v = &g->values[g->outputs[i]];
        if (!v->is_input && !kn_value_is_const(v) && prod[g->outputs[i]] < 0)
            rc = fail(c, "output '%s' is produced by no node", v->name);
    }
    for (int v = 0; v < g->n_values && rc == KILN_OK; v++)
        if (prod[v] >= 0)
            g->values[v].producer = prod[v];
    kn_free(prod);
    return rc;
}

static kiln_status rd_io(cursor *c, kn_graph *g, uint32_t n_inputs, uint32_t n_outputs) {
    for (uint32_t i = 0; i < n_inputs + n_outputs; i++) {
        bool input = i < n_inputs;
        int32_t v;
        snprintf(c->where, sizeof c->where, "graph %s %u", input ? "input" : "output",
                 input ? i : i - n_inputs);
        KN_TRY(rd_i32(c, &v, "a value index"));
        if (v < 0 || v >= g->n_values)
            return fail(c, "refers to value %d of %d", (int)v, g->n_values);
        if (input && (g->values[v].is_input || kn_value_is_const(&g->values[v])))
            return fail(c, "value '%s' is listed twice or is a constant", g->values[v].name);
        KN_TRY(input ? kn_graph_add_input(g, v) : kn_graph_add_output(g, v));
    }
    return KILN_OK;
}

/* One graph record: the top-level graph, or a subgraph body inside an attribute. */
static kiln_status rd_graph_record(cursor *c, kn_graph *g) {
    const char *name;
    uint32_t n_values, n_nodes, n_inputs, n_outputs, n_opsets;
    KN_TRY(rd_str(c, "graph name", true, false, &name, NULL));
    KN_TRY(rd_count(c, &n_values, KN_PLAN_VALUE_HEAD, "value count"));
    KN_TRY(rd_count(c, &n_nodes, KN_PLAN_NODE_HEAD, "node count"));
    KN_TRY(rd_count(c, &n_inputs, 4, "input count"));
    KN_TRY(rd_count(c, &n_outputs, 4, "output count"));
    KN_TRY(rd_count(c, &n_opsets, KN_PLAN_OPSET_SIZE, "opset count"));
    KN_TRY(rd_zero32(c));
    KN_TRY(rd_i64(c, &g->ir_version, "ir_version"));
    if (name && !(g->name = kn_strdup(name)))
        return oom();
    g->values = kn_calloc((size_t)n_values + 1, sizeof(kn_value));
    if (!g->values)
        return oom();
    /* Values are placed directly: kn_graph_add_value's duplicate check is linear per value;
     * uniqueness is checked once below instead. */
    g->cap_values = (int)n_values + 1;
    for (uint32_t i = 0; i < n_values; i++) {
        snprintf(c->where, sizeof c->where, "value %u", i);
        g->n_values++;
        KN_TRY(rd_value(c, &g->values[i]));
    }
    snprintf(c->where, sizeof c->where, "values");
    KN_TRY(check_unique_names(c, g));
    for (uint32_t i = 0; i < n_nodes; i++) {
        snprintf(c->where, sizeof c->where, "node %u", i);
        KN_TRY(rd_node(c, g));
    }
    KN_TRY(rd_io(c, g, n_inputs, n_outputs));
    for (uint32_t i = 0; i < n_opsets; i++) {
        const char *domain;
        int64_t version;
        snprintf(c->where, sizeof c->where, "opset import %u", i);
        KN_TRY(rd_str(c, "domain", false, false, &domain, NULL));
        KN_TRY(rd_zero32(c));
        KN_TRY(rd_i64(c, &version, "version"));
        KN_TRY(kn_graph_add_opset(g, domain, version));
    }
    return check_dataflow(c, g);
}

static kiln_status rd_graph(cursor *c, kn_graph *g) {
    KN_TRY(rd_graph_record(c, g));
    snprintf(c->where, sizeof c->where, "end");
    if (left(c))
        return fail(c, "%llu unread bytes", (unsigned long long)left(c));
    return KILN_OK;
}

kiln_status kn_plan_parse_graph(const kn_plan_reader *r, kn_graph **out) {
    cursor c = {r, r->sec[KN_PLAN_SEC_GRAPH], r->sec_size[KN_PLAN_SEC_GRAPH], 0, "GRAPH", "header",
                0};
    kn_graph *g = kn_graph_create();
    if (!g)
        return oom();
    kiln_status rc = rd_graph(&c, g);
    if (rc != KILN_OK) {
        kn_graph_destroy(g);
        return rc;
    }
    *out = g;
    return KILN_OK;
}

static kiln_status rd_profile(cursor *c, const kn_plan *plan, kn_profile *p) {
    const kn_graph *g = plan->graph;
    const char *input;
    KN_TRY(rd_str(c, "input name", false, false, &input, NULL));
    KN_TRY(rd_i32(c, &p->rank, "rank"));
    if (p->rank < 0 || p->rank > KN_MAX_RANK)
        return fail(c, "rank %d is out of range", (int)p->rank);
    for (int d = 0; d < p->rank; d++)
        KN_TRY(rd_i64(c, &p->min[d], "min"));
    for (int d = 0; d < p->rank; d++)
        KN_TRY(rd_i64(c, &p->opt[d], "opt"));
    for (int d = 0; d < p->rank; d++)
        KN_TRY(rd_i64(c, &p->max[d], "max"));
    for (int d = 0; d < p->rank; d++)
        if (p->min[d] < 0 || p->min[d] > p->opt[d] || p->opt[d] > p->max[d] ||
            p->max[d] > KN_MAX_ELEMENTS)
            return fail(c, "axis %d range min %lld opt %lld max %lld is not ordered", d,
                        (long long)p->min[d], (long long)p->opt[d], (long long)p->max[d]);
    const kn_value *v = NULL;
    for (int i = 0; i < g->n_inputs && !v; i++)
        if (strcmp(g->values[g->inputs[i]].name, input) == 0)
            v = &g->values[g->inputs[i]];
    if (!v)
        return fail(c, "'%s' is not a graph input", input);
    if (v->rank >= 0 && v->rank != p->rank)
        return fail(c, "input '%s' has rank %d, its profile %d", input, (int)v->rank, (int)p->rank);
    for (int i = 0; i < plan->n_profiles; i++)
        if (strcmp(plan->profiles[i].input, input) == 0)
            return fail(c, "input '%s' has two profiles", input);
    return (p->input = kn_strdup(input)) ? KILN_OK : oom();
}

kiln_status kn_plan_parse_profiles(const kn_plan_reader *r, kn_plan *plan) {
    cursor c = {
        r, r->sec[KN_PLAN_SEC_PROFILES], r->sec_size[KN_PLAN_SEC_PROFILES], 0, "PROFILES", "header",
        0};
    uint32_t n;
    KN_TRY(rd_count(&c, &n, 8, "profile count"));
    KN_TRY(rd_i32(&c, &plan->threads, "threads"));
    if (plan->threads < 0 || plan->threads > KN_PLAN_MAX_THREADS)
        return fail(&c, "thread count %d is out of range", (int)plan->threads);
    if (n > (uint32_t)plan->graph->n_inputs)
        return fail(&c, "%u profiles for %d graph inputs", n, plan->graph->n_inputs);
    plan->profiles = kn_calloc((size_t)n + 1, sizeof(kn_profile));
    if (!plan->profiles)
        return oom();
    for (uint32_t i = 0; i < n; i++) {
        snprintf(c.where, sizeof c.where, "profile %u", i);
        kn_profile p = {0};
        KN_TRY(rd_profile(&c, plan, &p));
        plan->profiles[plan->n_profiles++] = p;
    }
    snprintf(c.where, sizeof c.where, "end");
    if (left(&c))
        return fail(&c, "%llu unread bytes", (unsigned long long)left(&c));
    return KILN_OK;
}
