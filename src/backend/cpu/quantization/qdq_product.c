/* kiln.QMatMul (made by kn_pass_fuse_qdq; kiln.QConv is qconv.c): int8 x int8 products
 * accumulated in int32 by the int8 GEMM, then requantized per output channel. Rows of x are
 * the GEMM's rows, the weights its packed panel. Activations reach the GEMM as
 * uint8: a signed input is shifted by +128 (x ^ 0x80), so its zero point moves by 128 too, and
 * the zero point comes off through the weights' column sums:
 *   sum (x - xz) w = sum xu w - xzu * colsum(w).
 * Weights are symmetric (zero point 0, checked when the engine is made). The real output is
 * acc * x_scale * w_scale[j] + bias[j], clamped by a fused Relu / Clip, then quantized with
 * y's scale and zero point, rounding half to even. With kiln_float_output (set by
 * kn_pass_expand_qdq_pairs where the product's only reader was a DequantizeLinear on y's grid)
 * the output is that DequantizeLinear's float32 value, (q - y_zero_point) * y_scale. */
#include "backend/cpu/cpu.h"
#include "backend/cpu/math/gemm_int8.h"
#include "backend/cpu/quantization/requant.h"
#include "core/alloc.h"
#include "backend/cpu/clones.h"
#include "backend/cpu/quantization/qproduct.h"

#include <math.h>
#include <string.h>

typedef struct qstate {
    kn_qgemm_b b;
    float *scale; /* x_scale * w_scale[j] */
    float *bias;  /* [n], zero when absent */
    float ys, yz, lo, hi, qmin, qmax;
    int32_t xzu;  /* x's zero point in the uint8 domain */
    uint8_t flip; /* 0x80 for int8 x, 0 for uint8 */
    bool fout;    /* float32 output (kiln_float_output) */
} qstate;

/* Rows of A each GEMM call takes (a multiple of the 6-row tile). */
#define ROWS 48

static kiln_status need_const(const kn_tensor *t, const char *what) {
    if (t->dtype == 0 || t->data == NULL)
        return kn_error(KILN_ERR_UNSUPPORTED, "int8 product: %s must be a constant", what);
    return KILN_OK;
}

void kn_cpu_qmatmul_release(void *state) {
    qstate *s = state;
    if (s == NULL)
        return;
    kn_qgemm_b_free(&s->b);
    kn_free(s->scale);
    kn_free(s->bias);
    kn_free(s);
}

kiln_status kn_qproduct_epilogue(const kn_node *node, int n_in, const kn_tensor *in,
                                 kn_qepilogue *e) {
    if (n_in < 8)
        return kn_error(KILN_ERR_MODEL, "int8 product: expected at least 8 inputs");
    KN_TRY(need_const(&in[1], "x_scale"));
    KN_TRY(need_const(&in[2], "x_zero_point"));
    KN_TRY(need_const(&in[3], "w"));
    KN_TRY(need_const(&in[4], "w_scale"));
    KN_TRY(need_const(&in[6], "y_scale"));
    KN_TRY(need_const(&in[7], "y_zero_point"));
    if (n_in > 5 && in[5].dtype != 0) {
        KN_TRY(need_const(&in[5], "w_zero_point"));
        for (int64_t i = 0; i < kn_tensor_numel(&in[5]); i++)
            if (kn_tensor_get_i64(&in[5], i) != 0)
                return kn_error(KILN_ERR_UNSUPPORTED, "int8 product: w_zero_point must be 0");
    }
    if (n_in > 8 && in[8].dtype != 0)
        KN_TRY(need_const(&in[8], "bias"));
    e->xs = kn_tensor_get_f64(&in[1], 0);
    e->flip = in[0].dtype == KILN_DTYPE_INT8 ? 0x80 : 0;
    e->xzu = (int32_t)kn_tensor_get_i64(&in[2], 0) + (e->flip ? 128 : 0);
    e->ys = (float)kn_tensor_get_f64(&in[6], 0);
    e->yz = (float)kn_tensor_get_i64(&in[7], 0);
    bool y_signed = in[7].dtype == KILN_DTYPE_INT8;
    e->qmin = y_signed ? -128.0f : 0.0f;
    e->qmax = y_signed ? 127.0f : 255.0f;
    e->lo = -INFINITY;
    e->hi = INFINITY;
    const char *act = kn_attr_string(node, "kiln_activation", NULL);
    if (act != NULL && strcmp(act, "Relu") == 0) {
        e->lo = 0.0f;
    } else if (act != NULL && strcmp(act, "Clip") == 0) {
        e->lo = kn_attr_float(node, "kiln_alpha", -INFINITY);
        e->hi = kn_attr_float(node, "kiln_beta", INFINITY);
    } else if (act != NULL) {
        return kn_error(KILN_ERR_UNSUPPORTED, "int8 product: activation %s is not fused", act);
    }
    return KILN_OK;
}

