/* Convolution kernels (Conv, ConvTranspose, depthwise, Winograd, the AVX-512 pieces in arch/):
 * shared declarations. */
#ifndef KN_CPU_CONV_H
#define KN_CPU_CONV_H

#include "backend/cpu/clones.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/math/gemm.h"
#include "ops/nn/conv_geom.h"

/* A 1-D or 2-D convolution seen as 2-D (a 1-D one has height 1). */
typedef struct kn_conv2d {
    int64_t h, w, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw;
} kn_conv2d;

static inline void kn_conv_as_2d(const kn_conv_geom *g, kn_conv2d *c) {
    int o = g->nsp == 1 ? 0 : 1; /* index of the width dim; height is dim 0 when 2-D */
    c->w = g->in[o], c->ow = g->out[o], c->kw = g->k[o], c->sw = g->stride[o], c->dw = g->dil[o];
    c->pw = g->pad_b[o];
    if (g->nsp == 1) {
        c->h = c->oh = c->kh = c->sh = c->dh = 1;
        c->ph = 0;
    } else {
        c->h = g->in[0], c->oh = g->out[0], c->kh = g->k[0], c->sh = g->stride[0];
        c->dh = g->dil[0], c->ph = g->pad_b[0];
    }
}

/* im2col geometry for kn_cpu_im2col_pack_avx512: element (k, col) of the column matrix, with
 * k = (ci, ky, kx) and col = (oh, ow), is x[ci * plane + hoff[kx] + ih * row + ow + xoff[kx]]
 * where ih = oh * sh - ph + ky * dh, or zero when ih is outside [0, h) or the column outside
 * [0, width[kx]). Covers stride 1, and stride 2 over rows split into even and odd halves. */
#define KN_IM2COL_MAX_KW 16
typedef struct kn_im2col2d {
    const float *x;
    int64_t plane, row, h, ow, kh, kw, sh, ph, dh;
    int64_t xoff[KN_IM2COL_MAX_KW], hoff[KN_IM2COL_MAX_KW], width[KN_IM2COL_MAX_KW];
} kn_im2col2d;

/* A kn_gemm_pack_fn for 32-wide panels (the AVX-512 GEMM). */
void kn_cpu_im2col_pack_avx512(const kn_im2col2d *g, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
                               float *dst);
/* The same columns straight into one bf16 GEMM panel (32 columns from n0) as pairs along K
 * (kn_bf16_pack_pairs_fn): no float32 panel in between. */
void kn_cpu_im2col_pairs_avx512(const kn_im2col2d *g, int64_t k0, int64_t kc, int64_t n0,
                                int64_t nc, uint32_t *dst);

/* One output row of a depthwise convolution, for the per-ISA row kernels. */
typedef struct kn_dw_row {
    const kn_conv2d *c;
    const float *x; /* the channel's input plane */
    const float *w; /* the channel's kh x kw weights */
    int64_t oh;
    int64_t ky0, ky1;       /* kernel rows that land inside the input */
    const int64_t *lo, *hi; /* per kernel column: output columns whose tap is inside */
    int64_t left, right;    /* columns [left, right) have every tap inside */
    float bias;
    const float *res; /* residual row, or NULL */
    int clamp;
    float lo_clamp, hi_clamp;
    float *y; /* output row */
} kn_dw_row;

/* The whole output row, epilogue included. Only called when the GEMM runs its AVX-512 kernel
 * (kn_gemm_isa()), so the machine has AVX-512. */
void kn_cpu_dw_row_avx512(const kn_dw_row *r);

/* A whole depthwise plane as a stride-1 correlation over flattened planes whose every tap is
 * inside (padded, and for stride 2 split into four phase planes): output (oh, ow) sits at flat
 * index oh * wp + ow and tap t reads x[index + off[t]]. Columns that cross a row end are
 * computed and thrown away, so even 7x7 planes fill whole vectors. */
