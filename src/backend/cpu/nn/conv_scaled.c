/* kiln.ScaledConv on the CPU (passes.h): a 1x1 convolution of x scaled per image and channel
 * by s, without the separate multiply's pass that reads and writes all of x (C x H x W). Where
 * the GEMM packs x (kn_gemm_scales_b), the rows of x are scaled as they are packed. Otherwise
 * (few output channels over few input channels: x read in place) the sum over channels lets the
 * scale move to the weights: each image's product runs with a copy of the packed weights whose
 * column c is multiplied by s[n][c] (C_out x C multiplies, into a buffer the context keeps). */
#include "backend/cpu/cpu.h"
#include "backend/cpu/math/gemm.h"
#include "backend/cpu/nn/conv.h"
#include "core/alloc.h"
#include "ops/nn/conv_geom.h"

/* This context's scaled copy of the weights. */
typedef struct scaled_local {
    kn_local_state base;
    kn_gemm_packed *w;
} scaled_local;

static void local_release(kn_local_state *self) {
    scaled_local *l = (scaled_local *)self;
    kn_gemm_packed_free(l->w);
    kn_free(l);
}

kiln_status kn_cpu_scaled_conv_prepare(const kn_node *node, int n_in, const kn_tensor *in,
                                       void **state) {
    (void)node;
    *state = NULL;
    if (n_in < 2 || in[1].data == NULL || in[1].dtype != KILN_DTYPE_FLOAT32 ||
        in[1].shape.rank != 4)
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "the CPU runs kiln.ScaledConv with constant float32 weights [M, C, 1, 1]");
    const kn_shape *w = &in[1].shape;
    kn_gemm_packed *a;
    KN_TRY(kn_gemm_pack_a(in[1].data, w->d[1], false, w->d[0], w->d[1], &a));
    *state = a;
    return KILN_OK;
}

void kn_cpu_scaled_conv_release(void *state) {
    kn_gemm_packed_free(state);
}

/* The context's buffer for the scaled weights (made on first use), or with no context-local
 * state a new one the caller frees (*owned). */
static kiln_status scaled_weights(kn_kernel_ctx *k, const kn_gemm_packed *a, kn_gemm_packed **ws,
                                  bool *owned) {
    scaled_local *l = k->local != NULL ? (scaled_local *)*k->local : NULL;
    *owned = false;
    if (l != NULL && l->w != NULL) {
        *ws = l->w;
        return KILN_OK;
    }
    KN_TRY(kn_gemm_packed_like(a, ws));
    if (k->local == NULL) {
        *owned = true;
        return KILN_OK;
    }
    l = kn_calloc(1, sizeof *l);
    if (l == NULL) {
        kn_gemm_packed_free(*ws);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory in ScaledConv");
    }
    l->base.release = local_release;
    l->w = *ws;
    *k->local = &l->base;
    return KILN_OK;
}

kiln_status kn_cpu_scaled_conv_run(kn_kernel_ctx *k) {
    kn_conv_geom g;
    KN_TRY(kn_conv_geom_init(k->node, &k->in[0].shape, &k->in[1].shape, false, &g));
    const kn_tensor *s = &k->in[4];
    if (k->in[0].dtype != KILN_DTYPE_FLOAT32 || s->dtype != KILN_DTYPE_FLOAT32)
        return kn_error(KILN_ERR_DTYPE, "the CPU runs kiln.ScaledConv in float32 only");
    kn_epilogue ep = {0};
    KN_TRY(kn_cpu_fused_epilogue(k, 3, &ep));
    const kn_gemm_packed *a = k->state;
    int64_t hw = g.out[0] * g.out[1], cin = g.c_in, cout = g.c_out;
    const float *x = k->in[0].data, *sd = s->data;
    const float *bias = k->in[2].dtype != 0 ? k->in[2].data : NULL;
    float *y = k->out[0].data;
    bool per_image = s->shape.d[0] != 1;
    /* Where x is packed anyway its rows are scaled as they are packed, the weights stay. */
    bool scale_x = kn_gemm_scales_b(cout, cin), owned = false;
    if (scale_x) { /* several images by images over the threads, where that pays */
        kn_gemm_operand wa = {.packed = a};
        kn_epilogue e = ep;
        e.bias = bias;
        e.bias_per_row = true;
        e.ldr = hw;
        if (kn_cpu_conv_batched(k->pool, &g, &wa, x, sd, per_image ? cin : 0, &e, hw, y))
            return KILN_OK;
    }
    kn_gemm_packed *ws = NULL;
    if (!scale_x)
        KN_TRY(scaled_weights(k, a, &ws, &owned));
    kiln_status rc = KILN_OK;
    for (int64_t n = 0; n < g.n && rc == KILN_OK; n++) {
        const float *sn = sd + (per_image ? n * cin : 0);
        if (!scale_x && (n == 0 || per_image))
            kn_gemm_packed_scale_k(k->pool, a, sn, ws);
        kn_gemm_operand wa = {.packed = scale_x ? a : ws},
                        b = {.p = x + n * cin * hw, .ld = hw, .scale = scale_x ? sn : NULL};
        kn_epilogue e = ep;
        e.bias = bias;
        e.bias_per_row = true;
        e.residual = ep.residual != NULL ? ep.residual + n * cout * hw : NULL;
        e.ldr = hw;
        rc = kn_gemm(k->pool, cout, hw, cin, 1.0f, &wa, &b, 0.0f, y + n * cout * hw, hw, &e);
    }
    if (owned)
        kn_gemm_packed_free(ws);
    return rc;
}
