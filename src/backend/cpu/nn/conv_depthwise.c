/* Depthwise convolution: each channel convolved with its own kernel. With AVX-512:
 * - 3x3 up to 28x28 and under 14 columns, 5x5 and 7x7 up to 14x14, stride 1 with k / 2
 *   padding: planes copied with their rows w + k / 2 apart, so one zero gap is both paddings,
 *   and computed 16 positions a vector, the epilogue in registers (kn_cpu_dw_shared_pad_avx512);
 *   in parallel over planes;
 * - other 3x3 with one row and column of padding before (stride 1: after too), stride 1, or
 *   stride 2 from 8 output columns: strips of up to four vectors walked down the plane, each
 *   input row read once (kn_cpu_dw3_strips_avx512); in parallel over planes;
 * - other 3x3 and 5x5, dilation 1, stride 1 or 2, the usual pads (k / 2, or one less on the
 *   left), planes of >= 8 output columns (3x3 stride 2: >= 7): straight from the unpadded plane,
 *   several output rows at a time, the epilogue in registers (kn_cpu_dw_direct_avx512); in
 *   parallel over planes;
 * - other 3x3, 5x5 and 7x7, dilation 1, stride 2 (and stride 1 on rows up to 28 outputs): blocks of
 *   16 channels, one channel per vector lane (kn_cpu_dw_c16_avx512), in parallel over blocks;
 * - other stride 1 and stride 2 planes are zero-padded (stride 2 also split into its four phase
 *   planes) and computed whole, in parallel over planes: 3x3 undilated with rows of >= 12
 *   outputs by the row kernel with the weights in registers, the rest by the flat-plane kernel;
 * - other strides go row by row to the AVX-512 row kernel.
 * Without AVX-512, a row is built from kh*kw scaled input rows (contiguous for stride 1, so the
 * loop vectorizes) and the epilogue runs on the row while it is in L1. */
#include "backend/cpu/nn/conv.h"

#include "core/alloc.h"

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

typedef struct dw_job {
    const kn_conv2d *c;
    int64_t channels;
    const float *x, *w;
    const kn_epilogue *ep;
    float *y;
    const int64_t *lo, *hi; /* per kernel column: output columns whose tap is inside */
    int64_t left, right;    /* columns whose taps are all inside */
    /* With AVX-512 a plane is first copied into a zero-padded buffer so that every tap of every
     * output is inside it: the kernels then need no per-tap bounds. */
    bool pad;
    bool flat;                /* whole planes through kn_cpu_dw_plane_flat_avx512 */
    bool phases;              /* stride 2: the padded plane is split into phase planes first */
    bool dw3;                 /* 3x3 undilated: kn_cpu_dw3_plane_avx512 instead of flat */
    kn_conv2d cp;             /* geometry over the padded plane */
    const int64_t *off;       /* flat-plane tap offsets */
    int64_t flat_wp;          /* flat-plane row stride */
    const int64_t *plo, *phi; /* lo, hi over the padded plane (every tap inside) */
    bool avx512;
} dw_job;

KN_CLONES static void axpy_s1(float *y, const float *x, float a, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

KN_CLONES static void axpy_s2(float *y, const float *x, float a, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[2 * i];
}

static void axpy_strided(float *y, const float *x, int64_t s, float a, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i * s];
}

static void portable_row(const dw_job *j, const kn_dw_row *r) {
    const kn_conv2d *c = j->c;
    for (int64_t ow = 0; ow < c->ow; ow++)
        r->y[ow] = r->bias;
    for (int64_t ky = r->ky0; ky < r->ky1; ky++) {
        const float *xr = r->x + (r->oh * c->sh - c->ph + ky * c->dh) * c->w;
        for (int64_t kx = 0; kx < c->kw; kx++) {
            int64_t lo = j->lo[kx], hi = j->hi[kx];
            if (hi <= lo)
                continue;
            float wv = r->w[ky * c->kw + kx];
            const float *src = xr + kx * c->dw - c->pw + lo * c->sw;
            if (c->sw == 1)
                axpy_s1(r->y + lo, src, wv, hi - lo);
            else if (c->sw == 2)
                axpy_s2(r->y + lo, src, wv, hi - lo);
            else
                axpy_strided(r->y + lo, src, c->sw, wv, hi - lo);
        }
    }
    kn_epilogue e = {.residual = r->res,
                     .ldr = c->ow,
                     .act = j->ep->act,
                     .alpha = j->ep->alpha,
                     .beta = j->ep->beta};
    if (e.residual != NULL || e.act != KN_ACT_NONE)
        kn_epilogue_apply(&e, r->y, c->ow, 0, 0, 1, c->ow);
}