typedef struct kn_dw_flat {
    const float *x;
    int64_t wp;
    const float *w;     /* ntaps weights */
    const int64_t *off; /* ntaps offsets */
    int64_t ntaps, oh, ow;
    float bias;
    int clamp;
    float lo, hi;
    const float *res; /* residual plane (oh x ow), or NULL */
    float *tmp;       /* oh * wp + 32 floats */
    float *y;         /* output plane (oh x ow) */
    int64_t phase;    /* floats between phase planes (stride 2) */
} kn_dw_flat;

void kn_cpu_dw_plane_flat_avx512(const kn_dw_flat *f);
/* 3x3 undilated, stride 1 (x: padded plane, row stride wp) or stride 2 (x: the four phase
 * planes, row stride wp, `phase` apart); row by row straight into y, no tmp. */
void kn_cpu_dw3_plane_avx512(const kn_dw_flat *f, int stride);
/* 3x3 or 5x5 undilated depthwise over one unpadded plane (h x w), stride 1 or 2, with up to
 * k / 2 rows of padding above and, left, 0 or 1 column (3x3) or 1 or 2 (5x5); the padding below
 * and right follows from oh and ow; taps outside the plane read as zero. The epilogue runs in
 * registers: bias, residual, then act, which is KN_ACT_NONE, KN_ACT_CLIP (to [lo, hi]),
 * KN_ACT_SIGMOID or KN_ACT_SWISH. False (nothing done) for a case it has no instance for. */
typedef struct kn_dwd {
    const float *x;
    int64_t h, w, ph, pw, oh, ow;
    int k, stride;
    const float *wt; /* k * k weights */
    float bias;
    const float *res; /* residual plane (oh x ow), or NULL */
    int act;
    float lo, hi;
    float *y; /* output plane (oh x ow) */
} kn_dwd;

bool kn_cpu_dw_direct_avx512(const kn_dwd *d);
/* The 3x3 cases of kn_cpu_dw_direct_avx512 with one row and column of padding before: stride 1
 * with oh = h and ow = w, stride 2 with oh = (h - 1) / 2 + 1 and ow = (w - 1) / 2 + 1 >= 8; by
 * strips of columns walked down the plane; and stride 2 onto fewer columns from at most 16 rows
 * of at most 15, two output rows a vector. False (nothing done) when d is not one of those. */
bool kn_cpu_dw3_strips_avx512(const kn_dwd *d);
/* k x k (3, 5 or 7) depthwise, stride 1, k / 2 padding on every side, over planes [p0, p1) of
 * d.x (plane p has channel p % channels: weights d.wt + channel * k * k, bias[channel]), on
 * planes whose rows at a pitch of w + k / 2 take at most KN_DW_SHARED_PAD_MAX_VECTORS vectors
 * (kn_cpu_dw_shared_pad_fits). d's epilogue fields as for kn_cpu_dw_direct_avx512.
 * kn_cpu_dw_shared_pad_init fills the layout once per layer, before the planes are split. */
#define KN_DW_SHARED_PAD_MAX_VECTORS 64
#define KN_DW_SHARED_PAD_MAX_PITCH 64
#define KN_DW_SHARED_PAD_BUFFER                                                                    \
    (2 * (3 * KN_DW_SHARED_PAD_MAX_PITCH + 3) + 16 * KN_DW_SHARED_PAD_MAX_VECTORS + 48)
/* A plane in the buffer: element (r, c) at base + r * pitch + c; vector v holds the plane's
 * elements at[v] ... at[v] + popcount(mask[v]) - 1 in the lanes of mask[v], and first[v] is
 * that many lanes from lane 0 (the plane's side of the expand and the compress). */
typedef struct kn_dw_shared_pad_layout {
    int64_t pitch, base, nv, stride; /* stride: floats from one buffer to the next */
    uint16_t mask[KN_DW_SHARED_PAD_MAX_VECTORS], first[KN_DW_SHARED_PAD_MAX_VECTORS];
    int32_t at[KN_DW_SHARED_PAD_MAX_VECTORS];
    int64_t off[49]; /* tap offsets from an output's position */
} kn_dw_shared_pad_layout;
typedef struct kn_dw_shared_pad {
    kn_dwd d;
    int64_t channels;
    const float *bias; /* or NULL */
    kn_dw_shared_pad_layout layout;
} kn_dw_shared_pad;

