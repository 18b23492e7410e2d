/* The tensor family: shape manipulation, data movement and indexing. `since` is the oldest
 * version whose semantics the infer functions implement; later versions are decided by
 * node->opset inside them. */
#include "ops/tensor_ops.h"

#define VIEW KN_OP_VIEW
#define SHAPE KN_OP_SHAPE_ONLY

const kn_op_schema kn_ops_tensor[] = {
    {"", "Reshape", 5, VIEW, tensor_infer_reshape},
    {"", "Flatten", 1, VIEW, tensor_infer_flatten},
    {"", "Squeeze", 1, VIEW, tensor_infer_squeeze},
    {"", "Unsqueeze", 1, VIEW, tensor_infer_unsqueeze},
    {"", "Identity", 1, VIEW, tensor_infer_identity},
    {"", "Dropout", 7, 0, tensor_infer_dropout},
    {"", "Shape", 1, SHAPE, tensor_infer_shape},
    {"", "Size", 1, SHAPE, tensor_infer_size},
    {"", "Expand", 8, 0, tensor_infer_expand},
    {"", "Tile", 6, 0, tensor_infer_tile},
    {"", "ConstantOfShape", 9, 0, tensor_infer_constant_of_shape},
    {"", "Range", 11, 0, tensor_infer_range},
    {"", "EyeLike", 9, 0, tensor_infer_eye_like},
    {"", "Trilu", 14, 0, tensor_infer_trilu},
    {"", "CumSum", 11, 0, tensor_infer_cumsum},
    {"", "OneHot", 9, 0, tensor_infer_one_hot},
    {"", "Concat", 4, 0, tensor_infer_concat},
    {"", "Split", 2, 0, tensor_infer_split},
    {"", "Slice", 1, 0, tensor_infer_slice},
    {"", "Pad", 2, 0, tensor_infer_pad},
    {"", "CenterCropPad", 18, 0, tensor_infer_center_crop_pad},
    {"", "Transpose", 1, 0, tensor_infer_transpose},
    {"", "DepthToSpace", 1, 0, tensor_infer_depth_to_space},
    {"", "SpaceToDepth", 1, 0, tensor_infer_space_to_depth},
    {"", "Gather", 1, 0, tensor_infer_gather},
    {"", "GatherElements", 11, 0, tensor_infer_gather_elements},
    {"", "GatherND", 11, 0, tensor_infer_gather_nd},
    {"", "Scatter", 9, 0, tensor_infer_scatter_elements},
    {"", "ScatterElements", 11, 0, tensor_infer_scatter_elements},
    {"", "ScatterND", 11, 0, tensor_infer_scatter_nd},
    {"", "TensorScatter", 24, 0, tensor_infer_tensor_scatter},
    {"", "NonZero", 9, 0, tensor_infer_non_zero},
    {"", "Compress", 9, 0, tensor_infer_compress},
    {"", "Unique", 11, 0, tensor_infer_unique},
    {"", "ReverseSequence", 10, 0, tensor_infer_reverse_sequence},
    {0},
};
