/* Signal kernels: windows, DFT, STFT, MelWeightMatrix. Transforms run in double precision:
 * a radix-2 FFT when the length is a power of two, a direct sum over a twiddle table for
 * other short lengths, Bluestein's chirp-z (through a radix-2 FFT) for other long ones. */
#include "backend/cpu/f32_stage.h"
#include "core/alloc.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#define KN_PI 3.14159265358979323846

kiln_status kn_cpu_window(kn_kernel_ctx *k) {
    kn_tensor *y = &k->out[0];
    int64_t size = y->shape.d[0];
    bool periodic = kn_attr_int(k->node, "periodic", 1) != 0;
    double n1 = (double)(periodic ? size : size - 1);
    char kind = k->node->op_type[2]; /* haNn, haMming, blAckman */
    for (int64_t i = 0; i < size; i++) {
        double v = 1.0;
        if (n1 > 0) {
            double t = 2.0 * KN_PI * (double)i / n1;
            if (kind == 'n')
                v = 0.5 - 0.5 * cos(t);
            else if (kind == 'm')
                v = 25.0 / 46.0 - (21.0 / 46.0) * cos(t);
            else
                v = 0.42 - 0.5 * cos(t) + 0.08 * cos(2.0 * t);
        }
        kn_tensor_set_f64(y, i, v);
    }
    return KILN_OK;
}

/* Lengths up to this are summed directly (exactly as small node tests expect); longer lengths
 * that are not powers of two go through Bluestein's chirp-z, O(n log n) like the radix-2 FFT. */
#define KN_DFT_DIRECT_MAX 64

typedef struct dft_plan {
    int64_t n;
    bool pow2;
    double *cs, *sn; /* cos and sin of 2*pi*m/n */
    /* Bluestein (n past KN_DFT_DIRECT_MAX, not a power of two): an m-point radix-2 FFT with
     * m >= 2n - 1 (mcs, msn: its twiddles), the chirp c[j] = exp(-pi*i*j^2/n) (chr, chi) and
     * the FFT of the conjugate chirp laid out circularly (bre, bim). */
    int64_t m;
    double *mcs, *msn, *chr, *chi, *bre, *bim;
} dft_plan;

static void fft_pow2(int64_t n, const double *cs, const double *sn, double *re, double *im,
                     double sign) {
    for (int64_t i = 1, j = 0; i < n; i++) {
        int64_t bit = n >> 1;
        for (; j & bit; bit >>= 1)
            j ^= bit;
        j |= bit;
        if (i < j) {
            double t = re[i];
            re[i] = re[j];
            re[j] = t;
            t = im[i];
            im[i] = im[j];
            im[j] = t;
        }
    }
    for (int64_t len = 2; len <= n; len <<= 1) {
        int64_t step = n / len, half = len / 2;
        for (int64_t s = 0; s < n; s += len)
            for (int64_t j = 0; j < half; j++) {
                double wr = cs[j * step], wi = -sign * sn[j * step];
                int64_t a = s + j, b = a + half;
                double xr = re[b] * wr - im[b] * wi, xi = re[b] * wi + im[b] * wr;
                re[b] = re[a] - xr;
                im[b] = im[a] - xi;
                re[a] += xr;
                im[a] += xi;
            }
    }
}

static double *twiddles(int64_t n, bool sine) {
    double *t = kn_malloc((size_t)n * sizeof(double));
    for (int64_t m = 0; t != NULL && m < n; m++) {
        double a = 2.0 * KN_PI * (double)m / (double)n;
        t[m] = sine ? sin(a) : cos(a);
    }
    return t;
}

static kiln_status bluestein_init(dft_plan *p) {
    int64_t n = p->n, m = 1;
    while (m < 2 * n - 1)
        m <<= 1;
    p->m = m;
    p->mcs = twiddles(m, false);
    p->msn = twiddles(m, true);
    p->chr = kn_malloc((size_t)n * sizeof(double));
    p->chi = kn_malloc((size_t)n * sizeof(double));
    p->bre = kn_calloc((size_t)m, sizeof(double));
    p->bim = kn_calloc((size_t)m, sizeof(double));
    if (!p->mcs || !p->msn || !p->chr || !p->chi || !p->bre || !p->bim)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "no memory for a %lld-point DFT", (long long)n);
    for (int64_t j = 0, q = 0; j < n; j++) { /* q = j^2 mod 2n, kept small for accuracy */
        double a = KN_PI * (double)q / (double)n;
        p->chr[j] = cos(a);
        p->chi[j] = -sin(a);
        p->bre[j] = p->chr[j];
        p->bim[j] = -p->chi[j];
        if (j > 0) {
            p->bre[m - j] = p->bre[j];
            p->bim[m - j] = p->bim[j];
        }
        q = (q + 2 * j + 1) % (2 * n);
    }
    fft_pow2(m, p->mcs, p->msn, p->bre, p->bim, 1.0);
    return KILN_OK;
}

