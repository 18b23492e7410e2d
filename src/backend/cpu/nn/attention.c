/* Attention (opsets 23 to 25) and RotaryEmbedding. Attention runs one query row at a time:
 * scores against every key, softcap, bias (mask, causal, window, padding), softmax, then the
 * weighted sum of values, as the ONNX spec reads since its errata of onnx 1.23 (which apply to
 * opsets 23 and 24 as well): query head h reads key/value head h / (q_heads / kv_heads) (each
 * kv head repeated, as PyTorch's grouped-query attention does; onnx 1.19's reference tiled
 * them), the causal and window bounds sit bottom-right (a query's absolute position is its
 * index plus the keys before its block: the past, or nonpad_kv_seqlen - q_len for an external
 * cache), the softcap applies to the scores before the bias, and a row whose bias masks every
 * key gives zeros (not NaN). */
#include "backend/cpu/f32_stage.h"
#include "core/alloc.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

typedef struct attn_job {
    int64_t b, hq, hkv, sq, t, d, dv;
    int64_t q_sb, q_sh, q_si; /* strides of Q's [b, h, i] rows (3-D or 4-D layout) */
    int64_t y_sb, y_sh, y_si;
    const float *q, *k, *v; /* k, v: [B, Hkv, T, D|Dv] including the past */
    const float *mask;      /* NULL, or float bias broadcast through m_s */
    int64_t m_s[4], m_len;  /* strides over [b, h, i, j]; j >= m_len is masked out */
    const int64_t *nonpad;
    int64_t past;        /* keys of the internal cache, before the current block */
    int64_t left, right; /* sliding-window bounds (opset 25); -1: unbounded */
    float scale, softcap;
    bool causal;
    int mode;
    float *y, *qk;
    atomic_int oom;
} attn_job;

/* The absolute position of batch b's first query: keys before the block. */
static int64_t query_offset(const attn_job *a, int64_t b) {
    return a->nonpad != NULL && a->past == 0 ? a->nonpad[b] - a->sq : a->past;
}

static float row_bias(const attn_job *a, int64_t b, int64_t h, int64_t i, int64_t j, int64_t p) {
    if (a->causal && j > p)
        return -INFINITY;
    if ((a->left >= 0 && p - j > a->left) || (a->right >= 0 && j - p > a->right))
        return -INFINITY;
    if (a->nonpad != NULL && j >= a->nonpad[b])
        return -INFINITY;
    if (a->mask == NULL)
        return 0.0f;
    if (j >= a->m_len)
        return -INFINITY;
    return a->mask[b * a->m_s[0] + h * a->m_s[1] + i * a->m_s[2] + j * a->m_s[3]];
}

static void attn_row(const attn_job *a, int64_t row, float *s) {
    int64_t i = row % a->sq, h = (row / a->sq) % a->hq, b = row / (a->sq * a->hq);
    int64_t kvh = h / (a->hq / a->hkv), t = a->t, p = i + query_offset(a, b);
    const float *q = a->q + b * a->q_sb + h * a->q_sh + i * a->q_si;
    const float *k = a->k + (b * a->hkv + kvh) * t * a->d;
    const float *v = a->v + (b * a->hkv + kvh) * t * a->dv;
    float *qk = a->qk != NULL ? a->qk + row * t : NULL;
    for (int64_t j = 0; j < t; j++) {
        float acc = 0.0f;
        for (int64_t e = 0; e < a->d; e++)
            acc += q[e] * k[j * a->d + e];
        s[j] = acc * a->scale;
    }
    /* mode 0: the scores as the product gives them; 1: after the softcap (the spec's words, and
     * onnxruntime's; onnx 1.23's reference softcaps mode 0 too) */
    if (qk != NULL && a->mode == 0)
        memcpy(qk, s, (size_t)t * sizeof(float));
    if (a->softcap > 0.0f)
        for (int64_t j = 0; j < t; j++)
            s[j] = a->softcap * tanhf(s[j] / a->softcap);
    if (qk != NULL && a->mode == 1)
        memcpy(qk, s, (size_t)t * sizeof(float));
    /* The bias decides which keys a row may see; a row that may see none is zeros. */
    bool any = false;
    for (int64_t j = 0; j < t; j++) {
        float bias = row_bias(a, b, h, i, j, p);
        any |= bias != -INFINITY;
        s[j] += bias;
    }
    if (qk != NULL && a->mode == 2)
        memcpy(qk, s, (size_t)t * sizeof(float));
    float m = -INFINITY;
    for (int64_t j = 0; j < t; j++)
        m = s[j] > m ? s[j] : m;
    float sum = 0.0f;
    for (int64_t j = 0; j < t; j++) {
        s[j] = any ? expf(s[j] - m) : 0.0f;
        sum += s[j];
    }
    for (int64_t j = 0; j < t && any; j++)
        s[j] /= sum;
    if (qk != NULL && a->mode == 3)
        memcpy(qk, s, (size_t)t * sizeof(float));
    float *y = a->y + b * a->y_sb + h * a->y_sh + i * a->y_si;
    for (int64_t e = 0; e < a->dv; e++)
        y[e] = 0.0f;
    for (int64_t j = 0; j < t; j++) {
        float pj = s[j];
        if (pj == 0.0f)
            continue;
        for (int64_t e = 0; e < a->dv; e++)
            y[e] += pj * v[j * a->dv + e];
    }
}

