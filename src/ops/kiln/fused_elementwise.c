/* kiln.FusedElementwise: program validation and inference (encoding in fused_elementwise.h).
 * Plans come from files, so every field is checked before a kernel trusts it. */
#include "ops/fused_elementwise.h"
#include "ops/math/elementwise_infer.h"

#include <float.h>
#include <math.h>
#include <string.h>

static const struct {
    const char *name;
    int op;
} unary_names[] = {
    {"Abs", KN_EW_ABS},
    {"Neg", KN_EW_NEG},
    {"Reciprocal", KN_EW_RECIPROCAL},
    {"Floor", KN_EW_FLOOR},
    {"Ceil", KN_EW_CEIL},
    {"Round", KN_EW_ROUND},
    {"Sqrt", KN_EW_SQRT},
    {"Exp", KN_EW_EXP},
    {"Log", KN_EW_LOG},
    {"Sin", KN_EW_SIN},
    {"Cos", KN_EW_COS},
    {"Tan", KN_EW_TAN},
    {"Asin", KN_EW_ASIN},
    {"Acos", KN_EW_ACOS},
    {"Atan", KN_EW_ATAN},
    {"Sinh", KN_EW_SINH},
    {"Cosh", KN_EW_COSH},
    {"Asinh", KN_EW_ASINH},
    {"Acosh", KN_EW_ACOSH},
    {"Atanh", KN_EW_ATANH},
    {"Erf", KN_EW_ERF},
    {"Sign", KN_EW_SIGN},
    {"Relu", KN_EW_RELU},
    {"LeakyRelu", KN_EW_LEAKY_RELU},
    {"Elu", KN_EW_ELU},
    {"Selu", KN_EW_SELU},
    {"Celu", KN_EW_CELU},
    {"Sigmoid", KN_EW_SIGMOID},
    {"HardSigmoid", KN_EW_HARD_SIGMOID},
    {"HardSwish", KN_EW_HARD_SWISH},
    {"Tanh", KN_EW_TANH},
    {"Softplus", KN_EW_SOFTPLUS},
    {"Softsign", KN_EW_SOFTSIGN},
    {"ThresholdedRelu", KN_EW_THRESHOLDED_RELU},
    {"Gelu", KN_EW_GELU},
    {"Mish", KN_EW_MISH},
    {"Shrink", KN_EW_SHRINK},
    {"Clip", KN_EW_CLIP},
};

static const struct {
    const char *name;
    int op;
} binary_names[] = {
    {"Add", KN_EW_ADD},     {"Sub", KN_EW_SUB},  {"Mul", KN_EW_MUL}, {"Div", KN_EW_DIV},
    {"Pow", KN_EW_POW},     {"Max", KN_EW_MAX},  {"Min", KN_EW_MIN}, {"Sum", KN_EW_ADD},
    {"PRelu", KN_EW_PRELU}, {"Mod", KN_EW_FMOD},
};

static bool default_domain(const kn_node *node) {
    return node->domain == NULL || node->domain[0] == '\0' || strcmp(node->domain, "ai.onnx") == 0;
}

int kn_ew_unary_of(const kn_node *node) {
    if (!default_domain(node))
        return -1;
    for (size_t i = 0; i < sizeof unary_names / sizeof unary_names[0]; i++) {
        if (strcmp(node->op_type, unary_names[i].name) != 0)
            continue;
        if (unary_names[i].op == KN_EW_GELU &&
            strcmp(kn_attr_string(node, "approximate", "none"), "tanh") == 0)
            return KN_EW_GELU_TANH;
        return unary_names[i].op;
    }
    return -1;
}

int kn_ew_binary_of(const kn_node *node) {
    if (!default_domain(node) || node->n_in != 2)
        return -1;
    for (size_t i = 0; i < sizeof binary_names / sizeof binary_names[0]; i++) {
        if (strcmp(node->op_type, binary_names[i].name) != 0)
            continue;
        if (binary_names[i].op == KN_EW_FMOD && kn_attr_int(node, "fmod", 0) != 1)
            return -1;
        return binary_names[i].op;
    }
    return -1;
}

void kn_ew_unary_params(const kn_node *node, int op, double *p) {
    switch (op) {
    case KN_EW_LEAKY_RELU:
        p[0] = kn_attr_float(node, "alpha", 0.01f);
        break;
    case KN_EW_ELU:
    case KN_EW_CELU:
    case KN_EW_THRESHOLDED_RELU:
        p[0] = kn_attr_float(node, "alpha", 1.0f);
        break;
    case KN_EW_SELU:
        p[0] = kn_attr_float(node, "alpha", 1.67326319217681884765625f);
        p[1] = kn_attr_float(node, "gamma", 1.05070102214813232421875f);
        break;
    case KN_EW_HARD_SIGMOID:
        p[0] = kn_attr_float(node, "alpha", 0.2f);
        p[1] = kn_attr_float(node, "beta", 0.5f);
        break;
    case KN_EW_SHRINK:
        p[0] = kn_attr_float(node, "bias", 0.0f);
        p[1] = kn_attr_float(node, "lambd", 0.5f);
        break;
    case KN_EW_CLIP:
        if (node->opset < 11) {
            p[0] = kn_attr_float(node, "min", -FLT_MAX);
            p[1] = kn_attr_float(node, "max", FLT_MAX);
        } else {
            p[0] = -INFINITY;
            p[1] = INFINITY;
        }
        break;
    default:
        break;
    }
}

int kn_ew_unary_nparams(int op) {
    switch (op) {
    case KN_EW_LEAKY_RELU:
    case KN_EW_ELU:
    case KN_EW_CELU:
    case KN_EW_THRESHOLDED_RELU:
        return 1;
    case KN_EW_SELU:
    case KN_EW_HARD_SIGMOID:
    case KN_EW_SHRINK:
    case KN_EW_CLIP:
        return 2;
    case KN_EW_QDQ_ROUND:
        return 3;
    default:
        return 0;
    }
}

