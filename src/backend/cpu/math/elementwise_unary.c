/* Unary element-wise kernels: float math and activations (one expression per op, instantiated
 * for float and double through <tgmath.h>; float16/bfloat16 run the float loop on tiles),
 * the integer forms of Abs/Neg/Sign/Relu/Shrink/Clip, and Not, BitwiseNot, IsNaN, IsInf. */
#include "backend/cpu/math/elementwise_impl.h"

/* Lets the vectoriser evaluate both arms of a select (x < 0 ? a * x : x): results are
 * unchanged, only floating-point exception flags could differ, and kiln never reads them. */
#pragma GCC optimize("no-trapping-math", "fp-contract=fast")

#include "kiln/kiln_math.h"

#include <string.h>
#include <tgmath.h>

/* Float32 transcendentals come from kiln_math.h (branch-free, so these loops vectorize); double
 * keeps libm. */
static inline double ew_sigmoidd(double x) {
    return 1.0 / (1.0 + exp(-x));
}

static inline double ew_softplusd(double x) {
    return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
}

static inline double ew_mishd(double x) {
    return x * tanh(ew_softplusd(x));
}

static inline double ew_gelud(double x) {
    return 0.5 * x * (1.0 + erf(x * 0.70710678118654752440));
}

static inline double ew_gelu_tanhd(double x) {
    return 0.5 * x * (1.0 + tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
}

#define EW_F32_OR(f32, f64, x) _Generic((x), float : f32, default : f64)(x)
#define EW_EXP(x) EW_F32_OR(kiln_math_exp, exp, x)
#define EW_LOG(x) EW_F32_OR(kiln_math_log, log, x)
#define EW_SIGMOID(x) EW_F32_OR(kiln_math_sigmoid, ew_sigmoidd, x)
#define EW_TANH(x) EW_F32_OR(kiln_math_tanh, tanh, x)
#define EW_ERF(x) EW_F32_OR(kiln_math_erf, erf, x)
#define EW_SOFTPLUS(x) EW_F32_OR(kiln_math_softplus, ew_softplusd, x)
#define EW_MISH(x) EW_F32_OR(kiln_math_mish, ew_mishd, x)
#define EW_GELU(x) EW_F32_OR(kiln_math_gelu, ew_gelud, x)
#define EW_GELU_TANH(x) EW_F32_OR(kiln_math_gelu_tanh, ew_gelu_tanhd, x)

/* Clip's expression, NaN kept. */
#define EW_CLAMP(v, lo, hi) (((v) < (lo) ? (lo) : (v)) > (hi) ? (hi) : ((v) < (lo) ? (lo) : (v)))

/* Clamp to [0, 1] keeping NaN, as numpy.clip does (fmax/fmin would drop it). */
#define EW_UNIT_CLAMP(v) ((v) < 0 ? (T)0 : (v) > 1 ? (T)1 : (v))

#define EW_FLOAT_UNARY(X)                                                                          \
    X(KN_EW_ABS, abs, fabs(x))                                                                     \
    X(KN_EW_NEG, neg, -x)                                                                          \
    X(KN_EW_RECIPROCAL, reciprocal, (T)1 / x)                                                      \
    X(KN_EW_FLOOR, floor, floor(x))                                                                \
    X(KN_EW_CEIL, ceil, ceil(x))                                                                   \
    X(KN_EW_ROUND, round, nearbyint(x))                                                            \
    X(KN_EW_SQRT, sqrt, sqrt(x))                                                                   \
    X(KN_EW_EXP, exp, EW_EXP(x))                                                                   \
    X(KN_EW_LOG, log, EW_LOG(x))                                                                   \
    X(KN_EW_SIN, sin, sin(x))                                                                      \
    X(KN_EW_COS, cos, cos(x))                                                                      \
    X(KN_EW_TAN, tan, tan(x))                                                                      \
    X(KN_EW_ASIN, asin, asin(x))                                                                   \
    X(KN_EW_ACOS, acos, acos(x))                                                                   \
    X(KN_EW_ATAN, atan, atan(x))                                                                   \
    X(KN_EW_SINH, sinh, sinh(x))                                                                   \
    X(KN_EW_COSH, cosh, cosh(x))                                                                   \
    X(KN_EW_ASINH, asinh, asinh(x))                                                                \
    X(KN_EW_ACOSH, acosh, acosh(x))                                                                \
    X(KN_EW_ATANH, atanh, atanh(x))                                                                \
    X(KN_EW_ERF, erf, EW_ERF(x))                                                                   \
    X(KN_EW_SIGN, sign, x > 0 ? (T)1 : x < 0 ? (T)-1 : x)                                          \
    X(KN_EW_RELU, relu, x < 0 ? (T)0 : x)                                                          \
    X(KN_EW_LEAKY_RELU, leaky_relu, x < 0 ? pa * x : x)                                            \
    X(KN_EW_ELU, elu, x < 0 ? pa * expm1(x) : x)                                                   \
    X(KN_EW_SELU, selu, x <= 0 ? pb * (pa * expm1(x)) : pb * x)                                    \
    X(KN_EW_CELU, celu, x > 0 ? x : pa * expm1(x / pa))                                            \
    X(KN_EW_SIGMOID, sigmoid, EW_SIGMOID(x))                                                       \
    X(KN_EW_HARD_SIGMOID, hard_sigmoid, EW_UNIT_CLAMP(pa *x + pb))                                 \
    X(KN_EW_HARD_SWISH, hard_swish, x *EW_UNIT_CLAMP(x *(T)(1.0 / 6.0) + (T)0.5))                  \
    X(KN_EW_TANH, tanh, EW_TANH(x))                                                                \
    X(KN_EW_SOFTPLUS, softplus, EW_SOFTPLUS(x))                                                    \
    X(KN_EW_SOFTSIGN, softsign, x / ((T)1 + fabs(x)))                                              \
    X(KN_EW_THRESHOLDED_RELU, thresholded_relu, x > pa ? x : (T)0)                                 \
    X(KN_EW_GELU, gelu, EW_GELU(x))                                                                \
    X(KN_EW_GELU_TANH, gelu_tanh, EW_GELU_TANH(x))                                                 \
    X(KN_EW_MISH, mish, EW_MISH(x))                                                                \
    X(KN_EW_SHRINK, shrink, (x < -pb) ? x + pa : (x > pb) ? x - pa : (T)0)                         \
    X(KN_EW_CLIP, clip, EW_CLAMP(x, pa, pb))                                                       \
    X(KN_EW_QDQ_ROUND, qdq_round, nearbyint(EW_CLAMP(x / pa, pb, pc)) * pa)

#define EW_UF_LOOP(name, sfx, TT, EXPR)                                                            \
    KN_CLONES static void u_##name##_##sfx(const void *px, void *py, int64_t n,                    \
                                           const ew_params *p) {                                   \
        typedef TT T;                                                                              \
        const T *X = px;                                                                           \
        T *Y = py;                                                                                 \
        const T pa = (T)p->a, pb = (T)p->b, pc = (T)p->c;                                          \
        (void)pa;                                                                                  \
        (void)pb;                                                                                  \
        (void)pc;                                                                                  \
        EW_IVDEP for (int64_t i = 0; i < n; i++) {                                                 \
            T x = X[i];                                                                            \
            Y[i] = (T)(EXPR);                                                                      \
        }                                                                                          \
    }
