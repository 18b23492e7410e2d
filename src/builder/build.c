/* The build: check profiles, resolve shapes at the profile extremes, fold what is constant,
 * drop what is dead, fuse, annotate every value with its dtype and (symbolic) shape, check
 * that every node has a kernel, and serialise. */
#include "builder/builder.h"

#include "backend/cpu/math/gemm_bf16.h"
#include "backend/cpu/math/gemm_int8.h"
#include "builder/codegen.h"
#include "builder/thread_tune.h"
#include "builder/timing_cache.h"

#include "core/alloc.h"
#include "core/fileio.h"
#include "ir/placement.h"
#include "ops/op.h"
#include "passes/passes.h"
#include "shape/resolve.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Constant folding evaluates at most this many elements per node at build time. */
#define KN_BUILD_EVAL_ELEMS ((int64_t)1 << 24)

static void progress(const kiln_build_config *cfg, const char *stage, double f) {
    if (cfg->progress)
        cfg->progress(cfg->progress_user, stage, f);
}

static const kn_profile *find_profile(const kiln_build_config *cfg, const char *name) {
    for (int i = 0; i < cfg->n_profiles; i++)
        if (strcmp(cfg->profiles[i].input, name) == 0)
            return &cfg->profiles[i];
    return NULL;
}

/* A sequence or optional input is one block whose size only the value given at run time tells
 * (core/container.h), so it has no profile: one given (kiln.run passes every feed's shape) is
 * dropped, and the build resolves without its size. */
static const kn_profile *input_profile(const kiln_build_config *cfg, const kn_value *v) {
    return v->dtype == KILN_DTYPE_CONTAINER ? NULL : find_profile(cfg, v->name);
}

/* Every dynamic input needs a profile that agrees with its fixed dims; every profile must
 * name an input. */
static kiln_status check_profiles(const kn_graph *g, const kiln_build_config *cfg) {
    for (int p = 0; p < cfg->n_profiles; p++) {
        int v = kn_graph_find_value(g, cfg->profiles[p].input);
        if (v < 0 || !g->values[v].is_input)
            return kn_error(KILN_ERR_INVALID_ARGUMENT,
                            "profile names '%s', which is not an "
                            "input of the model",
                            cfg->profiles[p].input);
    }
    for (int i = 0; i < g->n_inputs; i++) {
        const kn_value *v = &g->values[g->inputs[i]];
        const kn_profile *p = input_profile(cfg, v);
        if (v->rank < 0)
            return kn_error(KILN_ERR_MODEL, "input '%s' has no declared rank", v->name);
        if (v->dtype == 0 || kn_dtype_size(v->dtype) == 0)
            return kn_error(KILN_ERR_UNSUPPORTED, "input '%s' has unsupported dtype %s", v->name,
                            kn_dtype_name(v->dtype));
        bool dynamic = false;
        for (int d = 0; d < v->rank; d++)
            dynamic |= v->dims[d].sym != NULL;
        if (p == NULL) {
            if (dynamic && v->dtype != KILN_DTYPE_CONTAINER)
                return kn_error(KILN_ERR_SHAPE,
                                "input '%s' has dynamic dims: give a shape or profile for it "
                                "(e.g. --shapes %s:1x...)",
                                v->name, v->name);
            continue;
        }
        if (p->rank != v->rank)
            return kn_error(KILN_ERR_SHAPE, "profile for '%s' has rank %d, the input has rank %d",
                            v->name, p->rank, v->rank);
        for (int d = 0; d < v->rank; d++)
            if (v->dims[d].sym == NULL &&
                (p->min[d] != v->dims[d].value || p->max[d] != v->dims[d].value))
                return kn_error(KILN_ERR_SHAPE,
                                "profile for '%s' axis %d: the dim is fixed at "
                                "%lld",
                                v->name, d, (long long)v->dims[d].value);
    }
    return KILN_OK;
}

static const kiln_plugin_instance *table_plugin(void *user, const kn_node *n, int index) {
    (void)index;
    return kn_plugin_table_get(user, n->name);
}

