/* Collapse groups of element-wise nodes of one float type into one kiln.FusedElementwise node
 * (float16 and bfloat16 ones only on a device backend: node_fusible).
 *
 * Walking nodes from the last to the first, each fusible node not yet in a group roots a new
 * one; the group then takes in every fusible producer whose output feeds only that group and
 * is not a graph output. The root's output is then the group's only result and its shape is
 * the broadcast of the group's inputs. The root's slot receives the fused node, which keeps
 * the graph sorted: everything the group reads is produced before its first member. Scalar
 * constants become CONST instructions instead of inputs when that cannot change the
 * output's rank.
 *
 * Before grouping, the exact GELU exporters write out, x * 0.5 * (1 + Erf(x / sqrt 2)) in any
 * order of its two products, becomes one Gelu node: one instruction instead of five, and x
 * then has the Gelu as its only consumer, so the bias Add that usually produces x joins the
 * group.
 *
 * Also before grouping, on the CPU, Div(x, s) -> Clip(lo, hi) -> Round -> Mul(s) with
 * scalar constants (the QuantizeLinear -> DequantizeLinear pairs kn_pass_expand_qdq_pairs
 * writes) becomes one QDQ_ROUND instruction: the same four operations on each element in one
 * pass over the tile instead of four, and no CONST registers. A QuantizeLinear on the CPU
 * (constant scalar scale and zero point) may root a group: the program's STORE then writes its
 * bytes, and the float result is never stored. */
#include "ir/placement.h"
#include "passes/passes.h"

#include "core/alloc.h"
#include "ops/fused_elementwise.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GROUP 64
#define MAX_INPUTS 32

static bool is_f32(const kn_graph *g, int v) {
    return v >= 0 && g->values[v].dtype == KILN_DTYPE_FLOAT32;
}

/* Whether value v has dtype dt. */
static bool is_dt(const kn_graph *g, int v, int32_t dt) {
    return v >= 0 && g->values[v].dtype == dt;
}

/* A one-element constant of a float type the fused program reads (its value as float). */
static bool scalar_const(const kn_graph *g, int v) {
    if (v < 0 || !kn_value_is_const(&g->values[v]))
        return false;
    int32_t dt = g->values[v].dtype;
    if (dt != KILN_DTYPE_FLOAT32 && dt != KILN_DTYPE_FLOAT16 && dt != KILN_DTYPE_BFLOAT16)
        return false;
    kn_shape s;
    return kn_value_shape(&g->values[v], &s) && kn_shape_numel(&s) == 1;
}

static float const_value(const kn_graph *g, int v) {
    const kn_tensor t = {.dtype = g->values[v].dtype, .data = (void *)g->values[v].data};
    return (float)kn_tensor_get_f64(&t, 0);
}

/* The node this pass writes for a Div -> Clip -> Round -> Mul chain, inputs x, s, lo, hi. It
 * lives only inside the pass: each one becomes a program's QDQ_ROUND, alone if nothing joins
 * it. */
#define QDQ_ROUND_OP "QdqRound"

static bool is_qdq_round(const kn_node *n) {
    return kn_node_is(n, KN_DOMAIN, QDQ_ROUND_OP);
}

/* A QuantizeLinear on the CPU from float32 to uint8 / int8 with a constant scalar scale and
 * zero point: it may root a group, as the program's quantizing STORE. */
static bool is_q_root(const kn_graph *g, const kn_node *n) {
    if (!kn_node_is(n, "", "QuantizeLinear") || n->n_in < 3 || n->n_out != 1 || n->out[0] < 0 ||
        !is_f32(g, n->in[0]) || !scalar_const(g, n->in[1]) || !is_f32(g, n->in[1]) ||
        n->in[2] < 0 || !kn_value_is_const(&g->values[n->in[2]]) ||
        kn_node_attr(n, "output_dtype") != NULL || strcmp(kn_node_backend(n), "cpu") != 0)
        return false;
    int32_t dt = g->values[n->in[2]].dtype;
    kn_tensor z = {.dtype = dt, .data = g->values[n->in[2]].data};
    kn_shape zs;
    return (dt == KILN_DTYPE_UINT8 || dt == KILN_DTYPE_INT8) && z.data != NULL &&
           kn_value_shape(&g->values[n->in[2]], &zs) && kn_shape_numel(&zs) == 1 &&
           is_dt(g, n->out[0], dt);
}

