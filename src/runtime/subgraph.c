/* The subgraph executor (see subgraph.h). A body runs with its own table of tensors, one per
 * value: graph inputs and enclosing-scope values borrowed from the caller, constants from the
 * body, everything else computed here and freed when the body's run ends (its outputs are
 * handed to the caller). Loop and Scan run their body once per iteration. */
#include "runtime/subgraph.h"

#include "core/alloc.h"
#include "core/container.h"
#include "ops/op.h"
#include "plugin/plugin.h"
#include "shape/resolve.h"

#include <stdint.h>
#include <string.h>

static kiln_status oom(const kn_node *n) {
    return kn_error(KILN_ERR_OUT_OF_MEMORY, "node '%s' (%s): out of memory", n->name, n->op_type);
}

/* A copy of t with data of its own (kn_malloc). */
static kiln_status clone_tensor(const kn_tensor *t, kn_tensor *out) {
    size_t nb = kn_tensor_nbytes(t);
    *out = *t;
    out->data = kn_malloc(nb ? nb : 1);
    if (out->data == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory (%zu bytes)", nb);
    if (nb)
        memcpy(out->data, t->data, nb);
    return KILN_OK;
}

static kiln_status run_one(kn_backend *host, const kn_node *n, const kn_tensor *in, kn_tensor *out,
                           kn_threadpool *pool) {
    if (kn_is_plugin_node(n))
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "node '%s' (%s): plugin nodes inside If, Loop or Scan bodies are not "
                        "supported",
                        n->name, n->op_type);
    const kn_op_schema *op = kn_op_find(n->domain, n->op_type);
    if (op != NULL && (op->flags & KN_OP_SUBGRAPH))
        return kn_subgraph_run_node(host, n, in, out, pool);
    kiln_status rc = kn_infer_node(n, NULL, in, out);
    if (rc == KN_NEED_DATA)
        return kn_error(KILN_ERR_INTERNAL,
                        "node '%s' (%s): shape still unknown with all input data present", n->name,
                        n->op_type);
    KN_TRY(rc);
    return kn_eval_node(host, n, in, out, pool);
}

/* A SequenceInsert without a position whose input sequence the body owns and nothing reads
 * after it: the element is appended in place (kn_container_append), so a Loop that grows a
 * sequence each trip copies O(n) bytes in all, not O(n^2). */
static bool append_in_place(const kn_node *n, int node, const bool *owned, const int *last_use,
                            kn_tensor *vals) {
    if (n->domain[0] != '\0' || strcmp(n->op_type, "SequenceInsert") != 0 || n->n_in < 2 ||
        (n->n_in > 2 && n->in[2] >= 0) || n->n_out != 1 || n->out[0] < 0 || n->in[0] < 0 ||
        n->in[1] < 0 || n->in[0] == n->in[1] || !owned[n->in[0]] || last_use[n->in[0]] != node)
        return false;
    kn_tensor seq = vals[n->in[0]];
    bool done = false;
    if (kn_container_append(&seq, &vals[n->in[1]], &done) != KILN_OK || !done)
        return false; /* the ordinary insert decides, and words any error */
    vals[n->in[0]] = (kn_tensor){0};
    vals[n->out[0]] = seq;
    return true;
}

/* Run body g: in has g->n_inputs tensors, borrowed except where donated[i] (may be NULL) hands
 * in[i]'s data (kn_malloc'd) over to the body, which frees it or returns it; out receives
 * g->n_outputs tensors whose data the caller owns. */
