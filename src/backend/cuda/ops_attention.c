/* kiln.Attention on the GPU (src/ops/kiln/fused_attention.c has its contract): one kernel,
 * kernels_attention.cu. q, k, v and the output are [B, S, H, D] tensors read and written in
 * place through strides (or q, k and v the three parts of each row of one packed [B, S, 3 H D]
 * tensor: attribute heads); the mask is read through broadcast strides. */
#include "backend/cuda/cuda_internal.h"

#include <string.h>

/* Strides of a [B, S, H, D] tensor as (batch, head, row). */
static void bshd_strides(const kn_shape *s, int64_t st[3]) {
    st[2] = s->d[2] * s->d[3];
    st[1] = s->d[3];
    st[0] = s->d[1] * st[2];
}

/* Strides of the mask as (batch, head, query, key), 0 along broadcast dims. */
static void mask_strides(const kn_shape *m, int64_t st[4]) {
    int64_t run = 1;
    for (int i = 0; i < 4; i++)
        st[i] = 0;
    for (int i = 0; i < m->rank && i < 4; i++) {
        int64_t d = m->d[m->rank - 1 - i];
        st[3 - i] = d == 1 ? 0 : run;
        run *= d;
    }
}

static kiln_status run_attention(kn_kernel_ctx *k) {
    const kn_shape *os = &k->out[0].shape;
    kc_attention a;
    memset(&a, 0, sizeof a);
    a.batch = os->d[0];
    a.sq = os->d[1];
    a.heads = os->d[2];
    a.dv = os->d[3];
    const char *q = k->in[0].data, *kp, *vp;
    if (kc_attr_int(k->node, "heads", 0) > 0) { /* packed [B, S, 3 H D]: q | k | v a row */
        int64_t row = 3 * a.heads * a.dv;
        size_t es = kn_dtype_size(k->out[0].dtype);
        a.d = a.dv;
        a.sk = a.sq;
        a.q_stride[0] = a.k_stride[0] = a.v_stride[0] = a.sq * row;
        a.q_stride[1] = a.k_stride[1] = a.v_stride[1] = a.d;
        a.q_stride[2] = a.k_stride[2] = a.v_stride[2] = row;
        kp = q + (size_t)(a.heads * a.d) * es;
        vp = q + (size_t)(2 * a.heads * a.d) * es;
    } else {
        const kn_shape *qs = &k->in[0].shape, *ks = &k->in[1].shape;
        a.d = qs->d[3];
        a.sk = ks->d[1];
        bshd_strides(qs, a.q_stride);
        bshd_strides(ks, a.k_stride);
        bshd_strides(&k->in[2].shape, a.v_stride);
        kp = k->in[1].data;
        vp = k->in[2].data;
    }
    bshd_strides(os, a.o_stride);
    a.scale = kc_attr_float(k->node, "scale", 1.0f);
    const void *mask = NULL;
    if (k->n_in > 3 && k->in[3].dtype != 0) {
        mask = k->in[3].data;
        mask_strides(&k->in[3].shape, a.m_stride);
    }
    return KC_LAUNCH(
        kc_attention_run(k->stream->s, k->out[0].dtype, &a, q, kp, vp, mask, k->out[0].data),
        "Attention");
}

static bool sup_attention(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                          const kn_tensor *out, kn_caps *caps) {
    if (!kc_all_float(in, n_in, caps, "input") || !kc_all_float(out, n_out, caps, "output") ||
        !kc_one_type(in, n_in, out[0].dtype, caps))
        return false;
    if (out[0].shape.rank != 4 || out[0].shape.d[3] > 256 ||
        (kc_attr_int(n, "heads", 0) == 0 && in[0].shape.d[3] > 256))
        return kc_reason(caps, "cuda: Attention with heads larger than 256");
    return true;
}

const kc_op kc_ops_attention[] = {
    {{"kiln", "Attention", run_attention, NULL, NULL}, sup_attention},
    {{NULL, NULL, NULL, NULL, NULL}, NULL},
};
