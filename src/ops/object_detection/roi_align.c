/* RoiAlign: shape inference. */
#include "ops/infer_util.h"

#include <string.h>

kiln_status kn_infer_roi_align(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need_exact(c, 3, 3, 1));
    const kn_node *n = c->node;
    const kn_tensor *x = &c->in[0], *rois = &c->in[1], *bi = &c->in[2];
    if (!kn_infer_is_float(x->dtype) || rois->dtype != x->dtype)
        return kn_error(KILN_ERR_DTYPE, "inputs X and rois must be float tensors of one dtype");
    if (bi->dtype != KILN_DTYPE_INT64)
        return kn_error(KILN_ERR_DTYPE, "input batch_indices must be int64");
    if (x->shape.rank != 4)
        return kn_error(KILN_ERR_SHAPE, "input X must have rank 4, got %d", x->shape.rank);
    if (rois->shape.rank != 2 || rois->shape.d[1] != 4)
        return kn_error(KILN_ERR_SHAPE, "input rois must have shape [num_rois, 4]");
    if (bi->shape.rank != 1 || bi->shape.d[0] != rois->shape.d[0])
        return kn_error(KILN_ERR_SHAPE, "input batch_indices must have shape [%lld]",
                        (long long)rois->shape.d[0]);
    const char *mode = kn_attr_string(n, "mode", "avg");
    if (strcmp(mode, "avg") != 0 && strcmp(mode, "max") != 0)
        return kn_error(KILN_ERR_MODEL, "attribute 'mode' is '%s'; expected avg or max", mode);
    if (n->opset >= 16) {
        const char *ct = kn_attr_string(n, "coordinate_transformation_mode", "half_pixel");
        if (strcmp(ct, "half_pixel") != 0 && strcmp(ct, "output_half_pixel") != 0)
            return kn_error(KILN_ERR_MODEL, "attribute 'coordinate_transformation_mode' is '%s'",
                            ct);
    }
    int64_t oh = kn_attr_int(n, "output_height", 1), ow = kn_attr_int(n, "output_width", 1);
    if (oh < 1 || ow < 1 || kn_attr_int(n, "sampling_ratio", 0) < 0)
        return kn_error(KILN_ERR_MODEL, "output_height and output_width must be >= 1 and "
                                        "sampling_ratio >= 0");
    if (bi->data != NULL)
        for (int64_t i = 0; i < bi->shape.d[0]; i++) {
            int64_t b = ((const int64_t *)bi->data)[i];
            if (b < 0 || b >= x->shape.d[0])
                return kn_error(KILN_ERR_SHAPE, "batch_indices[%lld] = %lld is out of range",
                                (long long)i, (long long)b);
        }
    c->out[0].dtype = x->dtype;
    c->out[0].shape = (kn_shape){4, {rois->shape.d[0], x->shape.d[1], oh, ow}};
    return KILN_OK;
}
