/* Element-wise ops: unary math, activations, broadcasting binary and variadic ops, Where, Clip,
 * Cast, BitCast. Each infer validates input count, dtypes (per the ONNX type constraints, loosened
 * where a later opset only widened them) and attributes, then computes the broadcast output shape.
 */
#include "ops/math/elementwise_infer.h"

#include "core/narrow_dtype.h"
#include "ops/fused_elementwise.h"
#include "ops/text/string_ops.h"

#include <string.h>

#define DT(d) (1u << KILN_DTYPE_##d)
#define M_FLT (DT(FLOAT16) | DT(BFLOAT16) | DT(FLOAT32) | DT(FLOAT64))
#define M_SINT (DT(INT8) | DT(INT16) | DT(INT32) | DT(INT64))
#define M_UINT (DT(UINT8) | DT(UINT16) | DT(UINT32) | DT(UINT64))
#define M_INT (M_SINT | M_UINT)
#define M_NUM (M_FLT | M_INT)
#define M_BOOL DT(BOOL)
/* float8, 4- and 2-bit storage types: only Cast and CastLike compute on them here. */
#define M_NARROW                                                                                   \
    (DT(FLOAT8E4M3FN) | DT(FLOAT8E4M3FNUZ) | DT(FLOAT8E5M2) | DT(FLOAT8E5M2FNUZ) | DT(UINT4) |     \
     DT(INT4) | DT(FLOAT4E2M1) | DT(FLOAT8E8M0) | DT(UINT2) | DT(INT2))

kiln_status ew_check_dtype(const kn_infer_ctx *c, int i, unsigned mask) {
    int32_t dt = c->in[i].dtype;
    if (dt == KILN_DTYPE_STRING)
        return kn_error(KILN_ERR_UNSUPPORTED, "input %d: string tensors are not supported", i);
    if (dt <= 0 || dt >= 32 || !(mask & (1u << dt)))
        return kn_error(KILN_ERR_DTYPE, "input %d has dtype %s, which this op does not accept", i,
                        kn_dtype_name(dt));
    return KILN_OK;
}

kiln_status ew_check_arity(const kn_infer_ctx *c, int min_in, int max_in) {
    if (c->n_in < min_in || c->n_in > max_in)
        return kn_error(KILN_ERR_MODEL, "expects %d to %d inputs, has %d", min_in, max_in, c->n_in);
    for (int i = 0; i < min_in; i++)
        if (!kn_has_input(c, i))
            return kn_error(KILN_ERR_MODEL, "input %d is required", i);
    if (c->n_out < 1)
        return kn_error(KILN_ERR_MODEL, "expects 1 output, has %d", c->n_out);
    return KILN_OK;
}

kiln_status ew_broadcast(const kn_infer_ctx *c, int n, const int *idx, kn_shape *out) {
    kn_shape s = {.rank = 0};
    char b1[96], b2[96];
    for (int k = 0; k < n; k++) {
        const kn_shape *in = &c->in[idx[k]].shape;
        kn_shape next;
        if (!kn_shape_broadcast(&s, in, &next))
            return kn_error(KILN_ERR_SHAPE,
                            "input %d of shape %s does not broadcast with shape %s of the inputs "
                            "before it",
                            idx[k], kn_shape_str(in, b1, sizeof b1),
                            kn_shape_str(&s, b2, sizeof b2));
        s = next;
    }
    *out = s;
    return KILN_OK;
}

static kiln_status infer_unary(kn_infer_ctx *c, unsigned mask, int32_t out_dtype) {
    KN_TRY(ew_check_arity(c, 1, 1));
    KN_TRY(ew_check_dtype(c, 0, mask));
    c->out[0].dtype = out_dtype ? out_dtype : c->in[0].dtype;
    c->out[0].shape = c->in[0].shape;
    return KILN_OK;
}

