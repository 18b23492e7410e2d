/* fp32 Conv of one group as an implicit GEMM whose rows are output pixels and whose columns are
 * output channels (conv.h): each tile holds up to 14 output pixels x 32 output channels in
 * registers, broadcasting the pixels' input values and loading the weights as vectors of output
 * channels (arch/conv_pixels_avx512.c). conv.c's GEMM puts pixels in the vectors instead: on
 * small maps their count fills vectors badly (49 pixels of a 7x7 map take 64 lanes, 196 of a
 * 14x14 one 224) and splits badly over many threads. A 1x1 conv that is flat (stride 1,
 * unpadded) reads X where it lies: K runs over X's channel planes, a tile's pixels consecutive
 * floats of each. Other convs copy X once a call: zero-padded (stride 1) or split into the four
 * phase planes of its row and column parities (stride 2), so that every tap is a constant offset
 * from an output pixel's place in the plane, and with 16 channels interleaved, each pixel's 16
 * values one cache line (few channels, a stem's 3, stay a plane a channel). Tiles run over the
 * planes' rows as "virtual" pixels, the columns past the output's dropped. The weights are packed
 * once in panels of 32 output channels, K ordered channel block, tap, channel in the block; a
 * task takes one panel against a group of tiles, K in chunks of about 32 KB of weights, partial
 * sums kept between chunks. The output stays NCHW: each tile is transposed in registers and
 * stored channel by channel, bias, residual and activation applied on the way. */
#include "backend/cpu/arch/conv_pixels_avx512.h"
#include "backend/cpu/nn/conv.h"
#include "core/alloc.h"

#include <stdlib.h>
#include <string.h>

#define COLS KN_CONV_PIXELS_COLS
#define ROWS KN_CONV_PIXELS_ROWS
#define GROUP 8                 /* most tiles that share a chunk of the weights */
#define CHUNK_BYTES (32 * 1024) /* weights of a K chunk */
/* Most bytes a batch's stride-2 conv may copy (its images' phase planes and their 16-channel
 * interleave) to take the path by default: ResNet-50's layer3.0 conv2 copies 14.7 MB at batch
 * 8; larger batches keep the GEMM, which caps its own copies. */
#define BATCH_MAX_COPY_BYTES ((double)(64 << 20))

struct kn_conv_pixels {
    int64_t cout, cin, kh, kw, panels;
    int block;      /* input channels a K block: 16, or 1 for few channels */
    int64_t blocks; /* K blocks: cin / block rounded up */
    float *w;       /* panels x blocks x (kh * kw) x block x COLS */
};

static int mode = -1;

int kn_cpu_conv_pixels_mode(void) {
    if (mode < 0) {
        const char *e = getenv("KILN_CPU_CONV_PIXELS");
        mode = e != NULL && strcmp(e, "0") == 0 ? 0 : e != NULL && strcmp(e, "2") == 0 ? 2 : 1;
    }
    return mode;
}

void kn_cpu_conv_pixels_set_mode(int m) {
    mode = m;
}

static int copy_mode = -1;

int kn_cpu_conv_pixels_copy(void) {
    if (copy_mode < 0) {
        const char *e = getenv("KILN_CPU_CONV_PIXELS_COPY");
        copy_mode = e != NULL && strcmp(e, "job") == 0 ? KN_PIXELS_COPY_JOB : KN_PIXELS_IN_PLACE;
    }
    return copy_mode;
}

void kn_cpu_conv_pixels_set_copy(int m) {
    copy_mode = m;
}

static int order_mode = -1;

int kn_cpu_conv_pixels_order(void) {
    if (order_mode < 0) {
        const char *e = getenv("KILN_CPU_CONV_PIXELS_ORDER");
        order_mode = e != NULL && strcmp(e, "panels") == 0 ? 0 : 1;
    }
    return order_mode;
}

void kn_cpu_conv_pixels_set_order(int m) {
    order_mode = m;
}

static int batch_mode = -1;