/* The program's unary op for member n, or -1 when it is a binary one. */
static int member_unary(const kn_node *n) {
    return is_qdq_round(n) ? KN_EW_QDQ_ROUND : kn_ew_unary_of(n);
}

/* float32 nodes fuse wherever they run; float16 and bfloat16 ones (a model exported in 16
 * bits) where a device backend runs them, whose fused kernel computes in float32 and rounds
 * once at the store (the host's fused kernel is float32 only). Every operand has the
 * output's dtype, so a group never mixes types. */
static bool node_fusible(const kn_graph *g, const kn_node *n) {
    if (n->dead || n->n_out != 1 || n->out[0] < 0)
        return false;
    if (is_q_root(g, n))
        return true;
    int32_t dt = g->values[n->out[0]].dtype;
    if (dt != KILN_DTYPE_FLOAT32 && !((dt == KILN_DTYPE_FLOAT16 || dt == KILN_DTYPE_BFLOAT16) &&
                                      strcmp(kn_node_backend(n), "cpu") != 0))
        return false;
    if (is_qdq_round(n))
        return true;
    int u = kn_ew_unary_of(n);
    if (u == KN_EW_CLIP && n->opset >= 11) {
        if (n->n_in < 1 || n->n_in > 3 || !is_dt(g, n->in[0], dt))
            return false;
        for (int i = 1; i < n->n_in; i++)
            if (n->in[i] >= 0 && !(scalar_const(g, n->in[i]) && is_dt(g, n->in[i], dt)))
                return false;
        return true;
    }
    if (u >= 0)
        return n->n_in == 1 && is_dt(g, n->in[0], dt);
    return kn_ew_binary_of(n) >= 0 && is_dt(g, n->in[0], dt) && is_dt(g, n->in[1], dt);
}

/* Operands a member reads as registers (the constant bounds of Clip and QdqRound are
 * parameters instead). */
static int n_operands(const kn_node *n) {
    return member_unary(n) >= 0 || kn_node_is(n, "", "QuantizeLinear") ? 1 : 2;
}

typedef struct slot {
    int value, reg, last_use;
} slot;

typedef struct builder {
    int64_t prog[(3 * MAX_GROUP + 1) * KN_FUSED_INSTR_INTS];
    int n_prog;
    float consts[4 * MAX_GROUP];
    int n_consts;
    int inputs[MAX_INPUTS];
    int n_inputs;
    slot slots[3 * MAX_GROUP];
    int n_slots;
    bool busy[KN_FUSED_MAX_REGS];
} builder;

static void emit(builder *b, int kind, int op, int dst, int a, int x) {
    int64_t *p = b->prog + b->n_prog * KN_FUSED_INSTR_INTS;
    p[0] = kind;
    p[1] = op;
    p[2] = dst;
    p[3] = a;
    p[4] = x;
    b->n_prog++;
}

static int alloc_reg(builder *b) {
    for (int r = 0; r < KN_FUSED_MAX_REGS; r++)
        if (!b->busy[r]) {
            b->busy[r] = true;
            return r;
        }
    return -1;
}

static slot *find_slot(builder *b, int v) {
    for (int i = 0; i < b->n_slots; i++)
        if (b->slots[i].value == v && b->slots[i].reg >= 0)
            return &b->slots[i];
    return NULL;
}

static int last_use(const kn_graph *g, const int *members, int cnt, int v) {
    int last = -1;
    for (int k = 0; k < cnt; k++) {
        const kn_node *n = &g->nodes[members[k]];
        for (int j = 0; j < n_operands(n); j++)
            if (n->in[j] == v)
                last = k;
    }
    return last;
}

/* Register holding external value v, loading it (or its constant) on first use. */
static int operand_reg(builder *b, const kn_graph *g, const int *members, int cnt, int v,
                       int fold_rank) {
    slot *s = find_slot(b, v);
    if (s != NULL)
        return s->reg;
    int r = alloc_reg(b);
    if (r < 0)
        return -1;
    if (scalar_const(g, v) && g->values[v].rank <= fold_rank) {
        b->consts[b->n_consts] = const_value(g, v);
        emit(b, KN_FUSED_CONST, 0, r, b->n_consts++, 0);
    } else {
        int idx = 0;
        while (idx < b->n_inputs && b->inputs[idx] != v)
            idx++;
        if (idx == b->n_inputs) {
            if (b->n_inputs == MAX_INPUTS)
                return -1;
            b->inputs[b->n_inputs++] = v;
        }
        emit(b, KN_FUSED_LOAD, 0, r, idx, 0);
    }
    b->slots[b->n_slots++] = (slot){v, r, last_use(g, members, cnt, v)};
    return r;
}