static kiln_status run_body(kn_backend *host, const kn_node *owner, const kn_graph *g,
                            const kn_tensor *in, const bool *donated, kn_tensor *out,
                            kn_threadpool *pool) {
    kn_tensor *vals = kn_calloc((size_t)g->n_values + 1, sizeof *vals);
    bool *owned = kn_calloc((size_t)g->n_values + 1, sizeof *owned);
    int *last_use = kn_calloc((size_t)g->n_values + 1, sizeof *last_use);
    kiln_status rc = KILN_OK;
    if (vals == NULL || owned == NULL || last_use == NULL) {
        rc = oom(owner);
        for (int i = 0; donated != NULL && i < g->n_inputs; i++) /* the body's to free, even now */
            if (donated[i])
                kn_free(in[i].data);
        goto done;
    }
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].data != NULL)
            vals[v] = kn_value_tensor(&g->values[v]);
    for (int i = 0; i < g->n_inputs; i++) {
        vals[g->inputs[i]] = in[i];
        owned[g->inputs[i]] = donated != NULL && donated[i];
    }
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; !g->nodes[i].dead && j < g->nodes[i].n_in; j++)
            if (g->nodes[i].in[j] >= 0)
                last_use[g->nodes[i].in[j]] = i;
    for (int o = 0; o < g->n_outputs; o++)
        last_use[g->outputs[o]] = g->n_nodes;
    kn_tensor tin[KN_MAX_NODE_IO], tout[KN_MAX_NODE_IO];
    for (int i = 0; i < g->n_nodes && rc == KILN_OK; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        if (n->n_in > KN_MAX_NODE_IO || n->n_out > KN_MAX_NODE_IO) {
            rc = kn_error(KILN_ERR_UNSUPPORTED, "node '%s' (%s) has more than %d inputs or outputs",
                          n->name, n->op_type, KN_MAX_NODE_IO);
            break;
        }
        if (append_in_place(n, i, owned, last_use, vals)) {
            owned[n->in[0]] = false;
            owned[n->out[0]] = true;
            continue;
        }
        for (int j = 0; j < n->n_in; j++)
            tin[j] = n->in[j] >= 0 ? vals[n->in[j]] : (kn_tensor){0};
        if ((rc = run_one(host, n, tin, tout, pool)) != KILN_OK)
            break;
        for (int j = 0; j < n->n_out; j++) {
            int v = n->out[j];
            if (v < 0) {
                kn_free(tout[j].data);
                continue;
            }
            vals[v] = tout[j];
            owned[v] = true;
        }
    }
    for (int o = 0; o < g->n_outputs && rc == KILN_OK; o++) {
        int v = g->outputs[o];
        if (owned[v]) { /* handed over; a second use of the same value copies it */
            out[o] = vals[v];
            owned[v] = false;
        } else if (vals[v].dtype == 0) {
            rc = kn_error(KILN_ERR_MODEL, "node '%s' (%s): body output '%s' has no value",
                          owner->name, owner->op_type, g->values[v].name);
        } else {
            rc = clone_tensor(&vals[v], &out[o]);
        }
        if (rc != KILN_OK)
            for (int k = 0; k < o; k++)
                kn_free(out[k].data);
    }
done:
    if (owned != NULL)
        for (int v = 0; v < g->n_values; v++)
            if (owned[v])
                kn_free(vals[v].data);
    kn_free(vals);
    kn_free(owned);
    kn_free(last_use);
    return rc;
}

static const kn_graph *body_of(const kn_node *n, const char *name) {
    const kn_attr *a = kn_node_attr(n, name);
    return a != NULL && a->type == KN_ATTR_GRAPH ? a->g : NULL;
}

static kiln_status run_if(kn_backend *host, const kn_node *n, const kn_tensor *in, kn_tensor *out,
                          kn_threadpool *pool) {
    bool cond = *(const uint8_t *)in[0].data != 0;
    const kn_graph *g = body_of(n, cond ? "then_branch" : "else_branch");
    return run_body(host, n, g, in + 1, NULL, out, pool);
}

/* A tensor slot that either borrows its data or owns it. */
typedef struct slot {
    kn_tensor t;
    bool owned;
} slot;

static void slot_set(slot *s, kn_tensor t, bool owned) {
    if (s->owned)
        kn_free(s->t.data);
    s->t = t;
    s->owned = owned;
}

static kiln_status slot_take(slot *s, kn_tensor *out) {
    if (s->owned) {
        *out = s->t;
        s->owned = false;
        return KILN_OK;
    }
    return clone_tensor(&s->t, out);
}

/* Bytes of one step of axis `axis` of shape d: [outer] x [len] x [inner bytes]. */
static void axis_split(const kn_shape *d, int axis, size_t es, int64_t *outer, size_t *inner) {
    *outer = 1;
    *inner = es;
    for (int i = 0; i < axis; i++)
        *outer *= d->d[i];
    for (int i = axis + 1; i < d->rank; i++)
        *inner *= (size_t)d->d[i];
}

