/* Conv as GEMM: Y_g (C_out/g x OS) = W_g (C_out/g x K) * cols_g (K x OS), K = C_in/g * prod(k).
 * Weights are packed once in prepare. The column matrix is never materialised: the GEMM asks
 * for K x NR panels and they are gathered straight from the image (with AVX-512 by
 * kn_cpu_im2col_pack_avx512; stride-2 inputs are first split into even and odd column halves so
 * every tap reads a contiguous run). A 1x1, stride-1, unpadded conv reads the image as B
 * directly; a strided unpadded 1x1 conv reads a subsampled copy. 3x3 stride-1 convs with enough
 * channels take Winograd (conv_winograd.c), depthwise convs a direct kernel (conv_depthwise.c).
 * Bias, residual and activation run in the GEMM epilogue. Weights the precision pass stored in
 * bf16 (kiln_weights) are packed for the bf16 GEMM instead, except on convs where fp32 Winograd
 * is faster (kn_cpu_conv_prefers_winograd, kiln_compute): those, and weights stored in float16,
 * are widened to float32 here once. Convs on bf16 activations run in conv_bf16.c; stems (few
 * input channels) in conv_stem.c; long-K 1x1 convs over small maps on many threads in
 * conv_pixels.c. */
#include "backend/cpu/nn/conv.h"

#include "backend/cpu/f32_stage.h"
#include "backend/cpu/math/gemm_bf16.h"
#include "core/alloc.h"

#include <stdatomic.h>
#include <string.h>

typedef struct conv_state {
    kn_wino *wino;       /* 3x3 stride-1 weights for Winograd, or NULL */
    float *w32;          /* float16 weights widened, when a path may read them plain */
    kn_bf16_packed **bw; /* bf16 weights, one per group, or NULL */
    kn_conv_bf16 *b16;   /* bf16 weights for bf16 activations (conv_bf16.c), or NULL */
    /* Weights for the pixel-row GEMM (conv_pixels.c): packed by the first run that takes that
     * path (px_may: the conv may take it at its prepared shape), so that plans which never run
     * on enough threads for it hold only the GEMM's copy. */
    _Atomic(kn_conv_pixels *) px;
    bool px_may;
    /* The input's shape was not known at prepare (a dynamic batch or image size): the GEMM's
     * weights are packed there as for any conv, and each run asks the path's rule at its own
     * shape (the pixel-row weights again packed by the first run that takes the path). */
    bool px_later;
    /* The GEMM's packing of such a conv (one group), likewise packed by the first run that
     * takes the GEMM: a plan run on 2 threads or more may never need it. */
    _Atomic(kn_gemm_packed *) w_late;
    int64_t group;
    kn_gemm_packed *w[]; /* one per group */
} conv_state;

/* Winograd pays for its transforms only with enough channels to share them and enough tiles
 * to fill the GEMM's columns. */
#define WINO_MIN_CHANNELS 16
#define WINO_MIN_TILES 8
/* 4x4 tiles from this many on: 9 of them (10x10 maps, YOLO's head at 320) ran 2x slower than
 * onnxruntime as 9 GEMM columns padded to 16; 2x2 tiles give 25. */
#define WINO4_MIN_TILES 16

static bool attr_all_ones(const kn_node *node, const char *name) {
    const kn_attr *a = kn_node_attr(node, name);
    if (a == NULL)
        return true;
    if (a->type != KN_ATTR_INTS)
        return false;
    for (int64_t i = 0; i < a->n; i++)
        if (a->ints[i] != 1)
            return false;
    return true;
}

static bool wino_candidate(const kn_node *node, const kn_shape *w, int64_t group) {
    return group == 1 && w->rank == 4 && w->d[2] == 3 && w->d[3] == 3 &&
           w->d[0] >= WINO_MIN_CHANNELS && w->d[1] >= WINO_MIN_CHANNELS &&
           attr_all_ones(node, "strides") && attr_all_ones(node, "dilations");
}

static int64_t wino_tiles(const kn_conv_geom *g, int tile) {
    return ((g->out[0] + tile - 1) / tile) * ((g->out[1] + tile - 1) / tile);
}

/* 4x4 tiles, unless the input's shape is known at prepare and leaves fewer than
 * WINO_MIN_TILES of them (7x7 maps): then 2x2 tiles, whose 16 tiles fill the GEMM's 16-column
 * edge kernel, and whose weights take 16/36 of the memory traffic. 0: none. */
static int wino_tile(const kn_node *node, const kn_tensor *x, const kn_shape *w, bool *known) {
    kn_conv_geom g;
    *known = x->shape.rank == 4;
    for (int i = 0; i < x->shape.rank; i++)
        *known = *known && x->shape.d[i] > 0;
    if (*known && kn_conv_geom_init(node, &x->shape, w, false, &g) != KILN_OK)
        *known = false; /* run reports the bad shape */
    if (!*known)
        return 4;
    if (wino_tiles(&g, 4) >= WINO4_MIN_TILES)
        return 4;
    return wino_tiles(&g, 2) >= WINO_MIN_TILES ? 2 : 0;
}

bool kn_cpu_conv_prefers_winograd(const kn_node *node, const kn_tensor *x, const kn_shape *w) {
    bool known;
    if (!wino_candidate(node, w, kn_attr_int(node, "group", 1)))
        return false;
    int tile = wino_tile(node, x, w, &known);
    return known && (tile == 4 || (tile == 2 && !kn_bf16_native()));
}

static bool is_depthwise(const kn_conv_geom *g) {
    return g->group == g->c_in && g->c_out == g->c_in && g->nsp <= 2;
}

/* A 2-D conv of one group (the pixel-row path's kind), and whether prepare knows its input's
 * shape (an unknown dim reads 0 there). */
static bool one_group_2d(const kn_tensor *x, const kn_shape *w, int64_t group) {
    return group == 1 && w->rank == 4 && x->shape.rank == 4;
}