static bool is_member_output(const kn_graph *g, const int *members, int cnt, int v) {
    for (int k = 0; k < cnt; k++)
        if (g->nodes[members[k]].out[0] == v)
            return true;
    return false;
}

/* Highest rank among the group's non-constant external inputs: scalar constants of at most
 * this rank fold into the program without changing the broadcast output shape. */
static int fold_rank_of(const kn_graph *g, const int *members, int cnt) {
    int best = -1;
    for (int k = 0; k < cnt; k++) {
        const kn_node *n = &g->nodes[members[k]];
        for (int j = 0; j < n_operands(n); j++) {
            int v = n->in[j];
            if (is_member_output(g, members, cnt, v) || scalar_const(g, v))
                continue;
            if (g->values[v].rank < 0)
                return -1;
            if (g->values[v].rank > best)
                best = g->values[v].rank;
        }
    }
    return best;
}

static bool build_program(builder *b, const kn_graph *g, const int *members, int cnt) {
    memset(b, 0, sizeof *b);
    int fold_rank = fold_rank_of(g, members, cnt);
    for (int k = 0; k < cnt; k++) {
        const kn_node *n = &g->nodes[members[k]];
        int regs[2];
        for (int j = 0; j < n_operands(n); j++) {
            regs[j] = operand_reg(b, g, members, cnt, n->in[j], fold_rank);
            if (regs[j] < 0)
                return false;
        }
        for (int i = 0; i < b->n_slots; i++)
            if (b->slots[i].reg >= 0 && b->slots[i].last_use == k) {
                b->busy[b->slots[i].reg] = false;
                b->slots[i].reg = -1;
            }
        if (kn_node_is(n, "", "QuantizeLinear")) {
            /* only ever the root (its output is not float): the STORE quantizes */
            const kn_tensor z = {.dtype = g->values[n->in[2]].dtype,
                                 .data = (void *)g->values[n->in[2]].data};
            b->consts[b->n_consts] = const_value(g, n->in[1]);
            b->consts[b->n_consts + 1] = (float)kn_tensor_get_i64(&z, 0);
            emit(b, KN_FUSED_STORE, z.dtype, 0, regs[0], b->n_consts);
            b->n_consts += 2;
            return b->n_inputs > 0;
        }
        int dst = alloc_reg(b);
        if (dst < 0)
            return false;
        int u = member_unary(n);
        if (u >= 0) {
            int np = kn_ew_unary_nparams(u);
            double prm[3] = {0, 0, 0};
            if (u == KN_EW_QDQ_ROUND)
                for (int i = 0; i < 3; i++)
                    prm[i] = const_value(g, n->in[i + 1]);
            else
                kn_ew_unary_params(n, u, prm);
            if (u == KN_EW_CLIP && n->opset >= 11)
                for (int i = 1; i < n->n_in && i < 3; i++)
                    if (n->in[i] >= 0)
                        prm[i - 1] = const_value(g, n->in[i]);
            for (int i = 0; i < np; i++)
                b->consts[b->n_consts + i] = (float)prm[i];
            emit(b, KN_FUSED_UNARY, u, dst, regs[0], np > 0 ? b->n_consts : 0);
            b->n_consts += np;
        } else {
            emit(b, KN_FUSED_BINARY, kn_ew_binary_of(n), dst, regs[0], regs[1]);
        }
        b->slots[b->n_slots++] = (slot){n->out[0], dst, last_use(g, members, cnt, n->out[0])};
    }
    slot *root = find_slot(b, g->nodes[members[cnt - 1]].out[0]);
    KN_ASSERT(root != NULL);
    emit(b, KN_FUSED_STORE, 0, 0, root->reg, 0);
    return b->n_inputs > 0;
}

