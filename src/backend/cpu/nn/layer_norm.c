/* LayerNormalization and RMSNormalization (rows over the trailing dims, the transformer case),
 * LpNormalization, MeanVarianceNormalization and LRN. */
#include "backend/cpu/reduction/reduce_impl.h"
#include "core/alloc.h"
#include "ops/op.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

typedef struct ln_args {
    const float *x;
    float *y;
    int64_t d; /* normalized elements per row */
    const float *scale, *bias;
    float eps;
    bool rms;          /* RMSNormalization: scale by the root mean square, no centring */
    float *mean, *inv; /* per row, or NULL */
} ln_args;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define LN_HAVE_AVX512 1
/* Rows up to this long take the AVX-512 row: its float sums stay within a few ulp of the
 * double moments (16 lanes, then a tree), and the row stays in L1 for its three passes. */
#define LN_AVX512_MAX_D 16384

/* Sum of (x - p) - c over x[0..n), or of its square when sq, in 16 float lanes. */
__attribute__((target("avx512f"))) static float ln_sum16(const float *x, int64_t n, float p,
                                                         float c, bool sq) {
    __m512 acc = _mm512_setzero_ps(), vp = _mm512_set1_ps(p), vc = _mm512_set1_ps(c);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_sub_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), vp), vc);
        acc = sq ? _mm512_fmadd_ps(v, v, acc) : _mm512_add_ps(acc, v);
    }
    __mmask16 tail = (__mmask16)((1u << (n - i)) - 1u);
    __m512 v = _mm512_maskz_sub_ps(
        tail, _mm512_maskz_sub_ps(tail, _mm512_maskz_loadu_ps(tail, x + i), vp), vc);
    acc = sq ? _mm512_fmadd_ps(v, v, acc) : _mm512_add_ps(acc, v);
    return _mm512_reduce_add_ps(acc);
}

/* One row. Everything is computed relative to the pivot p = x[0]: x - p is small and nearly
 * exact for rows with a large common offset (a residual stream), so float sums keep the
 * variance that E[x^2] - mean^2, or even x - mean with mean rounded to float, would lose.
 * Mean about p, then the variance about the mean (two passes), then
 * y = ((x - p) - mu) * inv * scale + bias. */
__attribute__((target("avx512f"))) static void
ln_row_avx512(const ln_args *a, const float *x, float *y, float *mean_out, float *inv_out) {
    int64_t d = a->d;
    float p = a->rms ? 0.0f : x[0];
    float mu = a->rms ? 0.0f : ln_sum16(x, d, p, 0.0f, false) / (float)d;
    float var = ln_sum16(x, d, p, mu, true) / (float)d;
    float inv = 1.0f / sqrtf(var + a->eps);
    __m512 vp = _mm512_set1_ps(p), vm = _mm512_set1_ps(mu), vi = _mm512_set1_ps(inv);
    int64_t j = 0;
    for (; j + 16 <= d; j += 16) {
        __m512 t = _mm512_sub_ps(_mm512_sub_ps(_mm512_loadu_ps(x + j), vp), vm);
        t = _mm512_mul_ps(_mm512_mul_ps(t, vi), _mm512_loadu_ps(a->scale + j));
        if (a->bias != NULL)
            t = _mm512_add_ps(t, _mm512_loadu_ps(a->bias + j));
        _mm512_storeu_ps(y + j, t);
    }
    __mmask16 tail = (__mmask16)((1u << (d - j)) - 1u);
    if (tail != 0) {
        __m512 t = _mm512_sub_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + j), vp), vm);
        t = _mm512_mul_ps(_mm512_mul_ps(t, vi), _mm512_maskz_loadu_ps(tail, a->scale + j));
        if (a->bias != NULL)
            t = _mm512_add_ps(t, _mm512_maskz_loadu_ps(tail, a->bias + j));
        _mm512_mask_storeu_ps(y + j, tail, t);
    }
    *mean_out = p + mu;
    *inv_out = inv;
}

