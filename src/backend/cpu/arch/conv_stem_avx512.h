/* The AVX-512 block of the direct convolution for few input channels (nn/conv_stem.c): up to 64
 * output pixels of one output row (four vectors) x up to 6 output channels in 24 registers, over
 * every tap of every input channel: each tap loads the pixels' input values as vectors from a
 * padded or phase-split plane (a constant offset per tap) and multiplies them by each channel's
 * broadcast weight. Bias, residual and activation are applied in registers and the rows stored
 * straight into the NCHW output. */
#ifndef KN_CPU_ARCH_CONV_STEM_AVX512_H
#define KN_CPU_ARCH_CONV_STEM_AVX512_H

#include <stdint.h>

#define KN_CONV_STEM_PIXELS 64 /* output pixels a block */
#define KN_CONV_STEM_COUT 6    /* output channels a block */

typedef struct kn_conv_stem_block {
    const float *x;     /* the block's first pixel in the planes; tap t at x[off[t] + p] */
    const int64_t *off; /* per tap (input channel, kernel row, kernel column) */
    int64_t taps;
    const float *w;    /* weights of the block's first channel: taps floats a channel */
    int pixels;        /* 1 .. KN_CONV_STEM_PIXELS */
    int cout;          /* 1 .. KN_CONV_STEM_COUT */
    const float *bias; /* of the first channel, or NULL */
    const float *res;  /* residual of channel j, pixel p at res[j * ld + p], or NULL */
    float *y;          /* output of channel j, pixel p at y[j * ld + p] */
    int64_t ld;
    int act;      /* kn_act: RELU, CLIP (to [lo, hi]), SIGMOID, SWISH in registers; */
    float lo, hi; /* any other is the caller's, on the stored rows */
} kn_conv_stem_block;

/* Only where the GEMM runs its AVX-512 kernel (kn_gemm_isa()). */
void kn_cpu_conv_stem_block_avx512(const kn_conv_stem_block *b);

/* Stride 2 read in place: one output row x up to 16 output channels (a block of 8 where 8 or
 * fewer are stored), 16 pixels at a time in as many registers, straight from the NCHW input, no
 * planes. For each input row a kernel row reaches and each pair of kernel columns, two masked
 * loads of 32 consecutive floats are split by permutes into their even and odd columns: the
 * pixels' inputs under kernel columns 2p and 2p + 1, each then multiplied by every channel's
 * weight, broadcast. The masks zero what lies outside the row (the padding); kernel rows outside
 * the image are skipped. The weights come packed a tap at a time (16 floats a tap, one per
 * channel of the block, zeros past the last), so each broadcast is from a fixed offset.
 * Epilogue as kn_cpu_conv_stem_block_avx512's. */
#define KN_CONV_STEM_S2_COUT 16 /* output channels a block, and floats a tap of packed weights */
#define KN_CONV_STEM_S2_MAX_K 7 /* widest kernel row */

typedef struct kn_conv_stem_s2_block {
    const float *x; /* the image's input: cin planes of h x w */
    int64_t h, w, cin, kh, kw;
    int64_t iy;        /* input row under kernel row 0: 2 * oy - pad top */
    int64_t ix;        /* input column under pixel 0's kernel column 0: minus the left pad */
    const float *wt;   /* the block's packed weights: tap t (input channel, kernel row, kernel
                        * column) of channel j at wt[t * KN_CONV_STEM_S2_COUT + j] */
    int pixels;        /* the output row's width */
    int cout;          /* 1 .. KN_CONV_STEM_S2_COUT */
    const float *bias; /* of the first channel, or NULL */
    const float *res;  /* residual of channel j, pixel p at res[j * ld + p], or NULL */
    float *y;          /* output of channel j, pixel p at y[j * ld + p] */
    int64_t ld;
    int act;
    float lo, hi;
} kn_conv_stem_s2_block;

void kn_cpu_conv_stem_s2_row_avx512(const kn_conv_stem_s2_block *b);

#endif