int kn_cpu_conv_pixels_batches(void) {
    if (batch_mode < 0) {
        const char *e = getenv("KILN_CPU_CONV_PIXELS_BATCH");
        batch_mode = e != NULL && strcmp(e, "0") == 0   ? 0
                     : e != NULL && strcmp(e, "1") == 0 ? 1
                     : e != NULL && strcmp(e, "2") == 0 ? 2
                                                        : 3;
    }
    return batch_mode;
}

void kn_cpu_conv_pixels_set_batches(int m) {
    batch_mode = m;
}

/* The geometry the tile reads: stride 1 (dilated or not) or 2 (undilated), 2-D. */
static bool geometry_ok(const kn_conv2d *c) {
    return (c->sh == 1 && c->sw == 1) || (c->sh == 2 && c->sw == 2 && c->dh == 1 && c->dw == 1);
}

bool kn_cpu_conv_pixels_flat(const kn_conv2d *c) {
    return c->kh == 1 && c->kw == 1 && c->sh == 1 && c->sw == 1 && c->ph == 0 && c->pw == 0 &&
           c->oh == c->h && c->ow == c->w;
}

/* On one thread, flat convs with K >= 160 and weights up to 2 MB (a core's L2) that narrow
 * over maps up to 14x14 or widen over 7x7: MobileNetV2's projections and 7x7 expansions ran
 * 4-18 % faster than on the GEMM (2-core AMD box, `bench/ab.py --threads 1 --env-b
 * KILN_CPU_CONV_PIXELS=2`, per-layer minima: 960 -> 320 at 7x7 0.140 -> 0.121 ms, 576 -> 96 at
 * 14x14 0.100 -> 0.089, 384 -> 64 0.048 -> 0.040, 160 -> 960 at 7x7 0.070 -> 0.067), whose 196
 * and 49 pixels fill its 32-wide panels badly; ResNet-50's 1024 -> 256 at 14x14 0.435 ->
 * 0.408. Its 256 -> 1024 widening at 14x14 was not faster, and its 4 MB convs at 7x7 keep the
 * GEMM: on a Xeon they ran 70-140 us slower each on this path at one thread. */
#define ONE_THREAD_MAX_WEIGHTS (512 * 1024)

bool kn_cpu_conv_pixels_applies(const kn_conv2d *c, int64_t cin, int64_t cout, int threads) {
    int m = kn_cpu_conv_pixels_mode();
    if (m == 0 || strcmp(kn_gemm_isa(), "avx512") != 0 || !geometry_ok(c))
        return false;
    if (m == 2)
        return true;
    /* Measured inside ResNet-50, MobileNetV2 and EfficientNet-B0 on the 2-core box and a 16-core
     * Xeon (docs/perf-notes.md, "Pixel-row convs" and "Pixel-row 1x1 convs read X in place").
     * Flat convs over maps up to 14x14 read X in place, the planes and weights fetched ahead:
     * on 8 threads or more those with K >= 160, whose 49 or 196 pixels split badly into the
     * GEMM's vectors and over many threads; on 2 or more those that narrow K >= 192 over 7x7
     * maps or K >= 1024 over 14x14 (ResNet-50's 1024 -> 256; MobileNetV2's 384 -> 64 ran slower
     * there on the Xeon), and deep widening ones over 7x7; stride-2 convs into 7x7 maps from
     * K >= 1024 on 2 or more. One thread: those with K >= 160 and weights up to 2 MB
     * (ONE_THREAD_MAX_WEIGHTS) that narrow, or widen over 7x7. Larger maps keep the GEMM (the
     * planes' stride costs more than the GEMM's packing).
     * Weights up to 4 MB, 10 MB strided: a run on fewer threads packs the GEMM's too (conv.c). */
    int64_t k = cin * c->kh * c->kw, os = c->oh * c->ow, wn = k * cout;
    bool two = threads == 0 || threads >= 2, eight = threads == 0 || threads >= 8;
    if (cout < 16)
        return false;
    if (!kn_cpu_conv_pixels_flat(c))
        return two && c->sh == 2 && os <= 49 && k >= 1024 && wn <= 2560 * 1024;
    if (wn > 1024 * 1024 || os > 196)
        return false;
    if (eight && k >= 160)
        return true;
    if (!two)
        return k >= 160 && wn <= ONE_THREAD_MAX_WEIGHTS && (cout < k || os <= 49);
    if (k < 192)
        return false;
    return cout < k ? os <= 49 || k >= 1024 : os <= 49 && k >= 256;
}

