/* Shape resolution (src/shape/ sits above ops, backends and plugins, whose inference and host
 * kernels it calls, and below the passes, the builder and the runtime, which all use it): walk the
 * graph in order, infer every value's dtype and shape from the input shapes, and evaluate on the
 * host whatever is computable and small (constants, shape subgraphs such as Shape -> Gather ->
 * Concat -> Reshape). Used by the builder (validation, constant folding, annotation) and by each
 * context when its input shapes change. */
#ifndef KN_RESOLVE_H
#define KN_RESOLVE_H

#include "backend/backend.h"
#include "ir/graph.h"
#include "kiln/kiln_plugin.h"

typedef struct kn_resolved {
    kn_tensor t; /* dtype and shape (when known); data when known on the host */
    bool known;  /* shape known before execution */
    bool data_owned;
} kn_resolved;

typedef struct kn_resolve_opts {
    /* Evaluate a node on the host when all its inputs are known and its outputs hold at most
     * this many elements in all (0: never). */
    int64_t max_eval_elems;
    /* The plugin instance bound to a plugin node (see plugin/plugin.h); may be NULL when the
     * graph has no plugin nodes. */
    const kiln_plugin_instance *(*plugin_of)(void *user, const kn_node *n, int index);
    void *plugin_user;
    /* The backend that evaluates nodes on the host; NULL: kn_backend_host(). */
    kn_backend *host;
} kn_resolve_opts;

/* vals has g->n_values entries. On entry, graph inputs must have t.dtype and t.shape set and
 * known = true (data optional); everything else is filled here (constants point at the
 * value's data). deferred (n_nodes entries, may be NULL) receives true for nodes whose output
 * shapes depend on data that is only known at execution. Errors name the node and op. */
kiln_status kn_resolve(const kn_graph *g, kn_resolved *vals, bool *deferred,
                       const kn_resolve_opts *opts);
/* Free data owned by vals (host-evaluated results). */
void kn_resolved_release(kn_resolved *vals, int n);

/* Run one node's inference on concrete inputs; errors prefixed with node name and op. plugin
 * is the instance of a plugin node (NULL for built-in ops). */
kiln_status kn_infer_node(const kn_node *n, const kiln_plugin_instance *plugin, const kn_tensor *in,
                          kn_tensor *out);
/* Evaluate one node on the host with backend host, whose memory must be host-visible (outputs'
 * data allocated with kn_malloc; the caller owns them). */
kiln_status kn_eval_node(kn_backend *host, const kn_node *n, const kn_tensor *in, kn_tensor *out,
                         kn_threadpool *pool);

#endif
