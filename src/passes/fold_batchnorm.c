/* Fold an inference BatchNormalization into the Conv or Gemm that feeds it:
 * y = s * (x - mean) + b with s = scale / sqrt(var + eps) is linear per output channel, so
 * W' = W * s (per output channel) and bias' = s * (bias - mean) + b. The producer then writes
 * the BatchNormalization's output directly and the BatchNormalization node dies. */
#include "passes/passes.h"

#include "core/alloc.h"

#include <math.h>
#include <string.h>

static bool const_f32(const kn_graph *g, int v, kn_shape *s) {
    return v >= 0 && g->values[v].dtype == KILN_DTYPE_FLOAT32 && kn_value_is_const(&g->values[v]) &&
           kn_value_shape(&g->values[v], s);
}

static int count_consumers(const kn_graph *g, int v) {
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *nd = &g->nodes[i];
        if (nd->dead)
            continue;
        for (int j = 0; j < nd->n_in; j++)
            n += nd->in[j] == v;
    }
    return n;
}

/* Per-channel s and t (y = s*x + t) from a BatchNormalization node; false if not foldable. */
static bool bn_coeffs(const kn_graph *g, const kn_node *bn, int64_t channels, float *s, float *t) {
    if (bn->n_in != 5 || kn_attr_int(bn, "training_mode", 0) != 0)
        return false;
    for (int i = 1; i < bn->n_out; i++)
        if (bn->out[i] >= 0)
            return false;
    const float *p[4];
    for (int i = 0; i < 4; i++) {
        kn_shape sh;
        if (!const_f32(g, bn->in[i + 1], &sh) || kn_shape_numel(&sh) != channels)
            return false;
        p[i] = g->values[bn->in[i + 1]].data;
    }
    float eps = kn_attr_float(bn, "epsilon", 1e-5f);
    for (int64_t c = 0; c < channels; c++) {
        s[c] = p[0][c] / sqrtf(p[3][c] + eps);
        t[c] = p[1][c] - p[2][c] * s[c];
    }
    return true;
}

/* New constant value holding `data` with shape s; returns its index or -1. */
static int new_const(kn_graph *g, const kn_shape *s, float *data) {
    int v = kn_graph_add_value(g, NULL);
    if (v < 0)
        return -1;
    kn_tensor t = {.dtype = KILN_DTYPE_FLOAT32, .shape = *s, .data = data};
    return kn_value_set_const(g, v, &t) == KILN_OK ? v : -1;
}

static kiln_status set_input(kn_graph *g, int node, int slot, int v) {
    kn_node *n = &g->nodes[node];
    if (slot >= n->n_in) {
        int *in =
            kn_realloc(n->in, (size_t)n->n_in * sizeof(int), (size_t)(slot + 1) * sizeof(int));
        if (in == NULL)
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory folding BatchNormalization");
        for (int i = n->n_in; i < slot; i++)
            in[i] = -1;
        n->in = in;
        n->n_in = slot + 1;
    }
    n->in[slot] = v;
    return KILN_OK;
}

/* Scales weights and builds the new bias for a Conv (channel = W dim 0) or a Gemm (channel =
 * column of op(B)); returns false (nothing changed) when the node does not qualify. */
