/* Encoding and decoding of the float8, float4 and 4-bit integer element codes (ONNX's
 * definitions: the "fn" formats have no infinity and one NaN pattern per sign, the "fnuz"
 * formats no negative zero and NaN as the pattern of negative zero). */
#include "core/narrow_dtype.h"

#include "kiln/kiln.h"

#include <math.h>
#include <string.h>

typedef struct minifloat {
    int mbits, bias, sign_shift;
    float max;
    bool has_inf, uz;
} minifloat;

static const minifloat *format_of(int32_t dtype) {
    static const minifloat e4m3fn = {3, 7, 7, 448.0f, false, false};
    static const minifloat e4m3fnuz = {3, 8, 7, 240.0f, false, true};
    static const minifloat e5m2 = {2, 15, 7, 57344.0f, true, false};
    static const minifloat e5m2fnuz = {2, 16, 7, 57344.0f, false, true};
    static const minifloat e2m1 = {1, 1, 3, 6.0f, false, false};
    switch (dtype) {
    case KILN_DTYPE_FLOAT8E4M3FN:
        return &e4m3fn;
    case KILN_DTYPE_FLOAT8E4M3FNUZ:
        return &e4m3fnuz;
    case KILN_DTYPE_FLOAT8E5M2:
        return &e5m2;
    case KILN_DTYPE_FLOAT8E5M2FNUZ:
        return &e5m2fnuz;
    default:
        return &e2m1;
    }
}

bool kn_dtype_is_float8(int32_t dtype) {
    return dtype >= KILN_DTYPE_FLOAT8E4M3FN && dtype <= KILN_DTYPE_FLOAT8E5M2FNUZ;
}

bool kn_dtype_is_4bit(int32_t dtype) {
    return dtype == KILN_DTYPE_UINT4 || dtype == KILN_DTYPE_INT4 || dtype == KILN_DTYPE_FLOAT4E2M1;
}

int kn_dtype_packed_bits(int32_t dtype) {
    return kn_dtype_is_4bit(dtype)                                 ? 4
           : dtype == KILN_DTYPE_UINT2 || dtype == KILN_DTYPE_INT2 ? 2
                                                                   : 0;
}

bool kn_dtype_is_narrow_int(int32_t dtype) {
    return dtype == KILN_DTYPE_UINT4 || dtype == KILN_DTYPE_INT4 || dtype == KILN_DTYPE_UINT2 ||
           dtype == KILN_DTYPE_INT2;
}

bool kn_dtype_is_narrow(int32_t dtype) {
    return kn_dtype_is_float8(dtype) || kn_dtype_packed_bits(dtype) != 0 ||
           dtype == KILN_DTYPE_FLOAT8E8M0;
}

float kn_narrow_float_decode(int32_t dtype, uint8_t code) {
    const minifloat *f = format_of(dtype);
    int ebits = f->sign_shift - f->mbits;
    unsigned sign = (code >> f->sign_shift) & 1u;
    unsigned exp = (code >> f->mbits) & ((1u << ebits) - 1);
    unsigned man = code & ((1u << f->mbits) - 1);
    unsigned body = code & ((1u << f->sign_shift) - 1);
    if (dtype != KILN_DTYPE_FLOAT4E2M1) {
        if (f->uz && code == 0x80)
            return NAN;
        if (!f->uz && !f->has_inf && body == 0x7f)
            return sign ? -NAN : NAN;
        if (f->has_inf && exp == (1u << ebits) - 1)
            return man == 0 ? (sign ? -INFINITY : INFINITY) : (sign ? -NAN : NAN);
    }
    float v = exp == 0 ? ldexpf((float)man, 1 - f->bias - f->mbits)
                       : ldexpf((float)(man | (1u << f->mbits)), (int)exp - f->bias - f->mbits);
    return sign ? -v : v;
}

uint8_t kn_narrow_float_encode(int32_t dtype, float v, bool saturate) {
    const minifloat *f = format_of(dtype);
    bool fp4 = dtype == KILN_DTYPE_FLOAT4E2M1;
    uint8_t sign = signbit(v) ? (uint8_t)(1u << f->sign_shift) : 0;
    uint8_t max_code = (uint8_t)(fp4 ? 0x7 : f->has_inf ? 0x7b : f->uz ? 0x7f : 0x7e);
    uint8_t nan_code = (uint8_t)(fp4 ? 0x8 : f->uz ? 0x80 : f->has_inf ? sign | 0x7e : sign | 0x7f);
    uint8_t over_code = (uint8_t)(fp4 || saturate ? sign | max_code
                                  : f->has_inf    ? sign | 0x7c
                                                  : nan_code);
    if (isnan(v))
        return nan_code;
    double a = fabs((double)v);
    if (isinf(v))
        return over_code;
    int emin = 1 - f->bias, e;
    frexp(a, &e);
    e -= 1; /* a = 1.m * 2^e */
    if (e < emin)
        e = emin;
    double q = ldexp(1.0, e - f->mbits); /* the step between neighbours at this exponent */
    double r = rint(a / q) * q;          /* rint rounds half to even in the default mode */
    if (r > (double)f->max)
        return over_code;
    if (r == 0.0)
        return f->uz ? 0 : sign;
    frexp(r, &e);
    e -= 1;
    unsigned code;
    if (e < emin)
        code = (unsigned)ldexp(r, f->mbits - emin);
    else
        code = (unsigned)(e + f->bias) << f->mbits |
               ((unsigned)ldexp(r, f->mbits - e) & ((1u << f->mbits) - 1));
    return (uint8_t)(sign | code);
}

float kn_e8m0_decode(uint8_t code) {
    return code == 0xff ? NAN : ldexpf(1.0f, (int)code - 127);
}

/* The float's biased exponent, moved by its mantissa as the mode says (ONNX's reference
 * conversion): the sign is dropped, NaN and infinity give NaN, and with saturate the largest
 * exponent does not round up into NaN. */
uint8_t kn_e8m0_encode(float v, bool saturate, int round_mode) {
    uint32_t bits;
    memcpy(&bits, &v, 4);
    unsigned exp = (bits >> 23) & 0xff;
    if (exp == 0xff)
        return 0xff;
    bool up = false;
    if (round_mode == KN_E8M0_UP) {
        up = (bits & 0x7fffff) != 0;
    } else if (round_mode == KN_E8M0_NEAREST) {
        bool g = bits & 0x400000, r = bits & 0x200000, s = (bits & 0x1fffff) != 0;
        up = g && (r || s || exp > 0);
    }
    if (up && !(saturate && exp == 0xfe))
        exp++;
    return (uint8_t)exp;
}

uint8_t kn_narrow_int_encode(int32_t dtype, int64_t v) {
    return (uint8_t)((uint64_t)v & ((1u << kn_dtype_packed_bits(dtype)) - 1));
}

int64_t kn_narrow_int_decode(int32_t dtype, uint8_t code) {
    int bits = kn_dtype_packed_bits(dtype);
    int64_t v = code & ((1 << bits) - 1);
    bool sign = dtype == KILN_DTYPE_INT4 || dtype == KILN_DTYPE_INT2;
    return sign && v >= (1 << (bits - 1)) ? v - (1 << bits) : v;
}
