/* Reduced precision (TensorRT's FP16/BF16 modes with precision constraints): after placement
 * and fusion, every float32 node whose backend offers float16 (or bfloat16) for it runs in that
 * type, unless an override or the keep-float32 list holds it back. Only the edges change: a
 * lowered node reads reduced-precision values (its float32 constants converted once, other
 * float32 inputs through a Cast), and every float32 reader of a lowered node's output gets it
 * through a Cast. Shape inference then gives every value its dtype, so no kernel or op changes
 * to take part: a backend only says, in kn_caps.lower, which nodes it runs in reduced
 * precision. A backend whose products compute in float32 but read narrow weights (the CPU's
 * bf16 GEMM rounds activations as it packs them) says so in kn_caps.lower_weights: then only
 * the constant weights change type, which halves their bytes in the plan and costs no Casts. */
#include "core/alloc.h"
#include "ir/placement.h"
#include "ops/op.h"
#include "passes/passes.h"
#include "plugin/plugin.h"
#include "shape/resolve.h"

#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* Ops whose results lose too much in 16 bits (long sums, powers, running sums): float32
 * whatever the backend offers. */
static bool keep_fp32(const kn_node *n) {
    static const char *const ops[] = {"ReduceSum", "ReduceSumSquare", "ReduceL1",
                                      "ReduceL2",  "ReduceLogSum",    "ReduceLogSumExp",
                                      "Pow",       "CumSum",          "Range"};
    return n->domain[0] == '\0' && kn_op_is_one_of(n, ops, sizeof ops / sizeof ops[0]);
}

/* The precision asked for node n: the global one, or the last override matching its name. */
static int wanted(const kn_node *n, int precision, const kn_layer_precision *layers, int n_layers) {
    for (int k = n_layers - 1; k >= 0; k--)
        if (fnmatch(layers[k].pattern, n->name, 0) == 0)
            return layers[k].precision;
    return precision;
}

/* Whether every float input and output of node i is float32, with at least one float input
 * and one float output (a comparison's bool result gains nothing from 16-bit inputs). */
static bool all_float32(const kn_graph *g, const kn_node *n) {
    int floats = 0, float_out = 0;
    for (int j = 0; j < n->n_in; j++) {
        int v = n->in[j];
        if (v >= 0 && kn_dtype_is_float(g->values[v].dtype)) {
            if (g->values[v].dtype != KILN_DTYPE_FLOAT32)
                return false;
            floats++;
        }
    }
    for (int j = 0; j < n->n_out; j++) {
        int v = n->out[j];
        if (v >= 0 && kn_dtype_is_float(g->values[v].dtype)) {
            if (g->values[v].dtype != KILN_DTYPE_FLOAT32)
                return false;
            float_out++;
        }
    }
    return floats > 0 && float_out > 0;
}

/* Whether a float32 constant input of n holds a finite value float16 cannot represent (an
 * attention mask's -3.4e38 would become -inf there, and 0 * -inf NaN). */
static bool const_overflows_half(const kn_graph *g, const kn_node *n) {
    for (int j = 0; j < n->n_in; j++) {
        int v = n->in[j];
        if (v < 0 || g->values[v].dtype != KILN_DTYPE_FLOAT32 || !kn_value_is_const(&g->values[v]))
            continue;
        kn_tensor t = kn_value_tensor(&g->values[v]);
        const float *f = t.data;
        for (int64_t i = 0, n_el = kn_tensor_numel(&t); i < n_el; i++)
            if (isfinite(f[i]) && fabsf(f[i]) > 65504.0f)
                return true;
    }
    return false;
}

/* The backend's offer for node i, the same at every resolution. */
typedef struct offer {
    uint32_t lower, weights; /* KN_LOWER_* bits: the whole node, its weights alone */
    uint32_t region;         /* of lower: only inside a region worth its edges' Casts */
    uint32_t widen;          /* of weights: widened to float32 at load */
    double work;             /* multiply-adds per output element (kn_caps.lower_work) */
    const char *keep_fp32;
} offer;

