/* Conv on bfloat16 activations (X, the residual Z and Y in bf16; see conv.h) as an implicit
 * GEMM: rows are output pixels, columns output channels, K runs over the taps (r, s) and, in
 * each, the input channels, 32 at a time (a K block: one AMX tile row of 64 bytes). The
 * weights are packed once into panels of 32 output channels, the layout the bf16 GEMM's B
 * panels have. A is never packed: its tiles are loaded from pixels stored with their channels
 * contiguous, so that every tap is a constant offset from the output pixel's position. For
 * that the input is zero-padded and split into stride_h x stride_w phase planes (only the
 * phases some tap reads), Wq pixels wide: output (oh, ow) is virtual row oh * Wq + ow, and tap
 * (r, s) reads phase ((r * dh) % sh, (s * dw) % sw) at that row plus
 * ((r * dh) / sh) * Wq + (s * dw) / sw. The Wq - OW virtual rows past each output row are
 * computed and dropped. An unpadded 1x1 stride-1 conv on NHWC input with channels a multiple
 * of 32 reads X itself, every image one run of rows. An NCHW input is transposed into the
 * planes, an NCHW output written with strided stores: slower, the same results.
 *
 * Few input channels (the stem's 3) padded to 32 would waste most of K: 7x7 taps on 3 channels
 * make K 49 x 32 = 1568 for 147 useful products. There the width taps are folded into the
 * channels instead: a plane row holds, for each output column ow of one padded input row, the
 * kw taps' channels x[ow * sw - pw + s * dw][c] in (s, c) order, zero outside the image and up
 * to cp (kw * c_in rounded up to 32), and the conv becomes kh x 1 with stride (sh, 1) over it:
 * K = kh x cp (7 x 32 = 224 for the stem). Its planes are the row phases only, ow pixels wide,
 * so no virtual row is dropped.
 *
 * A task is one block of 32 virtual rows and 32 output channels over the whole of K, held in
 * four AMX tiles (or, on the portable path, computed by loops the compiler vectorizes from bf16
 * widened to fp32); its epilogue adds the bias and residual, applies the activation and rounds
 * to bf16 (nearest even) while storing the valid rows and channels. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math", "fp-contract=fast")
#endif

#include "backend/cpu/arch/amx.h"
#include "backend/cpu/arch/conv_bf16_amx.h"
#include "backend/cpu/math/gemm_bf16.h"
#include "backend/cpu/nn/conv.h"
#include "core/alloc.h"
#include "core/tensor.h"

#include <math.h>
#include <string.h>

#define BLK 32 /* virtual rows of a block, output channels of a panel, channels of a K block */
#define KBW KN_CONV_BF16_KBLOCK_WORDS

struct kn_conv_bf16 {
    int64_t c_out, c_in, cp; /* cp: channels of an A pixel, c_in or (folded) kw * c_in, to BLK */
    int64_t kh, kw;
    bool fold;               /* width taps folded into the channels */
    int64_t panels, kblocks; /* kblocks: kh * (fold ? 1 : kw) * cp / BLK */
    uint32_t *w;             /* panels x kblocks x 16 pair rows x BLK columns */
};

/* kiln_nhwc = {in_mask, out_mask} (passes/layout_nhwc.c); both 0 when absent. */
static kiln_status nhwc_masks(const kn_node *node, int64_t *in, int64_t *out) {
    *in = *out = 0;
    const kn_attr *a = kn_node_attr(node, "kiln_nhwc");
    if (a == NULL)
        return KILN_OK;
    if (a->type != KN_ATTR_INTS || a->n != 2)
        return kn_error(KILN_ERR_MODEL, "attribute 'kiln_nhwc' must be two ints");
    *in = a->ints[0];
    *out = a->ints[1];
    return KILN_OK;
}

static inline int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}

/* Weight (k, c, r, s) of a [K, C, R, S] tensor, or of one stored [K, R, S, C] (permuted). */
static inline uint32_t weight_at(const kn_conv_bf16 *p, const uint16_t *w, bool permuted, int64_t k,
                                 int64_t c, int64_t r, int64_t s) {
    if (k >= p->c_out || c >= p->c_in)
        return 0;
    int64_t i = permuted ? ((k * p->kh + r) * p->kw + s) * p->c_in + c
                         : ((k * p->c_in + c) * p->kh + r) * p->kw + s;
    return w[i];
}

/* Fold when it shortens K: only for c_in under a block (past one, padding wastes under half,
 * and the folded plane costs kw times X). */
