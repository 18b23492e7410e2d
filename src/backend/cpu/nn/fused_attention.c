/* kiln.Attention on the host (its contract: src/ops/kiln/fused_attention.c), float32, one query
 * row at a time. The fusion pass makes the op for device backends only (passes.h); this kernel
 * runs a model or plan that carries the op on the host and is the reference the op's tests
 * check the contract with. A row whose scores are all -inf gives zeros. */
#include "backend/cpu/cpu.h"
#include "core/alloc.h"
#include "ops/op.h"

#include <math.h>
#include <string.h>

/* Strides of a [B, S, H, D] tensor as (batch, head, row). */
static void bshd_strides(const kn_shape *s, int64_t st[3]) {
    st[2] = s->d[2] * s->d[3];
    st[1] = s->d[3];
    st[0] = s->d[1] * st[2];
}

kiln_status kn_cpu_kiln_attention(kn_kernel_ctx *k) {
    if (k->out[0].dtype != KILN_DTYPE_FLOAT32)
        return kn_error(KILN_ERR_UNSUPPORTED, "kiln.Attention on the host takes float32, got %s",
                        kn_dtype_name(k->out[0].dtype));
    int64_t q_st[3], k_st[3], v_st[3], o_st[3], m_st[4] = {0, 0, 0, 0};
    const float *q = k->in[0].data, *kk, *v, *mask = NULL;
    const kn_shape *os = &k->out[0].shape;
    int64_t nb = os->d[0], sq = os->d[1], heads = os->d[2], d, sk, dv = os->d[3];
    if (kn_attr_int(k->node, "heads", 0) > 0) { /* packed [B, S, 3 H D]: q | k | v a row */
        d = dv;
        sk = sq;
        int64_t row = 3 * heads * d;
        q_st[0] = k_st[0] = v_st[0] = sq * row;
        q_st[1] = k_st[1] = v_st[1] = d;
        q_st[2] = k_st[2] = v_st[2] = row;
        kk = q + heads * d;
        v = q + 2 * heads * d;
    } else {
        const kn_shape *qs = &k->in[0].shape, *ks = &k->in[1].shape, *vs = &k->in[2].shape;
        d = qs->d[3];
        sk = ks->d[1];
        bshd_strides(qs, q_st);
        bshd_strides(ks, k_st);
        bshd_strides(vs, v_st);
        kk = k->in[1].data;
        v = k->in[2].data;
    }
    bshd_strides(os, o_st);
    if (k->n_in > 3 && k->in[3].dtype != 0) {
        const kn_shape *ms = &k->in[3].shape;
        mask = k->in[3].data;
        int64_t run = 1;
        for (int i = 0; i < ms->rank && i < 4; i++) {
            int64_t dim = ms->d[ms->rank - 1 - i];
            m_st[3 - i] = dim == 1 ? 0 : run;
            run *= dim;
        }
    }
    float scale = kn_attr_float(k->node, "scale", 1.0f), *o = k->out[0].data;
    float *p = kn_malloc((size_t)(sk > 0 ? sk : 1) * sizeof(float));
    if (p == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for attention scores");
    for (int64_t b = 0; b < nb; b++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t i = 0; i < sq; i++) {
                const float *qr = q + b * q_st[0] + h * q_st[1] + i * q_st[2];
                float m = -INFINITY, sum = 0.0f;
                for (int64_t j = 0; j < sk; j++) {
                    const float *kr = kk + b * k_st[0] + h * k_st[1] + j * k_st[2];
                    float s = 0.0f;
                    for (int64_t c = 0; c < d; c++)
                        s += qr[c] * kr[c];
                    s *= scale;
                    if (mask != NULL)
                        s += mask[b * m_st[0] + h * m_st[1] + i * m_st[2] + j * m_st[3]];
                    p[j] = s;
                    m = fmaxf(m, s);
                }
                float *orow = o + b * o_st[0] + h * o_st[1] + i * o_st[2];
                if (m == -INFINITY) { /* every key masked: NaN, as the unfused Softmax gives */
                    for (int64_t c = 0; c < dv; c++)
                        orow[c] = NAN;
                    continue;
                }
                for (int64_t j = 0; j < sk; j++) {
                    p[j] = expf(p[j] - m);
                    sum += p[j];
                }
                float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
                memset(orow, 0, (size_t)dv * sizeof(float));
                for (int64_t j = 0; j < sk; j++) {
                    const float *vr = v + b * v_st[0] + h * v_st[1] + j * v_st[2];
                    float w = p[j] * inv;
                    for (int64_t c = 0; c < dv; c++)
                        orow[c] += w * vr[c];
                }
            }
    kn_free(p);
    return KILN_OK;
}
