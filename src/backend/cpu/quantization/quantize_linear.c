/* QuantizeLinear, DequantizeLinear (per-tensor, per-axis, blocked) and DynamicQuantizeLinear. */
#include "backend/cpu/clones.h"
#include "backend/cpu/element_access.h"
#include "backend/cpu/quantization/requant.h"
#include "backend/cpu/quantization/saturate.h"
#include "core/narrow_dtype.h"
#include "core/threadpool.h"
#include "ops/op.h"

#include <math.h>
#include <string.h>

/* Maps an element of x to its scale/zero-point element. */
typedef struct qmap {
    int kind; /* 0 per-tensor, 1 per-axis, 2 blocked */
    int64_t inner, dim, block, s_dim;
} qmap;

static kiln_status qmap_init(const kn_kernel_ctx *k, qmap *q) {
    const kn_tensor *x = &k->in[0], *s = &k->in[1];
    memset(q, 0, sizeof *q);
    int64_t block = k->node->opset >= 21 ? kn_attr_int(k->node, "block_size", 0) : 0;
    if (block == 0 && kn_tensor_numel(s) == 1)
        return KILN_OK;
    int64_t axis;
    KN_TRY(kn_norm_axis(kn_attr_int(k->node, "axis", 1), x->shape.rank, &axis));
    q->kind = block > 0 ? 2 : 1;
    q->inner = 1;
    for (int i = (int)axis + 1; i < x->shape.rank; i++)
        q->inner *= x->shape.d[i];
    q->dim = x->shape.d[axis];
    q->block = block > 0 ? block : 1;
    q->s_dim = s->shape.d[block > 0 ? axis : 0];
    return KILN_OK;
}

static inline int64_t qmap_index(const qmap *q, int64_t i) {
    if (q->kind == 0)
        return 0;
    int64_t a = (i / q->inner) % q->dim;
    if (q->kind == 1)
        return a;
    int64_t outer = i / (q->inner * q->dim);
    return (outer * q->s_dim + a / q->block) * q->inner + i % q->inner;
}

/* The common case of QDQ models, per tensor float32 to int8 / uint8, in a loop the compiler
 * vectorizes: the quotient is clamped first (a NaN fails both comparisons and saturates low,
 * as in the general path), then rounded half to even by adding and taking away 1.5 * 2^23. */
/* (AVX-512 / AVX2 clones: the generic build's SSE2 form took 15 us per 32K-element tensor, a
 * quarter of a QDQ transformer's time in its 113 QuantizeLinear nodes.) */
KN_CLONES void kn_cpu_quantize_q8(const float *x, int64_t n, float s, float z, bool sgn, void *yd) {
    const float lo = (sgn ? -128.0f : 0.0f) - z, hi = (sgn ? 127.0f : 255.0f) - z;
    uint8_t *u = yd;
    int8_t *i8 = yd;
    if (sgn)
        for (int64_t i = 0; i < n; i++)
            i8[i] = (int8_t)(int32_t)(kn_q8_rne(x[i] / s, lo, hi) + z);
    else
        for (int64_t i = 0; i < n; i++)
            u[i] = (uint8_t)(int32_t)(kn_q8_rne(x[i] / s, lo, hi) + z);
}

KN_CLONES static void dequantize_q8(const void *xd, bool sgn, int64_t n, float s, float z,
                                    float *y) {
    if (sgn) {
        const int8_t *d = xd;
        for (int64_t i = 0; i < n; i++)
            y[i] = ((float)d[i] - z) * s;
    } else {
        const uint8_t *d = xd;
        for (int64_t i = 0; i < n; i++)
            y[i] = ((float)d[i] - z) * s;
    }
}

/* Both loops over the pool: at 16 threads a QDQ BERT's 700 per-tensor QuantizeLinear and
 * DequantizeLinear nodes on one thread each took longer than all its int8 products. Elements
 * are independent, so any split gives the same bytes. */
#define Q8_GRAIN 16384

typedef struct q8_job {
    const void *x;
    void *y;
    float s, z;
    bool sgn, quantize;
} q8_job;

static void q8_chunk(void *arg, int64_t begin, int64_t end) {
    const q8_job *j = arg;
    if (j->quantize)
        kn_cpu_quantize_q8((const float *)j->x + begin, end - begin, j->s, j->z, j->sgn,
                           (uint8_t *)j->y + begin);
    else
        dequantize_q8((const uint8_t *)j->x + begin, j->sgn, end - begin, j->s, j->z,
                      (float *)j->y + begin);
}