static offer offered(const kn_graph *g, int i, const kn_resolved *const *at, int n_at) {
    const kn_node *n = &g->nodes[i];
    offer o = {0};
    kn_backend *b;
    if (kn_backend_get(kn_node_backend(n), &b) != KILN_OK)
        return o;
    kn_tensor in[KN_MAX_NODE_IO], out[KN_MAX_NODE_IO];
    o.lower = o.weights = o.widen = o.region = KN_LOWER_FP16 | KN_LOWER_BF16;
    for (int r = 0; r < n_at && (o.lower || o.weights); r++) {
        for (int j = 0; j < n->n_in; j++) {
            in[j] = n->in[j] >= 0 ? at[r][n->in[j]].t : (kn_tensor){0};
            if (n->in[j] >= 0 && !at[r][n->in[j]].known)
                return (offer){0};
        }
        for (int j = 0; j < n->n_out; j++)
            out[j] = n->out[j] >= 0 ? at[r][n->out[j]].t : (kn_tensor){0};
        kn_caps caps;
        if (!kn_backend_supports(b, n, n->n_in, in, n->n_out, out, &caps))
            return (offer){0};
        o.lower &= caps.lower;
        o.region &= caps.lower_region;
        o.work = caps.lower_work > o.work ? caps.lower_work : o.work;
        o.weights &= caps.lower_weights;
        o.widen &= caps.widen_weights;
        if (caps.keep_fp32 != NULL)
            o.keep_fp32 = caps.keep_fp32;
    }
    return o;
}

typedef struct lowering {
    kn_graph *g;
    int32_t dtype;   /* KILN_DTYPE_FLOAT16 or BFLOAT16 */
    const char *tag; /* "fp16" or "bf16" */
    bool *lowered;   /* per node (of the original graph) */
    bool *weights;   /* per node: only its constant input 1 is converted */
    bool *widen;     /* per node: ... and widened back to float32 at load */
    /* per node lowered by a region offer (offer.region): its work, and the weights offer it
     * falls back to when its region does not pay */
    bool *region, *region_weights, *region_widen;
    double *work;
    int n_nodes;  /* nodes of the original graph */
    int *reduced; /* per original value: its reduced-precision twin, or -1 */
    int *widened; /* per value: its float32 twin made by a Cast, or -1 */
} lowering;

/* A Cast of v to dtype `to`, run on the backend of node `where`. */
static int add_cast(lowering *L, int v, int32_t to, int where, const char *suffix) {
    kn_graph *g = L->g;
    char name[512];
    snprintf(name, sizeof name, "%s:%s", g->values[v].name, suffix);
    int out = kn_graph_add_value(g, kn_graph_find_value(g, name) < 0 ? name : NULL);
    if (out < 0)
        return -1;
    int in = v;
    int node = kn_graph_add_node(g, name, "Cast", "", 21, 1, &in, 1, &out);
    if (node < 0)
        return -1;
    kn_attr to_attr = {.name = "to", .type = KN_ATTR_INT, .i = to};
    if (kn_node_add_attr(g, node, &to_attr) != KILN_OK ||
        kn_node_copy_placement(g, node, where) != KILN_OK)
        return -1;
    return out;
}

/* A constant float32 value converted once. */
static int convert_const(lowering *L, int v) {
    kn_graph *g = L->g;
    char name[512];
    snprintf(name, sizeof name, "%s:%s", g->values[v].name, L->tag);
    int out = kn_graph_add_value(g, kn_graph_find_value(g, name) < 0 ? name : NULL);
    if (out < 0)
        return -1;
    kn_tensor src = kn_value_tensor(&g->values[v]);
    int64_t n = kn_tensor_numel(&src);
    kn_tensor t = {.dtype = L->dtype, .shape = src.shape};
    uint16_t *d = kn_malloc((size_t)(n > 0 ? n : 1) * sizeof(uint16_t));
    if (d == NULL)
        return -1;
    const float *f = src.data;
    for (int64_t i = 0; i < n; i++)
        d[i] = L->dtype == KILN_DTYPE_FLOAT16 ? kn_float_to_half(f[i]) : kn_float_to_bf16(f[i]);
    t.data = d;
    kiln_status rc = kn_value_set_const(g, out, &t);
    kn_free(d);
    return rc == KILN_OK ? out : -1;
}

