/* Binary element-wise kernels with numpy broadcasting: arithmetic, comparisons, logic, bitwise
 * ops and PRelu, plus the variadic Max/Min/Sum/Mean. Each op is one expression per dtype
 * class, instantiated into loops that the compiler vectorises for contiguous and scalar
 * operands. Integer arithmetic goes through an unsigned type U so overflow wraps, and integer
 * division by zero yields 0 instead of trapping. */
#include "backend/cpu/math/elementwise_impl.h"

/* Lets the vectoriser evaluate both arms of a select (x < 0 ? a * x : x): results are
 * unchanged, only floating-point exception flags could differ, and kiln never reads them. */
#pragma GCC optimize("no-trapping-math")

#include <math.h>

#define EW_BL_LOOP(name, sfx, TT, UU, TY, EXPR)                                                    \
    KN_CLONES static void b_##name##_##sfx(const void *pa, int64_t sa, const void *pb, int64_t sb, \
                                           void *py, int64_t n) {                                  \
        typedef TT T;                                                                              \
        typedef UU U;                                                                              \
        (void)sizeof(U);                                                                           \
        const T *A = pa, *B = pb;                                                                  \
        TY *Y = py;                                                                                \
        if (sa == 1 && sb == 1) {                                                                  \
            EW_IVDEP for (int64_t i = 0; i < n; i++) {                                             \
                T a = A[i], b = B[i];                                                              \
                Y[i] = (TY)(EXPR);                                                                 \
            }                                                                                      \
        } else if (sa == 0 && sb == 1) {                                                           \
            T a = A[0];                                                                            \
            EW_IVDEP for (int64_t i = 0; i < n; i++) {                                             \
                T b = B[i];                                                                        \
                Y[i] = (TY)(EXPR);                                                                 \
            }                                                                                      \
        } else if (sa == 1 && sb == 0) {                                                           \
            T b = B[0];                                                                            \
            EW_IVDEP for (int64_t i = 0; i < n; i++) {                                             \
                T a = A[i];                                                                        \
                Y[i] = (TY)(EXPR);                                                                 \
            }                                                                                      \
        } else {                                                                                   \
            T a = A[0], b = B[0];                                                                  \
            TY v = (TY)(EXPR);                                                                     \
            for (int64_t i = 0; i < n; i++)                                                        \
                Y[i] = v;                                                                          \
        }                                                                                          \
    }

#define EW_SAME(sfx, TT, UU, DT, name, EXPR) EW_BL_LOOP(name, sfx, TT, UU, TT, EXPR)
#define EW_BOOL(sfx, TT, UU, DT, name, EXPR) EW_BL_LOOP(name, sfx, TT, UU, uint8_t, EXPR)
#define EW_ENTRY(sfx, TT, UU, DT, name, EXPR) [DT] = b_##name##_##sfx,

#define EW_FLTS(X, name, EXPR)                                                                     \
    X(f32, float, float, KILN_DTYPE_FLOAT32, name, EXPR)                                           \
    X(f64, double, double, KILN_DTYPE_FLOAT64, name, EXPR)
#define EW_SINTS(X, name, EXPR)                                                                    \
    X(i8, int8_t, uint32_t, KILN_DTYPE_INT8, name, EXPR)                                           \
    X(i16, int16_t, uint32_t, KILN_DTYPE_INT16, name, EXPR)                                        \
    X(i32, int32_t, uint32_t, KILN_DTYPE_INT32, name, EXPR)                                        \
    X(i64, int64_t, uint64_t, KILN_DTYPE_INT64, name, EXPR)
#define EW_UINTS(X, name, EXPR)                                                                    \
    X(u8, uint8_t, uint32_t, KILN_DTYPE_UINT8, name, EXPR)                                         \
    X(u16, uint16_t, uint32_t, KILN_DTYPE_UINT16, name, EXPR)                                      \
    X(u32, uint32_t, uint32_t, KILN_DTYPE_UINT32, name, EXPR)                                      \
    X(u64, uint64_t, uint64_t, KILN_DTYPE_UINT64, name, EXPR)
