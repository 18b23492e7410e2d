/* NHWC for 16-bit convolutions (design cuda.md §3): cuDNN's float16/bfloat16 tensor-core
 * convolutions work in NHWC and reorder NCHW tensors around every call otherwise. This pass
 * picks the float16/bfloat16 activations that are stored NHWC in memory: values of rank 4 whose
 * producer and every reader run on a backend that takes NHWC there (kn_caps.layouts has
 * KN_LAYOUT_NHWC_BIT). Shapes do not change: a value keeps its NCHW shape [N, C, H, W] and only
 * its bytes are ordered [N, H, W, C], so shape inference, memory planning and every other pass
 * are untouched; the kernels at both ends read the node attribute
 *
 *   kiln_nhwc (ints) = {in_mask, out_mask}: bit j set when input / output j is stored NHWC
 *
 * (input 1 of a convolution: its weights [K, C/g, R, S] stored as [K, R, S, C/g], permuted here
 * once). Which inputs and outputs follow the layout depends on the op:
 *   Conv, kiln.FusedConv,       X, the residual Z and Y share one layout (weights permuted)
 *   kiln.FusedDepthwiseConv
 *   MaxPool, AveragePool        X and Y share one layout
 *   GlobalAveragePool/MaxPool   X may be NHWC; Y ([N, C, 1, 1]) is the same bytes either way
 *   element-wise ops and kiln.FusedElementwise
 *                               every input and output of rank-4 extent shares one layout
 *   Cast                        X and Y each either: the reformat at a region's edge
 * A value whose bytes are the same in both orders (C = 1, or H = W = 1) needs no layout. Every
 * other reader (a copy to the host, Reshape, Concat, a graph output, a host node) reads NCHW:
 * the values it reads stay NCHW, and so, through the shared layouts, does everything joined to
 * them, so the layouts are always consistent and a region ends only at a Cast (the graph's input
 * cast, merged with the transpose) or where its values lose their spatial extent (global
 * pooling). The CPU backend offers NHWC for its bf16 convs that read activations in place
 * (AMX tiles loading rows of pixels), its bf16 max pool and the Casts at their regions' edges;
 * a float32 build is unchanged. */
#include "core/alloc.h"
#include "ir/placement.h"
#include "ops/fused_elementwise.h"
#include "ops/op.h"
#include "plugin/plugin.h"
#include "passes/passes.h"
#include "shape/resolve.h"

#include <stdio.h>
#include <string.h>

typedef enum role { R_NONE = 0, R_CONV, R_POOL, R_GPOOL, R_EW, R_CAST } role;

static role role_of(const kn_node *n) {
    bool onnx = n->domain[0] == '\0', kiln = strcmp(n->domain, "kiln") == 0;
    if ((onnx && strcmp(n->op_type, "Conv") == 0) ||
        (kiln &&
         (strcmp(n->op_type, "FusedConv") == 0 || strcmp(n->op_type, "FusedDepthwiseConv") == 0)))
        return R_CONV;
    if (onnx && (strcmp(n->op_type, "MaxPool") == 0 || strcmp(n->op_type, "AveragePool") == 0))
        return R_POOL;
    if (onnx &&
        (strcmp(n->op_type, "GlobalAveragePool") == 0 || strcmp(n->op_type, "GlobalMaxPool") == 0))
        return R_GPOOL;
    if (onnx && strcmp(n->op_type, "Cast") == 0)
        return R_CAST;
    if (kiln && strcmp(n->op_type, KN_FUSED_OP) == 0)
        return R_EW;
    const kn_op_schema *op = onnx ? kn_op_find("", n->op_type) : NULL;
    return op != NULL && (op->flags & KN_OP_ELEMENTWISE) ? R_EW : R_NONE;
}

/* Whether input j (output j when out) of a node in role r follows the node's layout. */
static bool carries(const kn_node *n, role r, int j, bool out) {
    switch (r) {
    case R_CONV:
        return j == 0 || (!out && j == 3 && kn_attr_int(n, "kiln_residual", 0) != 0);
    case R_POOL:
    case R_CAST:
        return j == 0;
    case R_GPOOL:
        return !out && j == 0;
    case R_EW:
        return true;
    default:
        return false;
    }
}

typedef struct layout {
    kn_graph *g;
    const kn_resolved *const *at;
    int n_at;
    role *roles;  /* per node */
    bool *nhwc;   /* per node: its backend takes NHWC for it */
    bool *marked; /* per value: stored NHWC */
} layout;

