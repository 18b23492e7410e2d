/* Concrete tensors and shapes used by shape inference, kernels and the runtime. */
#ifndef KN_TENSOR_H
#define KN_TENSOR_H

#include "kiln/kiln.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define KN_MAX_RANK KILN_MAX_RANK
/* Largest element count kiln accepts for one tensor: keeps every byte size far from
 * overflowing and turns absurd dims into an error instead of an allocation attempt. */
#define KN_MAX_ELEMENTS ((int64_t)1 << 40)

typedef struct kn_shape {
    int32_t rank;
    int64_t d[KN_MAX_RANK];
} kn_shape;

/* A tensor: dtype, concrete shape and (possibly NULL) data. Data is row-major, contiguous.
 * `data` is not owned by the struct: whoever fills it states who frees it. */
typedef struct kn_tensor {
    int32_t dtype; /* kiln_dtype */
    kn_shape shape;
    void *data;
} kn_tensor;

int64_t kn_shape_numel(const kn_shape *s); /* 1 for rank 0 */
bool kn_shape_equal(const kn_shape *a, const kn_shape *b);
/* Checks every dim is >= 0 and the product of the non-zero dims is <= KN_MAX_ELEMENTS. */
bool kn_shape_valid(const kn_shape *s);
/* Writes "2x3x4" (or "scalar") into buf; returns buf. */
const char *kn_shape_str(const kn_shape *s, char *buf, size_t size);
/* Numpy-style broadcast of a and b into out; false if incompatible. */
bool kn_shape_broadcast(const kn_shape *a, const kn_shape *b, kn_shape *out);
/* Row-major strides in elements. */
void kn_shape_strides(const kn_shape *s, int64_t *strides);

static inline int64_t kn_tensor_numel(const kn_tensor *t) {
    return kn_shape_numel(&t->shape);
}
size_t kn_tensor_nbytes(const kn_tensor *t);

size_t
kn_dtype_size(int32_t dtype); /* 0 for unknown; 1 for the byte blocks (strings, containers) */
const char *kn_dtype_name(int32_t dtype);
bool kn_dtype_is_float(int32_t dtype);   /* float16, bfloat16, float32, float64 */
bool kn_dtype_is_integer(int32_t dtype); /* signed or unsigned ints (not bool) */

float kn_half_to_float(uint16_t h);
uint16_t kn_float_to_half(float f); /* round to nearest even */
float kn_bf16_to_float(uint16_t h);
uint16_t kn_float_to_bf16(float f);
/* The same two inline, for kernels whose loops should vectorize: bf16 widened exactly, and
 * float32 rounded to nearest even, a NaN kept quiet. */
static inline float kn_bf16_widen(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}
static inline uint16_t kn_bf16_round(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* Read element i of any numeric/bool tensor as double / int64, and write one. */
double kn_tensor_get_f64(const kn_tensor *t, int64_t i);
int64_t kn_tensor_get_i64(const kn_tensor *t, int64_t i);
void kn_tensor_set_f64(kn_tensor *t, int64_t i, double v);
void kn_tensor_set_i64(kn_tensor *t, int64_t i, int64_t v);

#endif