bool kn_cpu_conv_pixels_takes(const kn_conv2d *c, int64_t cin, int64_t cout, int64_t images,
                              int threads) {
    int b = images == 1 ? 2 : kn_cpu_conv_pixels_batches(); /* one image: any conv the rule takes */
    if (b == 0)
        return false;
    /* Measured at batch 8 on 16 threads of a Xeon (docs/perf-notes.md, "A batch's convs on the
     * pixel-row path by default"): ResNet-50's 3x3 stride-2 conv into 14x14 maps ran 9-12 %
     * faster here than the GEMM's images side by side (196 pixels an image split badly into its
     * 32-wide panels), those into 28x28 and 7x7 maps 4-10 % slower. */
    int64_t os = c->oh * c->ow;
    double copies = 2.0 * (double)images * (double)cin * 4.0 * (double)((c->oh + 1) * (c->ow + 1)) *
                    sizeof(float);
    if (b == 3 && (threads == 0 || threads >= 8) && c->kh == 3 && c->kw == 3 && c->sh == 2 &&
        c->sw == 2 && os > 49 && os <= 196 && cin >= 16 && cout >= 16 &&
        copies <= BATCH_MAX_COPY_BYTES && kn_cpu_conv_pixels_mode() != 0 &&
        strcmp(kn_gemm_isa(), "avx512") == 0 && geometry_ok(c))
        return true;
    return (b == 2 || kn_cpu_conv_pixels_flat(c)) &&
           kn_cpu_conv_pixels_applies(c, cin, cout, threads);
}

/* A 1x1 kernel: X's planes, a channel a block (read in place where the conv is flat). Others:
 * 16-channel blocks unless the channels are few enough that padding them to 16 wastes much. */
static int block_for(int64_t cin, int64_t kh, int64_t kw) {
    if (kh == 1 && kw == 1 && kn_cpu_conv_pixels_copy() == KN_PIXELS_IN_PLACE)
        return 1;
    return cin % 16 == 0 || cin >= 48 ? 16 : 1;
}

