/* Kernels of the misc family, defined across several files; the table is in misc.c. */
#ifndef KN_CPU_MISC_INTERNAL_H
#define KN_CPU_MISC_INTERNAL_H

#include "backend/cpu/cpu.h"

kiln_status cpu_misc_resize(kn_kernel_ctx *k);
kiln_status cpu_misc_einsum(kn_kernel_ctx *k);
kiln_status cpu_misc_nms(kn_kernel_ctx *k);
kiln_status cpu_misc_roi_align(kn_kernel_ctx *k);
kiln_status cpu_misc_grid_sample(kn_kernel_ctx *k);
kiln_status cpu_misc_quantize(kn_kernel_ctx *k);
kiln_status cpu_misc_dequantize(kn_kernel_ctx *k);
kiln_status cpu_misc_dynamic_quantize(kn_kernel_ctx *k);
kiln_status cpu_misc_matmul_integer(kn_kernel_ctx *k);
kiln_status cpu_misc_det(kn_kernel_ctx *k);
kiln_status cpu_misc_col2im(kn_kernel_ctx *k);

/* Writes v to element i of an integer tensor, rounding half to even and saturating. */
void cpu_misc_store_int(kn_tensor *t, int64_t i, double v);

#endif