static bool fold_width(int64_t c_in, int64_t kw) {
    int64_t cp = (c_in + BLK - 1) / BLK * BLK, fc = (kw * c_in + BLK - 1) / BLK * BLK;
    return kw > 1 && c_in < BLK && fc < kw * cp;
}

/* The taps of a plane pixel: kw when folded, else 1. */
static inline int64_t pixel_taps(const kn_conv_bf16 *p) {
    return p->fold ? p->kw : 1;
}

/* Weight (k, kk) of K block kb: kk the channel in the block's BLK, (s, c) pairs when folded. */
static uint32_t kblock_weight(const kn_conv_bf16 *p, const uint16_t *w, bool permuted, int64_t k,
                              int64_t kb, int64_t kk) {
    int64_t cblocks = p->cp / BLK, tap = kb / cblocks, ch = kb % cblocks * BLK + kk;
    if (!p->fold)
        return weight_at(p, w, permuted, k, ch, tap / p->kw, tap % p->kw);
    if (ch >= p->kw * p->c_in)
        return 0;
    return weight_at(p, w, permuted, k, ch % p->c_in, tap, ch / p->c_in);
}

static kiln_status pack_weights(const kn_node *node, const kn_tensor *w, kn_conv_bf16 **out) {
    int64_t in_mask, out_mask;
    KN_TRY(nhwc_masks(node, &in_mask, &out_mask));
    const kn_shape *s = &w->shape;
    if (w->dtype != KILN_DTYPE_BFLOAT16 || w->data == NULL || (s->rank != 3 && s->rank != 4))
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "Conv on bfloat16 activations needs bfloat16 weights of rank 3 or 4");
    kn_conv_bf16 *p = kn_calloc(1, sizeof *p);
    if (p == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory packing conv weights");
    p->c_out = s->d[0];
    p->c_in = s->d[1];
    p->kh = s->rank == 4 ? s->d[2] : 1;
    p->kw = s->d[s->rank - 1];
    p->fold = fold_width(p->c_in, p->kw);
    p->cp = ((p->fold ? p->kw : 1) * p->c_in + BLK - 1) / BLK * BLK;
    p->panels = (p->c_out + BLK - 1) / BLK;
    p->kblocks = p->kh * (p->fold ? 1 : p->kw) * (p->cp / BLK);
    size_t words = (size_t)(p->panels * p->kblocks) * KBW;
    p->w = kn_aligned_alloc((words > 0 ? words : 1) * sizeof *p->w, 64);
    if (p->w == NULL) {
        kn_free(p);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory packing conv weights");
    }
    bool permuted = (in_mask & 2) != 0;
    const uint16_t *wd = w->data;
    uint32_t *d = p->w;
    for (int64_t pn = 0; pn < p->panels; pn++)
        for (int64_t kb = 0; kb < p->kblocks; kb++)
            for (int64_t i = 0; i < KBW / BLK; i++)
                for (int64_t j = 0; j < BLK; j++) {
                    int64_t k = pn * BLK + j;
                    *d++ = kblock_weight(p, wd, permuted, k, kb, 2 * i) |
                           kblock_weight(p, wd, permuted, k, kb, 2 * i + 1) << 16;
                }
    *out = p;
    return KILN_OK;
}

kiln_status kn_cpu_conv_bf16_prepare(const kn_node *node, const kn_tensor *w, kn_conv_bf16 **out) {
    *out = NULL;
    const kn_shape *s = &w->shape;
    if (kn_attr_int(node, "group", 1) != 1 || w->dtype != KILN_DTYPE_BFLOAT16 || w->data == NULL ||
        (s->rank != 3 && s->rank != 4))
        return KILN_OK; /* run reports what it does not take */
    return pack_weights(node, w, out);
}

void kn_cpu_conv_bf16_free(kn_conv_bf16 *p) {
    if (p == NULL)
        return;
    kn_free(p->w);
    kn_free(p);
}

/* A tap's phase plane: row phase a, column phase b. */
typedef struct phase {
    int64_t a, b;
} phase;

typedef struct conv_job {
    const kn_conv_bf16 *p;
    kn_conv2d c;
    int64_t n;
    bool x_nhwc, y_nhwc, z_nhwc;
    const uint16_t *x;
    /* A: the phase planes of every image (img_elems apart), or X itself (direct) */
    const uint16_t *a;
    int64_t wq, hq, img_elems;
    const phase *phases;
    int64_t n_phases;
    /* Virtual images (the images; one when direct, all images one run of rows), the output rows
     * of one, its virtual rows (voh * wq) and their blocks of BLK. */
    int64_t vimages, voh, rows, rblocks;
    const uint16_t *tail; /* direct: the last partial block, padded with zero pixels; or NULL */
    const int64_t *aoff;  /* per K block: elements from a block's first pixel to its tile */
    const float *bias;    /* c_out, or NULL */
    const uint16_t *res;  /* or NULL */
    int act;
    bool clamp;
    float lo, hi, alpha, beta;
    uint16_t *y;
    bool amx;
    /* Tasks run panel by panel (each panel's weights against every block of rows, read once),
     * else block by block (each block's pixels against every panel): whichever rereads the
     * smaller operand. */
    bool panels_outer;
} conv_job;

