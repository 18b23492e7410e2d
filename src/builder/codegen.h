/* Code generation at build: every node placed on a backend that generates code of its own
 * (kn_backend_iface.generate: the CUDA backend's kernels for kiln.FusedElementwise) gets that
 * code in its KN_ATTR_CODE attribute, stored in the plan with the node. Identical requests
 * (same op, program and dtypes) within one build are compiled once. */
#ifndef KN_BUILDER_CODEGEN_H
#define KN_BUILDER_CODEGEN_H

#include "ir/graph.h"
#include "kiln/kiln.h"

kiln_status kn_build_generate(kn_graph *g);

#endif
