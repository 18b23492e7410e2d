/* RNN, GRU and LSTM on the CPU. The input projection X·W^T of every time step is one matrix
 * multiply; the recurrence then runs step by step with H·R^T per step. */
#include "backend/cpu/cpu.h"
#include "backend/cpu/math/gemm.h"
#include "backend/cpu/rnn/rnn_internal.h"
#include "core/alloc.h"

#include <math.h>
#include <string.h>
#include <strings.h>

enum {
    ACT_SIGMOID,
    ACT_TANH,
    ACT_RELU,
    ACT_AFFINE,
    ACT_LEAKY_RELU,
    ACT_THRESHOLDED_RELU,
    ACT_SCALED_TANH,
    ACT_HARD_SIGMOID,
    ACT_ELU,
    ACT_SOFTSIGN,
    ACT_SOFTPLUS
};

typedef struct rnn_act {
    int kind;
    float alpha, beta;
} rnn_act;

typedef struct act_desc {
    const char *name;
    int kind;
    int uses_alpha, uses_beta;
    float alpha, beta; /* defaults, as the matching ONNX operators have them */
} act_desc;

static const act_desc act_table[] = {
    {"Sigmoid", ACT_SIGMOID, 0, 0, 0.0f, 0.0f},
    {"Tanh", ACT_TANH, 0, 0, 0.0f, 0.0f},
    {"Relu", ACT_RELU, 0, 0, 0.0f, 0.0f},
    {"Affine", ACT_AFFINE, 1, 1, 1.0f, 0.0f},
    {"LeakyRelu", ACT_LEAKY_RELU, 1, 0, 0.01f, 0.0f},
    {"ThresholdedRelu", ACT_THRESHOLDED_RELU, 1, 0, 1.0f, 0.0f},
    {"ScaledTanh", ACT_SCALED_TANH, 1, 1, 1.0f, 1.0f},
    {"HardSigmoid", ACT_HARD_SIGMOID, 1, 1, 0.2f, 0.5f},
    {"Elu", ACT_ELU, 1, 0, 1.0f, 0.0f},
    {"Softsign", ACT_SOFTSIGN, 0, 0, 0.0f, 0.0f},
    {"Softplus", ACT_SOFTPLUS, 0, 0, 0.0f, 0.0f},
};

enum { KIND_RNN, KIND_GRU, KIND_LSTM };

/* Constant W and R packed once for the GEMM, per direction. For GRU without
 * linear_before_reset, r holds the z and r blocks and rh the h block of R. */
typedef struct rnn_packed {
    kn_gemm_packed *w[2], *r[2], *rh[2];
} rnn_packed;

typedef struct rnn_args {
    int kind, gates;
    int64_t seq, batch, in_size, hidden, dirs;
    int layout, reverse_only, lbr, input_forget, has_clip;
    float clip;
    rnn_act act[2][3];
    const float *x, *w, *r, *b, *h0, *c0, *p;
    const int32_t *lens;
    float *y, *yh, *yc;
    kn_threadpool *pool;
    const rnn_packed *packed;
} rnn_args;

static float act_apply(const rnn_act *a, float x) {
    switch (a->kind) {
    case ACT_SIGMOID:
        return 1.0f / (1.0f + expf(-x));
    case ACT_TANH:
        return tanhf(x);
    case ACT_RELU:
        return x > 0.0f ? x : 0.0f;
    case ACT_AFFINE:
        return a->alpha * x + a->beta;
    case ACT_LEAKY_RELU:
        return x >= 0.0f ? x : a->alpha * x;
    case ACT_THRESHOLDED_RELU:
        return x > a->alpha ? x : 0.0f;
    case ACT_SCALED_TANH:
        return a->alpha * tanhf(a->beta * x);
    case ACT_HARD_SIGMOID: {
        float v = a->alpha * x + a->beta;
        return v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v);
    }
    case ACT_ELU:
        return x >= 0.0f ? x : a->alpha * (expf(x) - 1.0f);
    case ACT_SOFTSIGN:
        return x / (1.0f + fabsf(x));
    default:
        return x > 20.0f ? x : log1pf(expf(x));
    }
}

