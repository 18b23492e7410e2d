/* ONNX node -> plugin: identity resolution, attributes <-> typed fields, instance creation. */
#include "plugin/plugin.h"

#include "core/alloc.h"
#include "core/status.h"
#include "ir/placement.h"
#include "ops/op.h"
#include "plugin/near_names.h"

#include <stdio.h>
#include <string.h>

typedef struct field_set {
    kiln_field *f;
    int n;
    int64_t *scalars; /* storage for int attributes read as float etc. */
} field_set;

static void field_set_free(field_set *fs) {
    kn_free(fs->f);
    kn_free(fs->scalars);
    memset(fs, 0, sizeof *fs);
}

static bool listed(const kn_attr *list, const char *name) {
    if (list == NULL)
        return false;
    for (int64_t i = 0; i < list->n; i++)
        if (strcmp(list->strings[i], name) == 0)
            return true;
    return false;
}

static bool skipped(const kn_node *n, const char *name, bool onnx) {
    if (onnx)
        return strcmp(name, "plugin_version") == 0 || strcmp(name, "plugin_namespace") == 0 ||
               (strcmp(n->op_type, "Plugin") == 0 && strcmp(name, "name") == 0);
    /* kiln's own bookkeeping on a bound node: its identity and where placement put it. */
    return strncmp(name, "kiln_plugin_", 12) == 0 || strcmp(name, KN_ATTR_BACKEND) == 0 ||
           strcmp(name, KN_ATTR_HOST_INPUTS) == 0 || strcmp(name, KN_ATTR_PLACEMENT_REASON) == 0;
}

