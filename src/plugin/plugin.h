/* Plugins inside kiln: the registry, the host API, ONNX-node -> plugin binding, and plugin
 * nodes' shape inference and execution. A bound plugin node has domain KN_PLUGIN_DOMAIN, the
 * plugin's name as op_type, and attributes holding its identity and serialized fields. */
#ifndef KN_PLUGIN_H
#define KN_PLUGIN_H

#include "backend/backend.h"
#include "ir/graph.h"
#include "kiln/kiln.h"
#include "kiln/kiln_plugin.h"

#define KN_PLUGIN_DOMAIN "kiln.plugin"
#define KN_PLUGIN_ATTR_VERSION "kiln_plugin_version"
#define KN_PLUGIN_ATTR_NAMESPACE "kiln_plugin_namespace"
#define KN_PLUGIN_ATTR_BYTES "kiln_plugin_bytes_fields"

typedef struct kn_creator_entry {
    kiln_plugin_creator c; /* strings point at the copies below */
    char *name, *version, *ns;
    kiln_field_spec *specs;
    char **spec_names;
    int lib; /* index into libs, or -1 for static registration */
} kn_creator_entry;

struct kiln_registry {
    kn_creator_entry *items;
    int n, cap;
    void **libs;
    char **lib_paths;
    int n_libs;
};

static inline bool kn_is_plugin_node(const kn_node *n) {
    return n->domain != NULL && __builtin_strcmp(n->domain, KN_PLUGIN_DOMAIN) == 0;
}

/* Find by identity; version/ns NULL match anything (the highest version wins). */
const kn_creator_entry *kn_registry_find(const kiln_registry *r, const char *name,
                                         const char *version, const char *ns);

/* A per-build table of instances, keyed by node name. */
typedef struct kn_plugin_table {
    char **names;
    kiln_plugin_instance *inst;
    int n;
} kn_plugin_table;
const kiln_plugin_instance *kn_plugin_table_get(const kn_plugin_table *t, const char *node);
void kn_plugin_table_clear(kn_plugin_table *t);

/* Build time: map every node that no built-in op implements (or whose op_type is in prefer)
 * to a registered plugin, rewrite it as a bound plugin node, and record its instance. */
kiln_status kn_plugin_bind_graph(kn_graph *g, const kiln_registry *r, char *const *prefer,
                                 int n_prefer, kn_plugin_table *table);
/* Load time: create the instance a bound plugin node names, from its stored fields. */
kiln_status kn_plugin_create_for_node(const kiln_registry *r, const kn_node *n,
                                      kiln_plugin_instance *out);
void kn_plugin_instance_destroy(kiln_plugin_instance *inst);

/* Output dtypes and shapes of a plugin node on concrete inputs (format negotiation too). */
kiln_status kn_plugin_infer(const kn_node *n, const kiln_plugin_instance *p, const kn_tensor *in,
                            kn_tensor *out);

/* Execution state of one plugin node in one context (the kernel's state). */
typedef struct kn_plugin_run {
    kiln_plugin_instance inst; /* this context's clone */
    bool shared;               /* inst is the engine's (no clone function) */
    void *ws;                  /* host workspace (a plugin on the host) */
    kn_buffer dws;             /* device workspace (a plugin on a device backend) */
    kn_backend *wb;            /* the backend dws belongs to */
    size_t ws_size;
} kn_plugin_run;
extern const kn_kernel kn_plugin_kernel;
/* Whether a plugin instance says its enqueue runs on backend (ABI v2's supports_backend, asked
 * for the host too; an older plugin, or one without it, runs on the host only). */
bool kn_plugin_supports_backend(const kiln_plugin_instance *inst, const char *backend);
/* Whether the plugin declares its enqueue graph-safe (KILN_PLUGIN_FLAG_GRAPH_SAFE). */
bool kn_plugin_graph_safe(const kiln_plugin_instance *inst);
/* KILN_OK when node n's plugin runs on backend; otherwise an error naming node and plugin. */
kiln_status kn_plugin_check_backend(const kn_node *n, const kiln_plugin_instance *inst,
                                    const char *backend);
/* Shapes changed: tell the plugin and size its workspace, in backend b's memory (a device
 * workspace on a device backend; s is the context's stream of b, drained before the old
 * workspace is freed). */
kiln_status kn_plugin_shapes_changed(const kn_node *n, kn_plugin_run *run, const kn_tensor *in,
                                     const kn_tensor *out, kn_backend *b, kn_stream *s);
/* configure() with profile ranges: lo/opt/hi are the node's inputs and outputs resolved at the
 * profile's min, opt and max shapes. */
kiln_status kn_plugin_configure(const kn_node *n, const kiln_plugin_instance *p,
                                const kn_tensor *in_lo, const kn_tensor *in_opt,
                                const kn_tensor *in_hi, const kn_tensor *out_lo,
                                const kn_tensor *out_opt, const kn_tensor *out_hi);

#endif
