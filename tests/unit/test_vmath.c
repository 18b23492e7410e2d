/* Accuracy of the vectorized float math (include/kiln/kiln_math.h) against double-precision
 * libm over the whole float range: every 997th bit pattern (positive and negative, normals,
 * denormals, both zeros, both infinities, NaNs) plus the boundaries where each function
 * changes method. Checked three ways: the kernels that run in models (the activation
 * epilogue and the element-wise loops, whichever ISA clone this CPU picks), and loops compiled
 * here for AVX-512, AVX2+FMA and the baseline, so every clone's code is exercised on a machine
 * that has the ISA. The error bound of each function is stated in the table below. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#pragma GCC optimize("no-trapping-math", "fp-contract=fast")

#include "backend/cpu/math/elementwise_impl.h"
#include "backend/cpu/math/gemm.h"
#include "kiln/kiln_math.h"
#include "core/alloc.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

enum {
    F_EXP,
    F_LOG,
    F_SIGMOID,
    F_SILU,
    F_TANH,
    F_ERF,
    F_GELU,
    F_GELU_TANH,
    F_SOFTPLUS,
    F_MISH,
    F_HARD_SIGMOID,
    F_HARD_SWISH,
    F_COUNT
};

static double silu_d(double x) {
    return isinf(x) && x < 0 ? -0.0 : x / (1.0 + exp(-x));
}
static double softplus_d(double x) {
    return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
}
static double mish_d(double x) {
    return isinf(x) && x < 0 ? -0.0 : x * tanh(softplus_d(x));
}
static double hard_sigmoid_d(double x) {
    double v = (double)0.2f * x + 0.5;
    return v < 0 ? 0 : v > 1 ? 1 : v;
}
static double hard_swish_d(double x) {
    double v = x / 6.0 + 0.5;
    return x * (v < 0 ? 0 : v > 1 ? 1 : v);
}
static double ref(int f, double x) {
    switch (f) {
    case F_EXP:
        return exp(x);
    case F_LOG:
        return log(x);
    case F_SIGMOID:
        return 1.0 / (1.0 + exp(-x));
    case F_SILU:
        return silu_d(x);
    case F_TANH:
        return tanh(x);
    case F_ERF:
        return erf(x);
    case F_GELU:
        return isinf(x) && x < 0 ? -0.0 : 0.5 * x * erfc(-x * 0.70710678118654752440);
    case F_GELU_TANH:
        if (isinf(x) && x < 0)
            return -0.0;
        return 0.5 * x * (1.0 + tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
    case F_SOFTPLUS:
        return softplus_d(x);
    case F_MISH:
        return mish_d(x);
    case F_HARD_SIGMOID:
        return hard_sigmoid_d(x);
    default:
        return hard_swish_d(x);
    }
}

/* Allowed error: ulps of the correctly rounded result, plus an absolute part for the
 * functions whose float formula cancels (1 + erf(x) for GELU at x < 0, x/6 + 1/2 for
 * HardSwish near -3) or that are specified by absolute error (erf). */
static const struct {
    const char *name;
    double ulp, abs;
} tol[F_COUNT] = {
    [F_EXP] = {"exp", 2, 0},
    [F_LOG] = {"log", 2, 0},
    [F_SIGMOID] = {"sigmoid", 3, 0},
    [F_SILU] = {"silu", 3, 0},
    [F_TANH] = {"tanh", 2, 0},
    [F_ERF] = {"erf", 2, 1e-6},
    [F_GELU] = {"gelu", 4, 2e-6},
    [F_GELU_TANH] = {"gelu_tanh", 4, 1e-6},
    [F_SOFTPLUS] = {"softplus", 3, 0},
    [F_MISH] = {"mish", 4, 0},
    [F_HARD_SIGMOID] = {"hard_sigmoid", 2, 6e-8},
    [F_HARD_SWISH] = {"hard_swish", 2, 2e-7},
};

