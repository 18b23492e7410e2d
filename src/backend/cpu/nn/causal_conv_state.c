/* CausalConvWithState (opset 27): per channel, y[t] = bias + sum_j w[j] * p[t + j] over the
 * sequence p = past_state (or k - 1 zeros) followed by the input, then SiLU if asked; the new
 * state is p's last k - 1 values. In float32; a 16-bit input's sums are rounded to its type
 * before the activation, as the reference does. */
#include "backend/cpu/f32_stage.h"
#include "core/alloc.h"
#include "kiln/kiln_math.h"

#include <string.h>

static float round_to(int32_t dtype, float v) {
    if (dtype == KILN_DTYPE_FLOAT16)
        return kn_half_to_float(kn_float_to_half(v));
    if (dtype == KILN_DTYPE_BFLOAT16)
        return kn_bf16_to_float(kn_float_to_bf16(v));
    return v;
}

kiln_status kn_cpu_causal_conv_state(kn_kernel_ctx *k) {
    const kn_tensor *xt = &k->in[0];
    int64_t b = xt->shape.d[0], ch = xt->shape.d[1], len = xt->shape.d[2];
    int64_t kw = k->in[1].shape.d[2], plen = len + kw - 1;
    bool has_bias = k->n_in > 2 && k->in[2].dtype != 0,
         has_past = k->n_in > 3 && k->in[3].dtype != 0;
    bool silu = strcmp(kn_attr_string(k->node, "activation", "none"), "none") != 0;
    kn_cpu_f32 x = {0}, w = {0}, bias = {0}, past = {0}, y = {0}, st = {0};
    float *p = kn_malloc((size_t)(plen > 0 ? plen : 1) * sizeof(float));
    kiln_status rc = p != NULL ? kn_cpu_f32_in(xt, &x)
                               : kn_error(KILN_ERR_OUT_OF_MEMORY, "no memory for the sequence");
    if (rc == KILN_OK)
        rc = kn_cpu_f32_in(&k->in[1], &w);
    if (rc == KILN_OK && has_bias)
        rc = kn_cpu_f32_in(&k->in[2], &bias);
    if (rc == KILN_OK && has_past)
        rc = kn_cpu_f32_in(&k->in[3], &past);
    if (rc == KILN_OK)
        rc = kn_cpu_f32_out(&k->out[0], &y);
    if (rc == KILN_OK && kn_cpu_has_out(k, 1))
        rc = kn_cpu_f32_out(&k->out[1], &st);
    if (rc != KILN_OK)
        goto out;
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t c = 0; c < ch; c++) {
            int64_t row = bi * ch + c;
            if (has_past)
                memcpy(p, past.p + row * (kw - 1), (size_t)(kw - 1) * sizeof(float));
            else
                memset(p, 0, (size_t)(kw - 1) * sizeof(float));
            memcpy(p + kw - 1, x.p + row * len, (size_t)len * sizeof(float));
            const float *wc = w.p + c * kw;
            float b0 = has_bias ? bias.p[c] : 0.0f;
            float *yr = y.p + row * len;
            for (int64_t t = 0; t < len; t++) {
                float acc = b0;
                for (int64_t j = 0; j < kw; j++)
                    acc += wc[j] * p[t + j];
                if (silu) {
                    acc = round_to(xt->dtype, acc);
                    acc = acc * kiln_math_sigmoid(acc);
                }
                yr[t] = acc;
            }
            if (st.p != NULL)
                memcpy(st.p + row * (kw - 1), p + len, (size_t)(kw - 1) * sizeof(float));
        }
    kn_cpu_f32_commit(&k->out[0], &y);
    if (st.p != NULL)
        kn_cpu_f32_commit(&k->out[1], &st);
out:
    kn_free(p);
    kn_cpu_f32_release(&st);
    kn_cpu_f32_release(&y);
    kn_cpu_f32_release(&past);
    kn_cpu_f32_release(&bias);
    kn_cpu_f32_release(&w);
    kn_cpu_f32_release(&x);
    return rc;
}