static void attn_range(void *arg, int64_t begin, int64_t end) {
    attn_job *a = arg;
    float *s = kn_malloc((size_t)(a->t > 0 ? a->t : 1) * sizeof(float));
    if (s == NULL) {
        atomic_store(&a->oom, 1);
        return;
    }
    for (int64_t r = begin; r < end; r++)
        attn_row(a, r, s);
    kn_free(s);
}

/* Writes [B, H, P + S, E] = concat(past [B, H, P, E], cur) where cur is [B, H, S, E] (4-D) or
 * [B, S, H*E] (3-D). */
static void concat_kv(float *dst, const float *past, int64_t p, const float *cur, bool cur3d,
                      int64_t b, int64_t h, int64_t s, int64_t e) {
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t hi = 0; hi < h; hi++) {
            float *o = dst + (bi * h + hi) * (p + s) * e;
            if (p > 0)
                memcpy(o, past + (bi * h + hi) * p * e, (size_t)(p * e) * sizeof(float));
            for (int64_t si = 0; si < s; si++) {
                const float *src =
                    cur3d ? cur + ((bi * s + si) * h + hi) * e : cur + ((bi * h + hi) * s + si) * e;
                memcpy(o + (p + si) * e, src, (size_t)e * sizeof(float));
            }
        }
}

/* Mask as float bias with broadcast strides over [b, h, i, j]. */
static kiln_status mask_bias(const kn_tensor *m, attn_job *a, kn_cpu_f32 *buf) {
    int64_t n = kn_tensor_numel(m);
    buf->p = kn_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (buf->p == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "no memory for the attention mask");
    buf->owned = true;
    bool is_bool = m->dtype == KILN_DTYPE_BOOL;
    for (int64_t x = 0; x < n; x++) {
        double v = kn_tensor_get_f64(m, x);
        buf->p[x] = is_bool ? (v != 0.0 ? 0.0f : -INFINITY) : (float)v;
    }
    int64_t st = 1;
    for (int i = 0; i < 4; i++)
        a->m_s[i] = 0;
    for (int i = m->shape.rank - 1; i >= 0; i--) {
        int slot = 4 - (m->shape.rank - i);
        a->m_s[slot] = m->shape.d[i] == 1 && slot != 3 ? 0 : st;
        st *= m->shape.d[i];
    }
    a->m_len = m->shape.d[m->shape.rank - 1];
    a->mask = buf->p;
    return KILN_OK;
}