static void pad_plane(const dw_job *j, const float *x, float *buf) {
    const kn_conv2d *c = j->c, *p = &j->cp;
    if (j->avx512 && c->w >= 32) { /* measured: faster on wide planes, slower on small ones */
        kn_cpu_dw_pad_avx512(x, c->h, c->w, c->ph, c->pw, p->h, p->w, buf);
        return;
    }
    memset(buf, 0, (size_t)(p->h * p->w) * sizeof(float));
    for (int64_t i = 0; i < c->h; i++)
        memcpy(buf + (i + c->ph) * p->w + c->pw, x + i * c->w, (size_t)c->w * sizeof(float));
}

static void flat_plane(const dw_job *j, int64_t plane, const float *x, float *tmp) {
    const kn_conv2d *c = &j->cp;
    const kn_epilogue *ep = j->ep;
    int64_t ch = plane % j->channels, os = c->oh * c->ow;
    kn_dw_flat f = {.x = x,
                    .wp = j->flat_wp,
                    .w = j->w + ch * c->kh * c->kw,
                    .off = j->off,
                    .ntaps = c->kh * c->kw,
                    .oh = c->oh,
                    .ow = c->ow,
                    .bias = ep->bias != NULL ? ep->bias[ch] : 0.0f,
                    .clamp = ep->act == KN_ACT_RELU || ep->act == KN_ACT_CLIP,
                    .lo = ep->act == KN_ACT_RELU ? 0.0f : ep->alpha,
                    .hi = ep->act == KN_ACT_RELU ? INFINITY : ep->beta,
                    .res = ep->residual != NULL ? ep->residual + plane * os : NULL,
                    .tmp = tmp,
                    .y = j->y + plane * os,
                    .phase = (j->cp.h / 2) * (j->cp.w / 2)};
    if (j->dw3)
        kn_cpu_dw3_plane_avx512(&f, j->phases ? 2 : 1);
    else
        kn_cpu_dw_plane_flat_avx512(&f);
    if (ep->act != KN_ACT_NONE && !f.clamp)
        kn_act_apply(ep->act, ep->alpha, ep->beta, f.y, os);
}

static void dw_plane(const dw_job *j, int64_t plane, float *buf, float *phases, float *tmp) {
    const kn_conv2d *c = j->c;
    const kn_epilogue *ep = j->ep;
    int64_t ch = plane % j->channels;
    const float *x = j->x + plane * c->h * c->w;
    /* Wide stride-2 planes skip the padded copy (one pass less over a plane that is not in
     * cache); on narrower ones the two simple passes measured faster. */
    bool direct_split = j->phases && tmp != NULL && c->w >= 96;
    if (buf != NULL && !direct_split)
        pad_plane(j, x, buf);
    if (tmp != NULL) {
        const float *src = buf != NULL ? buf : x;
        if (direct_split)
            kn_cpu_dw_pad_split_avx512(x, c->h, c->w, c->ph, c->pw, j->cp.h / 2, j->cp.w / 2,
                                       phases);
        else if (j->phases)
            kn_cpu_dw_split_phases_avx512(buf, j->cp.h / 2, j->cp.w / 2, phases);
        if (j->phases)
            src = phases;
        flat_plane(j, plane, src, tmp);
        return;
    }
    if (buf != NULL) {
        c = &j->cp;
        x = buf;
    }
    kn_dw_row r = {.c = c,
                   .x = x,
                   .w = j->w + ch * c->kh * c->kw,
                   .lo = buf != NULL ? j->plo : j->lo,
                   .hi = buf != NULL ? j->phi : j->hi,
                   .left = buf != NULL ? 0 : j->left,
                   .right = buf != NULL ? c->ow : j->right,
                   .bias = ep->bias != NULL ? ep->bias[ch] : 0.0f};
    bool clamp = ep->act == KN_ACT_RELU || ep->act == KN_ACT_CLIP;
    for (int64_t oh = 0; oh < c->oh; oh++) {
        r.oh = oh;
        r.y = j->y + (plane * c->oh + oh) * c->ow;
        r.res = ep->residual != NULL ? ep->residual + (plane * c->oh + oh) * c->ow : NULL;
        int64_t base = oh * c->sh - c->ph;
        r.ky0 = 0;
        while (r.ky0 < c->kh && base + r.ky0 * c->dh < 0)
            r.ky0++;
        r.ky1 = r.ky0;
        while (r.ky1 < c->kh && base + r.ky1 * c->dh < c->h)
            r.ky1++;
        if (!j->avx512) {
            portable_row(j, &r);
            continue;
        }
        r.clamp = clamp;
        r.lo_clamp = ep->act == KN_ACT_RELU ? 0.0f : ep->alpha;
        r.hi_clamp = ep->act == KN_ACT_RELU ? INFINITY : ep->beta;
        kn_cpu_dw_row_avx512(&r);
    }
    /* Once over the plane (in L1 still) rather than per row: the set-up is not per row. */
    if (j->avx512 && ep->act != KN_ACT_NONE && !clamp)
        kn_act_apply(ep->act, ep->alpha, ep->beta, j->y + plane * c->oh * c->ow, c->oh * c->ow);
}

