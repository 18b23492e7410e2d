/* TfIdfVectorizer over integers. */
#include "backend/cpu/f32_stage.h"
#include "core/alloc.h"

#include <math.h>
#include <string.h>

/* The n-gram pool of the node's attributes. */
typedef struct gram_pool {
    const int64_t *counts, *pool;
    int64_t n_counts, n_pool;
} gram_pool;

/* Index of the pool n-gram of size s equal to tokens x[p], x[p+d], ..., or -1. */
static int64_t find_gram(const gram_pool *gp, const kn_tensor *x, int64_t row, int64_t p, int64_t d,
                         int64_t s) {
    const int64_t *counts = gp->counts, *pool = gp->pool;
    int64_t n_counts = gp->n_counts, n_pool = gp->n_pool;
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

kiln_status kn_cpu_tfidf(kn_kernel_ctx *k) {
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
    /* A skip as long as the row already leaves room for no n-gram of two or more tokens, so
     * larger ones (an attribute may say anything) add nothing but time. */
    if (skips > c)
        skips = c;
    /* every skip revisits every token: a bound on the work, so a malformed attribute cannot
     * keep a run busy for minutes (real models skip a few tokens) */
    if ((double)rows * (double)c * (double)(skips + 1) * (double)(hi - lo + 1) > 1073741824.0)
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "TfIdfVectorizer '%s': max_skip_count %lld over %lld tokens a row is "
                        "more work than kiln runs (2^30 n-gram probes)",
                        node->name, (long long)skips, (long long)c);
    gram_pool gp;
    gp.n_counts = kn_attr_ints(node, "ngram_counts", &gp.counts);
    gp.n_pool = kn_attr_ints(node, "pool_int64s", &gp.pool);
    float *f = y->data;
    for (int64_t i = 0; i < rows * out; i++)
        f[i] = 0.0f;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t d = 1; d <= skips + 1; d++) {
            /* Unigrams do not depend on the skip: count them on the first pass only. */
            int64_t s_lo = d > 1 && lo < 2 ? 2 : lo;
            for (int64_t p = 0; p < c; p++)
                for (int64_t s = s_lo; s <= hi && p + (s - 1) * d < c; s++) {
                    int64_t g = find_gram(&gp, x, r * c, p, d, s);
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
