/* NonMaxSuppression: the selection is shared with inference (ops/object_detection/nms.h). */
#include "backend/cpu/cpu.h"
#include "core/alloc.h"
#include "ops/object_detection/nms.h"

#include <string.h>

kiln_status kn_cpu_nms(kn_kernel_ctx *k) {
    int64_t *sel, count;
    kiln_status rc = kn_nms_select(k->node, k->n_in, k->in, &sel, &count);
    if (rc != KILN_OK)
        return rc == KN_NEED_DATA ? kn_error(KILN_ERR_INTERNAL, "NMS inputs unknown") : rc;
    if (count != k->out[0].shape.d[0]) {
        kn_free(sel);
        return kn_error(KILN_ERR_INTERNAL, "NMS selected %lld boxes, output holds %lld",
                        (long long)count, (long long)k->out[0].shape.d[0]);
    }
    if (count > 0)
        memcpy(k->out[0].data, sel, sizeof(int64_t) * (size_t)(3 * count));
    kn_free(sel);
    return KILN_OK;
}