static void dw_range(void *arg, int64_t begin, int64_t end) {
    const dw_job *j = arg;
    /* Without the buffers (out of memory) the row kernel's masked border path still works. */
    size_t plane = (size_t)(j->cp.h * j->cp.w) * sizeof(float);
    float *buf = j->pad ? kn_malloc(plane) : NULL;
    float *phases = j->phases && buf != NULL ? kn_malloc(plane) : NULL;
    float *tmp = j->flat && (buf != NULL || !j->pad) && (phases != NULL || !j->phases)
                     ? kn_malloc((size_t)(j->cp.oh * j->cp.w + 32) * sizeof(float))
                     : NULL;
    for (int64_t p = begin; p < end; p++)
        dw_plane(j, p, buf, phases, tmp);
    kn_free(tmp);
    kn_free(phases);
    kn_free(buf);
}

typedef struct c16_job {
    kn_dwc16 f;
    int64_t blocks; /* per image */
    int64_t buf_floats;
    const kn_epilogue *ep;
    atomic_int failed;
} c16_job;

static void c16_range(void *arg, int64_t begin, int64_t end) {
    c16_job *j = arg;
    kn_dwc16 f = j->f;
    f.buf = kn_aligned_alloc((size_t)j->buf_floats * sizeof(float), 64);
    if (f.buf == NULL) {
        atomic_store(&j->failed, 1);
        return;
    }
    int64_t cs = f.channels * f.h * f.w, os = f.channels * f.oh * f.ow;
    for (int64_t b = begin; b < end; b++) {
        int64_t img = b / j->blocks, c0 = b % j->blocks * 16;
        kn_dwc16 g = f;
        g.x = f.x + img * cs;
        g.y = f.y + img * os;
        g.res = f.res != NULL ? f.res + img * os : NULL;
        kn_cpu_dw_c16_avx512(&g, c0);
        if (j->ep->act != KN_ACT_NONE && !f.clamp) {
            int64_t plane = f.oh * f.ow, nc = f.channels - c0 < 16 ? f.channels - c0 : 16;
            kn_act_apply(j->ep->act, j->ep->alpha, j->ep->beta, g.y + c0 * plane, nc * plane);
        }
    }
    kn_free(f.buf);
}

/* Small planes, 3x3/5x5/7x7, dilation 1, stride 1 or 2, with AVX-512: channel blocks instead of
 * planes. False when it does not apply. */
/* Measured on MobileNetV2's layers: better than the row kernel at every stride-2 size up to 56
 * outputs wide (96ch 112->56: 342 -> 311 us), and at stride 1 up to 28 (wider, the row kernel
 * wins: 144ch 56x56 252 vs 264 us). */