/* Attributes -> fields (pointing into the node's attributes). */
static kiln_status node_fields(const kn_node *n, bool onnx, field_set *fs) {
    memset(fs, 0, sizeof *fs);
    fs->f = kn_calloc((size_t)n->n_attr + 1, sizeof *fs->f);
    if (fs->f == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    const kn_attr *bytes = onnx ? NULL : kn_node_attr(n, KN_PLUGIN_ATTR_BYTES);
    for (int i = 0; i < n->n_attr; i++) {
        const kn_attr *a = &n->attr[i];
        if (skipped(n, a->name, onnx))
            continue;
        kiln_field *f = &fs->f[fs->n];
        f->name = a->name;
        f->count = 1;
        switch (a->type) {
        case KN_ATTR_INT:
            f->type = KILN_FIELD_INT64, f->data = &a->i;
            break;
        case KN_ATTR_FLOAT:
            f->type = KILN_FIELD_FLOAT32, f->data = &a->f;
            break;
        case KN_ATTR_STRING:
            f->type = listed(bytes, a->name) ? KILN_FIELD_BYTES : KILN_FIELD_STRING;
            f->data = a->s ? a->s : "";
            f->count = (int64_t)a->slen;
            break;
        case KN_ATTR_INTS:
            f->type = KILN_FIELD_INT64S, f->data = a->ints, f->count = a->n;
            break;
        case KN_ATTR_FLOATS:
            f->type = KILN_FIELD_FLOAT32S, f->data = a->floats, f->count = a->n;
            break;
        case KN_ATTR_TENSOR:
            f->type = KILN_FIELD_BYTES, f->data = a->t->data;
            f->count = (int64_t)kn_tensor_nbytes(a->t);
            break;
        default:
            field_set_free(fs);
            return kn_error(KILN_ERR_UNSUPPORTED,
                            "attribute '%s' has a type plugins cannot receive (lists of "
                            "strings and graphs are not fields)",
                            a->name);
        }
        fs->n++;
    }
    return KILN_OK;
}

/* Check fields against the creator's specs; convert ints given for float fields. */
static kiln_status check_fields(const kn_creator_entry *e, field_set *fs) {
    fs->scalars = kn_calloc((size_t)fs->n + 1, sizeof(int64_t));
    if (fs->scalars == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int s = 0; s < e->c.n_field_specs; s++) {
        const kiln_field_spec *spec = &e->specs[s];
        kiln_field *f = NULL;
        for (int i = 0; i < fs->n && !f; i++)
            if (strcmp(fs->f[i].name, spec->name) == 0)
                f = &fs->f[i];
        if (f == NULL) {
            if (spec->required)
                return kn_error(KILN_ERR_PLUGIN,
                                "plugin '%s' needs field '%s', which the node "
                                "does not give",
                                e->name, spec->name);
            continue;
        }
        if (spec->type == KILN_FIELD_FLOAT32 && f->type == KILN_FIELD_INT64) {
            float v = (float)*(const int64_t *)f->data;
            int idx = (int)(f - fs->f);
            memcpy(&fs->scalars[idx], &v, sizeof v);
            f->data = &fs->scalars[idx];
            f->type = KILN_FIELD_FLOAT32;
        }
        if (spec->type == KILN_FIELD_BYTES && f->type == KILN_FIELD_STRING)
            f->type = KILN_FIELD_BYTES;
        if (f->type != spec->type)
            return kn_error(KILN_ERR_PLUGIN,
                            "plugin '%s' field '%s': expected type %d, the "
                            "node gives type %d",
                            e->name, spec->name, spec->type, f->type);
    }
    return KILN_OK;
}

static kiln_status check_ops(const kn_creator_entry *e, const kiln_plugin_instance *inst) {
    const kiln_plugin_ops *o = inst->ops;
    if (o == NULL || o->abi_version < 1 || o->struct_size < offsetof(kiln_plugin_ops, destroy) ||
        o->num_outputs == NULL || o->output_shapes == NULL || o->enqueue == NULL ||
        o->destroy == NULL)
        return kn_error(KILN_ERR_PLUGIN,
                        "plugin '%s' returned an instance without the required "
                        "functions (num_outputs, output_shapes, enqueue, destroy)",
                        e->name);
    if (o->abi_version > KILN_PLUGIN_ABI_VERSION)
        return kn_error(KILN_ERR_PLUGIN,
                        "plugin '%s' uses plugin ABI %u; this kiln supports up "
                        "to %d",
                        e->name, o->abi_version, KILN_PLUGIN_ABI_VERSION);
    return KILN_OK;
}

static kiln_status create(const kn_creator_entry *e, const kn_node *n, bool onnx,
                          kiln_plugin_instance *out) {
    field_set fs;
    KN_TRY(node_fields(n, onnx, &fs));
    kiln_status rc = check_fields(e, &fs);
    if (rc == KILN_OK) {
        kiln_field_list list = {.count = fs.n, .fields = fs.f};
        memset(out, 0, sizeof *out);
        kn_error(KILN_ERR_PLUGIN, "create failed without a reason");
        if (e->c.create(&e->c, &list, out) != 0)
            rc = kn_error_prefix(KILN_ERR_PLUGIN, "plugin '%s' refused its fields: ", e->name);
        else if ((rc = check_ops(e, out)) != KILN_OK && out->ops && out->ops->destroy)
            out->ops->destroy(out->self);
    }
    field_set_free(&fs);
    if (rc != KILN_OK)
        return kn_error_prefix(rc, "node '%s': ", n->name);
    return KILN_OK;
}

void kn_plugin_instance_destroy(kiln_plugin_instance *inst) {
    if (inst != NULL && inst->ops != NULL && inst->ops->destroy != NULL)
        inst->ops->destroy(inst->self);
    if (inst != NULL)
        memset(inst, 0, sizeof *inst);
}

static void registered_list(const kiln_registry *r, const char *name, char *buf, size_t size) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; r && i < r->n && used < size; i++)
        if (strcmp(r->items[i].name, name) == 0)
            used += (size_t)snprintf(buf + used, size - used, "%sversion '%s' namespace '%s'",
                                     used ? "; " : "", r->items[i].version, r->items[i].ns);
}

static const char *attr_text(const kn_node *n, const char *name, char *buf, size_t size) {
    const kn_attr *a = kn_node_attr(n, name);
    if (a == NULL)
        return NULL;
    if (a->type == KN_ATTR_INT) {
        snprintf(buf, size, "%lld", (long long)a->i);
        return buf;
    }
    return a->type == KN_ATTR_STRING ? a->s : NULL;
}

#define KN_LOAD_HINT "--plugins LIB.so, KILN_PLUGIN_PATH or kiln_registry_load_library()"

/* The error for a node that neither a backend nor a registered plugin provides. Two different
 * failures: an op of ONNX's own domain that kiln does not implement, and a custom-domain op
 * (or generic Plugin node) that only a plugin can provide; each names what comes close. */
