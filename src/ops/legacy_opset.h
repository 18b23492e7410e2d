/* Models stamped with opsets 1-6 (old exports): what their ops meant before opset 7, checked
 * where kiln's infer functions implement the later meaning. */
#ifndef KN_OPS_LEGACY_OPSET_H
#define KN_OPS_LEGACY_OPSET_H

#include "core/tensor.h"
#include "ir/graph.h"

/* Before opset 7 a binary op broadcast only with broadcast=1, aligning B with A from `axis`
 * (default: A's trailing dims). KILN_OK where that is what numpy broadcasting (opset 7 on)
 * computes; a message naming the node otherwise. Any other node passes. */
kiln_status kn_legacy_opset_check(const kn_node *n, const kn_tensor *in);

#endif
