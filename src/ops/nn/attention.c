/* Attention (opsets 23, 24) and RotaryEmbedding (opset 23): shape inference. */
#include "ops/infer_util.h"

/* Heads and sizes of Q, K and V after viewing 3-D inputs as [B, heads, S, head_size]. */
typedef struct attn_dims {
    int64_t b, hq, hkv, sq, skv, d, dv;
} attn_dims;

static kiln_status attention_dims(const kn_infer_ctx *c, attn_dims *a) {
    const kn_node *n = c->node;
    const kn_shape *q = &c->in[0].shape, *k = &c->in[1].shape, *v = &c->in[2].shape;
    if (q->rank != k->rank || q->rank != v->rank || (q->rank != 3 && q->rank != 4))
        return kn_error(KILN_ERR_SHAPE, "inputs Q, K and V must all be 3-D or all be 4-D");
    a->b = q->d[0];
    if (k->d[0] != a->b || v->d[0] != a->b)
        return kn_error(KILN_ERR_SHAPE, "inputs Q, K and V must have one batch size");
    if (q->rank == 3) {
        a->hq = kn_attr_int(n, "q_num_heads", 0);
        a->hkv = kn_attr_int(n, "kv_num_heads", 0);
        if (a->hq <= 0 || a->hkv <= 0)
            return kn_error(KILN_ERR_MODEL, "3-D inputs need attributes 'q_num_heads' and "
                                            "'kv_num_heads' > 0");
        if (q->d[2] % a->hq != 0 || k->d[2] % a->hkv != 0 || v->d[2] % a->hkv != 0)
            return kn_error(KILN_ERR_SHAPE,
                            "hidden sizes of Q (%lld), K (%lld), V (%lld) must "
                            "divide by their head counts",
                            (long long)q->d[2], (long long)k->d[2], (long long)v->d[2]);
        a->sq = q->d[1];
        a->skv = k->d[1];
        a->d = q->d[2] / a->hq;
        if (k->d[2] / a->hkv != a->d)
            return kn_error(KILN_ERR_SHAPE, "K's head size must equal Q's (%lld)", (long long)a->d);
        a->dv = v->d[2] / a->hkv;
        if (v->d[1] != a->skv)
            return kn_error(KILN_ERR_SHAPE, "inputs K and V must have one sequence length");
    } else {
        a->hq = q->d[1];
        a->hkv = k->d[1];
        a->sq = q->d[2];
        a->skv = k->d[2];
        a->d = q->d[3];
        a->dv = v->d[3];
        if (v->d[1] != a->hkv || v->d[2] != a->skv)
            return kn_error(KILN_ERR_SHAPE, "inputs K and V must have the same heads and "
                                            "sequence length");
        if (k->d[3] != a->d)
            return kn_error(KILN_ERR_SHAPE, "K's head size (%lld) must equal Q's (%lld)",
                            (long long)k->d[3], (long long)a->d);
    }
    if (a->hkv <= 0 || a->hq % a->hkv != 0)
        return kn_error(KILN_ERR_SHAPE,
                        "query heads (%lld) must be a multiple of key/value "
                        "heads (%lld)",
                        (long long)a->hq, (long long)a->hkv);
    return KILN_OK;
}

static kiln_status check_past(const kn_infer_ctx *c, const attn_dims *a, int64_t *past) {
    bool pk = kn_has_input(c, 4), pv = kn_has_input(c, 5);
    *past = 0;
    if (pk != pv)
        return kn_error(KILN_ERR_MODEL, "inputs past_key and past_value go together");
    if (!pk)
        return KILN_OK;
    const kn_shape *k = &c->in[4].shape, *v = &c->in[5].shape;
    if (k->rank != 4 || v->rank != 4 || k->d[0] != a->b || v->d[0] != a->b || k->d[1] != a->hkv ||
        v->d[1] != a->hkv || k->d[2] != v->d[2] || k->d[3] != a->d || v->d[3] != a->dv)
        return kn_error(KILN_ERR_SHAPE,
                        "inputs past_key/past_value must be [%lld, %lld, P, %lld] and "
                        "[%lld, %lld, P, %lld]",
                        (long long)a->b, (long long)a->hkv, (long long)a->d, (long long)a->b,
                        (long long)a->hkv, (long long)a->dv);
    if (c->in[4].dtype != c->in[1].dtype || c->in[5].dtype != c->in[2].dtype)
        return kn_error(KILN_ERR_DTYPE, "past_key/past_value must have the dtypes of K/V");
    *past = k->d[2];
    return KILN_OK;
}

