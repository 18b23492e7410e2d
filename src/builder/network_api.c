/* Networks built by code: the same kn_graph an ONNX import produces, one checked call at a
 * time. */
#include "builder/builder.h"

#include "core/alloc.h"
#include "ops/op.h"
#include "shape/resolve.h"

#include <stdio.h>
#include <string.h>

#define KN_DEFAULT_OPSET 17

kiln_status kiln_network_create(kiln_builder *b, int opset, kiln_network **out) {
    if (b == NULL || out == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_network_create: NULL argument");
    if (opset == 0)
        opset = KN_DEFAULT_OPSET;
    if (opset < 7 || opset > KN_ONNX_MAX_OPSET)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "opset %d is outside 7..%d", opset,
                        KN_ONNX_MAX_OPSET);
    *out = NULL;
    kiln_network *n = kn_calloc(1, sizeof *n);
    kn_graph *g = kn_graph_create();
    if (n == NULL || g == NULL || kn_graph_add_opset(g, "", opset) != KILN_OK ||
        (g->name = kn_strdup("network")) == NULL) {
        kn_free(n);
        kn_graph_destroy(g);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    g->ir_version = 8;
    n->graph = g;
    n->builder = b;
    n->opset = opset;
    *out = n;
    return KILN_OK;
}

static kiln_status check_tensor(const kiln_network *net, int32_t t, const char *what) {
    if (t < 0 || t >= net->graph->n_values)
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "%s: tensor %d does not exist in this network (it has %d tensors)", what,
                        (int)t, net->graph->n_values);
    return KILN_OK;
}

static kiln_status check_net(const kiln_network *net, const void *out, const char *fn) {
    if (net == NULL || out == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: NULL argument", fn);
    return KILN_OK;
}

kiln_status kiln_network_add_input(kiln_network *net, const char *name, kiln_dtype dtype, int rank,
                                   const int64_t *dims, const char *const *symbols,
                                   int32_t *tensor) {
    KN_TRY(check_net(net, tensor, "kiln_network_add_input"));
    if (name == NULL || name[0] == '\0')
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "an input needs a name");
    if (kn_dtype_size(dtype) == 0)
        return kn_error(KILN_ERR_DTYPE, "input '%s': dtype %d is not supported", name, dtype);
    if (rank < 0 || rank > KN_MAX_RANK || (rank > 0 && dims == NULL))
        return kn_error(KILN_ERR_SHAPE, "input '%s': rank %d is not in [0, %d]", name, rank,
                        KN_MAX_RANK);
    for (int d = 0; d < rank; d++)
        if (dims[d] > KN_MAX_ELEMENTS)
            return kn_error(KILN_ERR_SHAPE, "input '%s' axis %d: dim %lld is absurdly large", name,
                            d, (long long)dims[d]);
    kn_graph *g = net->graph;
    int nv = g->n_values;
    int v = kn_graph_add_value(g, name);
    if (v < 0)
        return kn_error_prefix(KILN_ERR_INVALID_ARGUMENT, "input: ");
    kn_value *val = &g->values[v];
    val->dtype = dtype;
    val->rank = rank;
    for (int d = 0; d < rank; d++) {
        if (dims[d] >= 0) {
            val->dims[d].value = dims[d];
            continue;
        }
        char gen[300];
        const char *sym = symbols && symbols[d] ? symbols[d] : NULL;
        if (sym == NULL) {
            snprintf(gen, sizeof gen, "%s_dim%d", name, d);
            sym = gen;
        }
        val->dims[d].value = -1;
        if ((val->dims[d].sym = kn_strdup(sym)) == NULL) {
            kn_graph_truncate(g, nv, g->n_nodes);
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        }
    }
    if (kn_graph_add_input(g, v) != KILN_OK) {
        kn_graph_truncate(g, nv, g->n_nodes);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    *tensor = v;
    return KILN_OK;
}

kiln_status kiln_network_add_constant(kiln_network *net, const char *name, kiln_dtype dtype,
                                      int rank, const int64_t *dims, const void *data, int copy,
                                      int32_t *tensor) {
    KN_TRY(check_net(net, tensor, "kiln_network_add_constant"));
    kn_tensor t = {.dtype = dtype, .shape = {.rank = rank}, .data = (void *)data};
    if (kn_dtype_size(dtype) == 0)
        return kn_error(KILN_ERR_DTYPE, "constant '%s': dtype %d is not supported",
                        name ? name : "?", dtype);
    if (rank < 0 || rank > KN_MAX_RANK || (rank > 0 && dims == NULL))
        return kn_error(KILN_ERR_SHAPE, "constant '%s': rank %d is not in [0, %d]",
                        name ? name : "?", rank, KN_MAX_RANK);
    for (int d = 0; d < rank; d++)
        t.shape.d[d] = dims[d];
    if (!kn_shape_valid(&t.shape))
        return kn_error(KILN_ERR_SHAPE, "constant '%s': dims must be >= 0 and not absurd",
                        name ? name : "?");
    if (data == NULL && kn_tensor_numel(&t) > 0)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "constant '%s': NULL data", name ? name : "?");
    kn_graph *g = net->graph;
    int nv = g->n_values;
    int v = kn_graph_add_value(g, name);
    if (v < 0)
        return kn_error_prefix(KILN_ERR_INVALID_ARGUMENT, "constant: ");
    if (copy) {
        kiln_status rc = kn_value_set_const(g, v, &t);
        if (rc != KILN_OK) {
            kn_graph_truncate(g, nv, g->n_nodes);
            return rc;
        }
    } else {
        kn_value *val = &g->values[v];
        val->data = (void *)data;
        val->data_owned = false;
        val->dtype = dtype;
        val->rank = rank;
        for (int d = 0; d < rank; d++)
            val->dims[d].value = dims[d];
    }
    *tensor = v;
    return KILN_OK;
}