static kiln_status infer_binary(kn_infer_ctx *c, unsigned mask, int32_t out_dtype) {
    KN_TRY(ew_check_arity(c, 2, 2));
    KN_TRY(ew_check_dtype(c, 0, mask));
    if (c->in[1].dtype != c->in[0].dtype)
        return kn_error(KILN_ERR_DTYPE, "input 1 has dtype %s but input 0 has %s; they must match",
                        kn_dtype_name(c->in[1].dtype), kn_dtype_name(c->in[0].dtype));
    static const int idx[2] = {0, 1};
    KN_TRY(ew_broadcast(c, 2, idx, &c->out[0].shape));
    c->out[0].dtype = out_dtype ? out_dtype : c->in[0].dtype;
    return KILN_OK;
}

static kiln_status infer_variadic(kn_infer_ctx *c, unsigned mask) {
    if (c->n_in > KN_EW_MAX_VARIADIC)
        return kn_error(KILN_ERR_UNSUPPORTED, "has %d inputs; at most %d are supported", c->n_in,
                        KN_EW_MAX_VARIADIC);
    KN_TRY(ew_check_arity(c, 1, c->n_in > 0 ? c->n_in : 1));
    int idx[KN_EW_MAX_VARIADIC];
    for (int i = 0; i < c->n_in; i++) {
        if (!kn_has_input(c, i))
            return kn_error(KILN_ERR_MODEL, "input %d is required", i);
        KN_TRY(ew_check_dtype(c, i, mask));
        if (c->in[i].dtype != c->in[0].dtype)
            return kn_error(KILN_ERR_DTYPE, "input %d has dtype %s but input 0 has %s", i,
                            kn_dtype_name(c->in[i].dtype), kn_dtype_name(c->in[0].dtype));
        idx[i] = i;
    }
    KN_TRY(ew_broadcast(c, c->n_in, idx, &c->out[0].shape));
    c->out[0].dtype = c->in[0].dtype;
    return KILN_OK;
}

#define UNARY(fn, mask, out)                                                                       \
    kiln_status fn(kn_infer_ctx *c) {                                                              \
        return infer_unary(c, mask, out);                                                          \
    }
#define BINARY(fn, mask, out)                                                                      \
    kiln_status fn(kn_infer_ctx *c) {                                                              \
        return infer_binary(c, mask, out);                                                         \
    }
#define VARIADIC(fn, mask)                                                                         \
    kiln_status fn(kn_infer_ctx *c) {                                                              \
        return infer_variadic(c, mask);                                                            \
    }

UNARY(kn_ew_infer_float, M_FLT, 0)
UNARY(kn_ew_infer_signed, M_FLT | M_SINT, 0)
UNARY(kn_ew_infer_numeric, M_NUM, 0)
UNARY(kn_ew_infer_bool, M_BOOL, 0)
UNARY(kn_ew_infer_int, M_INT, 0)
UNARY(kn_ew_infer_is_nan, M_FLT, KILN_DTYPE_BOOL)
UNARY(kn_ew_infer_is_inf, M_FLT, KILN_DTYPE_BOOL)
BINARY(kn_ew_infer_arith, M_NUM, 0)
BINARY(kn_ew_infer_compare, M_NUM | M_BOOL, KILN_DTYPE_BOOL)
BINARY(kn_ew_infer_logical, M_BOOL, KILN_DTYPE_BOOL)
BINARY(kn_ew_infer_bitwise, M_INT, 0)
VARIADIC(kn_ew_infer_var_numeric, M_NUM)
VARIADIC(kn_ew_infer_var_float, M_FLT)

kiln_status kn_infer_celu(kn_infer_ctx *c) {
    if (kn_attr_float(c->node, "alpha", 1.0f) == 0.0f)
        return kn_error(KILN_ERR_MODEL, "attribute alpha must not be 0");
    return infer_unary(c, M_FLT, 0);
}

kiln_status kn_infer_gelu(kn_infer_ctx *c) {
    const char *a = kn_attr_string(c->node, "approximate", "none");
    if (strcmp(a, "none") != 0 && strcmp(a, "tanh") != 0)
        return kn_error(KILN_ERR_MODEL, "attribute approximate is '%s'; expected none or tanh", a);
    return infer_unary(c, M_FLT, 0);
}