/* One row of phase plane `ph` of image n: wq pixels of cp channels. */
static void plane_row(const conv_job *j, int64_t n, int64_t ph, int64_t i, uint16_t *dst) {
    const kn_conv2d *c = &j->c;
    int64_t cin = j->p->c_in, cp = j->p->cp;
    int64_t a = j->phases[ph].a, b = j->phases[ph].b;
    int64_t yy = a + i * c->sh - c->ph;
    int64_t lo = 0, hi = 0; /* pixels [lo, hi) of the row fall inside the input */
    if (yy >= 0 && yy < c->h) {
        lo = c->pw > b ? (c->pw - b + c->sw - 1) / c->sw : 0;
        int64_t end = c->w + c->pw - b;
        hi = end > 0 ? (end + c->sw - 1) / c->sw : 0;
        hi = min64(hi, j->wq);
        lo = min64(lo, hi);
    }
    memset(dst, 0, (size_t)(lo * cp) * sizeof *dst);
    memset(dst + hi * cp, 0, (size_t)((j->wq - hi) * cp) * sizeof *dst);
    if (hi == lo)
        return;
    int64_t x0 = b + lo * c->sw - c->pw;
    if (j->x_nhwc) {
        const uint16_t *src = j->x + ((n * c->h + yy) * c->w + x0) * cin;
        if (c->sw == 1 && cp == cin) {
            memcpy(dst + lo * cp, src, (size_t)((hi - lo) * cin) * sizeof *dst);
            return;
        }
        for (int64_t q = lo; q < hi; q++, src += c->sw * cin) {
            memcpy(dst + q * cp, src, (size_t)cin * sizeof *dst);
            memset(dst + q * cp + cin, 0, (size_t)(cp - cin) * sizeof *dst);
        }
        return;
    }
    memset(dst + lo * cp, 0, (size_t)((hi - lo) * cp) * sizeof *dst);
    for (int64_t ch = 0; ch < cin; ch++) {
        const uint16_t *src = j->x + ((n * cin + ch) * c->h + yy) * c->w + x0;
        uint16_t *d = dst + lo * cp + ch;
        for (int64_t q = 0; q < hi - lo; q++)
            d[q * cp] = src[q * c->sw];
    }
}

/* The output columns q in [0, ow) whose tap at column offset off (s * dw - pw) falls inside
 * the input row: [*lo, *hi). */
static void tap_columns(const kn_conv2d *c, int64_t off, int64_t *lo, int64_t *hi) {
    *lo = off >= 0 ? 0 : (-off + c->sw - 1) / c->sw;
    *hi = c->w - off > 0 ? min64((c->w - off + c->sw - 1) / c->sw, c->ow) : 0;
    *lo = min64(*lo, *hi);
}

/* n pixels of cp channels, pixel q copied from src + q * step with the channels past `keep`
 * masked to zero (cp a multiple of BLK; src readable for cp channels at each pixel). */
KN_CLONES static void fold_copy(uint16_t *dst, const uint16_t *src, int64_t step, int64_t n,
                                int64_t cp, int64_t keep) {
    uint16_t mask[BLK];
    for (int64_t cb = 0; cb < cp; cb += BLK) {
        for (int k = 0; k < BLK; k++)
            mask[k] = cb + k < keep ? 0xffffu : 0;
        for (int64_t q = 0; q < n; q++) {
            const uint16_t *s = src + q * step + cb;
            uint16_t *d = dst + q * cp + cb;
            for (int k = 0; k < BLK; k++)
                d[k] = s[k] & mask[k];
        }
    }
}

/* Pixels [lo, hi) of a folded NHWC row `row` (the input row yy of image n), tap by tap. */
static void fold_pixels_nhwc(const conv_job *j, const uint16_t *row, int64_t lo, int64_t hi,
                             uint16_t *dst) {
    const kn_conv2d *c = &j->c;
    int64_t cin = j->p->c_in, cp = j->p->cp;
    memset(dst + lo * cp, 0, (size_t)((hi - lo) * cp) * sizeof *dst);
    for (int64_t s = 0; s < j->p->kw; s++) {
        int64_t off = s * c->dw - c->pw, a, b;
        tap_columns(c, off, &a, &b);
        for (int64_t q = a > lo ? a : lo; q < min64(b, hi); q++)
            memcpy(dst + q * cp + s * cin, row + (q * c->sw + off) * cin,
                   (size_t)cin * sizeof *dst);
    }
}