static kiln_status convert_attr(const kiln_attribute *a, kn_attr *out) {
    memset(out, 0, sizeof *out);
    if (a->name == NULL || a->name[0] == '\0')
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "an attribute needs a name");
    out->name = (char *)a->name;
    out->type = a->type;
    switch (a->type) {
    case KILN_ATTR_INT:
        out->i = a->i;
        break;
    case KILN_ATTR_FLOAT:
        out->f = a->f;
        break;
    case KILN_ATTR_STRING:
        if (a->s == NULL)
            return kn_error(KILN_ERR_INVALID_ARGUMENT, "attribute '%s': NULL string", a->name);
        out->s = (char *)a->s;
        out->slen = strlen(a->s);
        break;
    case KILN_ATTR_INTS:
    case KILN_ATTR_FLOATS:
        if (a->n < 0 || (a->n > 0 && (a->type == KILN_ATTR_INTS ? (const void *)a->ints
                                                                : (const void *)a->floats) == NULL))
            return kn_error(KILN_ERR_INVALID_ARGUMENT, "attribute '%s': bad list", a->name);
        out->n = a->n;
        out->ints = (int64_t *)a->ints;
        out->floats = (float *)a->floats;
        break;
    default:
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "attribute '%s': unknown type %d", a->name,
                        a->type);
    }
    return KILN_OK;
}

/* Run inference on the new node when every input shape is fixed; fill its outputs. */
static kiln_status validate_node(kn_graph *g, int node, const kiln_plugin_instance *plugin) {
    const kn_node *n = &g->nodes[node];
    kn_tensor in[64], out[64];
    if (n->n_in > 64 || n->n_out > 64)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "more than 64 inputs or outputs");
    for (int j = 0; j < n->n_in; j++) {
        memset(&in[j], 0, sizeof in[j]);
        if (n->in[j] < 0)
            continue;
        const kn_value *v = &g->values[n->in[j]];
        if (!kn_value_shape(v, &in[j].shape) || v->dtype == 0)
            return KILN_OK; /* symbolic: checked at build time against the profile */
        in[j].dtype = v->dtype;
        in[j].data = v->data;
    }
    kiln_status rc = plugin ? kn_plugin_infer(n, plugin, in, out) : kn_infer_node(n, NULL, in, out);
    if (rc == KN_NEED_DATA)
        return KILN_OK;
    KN_TRY(rc);
    for (int j = 0; j < n->n_out; j++) {
        kn_value *v = &g->values[n->out[j]];
        v->dtype = out[j].dtype;
        v->rank = out[j].shape.rank;
        for (int d = 0; d < out[j].shape.rank; d++)
            v->dims[d].value = out[j].shape.d[d];
    }
    return KILN_OK;
}