/* Copy between index idx of `full` along axis and a slice without that axis. */
static void copy_slice(const kn_tensor *full, int axis, int64_t idx, void *slice, bool to_full) {
    int64_t outer;
    size_t inner;
    axis_split(&full->shape, axis, kn_dtype_size(full->dtype), &outer, &inner);
    int64_t len = full->shape.d[axis];
    for (int64_t o = 0; o < outer; o++) {
        char *f = (char *)full->data + ((size_t)(o * len + idx)) * inner;
        char *s = (char *)slice + (size_t)o * inner;
        if (to_full)
            memcpy(f, s, inner);
        else
            memcpy(s, f, inner);
    }
}

/* A scan output built one slice per iteration along `axis`: allocated at the first slice
 * (whose shape every later one must have), for `len` iterations. */
typedef struct stacker {
    kn_tensor full;
    kn_shape step;
    int axis; /* -1: along a new leading axis, grown as it goes (Loop) */
    int64_t count, cap;
} stacker;

static kiln_status stack_put(const kn_node *n, stacker *s, const kn_tensor *t, int64_t idx,
                             int64_t len) {
    if (s->count == 0 && s->full.data == NULL) {
        s->step = t->shape;
        s->full.dtype = t->dtype;
        int axis = s->axis < 0 ? 0 : s->axis;
        if (axis > t->shape.rank || t->shape.rank + 1 > KN_MAX_RANK)
            return kn_error(KILN_ERR_SHAPE,
                            "node '%s' (%s): a scan output of rank %d cannot take "
                            "axis %d",
                            n->name, n->op_type, t->shape.rank, axis);
        s->full.shape.rank = t->shape.rank + 1;
        for (int i = 0, k = 0; i < s->full.shape.rank; i++)
            s->full.shape.d[i] = i == axis ? len : t->shape.d[k++];
    } else {
        bool same = t->dtype == s->full.dtype && t->shape.rank == s->step.rank;
        for (int i = 0; same && i < t->shape.rank; i++)
            same = t->shape.d[i] == s->step.d[i];
        if (!same)
            return kn_error(KILN_ERR_SHAPE,
                            "node '%s' (%s): a scan output changes shape from one "
                            "iteration to the next",
                            n->name, n->op_type);
    }
    int axis = s->axis < 0 ? 0 : s->axis;
    if (s->axis < 0 && s->count == s->cap) { /* Loop: the trip count is not known ahead */
        int64_t cap = s->cap ? s->cap * 2 : 8;
        kn_tensor grown = s->full;
        grown.shape.d[0] = cap;
        size_t old = kn_tensor_nbytes(&s->full), nb = kn_tensor_nbytes(&grown);
        void *p = kn_realloc(s->full.data, s->full.data ? old : 0, nb ? nb : 1);
        if (p == NULL)
            return oom(n);
        s->full.data = p;
        s->cap = cap;
    } else if (s->full.data == NULL) {
        size_t nb = kn_tensor_nbytes(&s->full);
        if ((s->full.data = kn_malloc(nb ? nb : 1)) == NULL)
            return oom(n);
    }
    if (s->axis < 0)
        s->full.shape.d[0] = s->count + 1;
    copy_slice(&s->full, axis, idx, t->data, true);
    s->count++;
    return KILN_OK;
}

/* The output of a scan that ran no iteration: empty along the scan axis, other dims from the
 * body's declaration (0 where it declares none). */
static void stack_empty(stacker *s, const kn_value *decl) {
    int axis = s->axis < 0 ? 0 : s->axis;
    int rank = decl->rank >= 0 && decl->rank < KN_MAX_RANK ? decl->rank : 0;
    s->full.dtype = decl->dtype ? decl->dtype : KILN_DTYPE_FLOAT32;
    s->full.shape.rank = rank + 1 > axis ? rank + 1 : axis + 1;
    for (int i = 0, k = 0; i < s->full.shape.rank; i++) {
        if (i == axis) {
            s->full.shape.d[i] = 0;
            continue;
        }
        s->full.shape.d[i] = k < rank && decl->dims[k].value >= 0 ? decl->dims[k].value : 0;
        k++;
    }
    kn_free(s->full.data);
    s->full.data = kn_malloc(1);
}