/* Put the fused node in the root's slot; the old root moves to the end, dead. */
/* Node idx, just added and writing root's output, takes root's place in the node order
 * (placement copied, the two swapped); the old root and the nodes dead[0, n_dead) turn dead. */
static kiln_status take_slot(kn_graph *g, int idx, int root, const int *dead, int n_dead) {
    KN_TRY(kn_node_copy_placement(g, idx, root));
    int out = g->nodes[root].out[0];
    kn_node tmp = g->nodes[root];
    g->nodes[root] = g->nodes[idx];
    g->nodes[idx] = tmp;
    g->nodes[idx].dead = true;
    g->values[out].producer = root;
    for (int k = 0; k < n_dead; k++)
        g->nodes[dead[k]].dead = true;
    return KILN_OK;
}

static kiln_status replace_group(kn_graph *g, const builder *b, const int *members, int cnt) {
    int root = members[cnt - 1];
    int out = g->nodes[root].out[0];
    char name[256];
    snprintf(name, sizeof name, "%s/fused", g->nodes[root].name);
    int idx =
        kn_graph_add_node(g, name, KN_FUSED_OP, KN_DOMAIN, 1, b->n_inputs, b->inputs, 1, &out);
    if (idx < 0)
        return KILN_ERR_OUT_OF_MEMORY;
    kn_attr prog = {.name = "program",
                    .type = KN_ATTR_INTS,
                    .n = b->n_prog * KN_FUSED_INSTR_INTS,
                    .ints = (int64_t *)b->prog};
    KN_TRY(kn_node_add_attr(g, idx, &prog));
    if (b->n_consts > 0) {
        kn_attr consts = {.name = "constants",
                          .type = KN_ATTR_FLOATS,
                          .n = b->n_consts,
                          .floats = (float *)b->consts};
        KN_TRY(kn_node_add_attr(g, idx, &consts));
    }
    return take_slot(g, idx, root, members, cnt - 1);
}

static int cmp_int(const void *a, const void *b) {
    return *(const int *)a - *(const int *)b;
}

static void count_reads(const kn_graph *g, int node, int *inside, int delta) {
    const kn_node *n = &g->nodes[node];
    for (int j = 0; j < n->n_in; j++)
        if (n->in[j] >= 0)
            inside[n->in[j]] += delta;
}

/* Grow the group rooted at members[0]; returns its size. A producer joins once every read of
 * its output comes from members (inside[v] counts those reads), so the group may be a DAG
 * (x feeding both Sigmoid and Mul) while its root stays its only result. */
static int collect(const kn_graph *g, const bool *fusible, const int *uses, int *inside,
                   int *grouped, int *members) {
    int cnt = 1;
    grouped[members[0]] = 1;
    count_reads(g, members[0], inside, 1);
    for (bool grew = true; grew;) {
        grew = false;
        for (int k = 0; k < cnt; k++) {
            const kn_node *n = &g->nodes[members[k]];
            for (int j = 0; j < n_operands(n); j++) {
                int v = n->in[j];
                int p = v >= 0 ? g->values[v].producer : -1;
                if (p < 0 || !fusible[p] || grouped[p] || inside[v] != uses[v] ||
                    g->values[v].is_output || cnt == MAX_GROUP ||
                    !kn_nodes_same_place(&g->nodes[p], &g->nodes[members[0]]))
                    continue;
                grouped[p] = 1;
                members[cnt++] = p;
                count_reads(g, p, inside, 1);
                grew = true;
            }
        }
    }
    for (int k = 0; k < cnt; k++)
        count_reads(g, members[k], inside, -1);
    qsort(members, (size_t)cnt, sizeof(int), cmp_int);
    return cnt;
}

static bool near(float v, double want) {
    return fabs((double)v - want) <= 1e-6 * fabs(want);
}

static bool is_const_near(const kn_graph *g, int v, double want) {
    return scalar_const(g, v) && near(const_value(g, v), want);
}

static bool is_ew(const kn_node *n, int binary_op) {
    return !n->dead && n->n_out == 1 && kn_ew_binary_of(n) == binary_op;
}

/* The other operand of a binary node that reads v, or -2 when it does not read v. */
static int other_operand(const kn_node *n, int v) {
    return n->in[0] == v ? n->in[1] : n->in[1] == v ? n->in[0] : -2;
}

