/* CPU kernels of the extra family: the table and the float32 staging helpers; the kernels
 * live in extra_*.c. */
#include "backend/cpu/f32_stage.h"
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
