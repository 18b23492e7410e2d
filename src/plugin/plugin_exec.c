/* Plugin nodes at build and run time: dtypes, shapes, format negotiation, configure, shape
 * changes, workspace and enqueue. */
#include "plugin/plugin.h"

#include "core/alloc.h"
#include "core/status.h"
#include "plugin/expr.h"

#include <string.h>

#define KN_PLUGIN_MAX_IO 64

static void to_desc(const kn_tensor *t, kiln_tensor_desc *d) {
    memset(d, 0, sizeof *d);
    d->dtype = t->dtype;
    d->layout = KILN_LAYOUT_LINEAR;
    d->rank = t->shape.rank;
    for (int i = 0; i < t->shape.rank && i < KILN_PLUGIN_MAX_RANK; i++)
        d->dims[i] = t->shape.d[i];
}

static kiln_status negotiate(const kn_node *n, const kiln_plugin_instance *p, const kn_tensor *in,
                             const kn_tensor *out) {
    kiln_tensor_desc descs[2 * KN_PLUGIN_MAX_IO];
    int total = n->n_in + n->n_out;
    for (int i = 0; i < n->n_in; i++)
        to_desc(&in[i], &descs[i]);
    for (int i = 0; i < n->n_out; i++)
        to_desc(&out[i], &descs[n->n_in + i]);
    for (int pos = 0; pos < total; pos++) {
        const kiln_tensor_desc *d = &descs[pos];
        if (d->dtype == 0)
            continue; /* an omitted optional input */
        int32_t ok = p->ops->supports_format
                         ? p->ops->supports_format(p->self, pos, descs, n->n_in, n->n_out)
                         : d->dtype == KILN_DTYPE_FLOAT32;
        if (!ok)
            return kn_error(KILN_ERR_PLUGIN,
                            "node '%s': plugin '%s' refused %s %d as %s with the linear layout "
                            "(it does not support these dtypes or shapes)",
                            n->name, n->op_type, pos < n->n_in ? "input" : "output",
                            pos < n->n_in ? pos : pos - n->n_in, kn_dtype_name(d->dtype));
    }
    return KILN_OK;
}