/* Row i of folded plane `ph` of image n: ow pixels, each the kw taps' channels in (s, c) order,
 * zero outside the image and up to cp. Where every tap of a pixel is inside the row and dw is
 * 1 its values are one run of NHWC X: copied a whole block at a time, the tail masked off. */
static void fold_row(const conv_job *j, int64_t n, int64_t ph, int64_t i, uint16_t *dst) {
    const kn_conv2d *c = &j->c;
    int64_t cin = j->p->c_in, cp = j->p->cp, kw = j->p->kw;
    int64_t yy = j->phases[ph].a + i * c->sh - c->ph;
    if (yy < 0 || yy >= c->h) {
        memset(dst, 0, (size_t)(c->ow * cp) * sizeof *dst);
        return;
    }
    if (j->x_nhwc) {
        int64_t base = (n * c->h + yy) * c->w * cin, total = j->n * c->h * c->w * cin;
        const uint16_t *row = j->x + base;
        int64_t lo = 0, hi = 0, a, b;
        if (c->dw == 1) {
            tap_columns(c, -c->pw, &lo, &hi);
            tap_columns(c, kw - 1 - c->pw, &a, &b);
            lo = lo > a ? lo : a;
            hi = min64(hi, b);
            while (hi > lo && base + ((hi - 1) * c->sw - c->pw) * cin + cp > total)
                hi--;
            lo = min64(lo, hi);
        }
        fold_pixels_nhwc(j, row, 0, lo, dst);
        if (hi > lo)
            fold_copy(dst + lo * cp, row + (lo * c->sw - c->pw) * cin, c->sw * cin, hi - lo, cp,
                      kw * cin);
        fold_pixels_nhwc(j, row, hi, c->ow, dst);
        return;
    }
    memset(dst, 0, (size_t)(c->ow * cp) * sizeof *dst);
    for (int64_t s = 0; s < kw; s++) {
        int64_t off = s * c->dw - c->pw, lo, hi;
        tap_columns(c, off, &lo, &hi);
        for (int64_t ch = 0; ch < cin; ch++) {
            const uint16_t *src = j->x + ((n * cin + ch) * c->h + yy) * c->w + off;
            uint16_t *d = dst + s * cin + ch;
            for (int64_t q = lo; q < hi; q++)
                d[q * cp] = src[q * c->sw];
        }
    }
}

static void plane_rows(void *arg, int64_t begin, int64_t end) {
    const conv_job *j = arg;
    for (int64_t t = begin; t < end; t++) {
        int64_t i = t % j->hq, ph = t / j->hq % j->n_phases, n = t / j->hq / j->n_phases;
        uint16_t *dst = (uint16_t *)j->a + n * j->img_elems + (ph * j->hq + i) * j->wq * j->p->cp;
        if (j->p->fold)
            fold_row(j, n, ph, i, dst);
        else
            plane_row(j, n, ph, i, dst);
    }
}

/* The portable block: rows x BLK results in c (BLK a row) from bf16 widened to fp32. */
KN_CLONES static void block_portable(const uint16_t *a, int64_t cp, const int64_t *aoff,
                                     const uint32_t *b, int64_t kblocks, int rows, float *c) {
    memset(c, 0, (size_t)(BLK * BLK) * sizeof *c);
    for (int64_t kb = 0; kb < kblocks; kb++) {
        float b0[KBW / BLK][BLK], b1[KBW / BLK][BLK];
        const uint32_t *bk = b + kb * KBW;
        for (int i = 0; i < KBW / BLK; i++)
            for (int q = 0; q < BLK; q++) {
                uint32_t v = bk[i * BLK + q], lo = v << 16, hi = v & 0xffff0000u;
                memcpy(&b0[i][q], &lo, 4);
                memcpy(&b1[i][q], &hi, 4);
            }
        for (int r = 0; r < rows; r++) {
            const uint16_t *ar = a + aoff[kb] + r * cp;
            float acc[BLK];
            memcpy(acc, c + r * BLK, sizeof acc);
            for (int i = 0; i < KBW / BLK; i++) {
                float x0 = kn_bf16_widen(ar[2 * i]), x1 = kn_bf16_widen(ar[2 * i + 1]);
                for (int q = 0; q < BLK; q++)
                    acc[q] += x0 * b0[i][q] + x1 * b1[i][q];
            }
            memcpy(c + r * BLK, acc, sizeof acc);
        }
    }
}

