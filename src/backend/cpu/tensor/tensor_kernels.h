/* CPU tensor kernels and the data-movement primitives they share. Every
 * primitive works by element size (1, 2, 4 or 8 bytes), so one kernel serves every dtype. */
#ifndef KN_CPU_TENSOR_KERNELS_H
#define KN_CPU_TENSOR_KERNELS_H

#include "backend/cpu/cpu.h"
#include "ops/tensor/tensor_ops.h"

/* ---- primitives (tensor/copy.c) ------------------------------------------------------------- */

/* memcpy, split across the pool when large. */
void cpu_tensor_copy(kn_threadpool *pool, void *dst, const void *src, size_t bytes);
/* Write n copies of the es-byte value at val. */
void cpu_tensor_fill(void *dst, const void *val, size_t es, int64_t n);
/* dst (contiguous, shape dims) gets src[base + sum(i_d * sstr[d])]; strides are in elements
 * and may be 0 (broadcast) or negative (reversed). */
void cpu_tensor_strided_copy(kn_threadpool *pool, void *dst, const void *src, size_t es, int rank,
                             const int64_t *dims, const int64_t *sstr, int64_t base);
/* dst = src (contiguous, in_dims) transposed by perm (out dim i = in dim perm[i]). */
void cpu_tensor_permute(kn_threadpool *pool, void *dst, const void *src, size_t es, int rank,
                        const int64_t *in_dims, const int64_t *perm);
/* dst op= src for one element of dtype; red as tensor_scatter_reduction (0 assigns). */
void cpu_tensor_reduce_elem(int32_t dtype, int red, void *dst, const void *src);

/* ---- kernels -------------------------------------------------------------------------------- */

/* Cast between float32 and bfloat16 of rank 4 whose sides are ordered as the node's kiln_nhwc
 * masks say (tensor/cast_layout.c); kn_cpu_cast calls it for a node with the attribute. */
kiln_status kn_cpu_cast_layout(kn_kernel_ctx *k);

#endif
