/* ai.onnx.ml ArrayFeatureExtractor. */
#include "backend/cpu/f32_stage.h"

#include <string.h>

kiln_status kn_cpu_array_feature_extractor(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0], *ix = &k->in[1];
    int64_t last = x->shape.d[x->shape.rank - 1], m = kn_tensor_numel(ix);
    int64_t rows = last > 0 ? kn_tensor_numel(x) / last : 0;
    const int64_t *sel = ix->data;
    size_t es = kn_dtype_size(x->dtype);
    for (int64_t j = 0; j < m; j++)
        if (sel[j] < 0 || sel[j] >= last)
            return kn_error(KILN_ERR_SHAPE, "input Y[%lld] = %lld is outside [0, %lld)",
                            (long long)j, (long long)sel[j], (long long)last);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < m; j++)
            memcpy((char *)k->out[0].data + (size_t)(r * m + j) * es,
                   (const char *)x->data + (size_t)(r * last + sel[j]) * es, es);
    return KILN_OK;
}