static kiln_status not_found(const kiln_registry *r, const kn_node *n, const char *name,
                             const char *domain) {
    kn_near_names plugins = {0}, ops = {0};
    for (int i = 0; r && i < r->n; i++)
        kn_near_offer(&plugins, name, r->items[i].name);
    char near_plugins[200], near_ops[200];
    kn_near_format(&plugins, near_plugins, sizeof near_plugins);
    if (domain[0] == '\0' || strncmp(domain, "ai.onnx.", 8) == 0) {
        for (const kn_op_schema *op = kn_op_next(NULL); op != NULL; op = kn_op_next(op))
            if (strcmp(op->domain, domain) == 0)
                kn_near_offer(&ops, name, op->name);
        kn_near_format(&ops, near_ops, sizeof near_ops);
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "node '%s': op '%s'%s%s%s is not an ONNX op that kiln's backends "
                        "implement, and no plugin named '%s' is registered%s%s%s%s%s; if a plugin "
                        "library provides it, load it with " KN_LOAD_HINT,
                        n->name, n->op_type, domain[0] ? " (domain '" : "", domain,
                        domain[0] ? "')" : "", name, near_ops[0] ? "; close built-in ops: " : "",
                        near_ops, near_plugins[0] ? "; close registered plugins: " : "",
                        near_plugins, near_ops[0] || near_plugins[0] ? "" : " (nothing close)");
    }
    char registered[64];
    if (r == NULL || r->n == 0)
        snprintf(registered, sizeof registered, "no plugins are registered");
    else
        snprintf(registered, sizeof registered, "%d plugin%s registered", r->n,
                 r->n == 1 ? "" : "s");
    return kn_error(KILN_ERR_UNSUPPORTED,
                    "node '%s': custom op '%s' (domain '%s') needs a plugin named '%s', and none "
                    "is registered (%s%s%s); load the library that provides it with " KN_LOAD_HINT,
                    n->name, n->op_type, domain, name, registered,
                    near_plugins[0] ? "; close: "
                    : r && r->n > 0 ? ", none close"
                                    : "",
                    near_plugins);
}

/* Which registered plugin a node asks for; NULL with the error set when none fits. */
static const kn_creator_entry *resolve_identity(const kiln_registry *r, const kn_node *n,
                                                kiln_status *rc) {
    char vbuf[32];
    bool generic = strcmp(n->op_type, "Plugin") == 0;
    const char *name = generic ? kn_attr_string(n, "name", NULL) : n->op_type;
    if (name == NULL) {
        *rc = kn_error(KILN_ERR_MODEL,
                       "node '%s': a Plugin node needs a string attribute 'name' "
                       "naming the plugin",
                       n->name);
        return NULL;
    }
    const char *version = attr_text(n, "plugin_version", vbuf, sizeof vbuf);
    const char *ns = kn_attr_string(n, "plugin_namespace", NULL);
    const char *domain = strcmp(n->domain, "ai.onnx") == 0 ? "" : n->domain;
    const kn_creator_entry *e;
    if (ns != NULL)
        e = kn_registry_find(r, name, version, ns);
    else {
        e = kn_registry_find(r, name, version, domain);
        if (e == NULL)
            e = kn_registry_find(r, name, version, "");
        if (e == NULL && generic)
            e = kn_registry_find(r, name, version, NULL);
    }
    if (e != NULL)
        return e;
    char have[512];
    registered_list(r, name, have, sizeof have);
    if (have[0] != '\0')
        *rc = kn_error(KILN_ERR_PLUGIN,
                       "node '%s' asks for plugin '%s' version '%s' namespace '%s', but it is "
                       "registered only as: %s; load the library that registers the version "
                       "asked for with " KN_LOAD_HINT ", or drop plugin_version/plugin_namespace "
                       "from the node to take any",
                       n->name, name, version ? version : "(any)", ns ? ns : domain, have);
    else
        *rc = not_found(r, n, name, domain);
    return NULL;
}

static kiln_status set_string_attr(kn_graph *g, int node, const char *name, const char *value) {
    kn_attr a = {
        .name = (char *)name, .type = KN_ATTR_STRING, .s = (char *)value, .slen = strlen(value)};
    return kn_node_add_attr(g, node, &a);
}