/* Activation alphas and betas are consumed in order, only by the functions that take them. */
static kiln_status parse_activations(const kn_node *n, rnn_args *a, int per_dir) {
    static const int defaults[3][3] = {
        {ACT_TANH, 0, 0}, {ACT_SIGMOID, ACT_TANH, 0}, {ACT_SIGMOID, ACT_TANH, ACT_TANH}};
    const kn_attr *names = kn_node_attr(n, "activations");
    const float *alphas = NULL, *betas = NULL;
    int64_t n_alpha = kn_attr_floats(n, "activation_alpha", &alphas);
    int64_t n_beta = kn_attr_floats(n, "activation_beta", &betas);
    int64_t ia = 0, ib = 0;
    for (int d = 0; d < a->dirs; d++)
        for (int f = 0; f < per_dir; f++) {
            rnn_act *act = &a->act[d][f];
            if (names == NULL) {
                act->kind = defaults[a->kind][f];
                continue;
            }
            int64_t idx = names->n == per_dir ? f : d * per_dir + f;
            const act_desc *desc = NULL;
            for (size_t j = 0; j < sizeof act_table / sizeof act_table[0]; j++)
                if (strcasecmp(names->strings[idx], act_table[j].name) == 0)
                    desc = &act_table[j];
            if (desc == NULL)
                return kn_error(KILN_ERR_UNSUPPORTED, "activation '%s' is not supported",
                                names->strings[idx]);
            act->kind = desc->kind;
            act->alpha = desc->uses_alpha && ia < n_alpha ? alphas[ia++] : desc->alpha;
            act->beta = desc->uses_beta && ib < n_beta ? betas[ib++] : desc->beta;
        }
    return KILN_OK;
}

static kiln_status parse_args(kn_kernel_ctx *k, int kind, rnn_args *a) {
    const kn_node *n = k->node;
    memset(a, 0, sizeof *a);
    a->kind = kind;
    a->gates = kind == KIND_RNN ? 1 : (kind == KIND_GRU ? 3 : 4);
    a->layout = (int)kn_attr_int(n, "layout", 0);
    const char *dir = kn_attr_string(n, "direction", "forward");
    a->dirs = strcmp(dir, "bidirectional") == 0 ? 2 : 1;
    a->reverse_only = strcmp(dir, "reverse") == 0;
    a->lbr = (int)kn_attr_int(n, "linear_before_reset", 0);
    a->input_forget = (int)kn_attr_int(n, "input_forget", 0);
    const kn_attr *clip = kn_node_attr(n, "clip");
    a->has_clip = clip != NULL;
    a->clip = clip != NULL ? clip->f : 0.0f;
    const kn_shape *xs = &k->in[0].shape;
    a->seq = a->layout ? xs->d[1] : xs->d[0];
    a->batch = a->layout ? xs->d[0] : xs->d[1];
    a->in_size = xs->d[2];
    a->hidden = k->in[2].shape.d[2];
    if (k->in[1].shape.d[0] != a->dirs)
        return kn_error(KILN_ERR_SHAPE, "input W has %lld directions, expected %lld",
                        (long long)k->in[1].shape.d[0], (long long)a->dirs);
    a->x = k->in[0].data;
    a->w = k->in[1].data;
    a->r = k->in[2].data;
    a->b = k->n_in > 3 && k->in[3].dtype ? k->in[3].data : NULL;
    a->lens = k->n_in > 4 && k->in[4].dtype ? k->in[4].data : NULL;
    a->h0 = k->n_in > 5 && k->in[5].dtype ? k->in[5].data : NULL;
    if (kind == KIND_LSTM) {
        a->c0 = k->n_in > 6 && k->in[6].dtype ? k->in[6].data : NULL;
        a->p = k->n_in > 7 && k->in[7].dtype ? k->in[7].data : NULL;
    }
    a->y = k->n_out > 0 ? k->out[0].data : NULL;
    a->yh = k->n_out > 1 ? k->out[1].data : NULL;
    a->yc = k->n_out > 2 ? k->out[2].data : NULL;
    a->pool = k->pool;
    a->packed = k->state;
    if (a->lens != NULL)
        for (int64_t b = 0; b < a->batch; b++)
            if (a->lens[b] < 0 || a->lens[b] > a->seq)
                return kn_error(KILN_ERR_SHAPE, "sequence_lens[%lld] is %d; must be in [0, %lld]",
                                (long long)b, a->lens[b], (long long)a->seq);
    return parse_activations(n, a, kind == KIND_RNN ? 1 : (kind == KIND_GRU ? 2 : 3));
}

static inline float clipf(const rnn_args *a, float v) {
    if (!a->has_clip)
        return v;
    return v < -a->clip ? -a->clip : (v > a->clip ? a->clip : v);
}