#define VM_FUNCS(X)                                                                                \
    X(F_EXP, kiln_math_exp(v))                                                                     \
    X(F_LOG, kiln_math_log(v))                                                                     \
    X(F_SIGMOID, kiln_math_sigmoid(v))                                                             \
    X(F_SILU, kiln_math_silu(v))                                                                   \
    X(F_TANH, kiln_math_tanh(v))                                                                   \
    X(F_ERF, kiln_math_erf(v))                                                                     \
    X(F_GELU, kiln_math_gelu(v))                                                                   \
    X(F_GELU_TANH, kiln_math_gelu_tanh(v))                                                         \
    X(F_SOFTPLUS, kiln_math_softplus(v))                                                           \
    X(F_MISH, kiln_math_mish(v))                                                                   \
    X(F_HARD_SIGMOID, kiln_math_hard_sigmoid(v, 0.2f, 0.5f))                                       \
    X(F_HARD_SWISH, kiln_math_hard_swish(v))

#define VM_CASE(F, EXPR)                                                                           \
    case F:                                                                                        \
        for (int64_t i = 0; i < n; i++) {                                                          \
            float v = x[i];                                                                        \
            y[i] = (EXPR);                                                                         \
        }                                                                                          \
        break;

/* One loop per function (so each vectorizes), for one target. */
#define VM_LOOPS(TARGET, sfx)                                                                      \
    TARGET static void loops_##sfx(int f, const float *x, float *y, int64_t n) {                   \
        switch (f) { VM_FUNCS(VM_CASE) }                                                           \
    }

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
VM_LOOPS(__attribute__((target("avx512f"))), avx512)
VM_LOOPS(__attribute__((target("avx2,fma"))), avx2)
#define VM_X86 1
#endif
VM_LOOPS(, base)

/* The kernels' own loops: kn_act_apply where the function is an activation, else the
 * element-wise table. */
static void kernels(int f, const float *x, float *y, int64_t n) {
    static const int act[F_COUNT] = {[F_SIGMOID] = KN_ACT_SIGMOID,
                                     [F_SILU] = KN_ACT_SWISH,
                                     [F_TANH] = KN_ACT_TANH,
                                     [F_GELU] = KN_ACT_GELU,
                                     [F_GELU_TANH] = KN_ACT_GELU_TANH,
                                     [F_MISH] = KN_ACT_MISH,
                                     [F_HARD_SIGMOID] = KN_ACT_HARD_SIGMOID,
                                     [F_HARD_SWISH] = KN_ACT_HARD_SWISH};
    static const int ew[F_COUNT] = {[F_EXP] = KN_EW_EXP,
                                    [F_LOG] = KN_EW_LOG,
                                    [F_ERF] = KN_EW_ERF,
                                    [F_SOFTPLUS] = KN_EW_SOFTPLUS,
                                    [F_SIGMOID] = KN_EW_SIGMOID,
                                    [F_TANH] = KN_EW_TANH,
                                    [F_GELU] = KN_EW_GELU,
                                    [F_MISH] = KN_EW_MISH,
                                    [F_GELU_TANH] = KN_EW_GELU_TANH,
                                    [F_HARD_SWISH] = KN_EW_HARD_SWISH};
    if (act[f] != 0) {
        memcpy(y, x, (size_t)n * sizeof *y);
        kn_act_apply(act[f], 0.2f, 0.5f, y, n);
    } else {
        ew_params p = {0};
        ew_unary_f32[ew[f]](x, y, n, &p);
    }
}

/* The element-wise table's loops for the functions that are also activations. */
static void ew_loops(int f, const float *x, float *y, int64_t n) {
    static const int ew[F_COUNT] = {
        [F_SIGMOID] = KN_EW_SIGMOID,     [F_TANH] = KN_EW_TANH,
        [F_GELU] = KN_EW_GELU,           [F_MISH] = KN_EW_MISH,
        [F_GELU_TANH] = KN_EW_GELU_TANH, [F_HARD_SWISH] = KN_EW_HARD_SWISH};
    ew_params p = {.a = 0.2, .b = 0.5};
    if (ew[f] != 0)
        ew_unary_f32[ew[f]](x, y, n, &p);
    else
        kernels(f, x, y, n);
}

/* Size of one unit in the last place of the float nearest r (denormal spacing below 2^-126). */
static double ulp_of(double r) {
    double a = fabs(r);
    if (a < 0x1p-126)
        return 0x1p-149;
    int e;
    frexp(a, &e);
    return ldexp(1.0, e - 24);
}

