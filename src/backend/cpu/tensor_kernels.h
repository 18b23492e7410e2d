/* CPU kernels of the tensor family and the data-movement primitives they share. Every
 * primitive works by element size (1, 2, 4 or 8 bytes), so one kernel serves every dtype. */
#ifndef KN_CPU_TENSOR_KERNELS_H
#define KN_CPU_TENSOR_KERNELS_H

#include "backend/cpu/cpu.h"
#include "ops/tensor_ops.h"

/* ---- primitives (tensor_copy.c) ------------------------------------------------------------- */

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

/* tensor_move.c */
kiln_status cpu_tensor_run_copy(kn_kernel_ctx *k);
kiln_status cpu_tensor_run_transpose(kn_kernel_ctx *k);
kiln_status cpu_tensor_run_concat(kn_kernel_ctx *k);
kiln_status cpu_tensor_run_split(kn_kernel_ctx *k);
kiln_status cpu_tensor_run_slice(kn_kernel_ctx *k);
kiln_status cpu_tensor_run_expand(kn_kernel_ctx *k);
kiln_status cpu_tensor_run_tile(kn_kernel_ctx *k);
kiln_status cpu_tensor_run_depth_to_space(kn_kernel_ctx *k);
kiln_status cpu_tensor_run_space_to_depth(kn_kernel_ctx *k);

/* tensor_pad.c */
kiln_status cpu_tensor_run_pad(kn_kernel_ctx *k);
kiln_status cpu_tensor_run_center_crop_pad(kn_kernel_ctx *k);

/* tensor_index.c */
kiln_status cpu_tensor_run_gather(kn_kernel_ctx *k);
kiln_status cpu_tensor_run_gather_elements(kn_kernel_ctx *k);
kiln_status cpu_tensor_run_gather_nd(kn_kernel_ctx *k);
kiln_status cpu_tensor_run_scatter_elements(kn_kernel_ctx *k);
kiln_status cpu_tensor_run_scatter_nd(kn_kernel_ctx *k);
kiln_status cpu_tensor_run_tensor_scatter(kn_kernel_ctx *k);

/* tensor_gen.c */
kiln_status cpu_tensor_run_shape(kn_kernel_ctx *k);
kiln_status cpu_tensor_run_size(kn_kernel_ctx *k);
kiln_status cpu_tensor_run_dropout(kn_kernel_ctx *k);
kiln_status cpu_tensor_run_constant_of_shape(kn_kernel_ctx *k);
kiln_status cpu_tensor_run_range(kn_kernel_ctx *k);
kiln_status cpu_tensor_run_eye_like(kn_kernel_ctx *k);
kiln_status cpu_tensor_run_trilu(kn_kernel_ctx *k);
kiln_status cpu_tensor_run_cumsum(kn_kernel_ctx *k);
kiln_status cpu_tensor_run_one_hot(kn_kernel_ctx *k);

/* tensor_select.c */
kiln_status cpu_tensor_run_non_zero(kn_kernel_ctx *k);
kiln_status cpu_tensor_run_compress(kn_kernel_ctx *k);
kiln_status cpu_tensor_run_unique(kn_kernel_ctx *k);
kiln_status cpu_tensor_run_reverse_sequence(kn_kernel_ctx *k);

#endif
