/* ConvTranspose as GEMM plus col2im: cols_g (C_out/g * prod(k) x IS) = W_g^T * X_g, then each
 * column entry is scattered-added to the output position it maps to. Output channels are
 * independent, so col2im runs in parallel over them. */
#include "backend/cpu/nn/conv.h"

#include "core/alloc.h"

typedef struct convt_state {
    int64_t group;
    kn_gemm_packed *w[];
} convt_state;

void kn_cpu_conv_transpose_release(void *state) {
    convt_state *st = state;
    if (st == NULL)
        return;
    for (int64_t g = 0; g < st->group; g++)
        kn_gemm_packed_free(st->w[g]);
    kn_free(st);
}

kiln_status kn_cpu_conv_transpose_prepare(const kn_node *node, int n_in, const kn_tensor *in,
                                          void **state) {
    *state = NULL;
    if (n_in < 2 || in[1].data == NULL || in[1].dtype != KILN_DTYPE_FLOAT32 || in[1].shape.rank < 3)
        return KILN_OK;
    const kn_shape *w = &in[1].shape;
    int64_t group = kn_attr_int(node, "group", 1);
    if (group < 1 || w->d[0] % group != 0)
        return KILN_OK;
    int64_t cig = w->d[0] / group, mk = kn_shape_numel(w) / w->d[0];
    convt_state *st = kn_calloc(1, sizeof *st + (size_t)group * sizeof st->w[0]);
    if (st == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory packing ConvTranspose weights");
    st->group = group;
    const float *wd = in[1].data;
    for (int64_t g = 0; g < group; g++) {
        kiln_status rc = kn_gemm_pack_a(wd + g * cig * mk, mk, true, mk, cig, &st->w[g]);
        if (rc != KILN_OK) {
            kn_cpu_conv_transpose_release(st);
            return rc;
        }
    }
    *state = st;
    return KILN_OK;
}

typedef struct col2im_job {
    const kn_conv_geom *g;
    const float *cols; /* (C_out/g * kprod) x IS for the current group */
    float *y;          /* first output channel of the group */
    int64_t kprod, is, os;
} col2im_job;

static void col2im_range(void *arg, int64_t begin, int64_t end) {
    const col2im_job *j = arg;
    const kn_conv_geom *g = j->g;
    for (int64_t co = begin; co < end; co++) {
        float *y = j->y + co * j->os;
        for (int64_t kk = 0; kk < j->kprod; kk++) {
            int64_t koff[KN_CONV_MAX_SP], t = kk;
            for (int i = g->nsp - 1; i >= 0; i--) {
                koff[i] = t % g->k[i];
                t /= g->k[i];
            }
            const float *src = j->cols + (co * j->kprod + kk) * j->is;
            int64_t pos[KN_CONV_MAX_SP] = {0};
            for (int64_t p = 0; p < j->is; p++) {
                int64_t idx = 0;
                bool inside = true;
                for (int i = 0; i < g->nsp; i++) {
                    int64_t q = pos[i] * g->stride[i] - g->pad_b[i] + koff[i] * g->dil[i];
                    inside = inside && q >= 0 && q < g->out[i];
                    idx = idx * g->out[i] + q;
                }
                if (inside)
                    y[idx] += src[p];
                for (int i = g->nsp - 1; i >= 0; i--) {
                    if (++pos[i] < g->in[i])
                        break;
                    pos[i] = 0;
                }
            }
        }
    }
}

kiln_status kn_cpu_conv_transpose_run(kn_kernel_ctx *k) {
    kn_conv_geom g;
    KN_TRY(kn_conv_geom_init(k->node, &k->in[0].shape, &k->in[1].shape, true, &g));
    kn_epilogue ep = {0};
    KN_TRY(kn_cpu_fused_epilogue(k, 3, &ep));
    const float *x = k->in[0].data, *w = k->in[1].data;
    const float *bias = k->n_in > 2 && k->in[2].dtype != 0 ? k->in[2].data : NULL;
    float *y = k->out[0].data;
    int64_t is = 1, os = 1, kprod = 1;
    for (int i = 0; i < g.nsp; i++) {
        is *= g.in[i];
        os *= g.out[i];
        kprod *= g.k[i];
    }
    int64_t cig = g.c_in / g.group, cog = g.c_out / g.group, mk = cog * kprod;
    for (int64_t n = 0; n < g.n; n++)
        for (int64_t c = 0; c < g.c_out; c++)
            for (int64_t p = 0; p < os; p++)
                y[(n * g.c_out + c) * os + p] = bias != NULL ? bias[c] : 0.0f;
    float *cols = kn_malloc((size_t)(mk * is > 0 ? mk * is : 1) * sizeof(float));
    if (cols == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for ConvTranspose columns");
    const convt_state *st = k->state;
    kiln_status rc = KILN_OK;
    for (int64_t n = 0; n < g.n && rc == KILN_OK; n++) {
        for (int64_t gi = 0; gi < g.group; gi++) {
            kn_gemm_operand a = {.p = w + gi * cig * mk, .ld = mk, .trans = true};
            if (st != NULL && st->group == g.group)
                a = (kn_gemm_operand){.packed = st->w[gi]};
            kn_gemm_operand b = {.p = x + (n * g.c_in + gi * cig) * is, .ld = is};
            rc = kn_gemm(k->pool, mk, is, cig, 1.0f, &a, &b, 0.0f, cols, is, NULL);
            if (rc != KILN_OK)
                break;
            col2im_job j = {.g = &g,
                            .cols = cols,
                            .y = y + (n * g.c_out + gi * cog) * os,
                            .kprod = kprod,
                            .is = is,
                            .os = os};
            kn_parallel_for(k->pool, cog, 1, col2im_range, &j);
        }
    }
    kn_free(cols);
    if (rc == KILN_OK && (ep.residual != NULL || ep.act != KN_ACT_NONE)) {
        ep.ldr = os;
        kn_epilogue_apply(&ep, y, os, 0, 0, g.n * g.c_out, os);
    }
    return rc;
}