static kiln_status fold_into(kn_graph *g, int pi, const float *s, const float *t, int64_t ch,
                             bool *done) {
    const kn_node *p = &g->nodes[pi];
    bool conv = strcmp(p->op_type, "Conv") == 0;
    kn_shape ws, bs = {0};
    *done = false;
    if (p->n_in < 2 || !const_f32(g, p->in[1], &ws))
        return KILN_OK;
    int bias_v = p->n_in > 2 ? p->in[2] : -1;
    if (bias_v >= 0 && (!const_f32(g, bias_v, &bs) || kn_shape_numel(&bs) != ch))
        return KILN_OK;
    bool tb = !conv && kn_attr_int(p, "transB", 0) != 0;
    float beta = conv ? 1.0f : kn_attr_float(p, "beta", 1.0f);
    if (conv ? (ws.rank < 3 || ws.d[0] != ch) : (ws.rank != 2 || ws.d[tb ? 0 : 1] != ch))
        return KILN_OK;
    if (!conv && (beta == 0.0f || (bias_v >= 0 && bs.rank > 1 && bs.d[0] != 1)))
        return KILN_OK;
    int64_t nw = kn_shape_numel(&ws);
    float *w = kn_malloc((size_t)nw * sizeof(float)), *b = kn_malloc((size_t)ch * sizeof(float));
    kiln_status rc = KILN_OK;
    if (w == NULL || b == NULL) {
        rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory folding BatchNormalization");
        goto out;
    }
    const float *w0 = g->values[p->in[1]].data;
    const float *b0 = bias_v >= 0 ? g->values[bias_v].data : NULL;
    int64_t per = nw / ch;
    for (int64_t i = 0; i < nw; i++) {
        int64_t c = conv || tb ? i / per : i % ch;
        w[i] = w0[i] * s[c];
    }
    /* Gemm adds beta * C, so its new C is divided by beta to come out right. */
    for (int64_t c = 0; c < ch; c++)
        b[c] = (b0 != NULL ? b0[c] : 0.0f) * s[c] + t[c] / beta;
    kn_shape bshape = {.rank = 1, .d = {ch}};
    int wv = new_const(g, &ws, w), bv = new_const(g, &bshape, b);
    if (wv < 0 || bv < 0) {
        rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory folding BatchNormalization");
        goto out;
    }
    g->nodes[pi].in[1] = wv;
    if ((rc = set_input(g, pi, 2, bv)) == KILN_OK)
        *done = true;
out:
    kn_free(w);
    kn_free(b);
    return rc;
}

kiln_status kn_pass_fold_batchnorm(kn_graph *g) {
    for (int i = 0; i < g->n_nodes; i++) {
        kn_node *bn = &g->nodes[i];
        if (bn->dead || strcmp(bn->op_type, "BatchNormalization") != 0 || bn->domain[0] != '\0' ||
            bn->n_in < 1 || bn->n_out < 1)
            continue;
        int x = bn->in[0];
        if (x < 0 || g->values[x].is_output || g->values[x].producer < 0)
            continue;
        int pi = g->values[x].producer;
        const kn_node *p = &g->nodes[pi];
        bool conv = strcmp(p->op_type, "Conv") == 0, gemm = strcmp(p->op_type, "Gemm") == 0;
        if (p->dead || p->domain[0] != '\0' || !(conv || gemm) || p->n_out != 1 ||
            kn_node_attr(p, "kiln_activation") != NULL || kn_node_attr(p, "kiln_residual") != NULL)
            continue;
        if (count_consumers(g, x) != 1)
            continue;
        kn_shape ws;
        if (!const_f32(g, p->in[1], &ws))
            continue;
        bool tb = gemm && kn_attr_int(p, "transB", 0) != 0;
        int64_t ch = conv ? ws.d[0] : ws.d[tb ? 0 : 1];
        if (gemm && ws.rank != 2)
            continue;
        float *st = kn_malloc((size_t)(2 * ch + 1) * sizeof(float));
        if (st == NULL)
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory folding BatchNormalization");
        bool done = false;
        kiln_status rc = KILN_OK;
        if (bn_coeffs(g, bn, ch, st, st + ch))
            rc = fold_into(g, pi, st, st + ch, ch, &done);
        kn_free(st);
        KN_TRY(rc);
        if (!done)
            continue;
        bn = &g->nodes[i];
        int y = bn->out[0];
        g->nodes[pi].out[0] = y;
        g->values[y].producer = pi;
        g->values[x].producer = -1;
        bn->dead = true;
    }
    return KILN_OK;
}
