/* The 8-bit float (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz), 4-bit (uint4, int4, float4e2m1) and
 * 2-bit (uint2, int2) element types. kiln stores each element in one byte, the 4- and 2-bit
 * types in the low bits (as numpy's ml_dtypes does), so every kernel that moves bytes handles
 * them unchanged; only ONNX TensorProto data packs two 4-bit or four 2-bit values per byte, and
 * the importer unpacks it. */
#ifndef KN_NARROW_DTYPE_H
#define KN_NARROW_DTYPE_H

#include <stdbool.h>
#include <stdint.h>

bool kn_dtype_is_float8(int32_t dtype); /* the four with a sign and a mantissa */
bool kn_dtype_is_4bit(int32_t dtype);   /* uint4, int4, float4e2m1 */
/* 4 for the 4-bit types, 2 for uint2 and int2: ONNX packs 8 / bits values a byte, low bits
 * first; 0 for every other type. */
int kn_dtype_packed_bits(int32_t dtype);
bool kn_dtype_is_narrow_int(int32_t dtype); /* uint4, int4, uint2, int2 */
/* float8 (e8m0 too), 4- or 2-bit: the types with a one-byte code per element and no arithmetic of
 * their own. */
bool kn_dtype_is_narrow(int32_t dtype);

/* A float8 or float4e2m1 code as a float (NaN and infinity where the format has them). */
float kn_narrow_float_decode(int32_t dtype, uint8_t code);
/* Round to nearest even into a float8 or float4e2m1 code. saturate clamps out-of-range values
 * and infinities to the largest finite value; without it they become infinity (e5m2) or NaN
 * (the formats without infinity). float4e2m1 has neither and always saturates. */
uint8_t kn_narrow_float_encode(int32_t dtype, float v, bool saturate);

/* float8e8m0 (exponent only, no sign, no zero) and its rounding modes (Cast's round_mode). */
enum { KN_E8M0_UP, KN_E8M0_DOWN, KN_E8M0_NEAREST };
float kn_e8m0_decode(uint8_t code);
uint8_t kn_e8m0_encode(float v, bool saturate, int round_mode);

/* 4- or 2-bit integer code <-> value; encoding keeps the low bits (wraps, as numpy does). */
int64_t kn_narrow_int_decode(int32_t dtype, uint8_t code);
uint8_t kn_narrow_int_encode(int32_t dtype, int64_t v);

#endif