kiln_status kn_infer_prelu(kn_infer_ctx *c) {
    KN_TRY(infer_binary(c, M_FLT | M_SINT | M_UINT, 0));
    char b1[96], b2[96];
    if (!kn_shape_equal(&c->out[0].shape, &c->in[0].shape))
        return kn_error(KILN_ERR_SHAPE, "slope of shape %s does not broadcast to X of shape %s",
                        kn_shape_str(&c->in[1].shape, b1, sizeof b1),
                        kn_shape_str(&c->in[0].shape, b2, sizeof b2));
    return KILN_OK;
}

kiln_status kn_infer_equal(kn_infer_ctx *c) {
    if (c->n_in == 2 &&
        (c->in[0].dtype == KILN_DTYPE_STRING || c->in[1].dtype == KILN_DTYPE_STRING)) {
        if (c->in[0].dtype != c->in[1].dtype)
            return kn_error(KILN_ERR_DTYPE, "inputs are %s and %s", kn_dtype_name(c->in[0].dtype),
                            kn_dtype_name(c->in[1].dtype));
        return kn_infer_string_op(c);
    }
    return infer_binary(c, M_NUM | M_BOOL, KILN_DTYPE_BOOL);
}

kiln_status kn_infer_div(kn_infer_ctx *c) {
    return infer_binary(c, M_NUM, 0);
}

kiln_status kn_infer_mod(kn_infer_ctx *c) {
    int64_t fmod = kn_attr_int(c->node, "fmod", 0);
    if (fmod != 0 && fmod != 1)
        return kn_error(KILN_ERR_MODEL, "attribute fmod is %lld; expected 0 or 1", (long long)fmod);
    /* fmod=0 on floats: the floor remainder, which opset 28 defined (earlier opsets left it
     * undefined; kiln takes it there too) */
    return infer_binary(c, M_NUM, 0);
}

kiln_status kn_infer_bitshift(kn_infer_ctx *c) {
    const char *d = kn_attr_string(c->node, "direction", "");
    if (strcmp(d, "LEFT") != 0 && strcmp(d, "RIGHT") != 0)
        return kn_error(KILN_ERR_MODEL, "attribute direction is '%s'; expected LEFT or RIGHT", d);
    return infer_binary(c, M_UINT | M_SINT, 0); /* signed types since opset 28 */
}

kiln_status kn_infer_pow(kn_infer_ctx *c) {
    KN_TRY(ew_check_arity(c, 2, 2));
    unsigned base = DT(INT32) | DT(INT64) | M_FLT;
    unsigned expo = M_NUM;
    if (c->node->opset < 12)
        base = expo = M_FLT;
    KN_TRY(ew_check_dtype(c, 0, base));
    KN_TRY(ew_check_dtype(c, 1, expo));
    static const int idx[2] = {0, 1};
    KN_TRY(ew_broadcast(c, 2, idx, &c->out[0].shape));
    c->out[0].dtype = c->in[0].dtype;
    return KILN_OK;
}

kiln_status kn_infer_where(kn_infer_ctx *c) {
    KN_TRY(ew_check_arity(c, 3, 3));
    KN_TRY(ew_check_dtype(c, 0, M_BOOL));
    KN_TRY(ew_check_dtype(c, 1, M_NUM | M_BOOL));
    if (c->in[2].dtype != c->in[1].dtype)
        return kn_error(KILN_ERR_DTYPE, "input 2 has dtype %s but input 1 has %s; they must match",
                        kn_dtype_name(c->in[2].dtype), kn_dtype_name(c->in[1].dtype));
    static const int idx[3] = {0, 1, 2};
    KN_TRY(ew_broadcast(c, 3, idx, &c->out[0].shape));
    c->out[0].dtype = c->in[1].dtype;
    return KILN_OK;
}

kiln_status kn_infer_clip(kn_infer_ctx *c) {
    if (c->node->opset < 11)
        return infer_unary(c, M_FLT, 0);
    KN_TRY(ew_check_arity(c, 1, 3));
    KN_TRY(ew_check_dtype(c, 0, M_NUM));
    for (int i = 1; i < c->n_in; i++) {
        if (!kn_has_input(c, i))
            continue;
        if (c->in[i].dtype != c->in[0].dtype)
            return kn_error(KILN_ERR_DTYPE, "input %d (%s) has dtype %s but input 0 has %s", i,
                            i == 1 ? "min" : "max", kn_dtype_name(c->in[i].dtype),
                            kn_dtype_name(c->in[0].dtype));
        if (kn_shape_numel(&c->in[i].shape) != 1)
            return kn_error(KILN_ERR_SHAPE, "input %d (%s) must be a scalar, has %lld elements", i,
                            i == 1 ? "min" : "max", (long long)kn_shape_numel(&c->in[i].shape));
    }
    c->out[0].dtype = c->in[0].dtype;
    c->out[0].shape = c->in[0].shape;
    return KILN_OK;
}

