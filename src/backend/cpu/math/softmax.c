/* Softmax, LogSoftmax and Hardmax along one axis of an [outer, n, inner] view. Rows
 * (inner == 1) are the transformer case and run contiguous, vectorizable loops; otherwise
 * columns are processed in tiles so every loop still walks contiguous memory. */
#include "backend/cpu/reduction/reduce_impl.h"
#include "ops/reduction/reduce.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* The clamps in kiln_math_exp are selects; GCC if-converts (and so vectorizes) them only when
 * comparisons are not assumed to trap. No code here relies on floating-point traps. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include "kiln/kiln_math.h"

enum { SM_SOFTMAX, SM_LOGSOFTMAX, SM_HARDMAX };

static inline __attribute__((always_inline)) float row_max(const float *x, int64_t n) {
    float m[8];
    int64_t i = 0;
    for (int j = 0; j < 8; j++)
        m[j] = -INFINITY;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
    float r = -INFINITY;
    for (int j = 0; j < 8; j++)
        r = m[j] > r ? m[j] : r;
    for (; i < n; i++)
        r = x[i] > r ? x[i] : r;
    return r;
}

/* y = exp(x - shift); returns the sum of y. Separate loops keep each one simple enough to
 * vectorize; the row is in cache for the second pass. */
static inline __attribute__((always_inline)) float row_exp_sum(const float *x, float *y, int64_t n,
                                                               float shift) {
    for (int64_t i = 0; i < n; i++)
        y[i] = kiln_math_exp(x[i] - shift);
    float s[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            s[j] += y[i + j];
    float t = 0;
    for (; i < n; i++)
        t += y[i];
    for (int j = 0; j < 8; j++)
        t += s[j];
    return t;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define SM_HAVE_AVX512 1

/* exp on 16 lanes for Softmax rows, where x - max <= 0 and results below 2^-126 do not
 * matter next to the row sum: a plain clamp, a Taylor polynomial, with FMA; 2^k by scalef. */
__attribute__((target("avx512f"))) static inline __m512 exp16(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
    x = _mm512_min_ps(x, _mm512_set1_ps(88.3f));
    __m512 kf = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(kf, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(kf, _mm512_set1_ps(1.428606765330187e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, kf);
}

/* One Softmax row with the reductions kept in vector registers; the generic path spends
 * most of a 128-wide attention row on its scalar reduction tails. */
__attribute__((target("avx512f"))) static void sm_row_softmax_avx512(const float *x, float *y,
                                                                     int64_t n) {
    __m512 vm = _mm512_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        vm = _mm512_max_ps(vm, _mm512_loadu_ps(x + i));
    __mmask16 tail = (__mmask16)((1u << (n - i)) - 1u);
    vm = _mm512_max_ps(vm, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), tail, x + i));
    float m = _mm512_reduce_max_ps(vm);
    if (m == -INFINITY) { /* every element -inf: NaN, as exp(x - max) gives (and onnxruntime) */
        for (i = 0; i < n; i++)
            y[i] = NAN;
        return;
    }
    if (isinf(m))
        m = 0;
    __m512 shift = _mm512_set1_ps(m), vs = _mm512_setzero_ps();
    for (i = 0; i + 16 <= n; i += 16) {
        __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), shift));
        _mm512_storeu_ps(y + i, e);
        vs = _mm512_add_ps(vs, e);
    }
    if (tail != 0) {
        __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + i), shift));
        _mm512_mask_storeu_ps(y + i, tail, e);
        vs = _mm512_mask_add_ps(vs, tail, vs, e);
    }
    __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(vs));
    for (i = 0; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(y + i), inv));
    if (tail != 0)
        _mm512_mask_storeu_ps(y + i, tail, _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, y + i), inv));
}
#else
#define SM_HAVE_AVX512 0
#endif

typedef struct sm_args {
    int op;
    bool avx512; /* Softmax rows take sm_row_softmax_avx512 */
    int64_t outer, n, inner;
    const float *x;
    float *y;
} sm_args;

KN_CLONES static void sm_row(int op, const float *x, float *y, int64_t n) {
    float m = row_max(x, n);
    if (op == SM_HARDMAX) {
        memset(y, 0, (size_t)n * sizeof(float));
        for (int64_t i = 0; i < n; i++)
            if (x[i] == m) {
                y[i] = 1;
                break;
            }
        return;
    }
    if (m == -INFINITY) { /* every element -inf: NaN, as exp(x - max) gives (and onnxruntime) */
        for (int64_t i = 0; i < n; i++)
            y[i] = NAN;
        return;
    }
    if (isinf(m))
        m = 0;
    float s = row_exp_sum(x, y, n, m);
    if (op == SM_SOFTMAX) {
        float inv = 1.0f / s;
        for (int64_t i = 0; i < n; i++)
            y[i] *= inv;
    } else {
        float shift = m + logf(s);
        for (int64_t i = 0; i < n; i++)
            y[i] = x[i] - shift;
    }
}

