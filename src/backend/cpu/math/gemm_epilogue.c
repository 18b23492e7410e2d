/* GEMM epilogue and activations. Loops are cloned per ISA (target_clones) so they vectorize on
 * AVX2/AVX-512 machines while the build stays generic; exp is a polynomial so that sigmoid
 * vectorizes too (relative error ~2e-7 over the clamped range). */
#include "backend/cpu/clones.h"
#include "backend/cpu/math/gemm.h"
#include "ops/nn/conv_geom.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float exp_poly(float in) {
    /* Bounds keep 2^n a normal float: n stays in [-126, 127]. Written so NaN takes a bound
     * too: converting a NaN n to int is undefined. NaN is given back at the end. */
    float x = in > -87.3f ? in : -87.3f;
    x = x < 88.3f ? x : 88.3f;
    float n = floorf(x * 1.44269504f + 0.5f);
    float r = x - n * 0.693145752f - n * 1.42860677e-6f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return in == in ? p * scale : in;
}

KN_CLONES void kn_act_apply(int act, float alpha, float beta, float *x, int64_t n) {
    switch (act) {
    case KN_ACT_RELU:
        for (int64_t i = 0; i < n; i++)
            x[i] = x[i] > 0.0f ? x[i] : 0.0f;
        break;
    case KN_ACT_CLIP:
        for (int64_t i = 0; i < n; i++) {
            float v = x[i] < alpha ? alpha : x[i];
            x[i] = v > beta ? beta : v;
        }
        break;
    case KN_ACT_SIGMOID:
        for (int64_t i = 0; i < n; i++)
            x[i] = 1.0f / (1.0f + exp_poly(-x[i]));
        break;
    case KN_ACT_SWISH:
        for (int64_t i = 0; i < n; i++)
            x[i] = x[i] / (1.0f + exp_poly(-x[i]));
        break;
    case KN_ACT_LEAKY_RELU:
        for (int64_t i = 0; i < n; i++)
            x[i] = x[i] < 0.0f ? alpha * x[i] : x[i];
        break;
    default:
        break;
    }
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
