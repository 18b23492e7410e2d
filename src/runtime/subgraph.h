/* The subgraph executor: runs control-flow nodes (If, Loop, Scan, SequenceMap) and their bodies on
 * the host, node by node in the body's order, each node inferred with its inputs' data at hand
 * (shapes inside a body may change from one iteration to the next) and run by the host backend. */
#ifndef KN_SUBGRAPH_H
#define KN_SUBGRAPH_H

#include "backend/backend.h"
#include "ir/graph.h"

/* Run control-flow node n on the host. in: every input's tensor with host data (omitted
 * optional inputs have dtype 0). out[j] receives dtype, shape and data allocated with kn_malloc
 * (the caller frees it) for each present output. Errors name the node. */
kiln_status kn_subgraph_run_node(kn_backend *host, const kn_node *n, const kn_tensor *in,
                                 kn_tensor *out, kn_threadpool *pool);

#endif