#define C16_MAX_OW_S1 28
#define C16_MAX_OW_S2 64
static bool depthwise_c16(kn_threadpool *pool, const kn_conv_geom *g, const kn_conv2d *c,
                          const float *x, const float *w, const kn_epilogue *ep, float *y,
                          kiln_status *rc) {
    if (strcmp(kn_gemm_isa(), "avx512") != 0 || c->kh != c->kw ||
        (c->kh != 3 && c->kh != 5 && c->kh != 7) || c->dh != 1 || c->dw != 1 || c->sh != c->sw ||
        c->sw > 2 || c->ow > (c->sw == 2 ? C16_MAX_OW_S2 : C16_MAX_OW_S1) ||
        g->c_in * c->h * c->w > INT32_MAX / 2 || g->c_in * c->oh * c->ow > INT32_MAX / 2)
        return false;
    c16_job j = {.f = {.x = x,
                       .channels = g->c_in,
                       .h = c->h,
                       .w = c->w,
                       .ph = c->ph,
                       .pw = c->pw,
                       .oh = c->oh,
                       .ow = c->ow,
                       .stride = (int)c->sw,
                       .k = (int)c->kh,
                       .wt = w,
                       .bias = ep->bias,
                       .clamp = ep->act == KN_ACT_RELU || ep->act == KN_ACT_CLIP,
                       .lo = ep->act == KN_ACT_RELU ? 0.0f : ep->alpha,
                       .hi = ep->act == KN_ACT_RELU ? INFINITY : ep->beta,
                       .res = ep->residual,
                       .y = y},
                 .blocks = (g->c_in + 15) / 16,
                 .ep = ep};
    j.buf_floats = 16 * ((c->oh - 1) * c->sw + c->kh) * ((c->ow - 1) * c->sw + c->kw);
    atomic_init(&j.failed, 0);
    kn_parallel_for(pool, g->n * j.blocks, 1, c16_range, &j);
    *rc = atomic_load(&j.failed)
              ? kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory in depthwise Conv")
              : KILN_OK;
    return true;
}

/* Planes from these widths read the unpadded plane directly (kn_cpu_dw_direct_avx512); on
 * narrower ones the channel blocks win. Measured inside MobileNetV2 and EfficientNet-B0, 1
 * thread, ms: 3x3 32ch 112x112 0.168 -> 0.125, 96ch 112->56 s2 0.259 -> 0.142, 384ch 14x14
 * 0.037 -> 0.031, 576ch 14->7 s2 0.031 -> 0.027, but 960ch 7x7 0.038 -> 0.043; 5x5 240ch 28x28
 * 0.170 -> 0.147, 672ch 14x14 0.132 -> 0.121, but 672ch 14->7 s2 0.060 -> 0.080. */
static int64_t direct_min_ow(int64_t k, int64_t stride) {
    return k == 3 && stride == 2 ? 7 : 8;
}

typedef struct dwd_job {
    kn_dwd d;
    int64_t channels;
    const kn_epilogue *ep;
} dwd_job;

static void dwd_range(void *arg, int64_t begin, int64_t end) {
    const dwd_job *j = arg;
    int64_t is = j->d.h * j->d.w, os = j->d.oh * j->d.ow, ks = j->d.k * j->d.k;
    for (int64_t p = begin; p < end; p++) {
        int64_t ch = p % j->channels;
        kn_dwd d = j->d;
        d.x += p * is;
        d.wt += ch * ks;
        d.bias = j->ep->bias != NULL ? j->ep->bias[ch] : 0.0f;
        d.res = d.res != NULL ? d.res + p * os : NULL;
        d.y += p * os;
        if (!kn_cpu_dw3_strips_avx512(&d))
            kn_cpu_dw_direct_avx512(&d);
        if (d.act == KN_ACT_NONE && j->ep->act != KN_ACT_NONE)
            kn_act_apply(j->ep->act, j->ep->alpha, j->ep->beta, d.y, os);
    }
}

typedef struct shared_pad_job {
    kn_dw_shared_pad s;
    const kn_epilogue *ep;
} shared_pad_job;

static void shared_pad_range(void *arg, int64_t begin, int64_t end) {
    const shared_pad_job *j = arg;
    kn_cpu_dw_shared_pad_avx512(&j->s, begin, end);
    if (j->s.d.act == KN_ACT_NONE && j->ep->act != KN_ACT_NONE) {
        int64_t os = j->s.d.h * j->s.d.w;
        kn_act_apply(j->ep->act, j->ep->alpha, j->ep->beta, j->s.d.y + begin * os,
                     (end - begin) * os);
    }
}

