/* Copies of chosen intermediate values, taken right after the layer that writes them runs, so
 * the plan and its memory reuse stay exactly as built (see capture.c). */
#ifndef KN_CAPTURE_H
#define KN_CAPTURE_H

#include "kiln/kiln.h"

struct kiln_context;

typedef struct kn_capture kn_capture;

/* After node `node` of c's plan ran: copy every captured value it wrote. */
kiln_status kn_capture_node(struct kiln_context *c, int node);
void kn_capture_destroy(kn_capture *cap, int n_values);

#endif
