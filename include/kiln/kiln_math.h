/* kiln_math.h: float32 transcendental functions and activations, header-only, shared by kiln's
 * CPU kernels and by plugins (which otherwise see only kiln_plugin.h): exp, log, sigmoid, tanh,
 * erf, GELU, SiLU/Swish, HardSigmoid/HardSwish, Mish, softplus. Each is branch-free scalar code
 * (selects, bit casts, no libm calls) so that a loop over an array vectorizes: compiled with
 * per-ISA clones (GCC target_clones), one source gives AVX-512, AVX2 and SSE2 loops. The loops
 * must be compiled with -fno-trapping-math (GCC if-converts the selects only then) and, for FMA
 * in the polynomials, -ffp-contract=fast; kiln's files set both with a pragma.
 *
 * Largest error against the correctly rounded result over all floats including NaN, +-Inf
 * and denormals (kiln's tests/unit/test_vmath.c measures it; the test's bounds are these rounded
 * up): exp 1.0 ulp, log 0.76, tanh 1.5, sigmoid 2.2, SiLU 2.7, softplus 2.5, Mish 3.9; erf
 * 7.1e-7 absolute (12 ulp near +-1); GELU 1.9e-6 absolute (1 + erf cancels for x < 0), its tanh
 * form 5.2e-7; HardSigmoid 0.5 ulp + 3e-8, HardSwish 2.3e-7 absolute (x/6 + 1/2 cancels near
 * -3). NaN in gives NaN out; SiLU, Mish and GELU give their limit -0 at -Inf. The helpers with
 * a suffix (kiln_math_exp_neg_2p32, kiln_math_blend, ...) are building blocks of the others. */
#ifndef KILN_MATH_H
#define KILN_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__)
#define KILN_MATH_INLINE static inline __attribute__((always_inline))
#else
#define KILN_MATH_INLINE static inline
#endif

KILN_MATH_INLINE float kiln_math_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

KILN_MATH_INLINE uint32_t kiln_math_to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* c ? a : b on the bits, for a select GCC must not turn into a branch per arm: given
 * (c ? a : b) / d it divides both arms and selects after, two divisions instead of one. */
KILN_MATH_INLINE float kiln_math_blend(int c, float a, float b) {
    uint32_t m = 0u - (uint32_t)(c != 0);
    return kiln_math_from_bits((kiln_math_to_bits(a) & m) | (kiln_math_to_bits(b) & ~m));
}

/* e^r for |r| <= ln2/2: Cephes' degree-7 polynomial 1 + r + r^2 q(r), q by Estrin's scheme
 * (pairs, then r^2 and r^4) so the dependency chain is half Horner's: the activation loops are
 * bound by it, not by the number of operations. */
KILN_MATH_INLINE float kiln_math_exp_poly(float r) {
    float r2 = r * r, r4 = r2 * r2;
    float a = 1.6666665459e-1f * r + 5.0000001201e-1f;
    float b = 8.3334519073e-3f * r + 4.1665795894e-2f;
    float c = 1.9875691500e-4f * r + 1.3981999507e-3f;
    float q = a + r2 * b + r4 * c;
    return r2 * q + r + 1.0f;
}

/* e^x. x = n ln2 + r with |r| <= ln2/2 (Cody-Waite, ln2 split so n * hi is exact), e^r by
 * Cephes' degree-7 polynomial, 2^n as two normal factors 2^(n/2) 2^(n - n/2) so results in the
 * denormal range round once and 2^128 overflows to Inf as it should. The clamp is written so
 * NaN takes a bound (converting NaN to int is undefined); NaN is given back at the end.
 * kiln_math_exp_scaled returns e^x 2^k (|k| <= 32) without rounding twice: callers whose result
 * is e^x times something keep tiny e^x out of the denormals that way. */
