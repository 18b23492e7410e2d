/* kiln.QConv (made by kn_pass_fuse_qdq) in its tensors' own layout, NCHW, with no transpose:
 * the product is Y[j][p] = W[j][k] X[k][p], the weights the int8 GEMM's broadcast rows and a
 * chunk of the image's im2col (rows (c, ky, kx), columns output pixels, built by row copies)
 * its packed panel, so each output channel's pixels come out as one contiguous row. Stride-1
 * convolutions need no im2col: a 1x1 without padding packs from the image's own rows, the others
 * from a padded copy whose rows are runs of the im2col's (qcjob.padded).
 * vpdpbusd multiplies uint8 by int8, so the weights go in as w + 128 (uint8) and the
 * activations as xu - 128 (int8; xu is x in the uint8 domain, zero point xz). With
 * e[p] = 128 sum_k (xu - 128), the product of the panel with a row of 128s (the factor in the
 * row saves the requantization a shift), the exact sum is
 *   sum_k w (xu - xz) = acc - e[p] + (128 - xz) sum_k w[j],
 * and the weight rows and the ones row are zero past k, so the panel may hold anything there.
 * The real output is that sum * x_scale * w_scale[j] + bias[j] (with a fused residual,
 * kn_pass_fuse_qadd: rounded to the conv output's own grid, plus the residual), clamped by a
 * fused Relu / Clip, quantized with y's scale and zero point (rounding half to even;
 * requant.h). */
#include "backend/cpu/cpu.h"
#include "backend/cpu/math/gemm_int8.h"
#include "backend/cpu/quantization/qproduct.h"
#include "backend/cpu/quantization/requant.h"
#include "core/alloc.h"
#include "ops/nn/conv_geom.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

typedef struct qconv {
    uint8_t *a;    /* [n][kp]: w + 128, 0 past k */
    uint8_t *ones; /* [kp]: 128 below k, 0 past */
    float *scale;  /* [n]: x_scale * w_scale[j] */
    float *bias;   /* [n], zero when absent */
    int32_t *corr; /* [n]: (128 - xz) * sum_k w[j] */
    int64_t n, k, kp;
    kn_qepilogue ep;
    kn_qrequant rq; /* the epilogue (with a fused residual: inputs 9 to 13, kn_pass_fuse_qadd) */
    uint8_t mask;   /* an input byte ^ mask is xu - 128 as int8 */
    uint8_t pad;    /* x's zero point as the input stores it: the real zero of padding */
} qconv;

/* Panel bytes one task packs at most (the panel and its im2col stay in L2). */
#define PANEL_BYTES (96 * 1024)

void kn_cpu_qconv_release(void *state) {
    qconv *s = state;
    if (s == NULL)
        return;
    kn_free(s->a);
    kn_free(s->ones);
    kn_free(s->scale);
    kn_free(s->bias);
    kn_free(s->corr);
    kn_free(s);
}

kiln_status kn_cpu_qconv_prepare(const kn_node *node, int n_in, const kn_tensor *in, void **state) {
    *state = NULL;
    qconv *s = kn_calloc(1, sizeof *s);
    if (s == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "no memory for an int8 Conv");
    *state = s;
    KN_TRY(kn_qproduct_epilogue(node, n_in, in, &s->ep));
    const kn_tensor *w = &in[3];
    if (w->shape.rank != 4)
        return kn_error(KILN_ERR_UNSUPPORTED, "int8 Conv: only 2-D convolutions");
    s->n = w->shape.d[0];
    s->k = s->n > 0 ? kn_tensor_numel(w) / s->n : 0;
    s->kp = (s->k + 3) / 4 * 4;
    size_t n1 = (size_t)(s->n > 0 ? s->n : 1);
    s->a = kn_calloc(n1 * (size_t)(s->kp > 0 ? s->kp : 4), 1);
    s->ones = kn_calloc((size_t)(s->kp > 0 ? s->kp : 4), 1);
    s->scale = kn_malloc(n1 * sizeof(float));
    s->bias = kn_calloc(n1, sizeof(float));
    s->corr = kn_malloc(n1 * sizeof(int32_t));
    if (s->a == NULL || s->ones == NULL || s->scale == NULL || s->bias == NULL || s->corr == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "no memory for an int8 Conv");
    const int8_t *wd = w->data;
    int64_t n_ws = kn_tensor_numel(&in[4]);
    for (int64_t j = 0; j < s->n; j++) {
        int32_t sum = 0;
        for (int64_t e = 0; e < s->k; e++) {
            s->a[j * s->kp + e] = (uint8_t)(wd[j * s->k + e] + 128);
            sum += wd[j * s->k + e];
        }
        s->corr[j] = (128 - s->ep.xzu) * sum;
        s->scale[j] = (float)(s->ep.xs * kn_tensor_get_f64(&in[4], n_ws > 1 ? j : 0));
    }
    memset(s->ones, 128, (size_t)s->k);
    if (n_in > 8 && in[8].dtype != 0)
        memcpy(s->bias, in[8].data, (size_t)s->n * sizeof(float));
    if (n_in > 13 && in[9].dtype != 0) {
        if (in[10].data == NULL || in[11].data == NULL || in[12].data == NULL ||
            in[13].data == NULL)
            return kn_error(KILN_ERR_UNSUPPORTED,
                            "int8 Conv: the residual's scale and zero point must be constants");
        kn_qrequant *q = &s->rq;
        q->residual = true;
        q->rs = (float)kn_tensor_get_f64(&in[10], 0);
        q->rflip = in[9].dtype == KILN_DTYPE_INT8 ? 0x80 : 0;
        q->rzu = (int32_t)kn_tensor_get_i64(&in[11], 0) + (q->rflip ? 128 : 0);
        q->cs = (float)kn_tensor_get_f64(&in[12], 0);
        float cz = (float)kn_tensor_get_i64(&in[13], 0);
        bool c_signed = in[13].dtype == KILN_DTYPE_INT8;
        q->cmin = (c_signed ? -128.0f : 0.0f) - cz;
        q->cmax = (c_signed ? 127.0f : 255.0f) - cz;
    }
    kn_qrequant *q = &s->rq;
    q->ys = s->ep.ys;
    q->yz = s->ep.yz;
    q->qlo = s->ep.qmin - s->ep.yz;
    q->qhi = s->ep.qmax - s->ep.yz;
    q->lo = s->ep.lo;
    q->hi = s->ep.hi;
    kn_qrequant_note_channels(q, s->scale, s->bias, s->n);
    s->mask = s->ep.flip ^ 0x80;
    s->pad = (uint8_t)(s->ep.xzu - (s->ep.flip ? 128 : 0));
    return KILN_OK;
}