/* Bias, a residual row (res_stride apart, or NULL) and the clamp on nr results in place. */
KN_CLONES static void row_add(float *cr, const float *bias, const uint16_t *res, int64_t res_stride,
                              int nr, float lo, float hi) {
    if (res != NULL && res_stride == 1) {
        for (int q = 0; q < nr; q++) {
            float v = cr[q] + bias[q] + kn_bf16_widen(res[q]);
            v = v < lo ? lo : v;
            cr[q] = v > hi ? hi : v;
        }
        return;
    }
    for (int q = 0; q < nr; q++) {
        float v = cr[q] + bias[q] + (res != NULL ? kn_bf16_widen(res[q * res_stride]) : 0.0f);
        v = v < lo ? lo : v;
        cr[q] = v > hi ? hi : v;
    }
}

KN_CLONES static void row_store(const float *cr, uint16_t *y, int64_t y_stride, int nr) {
    if (y_stride == 1) {
        for (int q = 0; q < nr; q++)
            y[q] = kn_bf16_round(cr[q]);
        return;
    }
    for (int q = 0; q < nr; q++)
        y[q * y_stride] = kn_bf16_round(cr[q]);
}

/* Element offset of output pixel (n, oh, ow), channel j0, in an NHWC or NCHW tensor of the
 * output's shape, and the stride between channels. */
static int64_t out_at(const conv_job *j, bool nhwc, int64_t n, int64_t oh, int64_t ow, int64_t j0,
                      int64_t *stride) {
    const kn_conv2d *c = &j->c;
    int64_t os = c->oh * c->ow;
    *stride = nhwc ? 1 : os;
    return nhwc ? ((n * c->oh + oh) * c->ow + ow) * j->p->c_out + j0
                : (n * j->p->c_out + j0) * os + oh * c->ow + ow;
}

/* The valid rows of block (vi, q0), rows [0, mrows) (those of output columns < ow), and where
 * their channel j0 goes in Y and comes from in the residual; returns their count. Without
 * dropped rows, NHWC, a block's rows are consecutive pixels. */
static int block_rows(const conv_job *j, int64_t vi, int64_t q0, int mrows, int64_t j0,
                      int32_t *row, int64_t *yoff, int64_t *zoff, int64_t *ys, int64_t *zs) {
    const kn_conv2d *cv = &j->c;
    *ys = *zs = 1;
    if (j->wq == cv->ow && j->y_nhwc && (j->res == NULL || j->z_nhwc)) {
        int64_t v0 = vi * cv->oh * cv->ow + q0;
        for (int r = 0; r < mrows; r++) {
            row[r] = r;
            yoff[r] = zoff[r] = (v0 + r) * j->p->c_out + j0;
        }
        return mrows;
    }
    int rows = 0;
    int64_t ohv = q0 / j->wq, ow = q0 % j->wq, n = vi + ohv / cv->oh, oh = ohv % cv->oh;
    for (int r = 0; r < mrows; r++) {
        if (ow < cv->ow) {
            row[rows] = r;
            yoff[rows] = out_at(j, j->y_nhwc, n, oh, ow, j0, ys);
            zoff[rows++] = out_at(j, j->z_nhwc, n, oh, ow, j0, zs);
        }
        if (++ow == j->wq) {
            ow = 0;
            if (++oh == cv->oh) {
                oh = 0;
                n++;
            }
        }
    }
    return rows;
}

/* The epilogue of block (vi, q0) x channels [j0, j0 + nr), rows [0, mrows) of c: the valid
 * rows get bias, residual and activation and are stored. */
static void block_epilogue(const conv_job *j, float *c, int64_t vi, int64_t q0, int mrows,
                           int64_t j0, int nr) {
    float bias[BLK] = {0};
    if (j->bias != NULL)
        memcpy(bias, j->bias + j0, (size_t)nr * sizeof *bias);
    int32_t row[BLK];
    int64_t yoff[BLK], zoff[BLK], ys, zs;
    int rows = block_rows(j, vi, q0, mrows, j0, row, yoff, zoff, &ys, &zs);
    bool act = j->act != KN_ACT_NONE && !j->clamp;
    if (j->amx && ys == 1 && (j->res == NULL || zs == 1)) {
        kn_conv_bf16_rows rr = {.c = c,
                                .n = rows,
                                .nr = nr,
                                .row = row,
                                .yoff = yoff,
                                .zoff = zoff,
                                .y = j->y,
                                .z = j->res,
                                .bias = bias,
                                .lo = j->lo,
                                .hi = j->hi,
                                .add = true,
                                .store = !act};
        kn_conv_bf16_rows_avx512(&rr);
        if (act) {
            kn_act_apply_rows(j->act, j->alpha, j->beta, c, BLK, mrows, nr);
            rr.add = false;
            rr.store = true;
            kn_conv_bf16_rows_avx512(&rr);
        }
        return;
    }
    for (int i = 0; i < rows; i++)
        row_add(c + row[i] * BLK, bias, j->res != NULL ? j->res + zoff[i] : NULL, zs, nr, j->lo,
                j->hi);
    if (act)
        kn_act_apply_rows(j->act, j->alpha, j->beta, c, BLK, mrows, nr);
    for (int i = 0; i < rows; i++)
        row_store(c + row[i] * BLK, j->y + yoff[i], ys, nr);
}