/* Offset of the state row (direction d, batch b) in initial_h/c and Y_h/c. */
static inline int64_t state_off(const rnn_args *a, int64_t d, int64_t b) {
    return (a->layout ? b * a->dirs + d : d * a->batch + b) * a->hidden;
}

static inline int64_t y_off(const rnn_args *a, int64_t t, int64_t d, int64_t b) {
    if (a->layout)
        return ((b * a->seq + t) * a->dirs + d) * a->hidden;
    return ((t * a->dirs + d) * a->batch + b) * a->hidden;
}

/* Row of X (and of the projection) for time t, batch b. */
static inline int64_t x_row(const rnn_args *a, int64_t t, int64_t b) {
    return a->layout ? b * a->seq + t : t * a->batch + b;
}

typedef struct dir_work {
    const rnn_args *a;
    int64_t d;
    const float *xw;  /* projection + folded biases, [rows, G*H] */
    const float *hr;  /* H·R^T for this step, [batch, hr_cols] */
    const float *rbh; /* GRU with linear_before_reset: Rb of the h gate */
    float *h, *c;
    float *rh; /* GRU without linear_before_reset: r ⊙ H per batch */
    int64_t step;
} dir_work;

static inline int64_t seq_len(const rnn_args *a, int64_t b) {
    return a->lens != NULL ? a->lens[b] : a->seq;
}

static inline int dir_reverse(const rnn_args *a, int64_t d) {
    return a->reverse_only || d == 1;
}

static void rnn_cell(const dir_work *w, int64_t b, const float *g) {
    const rnn_args *a = w->a;
    const float *hr = w->hr + b * a->hidden;
    float *h = w->h + b * a->hidden;
    for (int64_t j = 0; j < a->hidden; j++)
        h[j] = act_apply(&a->act[w->d][0], clipf(a, g[j] + hr[j]));
}

/* First GRU phase: activated z and r into zr; without linear_before_reset also r ⊙ H, which
 * the h gate multiplies by Rh. */
static void gru_gates_zr(const dir_work *w, int64_t b, const float *g, float *zr) {
    const rnn_args *a = w->a;
    int64_t hs = a->hidden;
    const float *hr = w->hr + b * (a->lbr ? 3 * hs : 2 * hs);
    const float *h = w->h + b * hs;
    for (int64_t j = 0; j < 2 * hs; j++)
        zr[j] = act_apply(&a->act[w->d][0], clipf(a, g[j] + hr[j]));
    if (!a->lbr)
        for (int64_t j = 0; j < hs; j++)
            w->rh[b * hs + j] = zr[hs + j] * h[j];
}

static void gru_finish(const dir_work *w, int64_t b, const float *g, const float *zr,
                       const float *hr_h) {
    const rnn_args *a = w->a;
    int64_t hs = a->hidden;
    float *h = w->h + b * hs;
    for (int64_t j = 0; j < hs; j++) {
        float pre;
        if (a->lbr)
            pre = g[2 * hs + j] + zr[hs + j] * (hr_h[j] + (w->rbh ? w->rbh[j] : 0.0f));
        else
            pre = g[2 * hs + j] + hr_h[j];
        float ht = act_apply(&a->act[w->d][1], clipf(a, pre));
        float z = zr[j];
        h[j] = (1.0f - z) * ht + z * h[j];
    }
}

static void lstm_cell(const dir_work *w, int64_t b, const float *g) {
    const rnn_args *a = w->a;
    int64_t hs = a->hidden;
    const float *hr = w->hr + b * 4 * hs;
    float *h = w->h + b * hs;
    float *c = w->c + b * hs;
    const float *p = a->p != NULL ? a->p + w->d * 3 * hs : NULL;
    const rnn_act *f = &a->act[w->d][0], *gact = &a->act[w->d][1], *hact = &a->act[w->d][2];
    for (int64_t j = 0; j < hs; j++) {
        float cp = c[j];
        float pi = g[j] + hr[j] + (p ? p[j] * cp : 0.0f);
        float po = g[hs + j] + hr[hs + j];
        float pf = g[2 * hs + j] + hr[2 * hs + j] + (p ? p[2 * hs + j] * cp : 0.0f);
        float pc = g[3 * hs + j] + hr[3 * hs + j];
        float it = act_apply(f, clipf(a, pi));
        float ft = a->input_forget ? 1.0f - it : act_apply(f, clipf(a, pf));
        float ct = act_apply(gact, clipf(a, pc));
        float cn = ft * cp + it * ct;
        float ot = act_apply(f, clipf(a, po + (p ? p[hs + j] * cn : 0.0f)));
        c[j] = cn;
        h[j] = ot * act_apply(hact, cn);
    }
}

