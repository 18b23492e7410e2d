/* Swish. */
#include "backend/cpu/f32_stage.h"

#include <math.h>

kiln_status kn_cpu_swish(kn_kernel_ctx *k) {
    float alpha = kn_attr_float(k->node, "alpha", 1.0f);
    kn_cpu_f32 x = {0}, y = {0};
    kiln_status rc = kn_cpu_f32_in(&k->in[0], &x);
    if (rc == KILN_OK)
        rc = kn_cpu_f32_out(&k->out[0], &y);
    if (rc == KILN_OK) {
        int64_t n = kn_tensor_numel(&k->in[0]);
        for (int64_t i = 0; i < n; i++)
            y.p[i] = x.p[i] / (1.0f + expf(-alpha * x.p[i]));
        kn_cpu_f32_commit(&k->out[0], &y);
    }
    kn_cpu_f32_release(&y);
    kn_cpu_f32_release(&x);
    return rc;
}