bool kn_cpu_dw_shared_pad_fits(int64_t h, int64_t w, int k);
void kn_cpu_dw_shared_pad_init(kn_dw_shared_pad *s);
void kn_cpu_dw_shared_pad_avx512(const kn_dw_shared_pad *s, int64_t p0, int64_t p1);
/* k x k (3, 5 or 7) undilated depthwise, stride 1 or 2, over the channel block [c0, c0 + 16) of
 * one image, one channel per vector lane; for small planes, where per-plane set-up dominates. */
typedef struct kn_dwc16 {
    const float *x; /* the image: channels x h x w */
    int64_t channels, h, w, ph, pw, oh, ow;
    int stride, k;
    const float *wt;   /* channels x k*k */
    const float *bias; /* or NULL */
    int clamp;
    float lo, hi;
    const float *res; /* residual image, or NULL */
    float *y;
    float *buf; /* 64-byte aligned, 16 * ((oh-1)*stride+k) * ((ow-1)*stride+k) floats */
} kn_dwc16;

void kn_cpu_dw_c16_avx512(const kn_dwc16 *f, int64_t c0);

/* Split a (2*hq) x (2*wq) plane into its four phase planes (row parity, column parity), each
 * hq x wq, stored one after another: a stride-2 convolution becomes a stride-1 one. */
void kn_cpu_dw_split_phases_avx512(const float *x, int64_t hq, int64_t wq, float *out);
/* x (h x w) into the zero-padded hp x wp plane at row ph, column pw, with masked vector copies
 * instead of a memset and a memcpy per row. */
void kn_cpu_dw_pad_avx512(const float *x, int64_t h, int64_t w, int64_t ph, int64_t pw, int64_t hp,
                          int64_t wp, float *out);
/* The same phase planes of x (h x w) zero-padded by ph rows above and pw columns left to
 * (2*hq) x (2*wq), written in one pass without the padded copy. */
void kn_cpu_dw_pad_split_avx512(const float *x, int64_t h, int64_t w, int64_t ph, int64_t pw,
                                int64_t hq, int64_t wq, float *out);
/* Rows [r0, r1) of those planes alone: of the padded plane (kn_cpu_dw_pad_avx512, wp wide), or
 * of the (2*hq)-row plane before its split (row r goes to phase row r / 2), so that threads
 * can build one plane together. */
void kn_cpu_dw_pad_rows_avx512(const float *x, int64_t h, int64_t w, int64_t ph, int64_t pw,
                               int64_t wp, int64_t r0, int64_t r1, float *out);
void kn_cpu_dw_pad_split_rows_avx512(const float *x, int64_t h, int64_t w, int64_t ph, int64_t pw,
                                     int64_t hq, int64_t wq, int64_t r0, int64_t r1, float *out);

/* One channel x (c->h x c->w) as the direct kernels read it: zero-padded by c->ph rows above and
 * c->pw columns left into an hq x wq plane (stride 1), or split into its four phase planes of
 * hq x wq (stride 2). _rows: padded rows [r0, r1) of it alone (of 2 * hq at stride 2). */
static inline void kn_cpu_conv_plane_rows_avx512(const kn_conv2d *c, const float *x, int64_t hq,
                                                 int64_t wq, int64_t r0, int64_t r1, float *out) {
    if (c->sh == 2)
        kn_cpu_dw_pad_split_rows_avx512(x, c->h, c->w, c->ph, c->pw, hq, wq, r0, r1, out);
    else
        kn_cpu_dw_pad_rows_avx512(x, c->h, c->w, c->ph, c->pw, wq, r0, r1, out);
}