static kiln_status dft_plan_init(dft_plan *p, int64_t n) {
    memset(p, 0, sizeof *p);
    p->n = n;
    p->pow2 = (n & (n - 1)) == 0;
    if (!p->pow2 && n > KN_DFT_DIRECT_MAX)
        return bluestein_init(p);
    p->cs = twiddles(n, false);
    p->sn = twiddles(n, true);
    if (p->cs == NULL || p->sn == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "no memory for a %lld-point DFT", (long long)n);
    return KILN_OK;
}

static void dft_plan_free(dft_plan *p) {
    kn_free(p->cs);
    kn_free(p->sn);
    kn_free(p->mcs);
    kn_free(p->msn);
    kn_free(p->chr);
    kn_free(p->chi);
    kn_free(p->bre);
    kn_free(p->bim);
}

/* Doubles of scratch dft_run needs in each of t_re and t_im. */
static int64_t dft_scratch(const dft_plan *p) {
    return p->m > p->n ? p->m : p->n;
}

/* The forward transform as a convolution with the chirp: X[k] = c[k] * sum_j (x[j] c[j])
 * conj(c[k - j]), the sum an m-point circular convolution by FFT. */
static void bluestein(const dft_plan *p, double *re, double *im, double *ar, double *ai) {
    int64_t n = p->n, m = p->m;
    for (int64_t j = 0; j < m; j++) {
        ar[j] = j < n ? re[j] * p->chr[j] - im[j] * p->chi[j] : 0.0;
        ai[j] = j < n ? re[j] * p->chi[j] + im[j] * p->chr[j] : 0.0;
    }
    fft_pow2(m, p->mcs, p->msn, ar, ai, 1.0);
    for (int64_t j = 0; j < m; j++) {
        double r = ar[j] * p->bre[j] - ai[j] * p->bim[j], i = ar[j] * p->bim[j] + ai[j] * p->bre[j];
        ar[j] = r;
        ai[j] = i;
    }
    fft_pow2(m, p->mcs, p->msn, ar, ai, -1.0);
    for (int64_t k = 0; k < n; k++) {
        re[k] = (ar[k] * p->chr[k] - ai[k] * p->chi[k]) / (double)m;
        im[k] = (ar[k] * p->chi[k] + ai[k] * p->chr[k]) / (double)m;
    }
}

/* In-place transform of re/im (length n); t_re/t_im are scratch of dft_scratch(p) doubles.
 * sign +1 is the forward transform (exp(-2*pi*i*f*k/n)), -1 the inverse one (unscaled). */
static void dft_run(const dft_plan *p, double *re, double *im, double *t_re, double *t_im,
                    double sign) {
    int64_t n = p->n;
    if (p->pow2) {
        fft_pow2(n, p->cs, p->sn, re, im, sign);
        return;
    }
    if (p->m > 0) { /* the inverse as the conjugate of the forward transform of the conjugate */
        for (int64_t x = 0; sign < 0 && x < n; x++)
            im[x] = -im[x];
        bluestein(p, re, im, t_re, t_im);
        for (int64_t x = 0; sign < 0 && x < n; x++)
            im[x] = -im[x];
        return;
    }
    for (int64_t f = 0; f < n; f++) {
        double ar = 0, ai = 0;
        for (int64_t x = 0, m = 0; x < n; x++, m = (m + f) % n) {
            double c = p->cs[m], s = sign * p->sn[m];
            ar += re[x] * c + im[x] * s;
            ai += im[x] * c - re[x] * s;
        }
        t_re[f] = ar;
        t_im[f] = ai;
    }
    memcpy(re, t_re, (size_t)n * sizeof(double));
    memcpy(im, t_im, (size_t)n * sizeof(double));
}

typedef struct dft_job {
    const kn_tensor *x;
    kn_tensor *y;
    dft_plan plan;
    int64_t inner, x_axis, len_in, len_out, cin; /* cin: 1 (real) or 2 (complex) */
    bool inverse;
    bool irfft; /* inverse and onesided: bins 0..n/2 given, a real signal out */
    atomic_int oom;
} dft_job;