typedef struct qcjob {
    const qconv *s;
    const uint8_t *x, *res; /* res: the residual, or NULL */
    uint8_t *y;
    kn_conv_geom g;
    int64_t pixels, pc, chunks; /* output pixels per image; per chunk (a multiple of 16) */
    int64_t cols;               /* the GEMM's columns per image: pixels, or oh * pitch if padded */
    int64_t rows, parts;        /* output channels per task (a multiple of 6); tasks a chunk */
    uint8_t *scratch;           /* slots * slot_bytes, 64-byte aligned */
    atomic_int *busy;           /* per slot */
    int slots;
    bool direct; /* a 1x1 convolution, stride 1, no padding: the panel packs from x itself */
    /* Most others: the panel packs from xp, a padded copy of the image in which column
     * q = oy * pitch + ox of the product (output pixel (oy, ox) where ox < ow; the columns
     * ox >= ow are computed and thrown away) reads im2col row e at xp[off[e] + q], every row a
     * plain run of the copy. With stride 1 the copy's rows are pitch = W + max(pad left, pad
     * right) bytes apart, the padding stored before each row (a row's right padding is the next
     * row's left); with stride (sy, sx) each channel is sy * sx phase planes, plane (py, px)
     * holding the padded image's pixels (sy * r + py, sx * q + px) at row r, column q, rows
     * pitch = ceil(padded W / sx) apart. Planes have the padding rows and one more (the last
     * row's thrown-away columns read into it); channels are chan bytes apart. */
    bool padded;
    uint8_t *xp;
    int64_t pitch, plane, chan, *off;
    /* With parts > 1 every chunk's panel and ones-row sums are packed once into panels
     * (panel_bytes apart) and es (pc apart), and each part reads them: packed per task, a
     * chunk's panel was packed again by every thread that took one of its parts. The packing
     * is shared inside the product's job (kn_shared_item_fill, items[chunk]): the tasks of a
     * chunk's parts claim its pieces of PACK_GROUP blocks, so the layer needs no job and no
     * barrier of its own for it (at 16 threads a job cost 4-13 us against layers of 20-60). */
    int8_t *panels;
    int32_t *es;
    size_t panel_bytes;
    kn_shared_item *items;
    /* The padded copy is made the same way at the start of the job, every task helping:
     * pad_pieces pieces of pad_step channels. */
    kn_shared_item pad_item;
    int32_t pad_pieces;
    int64_t pad_step;
    bool even; /* chunks of equal blocks (else pc columns, the last what is left) */
} qcjob;

/* Row (c, ky, kx) of the im2col for output pixels [p0, p0 + m) of image img, w16 columns. */
/* n bytes of v at dst: the padding of a row is mostly one or two bytes, where a call to memset
 * costs more than the stores. */
static inline void fill(uint8_t *dst, uint8_t v, int64_t n) {
    if (n <= 4) {
        for (int64_t i = 0; i < n; i++)
            dst[i] = v;
        return;
    }
    memset(dst, v, (size_t)n);
}

