/* Winograd F(4x4, 3x3), and F(2x2, 3x3) for small maps, for 3x3, stride-1, undilated,
 * ungrouped 2-D convolutions. Each 4x4 output tile comes from a 6x6 input tile (2x2 from 4x4):
 * V = Bt d B, M = U .* V with U = G g Gt, Y = At M A. Summed over input channels, each of the
 * 36 (16) element positions xi is a matrix product M_xi (C_out x tiles) = U_xi (C_out x C_in) *
 * V_xi (C_in x tiles), run through the packed GEMM with U packed once in prepare: 36 multiplies
 * per 16 outputs instead of 144 (16 per 4 instead of 36).
 *
 * Tiles are processed in blocks of whole tile rows so V and M stay in cache for large images.
 * Per block: input transform (threads split channels), one GEMM per position (threads split
 * positions), output transform and epilogue (threads split output channels). Several images on
 * several threads take other orders: images of few tiles side by side in each position's GEMM
 * (run_cols), others a block a task, each run whole by one thread (run_tasks). The transforms run
 * across tiles, one tile per vector lane: the input tiles are first gathered into one array of
 * `tiles` floats per element position, so every transform step is a contiguous vector operation.
 *
 * The points 0, +-1, +-2 and infinity keep the transform constants small. Rounding grows with
 * the size of the sums (tests/unit/test_conv.c scales its tolerance with sqrt(C_in * 9)); on
 * ResNet-50 the max relative difference to onnxruntime is 4.8e-5 (1.9e-5 without Winograd). */
#include "backend/cpu/clones.h"
#include "backend/cpu/nn/conv.h"

#include "core/alloc.h"

#include <stdatomic.h>
#include <string.h>

/* F(4x4, 3x3): 4x4 output tiles from 6x6 input tiles. F(2x2, 3x3) (2x2 from 4x4) for small
 * maps, where 4x4 tiles would leave the GEMM's columns mostly empty. */
#define MAX_ALPHA 6
#define MAX_NPOS 36
/* V and M of one block should stay in L3 (floats). */
#define BLOCK_FLOATS ((int64_t)1 << 19)

struct kn_wino {
    int64_t c_out, c_in;
    int tile, alpha, npos; /* output tile side, input tile side, alpha * alpha */
    kn_gemm_packed *u[MAX_NPOS];
};

int kn_cpu_wino_tile(const kn_wino *w) {
    return w->tile;
}

void kn_cpu_wino_free(kn_wino *w) {
    if (w == NULL)
        return;
    for (int i = 0; i < MAX_NPOS; i++)
        kn_gemm_packed_free(w->u[i]);
    kn_free(w);
}

/* Filters a step of transform_weights: its arrays (9 + 18 doubles a filter) stay in L1. */
#define TRANSFORM_BLOCK 64

/* u (alpha^2 x c_out x c_in) = G g Gt for every 3x3 kernel g of w (c_out x c_in x 3 x 3), a
 * block of filters at a time with the filters innermost: each step is then a vector operation
 * over the block and each position's results one contiguous store, where a filter at a time
 * stored each result alpha^2 planes apart (ResNet-50's transforms took half of its plan's load,
 * 0.12 s). The same double-precision operations in the same order: the same bytes. */
KN_CLONES static void transform_block(const float *w, int64_t n, int alpha, const double (*G)[3],
                                      int64_t plane, float *u) {
    double g[9][TRANSFORM_BLOCK], t[MAX_ALPHA][3][TRANSFORM_BLOCK];
    for (int64_t o = 0; o < n; o++)
        for (int e = 0; e < 9; e++)
            g[e][o] = w[o * 9 + e];
    for (int a = 0; a < alpha; a++)
        for (int j = 0; j < 3; j++)
            for (int64_t o = 0; o < n; o++)
                t[a][j][o] = G[a][0] * g[j][o] + G[a][1] * g[3 + j][o] + G[a][2] * g[6 + j][o];
    for (int a = 0; a < alpha; a++)
        for (int b = 0; b < alpha; b++) {
            float *dst = u + (a * alpha + b) * plane;
            for (int64_t o = 0; o < n; o++)
                dst[o] =
                    (float)(t[a][0][o] * G[b][0] + t[a][1][o] * G[b][1] + t[a][2][o] * G[b][2]);
        }
}