/* Inputs ONNX types as float32 whatever the data's type: Resize's roi and scales. */
static bool fixed_float32(const kn_node *n, int j) {
    return n->domain[0] == '\0' && strcmp(n->op_type, "Resize") == 0 && n->opset >= 11 &&
           (j == 1 || j == 2);
}

/* Node i (lowered) reads every float32 input in reduced precision. */
static kiln_status narrow_inputs(lowering *L, int i) {
    kn_graph *g = L->g;
    for (int j = 0; j < g->nodes[i].n_in; j++) {
        int v = g->nodes[i].in[j];
        if (v < 0 || g->values[v].dtype != KILN_DTYPE_FLOAT32 || fixed_float32(&g->nodes[i], j))
            continue;
        int p = g->values[v].producer;
        if (p >= 0 && p < L->n_nodes && L->lowered[p])
            continue; /* already made in reduced precision */
        if (L->reduced[v] < 0)
            L->reduced[v] = kn_value_is_const(&g->values[v]) ? convert_const(L, v)
                                                             : add_cast(L, v, L->dtype, i, L->tag);
        if (L->reduced[v] < 0)
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory lowering precision");
        g->nodes[i].in[j] = L->reduced[v];
    }
    return KILN_OK;
}

/* Node i (weights lowered) reads its constant input 1 in reduced precision, the rest as is;
 * kiln_compute = "fp32" where it widens them at load (L->widen). */
static kiln_status narrow_weights(lowering *L, int i) {
    kn_graph *g = L->g;
    int v = g->nodes[i].in[1];
    if (L->reduced[v] < 0)
        L->reduced[v] = convert_const(L, v);
    if (L->reduced[v] < 0)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory lowering precision");
    g->nodes[i].in[1] = L->reduced[v];
    KN_TRY(kn_node_set_attr_string(g, i, "kiln_weights", L->tag));
    if (L->widen[i])
        KN_TRY(kn_node_set_attr_string(g, i, "kiln_compute", "fp32"));
    return kn_node_set_attr_string(g, i, "kiln_precision", L->tag);
}

/* Whether node n's input 1 is a float32 constant (the weights a backend may hold narrower). */
static bool const_weights(const kn_graph *g, const kn_node *n) {
    int v = n->n_in > 1 ? n->in[1] : -1;
    return v >= 0 && g->values[v].dtype == KILN_DTYPE_FLOAT32 && kn_value_is_const(&g->values[v]);
}

/* Float32 readers of what lowered node i makes get it through a Cast on i's side; a graph
 * output keeps its name and dtype (the node makes a twin, the Cast writes the output). */
static kiln_status widen_outputs(lowering *L, int i) {
    kn_graph *g = L->g;
    for (int o = 0; o < g->nodes[i].n_out; o++) {
        int v = g->nodes[i].out[o];
        if (v < 0 || g->values[v].dtype != KILN_DTYPE_FLOAT32)
            continue;
        int wide = -1;
        if (g->values[v].is_output) {
            /* i writes a new value; the Cast writes v under its own name */
            int twin = kn_graph_add_value(g, NULL);
            if (twin < 0)
                return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory lowering precision");
            g->values[twin].dtype = KILN_DTYPE_FLOAT32;
            g->nodes[i].out[o] = twin;
            g->values[twin].producer = i;
            int c = add_cast(L, twin, KILN_DTYPE_FLOAT32, i, "fp32");
            if (c < 0)
                return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory lowering precision");
            int cn = g->values[c].producer;
            g->nodes[cn].out[0] = v; /* the Cast makes v itself; its own value goes unused */
            g->values[v].producer = cn;
            g->values[c].producer = -1;
            for (int k = 0; k < g->n_nodes; k++)
                for (int j = 0; k != cn && j < g->nodes[k].n_in; j++)
                    if (g->nodes[k].in[j] == v && k < L->n_nodes && L->lowered[k])
                        g->nodes[k].in[j] = twin;
            continue;
        }
        for (int k = 0; k < L->n_nodes; k++) {
            kn_node *n = &g->nodes[k];
            const kn_op_schema *op = kn_op_find(n->domain, n->op_type);
            /* Shape and Size read no data: they take the lowered value as it is */
            if (n->dead || L->lowered[k] || (op != NULL && (op->flags & KN_OP_SHAPE_ONLY)))
                continue;
            for (int j = 0; j < n->n_in; j++) {
                if (n->in[j] != v)
                    continue;
                if (wide < 0 && (wide = add_cast(L, v, KILN_DTYPE_FLOAT32, i, "fp32")) < 0)
                    return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory lowering precision");
                g->nodes[k].in[j] = wide;
            }
        }
    }
    return KILN_OK;
}