/* 0: min, 1: opt, 2: max */
static kiln_status resolve_at(const kn_graph *g, const kiln_build_config *cfg,
                              const kn_plugin_table *plugins, int which, kn_resolved *vals,
                              bool *deferred) {
    memset(vals, 0, (size_t)g->n_values * sizeof *vals);
    for (int i = 0; i < g->n_inputs; i++) {
        const kn_value *v = &g->values[g->inputs[i]];
        const kn_profile *p = input_profile(cfg, v);
        kn_resolved *r = &vals[g->inputs[i]];
        r->t.dtype = v->dtype;
        r->t.shape.rank = v->rank;
        for (int d = 0; d < v->rank; d++)
            r->t.shape.d[d] = p == NULL    ? v->dims[d].value
                              : which == 0 ? p->min[d]
                              : which == 1 ? p->opt[d]
                                           : p->max[d];
        r->known = v->dtype != KILN_DTYPE_CONTAINER;
    }
    kn_resolve_opts opts = {.max_eval_elems = KN_BUILD_EVAL_ELEMS,
                            .plugin_of = table_plugin,
                            .plugin_user = (void *)plugins};
    kiln_status rc = kn_resolve(g, vals, deferred, &opts);
    if (rc != KILN_OK) {
        kn_resolved_release(vals, g->n_values);
        static const char *names[] = {"min", "opt", "max"};
        if (cfg->n_profiles > 0)
            return kn_error_prefix(rc, "at the profile's %s shapes: ", names[which]);
    }
    return rc;
}

/* Name a dim that is a (lo, hi) pair across the profile after the input symbols it follows:
 * "height", "height/2", "seq*4", "seq+1", "batch*seq", else "dyn_LO..HI". */
static void name_dim(const kn_graph *g, const kn_resolved *lo, const kn_resolved *hi, int axis,
                     int64_t a, int64_t b, char *out, size_t size) {
    snprintf(out, size, "dyn_%lld..%lld", (long long)a, (long long)b);
    const char *sym[2 * KN_MAX_RANK];
    int64_t sl[2 * KN_MAX_RANK], sh[2 * KN_MAX_RANK];
    int n = 0;
    /* Symbols on the same axis come first: height and width often share a range. */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < g->n_inputs; i++) {
            const kn_value *in = &g->values[g->inputs[i]];
            for (int k = 0; k < in->rank && n < 2 * KN_MAX_RANK; k++) {
                int64_t x = lo[g->inputs[i]].t.shape.d[k], y = hi[g->inputs[i]].t.shape.d[k];
                if (in->dims[k].sym && x != y && (k == axis) == (pass == 0)) {
                    sym[n] = in->dims[k].sym, sl[n] = x, sh[n] = y;
                    n++;
                }
            }
        }
    /* A symbol itself beats any expression of another one. */
    for (int i = 0; i < n; i++)
        if (a == sl[i] && b == sh[i]) {
            snprintf(out, size, "%s", sym[i]);
            return;
        }
    for (int i = 0; i < n; i++) {
        for (int64_t k = 2; k <= 64; k++) {
            if (a == sl[i] * k && b == sh[i] * k) {
                snprintf(out, size, "%s*%lld", sym[i], (long long)k);
                return;
            }
            if (a == sl[i] / k && b == sh[i] / k && a > 0) {
                snprintf(out, size, "%s/%lld", sym[i], (long long)k);
                return;
            }
            if (a == (sl[i] + k - 1) / k && b == (sh[i] + k - 1) / k && a > 0) {
                snprintf(out, size, "ceil(%s/%lld)", sym[i], (long long)k);
                return;
            }
        }
        if (a - sl[i] == b - sh[i] && a - sl[i] > -64 && a - sl[i] < 64) {
            snprintf(out, size, "%s%+lld", sym[i], (long long)(a - sl[i]));
            return;
        }
    }
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (a == sl[i] * sl[j] && b == sh[i] * sh[j]) {
                snprintf(out, size, "%s*%s", sym[i], sym[j]);
                return;
            }
}

/* Exporters write value_info (and output types) that inference proves wrong: a stale shape
 * after an edit, another dtype. Inference wins, as in onnxruntime, and the model still builds;
 * a warning names the tensor. Only what is certain counts: a declared dtype, rank or fixed dim
 * that differs from what inference gives at the profile's min or max shape. */
static void warn_if_declared_differs(const kn_value *val, const kn_resolved *lo,
                                     const kn_resolved *hi) {
    bool differs = val->dtype != 0 && val->dtype != hi->t.dtype;
    if (val->rank >= 0 && val->rank != hi->t.shape.rank)
        differs = true;
    for (int d = 0; !differs && val->rank >= 0 && d < val->rank; d++)
        if (val->dims[d].sym == NULL && val->dims[d].value >= 0 &&
            (val->dims[d].value != lo->t.shape.d[d] || val->dims[d].value != hi->t.shape.d[d]))
            differs = true;
    if (!differs)
        return;
    char want[96] = "?", got[96];
    if (val->rank >= 0) {
        kn_shape s = {.rank = val->rank};
        for (int d = 0; d < val->rank; d++)
            s.d[d] = val->dims[d].sym == NULL ? val->dims[d].value : -1;
        kn_shape_str(&s, want, sizeof want);
    }
    kn_shape_str(&hi->t.shape, got, sizeof got);
    kn_log(KILN_LOG_WARNING,
           "tensor '%s': the model declares %s %s, inference gives %s %s; using the inferred type",
           val->name, val->dtype ? kn_dtype_name(val->dtype) : "?", want,
           kn_dtype_name(hi->t.dtype), got);
}