/* A block's place: virtual image, first virtual row, first channel, and its extent. */
typedef struct block_at {
    int64_t vi, q0, j0;
    int mrows, nr;
} block_at;

static block_at task_block(const conv_job *j, int64_t t) {
    const kn_conv_bf16 *p = j->p;
    int64_t blocks = j->vimages * j->rblocks;
    int64_t pn = j->panels_outer ? t / blocks : t % p->panels;
    int64_t blk = j->panels_outer ? t % blocks : t / p->panels;
    block_at at = {.vi = blk / j->rblocks, .q0 = blk % j->rblocks * BLK, .j0 = pn * BLK};
    at.mrows = (int)min64(BLK, j->rows - at.q0);
    at.nr = (int)min64(BLK, p->c_out - at.j0);
    return at;
}

/* Each task's block into one of two buffers, the epilogue of a block run after the products of
 * the next are issued: the AVX-512 epilogue then overlaps the tile unit's work. */
static void run_tasks(void *arg, int64_t begin, int64_t end) {
    const conv_job *j = arg;
    const kn_conv_bf16 *p = j->p;
    float c[2][BLK * BLK] __attribute__((aligned(64)));
    block_at prev = {0};
    if (j->amx)
        kn_cpu_amx_begin();
    for (int64_t t = begin; t < end; t++) {
        block_at at = task_block(j, t);
        const uint16_t *a = j->a + at.vi * j->img_elems + at.q0 * p->cp;
        if (j->tail != NULL && at.mrows < BLK)
            a = j->tail;
        const uint32_t *b = p->w + at.j0 / BLK * p->kblocks * KBW;
        float *ct = c[(t - begin) & 1];
        if (j->amx)
            kn_conv_bf16_amx_block(at.mrows > 16 ? 2 : 1, at.nr > 16 ? 2 : 1, a,
                                   p->cp * (int64_t)sizeof *a, j->aoff, b, p->kblocks, ct);
        else
            block_portable(a, p->cp, j->aoff, b, p->kblocks, at.mrows, ct);
        if (t > begin)
            block_epilogue(j, c[(t - begin - 1) & 1], prev.vi, prev.q0, prev.mrows, prev.j0,
                           prev.nr);
        prev = at;
    }
    if (end > begin)
        block_epilogue(j, c[(end - begin - 1) & 1], prev.vi, prev.q0, prev.mrows, prev.j0, prev.nr);
    if (j->amx)
        kn_cpu_amx_end();
}

/* The phases the taps read, and each K block's offset from a block's first pixel. */
static void tap_offsets(conv_job *j, phase *phases, int64_t *aoff) {
    const kn_conv2d *c = &j->c;
    const kn_conv_bf16 *p = j->p;
    int64_t cblocks = p->cp / BLK, plane = j->hq * j->wq * p->cp, kw = p->kw / pixel_taps(p);
    j->n_phases = 0;
    for (int64_t r = 0; r < p->kh; r++)
        for (int64_t s = 0; s < kw; s++) {
            int64_t a = r * c->dh % c->sh, b = s * c->dw % c->sw, ph = 0;
            while (ph < j->n_phases && (phases[ph].a != a || phases[ph].b != b))
                ph++;
            if (ph == j->n_phases)
                phases[j->n_phases++] = (phase){a, b};
            int64_t pix = r * c->dh / c->sh * j->wq + s * c->dw / c->sw;
            for (int64_t cb = 0; cb < cblocks; cb++)
                aoff[(r * kw + s) * cblocks + cb] = ph * plane + pix * p->cp + cb * BLK;
        }
}