/* Reading narrow activations in place pays on a region only when its work outweighs the
 * Casts at its edges: a Cast costs about one pass over its elements, and a product saves a
 * fraction of its multiply-adds, so a region needs this many multiply-adds per element that
 * crosses its edge. ResNet-50's bottleneck stack has about 14000; a MobileNet's 1x1 convs,
 * each between two depthwise convs that stay float32, a few hundred at most. */
#define REGION_MIN_WORK_PER_EDGE_ELEMENT 2048.0

static int region_root(int *parent, int i) {
    while (parent[i] != i)
        i = parent[i] = parent[parent[i]];
    return i;
}

static double numel_at(const kn_resolved *at, int v) {
    if (!at[v].known)
        return 0.0;
    double n = 1.0;
    for (int k = 0; k < at[v].t.shape.rank; k++)
        n *= (double)at[v].t.shape.d[k];
    return n;
}

/* Whether node k reads value v as float data (not just its shape). */
static bool reads_data(const kn_node *k, int v) {
    const kn_op_schema *op = kn_op_find(k->domain, k->op_type);
    if (op != NULL && (op->flags & KN_OP_SHAPE_ONLY))
        return false;
    for (int j = 0; j < k->n_in; j++)
        if (k->in[j] == v)
            return true;
    return false;
}

/* One sweep: every region (a connected set of nodes lowered by a region offer, joined by the
 * values between them) whose work is small against the elements Cast at its edges goes back
 * to its weights offer. True when one did. parent, work, edge and counted are scratch. */
static bool prune_sweep(lowering *L, const kn_resolved *at, int *parent, double *work, double *edge,
                        int *counted) {
    kn_graph *g = L->g;
    int n = L->n_nodes;
    for (int i = 0; i < n; i++) {
        parent[i] = i;
        work[i] = edge[i] = 0.0;
    }
    for (int v = 0; v < g->n_values; v++)
        counted[v] = -1;
    for (int i = 0; i < n; i++)
        for (int j = 0; L->region[i] && j < g->nodes[i].n_in; j++) {
            int v = g->nodes[i].in[j], p = v >= 0 ? g->values[v].producer : -1;
            if (p >= 0 && p < n && L->region[p])
                parent[region_root(parent, i)] = region_root(parent, p);
        }
    for (int i = 0; i < n; i++) {
        if (!L->region[i])
            continue;
        const kn_node *nd = &g->nodes[i];
        int r = region_root(parent, i);
        if (nd->n_out > 0 && nd->out[0] >= 0)
            work[r] += L->work[i] * numel_at(at, nd->out[0]);
        /* edges in: float activations made outside any lowered node (graph inputs too), each
         * Cast once however many of the region's nodes read it */
        for (int j = 0; j < nd->n_in; j++) {
            int v = nd->in[j];
            if (v < 0 || g->values[v].dtype != KILN_DTYPE_FLOAT32 ||
                kn_value_is_const(&g->values[v]) || fixed_float32(nd, j) || counted[v] == r)
                continue;
            int p = g->values[v].producer;
            if (!(p >= 0 && p < n && L->lowered[p])) {
                edge[r] += numel_at(at, v);
                counted[v] = r;
            }
        }
        /* edges out: outputs a float32 reader or the graph's caller takes */
        for (int o = 0; o < nd->n_out; o++) {
            int v = nd->out[o];
            if (v < 0 || g->values[v].dtype != KILN_DTYPE_FLOAT32)
                continue;
            bool out = g->values[v].is_output;
            for (int k = 0; k < n && !out; k++)
                out = !g->nodes[k].dead && !L->lowered[k] && reads_data(&g->nodes[k], v);
            if (out)
                edge[r] += numel_at(at, v);
        }
    }
    bool changed = false;
    for (int i = 0; i < n; i++) {
        if (!L->region[i] || work[region_root(parent, i)] >=
                                 REGION_MIN_WORK_PER_EDGE_ELEMENT * edge[region_root(parent, i)])
            continue;
        L->lowered[i] = L->region[i] = false;
        L->weights[i] = L->region_weights[i];
        L->widen[i] = L->region_widen[i];
        changed = true;
    }
    return changed;
}