static void im2col_row(const qcjob *j, const uint8_t *x, int64_t c, int64_t ky, int64_t kx,
                       int64_t p0, int64_t m, uint8_t *row) {
    const kn_conv_geom *g = &j->g;
    int64_t ih = g->in[0], iw = g->in[1], ow = g->out[1], sx = g->stride[1];
    uint8_t pad = j->s->pad;
    int64_t oy = p0 / ow, ox = p0 % ow;
    for (int64_t i = 0; i < m; oy++, ox = 0) {
        int64_t run = ow - ox < m - i ? ow - ox : m - i;
        int64_t iy = oy * g->stride[0] - g->pad_b[0] + ky * g->dil[0];
        uint8_t *dst = row + i;
        i += run;
        if (iy < 0 || iy >= ih) {
            memset(dst, pad, (size_t)run);
            continue;
        }
        const uint8_t *xr = x + (c * ih + iy) * iw;
        int64_t ix0 = ox * sx - g->pad_b[1] + kx * g->dil[1];
        /* pixels [lo, hi) of the run read xr[ix0 + q * sx], the others are padding */
        int64_t lo = ix0 < 0 ? (-ix0 + sx - 1) / sx : 0,
                hi = ix0 < iw ? (iw - ix0 + sx - 1) / sx : 0;
        lo = lo < run ? lo : run;
        hi = hi < lo ? lo : hi > run ? run : hi;
        fill(dst, pad, lo);
        if (sx == 1) {
            if (hi > lo)
                memcpy(dst + lo, xr + (ix0 + lo), (size_t)(hi - lo));
        } else {
            const uint8_t *src = xr + ix0;
            for (int64_t q = lo; q < hi; q++)
                dst[q] = src[q * sx];
        }
        fill(dst + hi, pad, run - hi);
    }
}

static void im2col(const qcjob *j, int64_t img, int64_t p0, int64_t m, int64_t w16, uint8_t *t) {
    const kn_conv_geom *g = &j->g;
    const qconv *s = j->s;
    const uint8_t *x = j->x + img * g->c_in * g->in[0] * g->in[1];
    int64_t e = 0;
    for (int64_t c = 0; c < g->c_in; c++)
        for (int64_t ky = 0; ky < g->k[0]; ky++)
            for (int64_t kx = 0; kx < g->k[1]; kx++, e++) {
                im2col_row(j, x, c, ky, kx, p0, m, t + e * w16);
                memset(t + e * w16 + m, s->pad, (size_t)(w16 - m));
            }
    memset(t + e * w16, 0, (size_t)((s->kp - e) * w16));
}

/* Rows [0, k) of t (ld bytes apart, or row e at t + off[e] where off is not NULL; rows [k, kp)
 * read as zeros) into the GEMM's panel: 16-column blocks of [kp / 4][16][4] bytes, each byte ^
 * mask. t is the im2col (ld = w16), for a 1x1 convolution with stride 1 and no padding the image
 * itself (ld = H * W), whose rows are the im2col's, or the padded copy (qcjob.padded, off). */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define KN_PACK512 1

/* Four 16-column blocks at once (64 bytes of each of four rows): the byte and word interleaves
 * work within 128-bit lanes, lane q holding block b0 + q's quarter, and a 4 x 4 transpose of
 * the lanes makes each block's 64 bytes one store. A third of the SSE2 form's instructions;
 * the packing was 30 % of ResNet-50's int8 convolutions (docs/perf-notes.md). */
__attribute__((target("avx512f,avx512bw"))) static void pack_blocks4(const uint8_t *t, int64_t ld,
                                                                     const int64_t *off, int64_t k,
                                                                     int64_t kp, int64_t b0,
                                                                     uint8_t mask, int8_t *panel) {
    static const uint8_t zeros[64];
    __m512i mk = _mm512_set1_epi8((char)mask);
    for (int64_t e = 0; e < kp; e += 4) {
        __m512i r[4];
        for (int u = 0; u < 4; u++)
            r[u] = _mm512_xor_si512(
                _mm512_loadu_si512(
                    (const void *)(e + u < k ? t + (off ? off[e + u] : (e + u) * ld) + b0 * 16
                                             : zeros)),
                mk);
        __m512i t0 = _mm512_unpacklo_epi8(r[0], r[1]), t1 = _mm512_unpackhi_epi8(r[0], r[1]);
        __m512i t2 = _mm512_unpacklo_epi8(r[2], r[3]), t3 = _mm512_unpackhi_epi8(r[2], r[3]);
        __m512i o0 = _mm512_unpacklo_epi16(t0, t2), o1 = _mm512_unpackhi_epi16(t0, t2);
        __m512i o2 = _mm512_unpacklo_epi16(t1, t3), o3 = _mm512_unpackhi_epi16(t1, t3);
        __m512i a = _mm512_shuffle_i64x2(o0, o1, 0x44), b = _mm512_shuffle_i64x2(o0, o1, 0xEE);
        __m512i c = _mm512_shuffle_i64x2(o2, o3, 0x44), d = _mm512_shuffle_i64x2(o2, o3, 0xEE);
        int8_t *dst = panel + b0 * kp * 16 + e * 16;
        _mm512_storeu_si512((void *)dst, _mm512_shuffle_i64x2(a, c, 0x88));
        _mm512_storeu_si512((void *)(dst + kp * 16), _mm512_shuffle_i64x2(a, c, 0xDD));
        _mm512_storeu_si512((void *)(dst + 2 * kp * 16), _mm512_shuffle_i64x2(b, d, 0x88));
        _mm512_storeu_si512((void *)(dst + 3 * kp * 16), _mm512_shuffle_i64x2(b, d, 0xDD));
    }
}

