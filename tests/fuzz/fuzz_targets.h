/* Fuzz entry points: each takes one input's bytes and returns 0 when kiln handled it cleanly,
 * -1 when it broke a promise short of crashing (see fuzz_targets.c). */
#ifndef KN_FUZZ_TARGETS_H
#define KN_FUZZ_TARGETS_H

#include <stddef.h>
#include <stdint.h>

/* Install the capped allocator and a silent logger; call once before any target. */
void kn_fuzz_setup(void);

/* ONNX bytes -> network -> plan in memory -> engine -> two executions: inputs all zero, then
 * inputs of extreme values (NaN, infinities, huge and negative numbers). */
int kn_fuzz_onnx(const uint8_t *data, size_t size);
/* Plan bytes -> engine -> the same two executions; again with the checksums recomputed. */
int kn_fuzz_plan(const uint8_t *data, size_t size);
/* .npy bytes -> tensor -> .npy bytes -> the same tensor. */
int kn_fuzz_npy(const uint8_t *data, size_t size);
/* TensorProto bytes -> tensor. */
int kn_fuzz_tensor_proto(const uint8_t *data, size_t size);

#endif
