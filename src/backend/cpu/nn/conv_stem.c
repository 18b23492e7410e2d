/* Direct fp32 convolution for few input channels (a network's stem: 3 channels of an image),
 * conv.h. As a GEMM its K is short (3 x 3 x 3 = 27, or 147 for a 7x7 kernel) and its columns
 * many (one per output pixel), so conv.c's path spends its time building im2col panels for
 * products that barely use them. Stride 2 (kernels up to 7 wide) reads the input where it lies:
 * a task takes one output row x 8 or 16 output channels, 16 pixels at a time, each pair of
 * kernel columns two masked loads of an input row split by permutes into its even and odd
 * columns (kn_cpu_conv_stem_s2_row_avx512); one job, no copies. Otherwise each input channel is
 * copied once into a zero-padded plane (stride 1) or its four row/column phase planes (stride
 * 2), so that every tap of every output pixel is a constant offset from the pixel's place;
 * blocks of up to 64 pixels of one output row x 6 output channels then load each tap's input
 * values as vectors and multiply them by the channels' broadcast weights
 * (arch/conv_stem_avx512.c), the weights read as they are stored. */
#include "backend/cpu/arch/conv_stem_avx512.h"
#include "backend/cpu/nn/conv.h"
#include "core/alloc.h"

#include <stdlib.h>
#include <string.h>

#define PIXELS KN_CONV_STEM_PIXELS
#define COUT KN_CONV_STEM_COUT
#define S2_COUT KN_CONV_STEM_S2_COUT

static int enabled = -1;

/* KILN_CPU_CONV_STEM: 0 off, 2 any kernel size (for measuring), else the rule below. */
static int stem_mode(void) {
    if (enabled < 0) {
        const char *e = getenv("KILN_CPU_CONV_STEM");
        enabled = e != NULL && strcmp(e, "0") == 0 ? 0 : e != NULL && strcmp(e, "2") == 0 ? 2 : 1;
    }
    return enabled;
}

bool kn_cpu_conv_stem_enabled(void) {
    return stem_mode() != 0;
}

void kn_cpu_conv_stem_set_enabled(bool on) {
    enabled = on;
}

static int batch_on = -1;

bool kn_cpu_conv_stem_batches(void) {
    if (batch_on < 0) {
        const char *e = getenv("KILN_CPU_CONV_STEM_BATCH");
        batch_on = e != NULL && strcmp(e, "1") == 0;
    }
    return batch_on != 0;
}

void kn_cpu_conv_stem_set_batches(bool on) {
    batch_on = on;
}

static int in_place_on = -1;

/* KILN_CPU_CONV_STEM_S2=0: stride-2 stems build phase planes (the gathered path's, or the stem
 * kernel's for 25 taps or more), as before the in-place kernel. */
bool kn_cpu_conv_stem_in_place(const kn_conv2d *c) {
    if (in_place_on < 0) {
        const char *e = getenv("KILN_CPU_CONV_STEM_S2");
        in_place_on = !(e != NULL && strcmp(e, "0") == 0);
    }
    return in_place_on && c->sh == 2 && c->sw == 2 && c->kw <= KN_CONV_STEM_S2_MAX_K;
}

void kn_cpu_conv_stem_set_in_place(bool on) {
    in_place_on = on;
}

static int64_t group_width = -1;

/* Output channels a task of the in-place path writes. 8 for kernels up to 3 wide, 16 for wider
 * ones, measured inside models on the 2-core AMD box (per-layer minima, `bench/ab.py --layers`,
 * one thread): the detector's 3x3 stem (3 -> 16 at 320, 27 products an output) 0.678 ms with
 * tasks of 16 channels, 0.520 with 8 (0.541-0.555 on the gathered path): 16 rows written at
 * once, far apart, cost more than the permutes that 8 channels a task repeat; EfficientNet-B0's
 * 0.451 -> 0.428. ResNet-50's 7x7 stem (147 products an output) 2.45 ms with 16, 2.59 with 8.
 * KILN_CPU_CONV_STEM_S2_GROUP=8 or 16 sets it for every kernel, for measuring. */
static int64_t s2_group(const kn_conv2d *c) {
    if (group_width < 0) {
        const char *e = getenv("KILN_CPU_CONV_STEM_S2_GROUP");
        group_width = e != NULL && strcmp(e, "8") == 0    ? 8
                      : e != NULL && strcmp(e, "16") == 0 ? 16
                                                          : 0;
    }
    return group_width > 0 ? group_width : c->kw <= 3 ? 8 : S2_COUT;
}

void kn_cpu_conv_stem_set_group(int width) {
    group_width = width;
}

bool kn_cpu_conv_stem_geometry(const kn_conv2d *c, int64_t cin, int64_t cout) {
    bool s1 = c->sh == 1 && c->sw == 1, s2 = c->sh == 2 && c->sw == 2;
    return strcmp(kn_gemm_isa(), "avx512") == 0 && cin >= 1 && cin <= 4 && cout >= 1 &&
           (s1 || s2) && c->dh == 1 && c->dw == 1 && c->ow >= 16 && cin * c->kh * c->kw <= 256;
}

