/* bf16 GEMM for the CPU backend: C = epilogue(op(A) * op(B)) with both operands rounded to
 * bf16 (constant weights packed once, activations as they are packed), products accumulated in
 * fp32, C and the epilogue (bias, residual, activation) in fp32. Three paths chosen at run time:
 * AMX-BF16 tiles (tdpbf16ps, arch/gemm_bf16_amx.c) where the CPU and the kernel allow them,
 * AVX512-BF16 (vdpbf16ps, which multiplies pairs along K), and a portable one (bf16 widened to
 * fp32, fp32 multiply-add) for CPUs without either, so one binary and one plan serve all.
 * KILN_CPU_AMX=0 turns AMX off, KILN_BF16_PORTABLE=1 forces the portable path (tests compare
 * them). Weights packed while AMX is on are laid out for it and keep taking it.
 *
 * Both operands are held as pairs along K: A in strips of KN_BF16_MR rows (per pair of K, the
 * strip's rows side by side), B in panels of KN_BF16_NR columns (per pair of K, the panel's
 * columns side by side), K padded to the pair with zeros; for AMX, A in strips of 16 rows made
 * of 16 x 16-pair tiles and K padded to 16 pairs (see arch/gemm_bf16_amx.h). */
#ifndef KN_CPU_GEMM_BF16_H
#define KN_CPU_GEMM_BF16_H

#include "backend/cpu/math/gemm.h"

#include <stdbool.h>
#include <stdint.h>

#define KN_BF16_MR 8
#define KN_BF16_NR 32

/* An operand packed once (constant weights). Immutable afterwards; shareable by threads. */
typedef struct kn_bf16_packed kn_bf16_packed;

/* Pack op(A) (m x k) or op(B) (k x n) from float32 or bfloat16 data (dtype KILN_DTYPE_*);
 * trans means the stored matrix is the transpose. */
kiln_status kn_bf16_pack_a(const void *a, int32_t dtype, int64_t lda, bool trans, int64_t m,
                           int64_t k, kn_bf16_packed **out);
kiln_status kn_bf16_pack_b(const void *b, int32_t dtype, int64_t ldb, bool trans, int64_t k,
                           int64_t n, kn_bf16_packed **out);
void kn_bf16_packed_free(kn_bf16_packed *p);
/* Bytes the packed data holds (for the build's report). */
size_t kn_bf16_packed_bytes(const kn_bf16_packed *p);

/* Writes one B panel's rows [k0, k0 + kc) (k0 even) as pairs along K: word j of pair row q
 * holds op(B)'s rows k0 + 2q (low half) and k0 + 2q + 1 (high half, zero past kc) of column
 * n0 + j as bf16 rounded to nearest even, zero past nc (<= KN_BF16_NR). */
typedef void (*kn_bf16_pack_pairs_fn)(void *arg, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
                                      uint32_t *dst);

/* One of: a float32 matrix (p, ld, trans), a pre-packed operand, or (B only) a routine that
 * writes float32 panels KN_BF16_NR wide (kn_gemm_pack_fn's contract with nr = KN_BF16_NR), or
 * one that writes the pairs themselves (pack_pairs, taken first). */
typedef struct kn_bf16_operand {
    const float *p;
    int64_t ld;
    bool trans;
    const kn_bf16_packed *packed;
    kn_gemm_pack_fn pack;
    kn_bf16_pack_pairs_fn pack_pairs;
    void *pack_arg;
} kn_bf16_operand;

/* C (m x n, leading dimension ldc) = epilogue(op(A) * op(B)); C is only written. ep may be
 * NULL, pool may be NULL. Fails only on out-of-memory. */
kiln_status kn_gemm_bf16(kn_threadpool *pool, int64_t m, int64_t n, int64_t k,
                         const kn_bf16_operand *a, const kn_bf16_operand *b, float *c, int64_t ldc,
                         const kn_epilogue *ep);

/* true when the AVX512-BF16 path runs (the CPU has it and KILN_BF16_PORTABLE is not set). */
bool kn_bf16_native(void);
/* true when products take AMX tiles: kn_bf16_native(), the CPU has AMX-BF16, the kernel grants
 * tile data, and KILN_CPU_AMX is not 0. */
bool kn_bf16_amx(void);
/* One line naming the path, for the build to print. */
const char *kn_bf16_path_name(void);

#endif