/* __builtin_cpu_supports reads the feature bits libgcc sets before main: no cache of its own
 * (a plain static written by the first callers, from every thread of a job, was a data race). */
static bool pack512_ok(void) {
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
}
#endif

static void pack_panel(const uint8_t *t, int64_t ld, const int64_t *off, int64_t k, int64_t kp,
                       int64_t w16, uint8_t mask, int8_t *panel) {
    static const uint8_t zeros[16];
    int64_t b = 0;
#ifdef KN_PACK512
    if (pack512_ok())
        for (; b + 4 <= w16 / 16; b += 4)
            pack_blocks4(t, ld, off, k, kp, b, mask, panel);
#endif
    for (; b < w16 / 16; b++) {
        int8_t *dst = panel + b * kp * 16;
        for (int64_t e = 0; e < kp; e += 4) {
            const uint8_t *rp[4];
            for (int u = 0; u < 4; u++)
                rp[u] = e + u < k ? t + (off ? off[e + u] : (e + u) * ld) + b * 16 : zeros;
#if defined(__SSE2__)
            __m128i mk = _mm_set1_epi8((char)mask);
            __m128i r0 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)rp[0]), mk);
            __m128i r1 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)rp[1]), mk);
            __m128i r2 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)rp[2]), mk);
            __m128i r3 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)rp[3]), mk);
            __m128i t0 = _mm_unpacklo_epi8(r0, r1), t1 = _mm_unpackhi_epi8(r0, r1);
            __m128i t2 = _mm_unpacklo_epi8(r2, r3), t3 = _mm_unpackhi_epi8(r2, r3);
            __m128i *o = (__m128i *)(dst + e * 16);
            _mm_storeu_si128(o, _mm_unpacklo_epi16(t0, t2));
            _mm_storeu_si128(o + 1, _mm_unpackhi_epi16(t0, t2));
            _mm_storeu_si128(o + 2, _mm_unpacklo_epi16(t1, t3));
            _mm_storeu_si128(o + 3, _mm_unpackhi_epi16(t1, t3));
#else
            for (int q = 0; q < 16; q++)
                for (int u = 0; u < 4; u++)
                    dst[e * 16 + q * 4 + u] = (int8_t)(rp[u][q] ^ mask);
#endif
        }
    }
}

typedef struct qcbufs {
    uint8_t *t;
    int8_t *panel;
    int32_t *c, *e;
} qcbufs;

static size_t round64(size_t n) {
    return (n + 63) / 64 * 64;
}

/* The bytes of one slot of scratch: the im2col, the panel, the sums and the ones row's sums. */
static size_t slot_bytes(const qcjob *j) {
    size_t panel = round64((size_t)(j->s->kp * j->pc));
    return 2 * panel + round64((size_t)(j->rows * j->pc) * sizeof(int32_t)) +
           round64((size_t)j->pc * sizeof(int32_t));
}

static qcbufs slot_bufs(const qcjob *j, int slot) {
    uint8_t *p = j->scratch + (size_t)slot * slot_bytes(j);
    size_t panel = round64((size_t)(j->s->kp * j->pc));
    qcbufs b = {.t = p, .panel = (int8_t *)(p + panel), .c = (int32_t *)(p + 2 * panel)};
    b.e = b.c + round64((size_t)(j->rows * j->pc) * sizeof(int32_t)) / sizeof(int32_t);
    return b;
}

/* Chunk `chunk`: image *img, columns [*p0, *p0 + *m); with even, an image's pairs of 16-column
 * blocks split evenly between its chunks (the widest pc columns): the GEMM's kernel takes its
 * columns a pair of blocks at a time, and chunks of odd blocks were 6 % slower. */
static void chunk_span(const qcjob *j, int64_t chunk, int64_t *img, int64_t *p0, int64_t *m) {
    int64_t c = chunk % j->chunks, blocks = (j->cols + 15) / 16, pairs = (blocks + 1) / 2;
    int64_t b0 = 2 * (c * pairs / j->chunks), b1 = 2 * ((c + 1) * pairs / j->chunks);
    b1 = b1 < blocks ? b1 : blocks;
    if (!j->even) {
        b0 = c * (j->pc / 16);
        b1 = b0 + j->pc / 16 < blocks ? b0 + j->pc / 16 : blocks;
    }
    *img = chunk / j->chunks;
    *p0 = b0 * 16;
    *m = (b1 * 16 < j->cols ? b1 * 16 : j->cols) - *p0;
}

/* Whether a chunk of m columns packs through an im2col copy: not from the padded copy, nor from
 * the image itself (a 1x1 conv's chunk of whole 16-column blocks), so only whole, by one task. */
static bool needs_im2col(const qcjob *j, int64_t m) {
    return !j->padded && !(j->direct && m % 16 == 0);
}

/* Columns [16 b0, 16 b1) of chunk `chunk`'s panel into panel and their ones-row sums into e
 * (t: the slot's im2col, built for the whole chunk, so only with b0 = 0 and b1 its last block
 * where the chunk needs one). */
