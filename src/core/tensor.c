#include "core/tensor.h"

#include "core/narrow_dtype.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int64_t kn_shape_numel(const kn_shape *s) {
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++)
        n *= s->d[i];
    return n;
}

bool kn_shape_equal(const kn_shape *a, const kn_shape *b) {
    if (a->rank != b->rank)
        return false;
    for (int i = 0; i < a->rank; i++)
        if (a->d[i] != b->d[i])
            return false;
    return true;
}

bool kn_shape_valid(const kn_shape *s) {
    if (s->rank < 0 || s->rank > KN_MAX_RANK)
        return false;
    /* Zero dims are left out of the product: kernels multiply subsets of the dims (a plane, a
     * row stride), which must not overflow even when the tensor is empty. */
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++) {
        if (s->d[i] < 0 || s->d[i] > KN_MAX_ELEMENTS)
            return false;
        if (s->d[i] == 0)
            continue;
        if (n > KN_MAX_ELEMENTS / s->d[i])
            return false;
        n *= s->d[i];
    }
    return true;
}

const char *kn_shape_str(const kn_shape *s, char *buf, size_t size) {
    if (s->rank == 0) {
        snprintf(buf, size, "scalar");
        return buf;
    }
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < s->rank && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, i ? "x%lld" : "%lld", (long long)s->d[i]);
    return buf;
}

bool kn_shape_broadcast(const kn_shape *a, const kn_shape *b, kn_shape *out) {
    int r = a->rank > b->rank ? a->rank : b->rank;
    kn_shape o = {.rank = r};
    for (int i = 0; i < r; i++) {
        int ia = i - (r - a->rank), ib = i - (r - b->rank);
        int64_t da = ia >= 0 ? a->d[ia] : 1, db = ib >= 0 ? b->d[ib] : 1;
        if (da == db || db == 1)
            o.d[i] = da;
        else if (da == 1)
            o.d[i] = db;
        else
            return false;
    }
    *out = o;
    return true;
}

void kn_shape_strides(const kn_shape *s, int64_t *strides) {
    int64_t st = 1;
    for (int i = s->rank - 1; i >= 0; i--) {
        strides[i] = st;
        st *= s->d[i];
    }
}

size_t kn_dtype_size(int32_t dtype) {
    switch (dtype) {
    case KILN_DTYPE_BOOL:
    case KILN_DTYPE_UINT8:
    case KILN_DTYPE_INT8:
    case KILN_DTYPE_FLOAT8E4M3FN:
    case KILN_DTYPE_FLOAT8E4M3FNUZ:
    case KILN_DTYPE_FLOAT8E5M2:
    case KILN_DTYPE_FLOAT8E5M2FNUZ:
    case KILN_DTYPE_UINT4: /* one byte each in kiln's buffers: see core/narrow_dtype.h */
    case KILN_DTYPE_INT4:
    case KILN_DTYPE_UINT2:
    case KILN_DTYPE_INT2:
    case KILN_DTYPE_FLOAT4E2M1:
    case KILN_DTYPE_FLOAT8E8M0:
    case KILN_DTYPE_CONTAINER: /* a byte block: see core/container.h */
    case KILN_DTYPE_STRING:    /* a byte block: see core/strings.h */
        return 1;
    case KILN_DTYPE_UINT16:
    case KILN_DTYPE_INT16:
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16:
        return 2;
    case KILN_DTYPE_FLOAT32:
    case KILN_DTYPE_INT32:
    case KILN_DTYPE_UINT32:
        return 4;
    case KILN_DTYPE_FLOAT64:
    case KILN_DTYPE_INT64:
    case KILN_DTYPE_UINT64:
        return 8;
    default:
        return 0;
    }
}

size_t kiln_dtype_size(kiln_dtype dtype) {
    return kn_dtype_size(dtype);
}

const char *kn_dtype_name(int32_t dtype) {
    switch (dtype) {
    case KILN_DTYPE_FLOAT32:
        return "float32";
    case KILN_DTYPE_UINT8:
        return "uint8";
    case KILN_DTYPE_INT8:
        return "int8";
    case KILN_DTYPE_UINT16:
        return "uint16";
    case KILN_DTYPE_INT16:
        return "int16";
    case KILN_DTYPE_INT32:
        return "int32";
    case KILN_DTYPE_INT64:
        return "int64";
    case KILN_DTYPE_STRING:
        return "string";
    case KILN_DTYPE_CONTAINER:
        return "sequence/optional";
    case KILN_DTYPE_BOOL:
        return "bool";
    case KILN_DTYPE_FLOAT16:
        return "float16";
    case KILN_DTYPE_FLOAT64:
        return "float64";
    case KILN_DTYPE_UINT32:
        return "uint32";
    case KILN_DTYPE_UINT64:
        return "uint64";
    case KILN_DTYPE_BFLOAT16:
        return "bfloat16";
    case KILN_DTYPE_FLOAT8E4M3FN:
        return "float8e4m3fn";
    case KILN_DTYPE_FLOAT8E4M3FNUZ:
        return "float8e4m3fnuz";
    case KILN_DTYPE_FLOAT8E5M2:
        return "float8e5m2";
    case KILN_DTYPE_FLOAT8E5M2FNUZ:
        return "float8e5m2fnuz";
    case KILN_DTYPE_UINT4:
        return "uint4";
    case KILN_DTYPE_INT4:
        return "int4";
    case KILN_DTYPE_UINT2:
        return "uint2";
    case KILN_DTYPE_INT2:
        return "int2";
    case KILN_DTYPE_FLOAT4E2M1:
        return "float4e2m1";
    case KILN_DTYPE_FLOAT8E8M0:
        return "float8e8m0";
    default:
        return "undefined";
    }
}