/* Over planes, measured on a 16-core Xeon (docs/perf-notes.md, "A direct kernel for stems"):
 * ResNet-50's 7x7 stem 1.34x / 1.32x / 1.08x the GEMM's speed at 1 / 2 / 16 threads; 3x3 stems
 * (MobileNetV2, EfficientNet-B0, the detector) 0.92-1.15x at 1 and 2 threads and 0.32-0.69x at
 * 16, where building the 3 channels' planes took 3 threads. So kernels of 25 taps or more, and
 * every stride-2 stem read in place (perf-notes.md, "Stride-2 stems read in place"). */
bool kn_cpu_conv_stem_applies(const kn_conv2d *c, int64_t cin, int64_t cout) {
    return kn_cpu_conv_stem_enabled() && kn_cpu_conv_stem_geometry(c, cin, cout) &&
           (c->kh * c->kw >= 25 || stem_mode() == 2 || kn_cpu_conv_stem_in_place(c));
}

typedef struct stem_job {
    const kn_conv2d *c;
    int64_t cin, cout, taps, hq, wq, cs, groups, os;
    int64_t rows, bands; /* padded rows a plane (before a split) and row bands a plane's build */
    const float *x, *w, *bias, *res;
    float *planes, *y;
    int64_t gw;          /* stride 2 in place: output channels a task (s2_group: 8 or 16) */
    const float *packed; /* ... their weights by taps, S2_COUT floats a tap (zeros past gw) */
    const int64_t *off;
    int act;
    float alpha, beta, lo, hi;
} stem_job;

/* Padded rows a task of the planes' build: one image's 3 planes are a few tasks for many
 * threads (ResNet-50's 7x7 stem: 3 planes of 230 rows). */
#define PLANE_BAND 32

/* Task t: a band of rows of plane t / bands (image, then channel). */
static void build_planes(void *arg, int64_t begin, int64_t end) {
    const stem_job *j = arg;
    const kn_conv2d *c = j->c;
    for (int64_t t = begin; t < end; t++) {
        int64_t p = t / j->bands, r0 = t % j->bands * PLANE_BAND;
        int64_t r1 = r0 + PLANE_BAND < j->rows ? r0 + PLANE_BAND : j->rows;
        kn_cpu_conv_plane_rows_avx512(c, j->x + p * c->h * c->w, j->hq, j->wq, r0, r1,
                                      j->planes + p * j->cs);
    }
}

/* A task of the rows' jobs: an image's output row and group of output channels. */
typedef struct stem_task {
    int64_t img, oy, co, at; /* at: the row's first output of channel co */
    int n;                   /* channels in the group */
} stem_task;

/* Task t: image t / (oh * groups), its output row and group of `width` output channels. */
static stem_task locate(const stem_job *j, int64_t t, int64_t width) {
    int64_t per_image = j->c->oh * j->groups, r = t % per_image;
    stem_task k = {.img = t / per_image, .oy = r / j->groups, .co = r % j->groups * width};
    k.n = (int)(j->cout - k.co < width ? j->cout - k.co : width);
    k.at = k.img * j->cout * j->os + k.co * j->os + k.oy * j->c->ow;
    return k;
}

/* Task t: image t / (oh * groups), its output row and group of COUT output channels. */
static void run_rows(void *arg, int64_t begin, int64_t end) {
    const stem_job *j = arg;
    const kn_conv2d *c = j->c;
    bool after = !kn_act_in_regs(j->act);
    for (int64_t t = begin; t < end; t++) {
        stem_task k = locate(j, t, COUT);
        int64_t img = k.img, oy = k.oy, co = k.co, at = k.at;
        int n = k.n;
        const float *planes = j->planes + img * j->cin * j->cs;
        for (int64_t p = 0; p < c->ow; p += PIXELS) {
            kn_conv_stem_block b = {.x = planes + oy * j->wq + p,
                                    .off = j->off,
                                    .taps = j->taps,
                                    .w = j->w + co * j->taps,
                                    .pixels = (int)(c->ow - p < PIXELS ? c->ow - p : PIXELS),
                                    .cout = n,
                                    .bias = j->bias != NULL ? j->bias + co : NULL,
                                    .res = j->res != NULL ? j->res + at + p : NULL,
                                    .y = j->y + at + p,
                                    .ld = j->os,
                                    .act = after ? KN_ACT_NONE : j->act,
                                    .lo = j->lo,
                                    .hi = j->hi};
            kn_cpu_conv_stem_block_avx512(&b);
        }
        if (after)
            kn_act_apply_rows(j->act, j->alpha, j->beta, j->y + at, j->os, n, c->ow);
    }
}

/* Stride 2 read in place: task t is image t / (oh * groups), its output row and group of gw
 * output channels; no planes, one job. */
