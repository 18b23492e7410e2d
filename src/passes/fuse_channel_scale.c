/* Fold a per-channel scale of a 1x1 convolution's input into the convolution (conventions in
 * passes.h):
 *
 *   Mul(x [N, C, H, W], s [N or 1, C, 1, 1])  ->  x'  ->  Conv / kiln.FusedConv (1x1)
 *
 * becomes
 *
 *   kiln.ScaledConv(x, w, b, z, s)
 *
 * the squeeze-and-excitation block's channel multiply of EfficientNet and MobileNetV3 ahead of
 * its projection conv. Since the conv sums over channels, scaling channel c of x by s[n][c] is
 * scaling column c of the weights. The CPU kernel scales the rows of x as its GEMM packs them
 * (free) or, where the GEMM reads x in place (C_out <= 24 over C <= 256, src/backend/cpu/math/
 * gemm.c's DIRECT_MAX_M and DIRECT_MAX_K), a copy of the weights per image (C_out x C
 * multiplies), instead of a pass that reads and writes the whole of x (C x H x W). Only where
 * that is cheaper (the GEMM packs x, or C_out <= H x W, with H and W fixed), both nodes run on
 * the host, the plan computes them in float32, and x' has no other reader. */
#include "passes/passes.h"

#include "core/alloc.h"
#include "ir/placement.h"
#include "ops/op.h"

#include <stdlib.h>
#include <string.h>

/* KILN_FUSE_CHANNEL_SCALE=0 leaves every pair apart (a switch for measuring the fusion). */
static bool fusion_on(void) {
    const char *e = getenv("KILN_FUSE_CHANNEL_SCALE");
    return e == NULL || strcmp(e, "0") != 0;
}

static bool fixed(const kn_value *v, int i, int64_t want) {
    return v->dims[i].sym == NULL && v->dims[i].value >= 0 &&
           (want < 0 || v->dims[i].value == want);
}

/* Whether x [N, C, H, W] (H, W fixed) times s [N or 1, C, 1, 1] is a per-channel scale of x,
 * all float32. */
static bool channel_scale(const kn_value *x, const kn_value *s) {
    if (x->rank != 4 || s->rank != 4 || x->dtype != KILN_DTYPE_FLOAT32 ||
        s->dtype != KILN_DTYPE_FLOAT32 || !fixed(x, 1, -1) || !fixed(x, 2, -1) ||
        !fixed(x, 3, -1) || !fixed(s, 1, x->dims[1].value) || !fixed(s, 2, 1) || !fixed(s, 3, 1))
        return false;
    if (fixed(s, 0, 1))
        return true;
    /* the same batch: both fixed and equal, or one symbol */
    return x->dims[0].sym != NULL
               ? s->dims[0].sym != NULL && strcmp(x->dims[0].sym, s->dims[0].sym) == 0
               : fixed(s, 0, x->dims[0].value);
}

static bool all_equal(const kn_node *n, const char *name, int64_t v) {
    const int64_t *a;
    int64_t c = kn_attr_ints(n, name, &a);
    for (int64_t i = 0; i < c; i++)
        if (a[i] != v)
            return false;
    return true;
}

/* Whether the CPU's GEMM packs x for a 1x1 conv of c_out over c channels (and so scales it for
 * free): everything but its direct path's products. */
static bool x_packed(int64_t c_out, int64_t c) {
    return c_out > 24 || c > 256;
}

/* Whether node d is a 1x1, stride-1, unpadded, ungrouped convolution of constant float32
 * weights [C_out, C, 1, 1] where the scale costs less inside it (see the top). */
static bool pointwise_conv(const kn_graph *g, const kn_node *d, int64_t c, int64_t hw) {
    if (!(kn_node_is(d, "", "Conv") || kn_node_is(d, KN_DOMAIN, "FusedConv")) || d->n_in < 2 ||
        d->n_in > 4 || d->n_out != 1 || d->in[1] < 0)
        return false;
    const kn_value *w = &g->values[d->in[1]];
    const char *pad = kn_attr_string(d, "auto_pad", "NOTSET");
    return kn_value_is_const(w) && w->dtype == KILN_DTYPE_FLOAT32 && w->rank == 4 &&
           w->dims[1].value == c && w->dims[2].value == 1 && w->dims[3].value == 1 &&
           (w->dims[0].value <= hw || x_packed(w->dims[0].value, c)) &&
           kn_attr_int(d, "group", 1) == 1 && all_equal(d, "strides", 1) &&
           all_equal(d, "pads", 0) && (strcmp(pad, "NOTSET") == 0 || strcmp(pad, "VALID") == 0);
}

/* Rewrite m -> d (checked by the caller): x and s go to d as inputs 0 and 4. */
static kiln_status fuse(kn_graph *g, int mi, int di, int x, int s) {
    kn_node *d = &g->nodes[di];
    KN_TRY(kn_node_grow_inputs(d, 5));
    d->in[0] = x;
    d->in[4] = s;
    KN_TRY(kn_node_set_op(d, KN_DOMAIN, "ScaledConv", 1));
    g->nodes[mi].dead = true;
    return KILN_OK;
}

kiln_status kn_pass_fuse_channel_scale(kn_graph *g, bool float32_plan) {
    if (!fusion_on() || !float32_plan)
        return KILN_OK;
    int *uses = kn_graph_value_uses(g);
    if (uses == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory fusing channel scales");
    kiln_status rc = KILN_OK;
    for (int mi = 0; mi < g->n_nodes && rc == KILN_OK; mi++) {
        const kn_node *m = &g->nodes[mi];
        if (!kn_node_is(m, "", "Mul") || m->n_in != 2 || m->n_out != 1 || m->out[0] < 0 ||
            m->in[0] < 0 || m->in[1] < 0 || strcmp(kn_node_backend(m), KN_BACKEND_HOST) != 0)
            continue;
        int x = m->in[0], s = m->in[1];
        if (!channel_scale(&g->values[x], &g->values[s])) {
            x = m->in[1];
            s = m->in[0];
            if (!channel_scale(&g->values[x], &g->values[s]))
                continue;
        }
        const kn_value *xv = &g->values[x];
        int di = kn_graph_sole_consumer(g, uses, m->out[0]);
        if (di < 0 || g->nodes[di].in[0] != m->out[0] ||
            !pointwise_conv(g, &g->nodes[di], xv->dims[1].value,
                            xv->dims[2].value * xv->dims[3].value) ||
            strcmp(kn_node_backend(&g->nodes[di]), KN_BACKEND_HOST) != 0)
            continue;
        rc = fuse(g, mi, di, x, s);
        uses[m->out[0]] = 0;
    }
    kn_free(uses);
    return rc;
}
