/* GridSample: shape inference. */
#include "ops/infer_util.h"

#include <string.h>

kiln_status kn_infer_grid_sample(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need_exact(c, 2, 2, 1));
    const kn_node *n = c->node;
    const kn_tensor *x = &c->in[0], *g = &c->in[1];
    if (!kn_infer_is_float(x->dtype) || !kn_infer_is_float(g->dtype))
        return kn_error(KILN_ERR_DTYPE, "inputs X and grid must be float tensors");
    int32_t r = x->shape.rank;
    if (r < 3 || (n->opset < 20 && r != 4))
        return kn_error(KILN_ERR_SHAPE, "input X must have rank %s, got %d",
                        n->opset < 20 ? "4" : ">= 3", r);
    if (g->shape.rank != r || g->shape.d[0] != x->shape.d[0] || g->shape.d[r - 1] != r - 2)
        return kn_error(KILN_ERR_SHAPE, "input grid must have shape [N, ..., %d] of rank %d", r - 2,
                        r);
    const char *mode = kn_attr_string(n, "mode", n->opset < 20 ? "bilinear" : "linear");
    static const char *const modes16[] = {"bilinear", "nearest", "bicubic"};
    static const char *const modes20[] = {"linear", "nearest", "cubic"};
    const char *const *m = n->opset < 20 ? modes16 : modes20;
    if (strcmp(mode, m[0]) != 0 && strcmp(mode, m[1]) != 0 && strcmp(mode, m[2]) != 0)
        return kn_error(KILN_ERR_MODEL, "attribute 'mode' is '%s'", mode);
    const char *pad = kn_attr_string(n, "padding_mode", "zeros");
    if (strcmp(pad, "zeros") != 0 && strcmp(pad, "border") != 0 && strcmp(pad, "reflection") != 0)
        return kn_error(KILN_ERR_MODEL, "attribute 'padding_mode' is '%s'", pad);
    c->out[0].dtype = x->dtype;
    c->out[0].shape = x->shape;
    for (int i = 2; i < r; i++)
        c->out[0].shape.d[i] = g->shape.d[i - 1];
    return KILN_OK;
}
