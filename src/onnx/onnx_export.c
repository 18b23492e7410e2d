/* kn_graph -> ModelProto through protobuf-c: opsets, initializers (inline, or in a side file
 * above a size threshold), inputs, nodes, value_info and outputs. Every message and array is
 * allocated from one list owned by the exporter, so a failure anywhere frees everything. */
#include "onnx/onnx_export.h"

#include "core/alloc.h"
#include "core/fileio.h"
#include "core/narrow_dtype.h"
#include "core/strings.h"
#include "onnx/onnx_private.h"

#include <stdio.h>
#include <string.h>

/* Offsets of tensors in the external data file are aligned so a reader can map them. */
#define KN_EXTERNAL_ALIGN 4096

typedef struct exporter {
    void **blocks;
    size_t n_blocks, cap_blocks;
    const char *data_name; /* external data file name, relative to the model */
    size_t threshold;      /* tensors of at least this many bytes go external; 0: none */
    unsigned char *ext;    /* external data being built */
    size_t ext_size, ext_cap;
} exporter;

static kiln_status oom(void) {
    return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory writing the model");
}

static void *ex_alloc(exporter *ex, size_t n, size_t size) {
    if (ex->n_blocks == ex->cap_blocks) {
        size_t cap = ex->cap_blocks ? ex->cap_blocks * 2 : 256;
        void **b = kn_realloc(ex->blocks, ex->cap_blocks * sizeof *b, cap * sizeof *b);
        if (b == NULL)
            return NULL;
        ex->blocks = b;
        ex->cap_blocks = cap;
    }
    void *p = kn_calloc(n ? n : 1, size);
    if (p != NULL)
        ex->blocks[ex->n_blocks++] = p;
    return p;
}

static char *ex_strdup(exporter *ex, const char *s) {
    size_t n = strlen(s) + 1;
    char *p = ex_alloc(ex, n, 1);
    if (p != NULL)
        memcpy(p, s, n);
    return p;
}

static void ex_free(exporter *ex) {
    for (size_t i = 0; i < ex->n_blocks; i++)
        kn_free(ex->blocks[i]);
    kn_free(ex->blocks);
    kn_free(ex->ext);
}

static kiln_status ext_append(exporter *ex, const void *data, size_t size, size_t *offset) {
    size_t start = (ex->ext_size + KN_EXTERNAL_ALIGN - 1) / KN_EXTERNAL_ALIGN * KN_EXTERNAL_ALIGN;
    if (start + size > ex->ext_cap) {
        size_t cap = ex->ext_cap ? ex->ext_cap : 1 << 20;
        while (cap < start + size)
            cap *= 2;
        unsigned char *p = kn_realloc(ex->ext, ex->ext_cap, cap);
        if (p == NULL)
            return oom();
        ex->ext = p;
        ex->ext_cap = cap;
    }
    memset(ex->ext + ex->ext_size, 0, start - ex->ext_size);
    memcpy(ex->ext + start, data, size);
    ex->ext_size = start + size;
    *offset = start;
    return KILN_OK;
}

static Onnx__StringStringEntryProto *entry(exporter *ex, const char *key, const char *value) {
    Onnx__StringStringEntryProto *e = ex_alloc(ex, 1, sizeof *e);
    if (e == NULL)
        return NULL;
    onnx__string_string_entry_proto__init(e);
    e->key = ex_strdup(ex, key);
    e->value = ex_strdup(ex, value);
    return e->key && e->value ? e : NULL;
}

/* Point tp at bytes in the external file instead of raw_data. */
static kiln_status tensor_external(exporter *ex, Onnx__TensorProto *tp, const void *data,
                                   size_t nb) {
    size_t off;
    KN_TRY(ext_append(ex, data, nb, &off));
    char offs[32], lens[32];
    snprintf(offs, sizeof offs, "%zu", off);
    snprintf(lens, sizeof lens, "%zu", nb);
    tp->external_data = ex_alloc(ex, 3, sizeof *tp->external_data);
    if (tp->external_data == NULL)
        return oom();
    tp->external_data[0] = entry(ex, "location", ex->data_name);
    tp->external_data[1] = entry(ex, "offset", offs);
    tp->external_data[2] = entry(ex, "length", lens);
    if (!tp->external_data[0] || !tp->external_data[1] || !tp->external_data[2])
        return oom();
    tp->n_external_data = 3;
    tp->has_data_location = 1;
    tp->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    return KILN_OK;
}