/* Replace the node's attributes with the plugin's identity and serialized fields. */
static kiln_status rewrite_node(kn_graph *g, int node, const kn_creator_entry *e,
                                const kiln_plugin_instance *inst) {
    kn_node *n = &g->nodes[node];
    field_set fs = {0};
    kiln_field_list list = {0};
    bool from_plugin = inst->ops->get_fields != NULL;
    if (from_plugin) {
        kn_error(KILN_ERR_PLUGIN, "get_fields failed without a reason");
        if (inst->ops->get_fields(inst->self, &list) != 0 || list.count < 0 ||
            (list.count > 0 && list.fields == NULL))
            return kn_error_prefix(KILN_ERR_PLUGIN, "node '%s': plugin '%s' get_fields: ", n->name,
                                   e->name);
    } else {
        KN_TRY(node_fields(n, true, &fs));
        list.count = fs.n;
        list.fields = fs.f;
    }
    kn_attr *old = n->attr;
    int n_old = n->n_attr;
    n->attr = NULL;
    n->n_attr = 0;
    kiln_status rc = KILN_OK;
    const char *bytes_names[256];
    int n_bytes = 0;
    for (int i = 0; i < list.count && rc == KILN_OK; i++) {
        const kiln_field *f = &list.fields[i];
        kn_attr a = {.name = (char *)f->name};
        switch (f->type) {
        case KILN_FIELD_INT64:
            a.type = KN_ATTR_INT, a.i = *(const int64_t *)f->data;
            break;
        case KILN_FIELD_FLOAT32:
            a.type = KN_ATTR_FLOAT, a.f = *(const float *)f->data;
            break;
        case KILN_FIELD_BYTES:
            if (n_bytes < 256)
                bytes_names[n_bytes++] = f->name;
            /* fall through */
        case KILN_FIELD_STRING:
            a.type = KN_ATTR_STRING, a.s = (char *)f->data, a.slen = (size_t)f->count;
            break;
        case KILN_FIELD_INT64S:
            a.type = KN_ATTR_INTS, a.ints = (int64_t *)f->data, a.n = f->count;
            break;
        case KILN_FIELD_FLOAT32S:
            a.type = KN_ATTR_FLOATS, a.floats = (float *)f->data, a.n = f->count;
            break;
        default:
            rc = kn_error(KILN_ERR_PLUGIN, "plugin '%s' field '%s' has unknown type %d", e->name,
                          f->name ? f->name : "?", f->type);
            continue;
        }
        if (f->name == NULL || f->count < 0 || (f->count > 0 && f->data == NULL))
            rc = kn_error(KILN_ERR_PLUGIN, "plugin '%s' returned a malformed field", e->name);
        else
            rc = kn_node_add_attr(g, node, &a);
    }
    if (rc == KILN_OK)
        rc = set_string_attr(g, node, KN_PLUGIN_ATTR_VERSION, e->version);
    if (rc == KILN_OK)
        rc = set_string_attr(g, node, KN_PLUGIN_ATTR_NAMESPACE, e->ns);
    if (rc == KILN_OK && n_bytes > 0) {
        kn_attr a = {.name = KN_PLUGIN_ATTR_BYTES,
                     .type = KN_ATTR_STRINGS,
                     .n = n_bytes,
                     .strings = (char **)bytes_names};
        rc = kn_node_add_attr(g, node, &a);
    }
    n = &g->nodes[node];
    if (rc == KILN_OK) {
        char *name = kn_strdup(e->name), *domain = kn_strdup(KN_PLUGIN_DOMAIN);
        if (name == NULL || domain == NULL) {
            kn_free(name);
            kn_free(domain);
            rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        } else {
            kn_free(n->op_type);
            kn_free(n->domain);
            n->op_type = name;
            n->domain = domain;
        }
    }
    for (int i = 0; i < n_old; i++)
        kn_attr_free(&old[i]);
    kn_free(old);
    field_set_free(&fs);
    return rc;
}

static bool preferred(char *const *prefer, int n, const char *op) {
    for (int i = 0; i < n; i++)
        if (strcmp(prefer[i], op) == 0)
            return true;
    return false;
}

