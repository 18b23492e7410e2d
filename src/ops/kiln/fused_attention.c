/* kiln.Attention: softmax(Q K^T * scale + mask) V over heads, the fused form of an exporter's
 * MatMul-Scale-Mask-Softmax-MatMul (passes.h, kn_pass_fuse_attention). Inputs in the layout
 * the exporter's head split makes, before its transposes: q [B, Sq, H, D], k [B, Sk, H, D],
 * v [B, Sk, H, Dv], and an optional mask broadcast to [B, H, Sq, Sk]; output [B, Sq, H, Dv],
 * the layout its transpose back restores. Attribute scale (float). */
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

kiln_status kn_infer_kiln_attention(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need_exact(c, 3, 4, 1));
    const kn_tensor *q = &c->in[0], *k = &c->in[1], *v = &c->in[2];
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