static inline void kn_cpu_conv_plane_avx512(const kn_conv2d *c, const float *x, int64_t hq,
                                            int64_t wq, float *out) {
    kn_cpu_conv_plane_rows_avx512(c, x, hq, wq, 0, c->sh == 2 ? 2 * hq : hq, out);
}

/* Whether the conv takes 4x4-tile Winograd at input x's shape (known): there it beats the
 * AVX512-BF16 GEMM (a quarter of the multiplies), so bf16 weights are widened for it. The 2x2
 * tiles of 7x7 maps save only 1 / 2.25 of them: ResNet-50's 512-channel 3x3 convs at 7x7 ran
 * 0.83 ms in fp32 Winograd against 0.58 in the bf16 GEMM once its 7x7 products streamed their
 * weights (0.89 against 1.27 before), so those take bf16 where the CPU has AVX512-BF16 (not
 * the portable bf16 path). */
bool kn_cpu_conv_prefers_winograd(const kn_node *node, const kn_tensor *x, const kn_shape *w);

/* Y = W X + epilogue for g->n images of a 1x1, stride-1, unpadded, ungrouped conv over os
 * pixels, each image's product on threads of its own (tasks of pixel slices and channel parts);
 * X's input channels multiplied by scale (ScaledConv; scale_stride apart from image to image,
 * 0 for one set) where scale is not NULL. false (nothing run) where it does not pay (one image,
 * one thread, threads left idle) or scratch is short: the caller then runs the images one by
 * one. */
bool kn_cpu_conv_batched(kn_threadpool *pool, const kn_conv_geom *g, const kn_gemm_operand *a,
                         const float *x, const float *scale, int64_t scale_stride,
                         const kn_epilogue *ep, int64_t os, float *y);

/* Stride-2 2-D convolution of one group (cin channels of x) with packed weights a, through
 * padded phase planes and kn_gemm_gather instead of an im2col copy; y is C_out x oh x ow.
 * Only where kn_cpu_conv_strided_applies (cin, cout: input and output channels per group).
 * `images` images in one job, their bands of rows side by side: x's images cin x h x w apart,
 * y's (and the epilogue's residual's) ys floats apart. */
bool kn_cpu_conv_strided_applies(const kn_conv2d *c, int64_t cin, int64_t cout,
                                 const kn_gemm_packed *a);
kiln_status kn_cpu_conv_strided(kn_threadpool *pool, const kn_conv2d *c, int64_t cin,
                                int64_t images, const float *x, const kn_gemm_packed *a,
                                const kn_epilogue *ep, float *y, int64_t ys);

/* fp32 Conv of one group, 2-D, as a GEMM over output pixels (nn/conv_pixels.c): tiles of up to
 * 14 pixels x 32 output channels, the pixels' values broadcast from X's own planes (a flat 1x1
 * conv) or from planes of 16 channels interleaved (or, for few channels, of one) built once a
 * call from X, zero-padded or split into phase planes, weights packed once in panels of output
 * channels; NCHW in and out. Stride 1
 * (any dilation) or 2 (undilated), any kernel and padding. applies: where it beats conv.c's
 * GEMM over pixel columns on `threads` threads (0: on some number of them), on AVX-512, for
 * one image (conv.c asks kn_cpu_conv_pixels_takes, which gives a batch's convs the path as
 * kn_cpu_conv_pixels_batches says). The mode: 1, that choice; 0 (KILN_CPU_CONV_PIXELS=0 in the
 * environment), never; 2 (KILN_CPU_CONV_PIXELS=2), wherever the geometry allows, Winograd's convs
 * excepted (measurements). The epilogue's bias is per output channel, its residual NCHW (ldr
 * ignored: the output's plane). */
typedef struct kn_conv_pixels kn_conv_pixels;
int kn_cpu_conv_pixels_mode(void);
void kn_cpu_conv_pixels_set_mode(int mode);
/* How a flat conv (1x1, stride 1, unpadded) reads X: in place, its channel planes as they lie
 * (the default), or copied into planes of 16 channels interleaved by a job before the tiles
 * (KILN_CPU_CONV_PIXELS_COPY=job; the same results; docs/perf-notes.md, "Pixel-row 1x1 convs
 * read X in place"). Read when the weights are packed. */
