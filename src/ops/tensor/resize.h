/* Resize and Upsample parameters, parsed once for inference and the kernels, so the shape the
 * runtime allocates and the kernel that fills it never disagree. */
#ifndef KN_OPS_RESIZE_H
#define KN_OPS_RESIZE_H

#include "ops/op.h"

enum { KN_RESIZE_NEAREST, KN_RESIZE_LINEAR, KN_RESIZE_CUBIC };
enum {
    KN_COORD_HALF_PIXEL,
    KN_COORD_HALF_PIXEL_SYMMETRIC,
    KN_COORD_PYTORCH_HALF_PIXEL,
    KN_COORD_ALIGN_CORNERS,
    KN_COORD_ASYMMETRIC,
    KN_COORD_TF_HALF_PIXEL_FOR_NN,
    KN_COORD_TF_CROP_AND_RESIZE,
};
enum {
    KN_NEAREST_ROUND_PREFER_FLOOR,
    KN_NEAREST_ROUND_PREFER_CEIL,
    KN_NEAREST_FLOOR,
    KN_NEAREST_CEIL,
    KN_NEAREST_SIMPLE, /* Resize-10 and Upsample: truncate when enlarging, ceil when shrinking */
};

typedef struct kn_resize_params {
    int32_t rank;
    int64_t in[KN_MAX_RANK], out[KN_MAX_RANK];
    double scale[KN_MAX_RANK];
    double roi_start[KN_MAX_RANK], roi_end[KN_MAX_RANK];
    int mode, coord, nearest, exclude_outside, antialias;
    float cubic_a, extrapolation;
} kn_resize_params;

/* Resize (opsets 10-21) and Upsample (7-9). Returns KN_NEED_DATA when scales or sizes are not
 * known yet; roi defaults to the whole input when its data is absent. */
kiln_status kn_resize_params_get(const kn_node *n, int n_in, const kn_tensor *in,
                                 kn_resize_params *p);

#endif
