/* MatMulInteger: products of zero-point-shifted int8/uint8 values, accumulated in int32 as the
 * ONNX definition says. */
#include "backend/cpu/cpu.h"

#include <string.h>

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
