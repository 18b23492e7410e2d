/* Small ops of the extra family: Swish, the Optional ops on plain tensors, the optimizers of
 * ai.onnx.preview.training, TfIdfVectorizer over integers, and the ai.onnx.ml Binarizer and
 * ArrayFeatureExtractor: shape inference. */
#include "ops/infer_util.h"

#include <string.h>

kiln_status kn_infer_swish(kn_infer_ctx *c) {
    KN_TRY(kn_extra_need(c, 1, 1, 1));
    if (!kn_extra_is_float(c->in[0].dtype))
        return kn_error(KILN_ERR_DTYPE, "input X must be a float tensor, got %s",
                        kn_dtype_name(c->in[0].dtype));
    c->out[0] = (kn_tensor){.dtype = c->in[0].dtype, .shape = c->in[0].shape};
    return KILN_OK;
}

/* Only tensors reach kiln's graphs (sequences and optionals are rejected at import), so an
 * optional here is either a present tensor or an omitted input. */
kiln_status kn_infer_optional_has_element(kn_infer_ctx *c) {
    KN_TRY(kn_extra_need(c, 0, 1, 1));
    c->out[0].dtype = KILN_DTYPE_BOOL;
    c->out[0].shape.rank = 0;
    return KILN_OK;
}

kiln_status kn_infer_optional_get_element(kn_infer_ctx *c) {
    KN_TRY(kn_extra_need(c, 1, 1, 1));
    c->out[0] = (kn_tensor){.dtype = c->in[0].dtype, .shape = c->in[0].shape};
    return KILN_OK;
}

/* Inputs R, T, then `per` groups of n tensors (X..., G..., and V/H...); outputs `outs`
 * groups of n shaped like X. */
kiln_status kn_infer_optimizer(kn_infer_ctx *c) {
    const char *op = c->node->op_type;
    int per = strcmp(op, "Adam") == 0 ? 4 : 3, outs = per - 1;
    if (c->n_in < 2 + per || (c->n_in - 2) % per != 0)
        return kn_error(KILN_ERR_MODEL, "%s takes R, T and %d groups of tensors; got %d inputs", op,
                        per, c->n_in);
    int n = (c->n_in - 2) / per;
    if (c->n_out != outs * n)
        return kn_error(KILN_ERR_MODEL, "%s with %d tensors makes %d outputs, got %d", op, n,
                        outs * n, c->n_out);
    if (!kn_extra_is_float(c->in[0].dtype) || kn_tensor_numel(&c->in[0]) != 1)
        return kn_error(KILN_ERR_SHAPE, "input R must be a float scalar");
    if (c->in[1].dtype != KILN_DTYPE_INT64 || kn_tensor_numel(&c->in[1]) != 1)
        return kn_error(KILN_ERR_SHAPE, "input T must be an int64 scalar");
    if (strcmp(op, "Momentum") == 0) {
        const char *mode = kn_attr_string(c->node, "mode", "");
        if (strcmp(mode, "standard") != 0 && strcmp(mode, "nesterov") != 0)
            return kn_error(KILN_ERR_MODEL,
                            "attribute 'mode' must be 'standard' or "
                            "'nesterov', got '%s'",
                            mode);
    }
    for (int i = 0; i < n; i++) {
        const kn_tensor *x = &c->in[2 + i];
        if (x->dtype != KILN_DTYPE_FLOAT32 && x->dtype != KILN_DTYPE_FLOAT64)
            return kn_error(KILN_ERR_DTYPE, "input %d must be float or double", 2 + i);
        for (int g = 1; g < per; g++) {
            const kn_tensor *o = &c->in[2 + g * n + i];
            if (o->dtype != x->dtype || !kn_shape_equal(&o->shape, &x->shape))
                return kn_error(KILN_ERR_SHAPE,
                                "input %d must have the dtype and shape of "
                                "input %d",
                                2 + g * n + i, 2 + i);
        }
        for (int g = 0; g < outs; g++)
            c->out[g * n + i] = (kn_tensor){.dtype = x->dtype, .shape = x->shape};
    }
    return KILN_OK;
}

kiln_status kn_infer_tfidf(kn_infer_ctx *c) {
    KN_TRY(kn_extra_need(c, 1, 1, 1));
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

kiln_status kn_infer_binarizer(kn_infer_ctx *c) {
    KN_TRY(kn_extra_need(c, 1, 1, 1));
    const kn_tensor *x = &c->in[0];
    if (!kn_extra_is_float(x->dtype) && x->dtype != KILN_DTYPE_INT32 &&
        x->dtype != KILN_DTYPE_INT64)
        return kn_error(KILN_ERR_DTYPE, "input X must be float, double, int32 or int64");
    c->out[0] = (kn_tensor){.dtype = x->dtype, .shape = x->shape};
    return KILN_OK;
}

kiln_status kn_infer_array_feature_extractor(kn_infer_ctx *c) {
    KN_TRY(kn_extra_need(c, 2, 2, 1));
    const kn_tensor *x = &c->in[0], *y = &c->in[1];
    if (y->dtype != KILN_DTYPE_INT64)
        return kn_error(KILN_ERR_DTYPE, "input Y must be int64");
    if (x->shape.rank < 1)
        return kn_error(KILN_ERR_SHAPE, "input X must have rank >= 1");
    kn_shape out = x->shape;
    if (out.rank == 1) {
        out.rank = 2;
        out.d[0] = 1;
    }
    out.d[out.rank - 1] = kn_tensor_numel(y);
    c->out[0] = (kn_tensor){.dtype = x->dtype, .shape = out};
    return KILN_OK;
}