static void dft_range(void *arg, int64_t begin, int64_t end) {
    dft_job *j = arg;
    int64_t n = j->plan.n, sc = dft_scratch(&j->plan);
    double *buf = kn_malloc((size_t)(2 * n + 2 * sc) * sizeof(double));
    if (buf == NULL) {
        atomic_store(&j->oom, 1);
        return;
    }
    double *re = buf, *im = buf + n, *tr = buf + 2 * n, *ti = tr + sc;
    double scale = j->inverse ? 1.0 / (double)n : 1.0;
    for (int64_t line = begin; line < end; line++) {
        int64_t o = line / j->inner, in = line % j->inner;
        int64_t xbase = o * j->x_axis * j->inner + in, ybase = o * j->len_out * j->inner + in;
        for (int64_t t = 0; t < n; t++) {
            re[t] = im[t] = 0.0;
            /* an IRFFT's upper bins are the conjugates of the lower ones (X[n - k] = X[k]*) */
            int64_t src = j->irfft && t > n / 2 ? n - t : t;
            if (src < j->len_in && (!j->irfft || src <= n / 2)) {
                int64_t e = (xbase + src * j->inner) * j->cin;
                re[t] = kn_tensor_get_f64(j->x, e);
                im[t] = j->cin == 2 ? kn_tensor_get_f64(j->x, e + 1) : 0.0;
                if (src != t)
                    im[t] = -im[t];
            }
        }
        dft_run(&j->plan, re, im, tr, ti, j->inverse ? -1.0 : 1.0);
        int64_t cout = j->irfft ? 1 : 2;
        for (int64_t f = 0; f < j->len_out; f++) {
            int64_t e = (ybase + f * j->inner) * cout;
            kn_tensor_set_f64(j->y, e, re[f] * scale);
            if (!j->irfft)
                kn_tensor_set_f64(j->y, e + 1, im[f] * scale);
        }
    }
    kn_free(buf);
}

kiln_status kn_cpu_dft(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0];
    kn_tensor *y = &k->out[0];
    int32_t r = x->shape.rank;
    int64_t axis = kn_attr_int(k->node, "axis", 1);
    if (k->node->opset >= 20)
        axis = k->n_in > 2 && k->in[2].dtype != 0 ? kn_tensor_get_i64(&k->in[2], 0) : -2;
    axis = axis < 0 ? axis + r : axis;
    bool onesided = kn_attr_int(k->node, "onesided", 0) != 0;
    bool inverse = kn_attr_int(k->node, "inverse", 0) != 0, irfft = onesided && inverse;
    int64_t n = irfft ? 2 * (x->shape.d[axis] - 1) : x->shape.d[axis];
    if (k->n_in > 1 && k->in[1].dtype != 0)
        n = kn_tensor_get_i64(&k->in[1], 0);
    if (axis < 0 || axis >= r - 1 || n < 1 ||
        y->shape.d[axis] != (onesided && !inverse ? n / 2 + 1 : n))
        return kn_error(KILN_ERR_SHAPE, "dft_length %lld disagrees with the inferred output",
                        (long long)n);
    dft_job j = {.x = x,
                 .y = y,
                 .x_axis = x->shape.d[axis],
                 .len_in = x->shape.d[axis] < n ? x->shape.d[axis] : n,
                 .len_out = y->shape.d[axis],
                 .cin = x->shape.d[r - 1],
                 .inverse = inverse,
                 .irfft = irfft,
                 .inner = 1};
    atomic_init(&j.oom, 0);
    int64_t outer = 1;
    for (int i = 0; i < axis; i++)
        outer *= x->shape.d[i];
    for (int i = (int)axis + 1; i < r - 1; i++)
        j.inner *= x->shape.d[i];
    kiln_status rc = dft_plan_init(&j.plan, n);
    if (rc == KILN_OK) {
        kn_parallel_for(k->pool, outer * j.inner, 8, dft_range, &j);
        if (atomic_load(&j.oom))
            rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "no memory for DFT lines");
    }
    dft_plan_free(&j.plan);
    return rc;
}

typedef struct stft_job {
    const kn_tensor *x, *win;
    kn_tensor *y;
    dft_plan plan;
    int64_t frames, step, bins, len, cin;
    atomic_int oom;
} stft_job;