KILN_MATH_INLINE float kiln_math_exp_scaled(float x, int32_t k) {
    float c = x > -126.0f ? x : -126.0f;
    c = c < 89.0f ? c : 89.0f;
    /* Adding 1.5 * 2^23 rounds to the nearest integer. */
    float n = (c * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = c - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    float p = kiln_math_exp_poly(r);
    int32_t ni = (int32_t)n + k, h = ni >> 1; /* GCC shifts signed ints arithmetically */
    float s1 = kiln_math_from_bits((uint32_t)(h + 127) << 23);
    float s2 = kiln_math_from_bits((uint32_t)(ni - h + 127) << 23);
    float y = p * s1 * s2;
    return x == x ? y : x;
}

KILN_MATH_INLINE float kiln_math_exp(float x) {
    return kiln_math_exp_scaled(x, 0);
}

/* e^t 2^32 for t <= 0, the cheaper form for the activations, which all need only e^-|x|:
 * clamped at -109.5, 2^(n + 32) is a normal float, so one scale factor suffices; results
 * built from it below the clamp round to 0 anyway. Carrying 2^32 keeps tiny e^t out of the
 * denormals until the caller's last multiply. NaN takes the bound: callers handle it. */
KILN_MATH_INLINE float kiln_math_exp_neg_2p32(float t) {
    float c = t > -109.5f ? t : -109.5f;
    float n = (c * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = c - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    float p = kiln_math_exp_poly(r);
    return p * kiln_math_from_bits((uint32_t)((int32_t)n + 127 + 32) << 23);
}

/* Natural log. x = 2^e m with m in [sqrt(1/2), sqrt(2)), log(m) by Cephes' polynomial in
 * m - 1; denormals are scaled by 2^23 first. 0 gives -Inf, negatives NaN, +Inf itself. */
KILN_MATH_INLINE float kiln_math_log(float x) {
    int sub = x < 1.17549435e-38f;
    float xs = sub ? x * 8388608.0f : x;
    uint32_t u = kiln_math_to_bits(xs);
    float e = (float)((int32_t)((u >> 23) & 0xffu) - 126) - (sub ? 23.0f : 0.0f);
    float m = kiln_math_from_bits((u & 0x007fffffu) | 0x3f000000u); /* [0.5, 1) */
    int lo = m < 0.707106781186547524f;
    e = lo ? e - 1.0f : e;
    m = lo ? m + m - 1.0f : m - 1.0f;
    float z = m * m;
    float p = 7.0376836292e-2f;
    p = p * m - 1.1514610310e-1f;
    p = p * m + 1.1676998740e-1f;
    p = p * m - 1.2420140846e-1f;
    p = p * m + 1.4249322787e-1f;
    p = p * m - 1.6668057665e-1f;
    p = p * m + 2.0000714765e-1f;
    p = p * m - 2.4999993993e-1f;
    p = p * m + 3.3333331174e-1f;
    float y = p * m * z;
    y = y - 2.12194440e-4f * e;
    y = y - 0.5f * z;
    y = (m + y) + 0.693359375f * e;
    y = x == INFINITY ? x : y;
    y = x == 0.0f ? -INFINITY : y;
    y = x < 0.0f ? NAN : y;
    return x == x ? y : x;
}

/* log(1 + t) for t >= 0 (Kahan: the rounding of 1 + t is divided back out). */
KILN_MATH_INLINE float kiln_math_log1p_pos(float t) {
    float u = 1.0f + t;
    float d = u - 1.0f;
    float y = kiln_math_log(u) * (t / (d == 0.0f ? 1.0f : d));
    return d == 0.0f ? t : y;
}

/* 1 / (1 + e^-x) with e = e^-|x| in (0, 1], never overflowing: 1 / (1 + e) for x >= 0,
 * e / (1 + e) below, so tiny results stay accurate down to the denormals. */
KILN_MATH_INLINE float kiln_math_sigmoid(float x) {
    float e = kiln_math_exp_neg_2p32(-fabsf(x)) * 0x1p-32f;
    float y = (x < 0.0f ? e : 1.0f) / (1.0f + e);
    return x == x ? y : x;
}

/* x * sigmoid(x): x / (1 + e) for x >= 0, x e / (1 + e) below with e still scaled by 2^32, so
 * results in the denormals round once. Below -200 the result is -0 (the limit, also at -Inf,
 * where the product would be NaN). */
KILN_MATH_INLINE float kiln_math_silu(float x) {
    float es = kiln_math_exp_neg_2p32(-fabsf(x));
    float e = es * 0x1p-32f;
    float xc = x < -200.0f ? -200.0f : x;
    float y = kiln_math_blend(x < 0.0f, xc * es, x) / (1.0f + e);
    return x < 0.0f ? y * 0x1p-32f : y;
}

/* tanh: an odd polynomial below 0.625 (Cephes), (1 - e) / (1 + e) with e = e^-2|x| above, sign
 * restored. NaN takes the polynomial. */
KILN_MATH_INLINE float kiln_math_tanh(float x) {
    float ax = fabsf(x);
    float z = x * x;
    float p = -5.70498872745e-3f;
    p = p * z + 2.06390887954e-2f;
    p = p * z - 5.37397155531e-2f;
    p = p * z + 1.33314422036e-1f;
    p = p * z - 3.33332819422e-1f;
    float small = p * z * x + x;
    float e = kiln_math_exp_neg_2p32(-2.0f * ax) * 0x1p-32f;
    float big = copysignf((1.0f - e) / (1.0f + e), x);
    return ax >= 0.625f ? big : small;
}

/* erf as x * P(x^2) / Q(x^2), a rational fit on [0, 3.92] (5e-7 relative in exact
 * arithmetic, under 1e-6 in float); beyond 3.92 erf rounds to +-1 in float, given exactly so
 * that 1 + erf is 0 there. NaN passes through the selects. */
KILN_MATH_INLINE float kiln_math_erf(float x) {
    float c = x < -3.92f ? -3.92f : x;
    c = c > 3.92f ? 3.92f : c;
    float t = c * c;
    float p = -1.5547618659e-6f;
    p = p * t + 2.7542121825e-4f;
    p = p * t + 1.0943743400e-2f;
    p = p * t + 7.4808083475e-2f;
    p = p * t + 3.8120451570e-1f;
    p = p * t + 1.1283797026f;
    float q = 2.5729907211e-3f;
    q = q * t + 2.9658434913e-2f;
    q = q * t + 1.9005098939e-1f;
    q = q * t + 6.7116487026e-1f;
    q = q * t + 1.0f;
    float y = c * p / q;
    y = y > 1.0f ? 1.0f : y;
    y = y < -1.0f ? -1.0f : y;
    return fabsf(x) > 3.92f ? copysignf(1.0f, x) : y;
}

/* GELU, exact form: x/2 (1 + erf(x / sqrt 2)). Below -200 it is -0, the limit (at -Inf the
 * product would be NaN). */
KILN_MATH_INLINE float kiln_math_gelu(float x) {
    float xc = x < -200.0f ? -200.0f : x;
    return 0.5f * xc * (1.0f + kiln_math_erf(x * 0.70710678118654752f));
}

/* GELU, tanh approximation: x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), -0 below -200. */
KILN_MATH_INLINE float kiln_math_gelu_tanh(float x) {
    float xc = x < -200.0f ? -200.0f : x;
    float u = 0.79788456080286536f * (xc + 0.044715f * xc * xc * xc);
    return 0.5f * xc * (1.0f + kiln_math_tanh(u));
}

/* log(1 + e^x) = max(x, 0) + log1p(e^-|x|), which never overflows. */
KILN_MATH_INLINE float kiln_math_softplus(float x) {
    float m = x > 0.0f ? x : 0.0f;
    return m + kiln_math_log1p_pos(kiln_math_exp(-fabsf(x)));
}

/* x tanh(softplus(x)) = x n / (n + 2) with n = u (u + 2), u = e^x. In terms of v = e^-|x|:
 * for x > 0 that is x (1 + 2v) / (1 + 2v + 2v^2); for x <= 0, v = u, carried scaled by 2^32 (as
 * in SiLU) so tiny results round once. Below -200 it is -0, as for SiLU. */
KILN_MATH_INLINE float kiln_math_mish(float x) {
    float vs = kiln_math_exp_neg_2p32(-fabsf(x));
    float v = vs * 0x1p-32f;
    float ns = vs * (v + 2.0f);
    float t = 1.0f + 2.0f * v;
    int neg = x <= 0.0f;
    float num = kiln_math_blend(neg, ns, t);
    float den = kiln_math_blend(neg, ns * 0x1p-32f + 2.0f, t + 2.0f * v * v);
    float xc = x < -200.0f ? -200.0f : x;
    float y = (xc * num) / den;
    return neg ? y * 0x1p-32f : y;
}

/* min(max(a x + b, 0), 1), keeping NaN (fmin/fmax would drop it). */
KILN_MATH_INLINE float kiln_math_hard_sigmoid(float x, float a, float b) {
    float v = a * x + b;
    v = v < 0.0f ? 0.0f : v;
    return v > 1.0f ? 1.0f : v;
}

/* x * HardSigmoid(x) with ONNX's a = 1/6, b = 1/2. */
KILN_MATH_INLINE float kiln_math_hard_swish(float x) {
    return x * kiln_math_hard_sigmoid(x, 1.0f / 6.0f, 0.5f);
}

#endif
