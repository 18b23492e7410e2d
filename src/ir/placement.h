/* Where nodes run: the builder's placement, as the plan records it. Every node runs on one
 * backend, named by its kiln_backend attribute (absent: the host, "cpu"). Where memory spaces
 * meet, explicit copy nodes (kiln.MemcpyToDevice, kiln.MemcpyToHost) move a value; they run
 * on the stream of the device backend their kiln_backend attribute names. kiln_host_inputs is
 * a bit mask of the inputs a node's backend reads on the host (they stay host memory). */
#ifndef KN_PLACEMENT_H
#define KN_PLACEMENT_H

#include "ir/graph.h"

#include <string.h>

#define KN_ATTR_BACKEND "kiln_backend"
#define KN_ATTR_HOST_INPUTS "kiln_host_inputs"
/* Why a node stayed on the host although a device backend was asked for (for kiln inspect). */
#define KN_ATTR_PLACEMENT_REASON "kiln_placement_reason"
#define KN_COPY_DOMAIN "kiln"
#define KN_OP_COPY_TO_DEVICE "MemcpyToDevice"
#define KN_OP_COPY_TO_HOST "MemcpyToHost"

typedef enum kn_copy_kind { KN_COPY_NONE = 0, KN_COPY_TO_DEVICE, KN_COPY_TO_HOST } kn_copy_kind;

/* The backend a node is placed on ("cpu" when it has no kiln_backend attribute). */
const char *kn_node_backend(const kn_node *n);
uint64_t kn_node_host_inputs(const kn_node *n);
kn_copy_kind kn_node_copy_kind(const kn_node *n);
/* Node dst runs where node src runs (copies kiln_backend and kiln_host_inputs). */
kiln_status kn_node_copy_placement(kn_graph *g, int dst, int src);
static inline bool kn_nodes_same_place(const kn_node *a, const kn_node *b) {
    return strcmp(kn_node_backend(a), kn_node_backend(b)) == 0;
}
/* Set (or replace) a node's attribute (copied), string attribute, int attribute. */
kiln_status kn_node_set_attr(kn_graph *g, int node, const kn_attr *a);
kiln_status kn_node_set_attr_string(kn_graph *g, int node, const char *name, const char *value);
kiln_status kn_node_set_attr_int(kn_graph *g, int node, const char *name, int64_t value);

#endif