/* Give every value its dtype and shape; dims that differ between the profile extremes are
 * symbolic (named after an input symbol with the same extremes when there is one). On the
 * first pass (check_declared) the types the model declared are still there to compare. */
static kiln_status annotate(kn_graph *g, const kn_resolved *lo, const kn_resolved *hi,
                            bool check_declared) {
    for (int v = 0; v < g->n_values; v++) {
        kn_value *val = &g->values[v];
        if (val->is_input || val->data != NULL || !hi[v].known || !lo[v].known)
            continue;
        if (check_declared)
            warn_if_declared_differs(val, &lo[v], &hi[v]);
        val->dtype = hi[v].t.dtype;
        val->rank = hi[v].t.shape.rank;
        for (int d = 0; d < KN_MAX_RANK; d++) {
            kn_free(val->dims[d].sym);
            val->dims[d].sym = NULL;
            val->dims[d].value = 0;
            if (d >= val->rank)
                continue;
            int64_t a = lo[v].t.shape.d[d], b = hi[v].t.shape.d[d];
            if (a == b) {
                val->dims[d].value = a;
                continue;
            }
            char gen[160];
            name_dim(g, lo, hi, d, a, b, gen, sizeof gen);
            const char *name = gen;
            val->dims[d].value = -1;
            val->dims[d].sym = kn_strdup(name);
            if (val->dims[d].sym == NULL)
                return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        }
    }
    return KILN_OK;
}

/* The configured backends, found (a module loads here) so a build for a backend this machine
 * lacks fails at once with the reason. */
static kiln_status find_backends(const kiln_build_config *cfg, kn_backend **order, int *n) {
    *n = 0;
    for (int i = 0; i < cfg->n_backends; i++) {
        kiln_status rc = kn_backend_get(cfg->backends[i], &order[*n]);
        if (rc != KILN_OK)
            return rc;
        (*n)++;
    }
    return KILN_OK;
}

/* The graph resolved at the profile's three shapes, in the order asked for. */
typedef struct resolutions {
    kn_resolved *at[3];
    bool *deferred[3]; /* when asked for */
    int done;
    int n_values; /* values the arrays cover (passes may add more) */
} resolutions;

static const int min_opt_max[3] = {0, 1, 2};

static kiln_status resolve_three(kn_graph *g, const kiln_build_config *cfg,
                                 const kn_plugin_table *plugins, const int which[3],
                                 bool with_deferred, resolutions *r) {
    memset(r, 0, sizeof *r);
    r->n_values = g->n_values;
    size_t nv = (size_t)g->n_values + 1, nn = (size_t)g->n_nodes + 1;
    for (int k = 0; k < 3; k++)
        if ((r->at[k] = kn_calloc(nv, sizeof(kn_resolved))) == NULL ||
            (with_deferred && (r->deferred[k] = kn_calloc(nn, sizeof(bool))) == NULL))
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (; r->done < 3; r->done++)
        KN_TRY(resolve_at(g, cfg, plugins, which[r->done], r->at[r->done], r->deferred[r->done]));
    return KILN_OK;
}

static void resolutions_free(resolutions *r) {
    for (int k = 0; k < 3; k++) {
        if (r->at[k] != NULL && k < r->done)
            kn_resolved_release(r->at[k], r->n_values);
        kn_free(r->at[k]);
        kn_free(r->deferred[k]);
    }
}

/* Place nodes on the configured backends (before fusion, which only fuses nodes placed
 * together on a backend that runs the fused op). */
static kiln_status place(kn_graph *g, const kiln_build_config *cfg,
                         const kn_plugin_table *plugins) {
    kn_backend *order[8];
    int n_order;
    KN_TRY(find_backends(cfg, order, &n_order));
    bool device = false;
    for (int k = 0; k < n_order; k++)
        device |= strcmp(order[k]->iface->name, KN_BACKEND_HOST) != 0;
    if (!device) { /* everything stays on the host: only plugins that refuse it are checked */
        kn_placement p = {.order = order,
                          .n_order = n_order,
                          .plugin_of = table_plugin,
                          .plugin_user = (void *)plugins};
        return kn_pass_assign_backends(g, &p);
    }
    resolutions r;
    kiln_status rc = resolve_three(g, cfg, plugins, min_opt_max, true, &r);
    if (rc == KILN_OK) {
        kn_placement p = {.order = order,
                          .n_order = n_order,
                          .at = (const kn_resolved *const *)r.at,
                          .deferred = (const bool *const *)r.deferred,
                          .n_at = 3,
                          .plugin_of = table_plugin,
                          .plugin_user = (void *)plugins};
        rc = kn_pass_assign_backends(g, &p);
    }
    resolutions_free(&r);
    return rc;
}