static kiln_status add_node(kiln_network *net, const char *name, const char *op_type,
                            const char *domain, int n_in, const int32_t *inputs, int n_attrs,
                            const kn_attr *attrs, int n_out, int32_t *outputs,
                            const kiln_plugin_instance *plugin) {
    kn_graph *g = net->graph;
    if (n_in < 0 || n_out < 1 || n_in > 64 || n_out > 64 || (n_in > 0 && inputs == NULL) ||
        outputs == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "layer '%s' (%s): bad input or output count",
                        name ? name : "?", op_type);
    if (name != NULL && name[0] != '\0')
        for (int i = 0; i < g->n_nodes; i++)
            if (strcmp(g->nodes[i].name, name) == 0)
                return kn_error(KILN_ERR_INVALID_ARGUMENT, "a layer named '%s' already exists",
                                name);
    for (int j = 0; j < n_in; j++)
        if (inputs[j] != -1) {
            char what[300];
            snprintf(what, sizeof what, "layer '%s' (%s) input %d", name ? name : "?", op_type, j);
            KN_TRY(check_tensor(net, inputs[j], what));
        }
    int nv = g->n_values, nn = g->n_nodes;
    int outs[64];
    char gen[300];
    for (int j = 0; j < n_out; j++) {
        snprintf(gen, sizeof gen, "%s_%d_out%d", name && name[0] ? name : op_type, nn, j);
        if ((outs[j] = kn_graph_add_value(g, kn_graph_find_value(g, gen) < 0 ? gen : NULL)) < 0) {
            kn_graph_truncate(g, nv, nn);
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        }
    }
    int node = kn_graph_add_node(g, name, op_type, domain, net->opset, n_in, inputs, n_out, outs);
    kiln_status rc = node < 0 ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
    for (int a = 0; a < n_attrs && rc == KILN_OK; a++)
        rc = kn_node_add_attr(g, node, &attrs[a]);
    if (rc == KILN_OK)
        rc = validate_node(g, node, plugin);
    if (rc != KILN_OK) {
        kn_graph_truncate(g, nv, nn);
        return kn_error_prefix(rc, "layer '%s': ", name ? name : op_type);
    }
    for (int j = 0; j < n_out; j++)
        outputs[j] = outs[j];
    return KILN_OK;
}

kiln_status kiln_network_add_layer(kiln_network *net, const char *name, const char *op_type,
                                   int n_in, const int32_t *inputs, int n_attrs,
                                   const kiln_attribute *attrs, int n_out, int32_t *outputs) {
    KN_TRY(check_net(net, op_type, "kiln_network_add_layer"));
    if (kn_op_find("", op_type) == NULL)
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "layer '%s': '%s' is not a built-in op (for a custom op use "
                        "kiln_network_add_plugin)",
                        name ? name : "?", op_type);
    if (n_attrs < 0 || n_attrs > 64 || (n_attrs > 0 && attrs == NULL))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "layer '%s': bad attribute list",
                        name ? name : op_type);
    kn_attr conv[64];
    for (int a = 0; a < n_attrs; a++)
        KN_TRY(convert_attr(&attrs[a], &conv[a]));
    return add_node(net, name, op_type, "", n_in, inputs, n_attrs, conv, n_out, outputs, NULL);
}

kiln_status kiln_network_set_tensor_name(kiln_network *net, int32_t tensor, const char *name) {
    if (net == NULL || name == NULL || name[0] == '\0')
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_network_set_tensor_name: bad argument");
    KN_TRY(check_tensor(net, tensor, "set_tensor_name"));
    kn_graph *g = net->graph;
    int other = kn_graph_find_value(g, name);
    if (other >= 0 && other != tensor)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "tensor name '%s' is already used", name);
    char *copy = kn_strdup(name);
    if (copy == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    kn_free(g->values[tensor].name);
    g->values[tensor].name = copy;
    kn_graph_names_changed(g);
    return KILN_OK;
}

kiln_status kiln_network_mark_output(kiln_network *net, int32_t tensor) {
    if (net == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_network_mark_output: NULL network");
    KN_TRY(check_tensor(net, tensor, "mark_output"));
    kn_graph *g = net->graph;
    if (g->values[tensor].is_output)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "tensor '%s' is already an output",
                        g->values[tensor].name);
    return kn_graph_add_output(g, tensor);
}

