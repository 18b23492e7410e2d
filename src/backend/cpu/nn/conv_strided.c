/* Stride-2 convolutions without an im2col copy: the input is written once as padded phase
 * planes (per channel and padded row, its even columns then its odd columns), so that every
 * tap (c, ky, kx) reads one contiguous run per output row, and the GEMM reads those runs in
 * place through a table of per-tap offsets (kn_gemm_gather). The im2col packer wrote K x N
 * floats per call and took a quarter to a third of these layers (YOLO's 16 -> 32 3x3 at 160:
 * 27% packing, 6% column split). */
#include "backend/cpu/nn/conv.h"

#include "core/alloc.h"

#include <string.h>

/* Narrower outputs go two rows a tile (up to 16 columns each); below this the tile is mostly
 * padding and the packed GEMM's narrow kernels win. */
#define GATHER_MIN_OW 14
/* With more output channels the packed path wins: its B panel is reused by every row tile from
 * L1, while the gathered rows (three lines each, scattered) fall out of it. In YOLO at 320
 * (kiln bench --profile, minimum of 7 rounds): 3 -> 16 at 320 0.43 -> 0.38 ms, 16 -> 32 at 160
 * 0.51 -> 0.41, but 32 -> 64 at 80 0.37 -> 0.46 and 64 -> 64 at 40 0.20 -> 0.24. */
#define GATHER_MAX_COUT 32
/* ... but up to 64 where each output takes few inputs (the ResNet stem, 3 -> 64 7x7 at 224,
 * K = 147: 0.734 -> 0.621 ms at 2 threads and 1.263 -> 1.172 at 1, per-layer minima of 4 and 3
 * rounds): the gathered rows of a tile then stay in L1 through its row tiles. */
#define GATHER_WIDE_MAX_COUT 64
#define GATHER_WIDE_MAX_K 160
/* Padded rows up to this wide (the row buffer is on the stack). */
#define GATHER_MAX_ROW 8192

/* A band of output rows is computed by one thread from phase planes of its own (the rows of
 * every channel the band reaches), sized to stay in that thread's L2 between being written
 * and read: planes of the whole input (1.6 MB for YOLO's 16 -> 32 at 160) came back from L3
 * and held the product at 73 % of the kernel's in-cache speed. */
#define BAND_BYTES (128 * 1024)

typedef struct band_job {
    const float *x;
    const kn_conv2d *c;
    const kn_gemm_packed *a;
    const int64_t *off;
    const kn_epilogue *ep;
    float *y, *scratch;
    int64_t cin, w2, half, rs, rows_in, band, slot;
    int64_t bands, ys; /* bands an image; floats between images' outputs (and residuals) */
    bool pooled;       /* chunks run on the pool's threads: each takes the slot of its index */
} band_job;

KN_CLONES static void phase_row(const float *src, int64_t w, int64_t pw, int64_t w2, int64_t half,
                                float *row, float *d) {
    /* row: the padded input row, 2 * w2 wide; d: its even columns, then its odd columns at d +
     * half, so that both halves start on a cache line (taps with an even kx / 2 then load
     * whole lines). */
    memset(row, 0, (size_t)(2 * w2) * sizeof *row);
    if (src != NULL) {
        int64_t n = pw + w <= 2 * w2 ? w : 2 * w2 - pw;
        if (n > 0)
            memcpy(row + pw, src, (size_t)n * sizeof *row);
    }
    for (int64_t j = 0; j < w2; j++) {
        d[j] = row[2 * j];
        d[half + j] = row[2 * j + 1];
    }
}

static void run_bands(void *arg, int64_t begin, int64_t end) {
    const band_job *j = arg;
    const kn_conv2d *c = j->c;
    float row[GATHER_MAX_ROW];
    float *xq =
        j->scratch + (size_t)(j->pooled ? kn_threadpool_thread_index() : 0) * (size_t)j->slot;
    for (int64_t t = begin; t < end; t++) {
        int64_t img = t / j->bands, bi = t % j->bands;
        int64_t oy0 = bi * j->band, oy1 = oy0 + j->band < c->oh ? oy0 + j->band : c->oh;
        int64_t rows = 2 * (oy1 - oy0 - 1) + c->kh; /* padded rows the band's taps reach */
        const float *x = j->x + img * j->cin * c->h * c->w;
        for (int64_t ci = 0; ci < j->cin; ci++)
            for (int64_t r = 0; r < rows; r++) {
                int64_t ih = 2 * oy0 + r - c->ph;
                const float *src = ih >= 0 && ih < c->h ? x + (ci * c->h + ih) * c->w : NULL;
                phase_row(src, c->w, c->pw, j->w2, j->half, row,
                          xq + (ci * j->rows_in + r) * j->rs);
            }
        kn_epilogue ep = *j->ep;
        if (ep.residual != NULL)
            ep.residual += img * j->ys;
        kn_gemm_gather(j->a, xq, j->off, c->oh, c->ow, oy0, oy1, 2 * j->rs, j->y + img * j->ys,
                       &ep);
    }
}

