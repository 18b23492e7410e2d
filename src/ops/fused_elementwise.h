/* kiln.FusedElementwise: one node evaluating a small float32 expression program.
 *
 * Attributes:
 *   program   ints, a multiple of 5: one instruction per 5 ints {kind, op, dst, a, b}
 *   constants floats (optional): scalars referenced by CONST and by unary parameters
 *
 * The program runs over the broadcast shape of all inputs, a tile of elements at a time, on a
 * file of KN_FUSED_MAX_REGS float registers (each one tile long).
 *
 *   kind LOAD   dst = input[a], broadcast to the output shape           (op, b unused: 0)
 *   kind CONST  dst = constants[a]                                        (op, b unused: 0)
 *   kind UNARY  dst = op(reg a) with op a kn_ew_unary; op's parameters are constants[b],
 *               constants[b+1], ... (kn_ew_unary_nparams(op) of them; b is 0 when none)
 *   kind BINARY dst = op(reg a, reg b) with op a kn_ew_binary
 *   kind STORE  output 0 = reg a; must be the last instruction and appear once. op 0: the
 *               output is float (dst, b unused: 0). op KILN_DTYPE_UINT8 / KILN_DTYPE_INT8
 *               (CPU only, kn_pass_fuse_elementwise's QuantizeLinear roots): the output is that
 *               type, QuantizeLinear's bytes of reg a with scale constants[b] and zero point
 *               constants[b+1]
 *
 * The numbering below is part of the plan format: append only, never renumber. */
#ifndef KN_FUSED_ELEMENTWISE_H
#define KN_FUSED_ELEMENTWISE_H

#include "ops/op.h"

#define KN_FUSED_OP "FusedElementwise"
#define KN_FUSED_MAX_REGS 16
#define KN_FUSED_INSTR_INTS 5

typedef enum kn_fused_kind {
    KN_FUSED_LOAD = 0,
    KN_FUSED_CONST = 1,
    KN_FUSED_UNARY = 2,
    KN_FUSED_BINARY = 3,
    KN_FUSED_STORE = 4,
} kn_fused_kind;

/* Float unary ops shared by the standalone kernels and the fused program. Parameters (in
 * order): LEAKY_RELU alpha; ELU alpha; SELU alpha, gamma; CELU alpha; HARD_SIGMOID alpha, beta;
 * THRESHOLDED_RELU alpha; SHRINK bias, lambd; CLIP min, max; QDQ_ROUND scale, lo, hi.
 *
 * QDQ_ROUND is nearbyint(clip(x / scale, lo, hi)) * scale, the four float ops in that order:
 * the value of a QuantizeLinear -> DequantizeLinear pair on one grid (lo and hi the integer
 * bounds less the zero point). No ONNX node maps to it; kn_pass_fuse_elementwise writes it for
 * groups on the CPU only (the CUDA generator does not know it). */
typedef enum kn_ew_unary {
    KN_EW_ABS = 0,
    KN_EW_NEG = 1,
    KN_EW_RECIPROCAL = 2,
    KN_EW_FLOOR = 3,
    KN_EW_CEIL = 4,
    KN_EW_ROUND = 5,
    KN_EW_SQRT = 6,
    KN_EW_EXP = 7,
    KN_EW_LOG = 8,
    KN_EW_SIN = 9,
    KN_EW_COS = 10,
    KN_EW_TAN = 11,
    KN_EW_ASIN = 12,
    KN_EW_ACOS = 13,
    KN_EW_ATAN = 14,
    KN_EW_SINH = 15,
    KN_EW_COSH = 16,
    KN_EW_ASINH = 17,
    KN_EW_ACOSH = 18,
    KN_EW_ATANH = 19,
    KN_EW_ERF = 20,
    KN_EW_SIGN = 21,
    KN_EW_RELU = 22,
    KN_EW_LEAKY_RELU = 23,
    KN_EW_ELU = 24,
    KN_EW_SELU = 25,
    KN_EW_CELU = 26,
    KN_EW_SIGMOID = 27,
    KN_EW_HARD_SIGMOID = 28,
    KN_EW_HARD_SWISH = 29,
    KN_EW_TANH = 30,
    KN_EW_SOFTPLUS = 31,
    KN_EW_SOFTSIGN = 32,
    KN_EW_THRESHOLDED_RELU = 33,
    KN_EW_GELU = 34,
    KN_EW_GELU_TANH = 35,
    KN_EW_MISH = 36,
    KN_EW_SHRINK = 37,
    KN_EW_CLIP = 38,
    KN_EW_QDQ_ROUND = 39,
    KN_EW_UNARY_COUNT
} kn_ew_unary;

/* Float binary ops of the fused program. PRELU is a < 0 ? a * b : a; FMOD is C fmod. */
typedef enum kn_ew_binary {
    KN_EW_ADD = 0,
    KN_EW_SUB = 1,
    KN_EW_MUL = 2,
    KN_EW_DIV = 3,
    KN_EW_POW = 4,
    KN_EW_MAX = 5,
    KN_EW_MIN = 6,
    KN_EW_PRELU = 7,
    KN_EW_FMOD = 8,
    KN_EW_BINARY_COUNT
} kn_ew_binary;

/* Number of float parameters unary op takes (0 for an op outside the enum). */
int kn_ew_unary_nparams(int op);
/* The float unary op an ONNX node computes (Gelu's approximate attribute picks GELU or
 * GELU_TANH), or -1. Clip counts only when its bounds are attributes (opset < 11). */
int kn_ew_unary_of(const kn_node *node);
/* The float binary op a two-input ONNX node computes (Mod only with fmod=1), or -1. */
int kn_ew_binary_of(const kn_node *node);
/* The node's parameters for unary op (kn_ew_unary_nparams(op) values, ONNX defaults where an
 * attribute is absent). */
void kn_ew_unary_params(const kn_node *node, int op, double *params);

/* The output dtype of a valid program's STORE: KILN_DTYPE_UINT8 / KILN_DTYPE_INT8 for a
 * quantizing STORE, else 0 (the inputs' float type). */
int kn_fused_store_dtype(const kn_node *node);

/* Check a program against its node: instruction fields in range, registers written before
 * they are read, exactly one final STORE. Errors are KILN_ERR_MODEL naming the instruction. */
kiln_status kn_fused_validate(const kn_node *node, int n_inputs);

#endif