/* c = x·b^T with x [m, k] and b [n, k]; through the packed copy of b when there is one and
 * enough rows to pay for the GEMM. */
static kiln_status mm(const rnn_args *a, const float *x, int64_t m, const float *b,
                      const kn_gemm_packed *pb, float *c, int64_t n, int64_t k) {
    if (pb != NULL && m > 2) {
        kn_gemm_operand A = {.p = x, .ld = k}, B = {.packed = pb};
        return kn_gemm(a->pool, m, n, k, 1.0f, &A, &B, 0.0f, c, n, NULL);
    }
    return cpu_rnn_matmul_nt(a->pool, x, b, c, m, n, k);
}

/* Runs one direction. Scratch: xw [rows*G*H], hr [batch*G*H], rh [batch*H], zr [batch*2H]. */
static kiln_status run_direction(const rnn_args *a, int64_t d, float *xw, float *hr, float *rh,
                                 float *zr, float *h, float *c) {
    int64_t hs = a->hidden, gh = a->gates * hs, rows = a->seq * a->batch;
    const float *w = a->w + d * gh * a->in_size;
    const float *r = a->r + d * gh * hs;
    const rnn_packed *pk = a->packed;
    KN_TRY(mm(a, a->x, rows, w, pk ? pk->w[d] : NULL, xw, gh, a->in_size));
    const float *rbh = NULL;
    if (a->b != NULL) {
        const float *wb = a->b + d * 2 * gh, *rb = wb + gh;
        int split_h = a->kind == KIND_GRU && a->lbr;
        for (int64_t i = 0; i < rows; i++) {
            float *row = xw + i * gh;
            for (int64_t j = 0; j < gh; j++)
                row[j] += wb[j] + (split_h && j >= 2 * hs ? 0.0f : rb[j]);
        }
        if (split_h)
            rbh = rb + 2 * hs;
    }
    for (int64_t b = 0; b < a->batch; b++) {
        int64_t so = state_off(a, d, b);
        if (a->h0 != NULL)
            memcpy(h + b * hs, a->h0 + so, (size_t)hs * sizeof(float));
        else
            memset(h + b * hs, 0, (size_t)hs * sizeof(float));
        if (a->kind == KIND_LSTM) {
            if (a->c0 != NULL)
                memcpy(c + b * hs, a->c0 + so, (size_t)hs * sizeof(float));
            else
                memset(c + b * hs, 0, (size_t)hs * sizeof(float));
        }
    }
    dir_work wk = {.a = a, .d = d, .xw = xw, .hr = hr, .rbh = rbh, .h = h, .c = c, .rh = rh};
    int rev = dir_reverse(a, d);
    for (int64_t s = 0; s < a->seq; s++) {
        int64_t hr_cols = a->kind == KIND_GRU && !a->lbr ? 2 * hs : gh;
        KN_TRY(mm(a, h, a->batch, r, pk ? pk->r[d] : NULL, hr, hr_cols, hs));
        for (int64_t b = 0; b < a->batch; b++) {
            int64_t len = seq_len(a, b);
            if (s >= len)
                continue;
            int64_t t = rev ? len - 1 - s : s;
            const float *g = xw + x_row(a, t, b) * gh;
            if (a->kind == KIND_RNN)
                rnn_cell(&wk, b, g);
            else if (a->kind == KIND_LSTM)
                lstm_cell(&wk, b, g);
            else
                gru_gates_zr(&wk, b, g, zr + b * 2 * hs);
        }
        if (a->kind == KIND_GRU) {
            /* The h gate needs r first: (r ⊙ H)·Rh^T, unless H·Rh^T is already in hr. */
            if (!a->lbr)
                KN_TRY(mm(a, rh, a->batch, r + 2 * hs * hs, pk ? pk->rh[d] : NULL, hr, hs, hs));
            for (int64_t b = 0; b < a->batch; b++) {
                int64_t len = seq_len(a, b);
                if (s >= len)
                    continue;
                int64_t t = rev ? len - 1 - s : s;
                const float *g = xw + x_row(a, t, b) * gh;
                const float *hr_h = a->lbr ? hr + b * gh + 2 * hs : hr + b * hs;
                gru_finish(&wk, b, g, zr + b * 2 * hs, hr_h);
            }
        }
        if (a->y != NULL)
            for (int64_t b = 0; b < a->batch; b++) {
                int64_t len = seq_len(a, b);
                if (s >= len)
                    continue;
                int64_t t = rev ? len - 1 - s : s;
                memcpy(a->y + y_off(a, t, d, b), h + b * hs, (size_t)hs * sizeof(float));
            }
    }
    for (int64_t b = 0; b < a->batch; b++) {
        if (a->yh != NULL)
            memcpy(a->yh + state_off(a, d, b), h + b * hs, (size_t)hs * sizeof(float));
        if (a->yc != NULL)
            memcpy(a->yc + state_off(a, d, b), c + b * hs, (size_t)hs * sizeof(float));
    }
    return KILN_OK;
}