#define EW_BOOLS(X, name, EXPR) X(b8, uint8_t, uint32_t, KILN_DTYPE_BOOL, name, EXPR)

/* Float, signed and unsigned forms of one op, and its table. */
#define EW_DEF_NUM(GEN, name, FEXPR, SEXPR, UEXPR)                                                 \
    EW_FLTS(GEN, name, FEXPR)                                                                      \
    EW_SINTS(GEN, name, SEXPR)                                                                     \
    EW_UINTS(GEN, name, UEXPR)                                                                     \
    static const ew_binary_loop t_##name[EW_NDT] = {EW_FLTS(EW_ENTRY, name, FEXPR) EW_SINTS(       \
        EW_ENTRY, name, SEXPR) EW_UINTS(EW_ENTRY, name, UEXPR)};
/* The same with a bool form (comparisons). */
#define EW_DEF_NUMB(GEN, name, FEXPR, SEXPR, UEXPR, BEXPR)                                         \
    EW_FLTS(GEN, name, FEXPR)                                                                      \
    EW_SINTS(GEN, name, SEXPR)                                                                     \
    EW_UINTS(GEN, name, UEXPR)                                                                     \
    EW_BOOLS(GEN, name, BEXPR)                                                                     \
    static const ew_binary_loop t_##name[EW_NDT] = {EW_FLTS(EW_ENTRY, name, FEXPR) EW_SINTS(       \
        EW_ENTRY, name, SEXPR) EW_UINTS(EW_ENTRY, name, UEXPR) EW_BOOLS(EW_ENTRY, name, BEXPR)};
#define EW_DEF_INT(GEN, name, SEXPR, UEXPR)                                                        \
    EW_SINTS(GEN, name, SEXPR)                                                                     \
    EW_UINTS(GEN, name, UEXPR)                                                                     \
    static const ew_binary_loop t_##name[EW_NDT] = {EW_SINTS(EW_ENTRY, name, SEXPR)                \
                                                        EW_UINTS(EW_ENTRY, name, UEXPR)};

#define EW_WRAP(OP) (T)((U)a OP(U) b)

EW_DEF_NUM(EW_SAME, add, a + b, EW_WRAP(+), EW_WRAP(+))
EW_DEF_NUM(EW_SAME, sub, a - b, EW_WRAP(-), EW_WRAP(-))
EW_DEF_NUM(EW_SAME, mul, a *b, EW_WRAP(*), EW_WRAP(*))
/* INT_MIN / -1 overflows: negate through U instead. */
EW_DEF_NUM(EW_SAME, div, a / b,
           b == 0    ? (T)0
           : b == -1 ? (T)(0u - (U)a)
                     : (T)(a / b),
           b == 0 ? (T)0 : (T)(a / b))
/* NaN in either operand propagates, as numpy's maximum does. */
EW_DEF_NUM(EW_SAME, max, (a >= b || a != a) ? a : b, a >= b ? a : b, a >= b ? a : b)
EW_DEF_NUM(EW_SAME, min, (a <= b || a != a) ? a : b, a <= b ? a : b, a <= b ? a : b)
EW_DEF_NUM(EW_SAME, prelu, a < 0 ? a * b : a, a < 0 ? EW_WRAP(*) : a, ((void)b, a))

/* Mod with fmod=1: C's remainder (sign of the dividend). */
EW_DEF_NUM(EW_SAME, fmod, fmod(a, b), b == 0 || b == -1 ? (T)0 : (T)(a % b),
           b == 0 ? (T)0 : (T)(a % b))
/* Mod with fmod=0: Python's remainder, a - floor(a / b) * b (the sign of the divisor); on floats
 * since opset 28, a zero remainder taking the divisor's sign and an infinite divisor leaving a
 * finite dividend of its sign (else the divisor), as the spec lists. */