/* One line saying which bf16 path the CPU's products take when some took it: a warning where
 * it is the slower portable one (no AVX512-BF16), --verbose's information otherwise. */
static void note_cpu_bf16(const kn_graph *g) {
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        const kn_attr *a = kn_node_attr(n, "kiln_weights");
        if (a == NULL && kn_op_is_product(n)) /* lowered whole: bf16 activations too */
            a = kn_node_attr(n, "kiln_precision");
        if (n->dead || a == NULL || a->type != KN_ATTR_STRING || strcmp(a->s, "bf16") != 0 ||
            strcmp(kn_node_backend(n), KN_BACKEND_HOST) != 0)
            continue;
        kn_log(kn_bf16_native() ? KILN_LOG_INFO : KILN_LOG_WARNING, "%s", kn_bf16_path_name());
        return;
    }
}

/* The same for int8 products placed on the CPU (QDQ models, --int8). */
static void note_cpu_int8(const kn_graph *g) {
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead || strcmp(n->domain, KN_DOMAIN) != 0 ||
            (strcmp(n->op_type, "QConv") != 0 && strcmp(n->op_type, "QMatMul") != 0) ||
            strcmp(kn_node_backend(n), KN_BACKEND_HOST) != 0)
            continue;
        kn_log(kn_qgemm_has_vnni() ? KILN_LOG_INFO : KILN_LOG_WARNING, "%s", kn_qgemm_path_name());
        return;
    }
}

/* Lower the precision of what the configuration and the backends allow. */
static kiln_status lower(kn_graph *g, const kiln_build_config *cfg,
                         const kn_plugin_table *plugins) {
    if (cfg->precision == KILN_PRECISION_FP32 && cfg->n_layer_precision == 0)
        return KILN_OK;
    resolutions r;
    kiln_status rc = resolve_three(g, cfg, plugins, min_opt_max, false, &r);
    if (rc == KILN_OK)
        rc = kn_pass_lower_precision(g, cfg->precision, cfg->layer_precision,
                                     cfg->n_layer_precision, (const kn_resolved *const *)r.at, 3);
    resolutions_free(&r);
    if (rc == KILN_OK)
        note_cpu_bf16(g);
    return rc;
}

static kiln_status tidy(kn_graph *g);

/* NHWC storage where the backends take it (passes/layout_nhwc.c): only 16-bit values qualify,
 * so a float32 build skips it. */
static kiln_status choose_layouts(kn_graph *g, const kiln_build_config *cfg,
                                  const kn_plugin_table *plugins) {
    if (cfg->precision != KILN_PRECISION_FP16 && cfg->precision != KILN_PRECISION_BF16 &&
        cfg->n_layer_precision == 0)
        return KILN_OK;
    resolutions r;
    int n_nhwc = 0;
    kiln_status rc = resolve_three(g, cfg, plugins, min_opt_max, false, &r);
    if (rc == KILN_OK)
        rc = kn_pass_layout_nhwc(g, (const kn_resolved *const *)r.at, 3, &n_nhwc);
    resolutions_free(&r);
    if (rc == KILN_OK && n_nhwc > 0) {
        kn_log(KILN_LOG_INFO, "%d layers store their tensors NHWC", n_nhwc);
        rc = tidy(g); /* the NCHW weights the permuted ones replace */
    }
    return rc;
}

/* Whether node n's backend runs it at resolution at (only its kernel can be checked when
 * its shapes are known at run time alone). */
static bool node_runs(kn_backend *b, const kn_node *n, const kn_resolved *at, kn_caps *caps) {
    kn_tensor in[KN_MAX_NODE_IO], out[KN_MAX_NODE_IO];
    bool known = true;
    for (int j = 0; j < n->n_in; j++) {
        in[j] = n->in[j] >= 0 ? at[n->in[j]].t : (kn_tensor){0};
        known &= n->in[j] < 0 || at[n->in[j]].known;
    }
    for (int j = 0; j < n->n_out; j++)
        out[j] = n->out[j] >= 0 ? at[n->out[j]].t : (kn_tensor){0};
    caps->reason[0] = '\0';
    if (!known)
        return b->iface->find_kernel(b, n->domain, n->op_type) != NULL;
    return kn_backend_supports(b, n, n->n_in, in, n->n_out, out, caps);
}

/* Every node's backend has its kernel and runs it with these dtypes and shapes at the
 * profile's min, opt and max: a node nothing can run (a float16 Conv on the CPU) fails the
 * build here, with its backend's reason. */