static kiln_status run_common(kn_kernel_ctx *k, int kind) {
    rnn_args a;
    KN_TRY(parse_args(k, kind, &a));
    if (a.y != NULL)
        memset(a.y, 0, kn_tensor_nbytes(&k->out[0]));
    int64_t hs = a.hidden, gh = a.gates * hs, rows = a.seq * a.batch;
    size_t n_floats =
        (size_t)(rows * gh + a.batch * gh + a.batch * hs + 2 * a.batch * hs + 2 * a.batch * hs);
    float *buf = kn_malloc((n_floats + 1) * sizeof(float));
    if (buf == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for %zu floats of scratch",
                        n_floats);
    float *xw = buf, *hr = xw + rows * gh, *rh = hr + a.batch * gh, *zr = rh + a.batch * hs;
    float *h = zr + 2 * a.batch * hs, *c = h + a.batch * hs;
    kiln_status rc = KILN_OK;
    for (int64_t d = 0; d < a.dirs && rc == KILN_OK; d++)
        rc = run_direction(&a, d, xw, hr, rh, zr, h, c);
    kn_free(buf);
    return rc;
}

kiln_status kn_cpu_run_rnn(kn_kernel_ctx *k) {
    return run_common(k, KIND_RNN);
}

kiln_status kn_cpu_run_gru(kn_kernel_ctx *k) {
    return run_common(k, KIND_GRU);
}

kiln_status kn_cpu_run_lstm(kn_kernel_ctx *k) {
    return run_common(k, KIND_LSTM);
}

void kn_cpu_rnn_release(void *state) {
    rnn_packed *p = state;
    if (p == NULL)
        return;
    for (int d = 0; d < 2; d++) {
        kn_gemm_packed_free(p->w[d]);
        kn_gemm_packed_free(p->r[d]);
        kn_gemm_packed_free(p->rh[d]);
    }
    kn_free(p);
}

kiln_status kn_cpu_rnn_prepare(const kn_node *node, int n_in, const kn_tensor *in, void **state) {
    *state = NULL;
    if (n_in < 3 || in[0].dtype != KILN_DTYPE_FLOAT32 || !in[1].data || !in[2].data)
        return KILN_OK;
    const kn_shape *ws = &in[1].shape, *rs = &in[2].shape;
    int gates = strcmp(node->op_type, "RNN") == 0 ? 1 : (strcmp(node->op_type, "GRU") ? 4 : 3);
    int64_t hs = rs->d[2], gh = gates * hs, dirs = ws->d[0];
    if (ws->rank != 3 || rs->rank != 3 || dirs < 1 || dirs > 2 || ws->d[1] != gh ||
        rs->d[0] != dirs || rs->d[1] != gh)
        return KILN_OK; /* inference reports the inconsistency */
    int split = gates == 3 && kn_attr_int(node, "linear_before_reset", 0) == 0;
    rnn_packed *p = kn_calloc(1, sizeof *p);
    if (p == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory packing RNN weights");
    kiln_status rc = KILN_OK;
    for (int64_t d = 0; d < dirs && rc == KILN_OK; d++) {
        const float *w = (const float *)in[1].data + d * gh * ws->d[2];
        const float *r = (const float *)in[2].data + d * gh * hs;
        rc = kn_gemm_pack_b(w, ws->d[2], true, ws->d[2], gh, &p->w[d]);
        if (rc == KILN_OK)
            rc = kn_gemm_pack_b(r, hs, true, hs, split ? 2 * hs : gh, &p->r[d]);
        if (rc == KILN_OK && split)
            rc = kn_gemm_pack_b(r + 2 * hs * hs, hs, true, hs, hs, &p->rh[d]);
    }
    if (rc != KILN_OK) {
        kn_cpu_rnn_release(p);
        return rc;
    }
    *state = p;
    return KILN_OK;
}