static void ln_rows_avx512(void *arg, int64_t begin, int64_t end) {
    const ln_args *a = arg;
    for (int64_t r = begin; r < end; r++) {
        float m, inv;
        ln_row_avx512(a, a->x + r * a->d, a->y + r * a->d, &m, &inv);
        if (a->mean != NULL)
            a->mean[r] = m;
        if (a->inv != NULL)
            a->inv[r] = inv;
    }
}
#else
#define LN_HAVE_AVX512 0
#endif

KN_CLONES static void ln_rows(void *arg, int64_t begin, int64_t end) {
    const ln_args *a = arg;
    int64_t d = a->d;
    for (int64_t r = begin; r < end; r++) {
        const float *x = a->x + r * d;
        float *y = a->y + r * d;
        double mean, var;
        cpu_norm_moments(x, d, &mean, &var);
        if (a->rms) {
            var += mean * mean;
            mean = 0;
        }
        float m = (float)mean, inv = (float)(1.0 / sqrt(var + a->eps));
        if (a->bias != NULL)
            for (int64_t j = 0; j < d; j++)
                y[j] = (x[j] - m) * inv * a->scale[j] + a->bias[j];
        else
            for (int64_t j = 0; j < d; j++)
                y[j] = (x[j] - m) * inv * a->scale[j];
        if (a->mean != NULL)
            a->mean[r] = m;
        if (a->inv != NULL)
            a->inv[r] = inv;
    }
}

/* Broadcasts t (right-aligned against x's dims from axis on) to a dense row of d floats. */
static float *ln_expand(const kn_cpu_f32 *v, const kn_tensor *t, const kn_shape *x, int64_t axis,
                        int64_t d) {
    if (kn_tensor_numel(t) == d)
        return v->p;
    float *out = kn_malloc((size_t)d * sizeof(float));
    if (out == NULL)
        return NULL;
    int32_t nr = x->rank - (int32_t)axis, off = nr - t->shape.rank;
    for (int64_t j = 0; j < d; j++) {
        int64_t rem = j, src = 0, tstride = 1;
        for (int32_t q = nr - 1; q >= 0; q--) {
            int64_t xd = x->d[axis + q], idx = rem % xd;
            rem /= xd;
            if (q >= off) {
                int64_t td = t->shape.d[q - off];
                src += (td == 1 ? 0 : idx) * tstride;
                tstride *= td;
            }
        }
        out[j] = v->p[src];
    }
    return out;
}

static bool out_present(const kn_kernel_ctx *k, int i) {
    return i < k->n_out && k->node->out[i] >= 0 && k->out[i].dtype != 0;
}

kiln_status cpu_norm_layernorm(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0];
    int64_t axis;
    KN_TRY(kn_norm_axis(kn_attr_int(k->node, "axis", -1), x->shape.rank, &axis));
    int64_t d = 1;
    for (int32_t i = (int32_t)axis; i < x->shape.rank; i++)
        d *= x->shape.d[i];
    int64_t rows = d > 0 ? kn_tensor_numel(x) / d : 0;
    kn_cpu_f32 xv = {0}, sv = {0}, bv = {0}, yv = {0}, mv = {0}, iv = {0};
    float *scale = NULL, *bias = NULL;
    bool has_b = k->n_in > 2 && k->in[2].dtype != 0;
    kiln_status rc = kn_cpu_f32_in(x, &xv);
    if (rc == KILN_OK)
        rc = kn_cpu_f32_in(&k->in[1], &sv);
    if (rc == KILN_OK && has_b)
        rc = kn_cpu_f32_in(&k->in[2], &bv);
    if (rc == KILN_OK)
        rc = kn_cpu_f32_out(&k->out[0], &yv);
    if (rc == KILN_OK && out_present(k, 1))
        rc = kn_cpu_f32_out(&k->out[1], &mv);
    if (rc == KILN_OK && out_present(k, 2))
        rc = kn_cpu_f32_out(&k->out[2], &iv);
    if (rc != KILN_OK)
        goto out;
    scale = ln_expand(&sv, &k->in[1], &x->shape, axis, d);
    bias = has_b ? ln_expand(&bv, &k->in[2], &x->shape, axis, d) : NULL;
    if (scale == NULL || (has_b && bias == NULL)) {
        rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "no memory for broadcast Scale/B");
        goto out;
    }
    ln_args a = {.x = xv.p,
                 .y = yv.p,
                 .d = d,
                 .scale = scale,
                 .bias = bias,
                 .eps = kn_attr_float(k->node, "epsilon", 1e-5f),
                 .rms = k->node->op_type[0] == 'R',
                 .mean = mv.p,
                 .inv = iv.p};
    void (*rows_fn)(void *, int64_t, int64_t) = ln_rows;
