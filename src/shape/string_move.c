#include "shape/string_move.h"

#include "core/alloc.h"
#include "core/strings.h"
#include "ops/op.h"

#include <stdio.h>
#include <string.h>

static const char *const movers[] = {
    "Reshape",        "Flatten",  "Squeeze",         "Unsqueeze", "Transpose",    "Gather",
    "GatherElements", "GatherND", "Slice",           "Expand",    "Tile",         "Split",
    "Concat",         "Where",    "ReverseSequence", "Compress",  "DepthToSpace", "SpaceToDepth"};

/* Whether input i of n is one of the data inputs the op moves (the rest are indices, shapes,
 * conditions: never strings). */
static bool data_input(const kn_node *n, int i) {
    if (strcmp(n->op_type, "Concat") == 0)
        return true;
    if (strcmp(n->op_type, "Where") == 0)
        return i == 1 || i == 2;
    return i == 0;
}

static bool is_mover(const kn_node *n) {
    return n->domain[0] == '\0' && kn_op_is_one_of(n, movers, sizeof movers / sizeof movers[0]);
}

bool kn_string_moves(const kn_node *n, int n_in, const kn_tensor *in) {
    if (!is_mover(n))
        return false;
    for (int i = 0; i < n_in; i++)
        if (in[i].dtype == KILN_DTYPE_STRING && data_input(n, i))
            return true;
    return false;
}

bool kn_string_moves_in(const kn_graph *g, const kn_node *n) {
    if (!is_mover(n))
        return false;
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i] >= 0 && data_input(n, i) && g->values[n->in[i]].dtype == KILN_DTYPE_STRING)
            return true;
    return false;
}

typedef struct index_run {
    kn_tensor in[KN_MAX_NODE_IO];
    kn_strings src[KN_MAX_NODE_IO];
    int64_t base[KN_MAX_NODE_IO + 1]; /* first index of each string input */
    int n_src, src_of[KN_MAX_NODE_IO];
} index_run;

static void free_run(index_run *r, int n_in) {
    for (int i = 0; i < n_in; i++)
        if (r->src_of[i] >= 0)
            kn_free(r->in[i].data);
}

/* in with every string input replaced by its element indices (all if with_data, else shapes
 * only). */
static kiln_status index_inputs(const kn_node *n, int n_in, const kn_tensor *in, bool with_data,
                                index_run *r) {
    memset(r, 0, sizeof *r);
    if (n_in > KN_MAX_NODE_IO)
        return kn_error(KILN_ERR_UNSUPPORTED, "more than %d inputs", KN_MAX_NODE_IO);
    for (int i = 0; i < n_in; i++) {
        r->src_of[i] = -1;
        r->in[i] = in[i];
        if (!data_input(n, i) || in[i].dtype == 0)
            continue;
        if (in[i].dtype != KILN_DTYPE_STRING) {
            free_run(r, i);
            return kn_error(KILN_ERR_DTYPE, "input %d is %s; the other data inputs are strings", i,
                            kn_dtype_name(in[i].dtype));
        }
        char what[32];
        snprintf(what, sizeof what, "input %d", i);
        kn_strings *s = &r->src[r->n_src];
        kiln_status rc = kn_strings_open(&in[i], what, s);
        int64_t *idx = rc == KILN_OK && with_data ? kn_malloc((size_t)s->count * 8 + 8) : NULL;
        if (rc == KILN_OK && with_data && idx == NULL)
            rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        if (rc != KILN_OK) {
            free_run(r, i);
            return rc;
        }
        int64_t base = r->base[r->n_src];
        for (int64_t k = 0; idx != NULL && k < s->count; k++)
            idx[k] = base + k;
        r->in[i] = (kn_tensor){.dtype = KILN_DTYPE_INT64, .shape = s->shape, .data = idx};
        r->src_of[i] = r->n_src;
        r->base[r->n_src + 1] = base + s->count;
        r->n_src++;
    }
    return KILN_OK;
}

/* The string an index names (the inputs' indices run on from one input to the next). */
static kn_str named(const index_run *r, int64_t v) {
    int k = 0;
    while (k + 1 < r->n_src && v >= r->base[k + 1])
        k++;
    return kn_strings_at(&r->src[k], v - r->base[k]);
}