static kiln_status table_add(kn_plugin_table *t, const char *name, kiln_plugin_instance inst) {
    char **names =
        kn_realloc(t->names, (size_t)t->n * sizeof *names, (size_t)(t->n + 1) * sizeof *names);
    if (names == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    t->names = names;
    kiln_plugin_instance *in =
        kn_realloc(t->inst, (size_t)t->n * sizeof *in, (size_t)(t->n + 1) * sizeof *in);
    if (in == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    t->inst = in;
    if ((t->names[t->n] = kn_strdup(name)) == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    t->inst[t->n++] = inst;
    return KILN_OK;
}

const kiln_plugin_instance *kn_plugin_table_get(const kn_plugin_table *t, const char *node) {
    for (int i = 0; t && i < t->n; i++)
        if (strcmp(t->names[i], node) == 0)
            return &t->inst[i];
    return NULL;
}

void kn_plugin_table_clear(kn_plugin_table *t) {
    for (int i = 0; i < t->n; i++) {
        kn_plugin_instance_destroy(&t->inst[i]);
        kn_free(t->names[i]);
    }
    kn_free(t->names);
    kn_free(t->inst);
    memset(t, 0, sizeof *t);
}

kiln_status kn_plugin_bind_graph(kn_graph *g, const kiln_registry *r, char *const *prefer,
                                 int n_prefer, kn_plugin_table *table) {
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        if (kn_is_plugin_node(n))
            return kn_error(KILN_ERR_MODEL, "node '%s' uses the reserved domain '%s'", n->name,
                            KN_PLUGIN_DOMAIN);
        bool builtin = kn_op_find(n->domain, n->op_type) != NULL;
        bool prefer_plugin = preferred(prefer, n_prefer, n->op_type);
        if (builtin && !prefer_plugin)
            continue;
        kiln_status rc = KILN_OK;
        const kn_creator_entry *e = resolve_identity(r, n, &rc);
        if (e == NULL) {
            if (builtin)
                continue; /* preferred, but no plugin: the built-in op stays */
            return rc;
        }
        kiln_plugin_instance inst;
        KN_TRY(create(e, n, true, &inst));
        int outs = inst.ops->num_outputs(inst.self);
        if (outs != n->n_out) {
            kn_plugin_instance_destroy(&inst);
            return kn_error(KILN_ERR_PLUGIN,
                            "node '%s': plugin '%s' makes %d outputs, the node "
                            "has %d",
                            n->name, e->name, outs, n->n_out);
        }
        rc = rewrite_node(g, i, e, &inst);
        if (rc == KILN_OK)
            rc = table_add(table, g->nodes[i].name, inst);
        if (rc != KILN_OK) {
            kn_plugin_instance_destroy(&inst);
            return rc;
        }
    }
    return KILN_OK;
}

kiln_status kn_plugin_create_for_node(const kiln_registry *r, const kn_node *n,
                                      kiln_plugin_instance *out) {
    const char *version = kn_attr_string(n, KN_PLUGIN_ATTR_VERSION, "");
    const char *ns = kn_attr_string(n, KN_PLUGIN_ATTR_NAMESPACE, "");
    const kn_creator_entry *e = kn_registry_find(r, n->op_type, version, ns);
    if (e == NULL)
        return kn_error(KILN_ERR_PLUGIN,
                        "layer '%s' needs plugin '%s' (version '%s', namespace '%s'), which is "
                        "not registered: load its library with --plugins LIB.so, "
                        "KILN_PLUGIN_PATH or kiln_registry_load_library()",
                        n->name, n->op_type, version, ns);
    return create(e, n, false, out);
}

bool kn_plugin_supports_backend(const kiln_plugin_instance *inst, const char *backend) {
    bool host = strcmp(backend, KN_BACKEND_HOST) == 0;
    const kiln_plugin_ops *o = inst ? inst->ops : NULL;
    if (o == NULL || o->abi_version < 2 || !KILN_HAS_MEMBER(o, kiln_plugin_ops, supports_backend) ||
        o->supports_backend == NULL)
        return host;
    return o->supports_backend(inst->self, backend) != 0;
}

bool kn_plugin_graph_safe(const kiln_plugin_instance *inst) {
    const kiln_plugin_ops *o = inst ? inst->ops : NULL;
    return o != NULL && o->abi_version >= 2 && KILN_HAS_MEMBER(o, kiln_plugin_ops, flags) &&
           (o->flags & KILN_PLUGIN_FLAG_GRAPH_SAFE) != 0;
}

kiln_status kn_plugin_check_backend(const kn_node *n, const kiln_plugin_instance *inst,
                                    const char *backend) {
    if (kn_plugin_supports_backend(inst, backend))
        return KILN_OK;
    if (strcmp(backend, KN_BACKEND_HOST) == 0)
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "node '%s': plugin '%s' does not run on the cpu and no backend it "
                        "supports is in this build (build with --backend NAME for one it names "
                        "in supports_backend, e.g. --backend cuda)",
                        n->name, n->op_type);
    return kn_error(KILN_ERR_UNSUPPORTED, "node '%s': plugin '%s' does not run on backend '%s'",
                    n->name, n->op_type, backend);
}
