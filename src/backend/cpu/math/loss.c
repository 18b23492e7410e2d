/* NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (the latter is NLL over a log-softmax
 * along the class dim). Inputs are viewed as [N, C, D] and targets as [N, D]. */
#include "backend/cpu/reduction/reduce_impl.h"
#include "core/alloc.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* lp = log_softmax(x) along C of an [N, C, D] tensor. */
static void log_softmax_ncd(const float *x, float *lp, int64_t n, int64_t c, int64_t d) {
    for (int64_t b = 0; b < n; b++)
        for (int64_t j = 0; j < d; j++) {
            const float *xs = x + b * c * d + j;
            float *ls = lp + b * c * d + j;
            float m = -INFINITY;
            for (int64_t i = 0; i < c; i++)
                m = xs[i * d] > m ? xs[i * d] : m;
            double s = 0;
            for (int64_t i = 0; i < c; i++)
                s += exp((double)xs[i * d] - m);
            float shift = (float)(m + log(s));
            for (int64_t i = 0; i < c; i++)
                ls[i * d] = xs[i * d] - shift;
        }
}

typedef struct loss_in {
    const float *lp; /* log-probabilities [N, C, D] */
    const kn_tensor *target;
    const float *weight; /* [C] or NULL */
    bool has_ignore;
    int64_t ignore, n, c, d;
} loss_in;

/* Per-element losses into `out` (when not NULL); sums of losses and of weights. */
static kiln_status nll(const loss_in *a, float *out, double *sum, double *wsum) {
    *sum = *wsum = 0;
    for (int64_t b = 0; b < a->n; b++)
        for (int64_t j = 0; j < a->d; j++) {
            int64_t t = kn_tensor_get_i64(a->target, b * a->d + j);
            double l = 0, w = 0;
            if (!a->has_ignore || t != a->ignore) {
                if (t < 0 || t >= a->c)
                    return kn_error(KILN_ERR_SHAPE,
                                    "input 1 (target): class %lld at %lld is outside [0, %lld)",
                                    (long long)t, (long long)(b * a->d + j), (long long)a->c);
                w = a->weight ? a->weight[t] : 1.0;
                l = -(double)a->lp[(b * a->c + t) * a->d + j] * w;
            }
            if (out != NULL)
                out[b * a->d + j] = (float)l;
            *sum += l;
            *wsum += w;
        }
    return KILN_OK;
}

kiln_status cpu_red_loss(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0];
    bool sce = k->node->op_type[0] == 'S';
    loss_in a = {.target = &k->in[1], .n = x->shape.d[0], .c = x->shape.d[1]};
    a.d = a.n * a.c > 0 ? kn_tensor_numel(x) / (a.n * a.c) : 0;
    const kn_attr *ig = kn_node_attr(k->node, "ignore_index");
    a.has_ignore = ig != NULL;
    a.ignore = ig ? ig->i : 0;
    const char *red = kn_attr_string(k->node, "reduction", "mean");
    bool none = strcmp(red, "none") == 0, mean = strcmp(red, "mean") == 0;
    bool want_lp = sce && k->n_out > 1 && k->node->out[1] >= 0;
    kn_cpu_f32 xv = {0}, wv = {0}, lv = {0}, ov = {0};
    float *scratch = NULL;
    kiln_status rc = kn_cpu_f32_in(x, &xv);
    if (rc == KILN_OK && k->n_in > 2 && k->in[2].dtype != 0)
        rc = kn_cpu_f32_in(&k->in[2], &wv);
    if (rc == KILN_OK && want_lp)
        rc = kn_cpu_f32_out(&k->out[1], &lv);
    if (rc == KILN_OK && none)
        rc = kn_cpu_f32_out(&k->out[0], &ov);
    if (rc != KILN_OK)
        goto out;
    a.weight = wv.p;
    a.lp = xv.p;
    if (sce) {
        float *lp = lv.p;
        if (lp == NULL) {
            scratch = kn_malloc((size_t)(kn_tensor_numel(x) > 0 ? kn_tensor_numel(x) : 1) * 4);
            if (scratch == NULL) {
                rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "no memory for log-probabilities");
                goto out;
            }
            lp = scratch;
        }
        log_softmax_ncd(xv.p, lp, a.n, a.c, a.d);
        a.lp = lp;
    }
    double sum, wsum;
    rc = nll(&a, ov.p, &sum, &wsum);
    if (rc != KILN_OK)
        goto out;
    if (none)
        kn_cpu_f32_commit(&k->out[0], &ov);
    else
        kn_tensor_set_f64(&k->out[0], 0, mean ? sum / wsum : sum);
    if (want_lp)
        kn_cpu_f32_commit(&k->out[1], &lv);
out:
    kn_free(scratch);
    kn_cpu_f32_release(&ov);
    kn_cpu_f32_release(&lv);
    kn_cpu_f32_release(&wv);
    kn_cpu_f32_release(&xv);
    return rc;
}