typedef struct worst {
    double err;      /* in ulps, beyond the absolute allowance */
    double raw, abs; /* largest error in ulps and absolute, allowance aside */
    float x, y;
    double r;
    long bad;
} worst;

static void check(int f, const float *x, const float *y, int64_t n, worst *w) {
    for (int64_t i = 0; i < n; i++) {
        double r = ref(f, (double)x[i]);
        float rf = (float)r;
        bool ok;
        double e = 0;
        if (isnan(r)) {
            ok = isnan(y[i]);
            e = ok ? 0 : INFINITY;
        } else if (isinf(rf)) {
            ok = y[i] == rf;
            e = ok ? 0 : INFINITY;
        } else {
            double a = fabs((double)y[i] - r), d = a - tol[f].abs;
            w->raw = a / ulp_of(r) > w->raw ? a / ulp_of(r) : w->raw;
            w->abs = a > w->abs ? a : w->abs;
            e = d > 0 ? d / ulp_of(r) : 0;
            ok = e <= tol[f].ulp;
        }
        if (!ok)
            w->bad++;
        if (e > w->err || (!ok && w->bad == 1)) {
            w->err = e > w->err ? e : w->err;
            w->x = x[i];
            w->y = y[i];
            w->r = r;
        }
    }
}

enum { STRIDE = 997, CHUNK = 1 << 16 };

static const float specials[] = {
    0.0f,      -0.0f,      INFINITY,         -INFINITY, NAN,      -NAN,       0x1p-149f, -0x1p-149f,
    0x1p-126f, -0x1p-126f, 0x1.fffffep-127f, 1.0f,      -1.0f,    0.625f,     -0.625f,   88.72283f,
    88.72284f, -87.33654f, -103.97f,         -104.0f,   89.0f,    3.92f,      -3.92f,    -3.0f,
    3.0f,      20.0f,      -200.0f,          FLT_MAX,   -FLT_MAX, 0.70710677f};

typedef void (*impl_fn)(int f, const float *x, float *y, int64_t n);

static void run_impl(const char *label, impl_fn fn) {
    float *x = kn_malloc(CHUNK * sizeof *x), *y = kn_malloc(CHUNK * sizeof *y);
    assert_non_null(x);
    assert_non_null(y);
    for (int f = 0; f < F_COUNT; f++) {
        worst w = {0};
        int64_t n = 0;
        for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++)
            x[n++] = specials[i];
        for (uint64_t u = 0; u <= 0xffffffffu; u += STRIDE) {
            uint32_t b = (uint32_t)u;
            memcpy(&x[n++], &b, sizeof b);
            if (n == CHUNK) {
                fn(f, x, y, n);
                check(f, x, y, n, &w);
                n = 0;
            }
        }
        fn(f, x, y, n);
        check(f, x, y, n, &w);
        printf("%-8s %-12s %.2f ulp past %.0e abs (x=%a got %a want %a); raw max %.3g ulp, %.2g "
               "abs%s\n",
               label, tol[f].name, w.err, tol[f].abs, (double)w.x, (double)w.y, w.r, w.raw, w.abs,
               w.bad ? "  FAILED" : "");
        if (w.bad)
            fail_msg("%s %s: %ld values past %.1f ulp; x=%a got %a want %a", label, tol[f].name,
                     w.bad, tol[f].ulp, (double)w.x, (double)w.y, w.r);
    }
    kn_free(x);
    kn_free(y);
}

static void test_kernels(void **state) {
    (void)state;
    run_impl("kernels", kernels);
    run_impl("ew", ew_loops);
}

static void test_baseline(void **state) {
    (void)state;
    run_impl("base", loops_base);
}

static void test_avx2(void **state) {
    (void)state;
#ifdef VM_X86
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        run_impl("avx2", loops_avx2);
    else
        printf("avx2: not on this CPU, its clone is not exercised here\n");
#endif
}

static void test_avx512(void **state) {
    (void)state;
#ifdef VM_X86
    if (__builtin_cpu_supports("avx512f"))
        run_impl("avx512", loops_avx512);
    else
        printf("avx512: not on this CPU, its clone is not exercised here\n");
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernels),
        cmocka_unit_test(test_baseline),
        cmocka_unit_test(test_avx2),
        cmocka_unit_test(test_avx512),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