#if LN_HAVE_AVX512
    if (d <= LN_AVX512_MAX_D && __builtin_cpu_supports("avx512f"))
        rows_fn = ln_rows_avx512;
#endif
    if (rows > 0 && d > 0)
        kn_parallel_for(k->pool, rows, d >= 8192 ? 1 : 8192 / d, rows_fn, &a);
    kn_cpu_f32_commit(&k->out[0], &yv);
    if (mv.p != NULL)
        kn_cpu_f32_commit(&k->out[1], &mv);
    if (iv.p != NULL)
        kn_cpu_f32_commit(&k->out[2], &iv);
out:
    if (scale != sv.p)
        kn_free(scale);
    if (bias != bv.p)
        kn_free(bias);
    kn_cpu_f32_release(&xv);
    kn_cpu_f32_release(&sv);
    kn_cpu_f32_release(&bv);
    kn_cpu_f32_release(&yv);
    kn_cpu_f32_release(&mv);
    kn_cpu_f32_release(&iv);
    return rc;
}

kiln_status cpu_norm_lpnorm(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0];
    int64_t axis, p = kn_attr_int(k->node, "p", 2);
    KN_TRY(kn_norm_axis(kn_attr_int(k->node, "axis", -1), x->shape.rank, &axis));
    int64_t outer = 1, n = x->shape.d[axis], inner = 1;
    for (int32_t i = 0; i < x->shape.rank; i++) {
        if (i < axis)
            outer *= x->shape.d[i];
        else if (i > axis)
            inner *= x->shape.d[i];
    }
    kn_cpu_f32 xv = {0}, yv = {0};
    KN_TRY(kn_cpu_f32_in(x, &xv));
    kiln_status rc = kn_cpu_f32_out(&k->out[0], &yv);
    if (rc != KILN_OK)
        goto out;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t c = 0; c < inner; c++) {
            const float *xs = xv.p + o * n * inner + c;
            float *ys = yv.p + o * n * inner + c;
            double s = 0;
            for (int64_t i = 0; i < n; i++)
                s += p == 1 ? fabs(xs[i * inner]) : (double)xs[i * inner] * xs[i * inner];
            float norm = (float)(p == 1 ? s : sqrt(s));
            /* a zero vector stays zero (onnx 1.23's reference; 0 / 0 would be NaN) */
            for (int64_t i = 0; i < n; i++)
                ys[i * inner] = norm != 0.0f ? xs[i * inner] / norm : 0.0f;
        }
    kn_cpu_f32_commit(&k->out[0], &yv);
out:
    kn_cpu_f32_release(&yv);
    kn_cpu_f32_release(&xv);
    return rc;
}

/* Index of each element's statistics group: its position over the kept (not reduced) dims. */
static int64_t mvn_group(int64_t i, const kn_shape *s, const bool *reduced) {
    int64_t g = 0, gs = 1;
    for (int32_t q = s->rank - 1; q >= 0; q--) {
        int64_t idx = i % s->d[q];
        i /= s->d[q];
        if (!reduced[q]) {
            g += idx * gs;
            gs *= s->d[q];
        }
    }
    return g;
}

