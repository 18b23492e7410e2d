/* How many inputs and outputs each ONNX op may have (from the ONNX schemas). */
#ifndef KN_ARITY_H
#define KN_ARITY_H

typedef struct kn_arity {
    const char *name;
    int min_in, max_in; /* max -1: unbounded (variadic) */
    int min_out, max_out;
} kn_arity;

/* NULL for ops outside ONNX's default domain. */
const kn_arity *kn_op_arity(const char *name);

#endif
