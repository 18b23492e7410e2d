/* CPU kernels of the extra family: the table and the float32 staging helpers; the kernels
 * live in extra_*.c. */
#include "backend/cpu/extra_internal.h"
#include "core/alloc.h"

kiln_status cpu_extra_in_f32(const kn_tensor *t, cpu_xf32 *v) {
    v->owned = false;
    if (t->dtype == KILN_DTYPE_FLOAT32) {
        v->p = t->data;
        return KILN_OK;
    }
    int64_t n = kn_tensor_numel(t);
    v->p = kn_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (v->p == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "no memory for a float32 copy of %lld elements",
                        (long long)n);
    v->owned = true;
    for (int64_t i = 0; i < n; i++)
        v->p[i] = (float)kn_tensor_get_f64(t, i);
    return KILN_OK;
}

kiln_status cpu_extra_out_f32(kn_tensor *t, cpu_xf32 *v) {
    v->owned = false;
    if (t->dtype == KILN_DTYPE_FLOAT32) {
        v->p = t->data;
        return KILN_OK;
    }
    int64_t n = kn_tensor_numel(t);
    v->p = kn_calloc((size_t)(n > 0 ? n : 1), sizeof(float));
    if (v->p == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "no memory for %lld float32 results", (long long)n);
    v->owned = true;
    return KILN_OK;
}

void cpu_extra_commit(kn_tensor *t, cpu_xf32 *v) {
    if (v->owned) {
        int64_t n = kn_tensor_numel(t);
        for (int64_t i = 0; i < n; i++)
            kn_tensor_set_f64(t, i, v->p[i]);
    }
    cpu_extra_release(v);
}

void cpu_extra_release(cpu_xf32 *v) {
    if (v->owned)
        kn_free(v->p);
    v->p = NULL;
    v->owned = false;
}

bool cpu_extra_has_out(const kn_kernel_ctx *k, int i) {
    return i < k->n_out && k->node->out[i] >= 0 && k->out[i].data != NULL;
}

const kn_kernel kn_cpu_extra[] = {
    {"", "Attention", cpu_extra_attention, NULL, NULL},
    {"", "RotaryEmbedding", cpu_extra_rotary, NULL, NULL},
    {"", "HannWindow", cpu_extra_window, NULL, NULL},
    {"", "HammingWindow", cpu_extra_window, NULL, NULL},
    {"", "BlackmanWindow", cpu_extra_window, NULL, NULL},
    {"", "DFT", cpu_extra_dft, NULL, NULL},
    {"", "STFT", cpu_extra_stft, NULL, NULL},
    {"", "MelWeightMatrix", cpu_extra_mel, NULL, NULL},
    {"", "QLinearMatMul", cpu_extra_qlinear_matmul, NULL, NULL},
    {"", "ConvInteger", cpu_extra_conv_integer, NULL, NULL},
    {"", "QLinearConv", cpu_extra_qlinear_conv, NULL, NULL},
    {"", "DeformConv", cpu_extra_deform_conv, NULL, NULL},
    {"", "AffineGrid", cpu_extra_affine_grid, NULL, NULL},
    {"", "Swish", cpu_extra_swish, NULL, NULL},
    {"", "OptionalHasElement", cpu_extra_optional_has_element, NULL, NULL},
    {"", "OptionalGetElement", cpu_extra_optional_get_element, NULL, NULL},
    {"", "TfIdfVectorizer", cpu_extra_tfidf, NULL, NULL},
    {"ai.onnx.preview.training", "Adagrad", cpu_extra_optimizer, NULL, NULL},
    {"ai.onnx.preview.training", "Momentum", cpu_extra_optimizer, NULL, NULL},
    {"ai.onnx.preview.training", "Adam", cpu_extra_optimizer, NULL, NULL},
    {"ai.onnx.ml", "Binarizer", cpu_extra_binarizer, NULL, NULL},
    {"ai.onnx.ml", "ArrayFeatureExtractor", cpu_extra_array_feature_extractor, NULL, NULL},
    {"ai.onnx.ml", "TreeEnsemble", cpu_extra_tree_ensemble, NULL, NULL},
    {0},
};
