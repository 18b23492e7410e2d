/* int8 for a float model (see passes.h): the layers that can run as kiln.QConv / kiln.QMatMul,
 * and the QuantizeLinear / DequantizeLinear pairs that make them so once calibration has given
 * each of their tensors a scale. The pairs are those a QDQ model would carry (one pair per
 * tensor, read by every consumer; per-output-channel symmetric int8 weights), so
 * kn_pass_fuse_qdq turns them into int8 products the same way. */
#include "passes/passes.h"

#include "core/alloc.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static bool is_op(const kn_node *n, const char *op) {
    return !n->dead && n->domain[0] == '\0' && strcmp(n->op_type, op) == 0;
}

static bool const_f32(const kn_graph *g, int v, int rank) {
    return v >= 0 && kn_value_is_const(&g->values[v]) && g->values[v].dtype == KILN_DTYPE_FLOAT32 &&
           (rank < 0 || g->values[v].rank == rank);
}

static int count_readers(const kn_graph *g, int v, int *only) {
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead)
            for (int j = 0; j < g->nodes[i].n_in; j++)
                if (g->nodes[i].in[j] == v) {
                    n++;
                    *only = i;
                }
    return n;
}

/* Clip fuses into the product only with constant bounds. */
static bool fusable_act(const kn_graph *g, const kn_node *a) {
    if (is_op(a, "Relu"))
        return true;
    if (!is_op(a, "Clip"))
        return false;
    for (int j = 1; j < a->n_in && a->opset >= 11; j++)
        if (a->in[j] >= 0 && !const_f32(g, a->in[j], -1))
            return false;
    return true;
}

/* The product's own conditions (those of kn_pass_fuse_qdq). */
static bool product_fits(const kn_graph *g, const kn_node *n) {
    if (n->n_in < 2 || n->n_out != 1 || n->in[0] < 0 || kn_value_is_const(&g->values[n->in[0]]))
        return false;
    if (is_op(n, "Conv"))
        return const_f32(g, n->in[1], 4) && kn_attr_int(n, "group", 1) == 1 &&
               (n->n_in < 3 || n->in[2] < 0 || const_f32(g, n->in[2], 1));
    if (is_op(n, "Gemm"))
        return const_f32(g, n->in[1], 2) && kn_attr_int(n, "transA", 0) == 0 &&
               kn_attr_float(n, "alpha", 1.0f) == 1.0f && kn_attr_float(n, "beta", 1.0f) == 1.0f &&
               (n->n_in < 3 || n->in[2] < 0 || const_f32(g, n->in[2], 1));
    return is_op(n, "MatMul") && const_f32(g, n->in[1], 2);
}

kiln_status kn_int8_layers(const kn_graph *g, kn_int8_layer **out, int *n_out) {
    *out = NULL;
    *n_out = 0;
    kn_int8_layer *l = kn_calloc((size_t)g->n_nodes + 1, sizeof *l);
    if (l == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory listing int8 layers");
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *p = &g->nodes[i];
        if (!product_fits(g, p))
            continue;
        int y = p->out[0], a = -1;
        if (count_readers(g, y, &a) == 1 && !g->values[y].is_output &&
            fusable_act(g, &g->nodes[a]) && g->nodes[a].n_out == 1)
            y = g->nodes[a].out[0];
        /* A graph output keeps its name and its float value. */
        if (y < 0 || g->values[y].is_output)
            continue;
        l[n++] = (kn_int8_layer){.node = i, .x = p->in[0], .y = y};
    }
    *out = l;
    *n_out = n;
    return KILN_OK;
}

static int new_value(kn_graph *g, const char *base, const char *what) {
    char name[512];
    for (int k = 0;; k++) {
        snprintf(name, sizeof name, "%s/%s%s%.0d", base, what, k ? "_" : "", k);
        if (kn_graph_find_value(g, name) < 0)
            return kn_graph_add_value(g, name);
    }
}

static int new_const(kn_graph *g, const char *base, const char *what, const kn_tensor *t) {
    int v = new_value(g, base, what);
    if (v < 0 || kn_value_set_const(g, v, t) != KILN_OK)
        return -1;
    return v;
}

static kiln_status oom(void) {
    return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory quantizing to int8");
}

/* T -> QuantizeLinear -> DequantizeLinear -> T', and every reader of T reads T' instead. */
static kiln_status quantize_tensor(kn_graph *g, int t, const kn_int8_range *r) {
    char base[400];
    snprintf(base, sizeof base, "%s", g->values[t].name);
    float scale = r->scale;
    uint8_t zero = 0;
    kn_tensor ts = {.dtype = KILN_DTYPE_FLOAT32, .shape = {.rank = 0}, .data = &scale};
    kn_tensor tz = {.dtype = r->is_unsigned ? KILN_DTYPE_UINT8 : KILN_DTYPE_INT8,
                    .shape = {.rank = 0},
                    .data = &zero};
    int s = new_const(g, base, "int8_scale", &ts), z = new_const(g, base, "int8_zero", &tz);
    int q = s >= 0 && z >= 0 ? new_value(g, base, "int8") : -1;
    int dq = q >= 0 ? new_value(g, base, "int8_dequantized") : -1;
    if (dq < 0)
        return oom();
    int n_before = g->n_nodes;
    for (int i = 0; i < n_before; i++) {
        kn_node *n = &g->nodes[i];
        for (int j = 0; !n->dead && j < n->n_in; j++)
            if (n->in[j] == t)
                n->in[j] = dq;
    }
    char name[512];
    snprintf(name, sizeof name, "%s/int8_quantize", base);
    int in_q[3] = {t, s, z}, in_d[3] = {q, s, z};
    if (kn_graph_add_node(g, name, "QuantizeLinear", "", 13, 3, in_q, 1, &q) < 0)
        return oom();
    snprintf(name, sizeof name, "%s/int8_dequantize", base);
    if (kn_graph_add_node(g, name, "DequantizeLinear", "", 13, 3, in_d, 1, &dq) < 0)
        return oom();
    return KILN_OK;
}