const char *kiln_dtype_name(kiln_dtype dtype) {
    return kn_dtype_name(dtype);
}

bool kn_dtype_is_float(int32_t dtype) {
    return dtype == KILN_DTYPE_FLOAT32 || dtype == KILN_DTYPE_FLOAT16 ||
           dtype == KILN_DTYPE_FLOAT64 || dtype == KILN_DTYPE_BFLOAT16;
}

bool kn_dtype_is_integer(int32_t dtype) {
    switch (dtype) {
    case KILN_DTYPE_UINT8:
    case KILN_DTYPE_INT8:
    case KILN_DTYPE_UINT16:
    case KILN_DTYPE_INT16:
    case KILN_DTYPE_INT32:
    case KILN_DTYPE_INT64:
    case KILN_DTYPE_UINT32:
    case KILN_DTYPE_UINT64:
        return true;
    default:
        return false;
    }
}

size_t kn_tensor_nbytes(const kn_tensor *t) {
    return (size_t)kn_tensor_numel(t) * kn_dtype_size(t->dtype);
}

float kn_half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while ((man & 0x400) == 0) {
                man <<= 1;
                exp--;
            }
            man &= 0x3ff;
            bits = sign | (exp << 23) | (man << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t kn_float_to_half(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffffu;
    if (absx > 0x7f800000u) /* NaN */
        return (uint16_t)(sign | 0x7e00);
    if (absx >= 0x477ff000u) /* rounds to >= 65520: infinity */
        return (uint16_t)(sign | 0x7c00);
    if (absx < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        float a;
        memcpy(&a, &absx, 4);
        /* 2^-24 is the subnormal step; rint rounds half to even in the default mode. */
        uint32_t m = (uint32_t)rintf(a * 16777216.0f);
        return (uint16_t)(sign | m);
    }
    uint32_t exp = ((absx >> 23) - 127 + 15) << 10;
    uint32_t man = (absx >> 13) & 0x3ff;
    uint32_t rest = absx & 0x1fff;
    uint32_t h = exp | man;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
        h++;
    return (uint16_t)(sign | h);
}

float kn_bf16_to_float(uint16_t h) {
    return kn_bf16_widen(h);
}

uint16_t kn_float_to_bf16(float f) {
    return kn_bf16_round(f);
}

double kn_tensor_get_f64(const kn_tensor *t, int64_t i) {
    const void *p = t->data;
    switch (t->dtype) {
    case KILN_DTYPE_FLOAT32:
        return ((const float *)p)[i];
    case KILN_DTYPE_FLOAT64:
        return ((const double *)p)[i];
    case KILN_DTYPE_FLOAT16:
        return kn_half_to_float(((const uint16_t *)p)[i]);
    case KILN_DTYPE_BFLOAT16:
        return kn_bf16_to_float(((const uint16_t *)p)[i]);
    case KILN_DTYPE_UINT64:
        return (double)((const uint64_t *)p)[i];
    case KILN_DTYPE_FLOAT8E4M3FN:
    case KILN_DTYPE_FLOAT8E4M3FNUZ:
    case KILN_DTYPE_FLOAT8E5M2:
    case KILN_DTYPE_FLOAT8E5M2FNUZ:
    case KILN_DTYPE_FLOAT4E2M1:
        return kn_narrow_float_decode(t->dtype, ((const uint8_t *)p)[i]);
    case KILN_DTYPE_FLOAT8E8M0:
        return kn_e8m0_decode(((const uint8_t *)p)[i]);
    default:
        return (double)kn_tensor_get_i64(t, i);
    }
}

int64_t kn_tensor_get_i64(const kn_tensor *t, int64_t i) {
    const void *p = t->data;
    switch (t->dtype) {
    case KILN_DTYPE_BOOL:
    case KILN_DTYPE_UINT8:
        return ((const uint8_t *)p)[i];
    case KILN_DTYPE_INT8:
        return ((const int8_t *)p)[i];
    case KILN_DTYPE_UINT16:
        return ((const uint16_t *)p)[i];
    case KILN_DTYPE_INT16:
        return ((const int16_t *)p)[i];
    case KILN_DTYPE_INT32:
        return ((const int32_t *)p)[i];
    case KILN_DTYPE_INT64:
        return ((const int64_t *)p)[i];
    case KILN_DTYPE_UINT32:
        return ((const uint32_t *)p)[i];
    case KILN_DTYPE_UINT64:
        return (int64_t)((const uint64_t *)p)[i];
    case KILN_DTYPE_UINT4:
    case KILN_DTYPE_INT4:
    case KILN_DTYPE_UINT2:
    case KILN_DTYPE_INT2:
        return kn_narrow_int_decode(t->dtype, ((const uint8_t *)p)[i]);
    case KILN_DTYPE_FLOAT32:
    case KILN_DTYPE_FLOAT64:
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16:
    case KILN_DTYPE_FLOAT8E4M3FN:
    case KILN_DTYPE_FLOAT8E4M3FNUZ:
    case KILN_DTYPE_FLOAT8E5M2:
    case KILN_DTYPE_FLOAT8E5M2FNUZ:
    case KILN_DTYPE_FLOAT4E2M1:
    case KILN_DTYPE_FLOAT8E8M0: {
        double v = kn_tensor_get_f64(t, i);
        return v != v ? 0 : v >= 0x1p63 ? INT64_MAX : v < -0x1p63 ? INT64_MIN : (int64_t)v;
    }
    default:
        return 0;
    }
}

void kn_tensor_set_f64(kn_tensor *t, int64_t i, double v) {
    void *p = t->data;
    switch (t->dtype) {
    case KILN_DTYPE_FLOAT32:
        ((float *)p)[i] = (float)v;
        break;
    case KILN_DTYPE_FLOAT64:
        ((double *)p)[i] = v;
        break;
    case KILN_DTYPE_FLOAT16:
        ((uint16_t *)p)[i] = kn_float_to_half((float)v);
        break;
    case KILN_DTYPE_BFLOAT16:
        ((uint16_t *)p)[i] = kn_float_to_bf16((float)v);
        break;
    case KILN_DTYPE_BOOL:
        ((uint8_t *)p)[i] = v != 0;
        break;
    case KILN_DTYPE_FLOAT8E4M3FN:
    case KILN_DTYPE_FLOAT8E4M3FNUZ:
    case KILN_DTYPE_FLOAT8E5M2:
    case KILN_DTYPE_FLOAT8E5M2FNUZ:
    case KILN_DTYPE_FLOAT4E2M1:
        ((uint8_t *)p)[i] = kn_narrow_float_encode(t->dtype, (float)v, true);
        break;
    case KILN_DTYPE_FLOAT8E8M0:
        ((uint8_t *)p)[i] = kn_e8m0_encode((float)v, true, KN_E8M0_UP);
        break;
    default: /* saturated, NaN to 0: an out-of-range conversion is undefined */
        kn_tensor_set_i64(t, i,
                          v != v        ? 0
                          : v >= 0x1p63 ? INT64_MAX
                          : v < -0x1p63 ? INT64_MIN
                                        : (int64_t)v);
        break;
    }
}

void kn_tensor_set_i64(kn_tensor *t, int64_t i, int64_t v) {
    void *p = t->data;
    switch (t->dtype) {
    case KILN_DTYPE_BOOL:
        ((uint8_t *)p)[i] = v != 0;
        break;
    case KILN_DTYPE_UINT8:
        ((uint8_t *)p)[i] = (uint8_t)v;
        break;
    case KILN_DTYPE_INT8:
        ((int8_t *)p)[i] = (int8_t)v;
        break;
    case KILN_DTYPE_UINT16:
        ((uint16_t *)p)[i] = (uint16_t)v;
        break;
    case KILN_DTYPE_INT16:
        ((int16_t *)p)[i] = (int16_t)v;
        break;
    case KILN_DTYPE_INT32:
        ((int32_t *)p)[i] = (int32_t)v;
        break;
    case KILN_DTYPE_INT64:
        ((int64_t *)p)[i] = v;
        break;
    case KILN_DTYPE_UINT32:
        ((uint32_t *)p)[i] = (uint32_t)v;
        break;
    case KILN_DTYPE_UINT64:
        ((uint64_t *)p)[i] = (uint64_t)v;
        break;
    case KILN_DTYPE_UINT4:
    case KILN_DTYPE_INT4:
    case KILN_DTYPE_UINT2:
    case KILN_DTYPE_INT2:
        ((uint8_t *)p)[i] = kn_narrow_int_encode(t->dtype, v);
        break;
    case KILN_DTYPE_FLOAT32:
    case KILN_DTYPE_FLOAT64:
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16:
    case KILN_DTYPE_FLOAT8E4M3FN:
    case KILN_DTYPE_FLOAT8E4M3FNUZ:
    case KILN_DTYPE_FLOAT8E5M2:
    case KILN_DTYPE_FLOAT8E5M2FNUZ:
    case KILN_DTYPE_FLOAT4E2M1:
    case KILN_DTYPE_FLOAT8E8M0:
        kn_tensor_set_f64(t, i, (double)v);
        break;
    default:
        break;
    }
}