static void pack_chunk(const qcjob *j, int64_t chunk, int64_t b0, int64_t b1, uint8_t *t,
                       int8_t *panel, int32_t *e) {
    const qconv *s = j->s;
    int64_t img, p0, m;
    chunk_span(j, chunk, &img, &p0, &m);
    int64_t w16 = (m + 15) / 16 * 16, nb = b1 - b0;
    int8_t *dst = panel + b0 * s->kp * 16;
    if (j->padded) {
        const uint8_t *x = j->xp + img * j->g.c_in * j->chan + p0 + b0 * 16;
        pack_panel(x, 0, j->off, s->k, s->kp, nb * 16, s->mask, dst);
    } else if (!needs_im2col(j, m)) {
        /* the image's rows are the im2col's: no copy (the last, partial chunk takes the copy,
         * whose padding columns stay inside the buffer) */
        const uint8_t *x = j->x + img * j->g.c_in * j->pixels + p0 + b0 * 16;
        pack_panel(x, j->pixels, NULL, s->k, s->kp, nb * 16, s->mask, dst);
    } else {
        KN_ASSERT(b0 == 0 && b1 == w16 / 16);
        im2col(j, img, p0, m, w16, t);
        pack_panel(t, w16, NULL, s->kp, s->kp, w16, s->mask, panel);
    }
    kn_qgemm_b pb = {.k = s->k, .n = nb * 16, .kp = s->kp, .nb = nb, .packed = dst};
    kn_qgemm_u8s8(s->ones, s->kp, 1, &pb, e + b0 * 16, nb * 16);
}

/* Each running range takes a free slot of the scratch: no more ranges run at once than the
 * pool has threads, which is the number of slots. */
static int take_slot(qcjob *j) {
    int slot = 0;
    while (atomic_exchange_explicit(&j->busy[slot], 1, memory_order_acquire) != 0)
        slot = (slot + 1) % j->slots;
    return slot;
}

/* A piece of a chunk's packing: PACK_GROUP 16-column blocks, or the whole chunk where it needs
 * an im2col. */
#define PACK_GROUP 4

typedef struct qcpiece {
    const qcjob *j;
    uint8_t *t; /* the claiming task's im2col buffer */
} qcpiece;

static int32_t pack_pieces(const qcjob *j, int64_t chunk) {
    int64_t img, p0, m;
    chunk_span(j, chunk, &img, &p0, &m);
    int64_t nb = (m + 15) / 16;
    return needs_im2col(j, m) ? 1 : (int32_t)((nb + PACK_GROUP - 1) / PACK_GROUP);
}

static void pack_piece(void *arg, int64_t chunk, int32_t piece) {
    const qcpiece *pc = arg;
    const qcjob *j = pc->j;
    int64_t img, p0, m;
    chunk_span(j, chunk, &img, &p0, &m);
    int64_t nb = (m + 15) / 16, b0 = (int64_t)piece * PACK_GROUP, b1 = b0 + PACK_GROUP;
    if (needs_im2col(j, m))
        b0 = 0, b1 = nb;
    pack_chunk(j, chunk, b0, b1 < nb ? b1 : nb, pc->t, j->panels + (size_t)chunk * j->panel_bytes,
               j->es + chunk * j->pc);
}

#ifdef KN_PACK512
/* Rows [0, rows) of a phase plane of stride 2 along x, pitch bytes apart: column q of row r
 * holds src[r * ld + 2 q] for q in [lo, hi) and pad elsewhere; 32 columns a step for all rows,
 * the loads masked to the bytes read (none past src[r * ld + 2 (hi - 1)]), the padding blended
 * in. By rows and calls, the 28- and 14-byte rows of ResNet-50's stride-2 layers spent more in
 * the loop than in the copy. */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static void
plane_rows2_512(const uint8_t *src, int64_t ld, int64_t rows, int64_t lo, int64_t hi, uint8_t pad,
                uint8_t *dst, int64_t pitch) {
    __m256i pv = _mm256_set1_epi8((char)pad);
    for (int64_t q0 = 0; q0 < pitch; q0 += 32) {
        int64_t n = pitch - q0 < 32 ? pitch - q0 : 32;
        int64_t a = lo > q0 ? lo - q0 : 0, b = hi < q0 + n ? hi - q0 : n;
        __mmask32 out = (__mmask32)((uint64_t)-1 >> (64 - n)), valid = 0;
        __mmask64 in = 0;
        if (b > a) {
            valid = (__mmask32)((((uint64_t)1 << b) - 1) ^ (((uint64_t)1 << a) - 1));
            in = (((uint64_t)1 << (2 * b - 1)) - 1) ^ (((uint64_t)1 << (2 * a)) - 1);
        }
        for (int64_t r = 0; r < rows; r++) {
            __m512i v = _mm512_maskz_loadu_epi8(in, src + r * ld + 2 * q0);
            __m256i bytes = _mm256_mask_blend_epi8(valid, pv, _mm512_cvtepi16_epi8(v));
            _mm256_mask_storeu_epi8(dst + r * pitch + q0, out, bytes);
        }
    }
}
#endif

/* dst[q] = src[q * sx] for q in [lo, hi). */
static void every_other(const uint8_t *src, int64_t sx, int64_t lo, int64_t hi, uint8_t *dst) {
    for (int64_t q = lo; q < hi; q++)
        dst[q] = src[q * sx];
}

