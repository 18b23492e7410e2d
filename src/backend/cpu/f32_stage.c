/* Float32 staging of any numeric tensor for kernels that compute in float32. */
#include "backend/cpu/f32_stage.h"
#include "core/alloc.h"

#include <stdint.h>
#include <string.h>

kiln_status kn_cpu_f32_in(const kn_tensor *t, kn_cpu_f32 *v) {
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
    /* The common float types convert directly; the rest go through the generic accessor. */
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

kiln_status kn_cpu_f32_out(kn_tensor *t, kn_cpu_f32 *v) {
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

void kn_cpu_f32_commit(kn_tensor *t, kn_cpu_f32 *v) {
    if (v->owned) {
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
    }
    kn_cpu_f32_release(v);
}

void kn_cpu_f32_release(kn_cpu_f32 *v) {
    if (v->owned)
        kn_free(v->p);
    v->p = NULL;
    v->owned = false;
}

kiln_status kn_cpu_f32_binary(kn_kernel_ctx *k, kn_cpu_f32 *a, kn_cpu_f32 *b, kn_cpu_f32 *y) {
    *a = *b = *y = (kn_cpu_f32){0};
    kiln_status rc = kn_cpu_f32_in(&k->in[0], a);
    if (rc == KILN_OK)
        rc = kn_cpu_f32_in(&k->in[1], b);
    if (rc == KILN_OK)
        rc = kn_cpu_f32_out(&k->out[0], y);
    if (rc != KILN_OK) {
        kn_cpu_f32_release(a);
        kn_cpu_f32_release(b);
        kn_cpu_f32_release(y);
    }
    return rc;
}

bool kn_cpu_has_out(const kn_kernel_ctx *k, int i) {
    return i < k->n_out && k->node->out[i] >= 0 && k->out[i].data != NULL;
}

bool kn_cpu_weights_widened(const kn_node *n, const kn_tensor *w) {
    if (w->dtype == KILN_DTYPE_FLOAT16)
        return true;
    const char *c = kn_attr_string(n, "kiln_compute", NULL);
    return w->dtype == KILN_DTYPE_BFLOAT16 && c != NULL && strcmp(c, "fp32") == 0;
}