/* The mask broadcasts against [B, Hq, Sq, T]; its last dim may be shorter than T (the rest
 * counts as masked out). */
static kiln_status check_mask(const kn_tensor *m, const attn_dims *a, int64_t total) {
    if (m->dtype != KILN_DTYPE_BOOL && !kn_infer_is_float(m->dtype))
        return kn_error(KILN_ERR_DTYPE, "input attn_mask must be bool or float, got %s",
                        kn_dtype_name(m->dtype));
    if (m->shape.rank < 1 || m->shape.rank > 4)
        return kn_error(KILN_ERR_SHAPE, "input attn_mask must have rank 1 to 4, got %d",
                        m->shape.rank);
    int64_t full[4] = {a->b, a->hq, a->sq, total};
    for (int i = 0; i < m->shape.rank; i++) {
        int64_t d = m->shape.d[m->shape.rank - 1 - i], want = full[3 - i];
        bool ok = i == 0 ? d <= want : (d == want || d == 1);
        if (!ok)
            return kn_error(KILN_ERR_SHAPE,
                            "input attn_mask dim %d (%lld) does not broadcast to %lld",
                            m->shape.rank - 1 - i, (long long)d, (long long)want);
    }
    return KILN_OK;
}

kiln_status kn_infer_attention(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need(c, 3, c->node->opset >= 24 ? 7 : 6, 4));
    KN_TRY(kn_infer_need_output0(c));
    const kn_tensor *q = &c->in[0];
    for (int i = 0; i < 3; i++)
        if (!kn_infer_is_float(c->in[i].dtype))
            return kn_error(KILN_ERR_DTYPE, "input %d must be a float tensor, got %s", i,
                            kn_dtype_name(c->in[i].dtype));
    if (c->in[1].dtype != q->dtype)
        return kn_error(KILN_ERR_DTYPE, "inputs Q and K must have one dtype");
    attn_dims a;
    KN_TRY(attention_dims(c, &a));
    int64_t past;
    KN_TRY(check_past(c, &a, &past));
    int64_t total = past + a.skv;
    if (kn_has_input(c, 3))
        KN_TRY(check_mask(&c->in[3], &a, total));
    if (kn_has_input(c, 6)) {
        const kn_tensor *np = &c->in[6];
        if (np->dtype != KILN_DTYPE_INT64 || np->shape.rank != 1 || np->shape.d[0] != a.b)
            return kn_error(KILN_ERR_SHAPE, "input nonpad_kv_seqlen must be int64 [%lld]",
                            (long long)a.b);
        if (past > 0)
            return kn_error(KILN_ERR_MODEL,
                            "input nonpad_kv_seqlen cannot be used with past_key/past_value");
    }
    int64_t mode = kn_attr_int(c->node, "qk_matmul_output_mode", 0);
    if (mode < 0 || mode > 3)
        return kn_error(KILN_ERR_MODEL, "attribute 'qk_matmul_output_mode' must be 0 to 3");
    if (kn_attr_float(c->node, "softcap", 0.0f) < 0.0f)
        return kn_error(KILN_ERR_MODEL, "attribute 'softcap' must be >= 0");
    if (kn_attr_int(c->node, "left_window_size", -1) < -1 ||
        kn_attr_int(c->node, "right_window_size", -1) < -1)
        return kn_error(KILN_ERR_MODEL,
                        "attributes 'left_window_size' and 'right_window_size' must be -1 "
                        "(unbounded) or >= 0");
    kn_tensor *y = &c->out[0];
    y->dtype = q->dtype;
    if (q->shape.rank == 3)
        y->shape = (kn_shape){.rank = 3, .d = {a.b, a.sq, a.hq * a.dv}};
    else
        y->shape = (kn_shape){.rank = 4, .d = {a.b, a.hq, a.sq, a.dv}};
    if (c->n_out > 1) {
        c->out[1].dtype = c->in[1].dtype;
        c->out[1].shape = (kn_shape){.rank = 4, .d = {a.b, a.hkv, total, a.d}};
    }
    if (c->n_out > 2) {
        c->out[2].dtype = c->in[2].dtype;
        c->out[2].shape = (kn_shape){.rank = 4, .d = {a.b, a.hkv, total, a.dv}};
    }
    if (c->n_out > 3) {
        c->out[3].dtype = q->dtype;
        c->out[3].shape = (kn_shape){.rank = 4, .d = {a.b, a.hq, a.sq, total}};
    }
    return KILN_OK;
}