/* The node consuming v when v has exactly one consumer and is not a graph output. */
static int sole_consumer(const kn_graph *g, const int *uses, const int *consumer, int v) {
    return v >= 0 && uses[v] == 1 && !g->values[v].is_output && is_f32(g, v) ? consumer[v] : -1;
}

/* x when value v is x * 0.5 computed by a node whose output has one consumer. */
static int half_of(const kn_graph *g, const int *uses, int v) {
    int p = v >= 0 ? g->values[v].producer : -1;
    if (p < 0 || uses[v] != 1 || g->values[v].is_output || !is_ew(&g->nodes[p], KN_EW_MUL))
        return -1;
    const kn_node *m = &g->nodes[p];
    if (is_const_near(g, m->in[1], 0.5))
        return m->in[0];
    return is_const_near(g, m->in[0], 0.5) ? m->in[1] : -1;
}

/* Members of the GELU rooted at Erf node e, the root last; returns their count or 0. */
static int match_gelu(const kn_graph *g, const int *uses, const int *consumer, int e, int *nodes,
                      int *x_out) {
    const kn_node *en = &g->nodes[e];
    if (en->dead || kn_ew_unary_of(en) != KN_EW_ERF || en->n_in != 1 || !is_f32(g, en->out[0]))
        return 0;
    int s = en->in[0], ps = s >= 0 ? g->values[s].producer : -1;
    if (ps < 0 || sole_consumer(g, uses, consumer, s) != e)
        return 0;
    const kn_node *sn = &g->nodes[ps];
    int x = -1;
    if (is_ew(sn, KN_EW_DIV) && is_const_near(g, sn->in[1], 1.4142135623730951))
        x = sn->in[0];
    else if (is_ew(sn, KN_EW_MUL) && is_const_near(g, sn->in[1], 0.7071067811865476))
        x = sn->in[0];
    else if (is_ew(sn, KN_EW_MUL) && is_const_near(g, sn->in[0], 0.7071067811865476))
        x = sn->in[1];
    if (!is_f32(g, x))
        return 0;
    int cnt = 0;
    nodes[cnt++] = ps;
    nodes[cnt++] = e;
    int a = sole_consumer(g, uses, consumer, en->out[0]);
    if (a < 0 || !is_ew(&g->nodes[a], KN_EW_ADD) ||
        !is_const_near(g, other_operand(&g->nodes[a], en->out[0]), 1.0))
        return 0;
    nodes[cnt++] = a;
    int cur = g->nodes[a].out[0];
    bool have_x = false, have_half = false;
    while (!(have_x && have_half)) {
        int m = sole_consumer(g, uses, consumer, cur);
        if (m < 0 || !is_ew(&g->nodes[m], KN_EW_MUL))
            return 0;
        int other = other_operand(&g->nodes[m], cur);
        if (other == x && !have_x) {
            have_x = true;
        } else if (!have_half && is_const_near(g, other, 0.5)) {
            have_half = true;
        } else if (!have_x && !have_half && other != cur && half_of(g, uses, other) == x) {
            have_x = have_half = true;
            nodes[cnt++] = g->values[other].producer;
        } else {
            return 0;
        }
        nodes[cnt++] = m;
        cur = g->nodes[m].out[0];
    }
    *x_out = x;
    return cnt;
}

/* Replace each matched GELU by a Gelu node in its root's slot; the rest turn dead. */
static kiln_status rewrite_gelu(kn_graph *g, int *uses, int *consumer) {
    int n = g->n_nodes;
    for (int e = 0; e < n; e++) {
        int nodes[8], x;
        int cnt = match_gelu(g, uses, consumer, e, nodes, &x);
        if (cnt == 0)
            continue;
        int root = nodes[cnt - 1], out = g->nodes[root].out[0];
        bool one_place = kn_backend_has_kernel(kn_node_backend(&g->nodes[root]), "", "Gelu");
        for (int k = 0; k < cnt - 1 && one_place; k++)
            one_place = kn_nodes_same_place(&g->nodes[nodes[k]], &g->nodes[root]);
        if (!one_place)
            continue;
        char name[256];
        snprintf(name, sizeof name, "%s/gelu", g->nodes[root].name);
        int idx = kn_graph_add_node(g, name, "Gelu", "", 20, 1, &x, 1, &out);
        if (idx < 0)
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory fusing a GELU");
        KN_TRY(take_slot(g, idx, root, nodes, cnt - 1));
        /* x was read by the first node and by the product with x (or x * 0.5) */
        uses[x] -= 1;
        consumer[x] = root;
    }
    return KILN_OK;
}