#define EW_UF_GEN(OP, name, EXPR)                                                                  \
    EW_UF_LOOP(name, f32, float, EXPR) EW_UF_LOOP(name, f64, double, EXPR)
#define EW_UF_F32(OP, name, EXPR) [OP] = u_##name##_f32,
#define EW_UF_F64(OP, name, EXPR) [OP] = u_##name##_f64,

EW_FLOAT_UNARY(EW_UF_GEN)
const ew_unary_loop ew_unary_f32[KN_EW_UNARY_COUNT] = {EW_FLOAT_UNARY(EW_UF_F32)};
const ew_unary_loop ew_unary_f64[KN_EW_UNARY_COUNT] = {EW_FLOAT_UNARY(EW_UF_F64)};

/* Integer forms. U is an unsigned type at least as wide as T, so negation wraps instead of
 * overflowing. */
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

#define EW_UI_LOOP(sfx, TT, UU, DT, name, EXPR)                                                    \
    static void ui_##name##_##sfx(const void *px, void *py, int64_t n, const ew_params *p) {       \
        typedef TT T;                                                                              \
        typedef UU U;                                                                              \
        const T *X = px;                                                                           \
        T *Y = py;                                                                                 \
        (void)p;                                                                                   \
        (void)sizeof(U);                                                                           \
        for (int64_t i = 0; i < n; i++) {                                                          \
            T x = X[i];                                                                            \
            Y[i] = (T)(EXPR);                                                                      \
        }                                                                                          \
    }
