/* Shared by the ONNX importer's files: the protobuf-c allocator and TensorProto conversion. */
#ifndef KN_ONNX_PRIVATE_H
#define KN_ONNX_PRIVATE_H

#include "core/status.h"
#include "core/tensor.h"
#include "ir/graph.h"
#include "onnx/onnx.pb-c.h"

#include <stdbool.h>
#include <string.h>

/* A proto string field, "" where it is unset. */
static inline const char *kn_onnx_str(const char *s) {
    return s != NULL ? s : "";
}

/* A node's or opset's domain as kiln names it: "ai.onnx" and unset are the default domain "". */
static inline const char *kn_onnx_domain(const char *d) {
    return d == NULL || strcmp(d, "ai.onnx") == 0 ? "" : d;
}

/* Routes protobuf-c's allocations through kn_malloc/kn_free. Copy it and point
 * allocator_data at a bool to learn whether a failed unpack ran out of memory. */
extern ProtobufCAllocator kn_onnx_pb_allocator;

/* Convert a TensorProto into t (t->data kn_malloc'd, owned by the caller). `what` names the
 * tensor in error messages (e.g. "initializer 'w'"). base_dir resolves external data (NULL:
 * current directory). Accepts raw_data, the typed fields and external data; refuses strings,
 * segments and dtypes kiln lacks. */
kiln_status kn_onnx_tensor_convert(const Onnx__TensorProto *tp, const char *base_dir,
                                   const char *what, kn_tensor *t);

/* Messages nested deeper than this are refused before unpacking (see nesting.c). */
#define KN_ONNX_MAX_NESTING 64

/* False if messages in data (a serialized message of type d) nest deeper than limit. */
bool kn_onnx_nesting_ok(const void *data, size_t size, const ProtobufCMessageDescriptor *d,
                        int limit);

/* Rewrite the current error message with control bytes (from names in the file) replaced by
 * '?', so it stays one printable line. Returns rc. */
kiln_status kn_onnx_one_line_error(kiln_status rc);

/* Check an ONNX elem_type is a dtype kiln handles; the error names `what`. */
kiln_status kn_onnx_check_dtype(int32_t dtype, const char *what);

/* Fill a temporary kn_attr from ap, ready for kn_node_add_attr (which deep-copies); release
 * it with kn_onnx_attr_release. Its name, ints and floats borrow from ap. Subgraph, sparse and
 * function-reference attributes are refused (KILN_ERR_UNSUPPORTED) naming `label`. */
kiln_status kn_onnx_attr_convert(const Onnx__AttributeProto *ap, const char *base_dir,
                                 const char *label, kn_attr *a);
void kn_onnx_attr_release(kn_attr *a);

/* The value of a Constant node (value, value_float(s), value_int(s)) as a tensor (data
 * kn_malloc'd, owned by the caller). */
/* The main graph with every call of a model-local function replaced by the function's nodes
 * (functions.c): graph is a shallow copy of the model's, its node list new; the allocations
 * behind it are freed by kn_onnx_inlined_free, the model's own protos stay untouched. */
typedef struct kn_onnx_inlined {
    Onnx__GraphProto graph;
    void **allocs;
    size_t n_allocs, cap_allocs;
} kn_onnx_inlined;
kiln_status kn_onnx_inline_functions(const Onnx__ModelProto *m, kn_onnx_inlined *out);
void kn_onnx_inlined_free(kn_onnx_inlined *x);

kiln_status kn_onnx_constant_tensor(const Onnx__NodeProto *np, const char *base_dir,
                                    const char *label, kn_tensor *t);

#endif
