/* Plan files: a flat, versioned, checksummed container for an optimized graph, its weights
 * (64-byte aligned so a mapped plan is used in place), profiles and build settings.
 * docs/plan-format.md documents the layout. */
#ifndef KN_PLAN_H
#define KN_PLAN_H

#include "core/status.h"
#include "ir/graph.h"

/* min/opt/max shape of one dynamic graph input. */
typedef struct kn_profile {
    char *input; /* owned */
    int32_t rank;
    int64_t min[KN_MAX_RANK], opt[KN_MAX_RANK], max[KN_MAX_RANK];
} kn_profile;

/* Target features a plan needs (kn_plan.features). The reader refuses a plan that needs one
 * this machine or this build of kiln lacks, naming it. */
#define KN_PLAN_FEAT_X86_64 (UINT64_C(1) << 0)
#define KN_PLAN_FEAT_AARCH64 (UINT64_C(1) << 1)
#define KN_PLAN_FEAT_AVX2 (UINT64_C(1) << 8)
#define KN_PLAN_FEAT_FMA (UINT64_C(1) << 9)
#define KN_PLAN_FEAT_AVX512F (UINT64_C(1) << 10)
#define KN_PLAN_FEAT_BACKEND_CPU (UINT64_C(1) << 32)
#define KN_PLAN_FEAT_BACKEND_CUDA (UINT64_C(1) << 33)

typedef struct kn_plan {
    kn_graph *graph;      /* owned; constants may point into the plan's bytes */
    kn_profile *profiles; /* owned */
    int n_profiles;
    int32_t threads; /* default threads per context; 0 = one per core */
    /* KN_PLAN_FEAT_* bits. The writer adds the bit of the architecture it runs on, and the
     * CPU backend's when no backend bit is set; 0 therefore means "this architecture, CPU". */
    uint64_t features;
} kn_plan;

/* The KN_PLAN_FEAT_* bits this machine and this kiln provide. */
uint64_t kn_plan_host_features(void);

/* Serialise. *data is allocated with kn_malloc (caller frees with kn_free). */
kiln_status kn_plan_write(const kn_plan *plan, void **data, size_t *size);
/* Parse and verify (magic, versions, target features, section bounds, checksums). Constant
 * values in the resulting graph point into `data` (not owned): `data` must outlive the plan and
 * be 64-byte aligned for in-place weights (a mapping is; a copy should be made aligned).
 * Errors are KILN_ERR_PLAN with a message saying what is wrong. */
kiln_status kn_plan_read(const void *data, size_t size, kn_plan *out);
void kn_plan_clear(kn_plan *plan); /* frees graph and profiles; not `data` */

#endif