kiln_status kn_cpu_attention(kn_kernel_ctx *k) {
    const kn_node *n = k->node;
    const kn_tensor *qt = &k->in[0], *kt = &k->in[1];
    bool three = qt->shape.rank == 3;
    attn_job a = {.b = qt->shape.d[0]};
    if (three) {
        a.hq = kn_attr_int(n, "q_num_heads", 0);
        a.hkv = kn_attr_int(n, "kv_num_heads", 0);
        a.sq = qt->shape.d[1];
        a.d = qt->shape.d[2] / a.hq;
        a.dv = k->in[2].shape.d[2] / a.hkv;
    } else {
        a.hq = qt->shape.d[1];
        a.hkv = kt->shape.d[1];
        a.sq = qt->shape.d[2];
        a.d = qt->shape.d[3];
        a.dv = k->in[2].shape.d[3];
    }
    int64_t skv = three ? kt->shape.d[1] : kt->shape.d[2];
    bool has_past = k->n_in > 5 && k->in[4].dtype != 0 && k->in[5].dtype != 0;
    int64_t past = has_past ? k->in[4].shape.d[2] : 0;
    a.t = past + skv;
    a.q_sb = a.hq * a.sq * a.d;
    a.q_sh = three ? a.d : a.sq * a.d;
    a.q_si = three ? a.hq * a.d : a.d;
    a.y_sb = a.hq * a.sq * a.dv;
    a.y_sh = three ? a.dv : a.sq * a.dv;
    a.y_si = three ? a.hq * a.dv : a.dv;
    const kn_attr *sc = kn_node_attr(n, "scale");
    a.scale = sc != NULL ? sc->f : 1.0f / sqrtf((float)a.d);
    a.softcap = kn_attr_float(n, "softcap", 0.0f);
    a.causal = kn_attr_int(n, "is_causal", 0) != 0;
    a.mode = (int)kn_attr_int(n, "qk_matmul_output_mode", 0);
    a.past = past;
    a.left = kn_attr_int(n, "left_window_size", -1);
    a.right = kn_attr_int(n, "right_window_size", -1);
    atomic_init(&a.oom, 0);

    kn_cpu_f32 q = {0}, kc = {0}, vc = {0}, pk = {0}, pv = {0}, mb = {0}, y = {0}, qk = {0};
    float *kall = NULL, *vall = NULL;
    kiln_status rc = kn_cpu_f32_in(qt, &q);
    if (rc == KILN_OK)
        rc = kn_cpu_f32_in(kt, &kc);
    if (rc == KILN_OK)
        rc = kn_cpu_f32_in(&k->in[2], &vc);
    if (rc == KILN_OK && has_past)
        rc = kn_cpu_f32_in(&k->in[4], &pk);
    if (rc == KILN_OK && has_past)
        rc = kn_cpu_f32_in(&k->in[5], &pv);
    if (rc == KILN_OK && k->n_in > 3 && k->in[3].dtype != 0)
        rc = mask_bias(&k->in[3], &a, &mb);
    if (rc == KILN_OK && k->n_in > 6 && k->in[6].dtype != 0) {
        a.nonpad = k->in[6].data;
        for (int64_t b = 0; b < a.b; b++)
            if (a.nonpad[b] < 0 || a.nonpad[b] > a.t)
                rc = kn_error(KILN_ERR_SHAPE,
                              "input nonpad_kv_seqlen[%lld] = %lld is outside "
                              "[0, %lld]",
                              (long long)b, (long long)a.nonpad[b], (long long)a.t);
    }
    if (rc == KILN_OK)
        rc = kn_cpu_f32_out(&k->out[0], &y);
    if (rc == KILN_OK && kn_cpu_has_out(k, 3))
        rc = kn_cpu_f32_out(&k->out[3], &qk);
    if (rc != KILN_OK)
        goto out;
    kall = kn_malloc((size_t)(a.b * a.hkv * a.t * a.d + 1) * sizeof(float));
    vall = kn_malloc((size_t)(a.b * a.hkv * a.t * a.dv + 1) * sizeof(float));
    if (kall == NULL || vall == NULL) {
        rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "no memory for attention keys and values");
        goto out;
    }
    concat_kv(kall, pk.p, past, kc.p, three, a.b, a.hkv, skv, a.d);
    concat_kv(vall, pv.p, past, vc.p, three, a.b, a.hkv, skv, a.dv);
    a.q = q.p;
    a.k = kall;
    a.v = vall;
    a.y = y.p;
    a.qk = qk.p;
    kn_parallel_for(k->pool, a.b * a.hq * a.sq, 4, attn_range, &a);
    if (atomic_load(&a.oom)) {
        rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "no memory for attention scores");
        goto out;
    }
    kn_cpu_f32_commit(&k->out[0], &y);
    if (qk.p != NULL)
        kn_cpu_f32_commit(&k->out[3], &qk);
    for (int o = 1; o <= 2; o++) {
        if (!kn_cpu_has_out(k, o))
            continue;
        const float *src = o == 1 ? kall : vall;
        int64_t cnt = kn_tensor_numel(&k->out[o]);
        for (int64_t x = 0; x < cnt; x++)
            kn_tensor_set_f64(&k->out[o], x, src[x]);
    }