kiln_status kn_plugin_infer(const kn_node *n, const kiln_plugin_instance *p, const kn_tensor *in,
                            kn_tensor *out) {
    if (p == NULL)
        return kn_error(KILN_ERR_PLUGIN, "node '%s': plugin '%s' has no instance", n->name,
                        n->op_type);
    if (n->n_in > KN_PLUGIN_MAX_IO || n->n_out > KN_PLUGIN_MAX_IO)
        return kn_error(KILN_ERR_PLUGIN, "node '%s': too many inputs or outputs", n->name);
    int32_t in_dt[KN_PLUGIN_MAX_IO], out_dt[KN_PLUGIN_MAX_IO];
    for (int i = 0; i < n->n_in; i++)
        in_dt[i] = in[i].dtype;
    for (int i = 0; i < n->n_out; i++)
        out_dt[i] = n->n_in > 0 ? in[0].dtype : KILN_DTYPE_FLOAT32;
    kn_error(KILN_ERR_PLUGIN, "failed without a reason");
    if (p->ops->output_dtypes &&
        p->ops->output_dtypes(p->self, n->n_in, in_dt, n->n_out, out_dt) != 0)
        return kn_error_prefix(KILN_ERR_PLUGIN, "node '%s': plugin '%s' output_dtypes: ", n->name,
                               n->op_type);
    kiln_expr_builder *b = kn_calloc(1, sizeof *b);
    kiln_shape_expr *se = kn_calloc(2 * KN_PLUGIN_MAX_IO, sizeof *se);
    kiln_status rc = KILN_OK;
    if (b == NULL || se == NULL) {
        rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        goto out_free;
    }
    kiln_shape_expr *ins = se, *outs = se + KN_PLUGIN_MAX_IO;
    for (int i = 0; i < n->n_in; i++) {
        ins[i].rank = in[i].shape.rank;
        for (int d = 0; d < in[i].shape.rank; d++)
            ins[i].dims[d] = kn_expr_constant(b, in[i].shape.d[d]);
    }
    kn_error(KILN_ERR_PLUGIN, "failed without a reason");
    if (p->ops->output_shapes(p->self, n->n_in, ins, n->n_out, outs, b) != 0) {
        rc = kn_error_prefix(KILN_ERR_PLUGIN, "node '%s': plugin '%s' output_shapes: ", n->name,
                             n->op_type);
        goto out_free;
    }
    for (int i = 0; i < n->n_out; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].dtype = out_dt[i];
        if (outs[i].rank < 0 || outs[i].rank > KILN_PLUGIN_MAX_RANK) {
            rc = kn_error(KILN_ERR_PLUGIN, "node '%s': plugin '%s' gave output %d rank %d", n->name,
                          n->op_type, i, outs[i].rank);
            goto out_free;
        }
        out[i].shape.rank = outs[i].rank;
        for (int d = 0; d < outs[i].rank; d++) {
            int64_t v;
            if (!kn_expr_value(outs[i].dims[d], &v) || v < 0) {
                rc = kn_error(KILN_ERR_PLUGIN,
                              "node '%s': plugin '%s' gave output %d an invalid "
                              "dim %d (negative, overflow or division by zero)",
                              n->name, n->op_type, i, d);
                goto out_free;
            }
            out[i].shape.d[d] = v;
        }
        if (kn_dtype_size(out_dt[i]) == 0) {
            rc = kn_error(KILN_ERR_PLUGIN, "node '%s': plugin '%s' gave output %d dtype %d",
                          n->name, n->op_type, i, out_dt[i]);
            goto out_free;
        }
    }
    rc = negotiate(n, p, in, out);
out_free:
    kn_free(b);
    kn_free(se);
    return rc;
}

static void to_dyn(const kn_tensor *lo, const kn_tensor *opt, const kn_tensor *hi,
                   kiln_dynamic_desc *d) {
    to_desc(opt, &d->desc);
    for (int i = 0; i < KILN_PLUGIN_MAX_RANK; i++) {
        d->min[i] = i < lo->shape.rank ? lo->shape.d[i] : 0;
        d->max[i] = i < hi->shape.rank ? hi->shape.d[i] : 0;
    }
}

kiln_status kn_plugin_configure(const kn_node *n, const kiln_plugin_instance *p,
                                const kn_tensor *in_lo, const kn_tensor *in_opt,
                                const kn_tensor *in_hi, const kn_tensor *out_lo,
                                const kn_tensor *out_opt, const kn_tensor *out_hi) {
    if (p->ops->configure == NULL)
        return KILN_OK;
    kiln_dynamic_desc din[KN_PLUGIN_MAX_IO], dout[KN_PLUGIN_MAX_IO];
    for (int i = 0; i < n->n_in && i < KN_PLUGIN_MAX_IO; i++)
        to_dyn(&in_lo[i], &in_opt[i], &in_hi[i], &din[i]);
    for (int i = 0; i < n->n_out && i < KN_PLUGIN_MAX_IO; i++)
        to_dyn(&out_lo[i], &out_opt[i], &out_hi[i], &dout[i]);
    kn_error(KILN_ERR_PLUGIN, "failed without a reason");
    if (p->ops->configure(p->self, n->n_in, din, n->n_out, dout) != 0)
        return kn_error_prefix(KILN_ERR_PLUGIN, "node '%s': plugin '%s' configure: ", n->name,
                               n->op_type);
    return KILN_OK;
}

