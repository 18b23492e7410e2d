/* For every op of ONNX's default domain, the opsets that brought a new version of it. */
#ifndef KN_OPSET_HISTORY_H
#define KN_OPSET_HISTORY_H

typedef struct kn_op_history {
    const char *name; /* NULL ends the table */
    int n;
    int since[12]; /* ascending */
} kn_op_history;

extern const kn_op_history kn_opset_history[];

#endif