static void transform_weights(const float *w, int64_t c_out, int64_t c_in, int alpha, float *u) {
    static const double G4[6][3] = {{1.0 / 4, 0, 0},
                                    {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                    {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                    {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                    {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                    {0, 0, 1}};
    static const double G2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
    const double(*G)[3] = alpha == 6 ? G4 : G2;
    int64_t plane = c_out * c_in;
    for (int64_t o = 0; o < plane; o += TRANSFORM_BLOCK) {
        int64_t n = plane - o < TRANSFORM_BLOCK ? plane - o : TRANSFORM_BLOCK;
        transform_block(w + o * 9, n, alpha, G, plane, u + o);
    }
}

kiln_status kn_cpu_wino_prepare(const float *w, int64_t c_out, int64_t c_in, int tile,
                                kn_wino **out) {
    *out = NULL;
    int alpha = tile + 2, npos = alpha * alpha;
    kn_wino *wi = kn_calloc(1, sizeof *wi);
    float *u = kn_malloc((size_t)(npos * c_out * c_in) * sizeof(float));
    if (wi == NULL || u == NULL) {
        kn_free(wi);
        kn_free(u);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory transforming conv weights");
    }
    wi->c_out = c_out;
    wi->c_in = c_in;
    wi->tile = tile;
    wi->alpha = alpha;
    wi->npos = npos;
    transform_weights(w, c_out, c_in, alpha, u);
    kiln_status rc = KILN_OK;
    for (int i = 0; i < npos && rc == KILN_OK; i++)
        rc = kn_gemm_pack_a(u + i * c_out * c_in, c_in, false, c_out, c_in, &wi->u[i]);
    kn_free(u);
    if (rc != KILN_OK) {
        kn_cpu_wino_free(wi);
        return rc;
    }
    *out = wi;
    return KILN_OK;
}

bool kn_cpu_wino_applies(const kn_conv_geom *g) {
    return g->nsp == 2 && g->group == 1 && g->k[0] == 3 && g->k[1] == 3 && g->stride[0] == 1 &&
           g->stride[1] == 1 && g->dil[0] == 1 && g->dil[1] == 1;
}

/* One block of tile rows [ty0, ty1) of one image. */
typedef struct wino_job {
    const kn_wino *w;
    kn_conv2d c;
    const float *x; /* the image */
    float *y;
    kn_epilogue ep; /* residual already offset to the image */
    int64_t tw, ty0, ty1, tb;
    int64_t tp;         /* tb rounded up to LANES: the row length of every tile array */
    int64_t wp;         /* padded band width: tile * tw + 2 */
    float *v, *m;       /* V: npos x c_in x ld; M: npos x c_out x ld */
    int64_t ld;         /* row length of V's and M's arrays: tp, or every image's in a row */
    int64_t col0;       /* where this image's tiles start in those rows */
    float *thr;         /* scratch slots */
    int64_t thr_floats; /* per slot */
    int slots;          /* one per thread: at most that many ranges run at once */
    atomic_int *slot_busy;
    void (*fn)(struct wino_job *j, int64_t begin, int64_t end, float *scratch);
} wino_job;

/* Ranges are claimed dynamically (a descheduled thread delays only its own chunk), so a range
 * takes whichever scratch slot is free. */
static void run_range(void *arg, int64_t begin, int64_t end) {
    wino_job *j = arg;
    int s = 0;
    while (atomic_exchange_explicit(&j->slot_busy[s], 1, memory_order_acquire) != 0)
        s = s + 1 < j->slots ? s + 1 : 0;
    j->fn(j, begin, end, j->thr + s * j->thr_floats);
    atomic_store_explicit(&j->slot_busy[s], 0, memory_order_release);
}

static void parallel(kn_threadpool *pool, wino_job *j, int64_t items,
                     void (*fn)(wino_job *, int64_t, int64_t, float *)) {
    j->fn = fn;
    kn_parallel_for(pool, items, 1, run_range, j);
}

/* 16 lanes (one tile each); GCC splits it into narrower registers where AVX-512 is missing. */
typedef float vf __attribute__((vector_size(64), aligned(4)));
#define LANES 16

/* Macros, not functions: a vector argument or result would change the ABI between clones. */
#define ld(p) (*(const vf *)(p))
#define st(p, v) (*(vf *)(p) = (v))

/* p holds 36 arrays of n floats (element (i, j) of every tile), n a multiple of LANES; writes
 * Bt d B to v, position xi at v + xi * vstride. */
KN_CLONES static void input_tiles_f4(const float *p, int64_t n, float *v, int64_t vstride) {
    for (int64_t t = 0; t < n; t += LANES) {
        vf r[6][6];
        for (int j = 0; j < 6; j++) {
            vf d0 = ld(p + (0 * 6 + j) * n + t), d1 = ld(p + (1 * 6 + j) * n + t);
            vf d2 = ld(p + (2 * 6 + j) * n + t), d3 = ld(p + (3 * 6 + j) * n + t);
            vf d4 = ld(p + (4 * 6 + j) * n + t), d5 = ld(p + (5 * 6 + j) * n + t);
            r[0][j] = 4.0f * d0 - 5.0f * d2 + d4;
            r[1][j] = -4.0f * (d1 + d2) + d3 + d4;
            r[2][j] = 4.0f * (d1 - d2) - d3 + d4;
            r[3][j] = 2.0f * (d3 - d1) - d2 + d4;
            r[4][j] = 2.0f * (d1 - d3) - d2 + d4;
            r[5][j] = 4.0f * d1 - 5.0f * d3 + d5;
        }
        for (int a = 0; a < 6; a++) {
            vf d0 = r[a][0], d1 = r[a][1], d2 = r[a][2], d3 = r[a][3], d4 = r[a][4], d5 = r[a][5];
            float *o = v + (int64_t)(a * 6) * vstride + t;
            st(o + 0 * vstride, 4.0f * d0 - 5.0f * d2 + d4);
            st(o + 1 * vstride, -4.0f * (d1 + d2) + d3 + d4);
            st(o + 2 * vstride, 4.0f * (d1 - d2) - d3 + d4);
            st(o + 3 * vstride, 2.0f * (d3 - d1) - d2 + d4);
            st(o + 4 * vstride, 2.0f * (d1 - d3) - d2 + d4);
            st(o + 5 * vstride, 4.0f * d1 - 5.0f * d3 + d5);
        }
    }
}

/* m holds position xi at m + xi * mstride (n tiles each, n a multiple of LANES); writes At M A
 * to q as 16 arrays of n floats (output element (a, b) of every tile). */
KN_CLONES static void output_tiles_f4(const float *m, int64_t mstride, int64_t n, float *q) {
    for (int64_t t = 0; t < n; t += LANES) {
        vf r[4][6];
        for (int j = 0; j < 6; j++) {
            const float *s = m + j * mstride + t;
            vf m0 = ld(s), m1 = ld(s + 6 * mstride), m2 = ld(s + 12 * mstride);
            vf m3 = ld(s + 18 * mstride), m4 = ld(s + 24 * mstride), m5 = ld(s + 30 * mstride);
            vf a12 = m1 + m2, s12 = m1 - m2, a34 = m3 + m4, s34 = m3 - m4;
            r[0][j] = m0 + a12 + a34;
            r[1][j] = s12 + 2.0f * s34;
            r[2][j] = a12 + 4.0f * a34;
            r[3][j] = s12 + 8.0f * s34 + m5;
        }
        for (int a = 0; a < 4; a++) {
            vf m0 = r[a][0], m1 = r[a][1], m2 = r[a][2], m3 = r[a][3], m4 = r[a][4], m5 = r[a][5];
            vf a12 = m1 + m2, s12 = m1 - m2, a34 = m3 + m4, s34 = m3 - m4;
            float *o = q + (int64_t)(a * 4) * n + t;
            st(o + 0 * n, m0 + a12 + a34);
            st(o + 1 * n, s12 + 2.0f * s34);
            st(o + 2 * n, a12 + 4.0f * a34);
            st(o + 3 * n, s12 + 8.0f * s34 + m5);
        }
    }
}

/* F(2x2, 3x3): Bt rows (1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1). */
KN_CLONES static void input_tiles_f2(const float *p, int64_t n, float *v, int64_t vstride) {
    for (int64_t t = 0; t < n; t += LANES) {
        vf r[4][4];
        for (int j = 0; j < 4; j++) {
            vf d0 = ld(p + (0 * 4 + j) * n + t), d1 = ld(p + (1 * 4 + j) * n + t);
            vf d2 = ld(p + (2 * 4 + j) * n + t), d3 = ld(p + (3 * 4 + j) * n + t);
            r[0][j] = d0 - d2;
            r[1][j] = d1 + d2;
            r[2][j] = d2 - d1;
            r[3][j] = d1 - d3;
        }
        for (int a = 0; a < 4; a++) {
            vf d0 = r[a][0], d1 = r[a][1], d2 = r[a][2], d3 = r[a][3];
            float *o = v + (int64_t)(a * 4) * vstride + t;
            st(o + 0 * vstride, d0 - d2);
            st(o + 1 * vstride, d1 + d2);
            st(o + 2 * vstride, d2 - d1);
            st(o + 3 * vstride, d1 - d3);
        }
    }
}

/* At rows (1, 1, 1, 0), (0, 1, -1, -1). */
KN_CLONES static void output_tiles_f2(const float *m, int64_t mstride, int64_t n, float *q) {
    for (int64_t t = 0; t < n; t += LANES) {
        vf r[2][4];
        for (int j = 0; j < 4; j++) {
            const float *s = m + j * mstride + t;
            vf m0 = ld(s), m1 = ld(s + 4 * mstride), m2 = ld(s + 8 * mstride);
            vf m3 = ld(s + 12 * mstride);
            r[0][j] = m0 + m1 + m2;
            r[1][j] = m1 - m2 - m3;
        }
        for (int a = 0; a < 2; a++) {
            vf m0 = r[a][0], m1 = r[a][1], m2 = r[a][2], m3 = r[a][3];
            float *o = q + (int64_t)(a * 2) * n + t;
            st(o + 0 * n, m0 + m1 + m2);
            st(o + 1 * n, m1 - m2 - m3);
        }
    }
}

/* Element (i, jj) of every tile of the band into p's arrays. Inlined with a constant tile size
 * so the strided reads compile to fixed strides. */
static inline __attribute__((always_inline)) void
gather(const float *band, int64_t wp, int64_t rows, int64_t tw, int64_t tp, const int m, float *p) {
    for (int64_t ty = 0; ty < rows; ty++)
        for (int i = 0; i < m + 2; i++) {
            const float *src = band + (m * ty + i) * wp;
            for (int jj = 0; jj < m + 2; jj++) {
                float *d = p + (i * (m + 2) + jj) * tp + ty * tw;
                for (int64_t tx = 0; tx < tw; tx++)
                    d[tx] = src[m * tx + jj];
            }
        }
}

/* Output element (a, b) of every tile from q into the output rows [oh0, oh1) of a plane. */
static inline __attribute__((always_inline)) void scatter(const float *q, int64_t tp, int64_t ty0,
                                                          int64_t rows, int64_t tw, int64_t oh,
                                                          int64_t ow, const int m, float *yc) {
    for (int64_t ty = 0; ty < rows; ty++)
        for (int a = 0; a < m; a++) {
            int64_t r = m * (ty0 + ty) + a;
            if (r >= oh)
                break;
            float *yr = yc + r * ow;
            for (int b = 0; b < m; b++) {
                const float *s = q + (a * m + b) * tp + ty * tw;
                int64_t full = (ow - b + m - 1) / m; /* tiles with column b inside */
                for (int64_t tx = 0; tx < full; tx++)
                    yr[m * tx + b] = s[tx];
            }
        }
}

/* Input channels [c0, c1): zero-padded band of input rows, gathered tiles, transform into V. */
static void input_stage(wino_job *j, int64_t c0, int64_t c1, float *scratch) {
    const kn_conv2d *c = &j->c;
    int m = j->w->tile;
    int64_t rows = m * (j->ty1 - j->ty0) + 2, wp = j->wp, tp = j->tp;
    float *band = scratch, *p = scratch + rows * wp;
    for (int i = 0; i < j->w->npos; i++) /* lanes past the last tile stay zero */
        memset(p + i * tp + j->tb, 0, (size_t)(tp - j->tb) * sizeof *p);
    for (int64_t ci = c0; ci < c1; ci++) {
        const float *xc = j->x + ci * c->h * c->w;
        for (int64_t r = 0; r < rows; r++) {
            float *dst = band + r * wp;
            int64_t ih = m * j->ty0 - c->ph + r;
            if (ih < 0 || ih >= c->h) {
                memset(dst, 0, (size_t)wp * sizeof *dst);
                continue;
            }
            int64_t lo = c->pw, hi = c->pw + c->w < wp ? c->pw + c->w : wp;
            memset(dst, 0, (size_t)lo * sizeof *dst);
            memcpy(dst + lo, xc + ih * c->w, (size_t)(hi - lo) * sizeof *dst);
            memset(dst + hi, 0, (size_t)(wp - hi) * sizeof *dst);
        }
        if (m == 4)
            gather(band, wp, j->ty1 - j->ty0, j->tw, tp, 4, p);
        else
            gather(band, wp, j->ty1 - j->ty0, j->tw, tp, 2, p);
        float *v = j->v + ci * j->ld + j->col0;
        if (m == 4)
            input_tiles_f4(p, tp, v, j->w->c_in * j->ld);
        else
            input_tiles_f2(p, tp, v, j->w->c_in * j->ld);
    }
}

/* Positions [p0, p1) of one image's block (its tiles are the whole rows of V and M). */
static void gemm_stage(wino_job *j, int64_t p0, int64_t p1, float *scratch) {
    int64_t co = j->w->c_out, ci = j->w->c_in, ld = j->ld;
    for (int64_t xi = p0; xi < p1; xi++) {
        kn_gemm_operand a = {.packed = j->w->u[xi]};
        kn_gemm_operand b = {.p = j->v + xi * ci * ld, .ld = ld};
        kn_gemm_serial(co, ld, ci, 1.0f, &a, &b, 0.0f, j->m + xi * co * ld, ld, NULL, scratch);
    }
}

/* Output channels [c0, c1): inverse transform, scatter into the output rows, epilogue. */
static void output_stage(wino_job *j, int64_t c0, int64_t c1, float *q) {
    const kn_conv2d *c = &j->c;
    int m = j->w->tile;
    int64_t tp = j->tp, os = c->oh * c->ow;
    int64_t oh0 = m * j->ty0, oh1 = m * j->ty1 < c->oh ? m * j->ty1 : c->oh;
    for (int64_t co = c0; co < c1; co++) {
        const float *mc = j->m + co * j->ld + j->col0;
        if (m == 4)
            output_tiles_f4(mc, j->w->c_out * j->ld, tp, q);
        else
            output_tiles_f2(mc, j->w->c_out * j->ld, tp, q);
        float *yc = j->y + co * os;
        if (m == 4)
            scatter(q, tp, j->ty0, j->ty1 - j->ty0, j->tw, c->oh, c->ow, 4, yc);
        else
            scatter(q, tp, j->ty0, j->ty1 - j->ty0, j->tw, c->oh, c->ow, 2, yc);
        kn_epilogue_apply(&j->ep, yc + oh0 * c->ow, 0, co, oh0 * c->ow, 1, (oh1 - oh0) * c->ow);
    }
}

/* Floats of one thread's scratch slot for blocks of `rows` tile rows whose tile arrays are tp
 * long and whose products span `cols` columns: the largest of the input band with its gathered
 * tiles, the product's packing buffers and the output tiles, rounded up to 16. */
static int64_t slot_scratch(const kn_wino *w, int64_t wp, int64_t rows, int64_t tp, int64_t cols) {
    int m = w->tile;
    kn_gemm_operand ga = {.packed = w->u[0]}, gb = {.ld = cols};
    int64_t f = (m * rows + 2) * wp + w->npos * tp, gemm = kn_gemm_serial_scratch(cols, &ga, &gb);
    f = f > gemm ? f : gemm;
    f = f > m * m * tp ? f : m * m * tp;
    return (f + 15) / 16 * 16;
}

/* Several images of few tiles each (maps up to COLS_MAX_TILES tiles: ResNet-50's 28x28, 14x14
 * and 7x7 convs): the images' tiles side by side in the rows of V and M, so each of the 36 (16)
 * products runs once over every image's columns and its weights U (36/9 of the conv's: 9.4 MB
 * for 256 -> 256) cross the caches once a batch, where image by image (or a task a block) they
 * were read again for every image's 16 to 49 columns. The stages split over the threads: the
 * input transform by (image, channel), the products by (position, part of the columns), the
 * output transform by (image, output channel). */
#define COLS_MAX_TILES 64
/* On fewer threads the images' V and M in a row leave the cores' L2 for little gain in weight
 * traffic: ResNet-50 at batch 8 on 2 threads ran 346-398 ms a task a block and 371-416 in a row
 * (16-core host, in turns). */
#define COLS_MIN_THREADS 4
#define COLS_BLOCK_FLOATS ((int64_t)1 << 23) /* V and M of the images in a row (32 MB, in L3) */

typedef struct wino_cols {
    wino_job base; /* x, y and the residual of the batch; tb, tp: one image's tiles */
    int64_t n0, nimg, parts, is, os;
} wino_cols;

static void cols_input_stage(wino_job *j, int64_t i0, int64_t i1, float *scratch) {
    const wino_cols *wc = (const wino_cols *)j;
    for (int64_t i = i0; i < i1; i++) {
        int64_t k = i / j->w->c_in, ci = i % j->w->c_in;
        wino_job jj = *j;
        jj.x = j->x + (wc->n0 + k) * j->w->c_in * wc->is;
        jj.col0 = k * j->tp;
        input_stage(&jj, ci, ci + 1, scratch);
    }
}

static void cols_gemm_stage(wino_job *j, int64_t i0, int64_t i1, float *scratch) {
    const wino_cols *wc = (const wino_cols *)j;
    int64_t co = j->w->c_out, ci = j->w->c_in, ld = j->ld, units = wc->nimg * j->tp / LANES;
    for (int64_t i = i0; i < i1; i++) {
        int64_t xi = i / wc->parts, part = i % wc->parts;
        int64_t c0 = part * units / wc->parts * LANES, c1 = (part + 1) * units / wc->parts * LANES;
        if (c1 <= c0)
            continue;
        kn_gemm_operand a = {.packed = j->w->u[xi]};
        kn_gemm_operand b = {.p = j->v + xi * ci * ld + c0, .ld = ld};
        kn_gemm_serial(co, c1 - c0, ci, 1.0f, &a, &b, 0.0f, j->m + xi * co * ld + c0, ld, NULL,
                       scratch);
    }
}

static void cols_output_stage(wino_job *j, int64_t i0, int64_t i1, float *q) {
    const wino_cols *wc = (const wino_cols *)j;
    int64_t cout = j->w->c_out;
    for (int64_t i = i0; i < i1; i++) {
        int64_t k = i / cout, co = i % cout, at = (wc->n0 + k) * cout * wc->os;
        wino_job jj = *j;
        jj.y = j->y + at;
        jj.ep.residual = j->ep.residual != NULL ? j->ep.residual + at : NULL;
        jj.col0 = k * j->tp;
        output_stage(&jj, co, co + 1, q);
    }
}

/* The images-in-a-row order for g, where it applies: several images of at most COLS_MAX_TILES
 * tiles, on several threads. False leaves the other orders. */
static bool run_cols(kn_threadpool *pool, wino_job *base, const kn_conv_geom *g, int64_t th,
                     const kn_epilogue *ep) {
    int threads = kn_threadpool_size(pool);
    const kn_wino *w = base->w;
    int npos = w->npos;
    int64_t tiles = th * base->tw, seg = (tiles + LANES - 1) / LANES * LANES;
    int64_t per_image = npos * (w->c_in + w->c_out) * seg;
    int64_t nimg = COLS_BLOCK_FLOATS / per_image < g->n ? COLS_BLOCK_FLOATS / per_image : g->n;
    if (g->n < 2 || threads < COLS_MIN_THREADS || tiles > COLS_MAX_TILES || nimg < 2)
        return false;
    wino_cols wc = {.base = *base, .is = base->c.h * base->c.w, .os = base->c.oh * base->c.ow};
    wino_job *j = &wc.base;
    j->ty0 = 0;
    j->ty1 = th;
    j->tb = tiles;
    j->tp = seg;
    j->ep.residual = ep->residual;
    /* Parts of each product's columns: four items a thread or more, 32 columns a part or more. */
    int64_t parts = (4 * threads + npos - 1) / npos, max_parts = nimg * seg / 32;
    wc.parts = parts < max_parts ? parts : max_parts > 0 ? max_parts : 1;
    int64_t width = nimg * seg;
    j->thr_floats = slot_scratch(w, base->wp, th, seg, width);
    j->slots = threads;
    int64_t vm = (npos * (w->c_in + w->c_out) * width + 15) / 16 * 16;
    size_t bytes = (size_t)(vm + j->slots * j->thr_floats) * sizeof(float);
    j->slot_busy = kn_calloc((size_t)j->slots, sizeof *j->slot_busy);
    float *buf = kn_threadpool_scratch(pool, bytes);
    if (buf == NULL || j->slot_busy == NULL) {
        kn_free(j->slot_busy);
        return false;
    }
    for (int i = 0; i < j->slots; i++)
        atomic_init(&j->slot_busy[i], 0);
    j->v = buf;
    j->m = buf + npos * w->c_in * width;
    j->thr = buf + vm;
    for (wc.n0 = 0; wc.n0 < g->n; wc.n0 += wc.nimg) {
        wc.nimg = g->n - wc.n0 < nimg ? g->n - wc.n0 : nimg;
        j->ld = wc.nimg * seg;
        parallel(pool, j, wc.nimg * w->c_in, cols_input_stage);
        parallel(pool, j, npos * wc.parts, cols_gemm_stage);
        parallel(pool, j, wc.nimg * w->c_out, cols_output_stage);
    }
    kn_free(j->slot_busy);
    return true;
}

/* Several images on several threads: each task is one block of tile rows of one image, run by
 * one thread from its input transform through its 36 (16) products to its output rows, in
 * buffers of its own, with no barrier between the stages. The stages split over every thread
 * wait for each other three times a block and deal a block's 36 products to 16 threads in
 * uneven rounds: the YOLOv8n-style detector at 320, batch 8 on 16 threads, ran 34.5-40.5 ms
 * that way and 26.5-30.1 by tasks (docs/perf-notes.md, "Winograd at batch 8"). */
typedef struct wino_tasks {
    wino_job base; /* geometry; x, y, ep of the first image */
    const kn_epilogue *ep;
    int64_t th, block_rows, blocks, tasks, is, os, slot_floats, vm;
    float *buf;
    atomic_long next;
} wino_tasks;

static void tasks_range(void *arg, int64_t begin, int64_t end) {
    wino_tasks *t = arg;
    for (int64_t w = begin; w < end; w++) {
        float *slot = t->buf + w * t->slot_floats;
        for (;;) {
            int64_t k = atomic_fetch_add_explicit(&t->next, 1, memory_order_relaxed);
            if (k >= t->tasks)
                break;
            wino_job j = t->base;
            int64_t n = k / t->blocks, b = k % t->blocks, ci = j.w->c_in, co = j.w->c_out;
            j.x += n * ci * t->is;
            j.y += n * co * t->os;
            j.ep.residual = t->ep->residual != NULL ? t->ep->residual + n * co * t->os : NULL;
            j.ty0 = b * t->block_rows;
            j.ty1 = j.ty0 + t->block_rows < t->th ? j.ty0 + t->block_rows : t->th;
            j.tb = (j.ty1 - j.ty0) * j.tw;
            j.tp = (j.tb + LANES - 1) / LANES * LANES;
            j.ld = j.tp;
            j.col0 = 0;
            j.v = slot;
            j.m = slot + j.w->npos * ci * j.tp;
            float *scratch = slot + t->vm;
            input_stage(&j, 0, ci, scratch);
            gemm_stage(&j, 0, j.w->npos, scratch);
            output_stage(&j, 0, co, scratch);
        }
    }
}

/* The task order for g's images, where it applies (several images and threads): false leaves
 * the stages split over the threads. */
static bool run_tasks(kn_threadpool *pool, wino_job *base, const kn_conv_geom *g, int64_t th,
                      int64_t block_rows, const kn_epilogue *ep) {
    int threads = kn_threadpool_size(pool);
    if (g->n < 2 || threads < 2)
        return false;
    const kn_wino *w = base->w;
    /* Smaller blocks until the rounds of tasks keep the threads busy four fifths of the time or
     * more (3 images on 2 threads as whole images would leave one idle for a third); none do:
     * the stages split over the threads. */
    int64_t tasks;
    for (;;) {
        tasks = g->n * ((th + block_rows - 1) / block_rows);
        int64_t rounds = (tasks + threads - 1) / threads;
        if (tasks * 5 >= rounds * threads * 4)
            break;
        if (block_rows == 1)
            return false;
        block_rows = (block_rows + 1) / 2;
    }
    wino_tasks t = {.base = *base, .ep = ep, .th = th, .block_rows = block_rows};
    t.blocks = (th + block_rows - 1) / block_rows;
    t.tasks = tasks;
    int64_t workers = t.tasks < threads ? t.tasks : threads;
    int64_t tb_max = (block_rows * base->tw + LANES - 1) / LANES * LANES;
    t.vm = (w->npos * (w->c_in + w->c_out) * tb_max + 15) / 16 * 16;
    t.slot_floats = t.vm + slot_scratch(w, base->wp, block_rows, tb_max, tb_max);
    t.is = base->c.h * base->c.w;
    t.os = base->c.oh * base->c.ow;
    t.buf = kn_threadpool_scratch(pool, (size_t)(workers * t.slot_floats) * sizeof(float));
    if (t.buf == NULL)
        return false;
    atomic_init(&t.next, 0);
    kn_parallel_for(pool, workers, 1, tasks_range, &t);
    return true;
}

kiln_status kn_cpu_conv_winograd(kn_threadpool *pool, const kn_wino *w, const kn_conv_geom *g,
                                 const float *x, const kn_epilogue *ep, float *y) {
    wino_job j = {.w = w, .ep = *ep};
    kn_conv_as_2d(g, &j.c);
    const kn_conv2d *c = &j.c;
    int m = w->tile, npos = w->npos;
    int64_t th = (c->oh + m - 1) / m;
    j.tw = (c->ow + m - 1) / m;
    j.wp = m * j.tw + 2;
    int64_t per_tile = npos * (w->c_in + w->c_out);
    int64_t block_rows = BLOCK_FLOATS / (per_tile * j.tw);
    block_rows = block_rows < 1 ? 1 : block_rows > th ? th : block_rows;
    int64_t tb_max = (block_rows * j.tw + LANES - 1) / LANES * LANES;
    j.ep.ldr = c->oh * c->ow;
    j.ep.bias_per_row = true;
    j.x = x;
    j.y = y;
    if (run_cols(pool, &j, g, th, ep) || run_tasks(pool, &j, g, th, block_rows, ep))
        return KILN_OK;
    j.slots = kn_threadpool_size(pool);
    j.thr_floats = slot_scratch(w, j.wp, block_rows, tb_max, tb_max);
    int64_t vm = (npos * (w->c_in + w->c_out) * tb_max + 15) / 16 * 16;
    size_t bytes = (size_t)(vm + j.slots * j.thr_floats) * sizeof(float);
    j.slot_busy = kn_calloc((size_t)j.slots, sizeof *j.slot_busy);
    float *own = NULL, *buf = kn_threadpool_scratch(pool, bytes);
    if (buf == NULL)
        buf = own = kn_aligned_alloc(bytes, 64);
    if (buf == NULL || j.slot_busy == NULL) {
        kn_free(j.slot_busy);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for Winograd buffers");
    }
    for (int i = 0; i < j.slots; i++)
        atomic_init(&j.slot_busy[i], 0);
    j.v = buf;
    j.m = buf + npos * w->c_in * tb_max;
    j.thr = buf + vm;
    int64_t os = c->oh * c->ow;
    for (int64_t n = 0; n < g->n; n++) {
        j.x = x + n * w->c_in * c->h * c->w;
        j.y = y + n * w->c_out * os;
        j.ep.residual = ep->residual != NULL ? ep->residual + n * w->c_out * os : NULL;
        j.ep.ldr = os;
        j.ep.bias_per_row = true;
        for (j.ty0 = 0; j.ty0 < th; j.ty0 = j.ty1) {
            j.ty1 = j.ty0 + block_rows < th ? j.ty0 + block_rows : th;
            j.tb = (j.ty1 - j.ty0) * j.tw;
            j.tp = (j.tb + LANES - 1) / LANES * LANES;
            j.ld = j.tp;
            j.col0 = 0;
            parallel(pool, &j, w->c_in, input_stage);
            parallel(pool, &j, npos, gemm_stage);
            parallel(pool, &j, w->c_out, output_stage);
        }
    }
    kn_free(own);
    kn_free(j.slot_busy);
    return KILN_OK;
}
