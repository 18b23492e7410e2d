/* float32 views of float16/bfloat16/float64 tensors for kernels that compute in float32. */
#include "backend/cpu/reduction/reduce_impl.h"
#include "core/alloc.h"

#include <stdint.h>

static kiln_status f32_alloc(int64_t n, cpu_f32_view *v) {
    v->p = kn_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    v->owned = true;
    if (v->p == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "no memory for a float32 copy of %lld elements",
                        (long long)n);
    return KILN_OK;
}

kiln_status cpu_red_f32_acquire(const kn_tensor *t, cpu_f32_view *v) {
    int64_t n = kn_tensor_numel(t);
    if (t->dtype == KILN_DTYPE_FLOAT32) {
        v->p = t->data;
        v->owned = false;
        return KILN_OK;
    }
    KN_TRY(f32_alloc(n, v));
    if (t->dtype == KILN_DTYPE_FLOAT16) {
        const uint16_t *s = t->data;
        for (int64_t i = 0; i < n; i++)
            v->p[i] = kn_half_to_float(s[i]);
    } else if (t->dtype == KILN_DTYPE_BFLOAT16) {
        const uint16_t *s = t->data;
        for (int64_t i = 0; i < n; i++)
            v->p[i] = kn_bf16_to_float(s[i]);
    } else if (t->dtype == KILN_DTYPE_FLOAT64) {
        const double *s = t->data;
        for (int64_t i = 0; i < n; i++)
            v->p[i] = (float)s[i];
    } else {
        for (int64_t i = 0; i < n; i++)
            v->p[i] = (float)kn_tensor_get_f64(t, i);
    }
    return KILN_OK;
}

void cpu_red_f32_release(cpu_f32_view *v) {
    if (v->owned)
        kn_free(v->p);
    v->p = NULL;
    v->owned = false;
}

kiln_status cpu_red_f32_output(kn_tensor *t, cpu_f32_view *v) {
    if (t->dtype == KILN_DTYPE_FLOAT32) {
        v->p = t->data;
        v->owned = false;
        return KILN_OK;
    }
    return f32_alloc(kn_tensor_numel(t), v);
}

void cpu_red_f32_commit(kn_tensor *t, cpu_f32_view *v) {
    if (!v->owned)
        return;
    int64_t n = kn_tensor_numel(t);
    if (t->dtype == KILN_DTYPE_FLOAT16) {
        uint16_t *d = t->data;
        for (int64_t i = 0; i < n; i++)
            d[i] = kn_float_to_half(v->p[i]);
    } else if (t->dtype == KILN_DTYPE_BFLOAT16) {
        uint16_t *d = t->data;
        for (int64_t i = 0; i < n; i++)
            d[i] = kn_float_to_bf16(v->p[i]);
    } else if (t->dtype == KILN_DTYPE_FLOAT64) {
        double *d = t->data;
        for (int64_t i = 0; i < n; i++)
            d[i] = v->p[i];
    } else {
        for (int64_t i = 0; i < n; i++)
            kn_tensor_set_f64(t, i, v->p[i]);
    }
    cpu_red_f32_release(v);
}