kiln_status cpu_norm_mvn(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0];
    static const int64_t default_axes[] = {0, 2, 3};
    const int64_t *axes;
    int64_t na = kn_attr_ints(k->node, "axes", &axes);
    if (na == 0) {
        axes = default_axes;
        na = 3;
    }
    bool reduced[KN_MAX_RANK] = {0};
    int64_t groups = 1;
    for (int64_t i = 0; i < na; i++)
        reduced[axes[i] < 0 ? axes[i] + x->shape.rank : axes[i]] = true;
    for (int32_t q = 0; q < x->shape.rank; q++)
        if (!reduced[q])
            groups *= x->shape.d[q];
    int64_t n = kn_tensor_numel(x), per = groups > 0 ? n / groups : 0;
    kn_cpu_f32 xv = {0}, yv = {0};
    double *st = NULL;
    KN_TRY(kn_cpu_f32_in(x, &xv));
    kiln_status rc = kn_cpu_f32_out(&k->out[0], &yv);
    if (rc != KILN_OK)
        goto out;
    st = kn_calloc((size_t)(groups > 0 ? groups : 1) * 2, sizeof(double));
    if (st == NULL) {
        rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "no memory for MVN statistics");
        goto out;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t g = mvn_group(i, &x->shape, reduced);
        st[2 * g] += xv.p[i];
        st[2 * g + 1] += (double)xv.p[i] * xv.p[i];
    }
    for (int64_t g = 0; g < groups; g++) {
        double m = st[2 * g] / (double)per, v = st[2 * g + 1] / (double)per - m * m;
        st[2 * g] = m;
        st[2 * g + 1] = sqrt(v > 0 ? v : 0) + 1e-9;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t g = mvn_group(i, &x->shape, reduced);
        yv.p[i] = (float)((xv.p[i] - st[2 * g]) / st[2 * g + 1]);
    }
    kn_cpu_f32_commit(&k->out[0], &yv);
out:
    kn_free(st);
    kn_cpu_f32_release(&yv);
    kn_cpu_f32_release(&xv);
    return rc;
}

typedef struct lrn_args {
    const float *x;
    float *y;
    int64_t c, plane, lo, hi;
    float alpha_n, beta, bias;
} lrn_args;

static void lrn_planes(void *arg, int64_t begin, int64_t end) {
    const lrn_args *a = arg;
    for (int64_t u = begin; u < end; u++) {
        int64_t c = u % a->c, b = u / a->c;
        int64_t c0 = c - a->lo < 0 ? 0 : c - a->lo, c1 = c + a->hi >= a->c ? a->c - 1 : c + a->hi;
        const float *x = a->x + u * a->plane;
        float *y = a->y + u * a->plane;
        for (int64_t i = 0; i < a->plane; i++) {
            float s = 0;
            for (int64_t q = c0; q <= c1; q++) {
                float v = a->x[(b * a->c + q) * a->plane + i];
                s += v * v;
            }
            y[i] = x[i] * powf(a->bias + a->alpha_n * s, -a->beta);
        }
    }
}

kiln_status cpu_norm_lrn(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0];
    int64_t size = kn_attr_int(k->node, "size", 1);
    int64_t nc = x->shape.d[0] * x->shape.d[1];
    lrn_args a = {.c = x->shape.d[1],
                  .plane = nc > 0 ? kn_tensor_numel(x) / nc : 0,
                  .lo = (size - 1) / 2,
                  .hi = size / 2,
                  .alpha_n = kn_attr_float(k->node, "alpha", 1e-4f) / (float)size,
                  .beta = kn_attr_float(k->node, "beta", 0.75f),
                  .bias = kn_attr_float(k->node, "bias", 1.0f)};
    kn_cpu_f32 xv = {0}, yv = {0};
    KN_TRY(kn_cpu_f32_in(x, &xv));
    kiln_status rc = kn_cpu_f32_out(&k->out[0], &yv);
    if (rc == KILN_OK) {
        a.x = xv.p;
        a.y = yv.p;
        kn_parallel_for(k->pool, nc, 1, lrn_planes, &a);
        kn_cpu_f32_commit(&k->out[0], &yv);
    }
    kn_cpu_f32_release(&yv);
    kn_cpu_f32_release(&xv);
    return rc;
}
