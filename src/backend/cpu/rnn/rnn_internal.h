/* Helpers shared by the RNN kernels (private to the CPU backend). */
#ifndef KN_CPU_RNN_INTERNAL_H
#define KN_CPU_RNN_INTERNAL_H

#include "core/status.h"
#include "core/threadpool.h"

#include <stdint.h>

/* c[m][n] = sum_k a[m][k] * b[n][k]: a is [m, k] and b is [n, k], both row-major and dense;
 * c is overwritten. The one place the RNN and einsum kernels multiply matrices. Fails only on
 * out-of-memory. */
kiln_status cpu_rnn_matmul_nt(kn_threadpool *pool, const float *a, const float *b, float *c,
                              int64_t m, int64_t n, int64_t k);

#endif