static kiln_status check_inputs(const kn_kernel_ctx *k, const kn_conv_geom *g, bool residual) {
    if (g->group != 1 || g->nsp > 2)
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "Conv on bfloat16 activations takes 1-D and 2-D convs of one group "
                        "(this one: %d-D, group %lld)",
                        g->nsp, (long long)g->group);
    if (k->in[1].dtype != KILN_DTYPE_BFLOAT16 || k->out[0].dtype != KILN_DTYPE_BFLOAT16)
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "Conv on bfloat16 activations: weights (%s) and "
                        "output (%s) must be bfloat16 too",
                        kn_dtype_name(k->in[1].dtype), kn_dtype_name(k->out[0].dtype));
    if (k->n_in > 2 && k->in[2].data != NULL && k->in[2].dtype != KILN_DTYPE_BFLOAT16 &&
        k->in[2].dtype != KILN_DTYPE_FLOAT32)
        return kn_error(KILN_ERR_UNSUPPORTED, "Conv on bfloat16 activations: bias of dtype %s",
                        kn_dtype_name(k->in[2].dtype));
    if (residual && k->in[3].dtype != KILN_DTYPE_BFLOAT16)
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "Conv on bfloat16 activations: residual of dtype %s (bfloat16 needed)",
                        kn_dtype_name(k->in[3].dtype));
    return KILN_OK;
}

/* The geometry of A: phase planes, or X itself when direct. */
static void plan_source(conv_job *j, const kn_conv_geom *g, bool direct) {
    const kn_conv2d *c = &j->c;
    const kn_conv_bf16 *p = j->p;
    if (direct) {
        j->wq = c->w;
        j->hq = c->h;
        j->vimages = 1;
        j->voh = g->n * c->oh;
        j->img_elems = 0;
    } else {
        j->wq = p->fold ? c->ow : c->ow + (p->kw - 1) * c->dw / c->sw;
        j->hq = c->oh + (p->kh - 1) * c->dh / c->sh;
        j->vimages = g->n;
        j->voh = c->oh;
    }
    j->rows = j->voh * j->wq;
    j->rblocks = (j->rows + BLK - 1) / BLK;
}

/* The scratch of one run: phase planes (with zero pixels after them for the last block's tile
 * over-reads: at most BLK + wq - ow pixels past the last plane), the direct path's tail
 * block, the K blocks' offsets, the bias in fp32 and the phases. */
typedef struct scratch {
    uint16_t *planes, *tail;
    int64_t plane_elems;
    int64_t *aoff;
    float *bias;
    phase *phases;
    uint8_t *own; /* allocated here when the pool's scratch is short, else NULL */
} scratch;

static size_t aligned64(size_t bytes) {
    return (bytes + 63) / 64 * 64;
}

static kiln_status scratch_get(const conv_job *j, kn_threadpool *pool, bool direct, scratch *s) {
    const kn_conv_bf16 *p = j->p;
    int64_t taps = p->kh * p->kw / pixel_taps(p);
    int64_t phases = min64(taps, j->c.sh * (p->fold ? 1 : j->c.sw));
    s->plane_elems = 0;
    if (!direct)
        s->plane_elems = j->n * phases * j->hq * j->wq * p->cp + (2 * BLK + j->wq) * p->cp;
    size_t plane_bytes = aligned64((size_t)s->plane_elems * sizeof(uint16_t));
    size_t tail_bytes = direct ? aligned64((size_t)(BLK * p->cp) * sizeof(uint16_t)) : 0;
    size_t aoff_bytes = aligned64((size_t)p->kblocks * sizeof(int64_t));
    size_t bias_bytes = aligned64((size_t)p->c_out * sizeof(float));
    size_t bytes = plane_bytes + tail_bytes + aoff_bytes + bias_bytes + taps * sizeof(phase);
    s->own = NULL;
    uint8_t *buf = kn_threadpool_scratch(pool, bytes);
    if (buf == NULL) {
        buf = s->own = kn_aligned_alloc(bytes, 64);
        if (s->own == NULL)
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory in Conv (bfloat16)");
    }
    s->planes = (uint16_t *)buf;
    s->tail = (uint16_t *)(buf += plane_bytes);
    s->aoff = (int64_t *)(buf += tail_bytes);
    s->bias = (float *)(buf += aoff_bytes);
    s->phases = (phase *)(buf + bias_bytes);
    return KILN_OK;
}

/* A's source: the phase planes built from X, or for the direct path X with its last partial
 * block copied out (tiles read 32 pixels). */