/* Fewest output rows a band (where its planes fit BAND_BYTES): each band builds its planes' rows
 * and sets up its product anew. MobileNetV2's stem (3 -> 32, 3x3 stride 2 into 112x112) ran
 * 0.076-0.079 ms in bands of one row against 0.061-0.064 in bands of two to fourteen at two
 * threads (2-core box); the four-bands-a-thread share gave it bands of one from 15 threads. */
#define BAND_MIN_ROWS 2

/* Output rows a band: as many as keep its planes within BAND_BYTES, and on several threads no
 * more than makes four bands a thread over the images (fewer rows mean more rows built twice,
 * at the bands' edges), but BAND_MIN_ROWS. */
static int64_t band_rows(const kn_conv2d *c, int64_t cin, int64_t rs, int threads, int64_t images) {
    int64_t row_bytes = cin * rs * (int64_t)sizeof(float);
    int64_t fit = (BAND_BYTES / row_bytes - c->kh) / 2 + 1;
    int64_t share = threads > 1 ? c->oh * images / (4 * threads) : c->oh;
    share = share < BAND_MIN_ROWS ? BAND_MIN_ROWS : share;
    int64_t band = fit < share ? fit : share;
    if (band > c->oh)
        band = c->oh;
    if (band < 1)
        band = 1;
    if (kn_gemm_gather_row_group(c->ow) == 2 && band > 1) /* tiles of two rows: whole pairs */
        band &= ~(int64_t)1;
    return band;
}

bool kn_cpu_conv_strided_applies(const kn_conv2d *c, int64_t cin, int64_t cout,
                                 const kn_gemm_packed *a) {
    bool few = cout <= GATHER_MAX_COUT ||
               (cout <= GATHER_WIDE_MAX_COUT && cin * c->kh * c->kw <= GATHER_WIDE_MAX_K);
    return few && c->sh == 2 && c->sw == 2 && c->dh == 1 && c->dw == 1 &&
           (c->kh > 1 || c->kw > 1) && c->ow >= GATHER_MIN_OW &&
           (c->ow - 1) * 2 + c->kw + 1 <= GATHER_MAX_ROW && kn_gemm_gather_ok(a);
}

kiln_status kn_cpu_conv_strided(kn_threadpool *pool, const kn_conv2d *c, int64_t cin,
                                int64_t images, const float *x, const kn_gemm_packed *a,
                                const kn_epilogue *ep, float *y, int64_t ys) {
    /* Columns of the padded input the taps reach; the phase halves are w2 wide. */
    int64_t wp = (c->ow - 1) * 2 + c->kw, w2 = (wp + 1) / 2;
    int64_t half = (w2 + 15) / 16 * 16, rs = 2 * half, k = cin * c->kh * c->kw;
    int64_t band = band_rows(c, cin, rs, kn_threadpool_size(pool), images);
    int64_t rows_in = 2 * (band - 1) + c->kh, slot = (cin * rows_in * rs + 15) / 16 * 16;
    int slots = kn_threadpool_capacity(pool);
    /* The pool's scratch (kn_gemm_gather takes none), kept between runs and layers: a buffer
     * of its own each call was memory no layer had touched for a whole run, and writing the
     * planes into it cost more in the model than the im2col copy it replaces. */
    size_t bytes = (size_t)(slots * slot) * sizeof(float);
    float *own = NULL, *xq = kn_threadpool_scratch(pool, bytes);
    if (xq == NULL)
        xq = own = kn_aligned_alloc(bytes, 64);
    int64_t *off = kn_malloc((size_t)k * sizeof *off);
    if (xq == NULL || off == NULL) {
        kn_free(own);
        kn_free(off);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory in Conv");
    }
    /* Tap (ci, ky, kx) of output (oy, ox) is padded input (2 oy + ky, 2 ox + kx): column
     * ox + kx / 2 of the kx-parity half of the band's row 2 (oy - oy0) + ky. */
    for (int64_t ci = 0, i = 0; ci < cin; ci++)
        for (int64_t ky = 0; ky < c->kh; ky++)
            for (int64_t kx = 0; kx < c->kw; kx++)
                off[i++] = (ci * rows_in + ky) * rs + (kx & 1) * half + kx / 2;
    band_job bj = {.x = x,
                   .c = c,
                   .a = a,
                   .off = off,
                   .ep = ep,
                   .y = y,
                   .scratch = xq,
                   .cin = cin,
                   .w2 = w2,
                   .half = half,
                   .rs = rs,
                   .rows_in = rows_in,
                   .band = band,
                   .slot = slot,
                   .bands = (c->oh + band - 1) / band,
                   .ys = ys,
                   .pooled = pool != NULL && slots > 1};
    kn_parallel_for(pool, images * bj.bands, 1, run_bands, &bj);
    kn_free(off);
    kn_free(own);
    return KILN_OK;
}