static kiln_status read_scalar(const kn_node *n, const kn_tensor *t, int32_t dtype,
                               const char *what, int64_t *out) {
    if (t->dtype != dtype || kn_tensor_numel(t) != 1)
        return kn_error(KILN_ERR_MODEL, "node '%s' (%s): %s must be one %s element", n->name,
                        n->op_type, what, kn_dtype_name(dtype));
    *out = dtype == KILN_DTYPE_BOOL ? *(const uint8_t *)t->data != 0 : *(const int64_t *)t->data;
    return KILN_OK;
}

static kiln_status run_loop(kn_backend *host, const kn_node *n, const kn_tensor *in, kn_tensor *out,
                            kn_threadpool *pool) {
    const kn_graph *g = body_of(n, "body");
    int formal = n->n_in - g->n_outer, carried = formal - 2, scans = n->n_out - carried;
    int64_t trips = INT64_MAX, cond = 1;
    if (in[0].dtype != 0)
        KN_TRY(read_scalar(n, &in[0], KILN_DTYPE_INT64, "the trip count M", &trips));
    if (in[1].dtype != 0)
        KN_TRY(read_scalar(n, &in[1], KILN_DTYPE_BOOL, "cond", &cond));
    if (in[0].dtype == 0 && in[1].dtype == 0)
        return kn_error(KILN_ERR_MODEL,
                        "node '%s' (Loop) has neither a trip count nor a "
                        "condition: it would never end",
                        n->name);
    kn_tensor bin[KN_MAX_NODE_IO], bout[KN_MAX_NODE_IO];
    slot state[KN_MAX_NODE_IO];
    stacker st[KN_MAX_NODE_IO];
    memset(state, 0, sizeof state);
    memset(st, 0, sizeof st);
    int64_t iter = 0;
    uint8_t cond_in = 1;
    bin[0] = (kn_tensor){.dtype = KILN_DTYPE_INT64, .data = &iter};
    bin[1] = (kn_tensor){.dtype = KILN_DTYPE_BOOL, .data = &cond_in};
    for (int k = 0; k < carried; k++)
        state[k].t = in[2 + k];
    for (int k = 0; k < g->n_outer; k++)
        bin[formal + k] = in[formal + k];
    for (int k = 0; k < scans; k++)
        st[k].axis = -1;
    kiln_status rc = KILN_OK;
    bool donated[KN_MAX_NODE_IO] = {false};
    for (; iter < trips && cond && rc == KILN_OK; iter++) {
        for (int k = 0; k < carried; k++) { /* a state the loop owns moves into the body */
            bin[2 + k] = state[k].t;
            donated[2 + k] = state[k].owned;
            state[k].owned = false;
        }
        cond_in = (uint8_t)cond;
        if ((rc = run_body(host, n, g, bin, donated, bout, pool)) != KILN_OK)
            break;
        if (in[1].dtype != 0)
            rc = read_scalar(n, &bout[0], KILN_DTYPE_BOOL, "the body's condition output", &cond);
        kn_free(bout[0].data);
        for (int k = 0; k < carried; k++)
            slot_set(&state[k], bout[1 + k], true);
        for (int k = 0; k < scans; k++) {
            if (rc == KILN_OK)
                rc = stack_put(n, &st[k], &bout[1 + carried + k], st[k].count, 0);
            kn_free(bout[1 + carried + k].data);
        }
    }
    for (int k = 0; k < carried; k++) {
        if (rc == KILN_OK)
            rc = slot_take(&state[k], &out[k]);
        slot_set(&state[k], (kn_tensor){0}, false);
    }
    for (int k = 0; k < scans; k++) {
        if (rc == KILN_OK && st[k].count == 0)
            stack_empty(&st[k], &g->values[g->outputs[1 + carried + k]]);
        if (rc == KILN_OK)
            out[carried + k] = st[k].full;
        else
            kn_free(st[k].full.data);
    }
    return rc;
}

static kiln_status scan_axes(const kn_node *n, const char *name, int count, int rank_add,
                             const kn_tensor *ref, int *axes) {
    const int64_t *v;
    int64_t got = kn_attr_ints(n, name, &v);
    if (got != 0 && got != count)
        return kn_error(KILN_ERR_MODEL, "node '%s' (Scan): %s has %lld entries, expected %d",
                        n->name, name, (long long)got, count);
    for (int i = 0; i < count; i++) {
        int64_t a = got ? v[i] : 0, norm = a;
        if (ref != NULL) {
            int32_t rank = ref[i].shape.rank + rank_add;
            if (kn_norm_axis(a, rank, &norm) != KILN_OK)
                return kn_error(KILN_ERR_MODEL,
                                "node '%s' (Scan): %s[%d] = %lld is out of range "
                                "for rank %d",
                                n->name, name, i, (long long)a, (int)rank);
        }
        axes[i] = (int)norm;
    }
    return KILN_OK;
}