/* Regions that do not pay for their edges go back to their weights offer, until none is left
 * (a region that goes back adds edges to the regions beside it). `at` is the resolution the
 * sizes are counted at. */
static kiln_status prune_regions(lowering *L, const kn_resolved *at) {
    kn_graph *g = L->g;
    int n = L->n_nodes;
    int *parent = kn_malloc(((size_t)n + 1) * sizeof *parent);
    int *counted = kn_malloc(((size_t)g->n_values + 1) * sizeof *counted);
    double *work = kn_calloc((size_t)n + 1, sizeof *work),
           *edge = kn_calloc((size_t)n + 1, sizeof *edge);
    if (parent == NULL || counted == NULL || work == NULL || edge == NULL) {
        kn_free(parent);
        kn_free(counted);
        kn_free(work);
        kn_free(edge);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory lowering precision");
    }
    while (prune_sweep(L, at, parent, work, edge, counted))
        ;
    kn_free(parent);
    kn_free(counted);
    kn_free(work);
    kn_free(edge);
    /* data movement lowered after a node that went back follows it back */
    for (int i = 0; i < n; i++) {
        const kn_node *nd = &g->nodes[i];
        if (!L->lowered[i] || L->region[i] || !kn_op_moves_data(nd))
            continue;
        int p = nd->n_in > 0 && nd->in[0] >= 0 ? g->values[nd->in[0]].producer : -1;
        if (p < 0 || !L->lowered[p])
            L->lowered[i] = false;
    }
    return KILN_OK;
}

static kiln_status mark_tf32(kn_graph *g) {
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && kn_op_is_product(&g->nodes[i]))
            KN_TRY(kn_node_set_attr_int(g, i, "kiln_allow_tf32", 1));
    return KILN_OK;
}

