/* kiln.Attention: softmax(Q K^T * scale + mask) V over heads, the fused form of an exporter's
 * MatMul-Scale-Mask-Softmax-MatMul (passes.h, kn_pass_fuse_attention). Inputs in the layout
 * the exporter's head split makes, before its transposes: q [B, Sq, H, D], k [B, Sk, H, D],
 * v [B, Sk, H, Dv], and an optional mask broadcast to [B, H, Sq, Sk]; output [B, Sq, H, Dv],
 * the layout its transpose back restores. Attribute scale (float).
 *
 * Packed form (attribute heads = H > 0): input 0 is one [B, S, 3 H D] tensor holding q, k and v
 * side by side in each row (the product of the concatenated projection weights: passes.h,
 * kn_pass_fuse_attention), inputs 1 and 2 are omitted; q, k and v are read from it through strides.
 */
#include "ops/infer_util.h"

#include <string.h>

/* Whether mask (rank <= 4) broadcasts to [b, h, sq, sk]. */
static bool mask_fits(const kn_shape *m, const int64_t want[4]) {
    if (m->rank > 4)
        return false;
    for (int i = 0; i < m->rank; i++) {
        int64_t d = m->d[m->rank - 1 - i], w = want[3 - i];
        if (d != 1 && d != w)
            return false;
    }
    return true;
}

/* The packed form's q, k and v shapes [B, S, H, D] from qkv [B, S, 3 H D]. */
static kiln_status packed_shapes(kn_infer_ctx *c, int64_t heads, kn_tensor t[3]) {
    const kn_tensor *x = &c->in[0];
    if (kn_has_input(c, 1) || kn_has_input(c, 2))
        return kn_error(KILN_ERR_MODEL, "a packed attention (heads > 0) takes no k and v inputs");
    if (x->shape.rank != 3 || x->shape.d[2] % (3 * heads) != 0)
        return kn_error(KILN_ERR_SHAPE, "a packed attention's input must be [batch, seq, 3 x "
                                        "heads x head size]");
    for (int i = 0; i < 3; i++) {
        t[i].dtype = x->dtype;
        t[i].data = NULL;
        t[i].shape.rank = 4;
        t[i].shape.d[0] = x->shape.d[0];
        t[i].shape.d[1] = x->shape.d[1];
        t[i].shape.d[2] = heads;
        t[i].shape.d[3] = x->shape.d[2] / (3 * heads);
    }
    return KILN_OK;
}

kiln_status kn_infer_kiln_attention(kn_infer_ctx *c) {
    int64_t heads = kn_attr_int(c->node, "heads", 0);
    KN_TRY(kn_infer_need_exact(c, heads > 0 ? 1 : 3, 4, 1));
    kn_tensor packed[3];
    if (heads < 0)
        return kn_error(KILN_ERR_MODEL, "heads must be positive");
    if (heads > 0)
        KN_TRY(packed_shapes(c, heads, packed));
    const kn_tensor *q = heads > 0 ? &packed[0] : &c->in[0];
    const kn_tensor *k = heads > 0 ? &packed[1] : &c->in[1];
    const kn_tensor *v = heads > 0 ? &packed[2] : &c->in[2];
    if (!kn_infer_is_float(q->dtype) || k->dtype != q->dtype || v->dtype != q->dtype)
        return kn_error(KILN_ERR_DTYPE, "q, k and v must share one float type");
    if (q->shape.rank != 4 || k->shape.rank != 4 || v->shape.rank != 4)
        return kn_error(KILN_ERR_SHAPE, "q, k and v must be [batch, seq, heads, head size]");
    const int64_t *qd = q->shape.d, *kd = k->shape.d, *vd = v->shape.d;
    if (kd[0] != qd[0] || vd[0] != qd[0] || kd[2] != qd[2] || vd[2] != qd[2] || kd[3] != qd[3] ||
        vd[1] != kd[1])
        return kn_error(KILN_ERR_SHAPE, "q, k and v disagree in batch, heads or sizes");
    if (kn_has_input(c, 3)) {
        const kn_tensor *m = &c->in[3];
        int64_t want[4] = {qd[0], qd[2], qd[1], kd[1]};
        if (m->dtype != q->dtype)
            return kn_error(KILN_ERR_DTYPE, "the mask must be of q's type");
        if (!mask_fits(&m->shape, want))
            return kn_error(KILN_ERR_SHAPE, "the mask does not broadcast to [batch, heads, "
                                            "queries, keys]");
    }
    c->out[0].dtype = q->dtype;
    c->out[0].shape = q->shape;
    c->out[0].shape.d[3] = vd[3];
    return KILN_OK;
}
