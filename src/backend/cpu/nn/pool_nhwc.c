/* MaxPool over bf16 activations stored NHWC (kiln_nhwc, passes/layout_nhwc.c): the pooling
 * between a ResNet's stem and its first block, inside a region of bf16 convs. A window's
 * maximum is taken over whole pixels, a run of C channels at a time, so the loop over channels
 * is contiguous. bf16 values compare as their float32 widening; NaN propagates as in the
 * float32 kernel (any NaN in a window gives NaN). */
#include "backend/cpu/nn/pool_nhwc.h"
#include "core/status.h"
#include "core/tensor.h"

#include <math.h>
#include <string.h>

typedef struct maxpool_job {
    const uint16_t *x;
    uint16_t *y;
    const kn_pool_geom *g;
    int64_t c;
    bool avx512;
} maxpool_job;

/* The window of output pixel (oh, ow) within the image: rows [r0, r1), columns [s0, s1) of
 * kernel taps that land inside. */
typedef struct window {
    int64_t r0, r1, s0, s1;
} window;

static window window_of(const kn_pool_geom *g, int64_t oh, int64_t ow) {
    window w = {0, 0, 0, 0};
    int64_t h0 = oh * g->s[0] - g->pb[0], w0 = ow * g->s[1] - g->pb[1];
    w.r0 = h0 >= 0 ? 0 : (-h0 + g->d[0] - 1) / g->d[0];
    w.s0 = w0 >= 0 ? 0 : (-w0 + g->d[1] - 1) / g->d[1];
    for (w.r1 = g->k[0]; w.r1 > w.r0 && h0 + (w.r1 - 1) * g->d[0] >= g->in[0]; w.r1--)
        ;
    for (w.s1 = g->k[1]; w.s1 > w.s0 && w0 + (w.s1 - 1) * g->d[1] >= g->in[1]; w.s1--)
        ;
    return w;
}

/* The maximum's bits: a NaN in the window wins (as in the float32 kernel), else the largest. */
static inline float take(float acc, float v) {
    return v > acc || v != v ? v : acc;
}

static void pixel_portable(const maxpool_job *j, const uint16_t *x0, window w, uint16_t *py) {
    const kn_pool_geom *g = j->g;
    int64_t row = g->in[1] * j->c;
    for (int64_t ch = 0; ch < j->c; ch++) {
        float acc = -INFINITY;
        for (int64_t r = w.r0; r < w.r1; r++)
            for (int64_t s = w.s0; s < w.s1; s++)
                acc = take(acc, kn_bf16_widen(x0[r * g->d[0] * row + s * g->d[1] * j->c + ch]));
        uint32_t u;
        memcpy(&u, &acc, sizeof u);
        py[ch] = (uint16_t)(u >> 16); /* exact: the maximum is one of the inputs */
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

AVX512 static inline __m512 widen16(const uint16_t *p, __mmask16 m) {
    __m256i h = _mm256_maskz_loadu_epi16(m, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* 16 channels a vector, the window's taps folded into it. */
AVX512 static void pixel_avx512(const maxpool_job *j, const uint16_t *x0, window w, uint16_t *py) {
    const kn_pool_geom *g = j->g;
    int64_t row = g->in[1] * j->c;
    for (int64_t ch = 0; ch < j->c; ch += 16) {
        __mmask16 m = j->c - ch >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (j->c - ch)) - 1);
        __m512 acc = _mm512_set1_ps(-INFINITY);
        for (int64_t r = w.r0; r < w.r1; r++)
            for (int64_t s = w.s0; s < w.s1; s++) {
                __m512 v = widen16(x0 + r * g->d[0] * row + s * g->d[1] * j->c + ch, m);
                __mmask16 pick =
                    _mm512_cmp_ps_mask(v, acc, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
                acc = _mm512_mask_mov_ps(acc, pick, v);
            }
        __m256i out = _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(acc), 16));
        _mm256_mask_storeu_epi16(py + ch, m, out);
    }
}

static bool has_avx512(void) {
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
}
#else
static void pixel_avx512(const maxpool_job *j, const uint16_t *x0, window w, uint16_t *py) {
    pixel_portable(j, x0, w, py);
}

static bool has_avx512(void) {
    return false;
}
#endif

static void maxpool_rows(void *arg, int64_t begin, int64_t end) {
    const maxpool_job *j = arg;
    const kn_pool_geom *g = j->g;
    for (int64_t at = begin; at < end; at++) {
        int64_t n = at / g->out[0], oh = at % g->out[0];
        for (int64_t ow = 0; ow < g->out[1]; ow++) {
            window w = window_of(g, oh, ow);
            int64_t ih = oh * g->s[0] - g->pb[0] + w.r0 * g->d[0];
            int64_t iw = ow * g->s[1] - g->pb[1] + w.s0 * g->d[1];
            const uint16_t *x0 = j->x + ((n * g->in[0] + ih) * g->in[1] + iw) * j->c;
            uint16_t *py = j->y + ((n * g->out[0] + oh) * g->out[1] + ow) * j->c;
            w.r1 -= w.r0, w.s1 -= w.s0, w.r0 = w.s0 = 0; /* x0 is the first tap inside */
            if (j->avx512)
                pixel_avx512(j, x0, w, py);
            else
                pixel_portable(j, x0, w, py);
        }
    }
}

bool kn_cpu_maxpool_nhwc_bf16_applies(const kn_shape *x, const kn_pool_geom *g) {
    return x->rank == 4 && g->nsp == 2;
}

kiln_status kn_cpu_maxpool_nhwc_bf16(kn_kernel_ctx *k, const kn_pool_geom *g) {
    const kn_tensor *x = &k->in[0], *y = &k->out[0];
    if (strcmp(k->node->op_type, "MaxPool") != 0 || x->dtype != KILN_DTYPE_BFLOAT16 ||
        y->dtype != KILN_DTYPE_BFLOAT16 || !kn_cpu_maxpool_nhwc_bf16_applies(&x->shape, g) ||
        (k->n_out > 1 && k->node->out[1] >= 0))
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "%s: NHWC is taken only by a 2-D bfloat16 MaxPool without indices",
                        k->node->op_type);
    maxpool_job j = {
        .x = x->data, .y = y->data, .g = g, .c = x->shape.d[1], .avx512 = has_avx512()};
    int64_t rows = x->shape.d[0] * g->out[0];
    if (rows > 0 && g->out[1] > 0 && j.c > 0)
        kn_parallel_for(k->pool, rows, 1, maxpool_rows, &j);
    return KILN_OK;
}