kiln_status kn_cpu_qmatmul_prepare(const kn_node *node, int n_in, const kn_tensor *in,
                                   void **state) {
    *state = NULL;
    kn_qepilogue ep;
    KN_TRY(kn_qproduct_epilogue(node, n_in, in, &ep));
    const kn_tensor *w = &in[3];
    int64_t n = w->shape.d[1], k = w->shape.d[0];
    qstate *s = kn_calloc(1, sizeof *s);
    if (s == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "no memory for an int8 product");
    *state = s;
    KN_TRY(kn_qgemm_pack_b(w->data, k, n, n, 1, &s->b));
    s->scale = kn_malloc((size_t)(s->b.nb * 16) * sizeof(float));
    s->bias = kn_calloc((size_t)(s->b.nb * 16), sizeof(float));
    if (s->scale == NULL || s->bias == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "no memory for an int8 product");
    int64_t n_ws = kn_tensor_numel(&in[4]);
    for (int64_t j = 0; j < s->b.nb * 16; j++)
        s->scale[j] = j < n ? (float)(ep.xs * kn_tensor_get_f64(&in[4], n_ws > 1 ? j : 0)) : 0.0f;
    if (n_in > 8 && in[8].dtype != 0)
        memcpy(s->bias, in[8].data, (size_t)n * sizeof(float));
    s->flip = ep.flip;
    s->xzu = ep.xzu;
    s->ys = ep.ys;
    s->yz = ep.yz;
    s->qmin = ep.qmin;
    s->qmax = ep.qmax;
    s->lo = ep.lo;
    s->hi = ep.hi;
    s->fout = kn_attr_int(node, "kiln_float_output", 0) != 0;
    return KILN_OK;
}

/* Output j's quotient by y's scale, clamped and rounded half to even (requant.h), as a float
 * integer without y's zero point: sum - xzu * colsum, scaled, biased and clamped to the fused
 * activation's bounds. Always inlined into the loops below, whose locals it takes. */
static inline __attribute__((always_inline)) float
rounded_quotient(int32_t acc, int32_t xzu, int32_t colsum, float scale, float bias, float lo,
                 float hi, float ys, float qlo, float qhi) {
    float r = (float)(acc - xzu * colsum) * scale + bias;
    r = r > lo ? r : lo;
    r = r < hi ? r : hi;
    return kn_q8_rne(r / ys, qlo, qhi);
}

/* One row of int32 sums to n quantized outputs, in a loop the compiler vectorizes: clamps by
 * comparison, rounding half to even by adding and taking away 1.5 * 2^23. The state's fields
 * are read once into locals: y's byte stores may alias them, and reloading them every element
 * kept the loop scalar. (AVX-512 / AVX2 clones where the CPU has them.) */
KN_CLONES static void requantize(const qstate *s, int64_t j0, const int32_t *acc, int64_t n,
                                 uint8_t *y) {
    const float qlo = s->qmin - s->yz, qhi = s->qmax - s->yz, lo = s->lo, hi = s->hi;
    const float ys = s->ys, yz = s->yz;
    const int32_t xzu = s->xzu;
    const int32_t *colsum = s->b.colsum + j0;
    const float *scale = s->scale + j0, *bias = s->bias + j0;
    for (int64_t j = 0; j < n; j++)
        y[j] = (uint8_t)(int32_t)(rounded_quotient(acc[j], xzu, colsum[j], scale[j], bias[j], lo,
                                                   hi, ys, qlo, qhi) +
                                  yz);
}

/* requantize's rounding, then the DequantizeLinear of its byte: ((float)q - yz) * ys, where
 * (float)q is the rounded quotient plus yz, exactly (small integers). */
KN_CLONES static void requantize_f32(const qstate *s, int64_t j0, const int32_t *acc, int64_t n,
                                     float *y) {
    const float qlo = s->qmin - s->yz, qhi = s->qmax - s->yz, lo = s->lo, hi = s->hi;
    const float ys = s->ys, yz = s->yz;
    const int32_t xzu = s->xzu;
    const int32_t *colsum = s->b.colsum + j0;
    const float *scale = s->scale + j0, *bias = s->bias + j0;
    for (int64_t j = 0; j < n; j++) {
        float q =
            rounded_quotient(acc[j], xzu, colsum[j], scale[j], bias[j], lo, hi, ys, qlo, qhi) + yz;
        y[j] = (q - yz) * ys;
    }
}

