/* kiln_model_*: the public face of the edit module. Every operation runs on a copy of the
 * graph that replaces the model's only when the operation succeeded. */
#include "core/alloc.h"
#include "edit/edit.h"
#include "onnx/onnx_export.h"
#include "onnx/onnx_import.h"

#include <string.h>

struct kiln_model {
    kn_graph *g;
};

kiln_status kiln_model_load(const char *path, kiln_model **out) {
    if (path == NULL || out == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_model_load: NULL argument");
    *out = NULL;
    kiln_model *m = kn_calloc(1, sizeof *m);
    if (m == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory loading '%s'", path);
    kiln_status rc = kn_onnx_import_file(path, &m->g);
    if (rc == KILN_OK)
        rc = kn_edit_infer_types(m->g);
    if (rc != KILN_OK) {
        kiln_model_destroy(m);
        return rc;
    }
    *out = m;
    return KILN_OK;
}

void kiln_model_destroy(kiln_model *m) {
    if (m == NULL)
        return;
    if (m->g != NULL)
        kn_graph_destroy(m->g);
    kn_free(m);
}

kiln_status kiln_model_save(const kiln_model *m, const char *path, size_t external_threshold) {
    if (m == NULL || path == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_model_save: NULL argument");
    return kn_onnx_export_file(m->g, path, external_threshold);
}

int kiln_model_num_nodes(const kiln_model *m) {
    if (m == NULL)
        return 0;
    int n = 0;
    for (int i = 0; i < m->g->n_nodes; i++)
        n += !m->g->nodes[i].dead;
    return n;
}

kiln_status kiln_model_node(const kiln_model *m, int index, const char **name,
                            const char **op_type) {
    if (m == NULL || name == NULL || op_type == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_model_node: NULL argument");
    for (int i = 0, k = 0; i < m->g->n_nodes; i++) {
        if (m->g->nodes[i].dead)
            continue;
        if (k++ == index) {
            *name = m->g->nodes[i].name;
            *op_type = m->g->nodes[i].op_type;
            return KILN_OK;
        }
    }
    return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_model_node: index %d is out of range", index);
}

/* Start an edit: a copy to change. */
static kiln_status begin(kiln_model *m, const char *what, kn_graph **copy) {
    if (m == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: NULL model", what);
    *copy = kn_graph_clone(m->g);
    if (*copy == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory copying the model", what);
    return KILN_OK;
}

/* Finish an edit: keep the copy on success, drop it on failure. */
static kiln_status commit(kiln_model *m, kn_graph *copy, kiln_status rc) {
    if (rc != KILN_OK) {
        kn_graph_destroy(copy);
        return rc;
    }
    kn_graph_destroy(m->g);
    m->g = copy;
    return KILN_OK;
}

static bool names_ok(int n, const char *const *names) {
    if (n < 0 || (n > 0 && names == NULL))
        return false;
    for (int i = 0; i < n; i++)
        if (names[i] == NULL)
            return false;
    return true;
}

kiln_status kiln_model_extract(kiln_model *m, int n_in, const char *const *inputs, int n_out,
                               const char *const *outputs) {
    if (!names_ok(n_in, inputs) || !names_ok(n_out, outputs))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_model_extract: bad name list");
    kn_graph *g;
    KN_TRY(begin(m, "kiln_model_extract", &g));
    return commit(m, g, kn_edit_extract(g, n_in, inputs, n_out, outputs));
}

kiln_status kiln_model_remove_node(kiln_model *m, const char *node) {
    if (node == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_model_remove_node: NULL name");
    kn_graph *g;
    KN_TRY(begin(m, "kiln_model_remove_node", &g));
    return commit(m, g, kn_edit_remove(g, node));
}

/* kiln_attribute[] -> kn_attr[] borrowing the caller's strings and arrays. */
static kiln_status convert_attrs(int n, const kiln_attribute *attrs, kn_attr **out) {
    *out = NULL;
    if (n < 0 || (n > 0 && attrs == NULL))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "bad attribute list");
    kn_attr *a = kn_calloc((size_t)n + 1, sizeof *a);
    if (a == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int i = 0; i < n; i++) {
        const kiln_attribute *s = &attrs[i];
        if (s->name == NULL || s->name[0] == '\0') {
            kn_free(a);
            return kn_error(KILN_ERR_INVALID_ARGUMENT, "attribute %d has no name", i);
        }
        a[i].name = (char *)s->name;
        a[i].type = s->type;
        switch (s->type) {
        case KILN_ATTR_INT:
            a[i].i = s->i;
            break;
        case KILN_ATTR_FLOAT:
            a[i].f = s->f;
            break;
        case KILN_ATTR_STRING:
            a[i].s = (char *)(s->s != NULL ? s->s : "");
            a[i].slen = strlen(a[i].s);
            break;
        case KILN_ATTR_INTS:
            a[i].n = s->n, a[i].ints = (int64_t *)s->ints;
            break;
        case KILN_ATTR_FLOATS:
            a[i].n = s->n, a[i].floats = (float *)s->floats;
            break;
        default:
            kn_free(a);
            return kn_error(KILN_ERR_INVALID_ARGUMENT, "attribute '%s' has unknown type %d",
                            s->name, (int)s->type);
        }
        if ((s->type == KILN_ATTR_INTS && s->n > 0 && s->ints == NULL) ||
            (s->type == KILN_ATTR_FLOATS && s->n > 0 && s->floats == NULL) || s->n < 0) {
            kn_free(a);
            return kn_error(KILN_ERR_INVALID_ARGUMENT, "attribute '%s': bad element list", s->name);
        }
    }
    *out = a;
    return KILN_OK;
}

kiln_status kiln_model_insert_after(kiln_model *m, const char *tensor, const char *op_type,
                                    int n_attrs, const kiln_attribute *attrs) {
    if (tensor == NULL || op_type == NULL || op_type[0] == '\0')
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_model_insert_after: NULL argument");
    kn_attr *a;
    KN_TRY(convert_attrs(n_attrs, attrs, &a));
    kn_graph *g;
    kiln_status rc = begin(m, "kiln_model_insert_after", &g);
    if (rc == KILN_OK)
        rc = commit(m, g, kn_edit_insert_after(g, tensor, op_type, "", n_attrs, a));
    kn_free(a);
    return rc;
}

kiln_status kiln_model_rename(kiln_model *m, const char *old_name, const char *new_name) {
    if (old_name == NULL || new_name == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_model_rename: NULL name");
    kn_graph *g;
    KN_TRY(begin(m, "kiln_model_rename", &g));
    return commit(m, g, kn_edit_rename(g, old_name, new_name));
}

kiln_status kiln_model_replace_pattern(kiln_model *m, const char *pattern, const char *plugin,
                                       const char *version, const char *plugin_namespace,
                                       int n_attrs, const kiln_attribute *attrs, int *count) {
    kn_edit_pattern p;
    if (pattern == NULL || !kn_edit_pattern_parse(pattern, &p))
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "unknown pattern '%s' (patterns: swish, relu-sigmoid-mul, gelu, "
                        "layer-norm)",
                        pattern ? pattern : "(null)");
    kn_attr *a;
    KN_TRY(convert_attrs(n_attrs, attrs, &a));
    const char *domain =
        plugin_namespace != NULL && plugin_namespace[0] != '\0' ? plugin_namespace : NULL;
    kn_graph *g;
    kiln_status rc = begin(m, "kiln_model_replace_pattern", &g);
    if (rc == KILN_OK)
        rc = commit(m, g,
                    kn_edit_replace_pattern(g, p, plugin, version, plugin_namespace, domain,
                                            n_attrs, a, count));
    kn_free(a);
    return rc;
}

kiln_status kiln_model_fold_constants(kiln_model *m) {
    kn_graph *g;
    KN_TRY(begin(m, "kiln_model_fold_constants", &g));
    return commit(m, g, kn_edit_fold_constants(g));
}

kiln_status kiln_model_cleanup(kiln_model *m) {
    kn_graph *g;
    KN_TRY(begin(m, "kiln_model_cleanup", &g));
    return commit(m, g, kn_edit_cleanup(g));
}

kiln_status kiln_model_toposort(kiln_model *m) {
    kn_graph *g;
    KN_TRY(begin(m, "kiln_model_toposort", &g));
    return commit(m, g, kn_graph_toposort(g));
}

kiln_status kiln_model_set_shape(kiln_model *m, const char *name, int rank, const int64_t *dims,
                                 const char *const *symbols) {
    if (name == NULL || (rank > 0 && dims == NULL))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_model_set_shape: NULL argument");
    kn_graph *g;
    KN_TRY(begin(m, "kiln_model_set_shape", &g));
    return commit(m, g, kn_edit_set_shape(g, name, rank, dims, symbols));
}

kiln_status kiln_model_set_opset(kiln_model *m, int opset) {
    kn_graph *g;
    KN_TRY(begin(m, "kiln_model_set_opset", &g));
    return commit(m, g, kn_edit_set_opset(g, opset));
}