/* Whether the bytes of value v differ between NCHW and NHWC at some resolution: rank 4 (right-
 * aligned to rank 4 when it is an element-wise input, broadcast) with C > 1 and H * W > 1.
 * Unknown shapes count as sensitive. */
static bool sensitive(const layout *L, int v) {
    for (int r = 0; r < L->n_at; r++) {
        const kn_resolved *x = &L->at[r][v];
        if (!x->known)
            return true;
        const kn_shape *s = &x->t.shape;
        if (s->rank > 4)
            return true;
        int64_t d[4] = {1, 1, 1, 1};
        for (int k = 0; k < s->rank; k++)
            d[4 - s->rank + k] = s->d[k];
        if (d[1] > 1 && d[2] * d[3] > 1)
            return true;
    }
    return false;
}

/* Whether v could be stored NHWC at all: a 16-bit float of rank 4 made by a node, known at
 * every resolution, not a graph output. */
static bool markable(const layout *L, int v) {
    const kn_value *x = &L->g->values[v];
    if (x->is_output || x->is_input || x->producer < 0 || kn_value_is_const(x) ||
        (x->dtype != KILN_DTYPE_FLOAT16 && x->dtype != KILN_DTYPE_BFLOAT16))
        return false;
    for (int r = 0; r < L->n_at; r++)
        if (!L->at[r][v].known || L->at[r][v].t.shape.rank != 4)
            return false;
    return true;
}

/* Whether node i's backend runs it with NHWC tensors at every resolution. */
static bool takes_nhwc(const layout *L, int i) {
    const kn_node *n = &L->g->nodes[i];
    if (n->dead || L->roles[i] == R_NONE || kn_is_plugin_node(n) ||
        kn_node_copy_kind(n) != KN_COPY_NONE)
        return false;
    if (L->roles[i] == R_CONV &&
        (n->n_in < 2 || n->in[1] < 0 || !kn_value_is_const(&L->g->values[n->in[1]])))
        return false; /* its weights are permuted at build */
    kn_backend *b;
    if (kn_backend_get(kn_node_backend(n), &b) != KILN_OK)
        return false;
    kn_tensor in[KN_MAX_NODE_IO], out[KN_MAX_NODE_IO];
    for (int r = 0; r < L->n_at; r++) {
        for (int j = 0; j < n->n_in; j++) {
            in[j] = n->in[j] >= 0 ? L->at[r][n->in[j]].t : (kn_tensor){0};
            if (n->in[j] >= 0 && !L->at[r][n->in[j]].known)
                return false;
        }
        for (int j = 0; j < n->n_out; j++)
            out[j] = n->out[j] >= 0 ? L->at[r][n->out[j]].t : (kn_tensor){0};
        kn_caps caps;
        if (!kn_backend_supports(b, n, n->n_in, in, n->n_out, out, &caps) ||
            !(caps.layouts & KN_LAYOUT_NHWC_BIT))
            return false;
    }
    return true;
}

/* One sweep of the constraints; true when it unmarked something. */
static bool sweep(layout *L) {
    kn_graph *g = L->g;
    bool changed = false;
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        role r = L->nhwc[i] ? L->roles[i] : R_NONE;
        bool any_marked = false, any_plain = false;
        for (int side = 0; side < 2; side++) {
            int count = side ? n->n_out : n->n_in;
            const int *vals = side ? n->out : n->in;
            for (int j = 0; j < count; j++) {
                int v = vals[j];
                if (v < 0)
                    continue;
                if (!carries(n, r, j, side == 1)) {
                    changed |= L->marked[v];
                    L->marked[v] = false; /* read or made in NCHW */
                } else if (L->marked[v]) {
                    any_marked = true;
                } else if (sensitive(L, v)) {
                    any_plain = true;
                }
            }
        }
        if (r == R_CAST || !any_marked || !any_plain)
            continue;
        /* One layout per node: what cannot be NHWC makes the rest NCHW. */
        for (int side = 0; side < 2; side++) {
            int count = side ? n->n_out : n->n_in;
            const int *vals = side ? n->out : n->in;
            for (int j = 0; j < count; j++)
                if (vals[j] >= 0 && carries(n, r, j, side == 1) && L->marked[vals[j]]) {
                    L->marked[vals[j]] = false;
                    changed = true;
                }
        }
    }
    return changed;
}