/* How a Scan's body reads its inputs: `formal` body inputs (carried states, then the `m` scan
 * inputs), each scan input's axis and direction, each scan output's direction and axis. */
typedef struct scan_form {
    int formal, m;
    int in_ax[KN_MAX_NODE_IO], in_dir[KN_MAX_NODE_IO], out_dir[KN_MAX_NODE_IO];
    const int64_t *oa; /* scan_output_axes, n_oa entries (0: every output along axis 0) */
    int64_t n_oa;
} scan_form;

/* The scan itself: in holds f->formal inputs, then the body's enclosing-scope values. */
static kiln_status scan_core(kn_backend *host, const kn_node *n, const kn_graph *g,
                             const scan_form *f, const kn_tensor *in, kn_tensor *out,
                             kn_threadpool *pool) {
    int formal = f->formal, m = f->m, carried = formal - m;
    int scans = n->n_out - carried;
    const int *in_ax = f->in_ax, *in_dir = f->in_dir, *out_dir = f->out_dir;
    const int64_t *oa = f->oa;
    int64_t n_oa = f->n_oa;
    int64_t len = -1;
    for (int i = 0; i < m; i++) {
        const kn_tensor *t = &in[carried + i];
        if (t->shape.rank < 1)
            return kn_error(KILN_ERR_SHAPE, "node '%s' (Scan): scan input %d is a scalar", n->name,
                            i);
        if (len >= 0 && t->shape.d[in_ax[i]] != len)
            return kn_error(KILN_ERR_SHAPE,
                            "node '%s' (Scan): scan inputs have different "
                            "lengths (%lld and %lld)",
                            n->name, (long long)len, (long long)t->shape.d[in_ax[i]]);
        len = t->shape.d[in_ax[i]];
    }
    kn_tensor bin[KN_MAX_NODE_IO], bout[KN_MAX_NODE_IO];
    slot state[KN_MAX_NODE_IO];
    stacker st[KN_MAX_NODE_IO];
    memset(state, 0, sizeof state);
    memset(st, 0, sizeof st);
    for (int k = 0; k < carried; k++)
        state[k].t = in[k];
    kiln_status rc = KILN_OK;
    for (int i = 0; i < m && rc == KILN_OK; i++) { /* one slice buffer per scan input */
        const kn_tensor *t = &in[carried + i];
        kn_tensor *s = &bin[carried + i];
        *s = (kn_tensor){.dtype = t->dtype};
        for (int d = 0; d < t->shape.rank; d++)
            if (d != in_ax[i])
                s->shape.d[s->shape.rank++] = t->shape.d[d];
        size_t nb = kn_tensor_nbytes(s);
        if ((s->data = kn_malloc(nb ? nb : 1)) == NULL)
            rc = oom(n);
    }
    for (int k = 0; k < g->n_outer; k++)
        bin[formal + k] = in[formal + k];
    for (int64_t it = 0; it < len && rc == KILN_OK; it++) {
        for (int k = 0; k < carried; k++)
            bin[k] = state[k].t;
        for (int i = 0; i < m; i++)
            copy_slice(&in[carried + i], in_ax[i], in_dir[i] ? len - 1 - it : it,
                       bin[carried + i].data, false);
        if ((rc = run_body(host, n, g, bin, NULL, bout, pool)) != KILN_OK)
            break;
        for (int k = 0; k < carried; k++)
            slot_set(&state[k], bout[k], true);
        for (int k = 0; k < scans; k++) {
            const kn_tensor *t = &bout[carried + k];
            if (rc == KILN_OK && it == 0) {
                int64_t a = n_oa ? oa[k] : 0, norm;
                if (kn_norm_axis(a, t->shape.rank + 1, &norm) != KILN_OK)
                    rc = kn_error(KILN_ERR_MODEL,
                                  "node '%s' (Scan): scan_output_axes[%d] = %lld "
                                  "is out of range",
                                  n->name, k, (long long)a);
                st[k].axis = (int)norm;
            }
            if (rc == KILN_OK)
                rc = stack_put(n, &st[k], t, out_dir[k] ? len - 1 - it : it, len);
            kn_free(bout[carried + k].data);
        }
    }
    for (int i = 0; i < m; i++)
        kn_free(bin[carried + i].data);
    for (int k = 0; k < carried; k++) {
        if (rc == KILN_OK)
            rc = slot_take(&state[k], &out[k]);
        slot_set(&state[k], (kn_tensor){0}, false);
    }
    for (int k = 0; k < scans; k++) {
        if (rc == KILN_OK && st[k].full.data == NULL) {
            st[k].axis = n_oa && oa[k] > 0 ? (int)oa[k] : 0;
            stack_empty(&st[k], &g->values[g->outputs[carried + k]]);
        }
        if (rc == KILN_OK)
            out[carried + k] = st[k].full;
        else
            kn_free(st[k].full.data);
    }
    return rc;
}