static void source_fill(conv_job *j, kn_threadpool *pool, bool direct, const scratch *s) {
    int64_t cp = j->p->cp;
    if (direct) {
        int64_t q0 = (j->rblocks - 1) * BLK, left = j->rows - q0;
        j->a = j->x;
        if (left < BLK) {
            memcpy(s->tail, j->x + q0 * cp, (size_t)(left * cp) * sizeof *s->tail);
            memset(s->tail + left * cp, 0, (size_t)((BLK - left) * cp) * sizeof *s->tail);
            j->tail = s->tail;
        }
        return;
    }
    j->a = s->planes;
    j->img_elems = j->n_phases * j->hq * j->wq * cp;
    int64_t used = j->n * j->img_elems;
    memset(s->planes + used, 0, (size_t)(s->plane_elems - used) * sizeof *s->planes);
    kn_parallel_for(pool, j->n * j->n_phases * j->hq, 4, plane_rows, j);
}

static kiln_status run_prepared(kn_kernel_ctx *k, const kn_conv_geom *g, const kn_epilogue *ep,
                                const kn_conv_bf16 *p) {
    int64_t in_mask, out_mask;
    KN_TRY(nhwc_masks(k->node, &in_mask, &out_mask));
    bool clip = ep->act == KN_ACT_CLIP, relu = ep->act == KN_ACT_RELU;
    conv_job j = {.p = p,
                  .n = g->n,
                  .x_nhwc = (in_mask & 1) != 0,
                  .y_nhwc = (out_mask & 1) != 0,
                  .z_nhwc = (in_mask & 8) != 0,
                  .x = k->in[0].data,
                  .res = ep->residual != NULL ? k->in[3].data : NULL,
                  .act = ep->act,
                  .clamp = relu || clip,
                  .lo = relu   ? 0.0f
                        : clip ? ep->alpha
                               : -INFINITY,
                  .hi = clip ? ep->beta : INFINITY,
                  .alpha = ep->alpha,
                  .beta = ep->beta,
                  .y = k->out[0].data,
                  .amx = kn_bf16_amx()};
    kn_conv_as_2d(g, &j.c);
    bool unpadded = true;
    for (int i = 0; i < g->nsp; i++)
        unpadded = unpadded && g->pad_b[i] == 0 && g->pad_e[i] == 0;
    bool direct = j.x_nhwc && p->cp == p->c_in && p->kh == 1 && p->kw == 1 && j.c.sh == 1 &&
                  j.c.sw == 1 && unpadded;
    plan_source(&j, g, direct);
    scratch s;
    KN_TRY(scratch_get(&j, k->pool, direct, &s));
    if (k->n_in > 2 && k->in[2].data != NULL) {
        const void *b = k->in[2].data;
        for (int64_t i = 0; i < p->c_out; i++)
            s.bias[i] = k->in[2].dtype == KILN_DTYPE_BFLOAT16
                            ? kn_bf16_widen(((const uint16_t *)b)[i])
                            : ((const float *)b)[i];
        j.bias = s.bias;
    }
    tap_offsets(&j, s.phases, s.aoff);
    j.phases = s.phases;
    j.aoff = s.aoff;
    source_fill(&j, k->pool, direct, &s);
    int64_t a_elems = direct ? g->n * j.c.h * j.c.w * p->cp : g->n * j.img_elems;
    j.panels_outer = p->panels * p->kblocks * KBW * 2 > a_elems;
    kn_parallel_for(k->pool, j.vimages * j.rblocks * p->panels, 1, run_tasks, &j);
    kn_free(s.own);
    return KILN_OK;
}

kiln_status kn_cpu_conv_bf16_run(kn_kernel_ctx *k, const kn_conv_bf16 *prepared) {
    kn_conv_geom g;
    KN_TRY(kn_conv_geom_init(k->node, &k->in[0].shape, &k->in[1].shape, false, &g));
    kn_epilogue ep = {0};
    KN_TRY(kn_cpu_fused_epilogue(k, 3, &ep));
    KN_TRY(check_inputs(k, &g, ep.residual != NULL));
    if (g.n == 0 || kn_shape_numel(&k->out[0].shape) == 0)
        return KILN_OK;
    kn_conv_bf16 *own = NULL;
    const kn_conv_bf16 *p = prepared;
    if (p == NULL) { /* weights not constant at load: packed for this call */
        KN_TRY(pack_weights(k->node, &k->in[1], &own));
        p = own;
    }
    kiln_status rc;
    if (p->c_in != g.c_in || p->c_out != g.c_out || p->kh != (g.nsp > 1 ? g.k[0] : 1) ||
        p->kw != g.k[g.nsp - 1])
        rc = kn_error(KILN_ERR_SHAPE, "Conv (bfloat16): weights packed for another shape");
    else
        rc = run_prepared(k, &g, &ep, p);
    kn_cpu_conv_bf16_free(own);
    return rc;
}