static kiln_status check_kernels(kn_graph *g, const kiln_build_config *cfg,
                                 const kn_plugin_table *plugins) {
    resolutions r;
    kiln_status rc = resolve_three(g, cfg, plugins, min_opt_max, false, &r);
    for (int i = 0; i < g->n_nodes && rc == KILN_OK; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead || kn_is_plugin_node(n) || kn_node_copy_kind(n) != KN_COPY_NONE)
            continue;
        const kn_op_schema *op = kn_op_find(n->domain, n->op_type);
        if (op != NULL && (op->flags & KN_OP_SUBGRAPH))
            continue; /* the runtime runs it on the host (runtime/subgraph.c) */
        kn_backend *b;
        if ((rc = kn_backend_get(kn_node_backend(n), &b)) != KILN_OK)
            break;
        kn_caps caps;
        for (int k = 0; k < 3 && rc == KILN_OK; k++)
            if (!node_runs(b, n, r.at[k], &caps))
                rc = kn_error(KILN_ERR_UNSUPPORTED, "node '%s' (%s%s%s): %s", n->name, n->domain,
                              n->domain[0] ? "." : "", n->op_type,
                              caps.reason[0] ? caps.reason : "no backend has a kernel for it");
    }
    resolutions_free(&r);
    return rc;
}

/* The node's tensors at resolution at, for a backend's supports/tune. */
static bool node_tensors(const kn_node *n, const kn_resolved *at, kn_tensor *in, kn_tensor *out) {
    bool known = true;
    for (int j = 0; j < n->n_in; j++) {
        in[j] = n->in[j] >= 0 ? at[n->in[j]].t : (kn_tensor){0};
        known &= n->in[j] < 0 || at[n->in[j]].known;
    }
    for (int j = 0; j < n->n_out; j++) {
        out[j] = n->out[j] >= 0 ? at[n->out[j]].t : (kn_tensor){0};
        known &= n->out[j] < 0 || at[n->out[j]].known;
    }
    return known;
}

/* Whether this build times the layers of backend b (kiln_build_config_set_tactics). */
static bool tunes_on(const kiln_build_config *cfg, const kn_backend *b) {
    if (b->iface->tune == NULL || b->iface->tune_key == NULL ||
        cfg->tactics == KILN_TACTICS_HEURISTIC)
        return false;
    if (cfg->tactics == KILN_TACTICS_TIMED)
        return true;
    return b->iface->tune_auto == KN_TUNE_ALWAYS ||
           (b->iface->tune_auto == KN_TUNE_WITH_CACHE && cfg->timing_cache != NULL);
}

/* The node's tuning key on its backend at resolution at; false when it has nothing to tune or
 * this build does not time its backend's layers. */
static bool tune_key_of(const kiln_build_config *cfg, const kn_node *n, const kn_resolved *at,
                        kn_backend **b, char *key, size_t size) {
    kn_tensor in[KN_MAX_NODE_IO], out[KN_MAX_NODE_IO];
    if (n->dead || kn_is_plugin_node(n) || kn_node_copy_kind(n) != KN_COPY_NONE ||
        kn_backend_get(kn_node_backend(n), b) != KILN_OK || !tunes_on(cfg, *b) ||
        !node_tensors(n, at, in, out))
        return false;
    return (*b)->iface->tune_key(*b, n, n->n_in, in, n->n_out, out, key, size);
}

/* The build's timing cache: the file (when one is given) is read when the first layer needs
 * it, and written at the end when layers were timed; without a file it still serves repeats
 * of a layer signature within the build. */
typedef struct build_cache {
    kn_timing_cache c;
    bool read;
    int n_read; /* entries read from the file: c.e[0 .. n_read) */
} build_cache;

static kiln_status cache_open(const kiln_build_config *cfg, build_cache *bc) {
    if (bc->read)
        return KILN_OK;
    bc->read = true;
    if (cfg->timing_cache != NULL)
        KN_TRY(kn_timing_cache_load(&bc->c, cfg->timing_cache));
    bc->n_read = bc->c.n;
    return KILN_OK;
}

static kiln_status cache_close(const kiln_build_config *cfg, build_cache *bc, bool save) {
    kiln_status rc = KILN_OK;
    if (save && cfg->timing_cache != NULL && bc->c.added)
        rc = kn_timing_cache_save(&bc->c, cfg->timing_cache);
    kn_timing_cache_clear(&bc->c);
    return rc;
}

/* Tactic selection by timing: each node whose backend tunes it gets the backend's choice at
 * the profile's opt shapes in its KN_ATTR_TACTIC attribute, from the timing cache when the
 * cache has its key, else timed now (and added to the cache, which also serves repeats of a
 * layer signature within this build). */
