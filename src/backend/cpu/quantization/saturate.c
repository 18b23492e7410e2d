/* Saturating stores into integer tensors. */
#include "backend/cpu/quantization/saturate.h"

#include <math.h>

void kn_cpu_store_saturated(kn_tensor *t, int64_t i, double v) {
    double lo, hi;
    switch (t->dtype) {
    case KILN_DTYPE_UINT4:
        lo = 0, hi = 15;
        break;
    case KILN_DTYPE_INT4:
        lo = -8, hi = 7;
        break;
    case KILN_DTYPE_UINT2:
        lo = 0, hi = 3;
        break;
    case KILN_DTYPE_INT2:
        lo = -2, hi = 1;
        break;
    case KILN_DTYPE_UINT8:
        lo = 0, hi = 255;
        break;
    case KILN_DTYPE_INT8:
        lo = -128, hi = 127;
        break;
    case KILN_DTYPE_UINT16:
        lo = 0, hi = 65535;
        break;
    case KILN_DTYPE_INT16:
        lo = -32768, hi = 32767;
        break;
    case KILN_DTYPE_INT32:
        lo = -2147483648.0, hi = 2147483647.0;
        break;
    case KILN_DTYPE_UINT32:
        lo = 0, hi = 4294967295.0;
        break;
    default:
        lo = -9223372036854775808.0, hi = 9223372036854774784.0;
        break;
    }
    v = nearbyint(v);
    v = !(v >= lo) ? lo : (v > hi ? hi : v);
    if (t->dtype == KILN_DTYPE_UINT64)
        ((uint64_t *)t->data)[i] = (uint64_t)v;
    else
        kn_tensor_set_i64(t, i, (int64_t)v);
}
