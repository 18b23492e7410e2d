/* How many inputs and outputs each ONNX op may have (from the ONNX schemas, kept in op_list.h). */
#ifndef KN_ARITY_H
#define KN_ARITY_H

typedef struct kn_arity {
    const char *name;
    int min_in, max_in; /* max -1: unbounded (variadic) */
    int min_out, max_out;
} kn_arity;

/* NULL for ops outside ONNX's default domain and for ops whose counts are not checked. */
const kn_arity *kn_op_arity(const char *name);

#endif