/* Stride-1 planes with k / 2 padding that take the shared-padding kernel: 3x3 up to 28x28 and
 * under 14 columns, 5x5 and 7x7 up to 14x14. Measured inside the models, 1 thread, ms, before ->
 * after (from the direct kernel or the row pairs): EfficientNet-B0 5x5 1152ch 7x7 + SiLU 0.066
 * -> 0.052 (three layers), 3x3 7x7 0.048 -> 0.030, 5x5 672ch 14x14 level (0.102 -> 0.100), but
 * 5x5 240ch 28x28 0.122 -> 0.134; MobileNetV2 3x3 960ch 7x7 0.025 -> 0.018 (three layers),
 * 576ch and 384ch 14x14 0.036 -> 0.034 and 0.024 -> 0.022, 192ch 28x28 0.048 -> 0.045.
 * The 3x3 strips (kn_cpu_dw3_strips_avx512) then beat it from 14 columns: MobileNetV2 192ch
 * 28x28 0.054 -> 0.045, 576ch and 384ch 14x14 0.042 -> 0.039 and 0.027 -> 0.026, EfficientNet-B0
 * 480ch 14x14 + SiLU 0.049 -> 0.046; but 960ch 7x7 0.023 -> 0.040. */
#define DW3_STRIPS_MIN_W 14
static bool shared_pad_wins(int64_t k, int64_t h, int64_t w) {
    if (k == 3)
        return h * w <= 28 * 28 && w < DW3_STRIPS_MIN_W;
    return h * w <= 14 * 14;
}

/* One plane's arguments for the AVX-512 kernels, the plane pointers at the first plane. */
static kn_dwd plane_args(const kn_conv2d *c, const float *x, const float *w, const kn_epilogue *ep,
                         int act, float *y) {
    return (kn_dwd){.x = x,
                    .h = c->h,
                    .w = c->w,
                    .ph = c->ph,
                    .pw = c->pw,
                    .oh = c->oh,
                    .ow = c->ow,
                    .k = (int)c->kh,
                    .stride = (int)c->sw,
                    .wt = w,
                    .res = ep->residual,
                    .act = act,
                    .lo = ep->act == KN_ACT_RELU ? 0.0f : ep->alpha,
                    .hi = ep->act == KN_ACT_RELU ? INFINITY : ep->beta,
                    .y = y};
}

static bool depthwise_direct(kn_threadpool *pool, const kn_conv_geom *g, const kn_conv2d *c,
                             const float *x, const float *w, const kn_epilogue *ep, float *y) {
    int64_t k = c->kh, half = k / 2;
    /* The activations the kernels apply in registers; others run over the planes after. */
    int in_registers = ep->act == KN_ACT_RELU || ep->act == KN_ACT_CLIP       ? KN_ACT_CLIP
                       : ep->act == KN_ACT_SWISH || ep->act == KN_ACT_SIGMOID ? ep->act
                                                                              : KN_ACT_NONE;
    if (strcmp(kn_gemm_isa(), "avx512") == 0 && (k == 3 || k == 5 || k == 7) && c->kw == k &&
        c->dh == 1 && c->dw == 1 && c->sh == 1 && c->sw == 1 && c->ph == half && c->pw == half &&
        c->oh == c->h && c->ow == c->w && shared_pad_wins(k, c->h, c->w) &&
        kn_cpu_dw_shared_pad_fits(c->h, c->w, (int)k)) {
        shared_pad_job j = {.s = {.d = plane_args(c, x, w, ep, in_registers, y),
                                  .channels = g->c_in,
                                  .bias = ep->bias},
                            .ep = ep};
        kn_cpu_dw_shared_pad_init(&j.s);
        kn_parallel_for(pool, g->n * g->c_in, 1, shared_pad_range, &j);
        return true;
    }
    if (strcmp(kn_gemm_isa(), "avx512") != 0 || (k != 3 && k != 5) || c->kw != k || c->dh != 1 ||
        c->dw != 1 || c->sh != c->sw || c->sw > 2 || c->ph > half || c->pw > half ||
        c->pw < half - 1)
        return false;
    if (c->ow < direct_min_ow(k, c->sw))
        return false;
    dwd_job j = {.d = plane_args(c, x, w, ep, in_registers, y), .channels = g->c_in, .ep = ep};
    kn_parallel_for(pool, g->n * g->c_in, 1, dwd_range, &j);
    return true;
}