#define EW_UI_ENTRY(sfx, TT, UU, DT, name, EXPR) [DT] = ui_##name##_##sfx,
/* SEXPR for signed types, UEXPR for unsigned ones (where x < 0 cannot hold). */
#define EW_UI_DEFINE(name, SEXPR, UEXPR)                                                           \
    EW_SINTS(EW_UI_LOOP, name, SEXPR)                                                              \
    EW_UINTS(EW_UI_LOOP, name, UEXPR)                                                              \
    static const ew_unary_loop ui_##name[EW_NDT] = {EW_SINTS(EW_UI_ENTRY, name, SEXPR)             \
                                                        EW_UINTS(EW_UI_ENTRY, name, UEXPR)};

/* Shrink on integers computes in double, as the spec's float bias and lambd imply. */
static inline double ew_shrink_d(double v, const ew_params *p) {
    return v < -p->b ? v + p->a : v > p->b ? v - p->a : 0.0;
}

/* Back to an integer with saturation: near the ends of int64 (and uint64) the double result
 * can lie past the range, where a plain conversion is undefined. */
static inline int64_t ew_shrink_s(double v, const ew_params *p) {
    double r = ew_shrink_d(v, p);
    return r >= 0x1p63 ? INT64_MAX : r < -0x1p63 ? INT64_MIN : r != r ? 0 : (int64_t)r;
}

static inline uint64_t ew_shrink_u(double v, const ew_params *p) {
    double r = ew_shrink_d(v, p);
    return r >= 0x1p64 ? UINT64_MAX : r > 0 ? (uint64_t)r : 0;
}

/* Lower bound first, then upper, so min > max gives max everywhere (as numpy.clip). */
#define EW_CLIP_LO (p->lo != NULL && x < *(const T *)p->lo ? *(const T *)p->lo : x)
#define EW_CLIP_EXPR                                                                               \
    (p->hi != NULL && EW_CLIP_LO > *(const T *)p->hi ? *(const T *)p->hi : EW_CLIP_LO)

EW_UI_DEFINE(abs, x < 0 ? (T)(0u - (U)x) : x, x)
EW_UI_DEFINE(neg, (T)(0u - (U)x), (T)(0u - (U)x))
EW_UI_DEFINE(sign, (x > 0) - (x < 0), x != 0)
EW_UI_DEFINE(relu, x < 0 ? (T)0 : x, x)
EW_UI_DEFINE(bitwise_not, (T) ~(U)x, (T) ~(U)x)
EW_UI_DEFINE(shrink, ew_shrink_s((double)x, p), ew_shrink_u((double)x, p))
EW_UI_DEFINE(clip, EW_CLIP_EXPR, EW_CLIP_EXPR)

static const ew_unary_loop *int_table(int op) {
    switch (op) {
    case KN_EW_ABS:
        return ui_abs;
    case KN_EW_NEG:
        return ui_neg;
    case KN_EW_SIGN:
        return ui_sign;
    case KN_EW_RELU:
        return ui_relu;
    case KN_EW_SHRINK:
        return ui_shrink;
    case KN_EW_CLIP:
        return ui_clip;
    default:
        return NULL;
    }
}

typedef struct un_job {
    const char *x;
    char *y;
    size_t es_x, es_y;
    int32_t dt_x, dt_y;
    ew_unary_loop loop;
    ew_params p;
} un_job;

static void un_chunk(void *arg, int64_t begin, int64_t end) {
    const un_job *j = arg;
    if (!ew_is_half(j->dt_x)) {
        j->loop(j->x + (size_t)begin * j->es_x, j->y + (size_t)begin * j->es_y, end - begin, &j->p);
        return;
    }
    float t[EW_TILE];
    for (int64_t i = begin; i < end; i += EW_TILE) {
        int64_t m = end - i < EW_TILE ? end - i : EW_TILE;
        ew_load_f32(j->x + (size_t)i * j->es_x, j->dt_x, 1, m, t);
        if (j->dt_y == KILN_DTYPE_BOOL) {
            j->loop(t, j->y + (size_t)i * j->es_y, m, &j->p);
        } else {
            j->loop(t, t, m, &j->p);
            ew_store_f32(j->y + (size_t)i * j->es_y, j->dt_y, m, t);
        }
    }
}

/* float16/bfloat16 inputs use the float32 loop on tiles; pass the loop for float32. */
static kiln_status run_unary(kn_kernel_ctx *k, ew_unary_loop loop, const ew_params *p) {
    const kn_tensor *x = &k->in[0];
    kn_tensor *y = &k->out[0];
    if (loop == NULL)
        return kn_error(KILN_ERR_DTYPE, "no CPU kernel for dtype %s", kn_dtype_name(x->dtype));
    un_job j = {.x = x->data,
                .y = y->data,
                .es_x = kn_dtype_size(x->dtype),
                .es_y = kn_dtype_size(y->dtype),
                .dt_x = x->dtype,
                .dt_y = y->dtype,
                .loop = loop,
                .p = *p};
    kn_parallel_for(k->pool, kn_tensor_numel(x), EW_GRAIN, un_chunk, &j);
    return KILN_OK;
}