static inline int64_t ew_pymod(int64_t a, int64_t b) {
    if (b == 0 || b == -1)
        return 0;
    int64_t r = a % b;
    return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
}
static inline double ew_floor_mod(double a, double b) {
    double r = fmod(a, b);
    if (r == 0.0)
        return copysign(0.0, b);
    return (r < 0.0) != (b < 0.0) ? r + b : r;
}
static inline float ew_floor_modf(float a, float b) {
    float r = fmodf(a, b);
    if (r == 0.0f)
        return copysignf(0.0f, b);
    return (r < 0.0f) != (b < 0.0f) ? r + b : r;
}
EW_DEF_NUM(EW_SAME, pymod,
           sizeof(T) == sizeof(float) ? (T)ew_floor_modf((float)a, (float)b)
                                      : (T)ew_floor_mod((double)a, (double)b),
           (T)ew_pymod(a, b), b == 0 ? (T)0 : (T)(a % b))

EW_DEF_NUMB(EW_BOOL, equal, a == b, a == b, a == b, a == b)
EW_DEF_NUMB(EW_BOOL, less, a < b, a < b, a < b, a < b)
EW_DEF_NUMB(EW_BOOL, less_equal, a <= b, a <= b, a <= b, a <= b)
EW_DEF_NUMB(EW_BOOL, greater, a > b, a > b, a > b, a > b)
EW_DEF_NUMB(EW_BOOL, greater_equal, a >= b, a >= b, a >= b, a >= b)

EW_BOOLS(EW_BOOL, and, (a != 0) & (b != 0))
EW_BOOLS(EW_BOOL, or, (a != 0) | (b != 0))
EW_BOOLS(EW_BOOL, xor, (a != 0) ^ (b != 0))
static const ew_binary_loop t_and[EW_NDT] = {[KILN_DTYPE_BOOL] = b_and_b8};
static const ew_binary_loop t_or[EW_NDT] = {[KILN_DTYPE_BOOL] = b_or_b8};
static const ew_binary_loop t_xor[EW_NDT] = {[KILN_DTYPE_BOOL] = b_xor_b8};

EW_DEF_INT(EW_SAME, bit_and, EW_WRAP(&), EW_WRAP(&))
EW_DEF_INT(EW_SAME, bit_or, EW_WRAP(|), EW_WRAP(|))
EW_DEF_INT(EW_SAME, bit_xor, EW_WRAP(^), EW_WRAP(^))

/* Shifts by the type's width or more give 0 (C leaves them undefined). Signed types (opset 28):
 * the right shift is arithmetic, and a shift by a negative amount or by the width or more gives
 * what the sign alone gives: -1 shifting a negative value right, 0 otherwise. */
#define EW_SHIFT(OP) b >= 8 * sizeof(T) ? (T)0 : (T)((U)a OP b)
#define EW_OUT_OF_WIDTH (b < 0 || (uint64_t)b >= 8 * sizeof(T))
EW_DEF_INT(EW_SAME, shl, EW_OUT_OF_WIDTH ? (T)0 : (T)((U)a << b), EW_SHIFT(<<))
EW_DEF_INT(EW_SAME, shr, EW_OUT_OF_WIDTH ? (T)(a < 0 ? -1 : 0) : (T)(a >> b), EW_SHIFT(>>))

/* Squares (LayerNorm's Pow(x, 2)) are common enough to skip powf for. */
EW_BL_LOOP(pow, f32, float, float, float, b == 2.0f ? a * a : powf(a, b))

const ew_binary_loop ew_binary_f32[KN_EW_BINARY_COUNT] = {
    [KN_EW_ADD] = b_add_f32, [KN_EW_SUB] = b_sub_f32,     [KN_EW_MUL] = b_mul_f32,
    [KN_EW_DIV] = b_div_f32, [KN_EW_POW] = b_pow_f32,     [KN_EW_MAX] = b_max_f32,
    [KN_EW_MIN] = b_min_f32, [KN_EW_PRELU] = b_prelu_f32, [KN_EW_FMOD] = b_fmod_f32,
};