enum { KN_PIXELS_IN_PLACE = 0, KN_PIXELS_COPY_JOB = 1 };
int kn_cpu_conv_pixels_copy(void);
void kn_cpu_conv_pixels_set_copy(int mode);
/* Which convs of a batch conv.c gives the path, the images side by side (the others keep the
 * GEMM, which takes images side by side too): 3 (the default), flat convs the rule takes and,
 * on 8 threads or more, 3x3 stride-2 convs into maps of 50 to 196 pixels (copies under 64 MB); 0
 * (KILN_CPU_CONV_PIXELS_BATCH=0), none; 1 (=1), flat convs the rule takes; 2 (=2), any conv the
 * rule takes (docs/perf-notes.md, "A batch's convs on the pixel-row path by default"). */
int kn_cpu_conv_pixels_batches(void);
void kn_cpu_conv_pixels_set_batches(int mode);
/* How a batch's tasks are ordered over the threads: 1 (the default), pixels first (a thread
 * writes every channel of a range of pixels); 0 (KILN_CPU_CONV_PIXELS_ORDER=panels), panels
 * first, as for one image (a thread writes a range of channels of every image). */
int kn_cpu_conv_pixels_order(void);
void kn_cpu_conv_pixels_set_order(int mode);
/* A 1x1 conv, stride 1, unpadded: one whose X the path reads in place. */
bool kn_cpu_conv_pixels_flat(const kn_conv2d *c);
bool kn_cpu_conv_pixels_applies(const kn_conv2d *c, int64_t cin, int64_t cout, int threads);
/* Whether conv.c takes the path for `images` images on `threads` threads: the rule for one
 * image, and for a batch what kn_cpu_conv_pixels_batches lets it take. */
bool kn_cpu_conv_pixels_takes(const kn_conv2d *c, int64_t cin, int64_t cout, int64_t images,
                              int threads);
/* w: cout x cin x kh x kw. */
kiln_status kn_cpu_conv_pixels_prepare(const float *w, int64_t cout, int64_t cin, int64_t kh,
                                       int64_t kw, kn_conv_pixels **out);
bool kn_cpu_conv_pixels_fits(const kn_conv_pixels *p, int64_t cout, int64_t cin, int64_t kh,
                             int64_t kw);
/* Whether a Conv kernel's prepared state (kn_cpu_conv_prepare) holds the pixel-row weights yet:
 * they are packed by the first run that takes the path, never at prepare. */
bool kn_cpu_conv_pixels_packed(const void *state);
void kn_cpu_conv_pixels_free(kn_conv_pixels *p);
/* `images` images side by side: x is images x cin x h x w, y (and the residual) images x cout x
 * oh x ow. */
kiln_status kn_cpu_conv_pixels(kn_threadpool *pool, const kn_conv_pixels *p, const kn_conv2d *c,
                               int64_t images, const float *x, const kn_epilogue *ep, float *y);

/* fp32 Conv of one group, 2-D, for 1 to 4 input channels (a stem), stride 1 or 2, undilated,
 * outputs at least 16 wide, K = cin * kh * kw <= 256, on AVX-512 (nn/conv_stem.c, geometry):
 * a direct kernel, pixels in the vectors; stride 2 with kernels up to 7 wide reads the input in
 * place (kn_cpu_conv_stem_in_place), the others go over zero-padded or phase-split planes of
 * each input channel. applies: where conv.c takes it (for one image, a batch where
 * kn_cpu_conv_stem_batches, or a batch read in place), kernels of 25 taps or more (where the
 * planes beat the GEMM) and those read in place. `images` images: x is images x cin x h x w, y
 * images x cout x oh x ow; the epilogue's bias per output channel, its residual NCHW as y (ldr
 * ignored); every image's planes are built in row bands, in parallel.
 * KILN_CPU_CONV_STEM=0 in the environment (or set_enabled(false), for benchmarks) leaves these
 * convs to the GEMM. */
