/* ai.onnx.ml Binarizer. */
#include "backend/cpu/f32_stage.h"

kiln_status kn_cpu_binarizer(kn_kernel_ctx *k) {
    double th = kn_attr_float(k->node, "threshold", 0.0f);
    int64_t n = kn_tensor_numel(&k->in[0]);
    for (int64_t i = 0; i < n; i++)
        kn_tensor_set_f64(&k->out[0], i, kn_tensor_get_f64(&k->in[0], i) > th ? 1.0 : 0.0);
    return KILN_OK;
}
