/* Small kernels of the extra family: Swish, Optional ops on tensors, training optimizers,
 * TfIdfVectorizer over integers, Binarizer and ArrayFeatureExtractor. */
#include "backend/cpu/f32_stage.h"
#include "core/alloc.h"

#include <math.h>
#include <string.h>

kiln_status cpu_extra_swish(kn_kernel_ctx *k) {
    float alpha = kn_attr_float(k->node, "alpha", 1.0f);
    cpu_xf32 x = {0}, y = {0};
    kiln_status rc = cpu_extra_in_f32(&k->in[0], &x);
    if (rc == KILN_OK)
        rc = cpu_extra_out_f32(&k->out[0], &y);
    if (rc == KILN_OK) {
        int64_t n = kn_tensor_numel(&k->in[0]);
        for (int64_t i = 0; i < n; i++)
            y.p[i] = x.p[i] / (1.0f + expf(-alpha * x.p[i]));
        cpu_extra_commit(&k->out[0], &y);
    }
    cpu_extra_release(&y);
    cpu_extra_release(&x);
    return rc;
}

kiln_status cpu_extra_optional_has_element(kn_kernel_ctx *k) {
    *(uint8_t *)k->out[0].data = k->n_in > 0 && k->in[0].dtype != 0;
    return KILN_OK;
}

kiln_status cpu_extra_optional_get_element(kn_kernel_ctx *k) {
    size_t nb = kn_tensor_nbytes(&k->in[0]);
    if (nb > 0 && k->out[0].data != k->in[0].data)
        memmove(k->out[0].data, k->in[0].data, nb);
    return KILN_OK;
}

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

kiln_status cpu_extra_optimizer(kn_kernel_ctx *k) {
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

/* Index of the pool n-gram of size s equal to tokens x[p], x[p+d], ..., or -1. */
static int64_t find_gram(const kn_node *node, const kn_tensor *x, int64_t row, int64_t p, int64_t d,
                         int64_t s) {
    const int64_t *counts, *pool;
    int64_t n_counts = kn_attr_ints(node, "ngram_counts", &counts);
    int64_t n_pool = kn_attr_ints(node, "pool_int64s", &pool);
    if (s > n_counts)
        return -1;
    int64_t id = 0;
    for (int64_t i = 0; i < s - 1; i++)
        id += ((i + 1 < n_counts ? counts[i + 1] : n_pool) - counts[i]) / (i + 1);
    int64_t start = counts[s - 1], end = s < n_counts ? counts[s] : n_pool;
    for (int64_t g = 0; start + (g + 1) * s <= end; g++) {
        const int64_t *gram = pool + start + g * s;
        int64_t j = 0;
        while (j < s && gram[j] == kn_tensor_get_i64(x, row + p + j * d))
            j++;
        if (j == s)
            return id + g;
    }
    return -1;
}

kiln_status cpu_extra_tfidf(kn_kernel_ctx *k) {
    const kn_node *node = k->node;
    const kn_tensor *x = &k->in[0];
    kn_tensor *y = &k->out[0];
    const int64_t *idx;
    kn_attr_ints(node, "ngram_indexes", &idx);
    const float *w;
    int64_t n_w = kn_attr_floats(node, "weights", &w);
    int64_t lo = kn_attr_int(node, "min_gram_length", 1),
            hi = kn_attr_int(node, "max_gram_length", 1);
    int64_t skips = kn_attr_int(node, "max_skip_count", 0);
    const char *mode = kn_attr_string(node, "mode", "TF");
    int64_t rows = x->shape.rank == 2 ? x->shape.d[0] : 1, c = x->shape.d[x->shape.rank - 1];
    int64_t out = y->shape.d[y->shape.rank - 1];
    float *f = y->data;
    for (int64_t i = 0; i < rows * out; i++)
        f[i] = 0.0f;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t d = 1; d <= skips + 1; d++) {
            /* Unigrams do not depend on the skip: count them on the first pass only. */
            int64_t s_lo = d > 1 && lo < 2 ? 2 : lo;
            for (int64_t p = 0; p < c; p++)
                for (int64_t s = s_lo; s <= hi && p + (s - 1) * d < c; s++) {
                    int64_t g = find_gram(node, x, r * c, p, d, s);
                    if (g >= 0)
                        f[r * out + idx[g]] += 1.0f;
                }
        }
    bool idf = strcmp(mode, "IDF") == 0, tfidf = strcmp(mode, "TFIDF") == 0;
    for (int64_t i = 0; i < rows * out; i++) {
        if (idf)
            f[i] = f[i] > 0.0f ? (n_w > 0 ? w[i % out] : 1.0f) : 0.0f;
        else if (tfidf && n_w > 0)
            f[i] *= w[i % out];
    }
    return KILN_OK;
}

kiln_status cpu_extra_binarizer(kn_kernel_ctx *k) {
    double th = kn_attr_float(k->node, "threshold", 0.0f);
    int64_t n = kn_tensor_numel(&k->in[0]);
    for (int64_t i = 0; i < n; i++)
        kn_tensor_set_f64(&k->out[0], i, kn_tensor_get_f64(&k->in[0], i) > th ? 1.0 : 0.0);
    return KILN_OK;
}

kiln_status cpu_extra_array_feature_extractor(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0], *ix = &k->in[1];
    int64_t last = x->shape.d[x->shape.rank - 1], m = kn_tensor_numel(ix);
    int64_t rows = last > 0 ? kn_tensor_numel(x) / last : 0;
    const int64_t *sel = ix->data;
    size_t es = kn_dtype_size(x->dtype);
    for (int64_t j = 0; j < m; j++)
        if (sel[j] < 0 || sel[j] >= last)
            return kn_error(KILN_ERR_SHAPE, "input Y[%lld] = %lld is outside [0, %lld)",
                            (long long)j, (long long)sel[j], (long long)last);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < m; j++)
            memcpy((char *)k->out[0].data + (size_t)(r * m + j) * es,
                   (const char *)x->data + (size_t)(r * last + sel[j]) * es, es);
    return KILN_OK;
}
