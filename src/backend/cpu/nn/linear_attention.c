/* LinearAttention (opset 27), token by token as the spec defines it: per batch and kv head a
 * d_k x d_v state S, decayed by exp(g) (gated rules), corrected by beta (v - S^T k) (delta rules),
 * grown by k (x) v, and read by each query head of the kv head's group, o = scale q^T S. In
 * float32 whatever the inputs' type. */
#include "backend/cpu/f32_stage.h"
#include "core/alloc.h"

#include <math.h>
#include <string.h>

typedef struct la_job {
    int64_t b, t, hq, hkv, dk, dv, g_w, beta_w; /* g_w: decay's last dim; beta_w: beta's */
    bool gated, delta;
    float scale;
    const float *q, *k, *v, *past, *g, *beta;
    float *y, *state; /* state: [b, hkv, dk, dv], the present state at the end */
    float *tmp;       /* dv floats a (b, kv head) pair */
} la_job;

static void la_range(void *arg, int64_t begin, int64_t end) {
    const la_job *a = arg;
    int64_t group = a->hq / a->hkv, dk = a->dk, dv = a->dv;
    for (int64_t pair = begin; pair < end; pair++) {
        int64_t bi = pair / a->hkv, h = pair % a->hkv;
        float *s = a->state + pair * dk * dv, *u = a->tmp + pair * dv;
        if (a->past != NULL)
            memcpy(s, a->past + pair * dk * dv, (size_t)(dk * dv) * sizeof(float));
        else
            memset(s, 0, (size_t)(dk * dv) * sizeof(float));
        for (int64_t ti = 0; ti < a->t; ti++) {
            int64_t row = bi * a->t + ti;
            const float *kt = a->k + (row * a->hkv + h) * dk;
            const float *vt = a->v + (row * a->hkv + h) * dv;
            if (a->gated) {
                const float *gt = a->g + row * a->g_w;
                bool per_head = a->g_w == a->hkv;
                float fh = per_head ? expf(gt[h]) : 0.0f; /* one decay for the head's state */
                for (int64_t d = 0; d < dk; d++) {
                    float f = per_head ? fh : expf(gt[h * dk + d]);
                    for (int64_t m = 0; m < dv; m++)
                        s[d * dv + m] *= f;
                }
            }
            if (a->delta) {
                float be = a->beta[row * a->beta_w + (a->beta_w == 1 ? 0 : h)];
                for (int64_t m = 0; m < dv; m++)
                    u[m] = 0.0f;
                for (int64_t d = 0; d < dk; d++)
                    for (int64_t m = 0; m < dv; m++)
                        u[m] += s[d * dv + m] * kt[d];
                for (int64_t m = 0; m < dv; m++)
                    u[m] = be * (vt[m] - u[m]);
            } else {
                memcpy(u, vt, (size_t)dv * sizeof(float));
            }
            for (int64_t d = 0; d < dk; d++)
                for (int64_t m = 0; m < dv; m++)
                    s[d * dv + m] += kt[d] * u[m];
            for (int64_t j = 0; j < group; j++) {
                int64_t qh = h * group + j;
                const float *qt = a->q + (row * a->hq + qh) * dk;
                float *yo = a->y + (row * a->hq + qh) * dv;
                for (int64_t m = 0; m < dv; m++)
                    yo[m] = 0.0f;
                for (int64_t d = 0; d < dk; d++)
                    for (int64_t m = 0; m < dv; m++)
                        yo[m] += qt[d] * s[d * dv + m];
                for (int64_t m = 0; m < dv; m++)
                    yo[m] *= a->scale;
            }
        }
    }
}

kiln_status kn_cpu_linear_attention(kn_kernel_ctx *k) {
    const kn_node *n = k->node;
    const kn_tensor *qt = &k->in[0];
    const char *rule = kn_attr_string(n, "update_rule", "gated_delta");
    la_job a = {.b = qt->shape.d[0],
                .t = qt->shape.d[1],
                .hq = kn_attr_int(n, "q_num_heads", 1),
                .hkv = kn_attr_int(n, "kv_num_heads", 1),
                .gated = strcmp(rule, "gated") == 0 || strcmp(rule, "gated_delta") == 0,
                .delta = strcmp(rule, "delta") == 0 || strcmp(rule, "gated_delta") == 0};
    a.dk = qt->shape.d[2] / a.hq;
    a.dv = k->in[2].shape.d[2] / a.hkv;
    float sc = kn_attr_float(n, "scale", 0.0f);
    a.scale = sc != 0.0f ? sc : 1.0f / sqrtf((float)a.dk);
    bool has_past = k->n_in > 3 && k->in[3].dtype != 0;
    kn_cpu_f32 q = {0}, kk = {0}, v = {0}, past = {0}, g = {0}, beta = {0}, y = {0}, st = {0};
    float *state = NULL, *tmp = NULL;
    bool own_state = false; /* no present_state output: the state is scratch */
    kiln_status rc = kn_cpu_f32_in(qt, &q);
    if (rc == KILN_OK)
        rc = kn_cpu_f32_in(&k->in[1], &kk);
    if (rc == KILN_OK)
        rc = kn_cpu_f32_in(&k->in[2], &v);
    if (rc == KILN_OK && has_past)
        rc = kn_cpu_f32_in(&k->in[3], &past);
    if (rc == KILN_OK && a.gated) {
        rc = kn_cpu_f32_in(&k->in[4], &g);
        a.g_w = k->in[4].shape.d[2];
    }
    if (rc == KILN_OK && a.delta) {
        rc = kn_cpu_f32_in(&k->in[5], &beta);
        a.beta_w = k->in[5].shape.d[2];
    }
    if (rc == KILN_OK)
        rc = kn_cpu_f32_out(&k->out[0], &y);
    if (rc == KILN_OK && kn_cpu_has_out(k, 1))
        rc = kn_cpu_f32_out(&k->out[1], &st);
    int64_t pairs = a.b * a.hkv;
    if (rc == KILN_OK) {
        own_state = st.p == NULL;
        state = own_state ? kn_malloc((size_t)(pairs * a.dk * a.dv + 1) * sizeof(float)) : st.p;
        tmp = kn_malloc((size_t)(pairs * a.dv + 1) * sizeof(float));
        if (state == NULL || tmp == NULL)
            rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "no memory for the linear attention state");
    }
    if (rc == KILN_OK) {
        a.q = q.p, a.k = kk.p, a.v = v.p, a.past = past.p, a.g = g.p, a.beta = beta.p;
        a.y = y.p, a.state = state, a.tmp = tmp;
        kn_parallel_for(k->pool, pairs, 1, la_range, &a);
        kn_cpu_f32_commit(&k->out[0], &y);
        if (st.p != NULL)
            kn_cpu_f32_commit(&k->out[1], &st);
    }
    if (own_state)
        kn_free(state);
    kn_free(tmp);
    kn_cpu_f32_release(&st);
    kn_cpu_f32_release(&y);
    kn_cpu_f32_release(&beta);
    kn_cpu_f32_release(&g);
    kn_cpu_f32_release(&past);
    kn_cpu_f32_release(&v);
    kn_cpu_f32_release(&kk);
    kn_cpu_f32_release(&q);
    return rc;
}
