/* kiln.FusedDepthwiseConv on the CPU (passes.h): the input prologue act(x + xb[c]) applied to x
 * in place, then the depthwise convolution as kiln.FusedConv runs it. In place because the node
 * is x's only reader (kn_pass_fuse_depthwise_input moves the prologue only from a sole
 * consumer). The pass never makes this node for the CPU, whose convolutions apply their epilogue
 * in registers at no extra pass; the kernel serves backends that run the host's kernels and
 * plans whose node falls back to the host. */
#include "backend/cpu/cpu.h"
#include "backend/cpu/math/gemm.h"
#include "ops/nn/conv_geom.h"

kiln_status kn_cpu_dwconv_input_prepare(const kn_node *node, int n_in, const kn_tensor *in,
                                        void **state) {
    return kn_cpu_conv_prepare(node, n_in > 4 ? 4 : n_in, in, state);
}

kiln_status kn_cpu_dwconv_input_run(kn_kernel_ctx *k) {
    int act;
    float alpha, beta;
    KN_TRY(kn_fused_input_attrs(k->node, &act, &alpha, &beta));
    const kn_tensor *x = &k->in[0];
    if (x->dtype != KILN_DTYPE_FLOAT32 || x->shape.rank < 3)
        return kn_error(KILN_ERR_DTYPE, "the CPU runs kiln.FusedDepthwiseConv on float32 images");
    const float *xb = k->n_in > 4 && k->in[4].dtype ? k->in[4].data : NULL;
    int64_t n = x->shape.d[0], c = x->shape.d[1], plane = 1;
    for (int d = 2; d < x->shape.rank; d++)
        plane *= x->shape.d[d];
    kn_epilogue ep = {.bias = xb, .bias_per_row = true, .act = act, .alpha = alpha, .beta = beta};
    for (int64_t i = 0; i < n; i++) /* each image a [c, plane] matrix, a bias per row */
        kn_epilogue_apply(&ep, (float *)x->data + i * c * plane, plane, 0, 0, c, plane);
    kn_kernel_ctx conv = *k;
    conv.n_in = k->n_in > 4 ? 4 : k->n_in;
    return kn_cpu_conv_run(&conv);
}