static void stft_range(void *arg, int64_t begin, int64_t end) {
    stft_job *j = arg;
    int64_t n = j->plan.n, sc = dft_scratch(&j->plan);
    double *buf = kn_malloc((size_t)(2 * n + 2 * sc) * sizeof(double));
    if (buf == NULL) {
        atomic_store(&j->oom, 1);
        return;
    }
    double *re = buf, *im = buf + n, *tr = buf + 2 * n, *ti = tr + sc;
    for (int64_t bf = begin; bf < end; bf++) {
        int64_t b = bf / j->frames, f = bf % j->frames;
        for (int64_t t = 0; t < n; t++) {
            double w = j->win != NULL ? kn_tensor_get_f64(j->win, t) : 1.0;
            int64_t e = (b * j->len + f * j->step + t) * j->cin;
            re[t] = kn_tensor_get_f64(j->x, e) * w;
            im[t] = j->cin == 2 ? kn_tensor_get_f64(j->x, e + 1) * w : 0.0;
        }
        dft_run(&j->plan, re, im, tr, ti, 1.0);
        for (int64_t w = 0; w < j->bins; w++) {
            int64_t e = (bf * j->bins + w) * 2;
            kn_tensor_set_f64(j->y, e, re[w]);
            kn_tensor_set_f64(j->y, e + 1, im[w]);
        }
    }
    kn_free(buf);
}

kiln_status kn_cpu_stft(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0];
    kn_tensor *y = &k->out[0];
    stft_job j = {.x = x,
                  .y = y,
                  .win = k->n_in > 2 && k->in[2].dtype != 0 ? &k->in[2] : NULL,
                  .frames = y->shape.d[1],
                  .bins = y->shape.d[2],
                  .step = kn_tensor_get_i64(&k->in[1], 0),
                  .len = x->shape.d[1],
                  .cin = x->shape.d[2]};
    atomic_init(&j.oom, 0);
    int64_t fl = x->shape.d[1];
    if (j.win != NULL)
        fl = j.win->shape.d[0];
    else if (k->n_in > 3 && k->in[3].dtype != 0)
        fl = kn_tensor_get_i64(&k->in[3], 0);
    if (fl < 1 || fl > j.len || j.step < 1 || (j.frames - 1) * j.step + fl > j.len)
        return kn_error(KILN_ERR_SHAPE, "frames do not fit the signal");
    kiln_status rc = dft_plan_init(&j.plan, fl);
    if (rc == KILN_OK) {
        kn_parallel_for(k->pool, x->shape.d[0] * j.frames, 4, stft_range, &j);
        if (atomic_load(&j.oom))
            rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "no memory for STFT frames");
    }
    dft_plan_free(&j.plan);
    return rc;
}

/* Triangular filters between mel-spaced edges, quantised to DFT bins the way the ONNX
 * reference does (floor((dft_length + 1) * hz / sample_rate)). */
kiln_status kn_cpu_mel(kn_kernel_ctx *k) {
    int64_t bins = kn_tensor_get_i64(&k->in[0], 0), dft = kn_tensor_get_i64(&k->in[1], 0);
    int64_t rate = kn_tensor_get_i64(&k->in[2], 0);
    double lo = kn_tensor_get_f64(&k->in[3], 0), hi = kn_tensor_get_f64(&k->in[4], 0);
    int64_t spec = dft / 2 + 1;
    kn_tensor *y = &k->out[0];
    int64_t *edge = kn_malloc((size_t)(bins + 2) * sizeof(int64_t));
    if (edge == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "no memory for mel edges");
    double lo_mel = 2595.0 * log10(1.0 + lo / 700.0), hi_mel = 2595.0 * log10(1.0 + hi / 700.0);
    double step = (hi_mel - lo_mel) / (double)(bins + 2);
    kiln_status rc = KILN_OK;
    for (int64_t i = 0; i < bins + 2; i++) {
        double hz = 700.0 * (pow(10.0, ((double)i * step + lo_mel) / 2595.0) - 1.0);
        double bin = floor((double)(dft + 1) * hz / (double)rate);
        edge[i] = bin >= 0.0 && bin <= (double)spec ? (int64_t)bin : -1;
        if (edge[i] < 0 || (i <= bins && edge[i] >= spec)) {
            rc = kn_error(KILN_ERR_SHAPE,
                          "mel band edge %lld falls on DFT bin %g, outside "
                          "[0, %lld): check lower/upper_edge_hertz against "
                          "sample_rate",
                          (long long)i, bin, (long long)spec);
            goto out;
        }
    }
    for (int64_t e = 0; e < spec * bins; e++)
        kn_tensor_set_f64(y, e, 0.0);
    for (int64_t i = 0; i < bins; i++) {
        int64_t l = edge[i], c = edge[i + 1], h = edge[i + 2];
        if (c == l)
            kn_tensor_set_f64(y, c * bins + i, 1.0);
        for (int64_t j = l; c > l && j <= c; j++)
            kn_tensor_set_f64(y, j * bins + i, (double)(j - l) / (double)(c - l));
        for (int64_t j = c; h > c && j < h; j++)
            kn_tensor_set_f64(y, j * bins + i, (double)(h - j) / (double)(h - c));
    }
out:
    kn_free(edge);
    return rc;
}
