/* The AVX-512 tile of the fp32 pixel-row convolution (nn/conv_pixels.c): up to 14 output pixels
 * (rows, one broadcast each) x 32 output channels (two vectors) over the whole of K. K runs over
 * blocks of `block` input channels (1, or 16), in each over the taps, in each over the block's
 * channels. A pixel's values are read where they lie: tile row r, channel l of block cb, tap t is
 * a[cb * bs + off[t] + l + r * block] (block 1: a plane of one channel, padded or split into
 * phase planes, consecutive output pixels consecutive floats; block 16: the same planes holding
 * each pixel's 16 channels together, one cache line). The weights come packed as 32 floats (one
 * per output channel of the panel) per K step, in K's order. The result is written to an NCHW
 * output: the tile's 32 x rows block is transposed in registers and each channel's rows stored
 * as one run. */
#ifndef KN_CPU_ARCH_CONV_PIXELS_AVX512_H
#define KN_CPU_ARCH_CONV_PIXELS_AVX512_H

#include <stdint.h>

#define KN_CONV_PIXELS_ROWS 14 /* most output pixels a tile holds */
#define KN_CONV_PIXELS_COLS 32 /* output channels of a weight panel */

typedef struct kn_conv_pixels_tile {
    const float *a;     /* the tile's first pixel; see above */
    const int64_t *off; /* per tap */
    int64_t taps, blocks, bs;
    int block;           /* channels a block: 1 or 16 */
    const float *b;      /* the panel: blocks * taps * block rows of 32 floats */
    const float *sum_in; /* partial sums of earlier K blocks to start from (32 a row), or NULL */
    float *sum_out;      /* where to leave the sums, no epilogue (more K blocks follow), or NULL */
    int rows;            /* 1 .. KN_CONV_PIXELS_ROWS */
    uint16_t valid;      /* the rows that are output pixels (not a plane's padding), stored one
                          * after another */
    int nr;              /* output channels of the panel that exist, 1 .. 32 */
    const float *bias;   /* 32 floats (zero past nr), or NULL */
    const float *res;    /* residual of channel j, valid row i at res[j * ld + i], or NULL */
    float *y;            /* output of channel j, valid row i at y[j * ld + i] */
    int64_t ld;          /* floats between channels (the output's plane) */
    int act;             /* kn_act: RELU and CLIP (to [lo, hi]), SIGMOID, SWISH in registers; */
    float lo, hi;        /* any other is the caller's, on the stored rows */
} kn_conv_pixels_tile;

/* Only where the GEMM runs its AVX-512 kernel (kn_gemm_isa()). */
void kn_cpu_conv_pixels_tile_avx512(const kn_conv_pixels_tile *t);
/* dst[p * 16 + l] = src[l * stride + p] for p < len and l < n (<= 16), zero for l >= n: n
 * planes of len floats into one plane of pixels of 16 channels (64-byte aligned dst). */
void kn_cpu_conv_pixels_interleave_avx512(const float *src, int64_t stride, int n, int64_t len,
                                          float *dst);

#endif
