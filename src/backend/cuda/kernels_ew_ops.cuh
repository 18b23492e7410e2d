// The float functions of kiln's element-wise ops (kn_ew_unary / kn_ew_binary numbering,
// ops/fused_elementwise.h), shared by the compiled kernels (kernels_elementwise.cu includes
// this file) and the kernels generated at build for kiln.FusedElementwise (fused_codegen.c
// includes it with KC_EW_SOURCE defined to stringize the same text for NVRTC). Hence the
// whole body is one macro argument: no preprocessor lines, string or character literals inside.
#ifndef KC_EW_SOURCE
#define KC_EW_SOURCE(...) __VA_ARGS__
#endif

// The body is laid out by hand: clang-format would join it into the macro call.
// clang-format off
KC_EW_SOURCE(
// kn_ew_unary numbering (ops/fused_elementwise.h).
__device__ __forceinline__ float unit_clamp(float v) {
    return v < 0.f ? 0.f : v > 1.f ? 1.f : v;
}

__device__ __forceinline__ float softplus(float x) {
    return x > 0.f ? x + log1pf(expf(-x)) : log1pf(expf(x));
}

__device__ __forceinline__ float unary(int op, float x, float pa, float pb) {
    switch (op) {
    case 0:
        return fabsf(x);
    case 1:
        return -x;
    case 2:
        return 1.f / x;
    case 3:
        return floorf(x);
    case 4:
        return ceilf(x);
    case 5:
        return rintf(x);
    case 6:
        return sqrtf(x);
    case 7:
        return expf(x);
    case 8:
        return logf(x);
    case 9:
        return sinf(x);
    case 10:
        return cosf(x);
    case 11:
        return tanf(x);
    case 12:
        return asinf(x);
    case 13:
        return acosf(x);
    case 14:
        return atanf(x);
    case 15:
        return sinhf(x);
    case 16:
        return coshf(x);
    case 17:
        return asinhf(x);
    case 18:
        return acoshf(x);
    case 19:
        return atanhf(x);
    case 20:
        return erff(x);
    case 21:
        return x > 0.f ? 1.f : x < 0.f ? -1.f : x;
    case 22:
        return x < 0.f ? 0.f : x;
    case 23:
        return x < 0.f ? pa * x : x;
    case 24:
        return x < 0.f ? pa * expm1f(x) : x;
    case 25:
        return x <= 0.f ? pb * (pa * expm1f(x)) : pb * x;
    case 26:
        return x > 0.f ? x : pa * expm1f(x / pa);
    case 27:
        return 1.f / (1.f + expf(-x));
    case 28:
        return unit_clamp(pa * x + pb);
    case 29:
        return x * unit_clamp(x * (1.f / 6.f) + 0.5f);
    case 30:
        return tanhf(x);
    case 31:
        return softplus(x);
    case 32:
        return x / (1.f + fabsf(x));
    case 33:
        return x > pa ? x : 0.f;
    case 34:
        return 0.5f * x * (1.f + erff(x * 0.70710678118654752440f));
    case 35:
        return 0.5f * x * (1.f + tanhf(0.79788456080286535588f * (x + 0.044715f * x * x * x)));
    case 36:
        return x * tanhf(softplus(x));
    case 37:
        return x < -pb ? x + pa : x > pb ? x - pa : 0.f;
    case 38: {
        float lo = x < pa ? pa : x;
        return lo > pb ? pb : lo;
    }
    default:
        return __int_as_float(0x7fc00000);
    }
}

// kn_ew_binary numbering.
__device__ __forceinline__ float binary(int op, float a, float b) {
    switch (op) {
    case 0:
        return a + b;
    case 1:
        return a - b;
    case 2:
        return a * b;
    case 3:
        return a / b;
    case 4:
        return powf(a, b);
    case 5:
        return (a != a || b != b) ? __int_as_float(0x7fc00000) : fmaxf(a, b);
    case 6:
        return (a != a || b != b) ? __int_as_float(0x7fc00000) : fminf(a, b);
    case 7:
        return a < 0.f ? a * b : a;
    case 8:
        return fmodf(a, b);
    default:
        return __int_as_float(0x7fc00000);
    }
}
)
// clang-format on
