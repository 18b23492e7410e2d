/* Swish: x * sigmoid(alpha * x), and SwiGLU: Swish(a) * b, with kiln_math.h's sigmoid so the
 * loops vectorize. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math", "fp-contract=fast")
#endif

#include "backend/cpu/clones.h"
#include "backend/cpu/f32_stage.h"
#include "kiln/kiln_math.h"

KN_CLONES static void swish_loop(const float *x, float *y, int64_t n, float alpha) {
    if (alpha == 1.0f) {
        for (int64_t i = 0; i < n; i++)
            y[i] = kiln_math_silu(x[i]);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * kiln_math_sigmoid(alpha * x[i]);
}

kiln_status kn_cpu_swish(kn_kernel_ctx *k) {
    float alpha = kn_attr_float(k->node, "alpha", 1.0f);
    kn_cpu_f32 x = {0}, y = {0};
    kiln_status rc = kn_cpu_f32_in(&k->in[0], &x);
    if (rc == KILN_OK)
        rc = kn_cpu_f32_out(&k->out[0], &y);
    if (rc == KILN_OK) {
        swish_loop(x.p, y.p, kn_tensor_numel(&k->in[0]), alpha);
        kn_cpu_f32_commit(&k->out[0], &y);
    }
    kn_cpu_f32_release(&y);
    kn_cpu_f32_release(&x);
    return rc;
}

KN_CLONES static void swiglu_loop(const float *a, const float *b, float *y, int64_t n,
                                  float alpha) {
    if (alpha == 1.0f) {
        for (int64_t i = 0; i < n; i++)
            y[i] = kiln_math_silu(a[i]) * b[i];
        return;
    }
    for (int64_t i = 0; i < n; i++)
        y[i] = a[i] * kiln_math_sigmoid(alpha * a[i]) * b[i];
}

kiln_status kn_cpu_swiglu(kn_kernel_ctx *k) {
    float alpha = kn_attr_float(k->node, "alpha", 1.0f);
    kn_cpu_f32 a, b, y;
    KN_TRY(kn_cpu_f32_binary(k, &a, &b, &y));
    swiglu_loop(a.p, b.p, y.p, kn_tensor_numel(&k->in[0]), alpha);
    kn_cpu_f32_commit(&k->out[0], &y);
    kn_cpu_f32_release(&y);
    kn_cpu_f32_release(&b);
    kn_cpu_f32_release(&a);
    return KILN_OK;
}
