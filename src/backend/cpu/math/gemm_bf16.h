/* bf16 GEMM for the CPU backend: C = A * B with A in fp32 (rounded to bf16 as it is read), B
 * packed once as bf16, products accumulated in fp32. Two paths chosen at run time: AVX512-BF16
 * (vdpbf16ps, which multiplies pairs along K) and a portable one (convert, then fp32 multiply-add)
 * for CPUs without it, so one binary and one plan serve both. KILN_BF16_PORTABLE=1 forces the
 * portable path (tests compare the two). */
#ifndef KN_CPU_GEMM_BF16_H
#define KN_CPU_GEMM_BF16_H

#include <stdbool.h>
#include <stdint.h>

/* B (K x N, row-major, leading dimension ldb) packed in panels of 16 columns; within a panel,
 * for each pair of rows of K, the 16 columns' (k, k+1) values side by side. K and N are padded
 * with zeros to the pair and the panel. */
typedef struct kn_bf16_packed_b {
    int64_t k, n, kpairs, panels;
    uint16_t *data; /* panels * kpairs * 32 values */
} kn_bf16_packed_b;

/* false when memory runs out. */
bool kn_bf16_pack_b(kn_bf16_packed_b *pb, const float *b, int64_t ldb, int64_t k, int64_t n);
void kn_bf16_packed_b_free(kn_bf16_packed_b *pb);

/* C (M x N, leading dimension ldc) = A (M x K, leading dimension lda) * B. false when memory
 * runs out. */
bool kn_gemm_bf16(int64_t m, const float *a, int64_t lda, const kn_bf16_packed_b *pb, float *c,
                  int64_t ldc);

/* true when the AVX512-BF16 path runs (the CPU has it and KILN_BF16_PORTABLE is not set). */
bool kn_bf16_native(void);
/* One line naming the path, for the build to print. */
const char *kn_bf16_path_name(void);

#endif