/* A string block (core/strings.h) as dims and string_data, which borrow the graph's bytes. */
static kiln_status string_proto(exporter *ex, const kn_tensor *t, Onnx__TensorProto *tp,
                                Onnx__TensorProto **out) {
    kn_strings s;
    KN_TRY(kn_strings_open(t, "a string constant", &s));
    tp->n_dims = (size_t)s.shape.rank;
    tp->dims = ex_alloc(ex, tp->n_dims, sizeof *tp->dims);
    tp->string_data = ex_alloc(ex, (size_t)s.count + 1, sizeof *tp->string_data);
    if (tp->dims == NULL || tp->string_data == NULL)
        return oom();
    memcpy(tp->dims, s.shape.d, tp->n_dims * sizeof *tp->dims);
    tp->n_string_data = (size_t)s.count;
    for (int64_t i = 0; i < s.count; i++) {
        kn_str e = kn_strings_at(&s, i);
        tp->string_data[i].len = e.n;
        tp->string_data[i].data = (uint8_t *)e.p;
    }
    *out = tp;
    return KILN_OK;
}

static kiln_status tensor_proto(exporter *ex, const char *name, const kn_tensor *t,
                                Onnx__TensorProto **out) {
    Onnx__TensorProto *tp = ex_alloc(ex, 1, sizeof *tp);
    if (tp == NULL)
        return oom();
    onnx__tensor_proto__init(tp);
    if (name != NULL && (tp->name = ex_strdup(ex, name)) == NULL)
        return oom();
    tp->has_data_type = 1;
    tp->data_type = t->dtype;
    if (t->dtype == KILN_DTYPE_STRING)
        return string_proto(ex, t, tp, out);
    tp->n_dims = (size_t)t->shape.rank;
    tp->dims = ex_alloc(ex, tp->n_dims, sizeof *tp->dims);
    if (tp->dims == NULL)
        return oom();
    memcpy(tp->dims, t->shape.d, tp->n_dims * sizeof *tp->dims);
    size_t nb = kn_tensor_nbytes(t);
    const uint8_t *bytes = t->data;
    int bits = kn_dtype_packed_bits(t->dtype);
    if (bits != 0) { /* ONNX packs 8 / bits values a byte, low bits first */
        size_t n = nb, per = (size_t)(8 / bits);
        nb = (n + per - 1) / per;
        uint8_t *packed = ex_alloc(ex, nb > 0 ? nb : 1, 1);
        if (packed == NULL)
            return oom();
        memset(packed, 0, nb > 0 ? nb : 1);
        for (size_t i = 0; i < n; i++)
            packed[i / per] |= (uint8_t)((bytes[i] & ((1u << bits) - 1)) << (i % per * bits));
        bytes = packed;
    }
    if (ex->threshold > 0 && nb >= ex->threshold && ex->data_name != NULL) {
        KN_TRY(tensor_external(ex, tp, bytes, nb));
    } else {
        /* raw_data borrows the graph's bytes: the message is packed before the graph goes. */
        tp->has_raw_data = 1;
        tp->raw_data.len = nb;
        tp->raw_data.data = (uint8_t *)bytes;
    }
    *out = tp;
    return KILN_OK;
}

static kiln_status attr_proto(exporter *ex, const kn_attr *a, Onnx__AttributeProto **out) {
    Onnx__AttributeProto *ap = ex_alloc(ex, 1, sizeof *ap);
    if (ap == NULL)
        return oom();
    onnx__attribute_proto__init(ap);
    ap->name = a->name;
    ap->has_type = 1;
    ap->type = (Onnx__AttributeProto__AttributeType)a->type;
    switch (a->type) {
    case KN_ATTR_FLOAT:
        ap->has_f = 1, ap->f = a->f;
        break;
    case KN_ATTR_INT:
        ap->has_i = 1, ap->i = a->i;
        break;
    case KN_ATTR_STRING:
        ap->has_s = 1, ap->s.data = (uint8_t *)a->s, ap->s.len = a->slen;
        break;
    case KN_ATTR_TENSOR:
        KN_TRY(tensor_proto(ex, NULL, a->t, &ap->t));
        break;
    case KN_ATTR_FLOATS:
        ap->n_floats = (size_t)a->n, ap->floats = a->floats;
        break;
    case KN_ATTR_INTS:
        ap->n_ints = (size_t)a->n, ap->ints = a->ints;
        break;
    case KN_ATTR_STRINGS:
        ap->n_strings = (size_t)a->n;
        ap->strings = ex_alloc(ex, ap->n_strings, sizeof *ap->strings);
        if (ap->strings == NULL)
            return oom();
        for (int64_t i = 0; i < a->n; i++) {
            ap->strings[i].data = (uint8_t *)a->strings[i];
            ap->strings[i].len = strlen(a->strings[i]);
        }
        break;
    default:
        return kn_error(KILN_ERR_UNSUPPORTED, "attribute '%s' has type %d, which kiln cannot write",
                        a->name, (int)a->type);
    }
    *out = ap;
    return KILN_OK;
}

