/* int8 GEMM: C (int32) = A (uint8) x B (int8), as AVX512-VNNI's vpdpbusd takes its operands.
 * Signed activations are shifted by +128 by the caller (x ^ 0x80); the caller removes the
 * shift, and any activation zero point, with the column sums of B kept in the packed form.
 * AMX-INT8's tdpbusd takes the same operands, so one packing serves VNNI and AMX. */
#ifndef KN_CPU_GEMM_INT8_H
#define KN_CPU_GEMM_INT8_H

#include "core/status.h"

#include <stdbool.h>
#include <stdint.h>

/* B packed for the kernel: 16-column blocks, each [kp / 4][16 columns][4 k] bytes, zero past
 * k and n, then 1 KiB of zeros (an AMX tile may read that far past the last block);
 * colsum[j] is the sum over k of column j (zero past n). */
typedef struct kn_qgemm_b {
    int64_t k, n, kp, nb; /* kp: k rounded up to 4; nb: number of 16-column blocks */
    int8_t *packed;
    int32_t *colsum;
    /* B packed once at load (a MatMul's constant weights), which the VNNI kernel then fetches
     * ahead (a conv's B, packed a call, is in cache already). */
    bool ahead;
} kn_qgemm_b;

/* Pack B[k][n], element (i, j) at b[i * sk + j * sn]. */
kiln_status kn_qgemm_pack_b(const int8_t *b, int64_t k, int64_t n, int64_t sk, int64_t sn,
                            kn_qgemm_b *out);
void kn_qgemm_b_free(kn_qgemm_b *b);

/* C[i][j] = sum over e < kp of A[i][e] * B[e][j] for i < m, j < nb * 16 (ldc >= nb * 16).
 * Each row of A holds kp readable bytes (lda >= kp); bytes past k may hold anything, as B is
 * zero there. Picks the VNNI kernel when the CPU has it. */
void kn_qgemm_u8s8(const uint8_t *a, int64_t lda, int64_t m, const kn_qgemm_b *b, int32_t *c,
                   int64_t ldc);
/* The same product in portable C (the path of CPUs without VNNI, and the tests' second
 * opinion). */
void kn_qgemm_u8s8_portable(const uint8_t *a, int64_t lda, int64_t m, const kn_qgemm_b *b,
                            int32_t *c, int64_t ldc);
/* The AVX512-VNNI kernel (arch/gemm_int8_vnni.c); only for CPUs that have it. */
void kn_qgemm_u8s8_vnni(const uint8_t *a, int64_t lda, int64_t m, const kn_qgemm_b *b, int32_t *c,
                        int64_t ldc);
/* The AMX-INT8 kernel (arch/gemm_int8_amx.c): whole 16-row blocks on tiles, the rest on VNNI;
 * only where kn_qgemm_has_amx(). */
void kn_qgemm_u8s8_amx(const uint8_t *a, int64_t lda, int64_t m, const kn_qgemm_b *b, int32_t *c,
                       int64_t ldc);
/* Whether kn_qgemm_u8s8 uses AVX512-VNNI on this CPU. */
bool kn_qgemm_has_vnni(void);
/* Whether it uses AMX-INT8 tiles for products of 16 rows or more: VNNI, AMX-INT8, tile data
 * granted, and KILN_CPU_AMX not 0 (arch/amx.h). */
bool kn_qgemm_has_amx(void);
/* One line naming the path, for the build to print. */
const char *kn_qgemm_path_name(void);

#endif
