/* RNN, GRU, LSTM: attribute checks and shape inference (opsets 7 onwards; layout from 14). */
#include "ops/op.h"

#include <string.h>
#include <strings.h>

typedef struct rnn_kind {
    const char *op;
    int gates;       /* weight blocks per direction: RNN 1, GRU 3, LSTM 4 */
    int activations; /* activation functions per direction */
    int has_c;       /* LSTM: initial_c input, Y_c output, P input */
} rnn_kind;

static const rnn_kind kind_rnn = {"RNN", 1, 1, 0};
static const rnn_kind kind_gru = {"GRU", 3, 2, 0};
static const rnn_kind kind_lstm = {"LSTM", 4, 3, 1};

static const char *const known_activations[] = {
    "Relu",       "Tanh",        "Sigmoid", "Affine",   "LeakyRelu", "ThresholdedRelu",
    "ScaledTanh", "HardSigmoid", "Elu",     "Softsign", "Softplus",
};

static kiln_status check_activations(const kn_node *n, const rnn_kind *k, int64_t dirs) {
    const kn_attr *a = kn_node_attr(n, "activations");
    if (a == NULL)
        return KILN_OK;
    if (a->type != KN_ATTR_STRINGS)
        return kn_error(KILN_ERR_MODEL, "attribute 'activations' must be a list of strings");
    if (a->n != k->activations && a->n != k->activations * dirs)
        return kn_error(KILN_ERR_MODEL,
                        "attribute 'activations' has %lld entries; %s with %lld direction(s) "
                        "needs %lld",
                        (long long)a->n, k->op, (long long)dirs,
                        (long long)(k->activations * dirs));
    for (int64_t i = 0; i < a->n; i++) {
        size_t j = 0;
        for (; j < sizeof known_activations / sizeof known_activations[0]; j++)
            if (strcasecmp(a->strings[i], known_activations[j]) == 0)
                break;
        if (j == sizeof known_activations / sizeof known_activations[0])
            return kn_error(KILN_ERR_UNSUPPORTED, "activation '%s' is not supported",
                            a->strings[i]);
    }
    return KILN_OK;
}

static kiln_status check_input(const kn_infer_ctx *c, int i, const char *name, int32_t rank,
                               const int64_t *dims) {
    const kn_tensor *t = &c->in[i];
    if (t->dtype != c->in[0].dtype)
        return kn_error(KILN_ERR_DTYPE, "input %s has dtype %s, expected %s like X", name,
                        kn_dtype_name(t->dtype), kn_dtype_name(c->in[0].dtype));
    if (t->shape.rank != rank)
        return kn_error(KILN_ERR_SHAPE, "input %s must have rank %d, got %d", name, rank,
                        t->shape.rank);
    for (int32_t d = 0; d < rank; d++)
        if (t->shape.d[d] != dims[d]) {
            char got[64];
            return kn_error(KILN_ERR_SHAPE, "input %s has shape %s; dim %d must be %lld", name,
                            kn_shape_str(&t->shape, got, sizeof got), d, (long long)dims[d]);
        }
    return KILN_OK;
}