/* Constant w [K, C, R, S] as a new constant [K, R, S, C] in memory (same shape record). */
static int permuted_weights(kn_graph *g, int w) {
    char name[512];
    snprintf(name, sizeof name, "%s:khwc", g->values[w].name);
    int out = kn_graph_add_value(g, kn_graph_find_value(g, name) < 0 ? name : NULL);
    if (out < 0)
        return -1;
    kn_tensor src = kn_value_tensor(&g->values[w]);
    if (src.shape.rank != 4)
        return -1;
    int64_t k = src.shape.d[0], c = src.shape.d[1], hw = src.shape.d[2] * src.shape.d[3];
    size_t es = kn_dtype_size(src.dtype);
    int64_t n = k * c * hw;
    uint8_t *d = kn_malloc((size_t)(n > 0 ? n : 1) * es);
    if (d == NULL)
        return -1;
    const uint8_t *s = src.data;
    for (int64_t a = 0; a < k; a++)
        for (int64_t b = 0; b < c; b++)
            for (int64_t p = 0; p < hw; p++)
                memcpy(d + (size_t)(((a * hw) + p) * c + b) * es,
                       s + (size_t)(((a * c) + b) * hw + p) * es, es);
    kn_tensor t = {.dtype = src.dtype, .shape = src.shape, .data = d};
    kiln_status rc = kn_value_set_const(g, out, &t);
    kn_free(d);
    return rc == KILN_OK ? out : -1;
}

/* Record the masks of node i; a convolution in NHWC gets its permuted weights. */
static kiln_status record(layout *L, int i, int *n_nodes) {
    kn_graph *g = L->g;
    kn_node *n = &g->nodes[i];
    int64_t mask[2] = {0, 0};
    for (int j = 0; j < n->n_in && j < 32; j++)
        if (n->in[j] >= 0 && L->marked[n->in[j]])
            mask[0] |= (int64_t)1 << j;
    for (int j = 0; j < n->n_out && j < 32; j++)
        if (n->out[j] >= 0 && L->marked[n->out[j]])
            mask[1] |= (int64_t)1 << j;
    if (mask[0] == 0 && mask[1] == 0)
        return KILN_OK;
    if (L->roles[i] == R_CONV || L->roles[i] == R_POOL) {
        /* the whole node runs NHWC (a side of extent 1x1 is the same bytes either way) */
        mask[0] |= 1;
        mask[1] |= 1;
        if (L->roles[i] == R_CONV && n->n_in > 3 && n->in[3] >= 0 &&
            kn_attr_int(n, "kiln_residual", 0) != 0)
            mask[0] |= 1 << 3;
    }
    if (L->roles[i] == R_CONV) {
        int w = permuted_weights(g, n->in[1]);
        if (w < 0)
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory permuting weights to NHWC");
        g->nodes[i].in[1] = w;
        mask[0] |= 1 << 1;
    }
    kn_attr a = {.name = "kiln_nhwc", .type = KN_ATTR_INTS, .n = 2, .ints = mask};
    (*n_nodes)++;
    return kn_node_set_attr(g, i, &a);
}

kiln_status kn_pass_layout_nhwc(kn_graph *g, const struct kn_resolved *const *at, int n_at,
                                int *n_nhwc) {
    *n_nhwc = 0;
    layout L = {.g = g, .at = at, .n_at = n_at};
    int n_values = g->n_values;
    L.roles = kn_calloc((size_t)g->n_nodes + 1, sizeof *L.roles);
    L.nhwc = kn_calloc((size_t)g->n_nodes + 1, sizeof *L.nhwc);
    L.marked = kn_calloc((size_t)n_values + 1, sizeof *L.marked);
    kiln_status rc = KILN_OK;
    if (L.roles == NULL || L.nhwc == NULL || L.marked == NULL) {
        rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory choosing layouts");
        goto out;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        L.roles[i] = g->nodes[i].dead ? R_NONE : role_of(&g->nodes[i]);
        L.nhwc[i] = L.roles[i] != R_NONE && takes_nhwc(&L, i);
    }
    /* Start from every value a node that takes NHWC could make so, then take back what some
     * reader or a shared layout forbids until nothing changes. */
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; L.nhwc[i] && j < g->nodes[i].n_out; j++) {
            int v = g->nodes[i].out[j];
            if (v >= 0 && carries(&g->nodes[i], L.roles[i], j, true) && markable(&L, v) &&
                sensitive(&L, v))
                L.marked[v] = true;
        }
    while (sweep(&L))
        ;
    for (int i = 0, n = g->n_nodes; i < n && rc == KILN_OK; i++)
        if (!g->nodes[i].dead)
            rc = record(&L, i, n_nhwc);
out:
    kn_free(L.roles);
    kn_free(L.nhwc);
    kn_free(L.marked);
    return rc;
}
