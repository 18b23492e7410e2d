/* Small math helpers shared by the example plugins. Plugins see only kiln_plugin.h, so they
 * carry their own half-precision conversion and exponential; both are written to vectorize
 * (no calls, no branches in the float path). */
#ifndef KP_MATH_H
#define KP_MATH_H

#include <stdint.h>
#include <string.h>

/* Per-ISA clones of the hot loops (AVX2 and plain SSE2). ThreadSanitizer instruments ifunc
 * resolvers before it is initialised, so clones stay out there. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define KP_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define KP_CLONES
#endif

static inline float kp_bits_to_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t kp_float_to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* exp(x) for x in [-87, 88] (clamped outside): x = n ln2 + r with |r| <= ln2/2, e^r by its
 * Taylor series to degree 7 (truncation below 6e-9 relative), 2^n by building the exponent.
 * Rounding to n uses the 1.5 * 2^23 trick so the loop needs no SSE4.1 rounding. */
static inline float kp_exp(float x) {
    const float lo = -87.0f, hi = 88.0f;
    const float log2e = 1.44269504f, ln2_hi = 0.693145752f, ln2_lo = 1.42860677e-6f;
    const float magic = 12582912.0f; /* 1.5 * 2^23 */
    x = x < lo ? lo : x;
    x = x > hi ? hi : x;
    float t = x * log2e + magic;
    float n = t - magic;
    float r = x - n * ln2_hi - n * ln2_lo;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t e = (int32_t)n + 127;
    return p * kp_bits_to_float((uint32_t)e << 23);
}

/* 1 / d for d in [1, 2] without a division (a vector divide costs as much as the whole
 * exponential): the linear start 24/17 - 8/17 d is within 1/17, and three Newton steps
 * r = r (2 - d r) square the error each time, to float rounding. */
static inline float kp_recip_1_2(float d) {
    float r = 24.0f / 17.0f - (8.0f / 17.0f) * d;
    r = r * (2.0f - d * r);
    r = r * (2.0f - d * r);
    return r * (2.0f - d * r);
}

/* sigmoid(x) with e = e^-|x| in (0, 1]: 1 / (1 + e) for x >= 0, e / (1 + e) below, so the
 * reciprocal always sees [1, 2]. NaN propagates. */
static inline float kp_sigmoid(float x) {
    float a = x < 0.0f ? -x : x;
    float e = kp_exp(-a);
    float r = kp_recip_1_2(1.0f + e);
    return x < 0.0f ? e * r : r;
}

static inline float kp_swish(float x) {
    return x * kp_sigmoid(x);
}

/* IEEE half -> float, exact (subnormals, infinities and NaNs included). */
static inline float kp_half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f)
        return kp_bits_to_float(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24 is exact in float */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return kp_bits_to_float(sign | ((exp + 112u) << 23) | (man << 13));
}

/* float -> IEEE half, round to nearest even; overflow to infinity, NaN stays NaN. */
static inline uint16_t kp_float_to_half(float f) {
    uint32_t u = kp_float_to_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u)
        return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0));
    if (a >= 0x477ff000u) /* rounds to >= 65520: infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) {
        /* below the smallest normal half: scale so the subnormal step is one unit, and let
         * the float adder round to nearest even */
        float v = kp_bits_to_float(a) * 16777216.0f;
        uint32_t m = (uint32_t)v;
        float frac = v - (float)m;
        if (frac > 0.5f || (frac == 0.5f && (m & 1u)))
            m++;
        return (uint16_t)(sign | m);
    }
    uint32_t mant = a & 0x7fffffu, exp = (a >> 23) - 112u;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
        h++; /* a carry into the exponent is the correct rounding */
    return (uint16_t)(sign | h);
}

#endif