static kiln_status infer_rnn_common(kn_infer_ctx *c, const rnn_kind *k) {
    const kn_node *n = c->node;
    int max_in = k->has_c ? 8 : 6;
    if (c->n_in < 3 || c->n_in > max_in)
        return kn_error(KILN_ERR_MODEL, "%s takes 3 to %d inputs, got %d", k->op, max_in, c->n_in);
    for (int i = 0; i < 3; i++)
        if (!kn_has_input(c, i))
            return kn_error(KILN_ERR_MODEL, "input %d (X, W, R) is required", i);
    if (c->in[0].dtype != KILN_DTYPE_FLOAT32)
        return kn_error(KILN_ERR_DTYPE, "input X has dtype %s; only float32 is supported",
                        kn_dtype_name(c->in[0].dtype));

    const char *dir = kn_attr_string(n, "direction", "forward");
    int64_t dirs;
    if (strcmp(dir, "forward") == 0 || strcmp(dir, "reverse") == 0)
        dirs = 1;
    else if (strcmp(dir, "bidirectional") == 0)
        dirs = 2;
    else
        return kn_error(KILN_ERR_MODEL,
                        "attribute 'direction' is '%s'; expected forward, "
                        "reverse or bidirectional",
                        dir);
    int64_t layout = kn_attr_int(n, "layout", 0);
    if (layout != 0 && (layout != 1 || n->opset < 14))
        return kn_error(KILN_ERR_MODEL, "attribute 'layout' is %lld; expected 0%s",
                        (long long)layout, n->opset >= 14 ? " or 1" : " before opset 14");
    KN_TRY(check_activations(n, k, dirs));
    const kn_attr *clip = kn_node_attr(n, "clip");
    if (clip != NULL && !(clip->f > 0.0f))
        return kn_error(KILN_ERR_MODEL, "attribute 'clip' must be positive, got %g",
                        (double)clip->f);
    if (k->gates == 3) {
        int64_t lbr = kn_attr_int(n, "linear_before_reset", 0);
        if (lbr != 0 && lbr != 1)
            return kn_error(KILN_ERR_MODEL, "attribute 'linear_before_reset' must be 0 or 1");
    }
    if (k->has_c) {
        int64_t fi = kn_attr_int(n, "input_forget", 0);
        if (fi != 0 && fi != 1)
            return kn_error(KILN_ERR_MODEL, "attribute 'input_forget' must be 0 or 1");
    }

    const kn_shape *xs = &c->in[0].shape;
    if (xs->rank != 3)
        return kn_error(KILN_ERR_SHAPE, "input X must have rank 3, got %d", xs->rank);
    int64_t seq = layout ? xs->d[1] : xs->d[0];
    int64_t batch = layout ? xs->d[0] : xs->d[1];
    int64_t in_size = xs->d[2];
    const kn_shape *rs = &c->in[2].shape;
    if (rs->rank != 3)
        return kn_error(KILN_ERR_SHAPE, "input R must have rank 3, got %d", rs->rank);
    int64_t hidden = rs->d[2];
    int64_t hs = kn_attr_int(n, "hidden_size", hidden);
    if (hs != hidden || hidden <= 0)
        return kn_error(KILN_ERR_SHAPE,
                        "hidden_size %lld does not match R's last dim %lld (must be positive)",
                        (long long)hs, (long long)hidden);
    int64_t gh = k->gates * hidden;
    KN_TRY(check_input(c, 1, "W", 3, (int64_t[]){dirs, gh, in_size}));
    KN_TRY(check_input(c, 2, "R", 3, (int64_t[]){dirs, gh, hidden}));
    if (kn_has_input(c, 3))
        KN_TRY(check_input(c, 3, "B", 2, (int64_t[]){dirs, 2 * gh}));
    if (kn_has_input(c, 4)) {
        const kn_tensor *sl = &c->in[4];
        if (sl->dtype != KILN_DTYPE_INT32)
            return kn_error(KILN_ERR_DTYPE, "input sequence_lens must be int32, got %s",
                            kn_dtype_name(sl->dtype));
        if (sl->shape.rank != 1 || sl->shape.d[0] != batch)
            return kn_error(KILN_ERR_SHAPE, "input sequence_lens must have shape [%lld]",
                            (long long)batch);
        if (sl->data != NULL)
            for (int64_t b = 0; b < batch; b++) {
                int32_t v = ((const int32_t *)sl->data)[b];
                if (v < 0 || v > seq)
                    return kn_error(KILN_ERR_SHAPE,
                                    "sequence_lens[%lld] is %d; must be in [0, %lld]", (long long)b,
                                    v, (long long)seq);
            }
    }
    int64_t state_dims[3] = {dirs, batch, hidden};
    if (layout) {
        state_dims[0] = batch;
        state_dims[1] = dirs;
    }
    if (kn_has_input(c, 5))
        KN_TRY(check_input(c, 5, "initial_h", 3, state_dims));
    if (k->has_c && kn_has_input(c, 6))
        KN_TRY(check_input(c, 6, "initial_c", 3, state_dims));
    if (k->has_c && kn_has_input(c, 7))
        KN_TRY(check_input(c, 7, "P", 2, (int64_t[]){dirs, 3 * hidden}));

    int max_out = k->has_c ? 3 : 2;
    if (c->n_out > max_out)
        return kn_error(KILN_ERR_MODEL, "%s has at most %d outputs, got %d", k->op, max_out,
                        c->n_out);
    for (int i = 0; i < c->n_out; i++) {
        kn_tensor *o = &c->out[i];
        o->dtype = KILN_DTYPE_FLOAT32;
        if (i == 0) {
            o->shape.rank = 4;
            int64_t y[4] = {seq, dirs, batch, hidden};
            if (layout) {
                y[0] = batch;
                y[1] = seq;
                y[2] = dirs;
            }
            memcpy(o->shape.d, y, sizeof y);
        } else {
            o->shape.rank = 3;
            memcpy(o->shape.d, state_dims, sizeof state_dims);
        }
    }
    return KILN_OK;
}

kiln_status kn_infer_rnn(kn_infer_ctx *c) {
    return infer_rnn_common(c, &kind_rnn);
}

kiln_status kn_infer_gru(kn_infer_ctx *c) {
    return infer_rnn_common(c, &kind_gru);
}

kiln_status kn_infer_lstm(kn_infer_ctx *c) {
    return infer_rnn_common(c, &kind_lstm);
}
