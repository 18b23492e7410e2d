/* Small math helpers shared by the example plugins: the half-precision conversions (written to
 * vectorize: no calls, no branches in the float path). The activations come from kiln's
 * header-only kiln/kiln_math.h, the same code kiln's own kernels run. */
#ifndef KP_MATH_H
#define KP_MATH_H

#include "kiln/kiln_math.h"

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
