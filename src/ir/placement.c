#include "ir/placement.h"

#include "core/alloc.h"
#include "core/status.h"

#include <string.h>

const char *kn_node_backend(const kn_node *n) {
    const kn_attr *a = kn_node_attr(n, KN_ATTR_BACKEND);
    return a != NULL && a->type == KN_ATTR_STRING && a->s != NULL ? a->s : "cpu";
}

uint64_t kn_node_host_inputs(const kn_node *n) {
    return (uint64_t)kn_attr_int(n, KN_ATTR_HOST_INPUTS, 0);
}

kn_copy_kind kn_node_copy_kind(const kn_node *n) {
    if (strcmp(n->domain, KN_COPY_DOMAIN) != 0)
        return KN_COPY_NONE;
    if (strcmp(n->op_type, KN_OP_COPY_TO_DEVICE) == 0)
        return KN_COPY_TO_DEVICE;
    if (strcmp(n->op_type, KN_OP_COPY_TO_HOST) == 0)
        return KN_COPY_TO_HOST;
    return KN_COPY_NONE;
}

kiln_status kn_node_set_attr(kn_graph *g, int node, const kn_attr *a) {
    kn_node *n = &g->nodes[node];
    for (int i = 0; i < n->n_attr; i++)
        if (strcmp(n->attr[i].name, a->name) == 0) {
            kn_attr copy;
            KN_TRY(kn_attr_copy(&copy, a));
            kn_attr_free(&n->attr[i]);
            n->attr[i] = copy;
            return KILN_OK;
        }
    return kn_node_add_attr(g, node, a);
}

kiln_status kn_node_set_attr_string(kn_graph *g, int node, const char *name, const char *value) {
    kn_attr a = {
        .name = (char *)name, .type = KN_ATTR_STRING, .s = (char *)value, .slen = strlen(value)};
    return kn_node_set_attr(g, node, &a);
}

kiln_status kn_node_set_attr_int(kn_graph *g, int node, const char *name, int64_t value) {
    kn_attr a = {.name = (char *)name, .type = KN_ATTR_INT, .i = value};
    return kn_node_set_attr(g, node, &a);
}

kiln_status kn_node_copy_placement(kn_graph *g, int dst, int src) {
    const kn_attr *b = kn_node_attr(&g->nodes[src], KN_ATTR_BACKEND);
    if (b != NULL) {
        char *name = kn_strdup(b->s);
        if (name == NULL)
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        kiln_status rc = kn_node_set_attr_string(g, dst, KN_ATTR_BACKEND, name);
        kn_free(name);
        KN_TRY(rc);
    }
    return KILN_OK;
}
