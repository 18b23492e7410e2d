/* The AMX-BF16 kernel of the bf16 GEMM (arch/gemm_bf16_amx.c), as the driver in
 * math/gemm_bf16.c calls it. Tiles are 16 rows of 64 bytes: an A tile is 16 rows x 16 pairs of
 * K, a B tile 16 pairs of K x 16 columns, a C tile 16 x 16 fp32.
 *
 * Layouts: A in strips of KN_BF16_AMX_MR rows, each strip a run of 16 x 16-pair tiles (row
 * major, 64 bytes a row, 1 KiB a tile) along K; B in the panels of KN_BF16_NR columns the other
 * kernels read (per pair of K, the panel's 32 columns side by side), so a B tile is half a panel
 * read at a stride of 128 bytes. K is padded with zero pairs to a multiple of KN_BF16_KT. */
#ifndef KN_CPU_ARCH_GEMM_BF16_AMX_H
#define KN_CPU_ARCH_GEMM_BF16_AMX_H

#include <stdbool.h>
#include <stdint.h>

#define KN_BF16_AMX_MR 16
#define KN_BF16_KT 16 /* pairs of K in one A tile row, and rows of a B tile */

/* The part of the epilogue applied to a finished block with AVX-512: bias, residual, a clamp
 * (Relu, Clip); other activations run over the block afterwards. */
typedef struct kn_bf16_tile_ep {
    const float *bias_row; /* one per block row, or NULL */
    const float *bias_col; /* one per block column, or NULL */
    const float *res;      /* the block's residual, or NULL */
    int64_t ldr;
    bool clamp;
    float lo, hi;
} kn_bf16_tile_ep;

/* A (16 * rt) x (16 * ct) block of C (rt, ct in {1, 2}) over kblocks blocks of KN_BF16_KT pairs:
 * a0, a1 at the first tiles of two A strips (a1 unused when rt is 1), b at the panel's first
 * pair row of the first block. c (leading dimension ldc floats) is written, or added to when
 * accumulate. Between kn_cpu_amx_begin and kn_cpu_amx_end (arch/amx.h). */
void kn_bf16_amx_block(int rt, int ct, const uint32_t *a0, const uint32_t *a1, const uint32_t *b,
                       int64_t kblocks, float *c, int64_t ldc, bool accumulate);

/* te on rows x nr floats of C (nr <= 32), in place. */
void kn_bf16_amx_epilogue(float *c, int64_t ldc, int rows, int nr, const kn_bf16_tile_ep *te);

#endif