/* Grow the workspace to ws bytes in b's memory space (host memory for the host). */
static kiln_status grow_workspace(const kn_node *n, kn_plugin_run *run, size_t ws, kn_backend *b,
                                  kn_stream *s) {
    if (b == NULL || kn_mem_host_visible(b->iface->mem) || b->iface->buffer_alloc == NULL) {
        void *m = kn_aligned_alloc(ws, 64);
        if (m == NULL)
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "node '%s': plugin workspace of %zu bytes",
                            n->name, ws);
        kn_free(run->ws);
        run->ws = m;
        run->ws_size = ws;
        return KILN_OK;
    }
    /* Work enqueued before may still use the old workspace. */
    if (run->dws.base != NULL && b->iface->stream_sync != NULL)
        KN_TRY(b->iface->stream_sync(b, s));
    kn_buffer nb;
    KN_TRY(b->iface->buffer_alloc(b, b->iface->mem, ws, &nb));
    if (run->dws.base != NULL)
        run->wb->iface->buffer_free(run->wb, &run->dws);
    run->dws = nb;
    run->wb = b;
    run->ws = NULL;
    run->ws_size = ws;
    return KILN_OK;
}

kiln_status kn_plugin_shapes_changed(const kn_node *n, kn_plugin_run *run, const kn_tensor *in,
                                     const kn_tensor *out, kn_backend *b, kn_stream *s) {
    kiln_tensor_desc din[KN_PLUGIN_MAX_IO], dout[KN_PLUGIN_MAX_IO];
    for (int i = 0; i < n->n_in && i < KN_PLUGIN_MAX_IO; i++)
        to_desc(&in[i], &din[i]);
    for (int i = 0; i < n->n_out && i < KN_PLUGIN_MAX_IO; i++)
        to_desc(&out[i], &dout[i]);
    const kiln_plugin_instance *p = &run->inst;
    kn_error(KILN_ERR_PLUGIN, "failed without a reason");
    if (p->ops->on_shape_change &&
        p->ops->on_shape_change(p->self, n->n_in, din, n->n_out, dout) != 0)
        return kn_error_prefix(KILN_ERR_PLUGIN, "node '%s': plugin '%s' on_shape_change: ", n->name,
                               n->op_type);
    size_t ws =
        p->ops->workspace_size ? p->ops->workspace_size(p->self, n->n_in, din, n->n_out, dout) : 0;
    if (ws > run->ws_size)
        return grow_workspace(n, run, ws, b, s);
    return KILN_OK;
}

static kiln_status plugin_run(kn_kernel_ctx *k) {
    const kn_node *n = k->node;
    kn_plugin_run *run = k->state;
    kiln_tensor_desc din[KN_PLUGIN_MAX_IO], dout[KN_PLUGIN_MAX_IO];
    const void *ip[KN_PLUGIN_MAX_IO];
    void *op[KN_PLUGIN_MAX_IO];
    for (int i = 0; i < k->n_in; i++) {
        to_desc(&k->in[i], &din[i]);
        ip[i] = k->in[i].data;
    }
    for (int i = 0; i < k->n_out; i++) {
        to_desc(&k->out[i], &dout[i]);
        op[i] = k->out[i].data;
    }
    kiln_stream stream = {.backend = KILN_BACKEND_CPU, .handle = NULL, .host_private = k->pool};
    const kn_backend_iface *bi = k->backend ? k->backend->iface : NULL;
    if (bi != NULL && bi->stream_native != NULL) {
        stream.backend = bi->plugin_stream_kind;
        stream.handle = bi->stream_native(k->backend, k->stream);
    }
    kn_error(KILN_ERR_PLUGIN, "failed without a reason");
    void *ws = run->ws_size == 0 ? NULL : run->dws.base != NULL ? run->dws.base : run->ws;
    if (run->inst.ops->enqueue(run->inst.self, k->n_in, din, ip, k->n_out, dout, op, ws, &stream) !=
        0)
        return kn_error_prefix(KILN_ERR_PLUGIN, "plugin '%s' enqueue: ", n->op_type);
    return KILN_OK;
}

const kn_kernel kn_plugin_kernel = {
    .domain = KN_PLUGIN_DOMAIN, .name = "*", .run = plugin_run, .prepare = NULL, .release = NULL};
