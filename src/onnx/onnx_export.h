/* ONNX export through protobuf-c: kn_graph -> ModelProto bytes or file. */
#ifndef KN_ONNX_EXPORT_H
#define KN_ONNX_EXPORT_H

#include "core/status.h"
#include "ir/graph.h"

#include <stddef.h>

/* Serialize g as a ModelProto (every initializer inline). *data is kn_malloc'd and owned by
 * the caller. Graph inputs and outputs need a known dtype; values with a known dtype are
 * written to value_info; constants become initializers. Dead nodes are left out. */
kiln_status kn_onnx_export(const kn_graph *g, void **data, size_t *size);
/* Write g to path (temp file, then rename). Initializers of at least external_threshold
 * bytes (0: none) go to "<file name>.data" beside it, page-aligned, written first. */
kiln_status kn_onnx_export_file(const kn_graph *g, const char *path, size_t external_threshold);

#endif