kiln_status kn_cpu_quantize(kn_kernel_ctx *k) {
    qmap q;
    KN_TRY(qmap_init(k, &q));
    const kn_tensor *x = &k->in[0], *s = &k->in[1];
    const kn_tensor *zp = k->n_in > 2 && k->in[2].dtype ? &k->in[2] : NULL;
    kn_tensor *y = &k->out[0];
    int64_t n = kn_tensor_numel(x);
    if (kn_dtype_is_float8(y->dtype) || y->dtype == KILN_DTYPE_FLOAT4E2M1) {
        /* Float targets are not rounded to integers. float8's zero point must be 0 (the ONNX
         * reference ignores it); float4's is added before the conversion. */
        bool saturate = kn_attr_int(k->node, "saturate", 1) != 0;
        bool add_zp = zp != NULL && y->dtype == KILN_DTYPE_FLOAT4E2M1;
        uint8_t *yd = y->data;
        for (int64_t i = 0; i < n; i++) {
            int64_t si = qmap_index(&q, i);
            float v = kn_cpu_load_f32(x, i) / kn_cpu_load_f32(s, si);
            if (add_zp)
                v += (float)kn_tensor_get_f64(zp, si);
            yd[i] = kn_narrow_float_encode(y->dtype, v, saturate);
        }
        return KILN_OK;
    }
    if (q.kind == 0 && x->dtype == KILN_DTYPE_FLOAT32 && s->dtype == KILN_DTYPE_FLOAT32 &&
        (y->dtype == KILN_DTYPE_UINT8 || y->dtype == KILN_DTYPE_INT8)) {
        q8_job j = {.x = x->data,
                    .y = y->data,
                    .s = *(const float *)s->data,
                    .z = zp != NULL ? (float)kn_tensor_get_i64(zp, 0) : 0.0f,
                    .sgn = y->dtype == KILN_DTYPE_INT8,
                    .quantize = true};
        kn_parallel_for(k->pool, n, Q8_GRAIN, q8_chunk, &j);
        return KILN_OK;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t si = qmap_index(&q, i);
        float v = nearbyintf(kn_cpu_load_f32(x, i) / kn_cpu_load_f32(s, si));
        double z = zp != NULL ? (double)kn_tensor_get_i64(zp, si) : 0.0;
        kn_cpu_store_saturated(y, i, (double)v + z);
    }
    return KILN_OK;
}

kiln_status kn_cpu_dequantize(kn_kernel_ctx *k) {
    qmap q;
    KN_TRY(qmap_init(k, &q));
    const kn_tensor *x = &k->in[0], *s = &k->in[1];
    const kn_tensor *zp = k->n_in > 2 && k->in[2].dtype ? &k->in[2] : NULL;
    kn_tensor *y = &k->out[0];
    int64_t n = kn_tensor_numel(x);
    if (q.kind == 0 && y->dtype == KILN_DTYPE_FLOAT32 && s->dtype == KILN_DTYPE_FLOAT32 &&
        (x->dtype == KILN_DTYPE_UINT8 || x->dtype == KILN_DTYPE_INT8)) {
        q8_job j = {.x = x->data,
                    .y = y->data,
                    .s = *(const float *)s->data,
                    .z = zp != NULL ? (float)kn_tensor_get_i64(zp, 0) : 0.0f,
                    .sgn = x->dtype == KILN_DTYPE_INT8,
                    .quantize = false};
        kn_parallel_for(k->pool, n, Q8_GRAIN, q8_chunk, &j);
        return KILN_OK;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t si = qmap_index(&q, i);
        /* get_f64 reads float8/float4 codes as their values and integers exactly */
        float z = zp != NULL ? (float)kn_tensor_get_f64(zp, si) : 0.0f;
        float v = ((float)kn_tensor_get_f64(x, i) - z) * kn_cpu_load_f32(s, si);
        if (y->dtype == KILN_DTYPE_FLOAT32)
            ((float *)y->data)[i] = v;
        else
            kn_tensor_set_f64(y, i, v);
    }
    return KILN_OK;
}

/* uint8 with the range widened to include 0, so that 0 is exactly representable. */
kiln_status kn_cpu_dynamic_quantize(kn_kernel_ctx *k) {
    const float *x = k->in[0].data;
    int64_t n = kn_tensor_numel(&k->in[0]);
    float lo = 0.0f, hi = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    float scale = (hi - lo) / 255.0f;
    float zpf = scale > 0.0f ? nearbyintf(-lo / scale) : 0.0f;
    zpf = zpf > 0.0f ? (zpf < 255.0f ? zpf : 255.0f) : 0.0f; /* NaN (infinite input) to 0 */
    for (int64_t i = 0; i < n; i++)
        kn_cpu_store_saturated(&k->out[0], i, scale > 0.0f ? nearbyintf(x[i] / scale) + zpf : 0.0);
    if (k->n_out > 1 && k->out[1].data != NULL)
        *(float *)k->out[1].data = scale;
    if (k->n_out > 2 && k->out[2].data != NULL)
        *(uint8_t *)k->out[2].data = (uint8_t)zpf;
    return KILN_OK;
}