out:
    kn_free(kall);
    kn_free(vall);
    kn_cpu_f32_release(&qk);
    kn_cpu_f32_release(&y);
    kn_cpu_f32_release(&mb);
    kn_cpu_f32_release(&pv);
    kn_cpu_f32_release(&pk);
    kn_cpu_f32_release(&vc);
    kn_cpu_f32_release(&kc);
    kn_cpu_f32_release(&q);
    return rc;
}

kiln_status kn_cpu_rotary(kn_kernel_ctx *k) {
    const kn_tensor *xt = &k->in[0];
    const kn_node *n = k->node;
    bool four = xt->shape.rank == 4;
    int64_t b = xt->shape.d[0], h, s, d;
    if (four) {
        h = xt->shape.d[1];
        s = xt->shape.d[2];
        d = xt->shape.d[3];
    } else {
        h = kn_attr_int(n, "num_heads", 0);
        s = xt->shape.d[1];
        d = xt->shape.d[2] / h;
    }
    int64_t rd = kn_attr_int(n, "rotary_embedding_dim", 0);
    rd = rd == 0 ? d : rd;
    int64_t half = rd / 2;
    bool inter = kn_attr_int(n, "interleaved", 0) != 0;
    const kn_tensor *ct = &k->in[1];
    const int64_t *pos = k->n_in > 3 && k->in[3].dtype != 0 ? k->in[3].data : NULL;
    int64_t cw = ct->shape.d[ct->shape.rank - 1], max_pos = ct->shape.d[0];
    if (pos != NULL)
        for (int64_t i = 0; i < b * s; i++)
            if (pos[i] < 0 || pos[i] >= max_pos)
                return kn_error(KILN_ERR_SHAPE,
                                "input position_ids[%lld] = %lld is outside "
                                "[0, %lld)",
                                (long long)i, (long long)pos[i], (long long)max_pos);
    kn_cpu_f32 x = {0}, cs = {0}, sn = {0}, y = {0};
    kiln_status rc = kn_cpu_f32_in(xt, &x);
    if (rc == KILN_OK)
        rc = kn_cpu_f32_in(ct, &cs);
    if (rc == KILN_OK)
        rc = kn_cpu_f32_in(&k->in[2], &sn);
    if (rc == KILN_OK)
        rc = kn_cpu_f32_out(&k->out[0], &y);
    if (rc != KILN_OK)
        goto out;
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t si = 0; si < s; si++) {
            int64_t row = pos != NULL ? pos[bi * s + si] : bi * s + si;
            const float *cr = cs.p + row * cw, *sr = sn.p + row * cw;
            for (int64_t hi = 0; hi < h; hi++) {
                int64_t off = four ? ((bi * h + hi) * s + si) * d : ((bi * s + si) * h + hi) * d;
                const float *xi = x.p + off;
                float *yo = y.p + off;
                for (int64_t e = 0; e < half; e++) {
                    int64_t i1 = inter ? 2 * e : e, i2 = inter ? 2 * e + 1 : e + half;
                    float x1 = xi[i1], x2 = xi[i2];
                    yo[i1] = cr[e] * x1 - sr[e] * x2;
                    yo[i2] = sr[e] * x1 + cr[e] * x2;
                }
                for (int64_t e = rd; e < d; e++)
                    yo[e] = xi[e];
            }
        }
    kn_cpu_f32_commit(&k->out[0], &y);
out:
    kn_cpu_f32_release(&y);
    kn_cpu_f32_release(&sn);
    kn_cpu_f32_release(&cs);
    kn_cpu_f32_release(&x);
    return rc;
}
