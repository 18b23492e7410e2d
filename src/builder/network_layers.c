/* Typed helpers of the network API: each is one or two kiln_network_add_layer calls. */
#include "builder/builder.h"

#include "core/alloc.h"

#include <stdio.h>
#include <string.h>

static kiln_attribute ints_attr(const char *name, int64_t n, const int64_t *v) {
    return (kiln_attribute){.name = name, .type = KILN_ATTR_INTS, .n = n, .ints = v};
}

static kiln_attribute int_attr(const char *name, int64_t v) {
    return (kiln_attribute){.name = name, .type = KILN_ATTR_INT, .i = v};
}

static kiln_attribute float_attr(const char *name, float v) {
    return (kiln_attribute){.name = name, .type = KILN_ATTR_FLOAT, .f = v};
}

static kiln_status one(kiln_network *net, const char *name, const char *op, int n_in,
                       const int32_t *in, int n_attrs, const kiln_attribute *attrs, int32_t *out) {
    if (out == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: NULL output pointer", op);
    return kiln_network_add_layer(net, name, op, n_in, in, n_attrs, attrs, 1, out);
}

kiln_status kiln_network_add_convolution(kiln_network *net, const char *name, int32_t x, int32_t w,
                                         int32_t b, const int64_t *strides, const int64_t *pads,
                                         const int64_t *dilations, int64_t group, int32_t *out) {
    static const int64_t ones[2] = {1, 1}, zeros[4] = {0, 0, 0, 0};
    kiln_attribute a[4] = {
        ints_attr("strides", 2, strides ? strides : ones),
        ints_attr("pads", 4, pads ? pads : zeros),
        ints_attr("dilations", 2, dilations ? dilations : ones),
        int_attr("group", group < 1 ? 1 : group),
    };
    int32_t in[3] = {x, w, b};
    return one(net, name, "Conv", b >= 0 ? 3 : 2, in, 4, a, out);
}

kiln_status kiln_network_add_matmul(kiln_network *net, const char *name, int32_t a, int32_t b,
                                    int32_t c, int trans_b, int32_t *out) {
    int32_t in[3] = {a, b, c};
    if (c < 0 && !trans_b)
        return one(net, name, "MatMul", 2, in, 0, NULL, out);
    kiln_attribute at = int_attr("transB", trans_b ? 1 : 0);
    return one(net, name, "Gemm", c >= 0 ? 3 : 2, in, 1, &at, out);
}

kiln_status kiln_network_add_activation(kiln_network *net, const char *name, int32_t x,
                                        kiln_activation kind, float alpha, float beta,
                                        int32_t *out) {
    kiln_attribute a;
    switch (kind) {
    case KILN_ACT_RELU:
        return one(net, name, "Relu", 1, &x, 0, NULL, out);
    case KILN_ACT_SIGMOID:
        return one(net, name, "Sigmoid", 1, &x, 0, NULL, out);
    case KILN_ACT_TANH:
        return one(net, name, "Tanh", 1, &x, 0, NULL, out);
    case KILN_ACT_GELU:
        return one(net, name, "Gelu", 1, &x, 0, NULL, out);
    case KILN_ACT_HARD_SWISH:
        return one(net, name, "HardSwish", 1, &x, 0, NULL, out);
    case KILN_ACT_LEAKY_RELU:
        a = float_attr("alpha", alpha);
        return one(net, name, "LeakyRelu", 1, &x, 1, &a, out);
    case KILN_ACT_ELU:
        a = float_attr("alpha", alpha);
        return one(net, name, "Elu", 1, &x, 1, &a, out);
    case KILN_ACT_CLIP: {
        int32_t bounds[2];
        KN_TRY(kiln_network_add_constant(net, NULL, KILN_DTYPE_FLOAT32, 0, NULL, &alpha, 1,
                                         &bounds[0]));
        KN_TRY(kiln_network_add_constant(net, NULL, KILN_DTYPE_FLOAT32, 0, NULL, &beta, 1,
                                         &bounds[1]));
        int32_t in[3] = {x, bounds[0], bounds[1]};
        return one(net, name, "Clip", 3, in, 0, NULL, out);
    }
    case KILN_ACT_SWISH: {
        char sig[300];
        snprintf(sig, sizeof sig, "%s_sigmoid", name ? name : "swish");
        int32_t s;
        KN_TRY(one(net, name ? sig : NULL, "Sigmoid", 1, &x, 0, NULL, &s));
        int32_t in[2] = {x, s};
        return one(net, name, "Mul", 2, in, 0, NULL, out);
    }
    }
    return kn_error(KILN_ERR_INVALID_ARGUMENT, "unknown activation %d", (int)kind);
}

kiln_status kiln_network_add_elementwise(kiln_network *net, const char *name, int32_t a, int32_t b,
                                         kiln_elementwise_op op, int32_t *out) {
    static const char *const ops[] = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"};
    if ((int)op < 0 || (int)op >= (int)(sizeof ops / sizeof ops[0]))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "unknown element-wise op %d", (int)op);
    int32_t in[2] = {a, b};
    return one(net, name, ops[op], 2, in, 0, NULL, out);
}