static kiln_status run_scan(kn_backend *host, const kn_node *n, const kn_tensor *in, kn_tensor *out,
                            kn_threadpool *pool) {
    const kn_graph *g = body_of(n, "body");
    scan_form f = {.formal = n->n_in - g->n_outer, .m = (int)kn_attr_int(n, "num_scan_inputs", 1)};
    int carried = f.formal - f.m, scans = n->n_out - carried;
    KN_TRY(scan_axes(n, "scan_input_axes", f.m, 0, in + carried, f.in_ax));
    KN_TRY(scan_axes(n, "scan_input_directions", f.m, 0, NULL, f.in_dir));
    KN_TRY(scan_axes(n, "scan_output_directions", scans, 0, NULL, f.out_dir));
    f.n_oa = kn_attr_ints(n, "scan_output_axes", &f.oa);
    if (f.n_oa != 0 && f.n_oa != scans)
        return kn_error(KILN_ERR_MODEL,
                        "node '%s' (Scan): scan_output_axes has %lld entries, "
                        "expected %d",
                        n->name, (long long)f.n_oa, scans);
    return scan_core(host, n, g, &f, in, out, pool);
}

/* Scan-8: every input and output has a leading batch axis, a scan input's sequence is its axis
 * 1, and sequence_lens (input 0, optional) gives each batch's length. Each batch entry is a
 * Scan-9 run over that entry's slices; a scan output's steps past its entry's length are 0. */