kiln_status kn_infer_rotary_embedding(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need(c, 3, 4, 1));
    const kn_tensor *x = &c->in[0], *cs = &c->in[1], *sn = &c->in[2];
    if (!kn_infer_is_float(x->dtype) || cs->dtype != x->dtype || sn->dtype != x->dtype)
        return kn_error(KILN_ERR_DTYPE, "input, cos_cache and sin_cache must be float tensors "
                                        "of one dtype");
    int64_t b, s, d, heads = kn_attr_int(c->node, "num_heads", 0);
    if (x->shape.rank == 4) {
        b = x->shape.d[0];
        s = x->shape.d[2];
        d = x->shape.d[3];
    } else if (x->shape.rank == 3) {
        if (heads <= 0 || x->shape.d[2] % heads != 0)
            return kn_error(KILN_ERR_MODEL,
                            "3-D input needs attribute 'num_heads' > 0 dividing "
                            "its hidden size %lld",
                            (long long)x->shape.d[2]);
        b = x->shape.d[0];
        s = x->shape.d[1];
        d = x->shape.d[2] / heads;
    } else {
        return kn_error(KILN_ERR_SHAPE, "input must be 3-D or 4-D, got rank %d", x->shape.rank);
    }
    int64_t rd = kn_attr_int(c->node, "rotary_embedding_dim", 0);
    if (rd == 0)
        rd = d;
    if (rd < 0 || rd > d || rd % 2 != 0)
        return kn_error(KILN_ERR_MODEL,
                        "rotary_embedding_dim %lld must be even and within the "
                        "head size %lld",
                        (long long)rd, (long long)d);
    if (!kn_shape_equal(&cs->shape, &sn->shape))
        return kn_error(KILN_ERR_SHAPE, "cos_cache and sin_cache must have one shape");
    if (kn_has_input(c, 3)) {
        const kn_tensor *p = &c->in[3];
        if (p->dtype != KILN_DTYPE_INT64 || p->shape.rank != 2 || p->shape.d[0] != b ||
            p->shape.d[1] != s)
            return kn_error(KILN_ERR_SHAPE, "input position_ids must be int64 [%lld, %lld]",
                            (long long)b, (long long)s);
        if (cs->shape.rank != 2 || cs->shape.d[1] < rd / 2)
            return kn_error(KILN_ERR_SHAPE,
                            "with position_ids, the caches must be "
                            "[max_position, >= %lld]",
                            (long long)(rd / 2));
    } else if (cs->shape.rank != 3 || cs->shape.d[0] != b || cs->shape.d[1] != s ||
               cs->shape.d[2] < rd / 2) {
        return kn_error(KILN_ERR_SHAPE,
                        "without position_ids, the caches must be "
                        "[%lld, %lld, >= %lld]",
                        (long long)b, (long long)s, (long long)(rd / 2));
    }
    c->out[0].dtype = x->dtype;
    c->out[0].shape = x->shape;
    return KILN_OK;
}