kiln_status kiln_network_add_pooling(kiln_network *net, const char *name, int32_t x,
                                     kiln_pooling kind, int global, const int64_t *kernel,
                                     const int64_t *strides, const int64_t *pads, int32_t *out) {
    static const int64_t zeros[4] = {0, 0, 0, 0};
    if (global)
        return one(net, name, kind == KILN_POOL_MAX ? "GlobalMaxPool" : "GlobalAveragePool", 1, &x,
                   0, NULL, out);
    if (kernel == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "layer '%s': pooling needs a kernel size",
                        name ? name : "?");
    kiln_attribute a[3] = {
        ints_attr("kernel_shape", 2, kernel),
        ints_attr("strides", 2, strides ? strides : kernel),
        ints_attr("pads", 4, pads ? pads : zeros),
    };
    return one(net, name, kind == KILN_POOL_MAX ? "MaxPool" : "AveragePool", 1, &x, 3, a, out);
}

kiln_status kiln_network_add_reshape(kiln_network *net, const char *name, int32_t x, int rank,
                                     const int64_t *dims, int32_t *out) {
    int32_t shape;
    int64_t n = rank;
    KN_TRY(kiln_network_add_constant(net, NULL, KILN_DTYPE_INT64, 1, &n, dims, 1, &shape));
    int32_t in[2] = {x, shape};
    return one(net, name, "Reshape", 2, in, 0, NULL, out);
}

kiln_status kiln_network_add_transpose(kiln_network *net, const char *name, int32_t x, int rank,
                                       const int64_t *perm, int32_t *out) {
    kiln_attribute a = ints_attr("perm", rank, perm);
    return one(net, name, "Transpose", 1, &x, 1, &a, out);
}

kiln_status kiln_network_add_concat(kiln_network *net, const char *name, int n,
                                    const int32_t *inputs, int64_t axis, int32_t *out) {
    kiln_attribute a = int_attr("axis", axis);
    return one(net, name, "Concat", n, inputs, 1, &a, out);
}

kiln_status kiln_network_add_softmax(kiln_network *net, const char *name, int32_t x, int64_t axis,
                                     int32_t *out) {
    kiln_attribute a = int_attr("axis", axis);
    return one(net, name, "Softmax", 1, &x, 1, &a, out);
}

kiln_status kiln_network_add_normalization(kiln_network *net, const char *name, int32_t x,
                                           int32_t scale, int32_t bias, int32_t mean, int32_t var,
                                           float epsilon, int32_t *out) {
    kiln_attribute a = float_attr("epsilon", epsilon);
    if (mean >= 0) {
        int32_t in[5] = {x, scale, bias, mean, var};
        return one(net, name, "BatchNormalization", 5, in, 1, &a, out);
    }
    kiln_attribute la[2] = {a, int_attr("axis", -1)};
    int32_t in[3] = {x, scale, bias};
    return one(net, name, "LayerNormalization", 3, in, 2, la, out);
}
