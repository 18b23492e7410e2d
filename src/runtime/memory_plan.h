/* Liveness-based arena planning: every activation gets an offset in one arena; values whose
 * lifetimes do not overlap share memory. */
#ifndef KN_MEMORY_PLAN_H
#define KN_MEMORY_PLAN_H

#include "shape/resolve.h"

#define KN_ARENA_ALIGN 64
#define KN_NO_OFFSET ((size_t)-1)

/* in_arena[v] says which values need arena space (sizes from vals[v].t). alias[v] >= 0 (or
 * alias NULL) says v shares the memory of value alias[v], so v's readers keep that value
 * alive. On return offsets[v] is the value's byte offset (KN_NO_OFFSET for the rest) and
 * *total the arena size. Graph outputs live to the end. */
kiln_status kn_memory_plan(const kn_graph *g, const kn_resolved *vals, const bool *in_arena,
                           const int *alias, size_t *offsets, size_t *total);

#endif