kiln_status kn_string_move_eval(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                                kn_tensor *out) {
    const kn_op_schema *op = kn_op_find(n->domain, n->op_type);
    kn_backend *host = kn_backend_host();
    const kn_kernel *k = op != NULL ? host->iface->find_kernel(host, n->domain, n->op_type) : NULL;
    if (k == NULL || n_out > KN_MAX_NODE_IO)
        return kn_error(KILN_ERR_INTERNAL, "%s cannot move strings here", n->op_type);
    index_run r;
    KN_TRY(index_inputs(n, n_in, in, true, &r));
    kn_tensor idx[KN_MAX_NODE_IO];
    memset(idx, 0, sizeof idx);
    kn_infer_ctx ic = {.node = n, .n_in = n_in, .in = r.in, .n_out = n_out, .out = idx};
    kiln_status rc = op->infer(&ic);
    if (rc == KN_NEED_DATA)
        rc = kn_error(KILN_ERR_INTERNAL, "%s needs data it was not given", n->op_type);
    for (int i = 0; rc == KILN_OK && i < n_out; i++) {
        if (idx[i].dtype == 0)
            continue;
        if (idx[i].dtype != KILN_DTYPE_INT64 || !kn_shape_valid(&idx[i].shape))
            rc = kn_error(KILN_ERR_INTERNAL, "%s made an output that is no index", n->op_type);
        else if ((idx[i].data = kn_malloc(kn_tensor_nbytes(&idx[i]) + 8)) == NULL)
            rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    void *state = NULL;
    if (rc == KILN_OK && k->prepare != NULL)
        rc = k->prepare(n, n_in, r.in, &state);
    if (rc == KILN_OK) {
        kn_kernel_ctx kc = {.node = n,
                            .n_in = n_in,
                            .in = r.in,
                            .n_out = n_out,
                            .out = idx,
                            .state = state,
                            .backend = host};
        rc = k->run(&kc);
        if (k->release != NULL)
            k->release(state);
    }
    for (int i = 0; i < n_out; i++)
        out[i] = (kn_tensor){0};
    for (int i = 0; rc == KILN_OK && i < n_out; i++) {
        if (idx[i].dtype == 0)
            continue;
        kn_strings_builder b;
        rc = kn_strings_begin(&b, &idx[i].shape);
        const int64_t *v = idx[i].data;
        for (int64_t j = 0; rc == KILN_OK && j < b.count; j++) {
            if (v[j] < 0 || v[j] >= r.base[r.n_src]) {
                kn_strings_abort(&b);
                rc = kn_error(KILN_ERR_INTERNAL, "%s moved an index out of range", n->op_type);
                break;
            }
            kn_str s = named(&r, v[j]);
            kn_strings_add(&b, s.p, s.n);
        }
        if (rc == KILN_OK)
            rc = kn_strings_finish(&b, &out[i]);
    }
    for (int i = 0; i < n_out; i++)
        kn_free(idx[i].data);
    free_run(&r, n_in);
    if (rc != KILN_OK)
        for (int i = 0; i < n_out; i++) {
            kn_free(out[i].data);
            out[i].data = NULL;
        }
    return rc;
}

kiln_status kn_string_move_infer(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                                 kn_tensor *out) {
    for (int i = 0; i < n_in; i++)
        if (in[i].dtype != 0 && in[i].data == NULL && kn_tensor_nbytes(&in[i]) > 0)
            return KN_NEED_DATA;
    KN_TRY(kn_string_move_eval(n, n_in, in, n_out, out));
    for (int i = 0; i < n_out; i++) {
        kn_free(out[i].data);
        out[i].data = NULL;
    }
    return KILN_OK;
}

static kiln_status run_move(kn_kernel_ctx *k) {
    kn_tensor res[KN_MAX_NODE_IO];
    if (k->n_out > KN_MAX_NODE_IO)
        return kn_error(KILN_ERR_UNSUPPORTED, "more than %d outputs", KN_MAX_NODE_IO);
    KN_TRY(kn_string_move_eval(k->node, k->n_in, k->in, k->n_out, res));
    kiln_status rc = KILN_OK;
    for (int i = 0; i < k->n_out; i++) {
        if (k->out[i].dtype == 0 || res[i].data == NULL)
            continue;
        if (rc == KILN_OK && !kn_shape_equal(&res[i].shape, &k->out[i].shape))
            rc = kn_error(KILN_ERR_INTERNAL, "output %d's size changed since inference", i);
        if (rc == KILN_OK)
            memcpy(k->out[i].data, res[i].data, kn_tensor_nbytes(&res[i]));
        kn_free(res[i].data);
    }
    return rc;
}

const kn_kernel kn_string_move_kernel = {.run = run_move};
