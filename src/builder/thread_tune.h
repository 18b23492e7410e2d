/* Per-layer thread counts chosen by timing at build (thread_tune.c). */
#ifndef KN_THREAD_TUNE_H
#define KN_THREAD_TUNE_H

#include "ir/graph.h"
#include "shape/resolve.h"

/* Time every host node of g at the resolution at (the profile's opt shapes) on threads,
 * threads/2, ... 1 threads and record in KN_ATTR_THREADS the count of those clearly faster on
 * fewer. Only with KILN_CPU_THREAD_TUNE=1 in the environment (the choice varies from build to
 * build, plans are otherwise reproducible), and for threads > 1. A node the build cannot run
 * alone keeps the whole pool. */
kiln_status kn_thread_tune(kn_graph *g, const kn_resolved *at, int threads);

/* The choice from one node's timings: ms[c] at threads[c], threads[0] the whole pool; fewer
 * threads must beat the whole pool by 3%. */
int kn_thread_tune_pick(const int *threads, const double *ms, int n);

#endif