/* The weight as int8 with one symmetric scale per output channel (axis), read through a
 * DequantizeLinear. */
static kiln_status quantize_weight(kn_graph *g, int node) {
    kn_node *p = &g->nodes[node];
    int w = p->in[1];
    kn_tensor t = kn_value_tensor(&g->values[w]);
    bool axis0 = is_op(p, "Conv") || (is_op(p, "Gemm") && kn_attr_int(p, "transB", 0) != 0);
    int64_t rows = t.shape.d[0], total = kn_tensor_numel(&t);
    int64_t ch = axis0 ? rows : t.shape.d[1], inner = axis0 ? total / (rows ? rows : 1) : 1;
    int64_t step = axis0 ? 1 : ch; /* between consecutive elements of one channel */
    const float *src = t.data;
    float *scale = kn_malloc((size_t)(ch ? ch : 1) * sizeof(float));
    int8_t *q = kn_malloc((size_t)(total ? total : 1));
    kiln_status rc = KILN_OK;
    if (scale == NULL || q == NULL) {
        rc = oom();
        goto out;
    }
    int64_t outer = total / (ch ? ch : 1);
    for (int64_t c = 0; c < ch; c++) {
        float amax = 0.0f;
        for (int64_t e = 0; e < outer; e++) {
            float v = fabsf(src[axis0 ? c * inner + e : e * step + c]);
            amax = v > amax ? v : amax;
        }
        scale[c] = amax > 0.0f ? amax / 127.0f : 1.0f;
        for (int64_t e = 0; e < outer; e++) {
            int64_t at = axis0 ? c * inner + e : e * step + c;
            float v = nearbyintf(src[at] / scale[c]);
            q[at] = (int8_t)(v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v);
        }
    }
    char base[400];
    snprintf(base, sizeof base, "%s", g->values[w].name);
    kn_tensor tq = {.dtype = KILN_DTYPE_INT8, .shape = t.shape, .data = q};
    kn_tensor ts = {.dtype = KILN_DTYPE_FLOAT32, .shape = {.rank = 1, .d = {ch}}, .data = scale};
    int vq = new_const(g, base, "int8", &tq), vs = new_const(g, base, "int8_scale", &ts);
    memset(q, 0, (size_t)ch); /* the zero points, after the weights are in place */
    kn_tensor tz = {.dtype = KILN_DTYPE_INT8, .shape = {.rank = 1, .d = {ch}}, .data = q};
    int vz = vq >= 0 && vs >= 0 ? new_const(g, base, "int8_zero", &tz) : -1;
    int dq = vz >= 0 ? new_value(g, base, "int8_dequantized") : -1;
    char name[512];
    snprintf(name, sizeof name, "%s/int8_dequantize", base);
    int in[3] = {vq, vs, vz};
    int d = dq >= 0 ? kn_graph_add_node(g, name, "DequantizeLinear", "", 13, 3, in, 1, &dq) : -1;
    kn_attr axis = {.name = "axis", .type = KN_ATTR_INT, .i = axis0 ? 0 : 1};
    if (d < 0 || kn_node_add_attr(g, d, &axis) != KILN_OK) {
        rc = oom();
        goto out;
    }
    g->nodes[node].in[1] = dq;
out:
    kn_free(scale);
    kn_free(q);
    return rc;
}

/* A MaxPool's output holds some of its input's values, so where the input has a grid the output
 * takes it, calibrated or not: its values are already on it (no rounding), and
 * kn_pass_elide_qdq then runs the pool on the int8 tensor. Nodes are in topological order, so
 * a chain of pools passes the grid along. */
static void pool_grids(const kn_graph *g, kn_int8_range *r) {
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (kn_pass_max_selects(n) && n->in[0] >= 0 && n->out[0] >= 0 && r[n->in[0]].scale > 0.0f)
            r[n->out[0]] = r[n->in[0]];
    }
}

kiln_status kn_pass_quantize_int8(kn_graph *g, const kn_int8_layer *layers, int n_layers,
                                  const kn_int8_range *calibrated) {
    int n_values = g->n_values;
    bool *done = kn_calloc((size_t)n_values + 1, sizeof(bool));
    kn_int8_range *ranges = kn_malloc(((size_t)n_values + 1) * sizeof *ranges);
    if (done == NULL || ranges == NULL) {
        kn_free(done);
        kn_free(ranges);
        return oom();
    }
    memcpy(ranges, calibrated, (size_t)n_values * sizeof *ranges);
    pool_grids(g, ranges);
    kiln_status rc = KILN_OK;
    for (int i = 0; i < n_layers && rc == KILN_OK; i++) {
        const kn_int8_layer *l = &layers[i];
        if (ranges[l->x].scale <= 0.0f || ranges[l->y].scale <= 0.0f)
            continue;
        for (int k = 0; k < 2 && rc == KILN_OK; k++) {
            int t = k == 0 ? l->x : l->y;
            if (!done[t])
                rc = quantize_tensor(g, t, &ranges[t]);
            done[t] = true;
        }
        if (rc == KILN_OK)
            rc = quantize_weight(g, l->node);
    }
    kn_free(done);
    kn_free(ranges);
    if (rc != KILN_OK)
        return rc;
    KN_TRY(kn_graph_toposort(g));
    return kn_pass_fuse_qdq(g);
}
