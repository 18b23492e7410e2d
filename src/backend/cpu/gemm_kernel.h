/* Private to the GEMM files: the micro-kernel contract shared by the per-ISA implementations. */
#ifndef KN_CPU_GEMM_KERNEL_H
#define KN_CPU_GEMM_KERNEL_H

#include <stdint.h>

/* c (mr x nr of an MR x NR tile, leading dimension ldc) = alpha * A*B + beta * c, where a holds
 * kc columns of MR rows (a[k*MR + i]) and b holds kc rows of NR columns (b[k*NR + j]), both
 * zero-padded to full MR/NR. beta == 0 never reads c. */
typedef void (*kn_gemm_ukr_fn)(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                               float alpha, float beta, int mr, int nr);

typedef struct kn_gemm_ukr {
    const char *name;
    int mr, nr;
    kn_gemm_ukr_fn fn;
} kn_gemm_ukr;

extern const kn_gemm_ukr kn_gemm_ukr_avx512;
extern const kn_gemm_ukr kn_gemm_ukr_avx2;
extern const kn_gemm_ukr kn_gemm_ukr_scalar;

#endif
