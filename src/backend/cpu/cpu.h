/* CPU backend internals: the kernel functions of kernel_list.h. */
#ifndef KN_CPU_H
#define KN_CPU_H

#include "backend/backend.h"

#define KN_CPU_KERNEL(domain, name, run) kiln_status run(kn_kernel_ctx *k);
#define KN_CPU_KERNEL_STATE(domain, name, run, prepare, release)                                   \
    kiln_status run(kn_kernel_ctx *k);                                                             \
    kiln_status prepare(const kn_node *node, int n_in, const kn_tensor *in, void **state);         \
    void release(void *state);
#include "backend/cpu/kernel_list.h"
#undef KN_CPU_KERNEL
#undef KN_CPU_KERNEL_STATE

/* The numeric Equal and Cast kernels, which kn_cpu_equal and kn_cpu_cast call when no string is
 * involved. */
kiln_status ew_k_equal(kn_kernel_ctx *k);
kiln_status ew_k_cast(kn_kernel_ctx *k);

/* The CPU backend object (registered in the backend registry as "cpu"). */
kn_backend *kn_cpu_backend(void);

#endif