static kiln_status tune(kn_graph *g, const kiln_build_config *cfg, const kn_plugin_table *plugins,
                        build_cache *bc) {
    kn_backend *order[8];
    int n_order;
    bool any = false;
    KN_TRY(find_backends(cfg, order, &n_order));
    for (int k = 0; k < n_order; k++)
        any |= tunes_on(cfg, order[k]);
    if (!any)
        return KILN_OK;
    kn_resolved *at = kn_calloc((size_t)g->n_values + 1, sizeof *at);
    if (at == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    kiln_status rc = resolve_at(g, cfg, plugins, 1, at, NULL);
    if (rc != KILN_OK) {
        kn_free(at);
        return rc;
    }
    if ((rc = cache_open(cfg, bc)) != KILN_OK) {
        kn_resolved_release(at, g->n_values);
        kn_free(at);
        return rc;
    }
    kn_timing_cache *cache = &bc->c;
    char key[1024];
    kn_backend *b;
    int total = 0, done = 0, timed = 0, from_file = 0, failed = 0;
    for (int i = 0; i < g->n_nodes; i++)
        total += tune_key_of(cfg, &g->nodes[i], at, &b, key, sizeof key);
    for (int i = 0; i < g->n_nodes && rc == KILN_OK; i++) {
        const kn_node *n = &g->nodes[i];
        if (!tune_key_of(cfg, n, at, &b, key, sizeof key))
            continue;
        char stage[64];
        snprintf(stage, sizeof stage, "tuning %d/%d", ++done, total);
        progress(cfg, stage, 0.85 + 0.1 * done / total);
        const kn_timing_entry *e = kn_timing_cache_find(cache, key);
        if (e != NULL) {
            from_file += e - cache->e < bc->n_read;
        } else {
            kn_tensor in[KN_MAX_NODE_IO], out[KN_MAX_NODE_IO];
            node_tensors(n, at, in, out);
            int64_t v[KN_TACTIC_MAX];
            int nv = 0;
            char note[160] = "";
            /* Tuning only improves on the kernel's own choice: a layer it fails for runs
             * without a tactic (and is not cached, so a later build tries again). */
            if (b->iface->tune(b, n, n->n_in, in, n->n_out, out, v, &nv, note, sizeof note) !=
                KILN_OK) {
                kn_log(KILN_LOG_WARNING, "timing %s '%s' failed (%s); it runs without a tactic",
                       n->op_type, n->name, kiln_last_error());
                failed++;
                continue;
            }
            if (nv < 1 || nv > KN_TACTIC_MAX) {
                rc = kn_error(KILN_ERR_INTERNAL, "backend %s: tactic of %d integers for '%s'",
                              b->iface->name, nv, n->name);
                break;
            }
            kn_log(KILN_LOG_INFO, "timed %s '%s': %s", n->op_type, n->name, note);
            timed++;
            if ((rc = kn_timing_cache_add(cache, key, v, nv)) != KILN_OK)
                break;
            e = kn_timing_cache_find(cache, key);
        }
        kn_attr a = {
            .name = KN_ATTR_TACTIC, .type = KN_ATTR_INTS, .n = e->n, .ints = (int64_t *)e->v};
        rc = kn_node_set_attr(g, i, &a);
    }
    if (rc == KILN_OK)
        kn_log(KILN_LOG_INFO,
               "tuned %d layers: %d timed, %d from the timing cache file, %d repeating a layer "
               "timed before, %d failed",
               done, timed, from_file, done - timed - from_file - failed, failed);
    kn_resolved_release(at, g->n_values);
    kn_free(at);
    return rc;
}

/* Per-layer thread counts (thread_tune.c), timed at the profile's opt shapes on the threads
 * the engine's contexts will use, or taken from the timing cache. */
static kiln_status choose_threads(kn_graph *g, const kiln_build_config *cfg,
                                  const kn_plugin_table *plugins, build_cache *bc) {
    int threads = cfg->threads;
    if (threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (int)n : 1;
    }
    if (threads <= 1 || !kn_thread_tune_wanted(cfg->timing_cache != NULL))
        return KILN_OK;
    KN_TRY(cache_open(cfg, bc));
    kn_resolved *at = kn_calloc((size_t)g->n_values + 1, sizeof *at);
    if (at == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    kiln_status rc = resolve_at(g, cfg, plugins, 1, at, NULL);
    if (rc == KILN_OK) {
        rc = kn_thread_tune(g, at, threads, &bc->c, bc->n_read);
        kn_resolved_release(at, g->n_values);
    }
    kn_free(at);
    return rc;
}

/* Resolve at min and max, fold, annotate (check_declared: see annotate). */
static kiln_status resolve_fold_annotate(kn_graph *g, const kiln_build_config *cfg,
                                         const kn_plugin_table *plugins, bool fold,
                                         bool check_declared) {
    /* min, max, then opt: min and max name the symbolic dims, all three must agree to fold */
    static const int which[3] = {0, 2, 1};
    resolutions r;
    kiln_status rc = resolve_three(g, cfg, plugins, which, false, &r);
    if (rc == KILN_OK && fold)
        rc = kn_pass_fold_constants(g, (const kn_resolved *const *)r.at, 3);
    if (rc == KILN_OK)
        rc = annotate(g, r.at[0], r.at[1], check_declared);
    resolutions_free(&r);
    return rc;
}

static kiln_status tidy(kn_graph *g) {
    KN_TRY(kn_pass_eliminate_dead(g));
    KN_TRY(kn_graph_compact(g));
    return kn_graph_toposort(g);
}

/* Ifs on constant conditions take their branch for good; what the branch computes from
 * constants then folds too (and may be the condition of a nested If). */
static kiln_status inline_constant_ifs(kn_graph *g, const kiln_build_config *cfg,
                                       const kn_plugin_table *plugins) {
    for (int inlined = 1; inlined > 0;) {
        KN_TRY(kn_pass_inline_if(g, &inlined));
        if (inlined > 0) {
            KN_TRY(kn_graph_toposort(g)); /* dead-node elimination walks in order */
            KN_TRY(tidy(g));
            KN_TRY(resolve_fold_annotate(g, cfg, plugins, true, false));
            KN_TRY(tidy(g));
        }
    }
    return KILN_OK;
}

kiln_status kn_build_plan(const kiln_builder *b, const kiln_network *net,
                          const kiln_build_config *cfg, kn_plan *out) {
    memset(out, 0, sizeof *out);
    kn_graph *g = kn_graph_clone(net->graph);
    if (g == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory copying the network");
    kiln_status rc;
    kn_plugin_table plugins = {0};
    if (g->n_outputs == 0) {
        kn_graph_destroy(g);
        return kn_error(KILN_ERR_MODEL,
                        "the network has no outputs (mark one with "
                        "kiln_network_mark_output, or give the ONNX graph an output)");
    }
    progress(cfg, "checking", 0.0);
    if ((rc = kn_graph_toposort(g)) != KILN_OK || (rc = check_profiles(g, cfg)) != KILN_OK ||
        (rc = kn_plugin_bind_graph(g, b->registry, cfg->prefer_plugin, cfg->n_prefer, &plugins)) !=
            KILN_OK)
        goto fail;
    if ((rc = kn_pass_fuse_qdq(g)) != KILN_OK || (rc = tidy(g)) != KILN_OK ||
        (rc = kn_pass_elide_qdq(g)) != KILN_OK || (rc = tidy(g)) != KILN_OK)
        goto fail;
    progress(cfg, "folding constants", 0.3);
    if ((rc = resolve_fold_annotate(g, cfg, &plugins, true, true)) != KILN_OK ||
        (rc = tidy(g)) != KILN_OK || (rc = inline_constant_ifs(g, cfg, &plugins)) != KILN_OK)
        goto fail;
    progress(cfg, "placing", 0.5);
    if ((rc = kn_pass_fold_batchnorm(g)) != KILN_OK || (rc = tidy(g)) != KILN_OK)
        goto fail;
    /* Calibration sees the weights batch-norm folding leaves, which are the ones that run. */
    if (cfg->int8 && ((rc = kn_int8_calibrate(b, cfg, g)) != KILN_OK || (rc = tidy(g)) != KILN_OK ||
                      (rc = kn_pass_elide_qdq(g)) != KILN_OK || (rc = tidy(g)) != KILN_OK ||
                      (rc = resolve_fold_annotate(g, cfg, &plugins, true, false)) != KILN_OK ||
                      (rc = tidy(g)) != KILN_OK))
        goto fail;
    if ((rc = kn_pass_fuse_qadd(g)) != KILN_OK || (rc = tidy(g)) != KILN_OK ||
        (rc = place(g, cfg, &plugins)) != KILN_OK)
        goto fail;
    note_cpu_int8(g);
    progress(cfg, "fusing", 0.6);
    /* Attention is fused for 16-bit plans only: in float32 the fused kernel runs on CUDA
     * cores and measured slower than the products and softmax it replaces (passes.h). */
    bool half = cfg->precision == KILN_PRECISION_FP16 || cfg->precision == KILN_PRECISION_BF16;
    if ((half && ((rc = kn_pass_fuse_attention(g)) != KILN_OK || (rc = tidy(g)) != KILN_OK)) ||
        (rc = kn_pass_recognize_gelu(g)) != KILN_OK || (rc = tidy(g)) != KILN_OK ||
        (rc = kn_pass_fuse_activations(g)) != KILN_OK || (rc = tidy(g)) != KILN_OK ||
        (rc = kn_pass_expand_qdq_pairs(g)) != KILN_OK || (rc = tidy(g)) != KILN_OK ||
        (rc = kn_pass_fuse_elementwise(g)) != KILN_OK || (rc = tidy(g)) != KILN_OK ||
        (rc = kn_pass_fuse_depthwise_input(g)) != KILN_OK || (rc = tidy(g)) != KILN_OK ||
        (rc = kn_pass_fuse_channel_scale(
             g, (cfg->precision == KILN_PRECISION_FP32 || cfg->precision == KILN_PRECISION_TF32) &&
                    cfg->n_layer_precision == 0)) != KILN_OK ||
        (rc = tidy(g)) != KILN_OK)
        goto fail;
    progress(cfg, "annotating", 0.7);
    int before_copies = g->n_nodes;
    /* Lowering leaves the float32 constants it converted unread: tidy drops them, so the plan
     * holds each weight once. */
    bool lowering = cfg->precision != KILN_PRECISION_FP32 || cfg->n_layer_precision > 0;
    if ((rc = resolve_fold_annotate(g, cfg, &plugins, false, false)) != KILN_OK ||
        (rc = lower(g, cfg, &plugins)) != KILN_OK || (lowering && (rc = tidy(g)) != KILN_OK) ||
        ((lowering || g->n_nodes != before_copies) &&
         (rc = resolve_fold_annotate(g, cfg, &plugins, false, false)) != KILN_OK))
        goto fail;
    before_copies = g->n_nodes;
    if ((rc = kn_pass_insert_copies(g)) != KILN_OK ||
        (g->n_nodes != before_copies &&
         (rc = resolve_fold_annotate(g, cfg, &plugins, false, false)) != KILN_OK))
        goto fail;
    if ((rc = choose_layouts(g, cfg, &plugins)) != KILN_OK)
        goto fail;
    progress(cfg, "checking kernels", 0.85);
    if ((rc = kn_check_in_place_inputs(g)) != KILN_OK ||
        (rc = check_kernels(g, cfg, &plugins)) != KILN_OK)
        goto fail;
    build_cache bc = {0};
    rc = tune(g, cfg, &plugins, &bc);
    if (rc == KILN_OK) {
        progress(cfg, "timing thread counts", 0.9);
        rc = choose_threads(g, cfg, &plugins, &bc);
    }
    kiln_status saved = cache_close(cfg, &bc, rc == KILN_OK);
    if (rc == KILN_OK)
        rc = saved;
    if (rc != KILN_OK)
        goto fail;
    progress(cfg, "generating code", 0.95);
    if ((rc = kn_build_generate(g)) != KILN_OK)
        goto fail;
    out->graph = g;
    out->threads = cfg->threads;
    out->profiles = kn_calloc((size_t)cfg->n_profiles + 1, sizeof(kn_profile));
    if (out->profiles == NULL) {
        rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        goto fail_out;
    }
    for (int i = 0; i < cfg->n_profiles; i++) {
        int v = kn_graph_find_value(g, cfg->profiles[i].input);
        if (v >= 0 && input_profile(cfg, &g->values[v]) == NULL)
            continue;
        kn_profile *p = &out->profiles[out->n_profiles++];
        *p = cfg->profiles[i];
        p->input = kn_strdup(cfg->profiles[i].input);
        if (p->input == NULL) {
            rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
            goto fail_out;
        }
    }
    progress(cfg, "done", 1.0);
    kn_plugin_table_clear(&plugins);
    return KILN_OK;
fail_out:
    kn_plan_clear(out);
    kn_plugin_table_clear(&plugins);
    return rc;
fail:
    kn_graph_destroy(g);
    kn_plugin_table_clear(&plugins);
    return rc;
}

kiln_status kiln_build(kiln_builder *b, const kiln_network *net, const kiln_build_config *cfg,
                       void **data, size_t *size) {
    if (b == NULL || net == NULL || cfg == NULL || data == NULL || size == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_build: NULL argument");
    *data = NULL;
    *size = 0;
    kn_plan plan;
    KN_TRY(kn_build_plan(b, net, cfg, &plan));
    kiln_status rc = kn_plan_write(&plan, data, size);
    kn_plan_clear(&plan);
    return rc;
}

kiln_status kiln_build_to_file(kiln_builder *b, const kiln_network *net,
                               const kiln_build_config *cfg, const char *path) {
    if (path == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_build_to_file: NULL path");
    void *data;
    size_t size;
    KN_TRY(kiln_build(b, net, cfg, &data, &size));
    kiln_status rc = kn_file_write_atomic(path, data, size);
    kn_free(data);
    return rc;
}
