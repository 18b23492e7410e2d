/* OptionalHasElement and OptionalGetElement on plain tensors. */
#include "backend/cpu/f32_stage.h"

#include <string.h>

kiln_status kn_cpu_optional_has_element(kn_kernel_ctx *k) {
    *(uint8_t *)k->out[0].data = k->n_in > 0 && k->in[0].dtype != 0;
    return KILN_OK;
}

kiln_status kn_cpu_optional_get_element(kn_kernel_ctx *k) {
    size_t nb = kn_tensor_nbytes(&k->in[0]);
    if (nb > 0 && k->out[0].data != k->in[0].data)
        memmove(k->out[0].data, k->in[0].data, nb);
    return KILN_OK;
}
