/* Launchers of the CUDA kernels (kernels_*.cu), callable from the module's C code. Every
 * launcher enqueues on stream s and returns a cudaError_t as int (0: launched). Shapes come
 * as plain structs so the .cu files need none of kiln's headers.
 *
 * Float kernels take the kiln dtype `dt` of their float tensors: float32, float16 or
 * bfloat16 (every float tensor of one call in that type); they compute in float32 whatever
 * they read and write. */
#ifndef KN_CUDA_KERNELS_H
#define KN_CUDA_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KC_MAX_RANK 8
#define KC_MAX_EW_IN 16
#define KC_MAX_PROGRAM 96 /* fused instructions */
#define KC_MAX_CONSTS 64

/* An output of `rank` dims and up to KC_MAX_EW_IN inputs broadcast to it: strides[k][d] is
 * input k's element stride along output dim d (0 where it broadcasts). */
typedef struct kc_bcast {
    int32_t rank;
    int32_t n_in;
    int64_t numel;
    int64_t dims[KC_MAX_RANK];
    int64_t strides[KC_MAX_EW_IN][KC_MAX_RANK];
} kc_bcast;

/* Element-wise float ops use kiln's kn_ew_unary / kn_ew_binary numbering
 * (ops/fused_elementwise.h); comparisons and Where are separate. */
enum { KC_CMP_EQ = 0, KC_CMP_LT, KC_CMP_LE, KC_CMP_GT, KC_CMP_GE };

int kc_unary(void *s, int dt, int op, float pa, float pb, const void *x, void *y, int64_t n);
/* y = a op b over bc (bc.n_in = 2); comparisons write bool results */
int kc_binary(void *s, int dt, int op, const kc_bcast *bc, const void *a, const void *b, void *y);
int kc_compare(void *s, int dt, int op, const kc_bcast *bc, const void *a, const void *b,
               uint8_t *y);
/* Where(cond, a, b) with elem_size-byte elements. */
int kc_where(void *s, const kc_bcast *bc, const uint8_t *c, const void *a, const void *b, void *y,
             int elem_size);
/* The fused program (see ops/fused_elementwise.h) over bc, one thread per element. */
typedef struct kc_program {
    int32_t n_instr;
    int32_t instr[KC_MAX_PROGRAM][5];
    float consts[KC_MAX_CONSTS];
} kc_program;
int kc_fused(void *s, int dt, const kc_program *p, const kc_bcast *bc, const void *const *in,
             void *y);
/* dtype numbering is kiln_dtype's. */
int kc_cast(void *s, int from, int to, const void *x, void *y, int64_t n);

/* Gather of elem_size-byte elements through a general strided view: y[i] = x[off(i)] where
 * off is decomposed over dims with the given source strides (elements) plus base. */
int kc_strided_copy(void *s, int rank, const int64_t *dims, const int64_t *src_strides,
                    int64_t src_base, const void *x, void *y, int elem_size);
/* Concat helper: copy x (outer x inner_x elements) into y rows of inner_y at column offset. */
int kc_copy_rows(void *s, const void *x, void *y, int64_t outer, int64_t inner_x, int64_t inner_y,
                 int64_t offset, int elem_size);
/* Split of x, outer rows of sum(widths) elements, into n <= 4 outputs y[p] of outer rows of
 * widths[p] elements each, in one launch. */
int kc_split(void *s, const void *x, int n, void *const *y, const int64_t *widths, int64_t outer,
             int elem_size);
/* Gather along an axis: x is [outer, axis_n, inner], idx has n_idx int64 (or int32) values.
 * An index out of range reads row 0 and sets *bad to 1 (bad may be NULL). */
int kc_gather(void *s, const void *x, const void *idx, int idx64, void *y, int64_t outer,
              int64_t axis_n, int64_t n_idx, int64_t inner, int elem_size, unsigned *bad);

/* Attention: o = softmax(q k^T * scale + mask) v for each batch b and head h, q [sq, d],
 * k [sk, d], v [sk, dv], o [sq, dv] per (b, h), their last dim contiguous; strides in
 * elements for batch, head and row. mask (may be NULL) is added to the scaled scores, its
 * strides for batch, head, query and key (0 where it broadcasts). */
typedef struct kc_attention {
    int64_t batch, heads, sq, sk, d, dv;
    int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3];
    int64_t m_stride[4];
    float scale;
} kc_attention;
int kc_attention_run(void *s, int dt, const kc_attention *a, const void *q, const void *k,
                     const void *v, const void *mask, void *o);

/* Softmax / LogSoftmax over rows of length n. */
int kc_softmax(void *s, int dt, const void *x, void *y, int64_t rows, int64_t n, int log);
/* LayerNormalization over rows of n; scale/bias of n (bias may be NULL). */
int kc_layernorm(void *s, int dt, const void *x, const void *scale, const void *bias, void *y,
                 int64_t rows, int64_t n, float eps);
/* Reduce the middle dim of [outer, n, inner]. op: KC_RED_*. */
enum {
    KC_RED_SUM = 0,
    KC_RED_MEAN,
    KC_RED_MAX,
    KC_RED_MIN,
    KC_RED_PROD,
    KC_RED_SUMSQ,
    KC_RED_L1,
    KC_RED_L2,
    KC_RED_LOGSUMEXP,
    KC_RED_LOGSUM
};
int kc_reduce(void *s, int dt, int op, const void *x, void *y, int64_t outer, int64_t n,
              int64_t inner);