static void sm_rows(void *arg, int64_t begin, int64_t end) {
    const sm_args *a = arg;
#if SM_HAVE_AVX512
    if (a->avx512) {
        for (int64_t r = begin; r < end; r++)
            sm_row_softmax_avx512(a->x + r * a->n, a->y + r * a->n, a->n);
        return;
    }
#endif
    for (int64_t r = begin; r < end; r++)
        sm_row(a->op, a->x + r * a->n, a->y + r * a->n, a->n);
}

#define SM_TILE 256

/* One tile of up to SM_TILE columns of one [n, inner] block. */
KN_CLONES static void sm_tile(const sm_args *a, const float *x, float *y, int64_t w) {
    float m[SM_TILE], s[SM_TILE];
    int64_t n = a->n, ld = a->inner;
    for (int64_t c = 0; c < w; c++) {
        m[c] = -INFINITY;
        s[c] = 0;
    }
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < w; c++)
            m[c] = x[i * ld + c] > m[c] ? x[i * ld + c] : m[c];
    if (a->op == SM_HARDMAX) {
        for (int64_t i = 0; i < n; i++)
            for (int64_t c = 0; c < w; c++) {
                bool first = x[i * ld + c] == m[c] && s[c] == 0;
                y[i * ld + c] = first ? 1.0f : 0.0f;
                s[c] = first ? 1.0f : s[c];
            }
        return;
    }
    bool masked[SM_TILE]; /* a column of -inf only: NaN, as in a row (sm_row) */
    for (int64_t c = 0; c < w; c++) {
        masked[c] = m[c] == -INFINITY;
        m[c] = isinf(m[c]) ? 0 : m[c];
    }
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < w; c++) {
            float e = kiln_math_exp(x[i * ld + c] - m[c]);
            y[i * ld + c] = e;
            s[c] += e;
        }
    for (int64_t c = 0; c < w; c++)
        s[c] = masked[c] ? NAN : s[c];
    if (a->op == SM_SOFTMAX) {
        for (int64_t c = 0; c < w; c++)
            s[c] = 1.0f / s[c];
        for (int64_t i = 0; i < n; i++)
            for (int64_t c = 0; c < w; c++)
                y[i * ld + c] *= s[c];
    } else {
        for (int64_t c = 0; c < w; c++)
            s[c] = m[c] + logf(s[c]);
        for (int64_t i = 0; i < n; i++)
            for (int64_t c = 0; c < w; c++)
                y[i * ld + c] = x[i * ld + c] - s[c];
    }
}

static void sm_tiles(void *arg, int64_t begin, int64_t end) {
    const sm_args *a = arg;
    int64_t tiles = (a->inner + SM_TILE - 1) / SM_TILE;
    for (int64_t t = begin; t < end; t++) {
        int64_t o = t / tiles, c0 = (t % tiles) * SM_TILE;
        int64_t w = a->inner - c0 < SM_TILE ? a->inner - c0 : SM_TILE;
        int64_t off = o * a->n * a->inner + c0;
        sm_tile(a, a->x + off, a->y + off, w);
    }
}

kiln_status cpu_red_softmax(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0];
    kn_tensor *y = &k->out[0];
    sm_args a = {0};
    const char *op = k->node->op_type;
    a.op = strcmp(op, "Softmax") == 0      ? SM_SOFTMAX
           : strcmp(op, "LogSoftmax") == 0 ? SM_LOGSOFTMAX
                                           : SM_HARDMAX;
    KN_TRY(kn_softmax_geometry(k->node, &x->shape, &a.outer, &a.n, &a.inner));
    if (kn_tensor_numel(x) == 0)
        return KILN_OK;
    kn_cpu_f32 xv, yv;
    KN_TRY(kn_cpu_f32_in(x, &xv));
    kiln_status rc = kn_cpu_f32_out(y, &yv);
    if (rc != KILN_OK) {
        kn_cpu_f32_release(&xv);
        return rc;
    }
    a.x = xv.p;
    a.y = yv.p;
    if (a.inner == 1) {
#if SM_HAVE_AVX512
        a.avx512 = a.op == SM_SOFTMAX && __builtin_cpu_supports("avx512f");
#endif
        int64_t grain = a.n >= 4096 ? 1 : 4096 / a.n;
        kn_parallel_for(k->pool, a.outer, grain, sm_rows, &a);
    } else {
        int64_t tiles = (a.inner + SM_TILE - 1) / SM_TILE;
        kn_parallel_for(k->pool, a.outer * tiles, 1, sm_tiles, &a);
    }
    kn_cpu_f32_commit(y, &yv);
    kn_cpu_f32_release(&xv);
    return KILN_OK;
}