/* The producer of v when it is an alive node of the given unary op whose output only the
 * chain reads, else -1. */
static int chain_producer(const kn_graph *g, const int *uses, int v, int unary_op) {
    int p = v >= 0 ? g->values[v].producer : -1;
    if (p < 0 || uses[v] != 1 || g->values[v].is_output || g->nodes[p].dead ||
        g->nodes[p].n_in < 1 || !is_f32(g, g->nodes[p].in[0]))
        return -1;
    const kn_node *n = &g->nodes[p];
    if (unary_op >= 0)
        return kn_ew_unary_of(n) == unary_op ? p : -1;
    return is_ew(n, KN_EW_DIV) ? p : -1;
}

/* A float32 scalar constant no wider in rank than x (so it does not widen the output). */
static bool f32_scalar_for(const kn_graph *g, int v, int x) {
    return scalar_const(g, v) && is_f32(g, v) && g->values[x].rank >= 0 &&
           g->values[v].rank <= g->values[x].rank;
}

/* Chain Div(x, s) -> Clip(lo, hi) -> Round -> Mul(s) ending at Mul node m, on the CPU: fills
 * in = {x, s, lo, hi} and chain = {Div, Clip, Round}; false when m ends no such chain. */
static bool match_qdq_round(const kn_graph *g, const int *uses, int m, int *in, int *chain) {
    const kn_node *mn = &g->nodes[m];
    if (!is_ew(mn, KN_EW_MUL) || !is_f32(g, mn->out[0]) || strcmp(kn_node_backend(mn), "cpu"))
        return false;
    for (int side = 0; side < 2; side++) {
        int s = mn->in[1 - side];
        int r = chain_producer(g, uses, mn->in[side], KN_EW_ROUND);
        int c = r < 0 ? -1 : chain_producer(g, uses, g->nodes[r].in[0], KN_EW_CLIP);
        if (c < 0 || g->nodes[c].opset < 11 || g->nodes[c].n_in != 3)
            continue;
        int d = chain_producer(g, uses, g->nodes[c].in[0], -1);
        if (d < 0)
            continue;
        int x = g->nodes[d].in[0], ds = g->nodes[d].in[1];
        int lo = g->nodes[c].in[1], hi = g->nodes[c].in[2];
        if (!f32_scalar_for(g, s, x) || !f32_scalar_for(g, ds, x) || !f32_scalar_for(g, lo, x) ||
            !f32_scalar_for(g, hi, x) || const_value(g, s) != const_value(g, ds) ||
            !kn_nodes_same_place(&g->nodes[d], mn) || !kn_nodes_same_place(&g->nodes[c], mn) ||
            !kn_nodes_same_place(&g->nodes[r], mn))
            continue;
        in[0] = x;
        in[1] = ds;
        in[2] = lo;
        in[3] = hi;
        chain[0] = d;
        chain[1] = c;
        chain[2] = r;
        return true;
    }
    return false;
}

/* Replace each matched chain by a QdqRound node in its Mul's slot; the rest turn dead. */
static kiln_status rewrite_qdq_rounds(kn_graph *g, const int *uses, int *consumer) {
    int n = g->n_nodes;
    for (int m = 0; m < n; m++) {
        int in[4], chain[3];
        if (g->nodes[m].dead || !match_qdq_round(g, uses, m, in, chain))
            continue;
        int out = g->nodes[m].out[0];
        char name[256];
        snprintf(name, sizeof name, "%s/qdq_round", g->nodes[m].name);
        int idx = kn_graph_add_node(g, name, QDQ_ROUND_OP, KN_DOMAIN, 1, 4, in, 1, &out);
        if (idx < 0)
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory fusing a QDQ rounding");
        KN_TRY(take_slot(g, idx, m, chain, 3));
        /* x was read by the Div, now by the QdqRound: its count stays */
        consumer[in[0]] = m;
    }
    return KILN_OK;
}