static kiln_status run_scan8(kn_backend *host, const kn_node *n, const kn_tensor *in,
                             kn_tensor *out, kn_threadpool *pool) {
    const kn_graph *g = body_of(n, "body");
    scan_form f = {.formal = n->n_in - g->n_outer - 1,
                   .m = (int)kn_attr_int(n, "num_scan_inputs", 1)};
    int carried = f.formal - f.m;
    KN_TRY(scan_axes(n, "directions", f.m, 0, NULL, f.in_dir));
    const kn_tensor *x = in + 1, *lens = in[0].dtype != 0 ? &in[0] : NULL;
    int64_t batch = -1, steps = -1;
    for (int k = 0; k < f.formal; k++) {
        bool scan = k >= carried;
        if (x[k].shape.rank < (scan ? 2 : 1) || (batch >= 0 && x[k].shape.d[0] != batch) ||
            (scan && steps >= 0 && x[k].shape.d[1] != steps))
            return kn_error(KILN_ERR_SHAPE,
                            "node '%s' (Scan): input %d must be [batch%s, ...] with the batch "
                            "(and sequence) of the others",
                            n->name, k + 1, scan ? ", sequence" : "");
        batch = x[k].shape.d[0];
        if (scan)
            steps = x[k].shape.d[1];
    }
    if (lens != NULL && (lens->dtype != KILN_DTYPE_INT64 || kn_tensor_numel(lens) != batch))
        return kn_error(KILN_ERR_MODEL, "node '%s' (Scan): sequence_lens must be %lld int64 values",
                        n->name, (long long)batch);
    kiln_status rc = KILN_OK;
    for (int k = 0; k < n->n_out; k++)
        out[k] = (kn_tensor){0};
    for (int64_t b = 0; b < batch && rc == KILN_OK; b++) {
        int64_t len = lens != NULL ? ((const int64_t *)lens->data)[b] : steps;
        if (len < 0 || len > steps) {
            rc = kn_error(KILN_ERR_INVALID_ARGUMENT,
                          "node '%s' (Scan): sequence_lens[%lld] = %lld is outside [0, %lld]",
                          n->name, (long long)b, (long long)len, (long long)steps);
            break;
        }
        kn_tensor sub[KN_MAX_NODE_IO], got[KN_MAX_NODE_IO];
        for (int k = 0; k < f.formal; k++) { /* batch entry b: contiguous, the batch axis gone */
            sub[k] = (kn_tensor){.dtype = x[k].dtype, .shape.rank = x[k].shape.rank - 1};
            for (int d = 1; d < x[k].shape.rank; d++)
                sub[k].shape.d[d - 1] = x[k].shape.d[d];
            sub[k].data = (char *)x[k].data + (size_t)b * kn_tensor_nbytes(&sub[k]);
            if (k >= carried)
                sub[k].shape.d[0] = len; /* the entry's first len steps */
        }
        for (int k = 0; k < g->n_outer; k++)
            sub[f.formal + k] = in[1 + f.formal + k];
        if ((rc = scan_core(host, n, g, &f, sub, got, pool)) != KILN_OK)
            break;
        for (int k = 0; k < n->n_out && rc == KILN_OK; k++) {
            kn_tensor step = got[k];
            if (k >= carried)
                step.shape.d[0] = steps;
            if (b == 0) {
                if (step.shape.rank + 1 > KN_MAX_RANK) {
                    rc = kn_error(KILN_ERR_UNSUPPORTED, "node '%s' (Scan): output %d has rank %d",
                                  n->name, k, step.shape.rank + 1);
                    break;
                }
                out[k] = (kn_tensor){.dtype = step.dtype, .shape.rank = step.shape.rank + 1};
                out[k].shape.d[0] = batch;
                for (int d = 0; d < step.shape.rank; d++)
                    out[k].shape.d[d + 1] = step.shape.d[d];
                size_t nb = kn_tensor_nbytes(&out[k]);
                if ((out[k].data = kn_calloc(nb ? nb : 1, 1)) == NULL)
                    rc = oom(n);
            } else {
                bool same = step.dtype == out[k].dtype && step.shape.rank + 1 == out[k].shape.rank;
                for (int d = 0; same && d < step.shape.rank; d++)
                    same = step.shape.d[d] == out[k].shape.d[d + 1];
                if (!same)
                    rc = kn_error(KILN_ERR_SHAPE,
                                  "node '%s' (Scan): output %d changes shape from one batch "
                                  "entry to the next",
                                  n->name, k);
            }
            if (rc == KILN_OK && kn_tensor_nbytes(&got[k]) > 0)
                memcpy((char *)out[k].data + (size_t)b * kn_tensor_nbytes(&step), got[k].data,
                       kn_tensor_nbytes(&got[k]));
        }
        for (int k = 0; k < n->n_out; k++)
            kn_free(got[k].data);
    }
    if (rc == KILN_OK && batch == 0) /* no entry: empty outputs, shaped as the body declares */
        for (int k = 0; k < n->n_out && rc == KILN_OK; k++) {
            const kn_value *d = &g->values[g->outputs[k]];
            int rank = d->rank >= 0 && d->rank < KN_MAX_RANK - 1 ? d->rank : 0;
            int extra = k >= carried ? 1 : 0;
            out[k] = (kn_tensor){.dtype = d->dtype ? d->dtype : KILN_DTYPE_FLOAT32,
                                 .shape.rank = rank + 1 + extra};
            if (extra)
                out[k].shape.d[1] = steps < 0 ? 0 : steps;
            for (int i = 0; i < rank; i++)
                out[k].shape.d[1 + extra + i] = d->dims[i].value >= 0 ? d->dims[i].value : 0;
            if ((out[k].data = kn_malloc(1)) == NULL)
                rc = oom(n);
        }
    if (rc != KILN_OK)
        for (int k = 0; k < n->n_out; k++) {
            kn_free(out[k].data);
            out[k].data = NULL;
        }
    return rc;
}