/* Whether some tap k * d of a kernel of n taps, dilation d, falls in phase ph of stride st. */
static bool phase_used(int64_t n, int64_t d, int64_t st, int64_t ph) {
    for (int64_t k = 0; k < n; k++)
        if (k * d % st == ph)
            return true;
    return false;
}

/* Channels [begin, end) (over all images) of the padded copy xp. */
static void pad_range(void *arg, int64_t begin, int64_t end) {
    const qcjob *j = arg;
    const kn_conv_geom *g = &j->g;
    int64_t ih = g->in[0], iw = g->in[1], left = j->pitch - iw;
    int64_t sy = g->stride[0], sx = g->stride[1], pt = g->pad_b[0], pl = g->pad_b[1];
    uint8_t pad = j->s->pad;
    if (sy != 1 || sx != 1) {
        int64_t pitch = j->pitch, rows = j->plane / pitch;
        for (int64_t t = begin; t < end; t++) {
            const uint8_t *x = j->x + t * ih * iw;
            for (int64_t py = 0; py < sy; py++)
                for (int64_t px = 0; px < sx; px++) {
                    if (!phase_used(g->k[0], g->dil[0], sy, py) ||
                        !phase_used(g->k[1], g->dil[1], sx, px))
                        continue; /* no row of the im2col reads it (a 1x1 of stride 2) */
                    uint8_t *p = j->xp + t * j->chan + (py * sx + px) * j->plane;
                    /* columns [lo, hi) of a row read x; ix = q * sx + px - pl */
                    int64_t ix0 = px - pl;
                    int64_t lo = ix0 < 0 ? (-ix0 + sx - 1) / sx : 0;
                    int64_t hi = iw - ix0 > 0 ? (iw - ix0 + sx - 1) / sx : 0;
                    lo = lo < pitch ? lo : pitch;
                    hi = hi < lo ? lo : hi > pitch ? pitch : hi;
                    /* rows [r0, r1) read x; iy = r * sy + py - pt */
                    int64_t r0 = pt - py > 0 ? (pt - py + sy - 1) / sy : 0;
                    int64_t r1 = ih + pt - py > 0 ? (ih + pt - py + sy - 1) / sy : 0;
                    r1 = r1 < rows ? r1 : rows;
                    r0 = r0 < r1 ? r0 : r1;
                    memset(p, pad, (size_t)(r0 * pitch));
                    memset(p + r1 * pitch, pad, (size_t)((rows - r1) * pitch));
                    const uint8_t *src = x + (r0 * sy + py - pt) * iw + ix0;
#ifdef KN_PACK512
                    if (sx == 2 && pack512_ok()) {
                        plane_rows2_512(src, sy * iw, r1 - r0, lo, hi, pad, p + r0 * pitch, pitch);
                        continue;
                    }
#endif
                    for (int64_t r = r0; r < r1; r++, src += sy * iw) {
                        uint8_t *d = p + r * pitch;
                        fill(d, pad, lo);
                        every_other(src, sx, lo, hi, d);
                        fill(d + hi, pad, pitch - hi);
                    }
                }
        }
        return;
    }
    for (int64_t t = begin; t < end; t++) {
        const uint8_t *x = j->x + t * ih * iw;
        uint8_t *p = j->xp + t * j->chan;
        memset(p, j->s->pad, (size_t)(g->pad_b[0] * j->pitch));
        p += g->pad_b[0] * j->pitch;
        for (int64_t iy = 0; iy < ih; iy++, p += j->pitch) {
            fill(p, j->s->pad, left);
            memcpy(p + left, x + iy * iw, (size_t)iw);
        }
        memset(p, j->s->pad, (size_t)(j->chan - (p - (j->xp + t * j->chan))));
    }
}

/* Piece `piece` of the padded copy: pad_step channels. */
static void pad_piece(void *arg, int64_t item, int32_t piece) {
    (void)item;
    const qcjob *j = arg;
    int64_t total = j->g.n * j->g.c_in, c0 = piece * j->pad_step;
    pad_range(arg, c0, c0 + j->pad_step < total ? c0 + j->pad_step : total);
}

