/* Layers of an engine mapped back to the ONNX nodes they stand for (used by bench --profile). */
#ifndef KILN_LAYERS_H
#define KILN_LAYERS_H

#include "kiln/kiln.h"

#include <stdbool.h>
#include <stdio.h>

typedef struct cli_layers {
    int n;
    kiln_layer_info *info;
    char **onnx_nodes; /* per layer: comma-separated ONNX node names (owned) */
} cli_layers;

/* Fill l from e; model (may be a plan) supplies the ONNX graph to map layers back to. */
int cli_layers_load(cli_layers *l, const kiln_engine *e, const char *model);
void cli_layers_free(cli_layers *l);
/* Write onnx_nodes[i] as a JSON array. */
void cli_layers_json_nodes(FILE *f, const char *csv);

/* Per-layer medians of ms[layer][iteration], each layer's output shape read from ctx. */
int bench_profile_report(const cli_layers *l, kiln_context *ctx, double *const *ms, int iterations,
                         bool json);

#endif
