/* Per-layer timing of a context's execute. */
#ifndef KN_PROFILE_H
#define KN_PROFILE_H

/* A monotonic clock in milliseconds. */
double kn_profile_now_ms(void);

#endif