kiln_status kn_pass_lower_precision(kn_graph *g, int precision, const kn_layer_precision *layers,
                                    int n_layers, const struct kn_resolved *const *at, int n_at) {
    if (precision == KILN_PRECISION_TF32)
        KN_TRY(mark_tf32(g));
    bool any = precision == KILN_PRECISION_FP16 || precision == KILN_PRECISION_BF16;
    for (int k = 0; k < n_layers; k++)
        any |= layers[k].precision == KILN_PRECISION_FP16 ||
               layers[k].precision == KILN_PRECISION_BF16;
    if (!any)
        return KILN_OK;
    int n_nodes = g->n_nodes, n_values = g->n_values;
    lowering L = {.g = g, .n_nodes = n_nodes};
    L.lowered = kn_calloc((size_t)n_nodes + 1, sizeof *L.lowered);
    L.weights = kn_calloc((size_t)n_nodes + 1, sizeof *L.weights);
    L.widen = kn_calloc((size_t)n_nodes + 1, sizeof *L.widen);
    L.reduced = kn_malloc(((size_t)n_values + 1) * sizeof *L.reduced);
    L.region = kn_calloc((size_t)n_nodes + 1, sizeof *L.region);
    L.region_weights = kn_calloc((size_t)n_nodes + 1, sizeof *L.region_weights);
    L.region_widen = kn_calloc((size_t)n_nodes + 1, sizeof *L.region_widen);
    L.work = kn_calloc((size_t)n_nodes + 1, sizeof *L.work);
    kiln_status rc = KILN_OK;
    if (L.lowered == NULL || L.weights == NULL || L.widen == NULL || L.reduced == NULL ||
        L.region == NULL || L.region_weights == NULL || L.region_widen == NULL || L.work == NULL) {
        rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory lowering precision");
        goto out;
    }
    for (int v = 0; v < n_values; v++)
        L.reduced[v] = -1;
    /* Decide first, so edges between two lowered nodes need no cast. One reduced type per
     * build: the first override or the global setting that asks for one. */
    int32_t dtype = 0;
    for (int i = 0; i < n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead || kn_is_plugin_node(n) || kn_node_copy_kind(n) != KN_COPY_NONE ||
            keep_fp32(n) || !all_float32(g, n))
            continue;
        int w = wanted(n, precision, layers, n_layers);
        int32_t want = w == KILN_PRECISION_FP16   ? KILN_DTYPE_FLOAT16
                       : w == KILN_PRECISION_BF16 ? KILN_DTYPE_BFLOAT16
                                                  : 0;
        if (want == 0 || (dtype != 0 && want != dtype))
            continue;
        if (want == KILN_DTYPE_FLOAT16 && const_overflows_half(g, n))
            continue;
        if (kn_op_moves_data(n)) { /* data movement follows its input's precision */
            int p = n->n_in > 0 && n->in[0] >= 0 ? g->values[n->in[0]].producer : -1;
            if (p < 0 || !L.lowered[p])
                continue;
        }
        uint32_t bit = want == KILN_DTYPE_FLOAT16 ? KN_LOWER_FP16 : KN_LOWER_BF16;
        offer o = offered(g, i, at, n_at);
        if ((o.weights & bit) && !(o.lower & bit) && const_weights(g, n)) {
            dtype = want;
            L.weights[i] = true;
            L.widen[i] = (o.widen & bit) != 0;
            if (L.widen[i] && o.keep_fp32 != NULL &&
                kn_node_set_attr_string(g, i, "kiln_precision_note", o.keep_fp32) != KILN_OK) {
                rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory lowering precision");
                goto out;
            }
            continue;
        }
        if (!(o.lower & bit) || !kn_backend_has_kernel(kn_node_backend(n), "", "Cast")) {
            if (o.keep_fp32 != NULL &&
                kn_node_set_attr_string(g, i, "kiln_precision_note", o.keep_fp32) != KILN_OK) {
                rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory lowering precision");
                goto out;
            }
            continue;
        }
        dtype = want;
        L.lowered[i] = true;
        if (o.region & bit) {
            L.region[i] = true;
            L.work[i] = o.work;
            L.region_weights[i] = (o.weights & bit) && const_weights(g, n);
            L.region_widen[i] = (o.widen & bit) != 0;
        }
    }
    if (dtype == 0)
        goto out;
    rc = prune_regions(&L, at[n_at > 1 ? 1 : 0]);
    if (rc != KILN_OK)
        goto out;
    L.dtype = dtype;
    L.tag = dtype == KILN_DTYPE_FLOAT16 ? "fp16" : "bf16";
    for (int i = 0; i < n_nodes && rc == KILN_OK; i++)
        if (L.lowered[i])
            rc = narrow_inputs(&L, i);
        else if (L.weights[i])
            rc = narrow_weights(&L, i);
    for (int i = 0; i < n_nodes && rc == KILN_OK; i++)
        if (L.lowered[i]) {
            rc = widen_outputs(&L, i);
            if (rc == KILN_OK)
                rc = kn_node_set_attr_string(g, i, "kiln_precision", L.tag);
        }
    if (rc == KILN_OK)
        rc = kn_graph_toposort(g);
out:
    kn_free(L.lowered);
    kn_free(L.weights);
    kn_free(L.widen);
    kn_free(L.reduced);
    kn_free(L.region);
    kn_free(L.region_weights);
    kn_free(L.region_widen);
    kn_free(L.work);
    return rc;
}