/* A row of x with each byte ^ flip (the int8 / uint8 domain change), zero to kp. */
KN_CLONES static void flip_row(const uint8_t *src, int64_t k, int64_t kp, uint8_t flip,
                               uint8_t *dst) {
    for (int64_t e = 0; e < k; e++)
        dst[e] = src[e] ^ flip;
    memset(dst + k, 0, (size_t)(kp - k));
}

typedef struct qjob {
    const qstate *s;
    const uint8_t *x;
    void *y; /* bytes, or float32 with s->fout */
    int64_t rows, k;
    int64_t cparts; /* column parts of each chunk of rows (a few rows: columns split too) */
    kiln_status rc;
} qjob;

typedef struct qbufs {
    uint8_t *a, *y;
    int32_t *c;
} qbufs;

static bool bufs_get(const qstate *s, qbufs *b) {
    b->a = kn_malloc((size_t)(ROWS * s->b.kp));
    b->c = kn_malloc((size_t)(ROWS * s->b.nb * 16) * sizeof(int32_t));
    b->y = kn_malloc((size_t)(ROWS * s->b.nb * 16));
    return b->a != NULL && b->c != NULL && b->y != NULL;
}

static void bufs_put(qbufs *b) {
    kn_free(b->a);
    kn_free(b->c);
    kn_free(b->y);
}

/* Task t: rows [r0, r0 + ROWS) of chunk t / cparts by the columns of part t % cparts, whole
 * pairs of 16-column blocks (the 6 x 32 tile's width). */
static void matmul_range(void *arg, int64_t begin, int64_t end) {
    qjob *j = arg;
    const qstate *s = j->s;
    qbufs b;
    if (!bufs_get(s, &b)) {
        bufs_put(&b);
        j->rc = KILN_ERR_OUT_OF_MEMORY;
        return;
    }
    int64_t kp = s->b.kp, pairs = (s->b.nb + 1) / 2;
    for (int64_t t = begin; t < end; t++) {
        int64_t ch = t / j->cparts, cp = t % j->cparts;
        int64_t r0 = ch * ROWS, m = j->rows - r0 < ROWS ? j->rows - r0 : ROWS;
        int64_t nb0 = cp * pairs / j->cparts * 2, nb1 = (cp + 1) * pairs / j->cparts * 2;
        nb1 = nb1 < s->b.nb ? nb1 : s->b.nb;
        int64_t j0 = nb0 * 16, j1 = nb1 * 16 < s->b.n ? nb1 * 16 : s->b.n;
        if (j1 <= j0)
            continue;
        kn_qgemm_b part = {.k = s->b.k,
                           .n = j1 - j0,
                           .kp = kp,
                           .nb = nb1 - nb0,
                           .packed = s->b.packed + nb0 * kp * 16,
                           .colsum = s->b.colsum + j0,
                           .ahead = true};
        int64_t ldc = part.nb * 16;
        for (int64_t i = 0; i < m; i++)
            flip_row(j->x + (r0 + i) * j->k, j->k, kp, s->flip, b.a + i * kp);
        kn_qgemm_u8s8(b.a, kp, m, &part, b.c, ldc);
        for (int64_t i = 0; i < m; i++) {
            int64_t at = (r0 + i) * s->b.n + j0;
            if (s->fout)
                requantize_f32(s, j0, b.c + i * ldc, j1 - j0, (float *)j->y + at);
            else
                requantize(s, j0, b.c + i * ldc, j1 - j0, (uint8_t *)j->y + at);
        }
    }
    bufs_put(&b);
}

kiln_status kn_cpu_qmatmul_run(kn_kernel_ctx *k) {
    const qstate *s = k->state;
    qjob j = {.s = s, .x = k->in[0].data, .y = k->out[0].data, .k = s->b.k, .rc = KILN_OK};
    j.rows = s->b.k > 0 ? kn_tensor_numel(&k->in[0]) / s->b.k : 0;
    /* Fewer chunks of rows than two a thread (a transformer's 128 tokens are three): the
     * columns split too, so every thread has work. */
    int64_t chunks = (j.rows + ROWS - 1) / ROWS, pairs = (s->b.nb + 1) / 2;
    int threads = kn_threadpool_size(k->pool);
    j.cparts = 1;
    if (threads > 1 && chunks > 0 && chunks < 2 * threads) {
        j.cparts = (2 * threads + chunks - 1) / chunks;
        j.cparts = j.cparts < pairs ? j.cparts : pairs > 0 ? pairs : 1;
    }
    kn_parallel_for(k->pool, chunks * j.cparts, 1, matmul_range, &j);
    if (j.rc != KILN_OK)
        return kn_error(j.rc, "no memory for an int8 MatMul");
    return KILN_OK;
}
