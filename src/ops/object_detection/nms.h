/* NonMaxSuppression's selection, shared by inference (the output count) and the kernel. */
#ifndef KN_OPS_NMS_H
#define KN_OPS_NMS_H

#include "ops/op.h"

/* NonMaxSuppression: the selected (batch, class, box) triples in output order, kn_malloc'd
 * into *sel (3 * *count values; NULL when none). Returns KN_NEED_DATA if any input's data is
 * not known yet. */
kiln_status kn_nms_select(const kn_node *n, int n_in, const kn_tensor *in, int64_t **sel,
                          int64_t *count);

#endif
