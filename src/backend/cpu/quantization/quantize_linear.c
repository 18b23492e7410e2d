/* QuantizeLinear, DequantizeLinear (per-tensor, per-axis, blocked) and MatMulInteger. */
#include "backend/cpu/quantization/saturate.h"
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

static inline float get_f(const kn_tensor *t, int64_t i) {
    return t->dtype == KILN_DTYPE_FLOAT32 ? ((const float *)t->data)[i]
                                          : (float)kn_tensor_get_f64(t, i);
}

kiln_status kn_cpu_quantize(kn_kernel_ctx *k) {
    qmap q;
    KN_TRY(qmap_init(k, &q));
    const kn_tensor *x = &k->in[0], *s = &k->in[1];
    const kn_tensor *zp = k->n_in > 2 && k->in[2].dtype ? &k->in[2] : NULL;
    kn_tensor *y = &k->out[0];
    int64_t n = kn_tensor_numel(x);
    for (int64_t i = 0; i < n; i++) {
        int64_t si = qmap_index(&q, i);
        float v = nearbyintf(get_f(x, i) / get_f(s, si));
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
    for (int64_t i = 0; i < n; i++) {
        int64_t si = qmap_index(&q, i);
        float z = zp != NULL ? (float)kn_tensor_get_i64(zp, si) : 0.0f;
        float v = ((float)kn_tensor_get_i64(x, i) - z) * get_f(s, si);
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

static inline int32_t get_q(const kn_tensor *t, int64_t i) {
    return t->dtype == KILN_DTYPE_UINT8 ? ((const uint8_t *)t->data)[i]
                                        : ((const int8_t *)t->data)[i];
}

kiln_status kn_cpu_matmul_integer(kn_kernel_ctx *k) {
    const kn_tensor *A = &k->in[0], *B = &k->in[1];
    const kn_tensor *az = k->n_in > 2 && k->in[2].dtype ? &k->in[2] : NULL;
    const kn_tensor *bz = k->n_in > 3 && k->in[3].dtype ? &k->in[3] : NULL;
    kn_shape pa = A->shape, pb = B->shape;
    if (pa.rank == 1) {
        pa = (kn_shape){2, {1, A->shape.d[0]}};
    }
    if (pb.rank == 1) {
        pb = (kn_shape){2, {B->shape.d[0], 1}};
    }
    int64_t M = pa.d[pa.rank - 2], K = pa.d[pa.rank - 1], N = pb.d[pb.rank - 1];
    /* Batch dims of the output, right-aligned against each operand's batch dims. */
    int32_t rb = pa.rank > pb.rank ? pa.rank - 2 : pb.rank - 2;
    int64_t bdims[KN_MAX_RANK], sa[KN_MAX_RANK], sb[KN_MAX_RANK], batches = 1;
    int64_t stride_a = M * K, stride_b = K * N;
    for (int32_t i = rb - 1; i >= 0; i--) {
        int32_t ia = i - (rb - (pa.rank - 2)), ib = i - (rb - (pb.rank - 2));
        int64_t da = ia >= 0 ? pa.d[ia] : 1, db = ib >= 0 ? pb.d[ib] : 1;
        bdims[i] = da > db ? da : db;
        sa[i] = da == 1 ? 0 : stride_a;
        sb[i] = db == 1 ? 0 : stride_b;
        stride_a *= da;
        stride_b *= db;
        batches *= bdims[i];
    }
    int32_t *y = k->out[0].data;
    for (int64_t bt = 0; bt < batches; bt++) {
        int64_t oa = 0, ob = 0, rem = bt;
        for (int32_t i = rb - 1; i >= 0; i--) {
            int64_t idx = rem % bdims[i];
            rem /= bdims[i];
            oa += idx * sa[i];
            ob += idx * sb[i];
        }
        for (int64_t m = 0; m < M; m++) {
            int32_t za = az == NULL ? 0 : get_q(az, kn_tensor_numel(az) == 1 ? 0 : m);
            for (int64_t n = 0; n < N; n++) {
                int32_t zb = bz == NULL ? 0 : get_q(bz, kn_tensor_numel(bz) == 1 ? 0 : n);
                int32_t acc = 0;
                for (int64_t kk = 0; kk < K; kk++)
                    acc += (get_q(A, oa + m * K + kk) - za) * (get_q(B, ob + kk * N + n) - zb);
                y[(bt * M + m) * N + n] = acc;
            }
        }
    }
    return KILN_OK;
}
