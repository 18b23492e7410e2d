/* The int8 calibration cache: the scale of each calibrated tensor, as text, under a header
 * naming the model's hash and the calibration method, so a rebuild runs no calibration. */
#ifndef KN_CALIBRATION_CACHE_H
#define KN_CALIBRATION_CACHE_H

#include "ir/graph.h"
#include "passes/passes.h"

#include <stdint.h>

/* FNV-1a over the graph as calibration sees it: nodes (op, name, inputs, outputs, attributes
 * of scalar and list types) and constants (name, dtype, shape, bytes). */
uint64_t kn_int8_model_hash(const kn_graph *g);

/* Write the ranges of values[n] (temporary file, then rename). method: kiln_calibration_method. */
kiln_status kn_calibration_cache_write(const char *path, uint64_t hash, int method,
                                       const kn_graph *g, const int *values, int n,
                                       const kn_int8_range *ranges);
/* Read the ranges of values[n] into ranges[value]. A file of another model or method, or one
 * lacking any of the values, is refused with the reason. */
kiln_status kn_calibration_cache_read(const char *path, uint64_t hash, int method,
                                      const kn_graph *g, const int *values, int n,
                                      kn_int8_range *ranges);

/* "entropy" or "minmax". */
const char *kn_calibration_method_name(int method);

#endif