static void conv_range(void *arg, int64_t begin, int64_t end) {
    qcjob *j = arg;
    const qconv *s = j->s;
    int slot = take_slot(j);
    qcbufs b = slot_bufs(j, slot);
    if (j->padded)
        kn_shared_item_fill(&j->pad_item, 0, j->pad_pieces, pad_piece, j);
    qcpiece piece = {.j = j, .t = b.t};
    int64_t done_chunk = -1; /* the panel packed last (tasks of one chunk run in order) */
    for (int64_t t = begin; t < end; t++) {
        int64_t chunk = t / j->parts, part = t % j->parts;
        int64_t img, p0, m;
        chunk_span(j, chunk, &img, &p0, &m);
        int64_t w16 = (m + 15) / 16 * 16;
        int8_t *packed = b.panel;
        int32_t *e = b.e;
        if (j->panels != NULL) {
            kn_shared_item_fill(&j->items[chunk], chunk, pack_pieces(j, chunk), pack_piece, &piece);
            packed = j->panels + (size_t)chunk * j->panel_bytes;
            e = j->es + chunk * j->pc;
        } else if (chunk != done_chunk) {
            pack_chunk(j, chunk, 0, w16 / 16, b.t, b.panel, b.e);
            done_chunk = chunk;
        }
        kn_qgemm_b panel = {.k = s->k, .n = w16, .kp = s->kp, .nb = w16 / 16, .packed = packed};
        int64_t r0 = part * j->rows, r1 = r0 + j->rows < s->n ? r0 + j->rows : s->n;
        kn_qgemm_u8s8(s->a + r0 * s->kp, s->kp, r1 - r0, &panel, b.c, w16);
        int64_t at = img * s->n * j->pixels + r0 * j->pixels;
        if (!j->padded || j->pitch == j->g.out[1]) {
            /* no thrown-away columns (a 1x1 of stride 2 has pitch = ow): column q is pixel q */
            at += p0;
            kn_qrequant_rows(&s->rq, s->scale + r0, s->bias + r0, s->corr + r0, b.c, w16, e,
                             j->res != NULL ? j->res + at : NULL, m, r1 - r0, j->y + at, j->pixels);
            continue;
        }
        /* column q is pixel (q / pitch, q % pitch), thrown away where q % pitch >= ow */
        kn_qrequant_rows_pitched(&s->rq, s->scale + r0, s->bias + r0, s->corr + r0, b.c, w16, e,
                                 j->res != NULL ? j->res + at : NULL, p0, m, j->pitch, j->g.out[1],
                                 r1 - r0, j->y + at, j->pixels);
    }
    atomic_store_explicit(&j->busy[slot], 0, memory_order_release);
}

