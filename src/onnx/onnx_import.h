/* ONNX import through protobuf-c: ModelProto bytes -> kn_graph. */
#ifndef KN_ONNX_IMPORT_H
#define KN_ONNX_IMPORT_H

#include "core/status.h"
#include "core/tensor.h"
#include "ir/graph.h"

/* Parse a model. base_dir resolves external data locations (NULL: current directory).
 * Initializers become constant values (raw_data or typed fields; external data mapped);
 * Constant nodes become constant values; graph inputs that are also initializers are constants
 * (overridable inputs are not supported and keep the initializer); value_info fills dtypes and
 * shapes; every node gets the opset of its domain. Nodes whose op kiln does not know are kept
 * as they are (a plugin may implement them). Errors are KILN_ERR_MODEL naming what is wrong. */
kiln_status kn_onnx_import(const void *data, size_t size, const char *base_dir, kn_graph **out);
kiln_status kn_onnx_import_file(const char *path, kn_graph **out);

/* Read a serialized TensorProto (.pb, as in ONNX's test data) into t; t->data is allocated
 * with kn_malloc and owned by the caller. */
kiln_status kn_onnx_read_tensor_file(const char *path, kn_tensor *t, char **name);
kiln_status kn_onnx_tensor_from_bytes(const void *data, size_t size, kn_tensor *t, char **name);

#endif