/* SequenceMap: the body once per element of the input sequence; an additional input that is a
 * sequence gives its element of the same position, a tensor itself. */
static kiln_status run_sequence_map(kn_backend *host, const kn_node *n, const kn_tensor *in,
                                    kn_tensor *out, kn_threadpool *pool) {
    const kn_graph *g = body_of(n, "body");
    int formal = n->n_in - g->n_outer;
    kn_container seqs[KN_MAX_NODE_IO];
    bool is_seq[KN_MAX_NODE_IO];
    for (int j = 0; j < formal; j++) {
        is_seq[j] = in[j].dtype == KILN_DTYPE_CONTAINER;
        if (j == 0 || is_seq[j])
            KN_TRY(kn_container_open(&in[j], j ? "an additional input" : "input 'input_sequence'",
                                     &seqs[j]));
        if (is_seq[j] && seqs[j].count != seqs[0].count)
            return kn_error(KILN_ERR_SHAPE,
                            "node '%s' (SequenceMap): input %d has %d elements, input 0 has %d",
                            n->name, j, seqs[j].count, seqs[0].count);
    }
    int len = seqs[0].count;
    kn_tensor *items = kn_calloc((size_t)n->n_out * (size_t)len + 1, sizeof *items);
    if (items == NULL)
        return oom(n);
    kn_tensor bin[KN_MAX_NODE_IO];
    for (int k = 0; k < g->n_outer; k++)
        bin[formal + k] = in[formal + k];
    kiln_status rc = KILN_OK;
    for (int i = 0; i < len && rc == KILN_OK; i++) {
        for (int j = 0; j < formal; j++)
            bin[j] = is_seq[j] ? kn_container_item(&seqs[j], i) : in[j];
        kn_tensor bout[KN_MAX_NODE_IO];
        if ((rc = run_body(host, n, g, bin, NULL, bout, pool)) != KILN_OK)
            break;
        for (int k = 0; k < n->n_out; k++) {
            items[(size_t)k * (size_t)len + (size_t)i] = bout[k];
            if (rc == KILN_OK && i > 0 && bout[k].dtype != items[(size_t)k * (size_t)len].dtype)
                rc = kn_error(KILN_ERR_DTYPE,
                              "node '%s' (SequenceMap): body output %d changes dtype from one "
                              "element to the next",
                              n->name, k);
        }
    }
    for (int k = 0; k < n->n_out && rc == KILN_OK; k++) {
        const kn_tensor *row = &items[(size_t)k * (size_t)len];
        size_t nb = kn_container_bytes(len, row);
        out[k] = kn_container_tensor(nb);
        if ((out[k].data = kn_malloc(nb)) == NULL) {
            rc = oom(n);
            for (int j = 0; j < k; j++)
                kn_free(out[j].data);
            break;
        }
        int32_t elem = len ? row[0].dtype : g->values[g->outputs[k]].dtype;
        kn_container_write(out[k].data, KN_CONTAINER_SEQUENCE, elem, len, row);
    }
    for (size_t i = 0; i < (size_t)n->n_out * (size_t)len; i++)
        kn_free(items[i].data);
    kn_free(items);
    return rc;
}

kiln_status kn_subgraph_run_node(kn_backend *host, const kn_node *n, const kn_tensor *in,
                                 kn_tensor *out, kn_threadpool *pool) {
    for (int j = 0; j < n->n_out; j++)
        memset(&out[j], 0, sizeof out[j]);
    kiln_status rc = kn_infer_node(n, NULL, in, out);
    if (rc != KN_NEED_DATA && rc != KILN_OK)
        return rc;
    if (strcmp(n->op_type, "If") == 0)
        rc = run_if(host, n, in, out, pool);
    else if (strcmp(n->op_type, "Loop") == 0)
        rc = run_loop(host, n, in, out, pool);
    else if (strcmp(n->op_type, "SequenceMap") == 0)
        rc = run_sequence_map(host, n, in, out, pool);
    else if (n->opset < 9)
        rc = run_scan8(host, n, in, out, pool);
    else
        rc = run_scan(host, n, in, out, pool);
    if (rc != KILN_OK)
        return rc;
    for (int j = 0; j < n->n_out; j++)
        if (n->out[j] < 0) {
            kn_free(out[j].data);
            out[j].data = NULL;
        }
    return KILN_OK;
}
