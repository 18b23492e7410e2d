/* The builder: networks (an imported or code-built graph), build configurations, and the
 * build itself (validate -> fold -> fuse -> annotate -> plan). */
#ifndef KN_BUILDER_H
#define KN_BUILDER_H

#include "ir/graph.h"
#include "plan/plan.h"
#include "passes/passes.h"
#include "plugin/plugin.h"

struct kiln_builder {
    kiln_registry *registry; /* borrowed; may be NULL */
};

struct kiln_network {
    kn_graph *graph;
    kiln_builder *builder; /* borrowed: its registry resolves plugin layers */
    int opset;
};

struct kiln_build_config {
    int threads;
    kn_profile *profiles;
    int n_profiles;
    char **prefer_plugin; /* op types a plugin may replace */
    int n_prefer;
    kiln_progress_fn progress;
    void *progress_user;
    char **backends; /* placement order (the host is always last); empty: host only */
    int n_backends;
    int precision;                       /* kiln_precision */
    kn_layer_precision *layer_precision; /* overrides by node-name pattern, later ones win */
    int n_layer_precision;
    char *timing_cache;      /* path of the timing cache file, or NULL */
    int tactics;             /* kiln_tactics */
    bool int8;               /* kiln_build_config_set_int8 */
    int calibration_method;  /* kiln_calibration_method */
    char *calibration_dir;   /* or NULL */
    char *calibration_cache; /* or NULL */
};

/* Build into a kn_plan (owned by the caller; clear with kn_plan_clear). */
kiln_status kn_build_plan(const kiln_builder *b, const kiln_network *net,
                          const kiln_build_config *cfg, kn_plan *out);

/* int8 calibration (calibrate.c): run g (folded, float32) over cfg's calibration samples, or
 * read the calibration cache, then quantize its int8 layers (kn_pass_quantize_int8). */
kiln_status kn_int8_calibrate(const kiln_builder *b, const kiln_build_config *cfg, kn_graph *g);

#endif