kiln_status kn_cpu_conv_depthwise(kn_threadpool *pool, const kn_conv_geom *g, const float *x,
                                  const float *w, const kn_epilogue *ep, float *y) {
    kn_conv2d c;
    kn_conv_as_2d(g, &c);
    if (depthwise_direct(pool, g, &c, x, w, ep, y))
        return KILN_OK;
    kiln_status c16_rc;
    if (depthwise_c16(pool, g, &c, x, w, ep, y, &c16_rc))
        return c16_rc;
    int64_t small[4 * 16 + 16 * 16], *bounds = small;
    if (c.kw > 16 || c.kh > 16) {
        bounds = kn_malloc((size_t)(4 * c.kw + c.kh * c.kw) * sizeof(int64_t));
        if (bounds == NULL)
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory in depthwise Conv");
    }
    dw_job j = {.c = &c,
                .channels = g->c_in,
                .x = x,
                .w = w,
                .ep = ep,
                .y = y,
                .lo = bounds,
                .hi = bounds + c.kw,
                .left = 0,
                .right = c.ow,
                .avx512 = strcmp(kn_gemm_isa(), "avx512") == 0};
    for (int64_t kx = 0; kx < c.kw; kx++) {
        int64_t iw0 = kx * c.dw - c.pw;
        int64_t lo = iw0 >= 0 ? 0 : (-iw0 + c.sw - 1) / c.sw;
        int64_t hi = iw0 >= c.w ? 0 : (c.w - iw0 + c.sw - 1) / c.sw;
        hi = hi < c.ow ? hi : c.ow;
        bounds[kx] = lo;
        bounds[c.kw + kx] = hi;
        bounds[2 * c.kw + kx] = 0;
        bounds[3 * c.kw + kx] = c.ow;
        j.left = lo > j.left ? lo : j.left;
        j.right = hi < j.right ? hi : j.right;
    }
    j.left = j.left < c.ow ? j.left : c.ow;
    j.right = j.right > j.left ? j.right : j.left;
    j.plo = bounds + 2 * c.kw;
    j.phi = bounds + 3 * c.kw;
    j.cp = c;
    j.cp.ph = j.cp.pw = 0;
    j.cp.h = c.ph + c.h;
    j.cp.w = c.pw + c.w;
    int64_t need_h = (c.oh - 1) * c.sh + (c.kh - 1) * c.dh + 1;
    int64_t need_w = (c.ow - 1) * c.sw + (c.kw - 1) * c.dw + 1;
    j.cp.h = need_h > j.cp.h ? need_h : j.cp.h;
    j.cp.w = need_w > j.cp.w ? need_w : j.cp.w;
    j.pad = j.avx512 && c.sw <= 2 &&
            (c.ph > 0 || c.pw > 0 || need_h > c.h || need_w > c.w || j.left > 0 || j.right < c.ow);
    j.phases = j.avx512 && c.sw == 2 && c.sh == 2;
    j.flat = j.avx512 && ((c.sw == 1 && c.sh == 1) || j.phases);
    /* Rows narrower than most of a vector fill lanes better through the flat kernel. */
    j.dw3 = j.flat && c.kh == 3 && c.kw == 3 && c.dh == 1 && c.dw == 1 && c.ow >= 12;
    if (j.phases) {
        j.cp.h += j.cp.h % 2;
        j.cp.w += j.cp.w % 2;
        j.pad = true;
    }
    int64_t *off = bounds + 4 * c.kw, hq = j.cp.h / 2, wq = j.cp.w / 2;
    for (int64_t ky = 0; ky < c.kh; ky++)
        for (int64_t kx = 0; kx < c.kw; kx++) {
            int64_t y0 = ky * c.dh, x0 = kx * c.dw;
            off[ky * c.kw + kx] = j.phases
                                      ? ((y0 % 2) * 2 + x0 % 2) * hq * wq + y0 / 2 * wq + x0 / 2
                                      : y0 * j.cp.w + x0;
        }
    j.off = off;
    j.flat_wp = j.phases ? wq : j.cp.w;
    kn_parallel_for(pool, g->n * g->c_in, 1, dw_range, &j);
    if (bounds != small)
        kn_free(bounds);
    return KILN_OK;
}
