/* Per-layer thread counts chosen by timing at build (thread_tune.c). */
#ifndef KN_THREAD_TUNE_H
#define KN_THREAD_TUNE_H

#include "builder/timing_cache.h"
#include "ir/graph.h"
#include "shape/resolve.h"

#include <stdbool.h>

/* Whether the build times per-layer thread counts: KILN_CPU_THREAD_TUNE=1 turns it on and =0
 * off; otherwise it is on when the build has a timing cache file, which keeps the choices and
 * so makes a rebuild reproducible (timings differ from build to build, and a plan is otherwise
 * the same to the byte for the same model and options). */
bool kn_thread_tune_wanted(bool cache_file);

/* Give every host node of g a thread count at the resolution at (the profile's opt shapes):
 * the cache's entry for its key (the machine, threads and the layer's signature), or else its
 * timing on threads, threads/2, ... 1 threads, then added to cache (entries below n_read came
 * from the file). A node clearly faster on fewer threads gets that count in KN_ATTR_THREADS.
 * Nothing for threads <= 1. A node the build cannot run alone keeps the whole pool. */
kiln_status kn_thread_tune(kn_graph *g, const kn_resolved *at, int threads, kn_timing_cache *cache,
                           int n_read);

/* The choice from one node's timings: ms[c] at threads[c], threads[0] the whole pool; fewer
 * threads must beat the whole pool by 10%. */
int kn_thread_tune_pick(const int *threads, const double *ms, int n);
/* kn_thread_tune_pick, unless it picks fewer than threads[0] while the whole pool's timing had
 * less than min_share of its threads' CPU time (share): then threads[0], and *busy. */
int kn_thread_tune_choose(const int *threads, const double *ms, int n, double share,
                          double min_share, bool *busy);

#endif