/* 2-D pooling over NCHW (NHWC when nhwc is set); kind 0 max, 1 average. count_include_pad
 * for average. */
typedef struct kc_pool2d {
    int64_t n, c, h, w, oh, ow;
    int32_t kh, kw, sh, sw, ph, pw, dh, dw;
    int32_t kind, count_include_pad;
    int32_t nhwc;
} kc_pool2d;
int kc_pool2d_run(void *s, int dt, const kc_pool2d *p, const void *x, void *y);

/* Epilogue over an NCHW-like [n, c, inner] tensor or a [rows, c] matrix:
 * y = act(y + bias[c] + residual), act per KC_ACT_*. bias, residual may be NULL. */
enum {
    KC_ACT_NONE = 0,
    KC_ACT_RELU,
    KC_ACT_CLIP,
    KC_ACT_SIGMOID,
    KC_ACT_SWISH,
    KC_ACT_LEAKY,
    KC_ACT_HARD_SIGMOID,
    KC_ACT_HARD_SWISH,
    KC_ACT_GELU,
    KC_ACT_GELU_TANH,
    KC_ACT_MISH,
    KC_ACT_TANH
};
int kc_epilogue(void *s, int dt, void *y, const void *bias, const void *residual, int64_t outer,
                int64_t c, int64_t inner, int act, float alpha, float beta);

/* Depthwise 2-D convolution (groups = c = output channels, weights [c, 1, k, k]) with its
 * epilogue and an input prologue: y = act(conv(in_act(x + in_bias[c]), w) + bias[c] +
 * residual), bias, residual and in_bias may be NULL, in_act KC_ACT_NONE, KC_ACT_RELU or
 * KC_ACT_CLIP (in_alpha, in_beta its bounds): a clamp, cheap at each of a value's loads (padding
 * is zero after the prologue). Square windows of k = 3 or 5 at stride s = 1 or 2 (both dims),
 * dilation 1, symmetric pads ph, pw < k; x, y, residual in NCHW, or NHWC when nhwc is set. */
typedef struct kc_dwconv {
    int32_t n, c, h, w, oh, ow;
    int32_t k, s, ph, pw;
    int32_t nhwc;
    int32_t act;
    float alpha, beta;
    int32_t in_act;
    float in_alpha, in_beta;
} kc_dwconv;
/* Whether kc_dwconv_run takes geometry p (1) or not (0). */
int kc_dwconv_takes(const kc_dwconv *p);
int kc_dwconv_run(void *s, int dt, const kc_dwconv *p, const void *x, const void *w,
                  const void *bias, const void *residual, const void *in_bias, void *y);

/* A convolution of a 1x1 image by 1x1 filters, y[n, k] = act(w[k, :] . x[n, :] + bias[k] +
 * residual[n, k]) (x [n, c], w [k, c]; bias, residual may be NULL): the same bytes in NCHW
 * and NHWC. */
int kc_pointwise_1x1(void *s, int dt, int n, int c, int k, const void *x, const void *w,
                     const void *bias, const void *residual, void *y, int act, float alpha,
                     float beta);
/* A 1x1 convolution at stride 1 of an NHWC image as the matrix product it is, float16 or
 * bfloat16 on tensor cores: y[m, n] = act(x[m, :] . w[n, :] + bias[n] + residual[m, n]) over the
 * m = N*H*W pixels of x [m, k] and the filters w [n, k] (bias, residual may be NULL).
 * kc_conv1x1_takes says whether kc_conv1x1_run takes these sizes and pointers (n and k multiples
 * of 8, 16-byte aligned tensors). */
int kc_conv1x1_takes(int dt, int64_t m, int n, int k, const void *x, const void *w,
                     const void *bias, const void *residual, const void *y);
int kc_conv1x1_run(void *s, int dt, int64_t m, int n, int k, const void *x, const void *w,
                   const void *bias, const void *residual, void *y, int act, float alpha,
                   float beta);
/* Global average (max = 0) or max pooling of [n, c, hw] (NCHW) or [n, hw, c] (nhwc set)
 * into [n, c]. A small NHWC pool is split over H*W when the workspace ws holds
 * kc_global_pool_ws bytes (else it runs whole). */
size_t kc_global_pool_ws(int64_t n, int64_t c, int64_t hw, int nhwc);
int kc_global_pool(void *s, int dt, int max, int64_t n, int64_t c, int64_t hw, int nhwc,
                   const void *x, void *y, void *ws, size_t ws_size);

/* Resize of the last two dims of [outer, h, w] (NCHW): mode 0 nearest, 1 linear. coord:
 * 0 half_pixel, 1 asymmetric, 2 align_corners, 3 pytorch_half_pixel, 4 tf_half_pixel_for_nn;
 * nearest_mode: 0 round_prefer_floor, 1 round_prefer_ceil, 2 floor, 3 ceil. */
typedef struct kc_resize {
    int64_t outer, h, w, oh, ow;
    float scale_h, scale_w;
    int32_t mode, coord, nearest_mode;
} kc_resize;
int kc_resize_run(void *s, int dt, const kc_resize *r, const void *x, void *y);

#ifdef __cplusplus
}
#endif

#endif