kiln_status kiln_network_tensor_info(const kiln_network *net, int32_t tensor, kiln_dtype *dtype,
                                     int *rank, int64_t *dims) {
    if (net == NULL || dtype == NULL || rank == NULL || dims == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_network_tensor_info: NULL argument");
    KN_TRY(check_tensor(net, tensor, "tensor_info"));
    const kn_value *v = &net->graph->values[tensor];
    *dtype = (kiln_dtype)v->dtype;
    *rank = v->rank;
    for (int d = 0; d < v->rank; d++)
        dims[d] = v->dims[d].sym ? -1 : v->dims[d].value;
    return KILN_OK;
}

int kiln_network_num_layers(const kiln_network *net) {
    return net ? net->graph->n_nodes : 0;
}

kiln_status kiln_network_add_plugin(kiln_network *net, const char *name, const char *plugin,
                                    const char *version, const char *ns, int n_in,
                                    const int32_t *inputs, int n_fields,
                                    const struct kiln_field *fields, int n_out, int32_t *outputs) {
    KN_TRY(check_net(net, plugin, "kiln_network_add_plugin"));
    const kiln_registry *r = net->builder ? net->builder->registry : NULL;
    const kn_creator_entry *e = kn_registry_find(r, plugin, version, ns);
    if (e == NULL)
        return kn_error(KILN_ERR_PLUGIN,
                        "layer '%s': no plugin '%s' (version '%s', namespace '%s') is registered "
                        "with the builder's registry: load it with kiln_registry_load_library() "
                        "and kiln_builder_set_registry()",
                        name ? name : "?", plugin, version ? version : "any", ns ? ns : "any");
    if (n_fields < 0 || n_fields > 60 || (n_fields > 0 && fields == NULL))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "layer '%s': bad field list",
                        name ? name : plugin);
    kn_attr attrs[64];
    int na = 0;
    attrs[na++] =
        (kn_attr){.name = "name", .type = KN_ATTR_STRING, .s = e->name, .slen = strlen(e->name)};
    attrs[na++] = (kn_attr){.name = "plugin_version",
                            .type = KN_ATTR_STRING,
                            .s = e->version,
                            .slen = strlen(e->version)};
    attrs[na++] = (kn_attr){
        .name = "plugin_namespace", .type = KN_ATTR_STRING, .s = e->ns, .slen = strlen(e->ns)};
    for (int i = 0; i < n_fields; i++) {
        const kiln_field *f = &fields[i];
        kn_attr *a = &attrs[na++];
        memset(a, 0, sizeof *a);
        a->name = (char *)f->name;
        if (f->name == NULL || f->count < 0 || (f->count > 0 && f->data == NULL))
            return kn_error(KILN_ERR_INVALID_ARGUMENT, "layer '%s': field %d is malformed",
                            name ? name : plugin, i);
        switch (f->type) {
        case KILN_FIELD_INT64:
            a->type = KN_ATTR_INT, a->i = *(const int64_t *)f->data;
            break;
        case KILN_FIELD_FLOAT32:
            a->type = KN_ATTR_FLOAT, a->f = *(const float *)f->data;
            break;
        case KILN_FIELD_STRING:
        case KILN_FIELD_BYTES:
            a->type = KN_ATTR_STRING, a->s = (char *)f->data, a->slen = (size_t)f->count;
            break;
        case KILN_FIELD_INT64S:
            a->type = KN_ATTR_INTS, a->ints = (int64_t *)f->data, a->n = f->count;
            break;
        case KILN_FIELD_FLOAT32S:
            a->type = KN_ATTR_FLOATS, a->floats = (float *)f->data, a->n = f->count;
            break;
        default:
            return kn_error(KILN_ERR_INVALID_ARGUMENT, "layer '%s': field '%s' has type %d",
                            name ? name : plugin, f->name, f->type);
        }
    }
    /* Create once now so bad fields and a wrong output count are reported by this call. */
    kiln_plugin_instance inst;
    kiln_field_list list = {.count = n_fields, .fields = fields};
    memset(&inst, 0, sizeof inst);
    kn_error(KILN_ERR_PLUGIN, "create failed without a reason");
    if (e->c.create(&e->c, &list, &inst) != 0 || inst.ops == NULL)
        return kn_error_prefix(KILN_ERR_PLUGIN,
                               "layer '%s': plugin '%s' refused its fields: ", name ? name : plugin,
                               plugin);
    kiln_status rc = KILN_OK;
    if (inst.ops->num_outputs == NULL || inst.ops->num_outputs(inst.self) != n_out)
        rc = kn_error(KILN_ERR_PLUGIN, "layer '%s': plugin '%s' makes %d outputs, %d asked for",
                      name ? name : plugin, plugin,
                      inst.ops->num_outputs ? inst.ops->num_outputs(inst.self) : -1, n_out);
    if (rc == KILN_OK)
        rc = add_node(net, name, "Plugin", "", n_in, inputs, na, attrs, n_out, outputs, &inst);
    kn_plugin_instance_destroy(&inst);
    return rc;
}