kiln_status kn_cpu_qconv_run(kn_kernel_ctx *k) {
    const qconv *s = k->state;
    qcjob j = {.s = s,
               .x = k->in[0].data,
               .res = s->rq.residual ? k->in[9].data : NULL,
               .y = k->out[0].data};
    KN_TRY(kn_conv_geom_init(k->node, &k->in[0].shape, &k->in[3].shape, false, &j.g));
    if (j.g.nsp != 2 || j.g.group != 1)
        return kn_error(KILN_ERR_UNSUPPORTED, "int8 Conv: only 2-D, ungrouped convolutions");
    j.pixels = j.g.out[0] * j.g.out[1];
    if (j.pixels == 0 || j.g.n == 0 || s->n == 0)
        return KILN_OK;
    j.direct = j.g.k[0] == 1 && j.g.k[1] == 1 && j.g.stride[0] == 1 && j.g.stride[1] == 1 &&
               j.g.pad_b[0] == 0 && j.g.pad_b[1] == 0 && j.g.pad_e[0] == 0 && j.g.pad_e[1] == 0 &&
               s->k == j.g.c_in;
    j.cols = j.pixels;
    const kn_conv_geom *g = &j.g;
    int64_t sy = g->stride[0], sx = g->stride[1], hp = g->pad_b[0] + g->in[0] + g->pad_e[0];
    if (!j.direct && s->k == g->c_in * g->k[0] * g->k[1]) {
        int64_t left = g->pad_b[1] > g->pad_e[1] ? g->pad_b[1] : g->pad_e[1];
        j.pitch = sy == 1 && sx == 1 ? g->in[1] + left
                                     : (g->pad_b[1] + g->in[1] + g->pad_e[1] + sx - 1) / sx;
        /* an output row must fit in a row of the copy (stride-1 pads both wider than the
         * kernel's reach do not), and the thrown-away columns cost at most a quarter more */
        j.padded = g->out[1] <= j.pitch && g->out[0] * j.pitch <= j.pixels + j.pixels / 4;
    }
    if (j.padded) {
        j.cols = g->out[0] * j.pitch;
        /* the last channel's 16-column blocks read at most pitch + 15 bytes past its end */
        j.plane = ((hp + sy - 1) / sy + 1) * j.pitch;
        j.chan = sy * sx * j.plane;
    }
    int64_t pc = PANEL_BYTES / (s->kp > 0 ? s->kp : 4) / 16 * 16;
    pc = pc < 32 ? 32 : pc > 256 ? 256 : pc;
    int64_t blocks = (j.cols + 15) / 16;
    j.pc = pc < blocks * 16 ? pc : blocks * 16;
    j.chunks = (blocks * 16 + j.pc - 1) / j.pc;
    /* Few chunks (small images) split the output channels too, so every thread has work. */
    int threads = kn_threadpool_size(k->pool);
    int64_t tasks = j.g.n * j.chunks, parts = 1;
    if (threads > 1 && tasks < 2 * threads) {
        parts = (2 * threads + tasks - 1) / tasks;
        int64_t most = s->n / 48 > 1 ? s->n / 48 : 1;
        parts = parts < most ? parts : most;
    }
    /* An image's blocks split evenly between its chunks (chunk_span): 784 columns in chunks of
     * 256 left one of 16, and one of two threads with half the work. Between two and four
     * chunks a thread they come in a multiple of the threads (5 on 2 threads gave one thread
     * 3). Not where a 1x1 conv's image has a partial last block: that chunk is packed through
     * an im2col copy (conv_range), so it stays the narrow remainder (ResNet-50's 1024 -> 256
     * at 14x14: 0.081 -> 0.094 ms at 2 threads in chunks of 64, 64 and 68 columns instead of
     * 96, 96 and 4; docs/perf-notes.md). */
    j.even = !(j.direct && j.cols % 16 != 0);
    if (j.even) {
        if (j.g.n == 1 && threads > 1 && j.chunks >= 2 * threads && j.chunks < 4 * threads) {
            j.chunks = (j.chunks + threads - 1) / threads * threads;
            j.chunks = j.chunks < blocks ? j.chunks : blocks;
            tasks = j.chunks;
        }
        int64_t pairs = (blocks + 1) / 2;
        j.chunks = j.chunks < pairs ? j.chunks : pairs;
        j.pc = (pairs + j.chunks - 1) / j.chunks * 32;
        /* the count rounded up to the threads may have passed the pairs (a 3x3 of 256 channels
         * at 14x14: seven pairs, eight chunks at 2 threads) */
        tasks = j.g.n * j.chunks;
    }
    j.rows = ((s->n + parts - 1) / parts + 5) / 6 * 6;
    j.parts = (s->n + j.rows - 1) / j.rows;
    /* The context's pool keeps the scratch between runs, so no layer maps fresh pages. */
    j.slots = threads;
    size_t bytes = (size_t)j.slots * slot_bytes(&j), shared_at = bytes;
    if (j.parts > 1) {
        j.panel_bytes = round64((size_t)(s->kp * j.pc));
        bytes += (size_t)tasks * j.panel_bytes + round64((size_t)(tasks * j.pc) * sizeof(int32_t)) +
                 round64((size_t)tasks * sizeof(kn_shared_item));
    }
    size_t busy_at = bytes;
    bytes += round64((size_t)j.slots * sizeof *j.busy);
    size_t xp_at = bytes;
    if (j.padded)
        bytes += round64((size_t)(g->n * g->c_in * j.chan + 2 * j.pitch + 64)) +
                 (size_t)s->k * sizeof(int64_t);
    uint8_t *own = NULL;
    j.scratch = kn_threadpool_scratch(k->pool, bytes);
    if (j.scratch == NULL)
        j.scratch = own = kn_aligned_alloc(bytes, 64);
    if (j.scratch == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "no memory for an int8 Conv");
    j.busy = (atomic_int *)(j.scratch + busy_at);
    for (int i = 0; i < j.slots; i++)
        atomic_init(&j.busy[i], 0);
    if (j.padded) {
        j.xp = j.scratch + xp_at;
        size_t xp_bytes = round64((size_t)(g->n * g->c_in * j.chan + 2 * j.pitch + 64));
        j.off = (int64_t *)(j.xp + xp_bytes);
        memset(j.xp + g->n * g->c_in * j.chan, s->pad,
               xp_bytes - (size_t)(g->n * g->c_in * j.chan));
        /* row (c, ky, kx) for column q: the padded image's row sy * oy + ky * dy and column
         * sx * ox + kx * dx, in phase plane ((ky * dy) % sy, (kx * dx) % sx) at row
         * oy + (ky * dy) / sy, column ox + (kx * dx) / sx; with stride 1 the copy's columns
         * sit pitch - W - pad left further on */
        int64_t e = 0, shift = sy == 1 && sx == 1 ? j.pitch - g->in[1] - g->pad_b[1] : 0;
        for (int64_t ky = 0; ky < g->k[0]; ky++)
            for (int64_t kx = 0; kx < g->k[1]; kx++) {
                int64_t dy = ky * g->dil[0], dx = kx * g->dil[1];
                j.off[e++] =
                    ((dy % sy) * sx + dx % sx) * j.plane + dy / sy * j.pitch + dx / sx + shift;
            }
        /* the other channels' rows by one addition each (by the divisions above for every row,
         * the table took 3 % of conv_125, 2304 rows) */
        for (int64_t taps = e; e < s->k; e++)
            j.off[e] = j.off[e - taps] + j.chan;
        /* pieces of about a quarter of a thread's share of the channels */
        int64_t channels = g->n * g->c_in, pieces = 4 * (int64_t)threads;
        pieces = pieces < channels ? pieces : channels;
        j.pad_step = (channels + pieces - 1) / pieces;
        j.pad_pieces = (int32_t)((channels + j.pad_step - 1) / j.pad_step);
    }
    if (j.parts > 1) {
        j.panels = (int8_t *)(j.scratch + shared_at);
        j.es = (int32_t *)(j.scratch + shared_at + (size_t)tasks * j.panel_bytes);
        j.items = (kn_shared_item *)(j.scratch + shared_at + (size_t)tasks * j.panel_bytes +
                                     round64((size_t)(tasks * j.pc) * sizeof(int32_t)));
        memset(j.items, 0, (size_t)tasks * sizeof(kn_shared_item));
    }
    kn_parallel_for(k->pool, tasks * j.parts, 1, conv_range, &j);
    kn_free(own);
    return KILN_OK;
}