bool kn_cpu_conv_stem_enabled(void);
void kn_cpu_conv_stem_set_enabled(bool on);
bool kn_cpu_conv_stem_geometry(const kn_conv2d *c, int64_t cin, int64_t cout);
bool kn_cpu_conv_stem_applies(const kn_conv2d *c, int64_t cin, int64_t cout);
/* Whether conv.c gives the stem kernel a batch's images (KILN_CPU_CONV_STEM_BATCH=1; else a
 * batch's stem takes the other paths: kn_cpu_conv_strided, or the GEMM). */
bool kn_cpu_conv_stem_batches(void);
void kn_cpu_conv_stem_set_batches(bool on);
/* Whether the stem kernel reads this stride-2 conv's input in place, without planes (kernels up
 * to 7 wide; a batch's images too, in one job): by default, and never with
 * KILN_CPU_CONV_STEM_S2=0 (or set_in_place(false), for benchmarks). set_group: output channels
 * a task, 8 or 16; 0 the rule (8 for kernels up to 3 wide). */
bool kn_cpu_conv_stem_in_place(const kn_conv2d *c);
void kn_cpu_conv_stem_set_in_place(bool on);
void kn_cpu_conv_stem_set_group(int width);
kiln_status kn_cpu_conv_stem(kn_threadpool *pool, const kn_conv2d *c, int64_t cin, int64_t cout,
                             int64_t images, const float *x, const float *w, const kn_epilogue *ep,
                             float *y);

/* Conv on bfloat16 activations (nn/conv_bf16.c): X, the residual Z (kiln.FusedConv) and Y in
 * bfloat16, bias in bfloat16 (or float32), weights bfloat16; NHWC or NCHW as the kiln_nhwc
 * attribute says (passes/layout_nhwc.c), weights then stored [K, R, S, C]. 1-D and 2-D convs of
 * one group, any channel count, kernel, stride, padding and dilation; products on AMX tiles
 * where kn_bf16_amx(), else on a portable fp32 path, accumulation in fp32 either way, the
 * output rounded to nearest even. prepare packs constant weights (NULL, and KILN_OK, for a
 * conv it does not take: run reports why); run packs them itself when handed NULL. */
typedef struct kn_conv_bf16 kn_conv_bf16;
kiln_status kn_cpu_conv_bf16_prepare(const kn_node *node, const kn_tensor *w, kn_conv_bf16 **out);
void kn_cpu_conv_bf16_free(kn_conv_bf16 *p);
kiln_status kn_cpu_conv_bf16_run(kn_kernel_ctx *k, const kn_conv_bf16 *prepared);

/* Depthwise (group == C_in == C_out) 1-D/2-D convolution without GEMM. */
kiln_status kn_cpu_conv_depthwise(kn_threadpool *pool, const kn_conv_geom *g, const float *x,
                                  const float *w, const kn_epilogue *ep, float *y);

/* Winograd F(tile x tile, 3x3) weights, tile 4 or 2: the (tile + 2)^2 transformed
 * C_out x C_in matrices, packed. */
typedef struct kn_wino kn_wino;
/* w: c_out x c_in x 3 x 3. */
kiln_status kn_cpu_wino_prepare(const float *w, int64_t c_out, int64_t c_in, int tile,
                                kn_wino **out);
int kn_cpu_wino_tile(const kn_wino *w);
void kn_cpu_wino_free(kn_wino *w);
/* 2-D, 3x3, stride 1, dilation 1, one group (any padding). */
bool kn_cpu_wino_applies(const kn_conv_geom *g);
/* The whole convolution, epilogue (bias per output channel) included. */
kiln_status kn_cpu_conv_winograd(kn_threadpool *pool, const kn_wino *w, const kn_conv_geom *g,
                                 const float *x, const kn_epilogue *ep, float *y);

#endif