static bool shape_known(const kn_tensor *x) {
    for (int i = 0; i < x->shape.rank; i++)
        if (x->shape.d[i] <= 0)
            return false;
    return true;
}

/* Whether the conv may take the pixel-row GEMM at its input's shape, known at prepare (an
 * unknown shape is left to each run: px_later), on `threads` threads (0: on some number of
 * them). */
static bool pixels_at(const kn_node *node, const kn_tensor *x, const kn_shape *w, int64_t group,
                      int threads) {
    if (!one_group_2d(x, w, group) || !shape_known(x))
        return false;
    kn_conv_geom g;
    if (kn_conv_geom_init(node, &x->shape, w, false, &g) != KILN_OK || g.nsp != 2)
        return false;
    kn_conv2d c;
    kn_conv_as_2d(&g, &c);
    return kn_cpu_conv_pixels_takes(&c, g.c_in, g.c_out, g.n, threads);
}

/* bf16 weights: one packed operand per group for the bf16 GEMM. */
static kiln_status prepare_bf16(const kn_tensor *w, int64_t group, conv_state *st) {
    int64_t cog = w->shape.d[0] / group, kdim = kn_shape_numel(&w->shape) / w->shape.d[0];
    st->bw = kn_calloc((size_t)group, sizeof *st->bw);
    if (st->bw == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory packing conv weights");
    const uint16_t *wd = w->data;
    for (int64_t g = 0; g < group; g++)
        KN_TRY(kn_bf16_pack_a(wd + g * cog * kdim, KILN_DTYPE_BFLOAT16, kdim, false, cog, kdim,
                              &st->bw[g]));
    return KILN_OK;
}

kiln_status kn_cpu_conv_prepare(const kn_node *node, int n_in, const kn_tensor *in, void **state) {
    *state = NULL;
    if (n_in < 2 || in[1].data == NULL || in[1].shape.rank < 3 ||
        (in[1].dtype != KILN_DTYPE_FLOAT32 && in[1].dtype != KILN_DTYPE_FLOAT16 &&
         in[1].dtype != KILN_DTYPE_BFLOAT16))
        return KILN_OK;
    const kn_shape *w = &in[1].shape;
    int64_t group = kn_attr_int(node, "group", 1);
    if (group < 1 || w->d[0] % group != 0)
        return KILN_OK; /* run reports the error with the input shapes */
    bool depthwise = group == w->d[0] && w->d[1] == 1 && w->rank <= 4;
    if (depthwise && in[1].dtype == KILN_DTYPE_FLOAT32)
        return KILN_OK; /* depthwise: direct kernel reads W as is */
    int64_t cog = w->d[0] / group, kdim = kn_shape_numel(w) / w->d[0];
    conv_state *st = kn_calloc(1, sizeof *st + (size_t)group * sizeof st->w[0]);
    if (st == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory packing conv weights");
    st->group = group;
    if (in[0].dtype == KILN_DTYPE_BFLOAT16 && in[1].dtype == KILN_DTYPE_BFLOAT16) {
        kiln_status rc = kn_cpu_conv_bf16_prepare(node, &in[1], &st->b16);
        if (rc != KILN_OK) {
            kn_cpu_conv_release(st);
            return rc;
        }
        *state = st;
        return KILN_OK;
    }
    bool widen = kn_cpu_weights_widened(node, &in[1]);
    if (in[1].dtype == KILN_DTYPE_BFLOAT16 && !widen) {
        kiln_status rc = prepare_bf16(&in[1], group, st);
        if (rc != KILN_OK) {
            kn_cpu_conv_release(st);
            return rc;
        }
        *state = st;
        return KILN_OK;
    }
    const float *wd = in[1].data;
    if (widen) {
        kn_cpu_f32 v;
        kiln_status rc = kn_cpu_f32_in(&in[1], &v);
        if (rc != KILN_OK) {
            kn_cpu_conv_release(st);
            return rc;
        }
        wd = st->w32 = v.p;
        if (depthwise) {
            *state = st;
            return KILN_OK;
        }
    }
    bool known = false;
    int tile = wino_candidate(node, w, group) ? wino_tile(node, &in[0], w, &known) : 0;
    /* Products that may take the pixel-row GEMM (on some thread counts) pack neither operand
     * here: each packing waits for the first run that takes its path (w_late, px). */
    atomic_init(&st->px, NULL);
    atomic_init(&st->w_late, NULL);
    st->px_may = pixels_at(node, &in[0], w, group, 0) && !(known && tile != 0);
    st->px_later = one_group_2d(&in[0], w, group) && !shape_known(&in[0]);
    bool gemm = !(known && tile != 0) && !st->px_may;
    /* With the input shape fixed, a Winograd conv never takes the GEMM path: no packed copy. */
    for (int64_t g = 0; g < group && gemm; g++) {
        kiln_status rc = kn_gemm_pack_a(wd + g * cog * kdim, kdim, false, cog, kdim, &st->w[g]);
        if (rc != KILN_OK) {
            kn_cpu_conv_release(st);
            return rc;
        }
    }
    if (tile != 0) {
        kiln_status rc = kn_cpu_wino_prepare(wd, w->d[0], w->d[1], tile, &st->wino);
        if (rc != KILN_OK) {
            kn_cpu_conv_release(st);
            return rc;
        }
    }
    *state = st;
    return KILN_OK;
}

void kn_cpu_conv_release(void *state) {
    conv_state *st = state;
    if (st == NULL)
        return;
    for (int64_t g = 0; g < st->group; g++) {
        kn_gemm_packed_free(st->w[g]);
        if (st->bw != NULL)
            kn_bf16_packed_free(st->bw[g]);
    }
    kn_free(st->bw);
    kn_cpu_conv_bf16_free(st->b16);
    kn_cpu_conv_pixels_free(atomic_load(&st->px));
    kn_gemm_packed_free(atomic_load(&st->w_late));
    kn_free(st->w32);
    kn_cpu_wino_free(st->wino);
    kn_free(st);
}

typedef struct im2col_arg {
    const float *x; /* first channel of the group in this image */
    const kn_conv_geom *g;
    kn_conv2d c;
    int nr;
    /* Stride-2 columns: every input row split into its even columns then its odd columns, each
     * half w2 = ceil(w/2) wide, so taps gather contiguous runs (no per-element stride, no
     * divisions for the bounds). NULL otherwise. */
    const float *xs;
    int64_t w2;
} im2col_arg;

KN_CLONES static void split_row(const float *s, int64_t w, float *even, float *odd) {
    for (int64_t i = 0; i < w / 2; i++) {
        even[i] = s[2 * i];
        odd[i] = s[2 * i + 1];
    }
    if (w % 2 != 0)
        even[w / 2] = s[w - 1];
}

/* A strided 1x1 conv reads only every sw-th column of every sh-th row: gather those once into a
 * dense C x OH x OW matrix and run the plain GEMM on it. */
KN_CLONES static void subsample_row(const float *s, int64_t sw, int64_t n, float *d) {
    for (int64_t i = 0; i < n; i++)
        d[i] = s[i * sw];
}

typedef struct subsample_job {
    const float *x;
    float *xs;
    const kn_conv2d *c;
} subsample_job;

static void subsample_rows(void *arg, int64_t begin, int64_t end) {
    const subsample_job *j = arg;
    const kn_conv2d *c = j->c;
    for (int64_t r = begin; r < end; r++) {
        int64_t ci = r / c->oh, oh = r % c->oh;
        subsample_row(j->x + (ci * c->h + oh * c->sh) * c->w, c->sw, c->ow, j->xs + r * c->ow);
    }
}

typedef struct split_job {
    const float *x;
    float *xs;
    int64_t w, w2;
} split_job;

static void split_rows(void *arg, int64_t begin, int64_t end) {
    const split_job *j = arg;
    for (int64_t r = begin; r < end; r++) {
        float *d = j->xs + r * 2 * j->w2;
        split_row(j->x + r * j->w, j->w, d, d + j->w2);
    }
}

static void zero(float *p, int64_t n) {
    if (n > 0)
        memset(p, 0, (size_t)n * sizeof *p);
}

/* One output-row segment of one im2col row: seg columns starting at output (oh, ow). */
static void gather_segment(const im2col_arg *a, const float *xc, int64_t ky, int64_t kx, int64_t oh,
                           int64_t ow, int64_t seg, float *dst) {
    const kn_conv2d *c = &a->c;
    int64_t ih = oh * c->sh - c->ph + ky * c->dh;
    if (ih < 0 || ih >= c->h) {
        zero(dst, seg);
        return;
    }
    const float *xr = xc + ih * c->w;
    int64_t iw0 = ow * c->sw - c->pw + kx * c->dw, width = c->w, sw = c->sw;
    if (a->xs != NULL) {
        /* Input column 2 * ow + dx is column ow + (dx - par) / 2 of the parity-par half. */
        int64_t dx = kx * c->dw - c->pw, par = dx & 1;
        xr = xc + ih * 2 * a->w2 + par * a->w2;
        iw0 = ow + (dx - par) / 2;
        width = par != 0 ? c->w / 2 : (c->w + 1) / 2;
        sw = 1;
    }
    int64_t lo, hi;
    if (sw == 1) {
        lo = iw0 >= 0 ? 0 : -iw0;
        hi = iw0 >= width ? 0 : width - iw0;
    } else {
        lo = iw0 >= 0 ? 0 : (-iw0 + sw - 1) / sw;
        hi = iw0 >= width ? 0 : (width - iw0 + sw - 1) / sw;
    }
    lo = lo < seg ? lo : seg;
    hi = hi < seg ? hi : seg;
    hi = hi > lo ? hi : lo;
    if (sw == 1 && lo == 0 && hi == 32) {
        memcpy(dst, xr + iw0, 32 * sizeof *dst); /* the common full panel, inlined */
        zero(dst + 32, seg - 32);
        return;
    }
    zero(dst, lo);
    if (sw == 1) {
        memcpy(dst + lo, xr + iw0 + lo, (size_t)(hi - lo) * sizeof *dst);
    } else {
        const float *s = xr + iw0;
        for (int64_t t = lo; t < hi; t++)
            dst[t] = s[t * sw];
    }
    zero(dst + hi, seg - hi);
}

static void pack_im2col_2d(void *arg, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float *dst) {
    const im2col_arg *a = arg;
    const kn_conv2d *c = &a->c;
    int nr = a->nr;
    for (int64_t p = 0; p * nr < nc; p++) {
        float *d = dst + p * kc * nr;
        int64_t col0 = n0 + p * nr;
        int64_t cols = nc - p * nr < nr ? nc - p * nr : nr;
        int64_t oh0 = col0 / c->ow, ow0 = col0 % c->ow;
        /* (ci, ky, kx) of row k advance with counters: divisions per row cost more than the
         * copy itself for short panels. */
        int64_t kx = k0 % c->kw, t = k0 / c->kw, ky = t % c->kh, ci = t / c->kh;
        int64_t plane = a->xs != NULL ? c->h * 2 * a->w2 : c->h * c->w;
        const float *x = a->xs != NULL ? a->xs : a->x;
        for (int64_t kk = 0; kk < kc; kk++) {
            const float *xc = x + ci * plane;
            float *row = d + kk * nr;
            int64_t oh = oh0, ow = ow0;
            for (int64_t j = 0; j < cols;) {
                int64_t seg = cols - j < c->ow - ow ? cols - j : c->ow - ow;
                gather_segment(a, xc, ky, kx, oh, ow, seg, row + j);
                j += seg;
                ow += seg;
                if (ow == c->ow) {
                    ow = 0;
                    oh++;
                }
            }
            zero(row + cols, nr - cols);
            if (++kx == c->kw) {
                kx = 0;
                if (++ky == c->kh) {
                    ky = 0;
                    ci++;
                }
            }
        }
    }
}

static void pack_im2col_fast(void *arg, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
                             float *dst) {
    kn_cpu_im2col_pack_avx512(arg, k0, kc, n0, nc, dst);
}

static void pack_im2col_pairs(void *arg, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
                              uint32_t *dst) {
    kn_cpu_im2col_pairs_avx512(arg, k0, kc, n0, nc, dst);
}

/* The fast packer's geometry, or false when it does not apply (other strides, wide kernels, a
 * GEMM without AVX-512 panels). */
static bool fast_im2col(const kn_conv2d *c, const float *xg, const float *xs, int64_t w2,
                        kn_im2col2d *f) {
    if (kn_gemm_nr() != 32 || strcmp(kn_gemm_isa(), "avx512") != 0 || c->kw > KN_IM2COL_MAX_KW ||
        !(c->sw == 1 || xs != NULL))
        return false;
    *f = (kn_im2col2d){.x = xs != NULL ? xs : xg,
                       .plane = xs != NULL ? c->h * 2 * w2 : c->h * c->w,
                       .row = xs != NULL ? 2 * w2 : c->w,
                       .h = c->h,
                       .ow = c->ow,
                       .kh = c->kh,
                       .kw = c->kw,
                       .sh = c->sh,
                       .ph = c->ph,
                       .dh = c->dh};
    for (int64_t kx = 0; kx < c->kw; kx++) {
        int64_t dx = kx * c->dw - c->pw;
        if (xs == NULL) {
            f->xoff[kx] = dx;
            f->hoff[kx] = 0;
            f->width[kx] = c->w;
        } else {
            int64_t par = dx & 1; /* see gather_segment */
            f->xoff[kx] = (dx - par) / 2;
            f->hoff[kx] = par * w2;
            f->width[kx] = par != 0 ? c->w / 2 : (c->w + 1) / 2;
        }
    }
    return true;
}

/* Any number of spatial dims, one element at a time: the rare 3-D case. */
static void pack_im2col_nd(void *arg, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float *dst) {
    const im2col_arg *a = arg;
    const kn_conv_geom *g = a->g;
    int nr = a->nr;
    int64_t in_sp = 1;
    for (int i = 0; i < g->nsp; i++)
        in_sp *= g->in[i];
    for (int64_t p = 0; p * nr < nc; p++) {
        float *d = dst + p * kc * nr;
        for (int64_t kk = 0; kk < kc; kk++) {
            int64_t koff[KN_CONV_MAX_SP], t = k0 + kk;
            for (int i = g->nsp - 1; i >= 0; i--) {
                koff[i] = t % g->k[i];
                t /= g->k[i];
            }
            const float *xc = a->x + t * in_sp;
            for (int64_t j = 0; j < nr; j++) {
                int64_t col = n0 + p * nr + j;
                float v = 0.0f;
                if (col < n0 + nc) {
                    int64_t idx = 0, u = col;
                    int64_t pos[KN_CONV_MAX_SP];
                    for (int i = g->nsp - 1; i >= 0; i--) {
                        pos[i] = u % g->out[i];
                        u /= g->out[i];
                    }
                    bool inside = true;
                    for (int i = 0; i < g->nsp; i++) {
                        int64_t q = pos[i] * g->stride[i] - g->pad_b[i] + koff[i] * g->dil[i];
                        inside = inside && q >= 0 && q < g->in[i];
                        idx = idx * g->in[i] + q;
                    }
                    if (inside)
                        v = xc[idx];
                }
                d[kk * nr + j] = v;
            }
        }
    }
}

/* Pointwise convs of several images (kn_cpu_conv_batched): a task is one image's product over a
 * slice of its pixels and a part of its output channels, run by one thread alone
 * (kn_gemm_serial_part), where the general path runs image after image, each product split
 * over every thread: at 16 threads that left MobileNetV2's batch of 8 with 16 thin tiles a
 * layer and image (its project convs 0.28-0.77 ms -> 0.13-0.49 by slices on the 16-core
 * host). Maps too small to slice (14x14, 7x7) split their channels instead when images are
 * fewer than threads. Worker w takes a run of tasks, [w * tasks / workers, (w + 1) * tasks /
 * workers), with scratch slot w (the tasks are alike in size): its images' outputs are then one
 * range of planes, the range the depthwise conv after it gives the same thread, where tasks
 * w, w + workers, ... had each thread's planes written by the other threads (at 2 threads and
 * batch 8 a 960-channel 7x7 depthwise conv after such a 1x1 conv ran 0.114 -> 0.080 ms). */
typedef struct batch_job {
    kn_gemm_operand a;
    const float *x;
    const float *scale; /* input channel scales (ScaledConv), scale_stride apart by image */
    int64_t scale_stride;
    float *y;
    kn_epilogue ep;
    int64_t c_in, c_out, os, slice, slices, parts, tasks;
    int64_t workers, scratch_floats;
    float *scratch;
} batch_job;

static void batch_range(void *arg, int64_t begin, int64_t end) {
    const batch_job *j = arg;
    for (int64_t w = begin; w < end; w++)
        for (int64_t t = w * j->tasks / j->workers; t < (w + 1) * j->tasks / j->workers; t++) {
            int64_t part = t % j->parts, s = t / j->parts;
            int64_t n = s / j->slices, j0 = s % j->slices * j->slice;
            int64_t cols = j->os - j0 < j->slice ? j->os - j0 : j->slice;
            int64_t off = n * j->c_out * j->os + j0;
            kn_gemm_operand b = {.p = j->x + n * j->c_in * j->os + j0,
                                 .ld = j->os,
                                 .scale = j->scale != NULL ? j->scale + n * j->scale_stride : NULL};
            kn_epilogue e = j->ep;
            e.residual = j->ep.residual != NULL ? j->ep.residual + off : NULL;
            kn_gemm_serial_part(part, j->parts, j->c_out, cols, j->c_in, 1.0f, &j->a, &b, 0.0f,
                                j->y + off, j->os, &e, j->scratch + w * j->scratch_floats);
        }
}

/* Slices of at least this many pixels (a few NR-wide panels each). */
#define BATCH_MIN_SLICE 128
/* No limit on an image's product: ResNet-50's 1x1 convs (51-103 MFLOP an image), first kept
 * out (5 % slower at batch 8 on 16 threads by slices before the channel parts), ran faster by
 * images at batch 8: 0.07-0.33 ms a layer at 2 threads (layer sum -1.3 %), and at 16 threads
 * 76.2 / 70.6 / 67.3 ms a model against 72.0 / 80.8 / 76.1 in turns. */
/* At most this many channel parts an image: each reads all of the image's input again. */
#define BATCH_MAX_PARTS 8

/* Channel parts (1 to BATCH_MAX_PARTS, at most `units`) for `tasks` image slices on `threads`:
 * the fewest whose rounds of tasks take the least time, in units of a whole slice's product. */
static int64_t batch_parts(int64_t tasks, int64_t threads, int64_t units) {
    int64_t best = 1, max = units < BATCH_MAX_PARTS ? units : BATCH_MAX_PARTS;
    double best_t = (double)((tasks + threads - 1) / threads);
    for (int64_t p = 2; p <= max; p++) {
        double t = (double)((tasks * p + threads - 1) / threads) / (double)p;
        if (t < best_t * 0.999) {
            best = p;
            best_t = t;
        }
    }
    return best;
}

/* Whether rounds of `tasks` alike on `threads` take more than 5/4 of the ideal time (threads
 * left idle for more than a fifth of it). */
static bool leaves_idle(int64_t tasks, int64_t threads) {
    return 4 * ((tasks + threads - 1) / threads) * threads > 5 * tasks;
}

bool kn_cpu_conv_batched(kn_threadpool *pool, const kn_conv_geom *g, const kn_gemm_operand *a,
                         const float *x, const float *scale, int64_t scale_stride,
                         const kn_epilogue *ep, int64_t os, float *y) {
    int threads = kn_threadpool_size(pool);
    if (g->n < 2 || threads < 2)
        return false;
    batch_job j = {.a = *a,
                   .x = x,
                   .scale = scale,
                   .scale_stride = scale_stride,
                   .y = y,
                   .ep = *ep,
                   .c_in = g->c_in,
                   .c_out = g->c_out,
                   .os = os};
    j.slices = g->n >= threads ? 1 : (threads + g->n - 1) / g->n;
    if (j.slices > os / BATCH_MIN_SLICE)
        j.slices = os / BATCH_MIN_SLICE > 1 ? os / BATCH_MIN_SLICE : 1;
    int64_t nr = kn_gemm_nr();
    j.slice = ((os + j.slices - 1) / j.slices + nr - 1) / nr * nr;
    j.slices = (os + j.slice - 1) / j.slice;
    j.tasks = g->n * j.slices;
    j.parts = 1;
    if (j.tasks < threads) { /* maps too small to slice further (14x14, 7x7): split channels */
        int64_t units = (g->c_out + kn_gemm_mr() - 1) / kn_gemm_mr();
        j.parts = batch_parts(j.tasks, threads, units);
        j.tasks *= j.parts;
        if (j.parts == 1 || leaves_idle(j.tasks, threads))
            return false;
    }
    j.workers = j.tasks < threads ? j.tasks : threads;
    kn_gemm_operand b = {.p = x, .ld = os};
    j.scratch_floats = (kn_gemm_serial_scratch(j.slice, a, &b) + 15) / 16 * 16;
    j.scratch = kn_threadpool_scratch(pool, (size_t)(j.workers * j.scratch_floats) * sizeof(float));
    if (j.scratch == NULL)
        return false;
    kn_parallel_for(pool, j.workers, 1, batch_range, &j);
    return true;
}

/* Im2col convs (not pointwise) of several images, each image's product run by threads of its
 * own: a task is one image's product over a part of its output channels (kn_gemm_serial_part)
 * or, for maps with more pixels than the conv has output channels (the 7x7 stem: 64 channels
 * over 12544 pixels), over a slice of its pixels, so that the tasks of an image do not pack
 * the same columns of B again. The general path runs image after image, each split over every
 * thread with a barrier or two an image (at batch 8 on 16 threads ResNet-50's stride-2 3x3
 * convs, 49-196 pixels an image, gained 3.3-4.2x from 2 to 16 threads). A task first splits
 * the input rows its pixels read into column phases (stride 2) or subsamples them (strided 1x1)
 * in its worker's slot, so the copy is read back from the thread's own cache. Worker w takes a
 * run of tasks, [w * tasks / workers, (w + 1) * tasks / workers), with scratch slot w: an
 * image's tasks on one thread where they are more than the threads, and a thread's outputs one
 * range of planes (as in kn_cpu_conv_batched). */
typedef struct images_job {
    const kn_conv_geom *g;
    kn_conv2d c;
    kn_gemm_operand a;
    const float *x;
    float *y;
    kn_epilogue ep; /* bias per row, ldr = os; the residual of image 0 */
    bool split, sub;
    bool by_cols;     /* an image's tasks take slices of its pixels, else parts of its rows */
    int64_t parts;    /* tasks an image */
    int64_t col_unit; /* pixels a slice is a multiple of (the GEMM's panel width) */
    int64_t w2, os, is, kdim, tasks, workers;
    int64_t gemm_floats, slot_floats; /* a slot: the product's scratch, then the input's copy */
    float *scratch;
} images_job;

/* A pack routine over the columns from col0 on: a slice of the pixels as a B of its own. */
typedef struct cols_arg {
    kn_gemm_pack_fn fn;
    void *arg;
    int64_t col0;
} cols_arg;

static void pack_cols(void *arg, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float *dst) {
    const cols_arg *c = arg;
    c->fn(c->arg, k0, kc, c->col0 + n0, nc, dst);
}

/* A task's copy of its image's input (split into column phases, or subsampled): only the input
 * rows its output pixels [col0, col0 + cols) read, a run of rows a channel. The slices of one
 * image (by_cols, at 16 threads over a batch of 8) each copied the whole image before. The rows
 * left out of xs hold another task's data, and nothing reads them: a pixel's taps read the rows
 * of its own output row only. */
static void copy_task_rows(const images_job *j, const float *xg, float *xs, int64_t col0,
                           int64_t cols) {
    const kn_conv2d *c = &j->c;
    int64_t oy0 = col0 / c->ow, oy1 = (col0 + cols - 1) / c->ow + 1; /* output rows [oy0, oy1) */
    if (j->sub) {
        subsample_job sj = {.x = xg, .xs = xs, .c = c};
        for (int64_t ci = 0; ci < j->g->c_in; ci++)
            subsample_rows(&sj, ci * c->oh + oy0, ci * c->oh + oy1);
    } else if (j->split) {
        int64_t y0 = oy0 * c->sh - c->ph, y1 = (oy1 - 1) * c->sh - c->ph + (c->kh - 1) * c->dh + 1;
        y0 = y0 > 0 ? y0 : 0;
        y1 = y1 < c->h ? y1 : c->h;
        split_job sj = {.x = xg, .xs = xs, .w = c->w, .w2 = j->w2};
        for (int64_t ci = 0; ci < j->g->c_in && y1 > y0; ci++)
            split_rows(&sj, ci * c->h + y0, ci * c->h + y1);
    }
}

static void images_range(void *arg, int64_t begin, int64_t end) {
    const images_job *j = arg;
    const kn_conv_geom *g = j->g;
    for (int64_t w = begin; w < end; w++)
        for (int64_t t = w * j->tasks / j->workers; t < (w + 1) * j->tasks / j->workers; t++) {
            int64_t n = t / j->parts, part = t % j->parts;
            const float *xg = j->x + n * g->c_in * j->is;
            float *slot = j->scratch + w * j->slot_floats, *xs = slot + j->gemm_floats;
            int64_t col0 = 0, cols = j->os;
            if (j->by_cols) {
                int64_t units = (j->os + j->col_unit - 1) / j->col_unit;
                col0 = part * units / j->parts * j->col_unit;
                int64_t col1 = (part + 1) * units / j->parts * j->col_unit;
                cols = (col1 < j->os ? col1 : j->os) - col0;
                if (cols <= 0)
                    continue;
            }
            copy_task_rows(j, xg, xs, col0, cols);
            im2col_arg ia = {.x = xg,
                             .g = g,
                             .nr = kn_gemm_nr(),
                             .c = j->c,
                             .xs = j->split ? xs : NULL,
                             .w2 = j->w2};
            cols_arg ca = {.fn = pack_im2col_2d, .arg = &ia, .col0 = col0};
            kn_im2col2d fast;
            if (!j->sub && ia.nr == 32 && fast_im2col(&j->c, xg, ia.xs, j->w2, &fast))
                ca = (cols_arg){.fn = pack_im2col_fast, .arg = &fast, .col0 = col0};
            kn_gemm_operand b = {.pack = pack_cols, .pack_arg = &ca};
            if (j->sub)
                b = (kn_gemm_operand){.p = xs + col0, .ld = j->os};
            int64_t off = n * g->c_out * j->os + col0;
            kn_epilogue e = j->ep;
            e.residual = j->ep.residual != NULL ? j->ep.residual + off : NULL;
            kn_gemm_serial_part(j->by_cols ? 0 : part, j->by_cols ? 1 : j->parts, g->c_out, cols,
                                j->kdim, 1.0f, &j->a, &b, 0.0f, j->y + off, j->os, &e, slot);
        }
}

/* At most this many bytes of input copies over all workers (the pool keeps its scratch): 25.6
 * MB for ResNet-50's layer2.0 conv2 on 16 threads, where a 1024 x 1024 map of 64 channels
 * would take 256 MB a worker. */
#define IMAGES_MAX_COPIES ((size_t)64 << 20)

/* Y = W im2col(X) + epilogue for g->n images of a 2-D conv of one group (split: stride-2
 * columns, sub: a strided 1x1 conv); false (nothing run) when it does not pay or scratch is
 * short, and the caller runs the images one by one. */
static bool conv_images(kn_threadpool *pool, const kn_conv_geom *g, const kn_conv2d *c,
                        const kn_gemm_operand *a, const float *x, const kn_epilogue *ep, bool split,
                        bool sub, float *y) {
    int threads = kn_threadpool_size(pool);
    if (g->n < 2 || threads < 2 || g->group != 1 || g->nsp > 2)
        return false;
    images_job j = {
        .g = g, .c = *c, .a = *a, .x = x, .y = y, .ep = *ep, .split = split, .sub = sub};
    j.os = c->oh * c->ow;
    j.is = c->h * c->w;
    j.kdim = g->c_in * c->kh * c->kw;
    j.col_unit = kn_gemm_nr();
    j.by_cols = j.os > g->c_out;
    int64_t units = j.by_cols ? (j.os + j.col_unit - 1) / j.col_unit
                              : (g->c_out + kn_gemm_mr() - 1) / kn_gemm_mr();
    j.parts = batch_parts(g->n, threads, units);
    j.tasks = g->n * j.parts;
    if (leaves_idle(j.tasks, threads))
        return false;
    j.workers = j.tasks < threads ? j.tasks : threads;
    j.w2 = split ? (c->w + 1) / 2 : 0;
    kn_gemm_operand b = {.pack = pack_cols};
    if (sub)
        b = (kn_gemm_operand){.p = x, .ld = j.os};
    j.gemm_floats = (kn_gemm_serial_scratch(j.os, a, &b) + 15) / 16 * 16;
    int64_t xs_floats = sub ? g->c_in * j.os : split ? g->c_in * c->h * 2 * j.w2 : 0;
    if ((size_t)(j.workers * xs_floats) * sizeof(float) > IMAGES_MAX_COPIES)
        return false; /* large images: one copy at a time, image after image */
    j.slot_floats = j.gemm_floats + (xs_floats + 15) / 16 * 16;
    j.scratch = kn_threadpool_scratch(pool, (size_t)(j.workers * j.slot_floats) * sizeof(float));
    if (j.scratch == NULL)
        return false;
    kn_parallel_for(pool, j.workers, 1, images_range, &j);
    return true;
}

/* The pixel-row GEMM's weights, packed on the first call (several contexts may race to it: one
 * packing is kept, the others freed); NULL (the GEMM path) where they do not fit the conv or
 * memory runs out. */
static const kn_conv_pixels *pixels_weights(conv_state *st, const float *w, const kn_conv_geom *g,
                                            const kn_conv2d *cd) {
    kn_conv_pixels *px = atomic_load_explicit(&st->px, memory_order_acquire);
    if (px == NULL) {
        kn_conv_pixels *mine = NULL;
        if (kn_cpu_conv_pixels_prepare(w, g->c_out, g->c_in, cd->kh, cd->kw, &mine) != KILN_OK)
            return NULL;
        if (atomic_compare_exchange_strong_explicit(&st->px, &px, mine, memory_order_acq_rel,
                                                    memory_order_acquire))
            px = mine;
        else
            kn_cpu_conv_pixels_free(mine);
    }
    return kn_cpu_conv_pixels_fits(px, g->c_out, g->c_in, cd->kh, cd->kw) ? px : NULL;
}

/* The GEMM's packed weights of group gi: packed at prepare, or, for a conv that may take the
 * pixel-row path, by the first run that takes the GEMM (several contexts may race: one packing
 * is kept); NULL where neither (the GEMM then reads the weights as stored). */
static const kn_gemm_packed *gemm_weights(conv_state *st, const float *w, int64_t gi, int64_t cog,
                                          int64_t kdim) {
    if (st->w[gi] != NULL || !st->px_may) /* px_may: one group */
        return st->w[gi];
    kn_gemm_packed *pw = atomic_load_explicit(&st->w_late, memory_order_acquire);
    if (pw == NULL) {
        kn_gemm_packed *mine = NULL;
        if (kn_gemm_pack_a(w, kdim, false, cog, kdim, &mine) != KILN_OK)
            return NULL;
        if (atomic_compare_exchange_strong_explicit(&st->w_late, &pw, mine, memory_order_acq_rel,
                                                    memory_order_acquire))
            pw = mine;
        else
            kn_gemm_packed_free(mine);
    }
    return pw;
}

bool kn_cpu_conv_pixels_packed(const void *state) {
    conv_state *st = (conv_state *)state;
    return st != NULL && atomic_load(&st->px) != NULL;
}

kiln_status kn_cpu_conv_run(kn_kernel_ctx *k) {
    if (k->in[0].dtype == KILN_DTYPE_BFLOAT16)
        return kn_cpu_conv_bf16_run(k,
                                    k->state != NULL ? ((const conv_state *)k->state)->b16 : NULL);
    kn_conv_geom g;
    KN_TRY(kn_conv_geom_init(k->node, &k->in[0].shape, &k->in[1].shape, false, &g));
    kn_epilogue ep = {0};
    KN_TRY(kn_cpu_fused_epilogue(k, 3, &ep));
    const conv_state *st = k->state;
    const float *x = k->in[0].data, *w = k->in[1].data;
    bool bf16 = st != NULL && st->bw != NULL;
    if (st != NULL && st->w32 != NULL)
        w = st->w32;
    else if (k->in[1].dtype != KILN_DTYPE_FLOAT32 && !bf16)
        return kn_error(KILN_ERR_UNSUPPORTED, "Conv weights of dtype %s were not prepared at load",
                        kn_dtype_name(k->in[1].dtype));
    const float *bias = k->n_in > 2 && k->in[2].dtype != 0 ? k->in[2].data : NULL;
    const float *res = ep.residual;
    float *y = k->out[0].data;
    int64_t os = 1, is = 1, kprod = 1;
    bool pointwise = true;
    for (int i = 0; i < g.nsp; i++) {
        os *= g.out[i];
        is *= g.in[i];
        kprod *= g.k[i];
        pointwise =
            pointwise && g.k[i] == 1 && g.stride[i] == 1 && g.pad_b[i] == 0 && g.pad_e[i] == 0;
    }
    if (bf16 && (st->group != g.group || is_depthwise(&g)))
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "Conv: bf16 weights packed for %lld groups, run "
                        "with %lld (depthwise convs stay float32)",
                        (long long)st->group, (long long)g.group);
    if (is_depthwise(&g)) {
        ep.bias = bias;
        return kn_cpu_conv_depthwise(k->pool, &g, x, w, &ep, y);
    }
    if (st != NULL && st->wino != NULL && kn_cpu_wino_applies(&g) &&
        wino_tiles(&g, kn_cpu_wino_tile(st->wino)) >= WINO_MIN_TILES) {
        ep.bias = bias;
        return kn_cpu_conv_winograd(k->pool, st->wino, &g, x, &ep, y);
    }
    /* The pixel-row path takes a batch's images side by side where kn_cpu_conv_pixels_takes
     * says (the stem runs one image at a time): the other convs of a batch keep the GEMM, whose
     * products take images side by side too (kn_cpu_conv_batched, conv_images). */
    if (!bf16 && g.group == 1 && g.nsp == 2 && os > 0 && g.c_out > 0) {
        kn_conv2d cd;
        kn_conv_as_2d(&g, &cd);
        const kn_conv_pixels *px =
            st != NULL && (st->px_may || st->px_later) &&
                    kn_cpu_conv_pixels_takes(&cd, g.c_in, g.c_out, g.n, kn_threadpool_size(k->pool))
                ? pixels_weights((conv_state *)k->state, w, &g, &cd)
                : NULL;
        kn_epilogue e = ep;
        e.bias = bias;
        e.residual = res;
        if (px != NULL)
            return kn_cpu_conv_pixels(k->pool, px, &cd, g.n, x, &e, y);
        if ((g.n == 1 || kn_cpu_conv_stem_batches() || kn_cpu_conv_stem_in_place(&cd)) &&
            kn_cpu_conv_stem_applies(&cd, g.c_in, g.c_out))
            return kn_cpu_conv_stem(k->pool, &cd, g.c_in, g.c_out, g.n, x, w, &e, y);
    }
    int64_t cig = g.c_in / g.group, cog = g.c_out / g.group, kdim = cig * kprod;
    kn_conv2d c2;
    if (g.nsp <= 2)
        kn_conv_as_2d(&g, &c2);
    bool unpadded = true;
    for (int i = 0; i < g.nsp; i++)
        unpadded = unpadded && g.pad_b[i] == 0 && g.pad_e[i] == 0;
    bool sub = !pointwise && g.nsp <= 2 && c2.kh == 1 && c2.kw == 1 && unpadded;
    /* Packed fp32 weights and a stride-2 kernel: phase planes read in place, no im2col. */
    bool packed = st != NULL && st->group == g.group;
    const kn_gemm_packed *w0 =
        packed ? gemm_weights((conv_state *)k->state, w, 0, cog, kdim) : NULL;
    bool strided = !pointwise && !sub && !bf16 && g.nsp == 2 && w0 != NULL &&
                   kn_cpu_conv_strided_applies(&c2, cig, cog, w0);
    bool split = !pointwise && !sub && !strided && g.nsp <= 2 && c2.sw == 2;
    int64_t w2 = split ? (c2.w + 1) / 2 : 0;
    /* Several images of one group: by images over the threads where that pays. */
    if (g.group == 1 && !bf16 && !strided) {
        kn_gemm_operand a = {.p = w, .ld = kdim};
        if (w0 != NULL)
            a = (kn_gemm_operand){.packed = w0};
        kn_epilogue e = ep;
        e.bias = bias;
        e.bias_per_row = true;
        e.ldr = os;
        if (pointwise ? kn_cpu_conv_batched(k->pool, &g, &a, x, NULL, 0, &e, os, y)
                      : conv_images(k->pool, &g, &c2, &a, x, &e, split, sub, y))
            return KILN_OK;
    }
    if (strided && g.group == 1) { /* a batch's images side by side, in one job */
        kn_epilogue e = ep;
        e.bias = bias;
        e.bias_per_row = true;
        e.residual = res;
        e.ldr = os;
        return kn_cpu_conv_strided(k->pool, &c2, cig, g.n, x, w0, &e, y, g.c_out * os);
    }
    float *xs = NULL;
    if (split || sub) {
        size_t floats = sub ? (size_t)(cig * os) : (size_t)(cig * c2.h * 2 * w2);
        xs = kn_aligned_alloc(floats * sizeof(float), 64);
        if (xs == NULL)
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory in Conv");
    }
    kiln_status rc = KILN_OK;
    for (int64_t n = 0; n < g.n && rc == KILN_OK; n++) {
        for (int64_t gi = 0; gi < g.group && rc == KILN_OK; gi++) {
            const float *xg = x + (n * g.c_in + gi * cig) * is;
            kn_gemm_operand a = {.p = w + gi * cog * kdim, .ld = kdim};
            const kn_gemm_packed *pw = gi == 0 ? w0 : packed ? st->w[gi] : NULL;
            if (pw != NULL)
                a = (kn_gemm_operand){.packed = pw};
            int nr = bf16 ? KN_BF16_NR : kn_gemm_nr();
            im2col_arg ia = {.x = xg, .g = &g, .nr = nr, .c = c2, .xs = xs, .w2 = w2};
            if (split && !strided) {
                split_job sj = {.x = xg, .xs = xs, .w = c2.w, .w2 = w2};
                kn_parallel_for(k->pool, cig * c2.h, 16, split_rows, &sj);
            }
            kn_gemm_operand b = {.p = xg, .ld = is};
            kn_im2col2d fast;
            if (sub) {
                subsample_job sj = {.x = xg, .xs = xs, .c = &c2};
                kn_parallel_for(k->pool, cig * c2.oh, 16, subsample_rows, &sj);
                b = (kn_gemm_operand){.p = xs, .ld = os};
            } else if (!pointwise)
                b = (kn_gemm_operand){.pack = g.nsp <= 2 ? pack_im2col_2d : pack_im2col_nd,
                                      .pack_arg = &ia};
            if (!pointwise && !sub && g.nsp <= 2 && nr == 32 && fast_im2col(&c2, xg, xs, w2, &fast))
                b = (kn_gemm_operand){.pack = pack_im2col_fast, .pack_arg = &fast};
            kn_epilogue e = ep;
            int64_t off = (n * g.c_out + gi * cog) * os;
            e.bias = bias != NULL ? bias + gi * cog : NULL;
            e.bias_per_row = true;
            e.residual = res != NULL ? res + off : NULL;
            e.ldr = os;
            if (strided) {
                rc = kn_cpu_conv_strided(k->pool, &c2, cig, 1, xg, pw, &e, y + off, 0);
            } else if (bf16) {
                kn_bf16_operand ba = {.packed = st->bw[gi]};
                kn_bf16_operand bb = {.p = b.p, .ld = b.ld, .pack = b.pack, .pack_arg = b.pack_arg};
                if (b.pack == pack_im2col_fast) /* straight into pairs */
                    bb = (kn_bf16_operand){.pack_pairs = pack_im2col_pairs, .pack_arg = &fast};
                rc = kn_gemm_bf16(k->pool, cog, os, kdim, &ba, &bb, y + off, os, &e);
            } else {
                rc = kn_gemm(k->pool, cog, os, kdim, 1.0f, &a, &b, 0.0f, y + off, os, &e);
            }
        }
    }
    kn_free(xs);
    return rc;
}