static kiln_status value_info(exporter *ex, const kn_value *v, bool need_type,
                              Onnx__ValueInfoProto **out) {
    Onnx__ValueInfoProto *vi = ex_alloc(ex, 1, sizeof *vi);
    if (vi == NULL)
        return oom();
    onnx__value_info_proto__init(vi);
    vi->name = v->name;
    *out = vi;
    if (v->dtype == 0) {
        if (need_type)
            return kn_error(KILN_ERR_MODEL,
                            "graph input or output '%s' has no known type; give it one with "
                            "--set-shape or extract from a point where types are known",
                            v->name);
        return KILN_OK;
    }
    Onnx__TypeProto *tp = ex_alloc(ex, 1, sizeof *tp);
    Onnx__TypeProto__Tensor *tt = ex_alloc(ex, 1, sizeof *tt);
    if (tp == NULL || tt == NULL)
        return oom();
    onnx__type_proto__init(tp);
    onnx__type_proto__tensor__init(tt);
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    tt->has_elem_type = 1;
    tt->elem_type = v->dtype;
    vi->type = tp;
    if (v->rank < 0 || v->dtype == KILN_DTYPE_STRING) /* a string's own shape is in its data */
        return KILN_OK;
    Onnx__TensorShapeProto *sh = ex_alloc(ex, 1, sizeof *sh);
    Onnx__TensorShapeProto__Dimension **dims = ex_alloc(ex, (size_t)v->rank, sizeof *dims);
    if (sh == NULL || dims == NULL)
        return oom();
    onnx__tensor_shape_proto__init(sh);
    for (int d = 0; d < v->rank; d++) {
        Onnx__TensorShapeProto__Dimension *dim = ex_alloc(ex, 1, sizeof *dim);
        if (dim == NULL)
            return oom();
        onnx__tensor_shape_proto__dimension__init(dim);
        if (v->dims[d].sym != NULL) {
            dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            dim->dim_param = v->dims[d].sym;
        } else if (v->dims[d].value >= 0) {
            dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            dim->dim_value = v->dims[d].value;
        }
        dims[d] = dim;
    }
    sh->n_dim = (size_t)v->rank;
    sh->dim = dims;
    tt->shape = sh;
    return KILN_OK;
}

static kiln_status node_proto(exporter *ex, const kn_graph *g, const kn_node *n,
                              Onnx__NodeProto **out) {
    Onnx__NodeProto *np = ex_alloc(ex, 1, sizeof *np);
    if (np == NULL)
        return oom();
    onnx__node_proto__init(np);
    np->name = n->name;
    np->op_type = n->op_type;
    np->domain = n->domain;
    np->n_input = (size_t)n->n_in;
    np->n_output = (size_t)n->n_out;
    np->input = ex_alloc(ex, np->n_input, sizeof *np->input);
    np->output = ex_alloc(ex, np->n_output, sizeof *np->output);
    np->n_attribute = (size_t)n->n_attr;
    np->attribute = ex_alloc(ex, np->n_attribute, sizeof *np->attribute);
    if (np->input == NULL || np->output == NULL || np->attribute == NULL)
        return oom();
    for (int i = 0; i < n->n_in; i++)
        np->input[i] = n->in[i] >= 0 ? g->values[n->in[i]].name : "";
    for (int i = 0; i < n->n_out; i++)
        np->output[i] = n->out[i] >= 0 ? g->values[n->out[i]].name : "";
    for (int i = 0; i < n->n_attr; i++)
        KN_TRY(attr_proto(ex, &n->attr[i], &np->attribute[i]));
    *out = np;
    return KILN_OK;
}

static kiln_status graph_proto(exporter *ex, const kn_graph *g, Onnx__GraphProto *gp) {
    onnx__graph_proto__init(gp);
    gp->name = g->name != NULL ? g->name : "kiln";
    size_t nv = (size_t)g->n_values;
    gp->initializer = ex_alloc(ex, nv, sizeof *gp->initializer);
    gp->value_info = ex_alloc(ex, nv, sizeof *gp->value_info);
    gp->input = ex_alloc(ex, (size_t)g->n_inputs, sizeof *gp->input);
    gp->output = ex_alloc(ex, (size_t)g->n_outputs, sizeof *gp->output);
    gp->node = ex_alloc(ex, (size_t)g->n_nodes, sizeof *gp->node);
    if (!gp->initializer || !gp->value_info || !gp->input || !gp->output || !gp->node)
        return oom();
    for (int v = 0; v < g->n_values; v++) {
        const kn_value *val = &g->values[v];
        if (kn_value_is_const(val)) {
            kn_tensor t = kn_value_tensor(val);
            KN_TRY(tensor_proto(ex, val->name, &t, &gp->initializer[gp->n_initializer++]));
        } else if (!val->is_input && !val->is_output && val->dtype != 0) {
            KN_TRY(value_info(ex, val, false, &gp->value_info[gp->n_value_info++]));
        }
    }
    for (int i = 0; i < g->n_inputs; i++)
        KN_TRY(value_info(ex, &g->values[g->inputs[i]], true, &gp->input[gp->n_input++]));
    for (int i = 0; i < g->n_outputs; i++)
        KN_TRY(value_info(ex, &g->values[g->outputs[i]], true, &gp->output[gp->n_output++]));
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead)
            KN_TRY(node_proto(ex, g, &g->nodes[i], &gp->node[gp->n_node++]));
    return KILN_OK;
}

