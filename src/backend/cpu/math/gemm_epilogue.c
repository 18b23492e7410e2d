/* GEMM epilogue and activations. Loops are cloned per ISA (target_clones) so they vectorize on
 * AVX2/AVX-512 machines while the build stays generic; the activations are kiln_math.h's
 * branch-free functions, which vectorize only without trapping math (hence the pragma). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math", "fp-contract=fast")
#endif

#include "backend/cpu/arch/act_avx512.h"
#include "backend/cpu/clones.h"
#include "backend/cpu/math/gemm.h"
#include "kiln/kiln_math.h"
#include "ops/nn/conv_geom.h"

#include <stdint.h>

/* One loop nest per activation, rows of n at stride ld: a switch inside the loop would keep it
 * scalar, and taking whole tiles per call keeps the set-up (a score of broadcast constants) off
 * each 16- or 32-wide tile row. */
#define KN_ACT_LOOP(EXPR)                                                                          \
    for (int64_t r = 0; r < m; r++) {                                                              \
        float *xr = x + r * ld;                                                                    \
        for (int64_t i = 0; i < n; i++) {                                                          \
            float v = xr[i];                                                                       \
            xr[i] = (EXPR);                                                                        \
        }                                                                                          \
    }                                                                                              \
    break;

KN_CLONES static void act_rows(int act, float alpha, float beta, float *x, int64_t ld, int64_t m,
                               int64_t n) {
    switch (act) {
    case KN_ACT_RELU:
        KN_ACT_LOOP(v > 0.0f ? v : 0.0f)
    case KN_ACT_CLIP:
        KN_ACT_LOOP((v < alpha ? alpha : v) > beta ? beta : (v < alpha ? alpha : v))
    case KN_ACT_SIGMOID:
        KN_ACT_LOOP(kiln_math_sigmoid(v))
    case KN_ACT_SWISH:
        KN_ACT_LOOP(kiln_math_silu(v))
    case KN_ACT_LEAKY_RELU:
        KN_ACT_LOOP(v < 0.0f ? alpha * v : v)
    case KN_ACT_HARD_SIGMOID:
        KN_ACT_LOOP(kiln_math_hard_sigmoid(v, alpha, beta))
    case KN_ACT_HARD_SWISH:
        KN_ACT_LOOP(kiln_math_hard_swish(v))
    case KN_ACT_GELU:
        KN_ACT_LOOP(kiln_math_gelu(v))
    case KN_ACT_GELU_TANH:
        KN_ACT_LOOP(kiln_math_gelu_tanh(v))
    case KN_ACT_MISH:
        KN_ACT_LOOP(kiln_math_mish(v))
    case KN_ACT_TANH:
        KN_ACT_LOOP(kiln_math_tanh(v))
    default:
        break;
    }
}

/* Sigmoid and SiLU, the activations of EfficientNet and YOLO, take the AVX-512 forms where the
 * CPU has them: fewer operations than GCC makes of the scalar code (act_avx512.h). */
void kn_act_apply_rows(int act, float alpha, float beta, float *x, int64_t ld, int64_t m,
                       int64_t n) {
    if ((act == KN_ACT_SWISH || act == KN_ACT_SIGMOID) && kn_cpu_act_avx512_ok())
        kn_cpu_act_rows_avx512(act, x, ld, m, n);
    else
        act_rows(act, alpha, beta, x, ld, m, n);
}

void kn_act_apply(int act, float alpha, float beta, float *x, int64_t n) {
    kn_act_apply_rows(act, alpha, beta, x, n, 1, n);
}

KN_CLONES static void add_row(float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        x[i] += y[i];
}

KN_CLONES static void add_scalar(float *x, float y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        x[i] += y;
}

void kn_epilogue_apply(const kn_epilogue *ep, float *c, int64_t ldc, int64_t i0, int64_t j0,
                       int64_t m, int64_t n) {
    for (int64_t i = 0; i < m; i++) {
        float *row = c + i * ldc;
        if (ep->bias != NULL) {
            if (ep->bias_per_row)
                add_scalar(row, ep->bias[i0 + i], n);
            else
                add_row(row, ep->bias + j0, n);
        }
        if (ep->residual != NULL)
            add_row(row, ep->residual + (i0 + i) * ep->ldr + j0, n);
        kn_act_apply(ep->act, ep->alpha, ep->beta, row, n);
    }
}

kiln_status kn_cpu_fused_epilogue(const kn_kernel_ctx *k, int residual_at, kn_epilogue *ep) {
    bool residual;
    KN_TRY(kn_fused_attrs(k->node, &ep->act, &ep->alpha, &ep->beta, &residual));
    ep->residual = NULL;
    if (residual) {
        if (residual_at >= k->n_in || k->in[residual_at].data == NULL)
            return kn_error(KILN_ERR_MODEL, "kiln_residual is set but input %d is missing",
                            residual_at);
        ep->residual = k->in[residual_at].data;
    }
    return KILN_OK;
}
