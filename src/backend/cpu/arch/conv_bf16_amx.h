/* The AMX-BF16 block of the bf16 convolution (nn/conv_bf16.c), an implicit GEMM: A tiles are
 * loaded straight from bf16 activations stored pixel by pixel with their channels contiguous
 * (NHWC, or a padded phase plane built from any layout), 16 pixels a tile at a stride of one
 * pixel, one K block (32 channels of one tap) a tile row; B tiles come from the weights packed
 * as the bf16 GEMM packs its B panels (arch/gemm_bf16_amx.h): per K block 16 pair rows of 32
 * output channels, a tile being half a panel read at a stride of 128 bytes. */
#ifndef KN_CPU_ARCH_CONV_BF16_AMX_H
#define KN_CPU_ARCH_CONV_BF16_AMX_H

#include <stdbool.h>
#include <stdint.h>

/* uint32 words of one K block of a packed weight panel: 16 pair rows of 32 channels. */
#define KN_CONV_BF16_KBLOCK_WORDS (16 * 32)

/* A (16 * rt) x (16 * ct) block (rt, ct in {1, 2}) of fp32 results written to c (32 floats a
 * row) over kblocks K blocks: K block kb reads its A tile rows at a + aoff[kb] (bf16 elements),
 * pixel_bytes apart, the second A tile 16 pixels further on, and its B tiles at
 * b + kb * KN_CONV_BF16_KBLOCK_WORDS. Between kn_cpu_amx_begin and kn_cpu_amx_end. */
void kn_conv_bf16_amx_block(int rt, int ct, const uint16_t *a, int64_t pixel_bytes,
                            const int64_t *aoff, const uint32_t *b, int64_t kblocks, float *c);

/* The epilogue of a finished block on the AMX path, with AVX-512, for an output stored NHWC
 * (each row's channels contiguous): rows row[0..n) of c (32 floats a row, nr <= 32 of them
 * used) get the bias (32 floats, zero past nr) and the residual row at z + zoff[i] (bf16; none
 * when z is NULL), then are clamped to [lo, hi]; with store they are rounded to bf16 (nearest
 * even) and written to y + yoff[i], otherwise written back to c for an activation to follow.
 * Without add, the rows are only rounded and stored. */
typedef struct kn_conv_bf16_rows {
    float *c;
    int n, nr;
    const int32_t *row;
    const int64_t *yoff, *zoff;
    uint16_t *y;
    const uint16_t *z;
    const float *bias;
    float lo, hi;
    bool add, store;
} kn_conv_bf16_rows;

void kn_conv_bf16_rows_avx512(const kn_conv_bf16_rows *r);

#endif