#define EW_BIN_KERNEL(fn, table)                                                                   \
    kiln_status fn(kn_kernel_ctx *k) {                                                             \
        return ew_binary(k, &k->in[0], &k->in[1], &k->out[0], table);                              \
    }

EW_BIN_KERNEL(ew_k_add, t_add)
EW_BIN_KERNEL(ew_k_sub, t_sub)
EW_BIN_KERNEL(ew_k_mul, t_mul)
EW_BIN_KERNEL(ew_k_div, t_div)
EW_BIN_KERNEL(ew_k_prelu, t_prelu)
EW_BIN_KERNEL(ew_k_equal, t_equal)
EW_BIN_KERNEL(ew_k_less, t_less)
EW_BIN_KERNEL(ew_k_less_equal, t_less_equal)
EW_BIN_KERNEL(ew_k_greater, t_greater)
EW_BIN_KERNEL(ew_k_greater_equal, t_greater_equal)
EW_BIN_KERNEL(ew_k_and, t_and)
EW_BIN_KERNEL(ew_k_or, t_or)
EW_BIN_KERNEL(ew_k_xor, t_xor)
EW_BIN_KERNEL(ew_k_bitwise_and, t_bit_and)
EW_BIN_KERNEL(ew_k_bitwise_or, t_bit_or)
EW_BIN_KERNEL(ew_k_bitwise_xor, t_bit_xor)

kiln_status ew_k_mod(kn_kernel_ctx *k) {
    bool c_rem = kn_attr_int(k->node, "fmod", 0) == 1;
    return ew_binary(k, &k->in[0], &k->in[1], &k->out[0], c_rem ? t_fmod : t_pymod);
}

kiln_status ew_k_bitshift(kn_kernel_ctx *k) {
    bool left = kn_attr_string(k->node, "direction", "")[0] == 'L';
    return ew_binary(k, &k->in[0], &k->in[1], &k->out[0], left ? t_shl : t_shr);
}

/* Variadic ops fold their inputs left to right into the output, which already has the
 * broadcast shape, so later steps read it in place. */
static kiln_status fold(kn_kernel_ctx *k, const ew_binary_loop *table) {
    kn_tensor *y = &k->out[0];
    if (k->n_in == 1) {
        ew_broadcast_copy(k, &k->in[0], y);
        return KILN_OK;
    }
    KN_TRY(ew_binary(k, &k->in[0], &k->in[1], y, table));
    for (int i = 2; i < k->n_in; i++)
        KN_TRY(ew_binary(k, y, &k->in[i], y, table));
    return KILN_OK;
}

kiln_status ew_k_max(kn_kernel_ctx *k) {
    return fold(k, t_max);
}

kiln_status ew_k_min(kn_kernel_ctx *k) {
    return fold(k, t_min);
}

kiln_status ew_k_sum(kn_kernel_ctx *k) {
    return fold(k, t_add);
}

kiln_status ew_k_mean(kn_kernel_ctx *k) {
    KN_TRY(fold(k, t_add));
    kn_tensor *y = &k->out[0];
    union {
        float f;
        double d;
        uint16_t h;
    } n;
    switch (y->dtype) {
    case KILN_DTYPE_FLOAT64:
        n.d = k->n_in;
        break;
    case KILN_DTYPE_FLOAT16:
        n.h = kn_float_to_half((float)k->n_in);
        break;
    case KILN_DTYPE_BFLOAT16:
        n.h = kn_float_to_bf16((float)k->n_in);
        break;
    default:
        n.f = (float)k->n_in;
    }
    kn_tensor count = {.dtype = y->dtype, .shape = {.rank = 0}, .data = &n};
    return ew_binary(k, y, &count, y, t_div);
}