static kiln_status bad(int pc, const char *what) {
    return kn_error(KILN_ERR_MODEL, "program instruction %d: %s", pc, what);
}

kiln_status kn_fused_validate(const kn_node *node, int n_inputs) {
    const int64_t *prog;
    const float *consts;
    int64_t n = kn_attr_ints(node, "program", &prog);
    int64_t n_const = kn_attr_floats(node, "constants", &consts);
    if (n == 0 || n % KN_FUSED_INSTR_INTS != 0)
        return kn_error(KILN_ERR_MODEL,
                        "attribute program must hold a positive multiple of %d "
                        "ints, has %lld",
                        KN_FUSED_INSTR_INTS, (long long)n);
    int64_t n_instr = n / KN_FUSED_INSTR_INTS;
    bool written[KN_FUSED_MAX_REGS] = {false};
    for (int64_t pc = 0; pc < n_instr; pc++) {
        const int64_t *ins = prog + pc * KN_FUSED_INSTR_INTS;
        int64_t kind = ins[0], op = ins[1], dst = ins[2], a = ins[3], b = ins[4];
        bool last = pc == n_instr - 1;
        if (kind == KN_FUSED_STORE) {
            if (!last)
                return bad((int)pc, "STORE must be the last instruction");
            if (a < 0 || a >= KN_FUSED_MAX_REGS || !written[a])
                return bad((int)pc, "STORE reads a register that was never written");
            if (op != 0 && op != KILN_DTYPE_UINT8 && op != KILN_DTYPE_INT8)
                return bad((int)pc, "STORE's type is not float, uint8 or int8");
            if (op != 0 && (b < 0 || b + 2 > n_const))
                return bad((int)pc, "STORE's scale and zero point lie outside constants");
            return KILN_OK;
        }
        if (dst < 0 || dst >= KN_FUSED_MAX_REGS)
            return bad((int)pc, "destination register out of range");
        switch (kind) {
        case KN_FUSED_LOAD:
            if (a < 0 || a >= n_inputs)
                return bad((int)pc, "LOAD names an input the node does not have");
            break;
        case KN_FUSED_CONST:
            if (a < 0 || a >= n_const)
                return bad((int)pc, "CONST names a constant out of range");
            break;
        case KN_FUSED_UNARY:
            if (op < 0 || op >= KN_EW_UNARY_COUNT)
                return bad((int)pc, "unknown unary op");
            if (a < 0 || a >= KN_FUSED_MAX_REGS || !written[a])
                return bad((int)pc, "UNARY reads a register that was never written");
            if (kn_ew_unary_nparams((int)op) > 0 &&
                (b < 0 || b + kn_ew_unary_nparams((int)op) > n_const))
                return bad((int)pc, "UNARY parameters lie outside constants");
            break;
        case KN_FUSED_BINARY:
            if (op < 0 || op >= KN_EW_BINARY_COUNT)
                return bad((int)pc, "unknown binary op");
            if (a < 0 || a >= KN_FUSED_MAX_REGS || !written[a] || b < 0 || b >= KN_FUSED_MAX_REGS ||
                !written[b])
                return bad((int)pc, "BINARY reads a register that was never written");
            break;
        default:
            return bad((int)pc, "unknown instruction kind");
        }
        written[dst] = true;
    }
    return kn_error(KILN_ERR_MODEL, "program does not end with STORE");
}

int kn_fused_store_dtype(const kn_node *node) {
    const int64_t *prog;
    int64_t n = kn_attr_ints(node, "program", &prog) / KN_FUSED_INSTR_INTS;
    const int64_t *last = n > 0 ? prog + (n - 1) * KN_FUSED_INSTR_INTS : NULL;
    return last != NULL && last[0] == KN_FUSED_STORE ? (int)last[1] : 0;
}

kiln_status kn_ew_infer_fused(kn_infer_ctx *c) {
    if (c->n_in > KN_EW_MAX_VARIADIC)
        return kn_error(KILN_ERR_UNSUPPORTED, "has %d inputs; at most %d are supported", c->n_in,
                        KN_EW_MAX_VARIADIC);
    if (c->n_out != 1)
        return kn_error(KILN_ERR_MODEL, "expects 1 output, has %d", c->n_out);
    /* fuse_elementwise makes it in float32; the precision pass may lower it to float16 or
     * bfloat16 on a backend that offers that (every input in the one type). */
    int idx[KN_EW_MAX_VARIADIC];
    for (int i = 0; i < c->n_in; i++) {
        if (!kn_has_input(c, i))
            return kn_error(KILN_ERR_MODEL, "input %d is required", i);
        KN_TRY(ew_check_dtype(c, i,
                              i == 0 ? (1u << KILN_DTYPE_FLOAT32) | (1u << KILN_DTYPE_FLOAT16) |
                                           (1u << KILN_DTYPE_BFLOAT16)
                                     : 1u << c->in[0].dtype));
        idx[i] = i;
    }
    KN_TRY(kn_fused_validate(c->node, c->n_in));
    KN_TRY(ew_broadcast(c, c->n_in, idx, &c->out[0].shape));
    c->out[0].dtype = c->n_in > 0 ? c->in[0].dtype : KILN_DTYPE_FLOAT32;
    if (kn_fused_store_dtype(c->node) != 0) {
        if (c->out[0].dtype != KILN_DTYPE_FLOAT32)
            return kn_error(KILN_ERR_DTYPE, "a quantizing STORE needs float32 inputs");
        c->out[0].dtype = kn_fused_store_dtype(c->node);
    }
    return KILN_OK;
}