static bool domain_used(const kn_graph *g, const char *domain) {
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && strcmp(g->nodes[i].domain, domain) == 0)
            return true;
    return false;
}

/* Every imported opset, plus version 1 of a domain a node uses that has none (a plugin
 * domain added by an edit). */
static kiln_status opsets(exporter *ex, const kn_graph *g, Onnx__ModelProto *m) {
    size_t cap = (size_t)g->n_opsets + (size_t)g->n_nodes + 1;
    m->opset_import = ex_alloc(ex, cap, sizeof *m->opset_import);
    if (m->opset_import == NULL)
        return oom();
    for (int i = 0; i < g->n_opsets + g->n_nodes; i++) {
        const char *dom;
        int64_t ver;
        if (i < g->n_opsets) {
            dom = g->opsets[i].domain;
            ver = g->opsets[i].version;
            if (dom[0] != '\0' && !domain_used(g, dom))
                continue;
        } else {
            const kn_node *n = &g->nodes[i - g->n_opsets];
            if (n->dead || kn_graph_opset(g, n->domain) >= 0)
                continue;
            dom = n->domain;
            ver = 1;
            bool seen = false;
            for (size_t k = 0; k < m->n_opset_import && !seen; k++)
                seen = strcmp(m->opset_import[k]->domain, dom) == 0;
            if (seen)
                continue;
        }
        Onnx__OperatorSetIdProto *os = ex_alloc(ex, 1, sizeof *os);
        if (os == NULL)
            return oom();
        onnx__operator_set_id_proto__init(os);
        os->domain = (char *)dom;
        os->has_version = 1;
        os->version = ver;
        m->opset_import[m->n_opset_import++] = os;
    }
    return KILN_OK;
}

static kiln_status pack_model(exporter *ex, const kn_graph *g, void **data, size_t *size) {
    Onnx__ModelProto m;
    Onnx__GraphProto gp;
    onnx__model_proto__init(&m);
    m.has_ir_version = 1;
    m.ir_version = g->ir_version > 0 ? g->ir_version : 8;
    m.producer_name = "kiln";
    m.producer_version = (char *)kiln_version_string();
    KN_TRY(opsets(ex, g, &m));
    KN_TRY(graph_proto(ex, g, &gp));
    m.graph = &gp;
    size_t n = onnx__model_proto__get_packed_size(&m);
    void *buf = kn_malloc(n ? n : 1);
    if (buf == NULL)
        return oom();
    onnx__model_proto__pack(&m, buf);
    *data = buf;
    *size = n;
    return KILN_OK;
}

kiln_status kn_onnx_export(const kn_graph *g, void **data, size_t *size) {
    if (g == NULL || data == NULL || size == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kn_onnx_export: NULL argument");
    exporter ex = {0};
    kiln_status rc = pack_model(&ex, g, data, size);
    ex_free(&ex);
    return rc;
}

kiln_status kn_onnx_export_file(const kn_graph *g, const char *path, size_t external_threshold) {
    if (g == NULL || path == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kn_onnx_export_file: NULL argument");
    const char *slash = strrchr(path, '/');
    char data_name[512];
    snprintf(data_name, sizeof data_name, "%.500s.data", slash ? slash + 1 : path);
    exporter ex = {.threshold = external_threshold, .data_name = data_name};
    void *bytes = NULL;
    size_t size = 0;
    kiln_status rc = pack_model(&ex, g, &bytes, &size);
    if (rc == KILN_OK && ex.ext_size > 0) {
        char data_path[4096];
        snprintf(data_path, sizeof data_path, "%.*s%s", slash ? (int)(slash - path + 1) : 0, path,
                 data_name);
        rc = kn_file_write_atomic(data_path, ex.ext, ex.ext_size);
    }
    if (rc == KILN_OK)
        rc = kn_file_write_atomic(path, bytes, size);
    kn_free(bytes);
    ex_free(&ex);
    if (rc != KILN_OK)
        kn_error_prefix(rc, "writing '%s': ", path);
    return rc;
}
