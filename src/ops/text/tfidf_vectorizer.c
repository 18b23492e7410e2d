/* TfIdfVectorizer over integers: shape inference. */
#include "ops/infer_util.h"

#include <string.h>

kiln_status kn_infer_tfidf(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need(c, 1, 1, 1));
    const kn_node *n = c->node;
    const kn_tensor *x = &c->in[0];
    if (x->dtype != KILN_DTYPE_INT32 && x->dtype != KILN_DTYPE_INT64)
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "input X must be int32 or int64 (string pools "
                        "are not supported), got %s",
                        kn_dtype_name(x->dtype));
    if (x->shape.rank < 1 || x->shape.rank > 2)
        return kn_error(KILN_ERR_SHAPE, "input X must be [C] or [N, C]");
    const int64_t *idx, *counts, *pool;
    int64_t n_idx = kn_attr_ints(n, "ngram_indexes", &idx);
    int64_t n_counts = kn_attr_ints(n, "ngram_counts", &counts);
    int64_t n_pool = kn_attr_ints(n, "pool_int64s", &pool);
    int64_t lo = kn_attr_int(n, "min_gram_length", 0), hi = kn_attr_int(n, "max_gram_length", 0);
    const char *mode = kn_attr_string(n, "mode", "");
    if (kn_node_attr(n, "pool_strings") != NULL)
        return kn_error(KILN_ERR_UNSUPPORTED, "string pools are not supported");
    if (strcmp(mode, "TF") != 0 && strcmp(mode, "IDF") != 0 && strcmp(mode, "TFIDF") != 0)
        return kn_error(KILN_ERR_MODEL, "attribute 'mode' must be TF, IDF or TFIDF");
    if (lo < 1 || hi < lo || kn_attr_int(n, "max_skip_count", 0) < 0)
        return kn_error(KILN_ERR_MODEL, "need 1 <= min_gram_length <= max_gram_length and "
                                        "max_skip_count >= 0");
    int64_t grams = 0, out = 0;
    for (int64_t i = 0; i < n_counts; i++) {
        int64_t end = i + 1 < n_counts ? counts[i + 1] : n_pool;
        if (counts[i] < 0 || end < counts[i] || end > n_pool)
            return kn_error(KILN_ERR_MODEL, "attribute 'ngram_counts' is not an increasing "
                                            "list of offsets into the pool");
        grams += (end - counts[i]) / (i + 1);
    }
    if (n_idx != grams)
        return kn_error(KILN_ERR_MODEL,
                        "attribute 'ngram_indexes' has %lld entries for %lld "
                        "n-grams",
                        (long long)n_idx, (long long)grams);
    for (int64_t i = 0; i < n_idx; i++) {
        if (idx[i] < 0)
            return kn_error(KILN_ERR_MODEL, "attribute 'ngram_indexes' has a negative entry");
        out = idx[i] + 1 > out ? idx[i] + 1 : out;
    }
    const float *w;
    int64_t n_w = kn_attr_floats(n, "weights", &w);
    if (n_w != 0 && n_w < out)
        return kn_error(KILN_ERR_MODEL, "attribute 'weights' has %lld entries, needs %lld",
                        (long long)n_w, (long long)out);
    c->out[0].dtype = KILN_DTYPE_FLOAT32;
    c->out[0].shape = x->shape.rank == 1 ? (kn_shape){.rank = 1, .d = {out}}
                                         : (kn_shape){.rank = 2, .d = {x->shape.d[0], out}};
    return KILN_OK;
}
