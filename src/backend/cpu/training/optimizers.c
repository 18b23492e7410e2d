/* The ai.onnx.preview.training optimizers Adagrad, Momentum and Adam. */
#include "backend/cpu/f32_stage.h"

#include <math.h>
#include <string.h>

/* One optimizer step on element e of tensor group i (n groups). */
static void adagrad_step(kn_kernel_ctx *k, int n, int i, int64_t e, double r, int64_t t) {
    double decay = kn_attr_float(k->node, "decay_factor", 0.0f);
    double eps = kn_attr_float(k->node, "epsilon", 1e-6f);
    double norm = kn_attr_float(k->node, "norm_coefficient", 0.0f);
    double x = kn_tensor_get_f64(&k->in[2 + i], e), g = kn_tensor_get_f64(&k->in[2 + n + i], e);
    double h = kn_tensor_get_f64(&k->in[2 + 2 * n + i], e);
    double rr = r / (1.0 + (double)t * decay), gr = norm * x + g;
    h += gr * gr;
    kn_tensor_set_f64(&k->out[i], e, x - rr * gr / (sqrt(h) + eps));
    kn_tensor_set_f64(&k->out[n + i], e, h);
}

static void momentum_step(kn_kernel_ctx *k, int n, int i, int64_t e, double r, int64_t t) {
    double alpha = kn_attr_float(k->node, "alpha", 0.0f), beta = kn_attr_float(k->node, "beta", 0);
    double norm = kn_attr_float(k->node, "norm_coefficient", 0.0f);
    bool nesterov = strcmp(kn_attr_string(k->node, "mode", ""), "nesterov") == 0;
    double x = kn_tensor_get_f64(&k->in[2 + i], e), g = kn_tensor_get_f64(&k->in[2 + n + i], e);
    double v = kn_tensor_get_f64(&k->in[2 + 2 * n + i], e);
    double gr = norm * x + g;
    v = alpha * v + (t > 0 ? beta : 1.0) * gr;
    kn_tensor_set_f64(&k->out[i], e, nesterov ? x - r * (gr + alpha * v) : x - r * v);
    kn_tensor_set_f64(&k->out[n + i], e, v);
}

static void adam_step(kn_kernel_ctx *k, int n, int i, int64_t e, double r, int64_t t) {
    double alpha = kn_attr_float(k->node, "alpha", 0.9f),
           beta = kn_attr_float(k->node, "beta", 0.999f);
    double eps = kn_attr_float(k->node, "epsilon", 1e-6f);
    double norm = kn_attr_float(k->node, "norm_coefficient", 0.0f);
    double post = kn_attr_float(k->node, "norm_coefficient_post", 0.0f);
    double x = kn_tensor_get_f64(&k->in[2 + i], e), g = kn_tensor_get_f64(&k->in[2 + n + i], e);
    double v = kn_tensor_get_f64(&k->in[2 + 2 * n + i], e);
    double h = kn_tensor_get_f64(&k->in[2 + 3 * n + i], e);
    double gr = norm * x + g;
    v = alpha * v + (1.0 - alpha) * gr;
    h = beta * h + (1.0 - beta) * gr * gr;
    double ra = t > 0 ? r * sqrt(1.0 - pow(beta, (double)t)) / (1.0 - pow(alpha, (double)t)) : r;
    kn_tensor_set_f64(&k->out[i], e, (1.0 - post) * (x - ra * v / (sqrt(h) + eps)));
    kn_tensor_set_f64(&k->out[n + i], e, v);
    kn_tensor_set_f64(&k->out[2 * n + i], e, h);
}

kiln_status kn_cpu_optimizer(kn_kernel_ctx *k) {
    const char *op = k->node->op_type;
    bool adam = strcmp(op, "Adam") == 0, adagrad = strcmp(op, "Adagrad") == 0;
    int per = adam ? 4 : 3;
    int n = (k->n_in - 2) / per;
    double r = kn_tensor_get_f64(&k->in[0], 0);
    int64_t t = kn_tensor_get_i64(&k->in[1], 0);
    for (int i = 0; i < n; i++) {
        int64_t cnt = kn_tensor_numel(&k->in[2 + i]);
        for (int64_t e = 0; e < cnt; e++) {
            if (adam)
                adam_step(k, n, i, e, r, t);
            else if (adagrad)
                adagrad_step(k, n, i, e, r, t);
            else
                momentum_step(k, n, i, e, r, t);
        }
    }
    return KILN_OK;
}