/* Build and place the program of one QdqRound a failed group left behind. */
static kiln_status lone_qdq_round(kn_graph *g, builder *b, int node) {
    int one[1] = {node};
    if (!build_program(b, g, one, 1))
        return kn_error(KILN_ERR_INTERNAL, "no program for QDQ rounding %s", g->nodes[node].name);
    return replace_group(g, b, one, 1);
}

/* Per value: how many nodes read it (graph outputs count twice, so they are never folded
 * away) and its last reader. */
static void count_uses(const kn_graph *g, int *uses, int *consumer) {
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *nd = &g->nodes[i];
        for (int j = 0; !nd->dead && j < nd->n_in; j++)
            if (nd->in[j] >= 0) {
                uses[nd->in[j]]++;
                consumer[nd->in[j]] = i;
            }
    }
    for (int i = 0; i < g->n_outputs; i++)
        uses[g->outputs[i]] += 2;
}

kiln_status kn_pass_recognize_gelu(kn_graph *g) {
    int *uses = kn_calloc((size_t)g->n_values + 1, sizeof(int));
    int *consumer = kn_calloc((size_t)g->n_values + 1, sizeof(int));
    kiln_status rc = KILN_OK;
    if (!uses || !consumer)
        rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory fusing a GELU");
    if (rc == KILN_OK) {
        count_uses(g, uses, consumer);
        int before = g->n_nodes;
        rc = rewrite_gelu(g, uses, consumer);
        if (rc == KILN_OK && g->n_nodes > before)
            rc = kn_graph_compact(g);
    }
    kn_free(uses);
    kn_free(consumer);
    return rc;
}

kiln_status kn_pass_fuse_elementwise(kn_graph *g) {
    kiln_status rc = KILN_OK;
    int *uses = kn_calloc((size_t)g->n_values + 1, sizeof(int));
    int *consumer = kn_calloc((size_t)g->n_values + 1, sizeof(int));
    int *inside = kn_calloc((size_t)g->n_values + 1, sizeof(int));
    int *grouped = NULL;
    bool *fusible = NULL;
    builder *b = kn_malloc(sizeof *b);
    if (!uses || !consumer || !inside || !b) {
        rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory fusing element-wise nodes");
        goto out_free;
    }
    count_uses(g, uses, consumer);
    int n_before = g->n_nodes;
    if ((rc = rewrite_gelu(g, uses, consumer)) != KILN_OK ||
        (rc = rewrite_qdq_rounds(g, uses, consumer)) != KILN_OK)
        goto out_free;
    int n = g->n_nodes;
    grouped = kn_calloc((size_t)n + 1, sizeof(int));
    fusible = kn_calloc((size_t)n + 1, sizeof(bool));
    if (!grouped || !fusible) {
        rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory fusing element-wise nodes");
        goto out_free;
    }
    for (int i = 0; i < n; i++)
        fusible[i] = node_fusible(g, &g->nodes[i]) &&
                     kn_backend_has_kernel(kn_node_backend(&g->nodes[i]), KN_DOMAIN, KN_FUSED_OP);
    bool changed = n > n_before;
    for (int r = n - 1; r >= 0; r--) {
        if (!fusible[r] || grouped[r])
            continue;
        int members[MAX_GROUP] = {r};
        int cnt = collect(g, fusible, uses, inside, grouped, members);
        if (cnt >= 2 && build_program(b, g, members, cnt)) {
            if ((rc = replace_group(g, b, members, cnt)) != KILN_OK)
                goto out_free;
            changed = true;
            continue;
        }
        /* no kernel runs a QdqRound node: each left unfused gets a program of its own */
        for (int k = 0; k < cnt; k++) {
            if (!is_qdq_round(&g->nodes[members[k]]))
                continue;
            if ((rc = lone_qdq_round(g, b, members[k])) != KILN_OK)
                goto out_free;
            changed = true;
        }
    }
    if (changed) {
        if (kn_graph_opset(g, KN_DOMAIN) < 0 &&
            (rc = kn_graph_add_opset(g, KN_DOMAIN, 1)) != KILN_OK)
            goto out_free;
        rc = kn_graph_compact(g);
    }
out_free:
    kn_free(uses);
    kn_free(consumer);
    kn_free(inside);
    kn_free(grouped);
    kn_free(fusible);
    kn_free(b);
    return rc;
}