static ew_unary_loop pick(int op, int32_t dt) {
    if (op < 0)
        return NULL;
    if (dt == KILN_DTYPE_FLOAT64)
        return ew_unary_f64[op];
    if (dt == KILN_DTYPE_FLOAT32 || ew_is_half(dt))
        return ew_unary_f32[op];
    const ew_unary_loop *t = int_table(op);
    return t != NULL && dt > 0 && dt < EW_NDT ? t[dt] : NULL;
}

kiln_status ew_k_unary(kn_kernel_ctx *k) {
    int op = kn_ew_unary_of(k->node);
    if (op < 0)
        return kn_error(KILN_ERR_UNSUPPORTED, "op %s is not a unary element-wise op",
                        k->node->op_type);
    double prm[2] = {0, 0};
    kn_ew_unary_params(k->node, op, prm);
    ew_params p = {.a = prm[0], .b = prm[1]};
    return run_unary(k, pick(op, k->in[0].dtype), &p);
}

kiln_status ew_k_clip(kn_kernel_ctx *k) {
    double prm[2];
    kn_ew_unary_params(k->node, KN_EW_CLIP, prm);
    ew_params p = {.a = prm[0], .b = prm[1]};
    if (k->node->opset >= 11) {
        for (int i = 1; i < 3 && i < k->n_in; i++) {
            const kn_tensor *t = &k->in[i];
            if (t->dtype == 0)
                continue;
            double v;
            ew_load_f64(t->data, t->dtype, 0, 1, &v);
            *(i == 1 ? &p.a : &p.b) = v;
            *(i == 1 ? &p.lo : &p.hi) = t->data;
        }
    }
    return run_unary(k, pick(KN_EW_CLIP, k->in[0].dtype), &p);
}

static void not_bool(const void *px, void *py, int64_t n, const ew_params *p) {
    const uint8_t *x = px;
    uint8_t *y = py;
    (void)p;
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] == 0;
}

kiln_status ew_k_not(kn_kernel_ctx *k) {
    ew_params p = {0};
    return run_unary(k, k->in[0].dtype == KILN_DTYPE_BOOL ? not_bool : NULL, &p);
}

kiln_status ew_k_bitwise_not(kn_kernel_ctx *k) {
    ew_params p = {0};
    int32_t dt = k->in[0].dtype;
    return run_unary(k, dt > 0 && dt < EW_NDT ? ui_bitwise_not[dt] : NULL, &p);
}

/* IsNaN / IsInf: float in, bool out. For IsInf, p->a says detect -inf, p->b detect +inf. */
#define EW_CLASSIFY(name, sfx, TT, EXPR)                                                           \
    static void c_##name##_##sfx(const void *px, void *py, int64_t n, const ew_params *p) {        \
        const TT *X = px;                                                                          \
        uint8_t *Y = py;                                                                           \
        (void)p;                                                                                   \
        for (int64_t i = 0; i < n; i++) {                                                          \
            TT x = X[i];                                                                           \
            Y[i] = (uint8_t)(EXPR);                                                                \
        }                                                                                          \
    }
EW_CLASSIFY(nan, f32, float, x != x)
EW_CLASSIFY(nan, f64, double, x != x)
EW_CLASSIFY(inf, f32, float, (p->a != 0 && x == -INFINITY) || (p->b != 0 && x == INFINITY))
EW_CLASSIFY(inf, f64, double, (p->a != 0 && x == -INFINITY) || (p->b != 0 && x == INFINITY))

kiln_status ew_k_is_nan(kn_kernel_ctx *k) {
    ew_params p = {0};
    return run_unary(k, k->in[0].dtype == KILN_DTYPE_FLOAT64 ? c_nan_f64 : c_nan_f32, &p);
}

kiln_status ew_k_is_inf(kn_kernel_ctx *k) {
    ew_params p = {.a = (double)kn_attr_int(k->node, "detect_negative", 1),
                   .b = (double)kn_attr_int(k->node, "detect_positive", 1)};
    return run_unary(k, k->in[0].dtype == KILN_DTYPE_FLOAT64 ? c_inf_f64 : c_inf_f32, &p);
}