kiln_status kn_cpu_conv_pixels_prepare(const float *w, int64_t cout, int64_t cin, int64_t kh,
                                       int64_t kw, kn_conv_pixels **out) {
    *out = NULL;
    kn_conv_pixels *p = kn_calloc(1, sizeof *p);
    if (p == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory packing conv weights");
    *p = (kn_conv_pixels){
        .cout = cout, .cin = cin, .kh = kh, .kw = kw, .block = block_for(cin, kh, kw)};
    p->panels = (cout + COLS - 1) / COLS;
    p->blocks = (cin + p->block - 1) / p->block;
    int64_t taps = kh * kw, k = p->blocks * taps * p->block;
    size_t floats = (size_t)(p->panels * k * COLS);
    p->w = kn_aligned_alloc((floats > 0 ? floats : 1) * sizeof *p->w, 64);
    if (p->w == NULL) {
        kn_free(p);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory packing conv weights");
    }
    float *d = p->w;
    for (int64_t pn = 0; pn < p->panels; pn++)
        for (int64_t cb = 0; cb < p->blocks; cb++)
            for (int64_t tap = 0; tap < taps; tap++)
                for (int64_t l = 0; l < p->block; l++)
                    for (int64_t j = 0; j < COLS; j++) {
                        int64_t co = pn * COLS + j, ci = cb * p->block + l;
                        *d++ = co < cout && ci < cin ? w[(co * cin + ci) * taps + tap] : 0.0f;
                    }
    *out = p;
    return KILN_OK;
}

void kn_cpu_conv_pixels_free(kn_conv_pixels *p) {
    if (p == NULL)
        return;
    kn_free(p->w);
    kn_free(p);
}

bool kn_cpu_conv_pixels_fits(const kn_conv_pixels *p, int64_t cout, int64_t cin, int64_t kh,
                             int64_t kw) {
    return p != NULL && p->cout == cout && p->cin == cin && p->kh == kh && p->kw == kw;
}

typedef struct px_job {
    const kn_conv_pixels *p;
    const kn_conv2d *c;
    const float *x;
    float *planes;       /* one channel's plane after another, cs apart (not for flat block 1) */
    float *blocked;      /* block 16: each K block's plane of 16-channel pixels, 16 * cs apart */
    const float *a;      /* what the tiles read: x, planes or blocked */
    int64_t hq, wq, cs;  /* plane rows, row pitch, floats of one channel's plane(s) */
    const int64_t *offs; /* per tap */
    int64_t images, x_img, a_img, y_img; /* x, a, y and res: an image's floats apart */
    bool flat;
    /* tiles: `width` virtual pixels (output rows wq apart; flat: os) split evenly; taken
     * `group` at a time (`groups` groups) over K chunks of `chunk` channel blocks */
    int64_t width, base, extra, tiles, group, groups, chunk;
    bool pixel_major;  /* tasks ordered group after group (each group's panels together) */
    const float *bias; /* panels x COLS, zero past cout; or NULL */
    const float *res;
    float *y;
    int64_t os;
    int act;
    float alpha, beta, lo, hi;
} px_job;

/* K blocks [begin, end) of the source, over every image (image by image): their channels'
 * planes, interleaved by 16. */
static void build_source(void *arg, int64_t begin, int64_t end) {
    const px_job *j = arg;
    const kn_conv_pixels *p = j->p;
    for (int64_t t = begin; t < end; t++) {
        int64_t img = t / p->blocks, cb = t % p->blocks;
        int64_t c0 = cb * p->block, n = p->cin - c0 < p->block ? p->cin - c0 : p->block;
        const float *x = j->x + img * j->x_img;
        float *planes = j->planes + img * p->cin * j->cs;
        if (!j->flat)
            for (int64_t ch = c0; ch < c0 + n; ch++)
                kn_cpu_conv_plane_avx512(j->c, x + ch * j->c->h * j->c->w, j->hq, j->wq,
                                         planes + ch * j->cs);
        if (p->block == 16) {
            const float *src = j->flat ? x + c0 * j->cs : planes + c0 * j->cs;
            kn_cpu_conv_pixels_interleave_avx512(src, j->cs, (int)n, j->cs,
                                                 j->blocked + img * j->a_img + cb * 16 * j->cs);
        }
    }
}

/* Tile `tile` of the job: its first virtual pixel, rows, the rows that are output pixels and the
 * output pixel of the first of those (-1: none). */
typedef struct tile_at {
    int64_t v0, pix;
    int rows;
    uint16_t valid;
} tile_at;

static tile_at locate(const px_job *j, int64_t tile) {
    tile_at at = {.v0 = tile * j->base + (tile < j->extra ? tile : j->extra), .pix = -1};
    at.rows = (int)(j->base + (tile < j->extra ? 1 : 0));
    /* rows are virtual pixels v = oh * wq + ow; those with ow >= OW are not stored */
    for (int r = 0; r < at.rows; r++) {
        int64_t v = at.v0 + r, q = j->flat ? 0 : v % j->wq;
        if (q < j->c->ow) {
            at.valid |= (uint16_t)(1u << r);
            if (at.pix < 0)
                at.pix = j->flat ? v : v / j->wq * j->c->ow + q;
        }
    }
    return at;
}

/* One tile against panel pn over K blocks [cb, cb + nb): its first pixel of block cb at a, the
 * blocks bs floats apart; partial sums kept in sum between the calls of one tile and panel, the
 * epilogue applied on the last. */
static void tile_run(const px_job *j, const tile_at *at, int64_t img, const float *a, int64_t bs,
                     int64_t pn, int64_t cb, int64_t nb, float *sum) {
    const kn_conv_pixels *p = j->p;
    int64_t taps = p->kh * p->kw, j0 = pn * COLS;
    int nr = (int)(p->cout - j0 < COLS ? p->cout - j0 : COLS);
    bool first = cb == 0, last = cb + nb == p->blocks, after = !kn_act_in_regs(j->act);
    kn_conv_pixels_tile tl = {.a = a,
                              .off = j->offs,
                              .taps = taps,
                              .blocks = nb,
                              .bs = bs,
                              .block = p->block,
                              .b = p->w + (pn * p->blocks + cb) * taps * p->block * COLS,
                              .sum_in = first ? NULL : sum,
                              .sum_out = last ? NULL : sum,
                              .rows = at->rows,
                              .valid = at->valid,
                              .nr = nr,
                              .bias = j->bias != NULL ? j->bias + j0 : NULL,
                              .res = j->res != NULL ? j->res + img * j->y_img + j0 * j->os + at->pix
                                                    : NULL,
                              .y = j->y + img * j->y_img + j0 * j->os + at->pix,
                              .ld = j->os,
                              .act = after ? KN_ACT_NONE : j->act,
                              .lo = j->lo,
                              .hi = j->hi};
    kn_cpu_conv_pixels_tile_avx512(&tl);
    if (last && after)
        kn_act_apply_rows(j->act, j->alpha, j->beta, tl.y, j->os, nr,
                          __builtin_popcount(at->valid));
}

/* Task t: a panel against a group of tiles, which runs over the images' tiles one image after
 * another (a group may hold tiles of two images), K in chunks of j->chunk channel blocks
 * (weights a chunk that stay in L1 while every tile of the group takes them), partial sums kept
 * between chunks. One image: panel t / groups, so that a thread's run of tasks writes a range of
 * channels, as the depthwise conv after it reads them (a plane a task). A batch: panel t %
 * panels of group t / panels, so that a thread writes a range of images' pixels, as the
 * depthwise conv reads a batch (an image's planes on neighbouring threads) and the GEMM's
 * batches write them; panel after panel, each of a batch's images was written by every thread. */
static void run_tiles(void *arg, int64_t begin, int64_t end) {
    const px_job *j = arg;
    const kn_conv_pixels *p = j->p;
    float sums[GROUP][ROWS * COLS] __attribute__((aligned(64)));
    int64_t all = j->images * j->tiles;
    for (int64_t t = begin; t < end; t++) {
        int64_t pn = j->pixel_major ? t % p->panels : t / j->groups;
        int64_t g0 = (j->pixel_major ? t / p->panels : t % j->groups) * j->group;
        int64_t g1 = g0 + j->group < all ? g0 + j->group : all;
        tile_at ats[GROUP]; /* located once a task: a row's place is a division */
        for (int64_t tile = g0; tile < g1; tile++)
            ats[tile - g0] = locate(j, tile % j->tiles);
        for (int64_t cb = 0; cb < p->blocks; cb += j->chunk) {
            int64_t nb = p->blocks - cb < j->chunk ? p->blocks - cb : j->chunk;
            for (int64_t tile = g0; tile < g1; tile++) {
                int64_t img = tile / j->tiles;
                const tile_at *at = &ats[tile - g0];
                if (at->valid != 0)
                    tile_run(j, at, img,
                             j->a + img * j->a_img + at->v0 * p->block + cb * j->cs * p->block,
                             j->cs * p->block, pn, cb, nb, sums[tile - g0]);
            }
        }
    }
}

static size_t up64(size_t bytes) {
    return (bytes + 63) / 64 * 64;
}

kiln_status kn_cpu_conv_pixels(kn_threadpool *pool, const kn_conv_pixels *p, const kn_conv2d *c,
                               int64_t images, const float *x, const kn_epilogue *ep, float *y) {
    if (c->oh <= 0 || c->ow <= 0 || p->cout <= 0 || images <= 0)
        return KILN_OK; /* an empty output */
    px_job j = {.p = p,
                .c = c,
                .x = x,
                .images = images,
                .x_img = p->cin * c->h * c->w,
                .y_img = p->cout * c->oh * c->ow,
                .flat = kn_cpu_conv_pixels_flat(c),
                .res = ep->residual,
                .y = y,
                .os = c->oh * c->ow,
                .act = ep->act,
                .alpha = ep->alpha,
                .beta = ep->beta,
                .lo = ep->act == KN_ACT_CLIP ? ep->alpha : 0.0f,
                .hi = ep->act == KN_ACT_CLIP ? ep->beta : 0.0f};
    int64_t taps = p->kh * p->kw;
    if (j.flat) {
        j.cs = c->h * c->w;
        j.width = j.os;
    } else {
        bool s2 = c->sh == 2;
        j.hq = c->oh + (p->kh - 1) * (s2 ? 1 : c->dh) / (s2 ? 2 : 1);
        j.wq = c->ow + (p->kw - 1) * (s2 ? 1 : c->dw) / (s2 ? 2 : 1);
        j.cs = (s2 ? 4 : 1) * j.hq * j.wq;
        j.width = c->oh * j.wq;
    }
    /* The last tile's dropped rows read up to (kw - 1) * dw floats past the last plane. */
    size_t slack = (size_t)(p->kw * c->dw + 16) * sizeof(float);
    size_t plane_bytes =
        j.flat ? 0 : up64((size_t)(images * p->cin * j.cs) * sizeof(float) + slack);
    size_t blocked_bytes =
        p->block == 16 ? up64((size_t)(images * p->blocks * 16 * j.cs) * sizeof(float) + 16 * slack)
                       : 0;
    size_t off_bytes = up64((size_t)taps * sizeof(int64_t));
    size_t bias_bytes = (size_t)(p->panels * COLS) * sizeof(float);
    size_t bytes = plane_bytes + blocked_bytes + off_bytes + bias_bytes;
    uint8_t *own = NULL, *buf = kn_threadpool_scratch(pool, bytes);
    if (buf == NULL && (buf = own = kn_aligned_alloc(bytes, 64)) == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory in Conv");
    j.planes = (float *)buf;
    j.blocked = (float *)(buf + plane_bytes);
    int64_t *offs = (int64_t *)(buf + plane_bytes + blocked_bytes);
    float *bias = (float *)(buf + plane_bytes + blocked_bytes + off_bytes);
    offs[0] = 0;
    for (int64_t t = 0; t < taps && !j.flat; t++) {
        int64_t ky = t / p->kw, kx = t % p->kw, o;
        if (c->sh == 2)
            o = ((ky % 2) * 2 + kx % 2) * j.hq * j.wq + (ky / 2) * j.wq + kx / 2;
        else
            o = ky * c->dh * j.wq + kx * c->dw;
        offs[t] = o * p->block;
    }
    j.offs = offs;
    if (ep->bias != NULL) {
        memcpy(bias, ep->bias, (size_t)p->cout * sizeof *bias);
        memset(bias + p->cout, 0, (size_t)(p->panels * COLS - p->cout) * sizeof *bias);
        j.bias = bias;
    }
    j.a = p->block == 16 ? j.blocked : j.flat ? x : j.planes;
    j.a_img = p->block == 16 ? p->blocks * 16 * j.cs : p->cin * j.cs; /* flat: cs = h * w */
    j.tiles = (j.width + ROWS - 1) / ROWS;
    j.base = j.width / j.tiles;
    j.extra = j.width % j.tiles;
    /* K chunks of about 32 KB of weights; groups of tiles that share them, as large as leaves
     * every thread two tasks */
    int64_t step = taps * p->block * COLS * (int64_t)sizeof(float);
    j.chunk = CHUNK_BYTES / step > 1 ? CHUNK_BYTES / step : 1;
    int64_t threads = kn_threadpool_size(pool);
    int64_t all = images * j.tiles;
    j.group = p->panels * all / (2 * threads);
    j.group = j.group < 1 ? 1 : j.group > GROUP ? GROUP : j.group;
    j.group = j.group < all ? j.group : all;
    j.groups = (all + j.group - 1) / j.group;
    j.pixel_major = images > 1 && kn_cpu_conv_pixels_order() == 1;
    if (p->block == 16 || !j.flat)
        kn_parallel_for(pool, images * p->blocks, 1, build_source, &j);
    kn_parallel_for(pool, p->panels * j.groups, 1, run_tiles, &j);
    kn_free(own);
    return KILN_OK;
}