bool kn_ew_cast_supported(int32_t dtype) {
    /* every numeric dtype and bool; strings are cast by ops/text/string_cast.c */
    return kn_dtype_size(dtype) != 0 && dtype != KILN_DTYPE_STRING && dtype != KILN_DTYPE_CONTAINER;
}

static kiln_status cast_to(kn_infer_ctx *c, int64_t to) {
    KN_TRY(ew_check_dtype(c, 0, M_NUM | M_BOOL | M_NARROW));
    const char *round_mode = kn_attr_string(c->node, "round_mode", "up");
    if (strcmp(round_mode, "up") != 0 && strcmp(round_mode, "down") != 0 &&
        strcmp(round_mode, "nearest") != 0)
        return kn_error(KILN_ERR_MODEL,
                        "attribute 'round_mode' is '%.40s'; expected up, down or nearest",
                        round_mode);
    if (to < 0 || to > 64 || !kn_ew_cast_supported((int32_t)to))
        return kn_error(KILN_ERR_UNSUPPORTED, "casting to dtype %lld is not supported",
                        (long long)to);
    c->out[0].dtype = (int32_t)to;
    c->out[0].shape = c->in[0].shape;
    return KILN_OK;
}

kiln_status kn_infer_cast(kn_infer_ctx *c) {
    KN_TRY(ew_check_arity(c, 1, 1));
    if (kn_node_attr(c->node, "to") == NULL)
        return kn_error(KILN_ERR_MODEL, "attribute 'to' is required");
    if (kn_string_cast_involved(c))
        return kn_infer_string_op(c);
    return cast_to(c, kn_attr_int(c->node, "to", 0));
}

/* BitCast (opset 26): the same bits as another type of the same width (4- and 2-bit types are
 * one byte each in kiln's buffers, their code in the low bits). */
static int dtype_bits(int32_t dt) {
    if (dt == KILN_DTYPE_STRING || dt == KILN_DTYPE_CONTAINER || !kn_ew_cast_supported(dt))
        return 0;
    int packed = kn_dtype_packed_bits(dt);
    return packed != 0 ? packed : (int)(8 * kn_dtype_size(dt));
}

kiln_status kn_infer_bitcast(kn_infer_ctx *c) {
    KN_TRY(ew_check_arity(c, 1, 1));
    if (kn_node_attr(c->node, "to") == NULL)
        return kn_error(KILN_ERR_MODEL, "attribute 'to' is required");
    int64_t to = kn_attr_int(c->node, "to", 0);
    int32_t from = c->in[0].dtype;
    int bits_to = to > 0 && to <= 64 ? dtype_bits((int32_t)to) : 0, bits_from = dtype_bits(from);
    if (bits_from == 0)
        return kn_error(KILN_ERR_UNSUPPORTED, "BitCast from %s is not supported",
                        kn_dtype_name(from));
    if (bits_to == 0)
        return kn_error(KILN_ERR_UNSUPPORTED, "BitCast to dtype %lld is not supported",
                        (long long)to);
    if (bits_to != bits_from)
        return kn_error(KILN_ERR_DTYPE,
                        "BitCast from %s (%d bits) to %s (%d bits): the widths differ",
                        kn_dtype_name(from), bits_from, kn_dtype_name((int32_t)to), bits_to);
    c->out[0].dtype = (int32_t)to;
    c->out[0].shape = c->in[0].shape;
    return KILN_OK;
}

kiln_status kn_infer_cast_like(kn_infer_ctx *c) {
    KN_TRY(ew_check_arity(c, 2, 2));
    if (kn_string_cast_involved(c))
        return kn_infer_string_op(c);
    return cast_to(c, c->in[1].dtype);
}