static void run_rows_s2(void *arg, int64_t begin, int64_t end) {
    const stem_job *j = arg;
    const kn_conv2d *c = j->c;
    bool after = !kn_act_in_regs(j->act);
    for (int64_t t = begin; t < end; t++) {
        stem_task k = locate(j, t, j->gw);
        kn_conv_stem_s2_block b = {.x = j->x + k.img * j->cin * c->h * c->w,
                                   .h = c->h,
                                   .w = c->w,
                                   .cin = j->cin,
                                   .kh = c->kh,
                                   .kw = c->kw,
                                   .iy = 2 * k.oy - c->ph,
                                   .ix = -c->pw,
                                   .wt = j->packed + k.co / j->gw * S2_COUT * j->taps,
                                   .pixels = (int)c->ow,
                                   .cout = k.n,
                                   .bias = j->bias != NULL ? j->bias + k.co : NULL,
                                   .res = j->res != NULL ? j->res + k.at : NULL,
                                   .y = j->y + k.at,
                                   .ld = j->os,
                                   .act = after ? KN_ACT_NONE : j->act,
                                   .lo = j->lo,
                                   .hi = j->hi};
        kn_cpu_conv_stem_s2_row_avx512(&b);
        if (after)
            kn_act_apply_rows(j->act, j->alpha, j->beta, j->y + k.at, j->os, k.n, c->ow);
    }
}

kiln_status kn_cpu_conv_stem(kn_threadpool *pool, const kn_conv2d *c, int64_t cin, int64_t cout,
                             int64_t images, const float *x, const float *w, const kn_epilogue *ep,
                             float *y) {
    if (c->oh <= 0 || c->ow <= 0 || cout <= 0 || images <= 0)
        return KILN_OK; /* an empty output */
    bool s2 = c->sh == 2;
    stem_job j = {.c = c,
                  .cin = cin,
                  .cout = cout,
                  .taps = cin * c->kh * c->kw,
                  .hq = c->oh + (s2 ? (c->kh - 1) / 2 : c->kh - 1),
                  .wq = c->ow + (s2 ? (c->kw - 1) / 2 : c->kw - 1),
                  .groups = (cout + COUT - 1) / COUT,
                  .os = c->oh * c->ow,
                  .x = x,
                  .w = w,
                  .bias = ep->bias,
                  .res = ep->residual,
                  .y = y,
                  .act = ep->act,
                  .alpha = ep->alpha,
                  .beta = ep->beta,
                  .lo = ep->act == KN_ACT_CLIP ? ep->alpha : 0.0f,
                  .hi = ep->act == KN_ACT_CLIP ? ep->beta : 0.0f};
    if (kn_cpu_conv_stem_in_place(c)) {
        j.gw = s2_group(c);
        j.groups = (cout + j.gw - 1) / j.gw;
        size_t n = (size_t)(j.groups * S2_COUT * j.taps);
        float *own = NULL, *packed = kn_threadpool_scratch(pool, n * sizeof(float));
        if (packed == NULL && (packed = own = kn_aligned_alloc(n * sizeof(float), 64)) == NULL)
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory in Conv");
        for (int64_t g = 0; g < j.groups; g++)
            for (int64_t t = 0; t < j.taps; t++)
                for (int64_t i = 0; i < S2_COUT; i++) {
                    int64_t co = g * j.gw + i;
                    packed[(g * j.taps + t) * S2_COUT + i] =
                        co < cout && i < j.gw ? w[co * j.taps + t] : 0.0f;
                }
        j.packed = packed;
        kn_parallel_for(pool, images * c->oh * j.groups, 1, run_rows_s2, &j);
        kn_free(own);
        return KILN_OK;
    }
    j.cs = (s2 ? 4 : 1) * j.hq * j.wq;
    j.rows = s2 ? 2 * j.hq : j.hq;
    j.bands = (j.rows + PLANE_BAND - 1) / PLANE_BAND;
    /* a block's vectors read up to PIXELS floats past its row: past the last plane too */
    size_t plane_bytes =
        ((size_t)(images * cin * j.cs + PIXELS + 16) * sizeof(float) + 63) / 64 * 64;
    size_t bytes = plane_bytes + (size_t)j.taps * sizeof(int64_t);
    uint8_t *own = NULL, *buf = kn_threadpool_scratch(pool, bytes);
    if (buf == NULL && (buf = own = kn_aligned_alloc(bytes, 64)) == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory in Conv");
    j.planes = (float *)buf;
    memset(j.planes + images * cin * j.cs, 0, (PIXELS + 16) * sizeof(float));
    int64_t *off = (int64_t *)(buf + plane_bytes);
    for (int64_t ci = 0, t = 0; ci < cin; ci++)
        for (int64_t ky = 0; ky < c->kh; ky++)
            for (int64_t kx = 0; kx < c->kw; kx++, t++)
                off[t] = ci * j.cs +
                         (s2 ? ((ky % 2) * 2 + kx % 2) * j.hq * j.wq + (ky / 2) * j.wq + kx / 2
                             : ky * j.wq + kx);
    j.off = off;
    kn_parallel_for(pool, images * cin * j.bands, 1, build_planes, &j);
    kn_parallel_for(pool, images * c->oh * j.groups, 1, run_rows, &j);
    kn_free(own);
    return KILN_OK;
}
