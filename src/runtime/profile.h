/* Per-layer timing of a context's execute. */
#ifndef KN_PROFILE_H
#define KN_PROFILE_H

#include "kiln/kiln.h"

/* A monotonic clock in milliseconds. */
double kn_profile_now_ms(void);

/* Around node i's work when profiling: on a host node the wall time between begin and end;
 * on a device node (whose backend has events) events recorded on its stream before and after,
 * so the layer's time is the device's, read when the work is done (kn_profile_collect). */
kiln_status kn_profile_begin(kiln_context *c, int i, double *t0);
kiln_status kn_profile_end(kiln_context *c, int i, double t0);
/* After the streams are idle: device layers' times from their events. */
kiln_status kn_profile_collect(kiln_context *c);
/* Around everything an execute queues (after binding its inputs, after its last node): the
 * run's device time, read by kn_profile_collect into ctx->device_ms. */
kiln_status kn_profile_run_begin(kiln_context *c);
kiln_status kn_profile_run_end(kiln_context *c);
void kn_profile_run_release(kiln_context *c);
/* Free what profiling holds (events, times). */
void kn_profile_release(kiln_context *c);

#endif
