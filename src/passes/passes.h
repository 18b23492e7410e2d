/* Graph passes run by the builder, in this order. Each takes the graph (topologically sorted)
 * and leaves it sorted; each is idempotent. */
#ifndef KN_PASSES_H
#define KN_PASSES_H

#include "backend/backend.h"
#include "core/status.h"
#include "ir/graph.h"
#include "kiln/kiln_plugin.h"

struct kn_resolved;

/* Turn into constants the outputs of every node that shape resolution evaluated on the host
 * with identical results at each of the n resolutions in at[] (the profile's min, opt and max
 * shapes; one kn_resolved per value each): constant subgraphs, and shape subgraphs whose
 * values do not change across the profile. */
kiln_status kn_pass_fold_constants(kn_graph *g, const struct kn_resolved *const *at, int n);
/* Replace every If whose condition is a constant by the branch it takes (the other is
 * dropped); *inlined receives how many. New nodes are appended: toposort afterwards. */
kiln_status kn_pass_inline_if(kn_graph *g, int *inlined);
/* Remove nodes whose outputs reach no graph output. */
kiln_status kn_pass_eliminate_dead(kn_graph *g);
/* Fold BatchNormalization (inference) into a preceding Conv / Gemm with constant weights. */
kiln_status kn_pass_fold_batchnorm(kn_graph *g);
/* Fuse Relu, Clip (incl. Relu6), Sigmoid, x*sigmoid(x), LeakyRelu and a residual Add into
 * the epilogue of a preceding Conv / Gemm / MatMul placed on the same backend, when that
 * backend runs the fused op. The fused node becomes an explicit kiln op (kiln.FusedConv,
 * kiln.FusedGemm, kiln.FusedMatMul) with the product's inputs and attributes plus:
 *   kiln_activation (string): "Relu", "Clip", "Sigmoid", "Swish" (x*sigmoid(x)), "LeakyRelu"
 *   kiln_alpha, kiln_beta (float): Clip's min and max; LeakyRelu's alpha in kiln_alpha
 *   kiln_residual (int) = 1: one more input, of the output's dtype and shape, is added before
 *     the activation; it sits at index 3 for FusedConv and FusedGemm (an absent bias/C is -1)
 *     and at index 2 for FusedMatMul.
 *   kiln_bias (int) = 1, FusedMatMul only: input 3 is a constant vector of N values added to
 *     every row (an Add of a per-column bias folded in); input 2 is -1 unless a residual
 *     Add after the bias is folded in too (kiln_residual).
 * y = act(product + bias + residual). ONNX's own Conv / Gemm / MatMul never read kiln_*
 * attributes. */
kiln_status kn_pass_fuse_activations(kn_graph *g);
/* Replace the element-wise spelling of GELU (x * 0.5 * (1 + erf(x / sqrt 2)), and its tanh
 * form) by one Gelu node, where its nodes share a backend that runs Gelu: before
 * kn_pass_fuse_activations, so a product's GELU can join its epilogue. */
kiln_status kn_pass_recognize_gelu(kn_graph *g);
/* Replace the attention of exporters (PyTorch's eager attention, transformers' BERT and
 * kin), on 4-D heads:
 *   Transpose(q [B, Sq, H, D], perm 0,2,1,3) --------------------.
 *   Transpose(k [B, Sk, H, D], perm 0,2,3,1) -> MatMul -> [Mul | Div by a scalar constant]
 *     -> [Add mask] -> Softmax(last axis) -> MatMul(., Transpose(v, perm 0,2,1,3))
 *     -> Transpose(perm 0,2,1,3) -> y [B, Sq, H, Dv]
 * by one kiln.Attention(q, k, v[, mask]) with attribute scale (src/ops/kiln/fused_attention.c),
 * where every node of the pattern sits on one device backend (not the host) that runs
 * kiln.Attention and each
 * intermediate value has that single consumer and is not a graph output. Before
 * kn_pass_fuse_elementwise, which would otherwise take the scale and the mask. The builder
 * runs it for float16 and bfloat16 plans only: their kernel uses tensor cores, the float32
 * one CUDA cores, and BERT-base in float32 with it measured slower on an H200 (2.55 / 30.4 ms
 * at batch 1 / 32) than the unfused plan had (2.12 / 27.7 ms, docs/benchmarks.md).
 * Then, where a fused node's q, k and v are each Reshape(MatMul(x, W) + b) of one x into
 * [B, S, H, D] with constant W and b on its backend, the three products become one of the
 * concatenated weights, read by the node in place as its packed input (attribute heads;
 * KILN_MERGE_QKV=0: not). */
kiln_status kn_pass_fuse_attention(kn_graph *g);
/* Collapse chains of element-wise ops into one kiln.FusedElementwise node (recognizing GELU
 * first). */
kiln_status kn_pass_fuse_elementwise(kn_graph *g);
/* Move the bias and activation of a kiln.FusedConv into the depthwise convolution that alone
 * reads its output, where the activation is a clamp (Relu, Clip: cheap at every load; SiLU and
 * the like stay in the conv's epilogue) and both sit on a backend with a kernel for the result:
 * kiln.FusedDepthwiseConv(x, w, b, z, xb), the depthwise product with its own epilogue
 * (inputs 0-3 and kiln_* attributes as kiln.FusedConv) that first maps each input value v of
 * channel c to act_in(v + xb[c]) (xb may be -1), act_in given by kiln_input_activation,
 * kiln_input_alpha and kiln_input_beta (kiln_activation's names); padding stays zero. The
 * expansion layer then stores its raw product and its epilogue's pass over the output is gone. */
kiln_status kn_pass_fuse_depthwise_input(kn_graph *g);
/* Fold a per-channel scale Mul(x [N, C, H, W], s [N or 1, C, 1, 1]) whose only reader is a 1x1,
 * stride-1, unpadded, ungrouped Conv / kiln.FusedConv (constant float32 weights) into it:
 * kiln.ScaledConv(x, w, b, z, s), that conv (inputs 0-3 and attributes as kiln.FusedConv) of
 * x scaled by s[n][c] per image and channel (the squeeze-and-excitation multiply ahead of a
 * projection conv; the kernel scales its weights instead of x). Host nodes of float32 plans
 * only (float32_plan: no lowered precision), where C_out <= H x W (the weights are then the
 * smaller operand); KILN_FUSE_CHANNEL_SCALE=0: never. */
kiln_status kn_pass_fuse_channel_scale(kn_graph *g, bool float32_plan);

/* Run the products of a QDQ model in int8: DequantizeLinear(x), DequantizeLinear(w int8,
 * constant, symmetric, per tensor or per output channel) -> Conv (2-D, ungrouped) / MatMul
 * (w 2-D) / Gemm (no transA, alpha = beta = 1) -> [Relu | Clip] -> QuantizeLinear becomes
 * kiln.QConv or kiln.QMatMul with inputs
 *   x_q, x_scale, x_zero_point, w_q, w_scale, w_zero_point (or -1), y_scale, y_zero_point,
 *   bias (float32 [N], or -1)
 * (QMatMul's w is [K, N]; a Gemm's transB weight is transposed into a new constant), the
 * product's own attributes, and kiln_activation "Relu" / "Clip" with kiln_alpha, kiln_beta
 * (the bounds). Products fed by a DequantizeLinear that do not fit keep the float path with
 * kiln_int8_reason saying why. Runs before constant folding, which would dequantize the
 * weights. */
kiln_status kn_pass_fuse_qdq(kn_graph *g);

/* A QuantizeLinear of a DequantizeLinear on the same grid (scalar constant scale, equal zero
 * point), through Reshape / Transpose / Squeeze / Unsqueeze / Flatten / Identity nodes, and
 * MaxPool (opset 12 on) where the scale is positive, or none: those nodes are copied to run
 * on the int8 tensor and write the QuantizeLinear's output, which then holds the same bytes
 * (q(dq(x)) is x, and the largest of dq's values is dq of the largest integer). */
kiln_status kn_pass_elide_qdq(kn_graph *g);
/* Whether n is a MaxPool that selects the largest element of each window (no Indices output),
 * of an opset whose MaxPool takes 8-bit integers (12 on): it commutes with an increasing
 * dequantization, so it may run on an int8 tensor (kn_pass_elide_qdq) and its output may take
 * its input's grid (kn_pass_quantize_int8). */
bool kn_pass_max_selects(const kn_node *n);

/* QuantizeLinear -> DequantizeLinear on the same grid (the rounding a QDQ model puts after its
 * float ops), placed on the CPU, as Div, Clip, Round and Mul by constants: the same values, in
 * nodes kn_pass_fuse_elementwise joins to the float ops around them (one pass over the tensor
 * where there were two, and no int8 copy in between). First, a kiln.QMatMul on the CPU whose
 * output only a DequantizeLinear on its y grid reads (directly or through Reshape / Squeeze /
 * Unsqueeze / Flatten / Identity) takes kiln_float_output and writes that DequantizeLinear's
 * values itself. Needs dtypes and placement. */
kiln_status kn_pass_expand_qdq_pairs(kn_graph *g);

/* A residual Add between int8 layers into the kiln.QConv before it: QConv -> DequantizeLinear
 * -> Add (other input DequantizeLinear(r), r of the conv output's shape) -> [Relu] ->
 * QuantizeLinear becomes the QConv with inputs 9 to 13 r, r_scale, r_zero_point, c_scale,
 * c_zero_point (c: the conv's own output, still rounded to its grid before the add), y's scale
 * and zero point those of the QuantizeLinear, and the Relu as its kiln_activation (applied
 * after the add). Needs the values' shapes (after annotation). */
kiln_status kn_pass_fuse_qadd(kn_graph *g);

/* int8 for a float model. A layer can run in int8 when it is a Conv (2-D, ungrouped), Gemm (no
 * transA, alpha = beta = 1) or MatMul with a constant float32 weight (and bias) reading a
 * computed input x, and its output y (after a Relu or constant-bounded Clip that alone reads
 * it) is not a graph output. kn_int8_layers lists them (node, x, y: indices in g); *out is
 * freed with kn_free. */
typedef struct kn_int8_layer {
    int node, x, y;
} kn_int8_layer;
kiln_status kn_int8_layers(const kn_graph *g, kn_int8_layer **out, int *n);
/* A calibrated tensor: real values in [-127, 127] * scale (int8) or [0, 255] * scale (uint8,
 * is_unsigned), zero point 0. scale <= 0: not calibrated. */
typedef struct kn_int8_range {
    float scale;
    bool is_unsigned;
} kn_int8_range;
/* Quantize the listed layers whose x and y both have a range (ranges[] by value index): one
 * QuantizeLinear / DequantizeLinear pair per tensor, read by all its consumers, and per-output-
 * channel symmetric int8 weights behind a DequantizeLinear; then kn_pass_fuse_qdq makes them
 * int8 products. A calibrated MaxPool output takes its calibrated input's grid, so that
 * kn_pass_elide_qdq (run next by the builder) runs such pools on the int8 tensor. */
kiln_status kn_pass_quantize_int8(kn_graph *g, const kn_int8_layer *layers, int n_layers,
                                  const kn_int8_range *ranges);

/* A precision override for the nodes whose name matches pattern (fnmatch). */
typedef struct kn_layer_precision {
    char *pattern;
    int precision; /* kiln_precision */
} kn_layer_precision;

/* Lower the precision of float32 layers (see kiln_precision): each node whose backend offers
 * the target type for it (kn_caps.lower) and that no override or the keep-float32 list holds
 * back runs in float16 or bfloat16: its float32 constants are converted, and a Cast on the
 * producer's side joins every edge between a lowered and a float32 node. Graph inputs and
 * outputs keep their dtypes (an output made in reduced precision is cast back under its own
 * name). Lowered nodes carry kiln_precision ("fp16" or "bf16"); with TF32, products carry
 * kiln_allow_tf32 = 1. A node whose backend offers only its weights in the type
 * (kn_caps.lower_weights) keeps float32 activations and gets its constant input 1 converted,
 * with kiln_precision and kiln_weights set to the type (and kiln_compute = "fp32" where the
 * backend widens them at load, kn_caps.widen_weights); a node the backend keeps in float32
 * for a reason (kn_caps.keep_fp32) gets it in kiln_precision_note. A node offered the type
 * only inside a region (kn_caps.lower_region) is lowered where its region of such nodes does
 * enough work for the elements Cast at its edges, and takes its weights offer elsewhere.
 * at[n_at] are the graph's resolutions at the profile's shapes (sizes counted at at[1]). */
kiln_status kn_pass_lower_precision(kn_graph *g, int precision, const kn_layer_precision *layers,
                                    int n_layers, const struct kn_resolved *const *at, int n_at);

/* Store in NHWC the float16/bfloat16 activations of rank 4 whose producer and readers all run
 * on a backend that takes NHWC for them (kn_caps.layouts), keeping their NCHW shapes:
 * such nodes get kiln_nhwc = {in_mask, out_mask} (bit j: input / output j stored NHWC), an
 * NHWC convolution's weights are permuted to [K, R, S, C/g] (layout_nhwc.c says which inputs
 * follow an op's layout). *n_nhwc receives how many nodes got a mask. After precision lowering
 * and copy insertion; at[n_at] are the graph's resolutions at the profile's shapes. */
kiln_status kn_pass_layout_nhwc(kn_graph *g, const struct kn_resolved *const *at, int n_at,
                                int *n_nhwc);

/* What placement needs: the backends in order of preference (the host among them, or
 * implied last), the graph resolved at the profile's shapes, and the plugin bound to each
 * plugin node. */
typedef struct kn_placement {
    kn_backend *const *order;
    int n_order;
    const struct kn_resolved *const *at; /* n_at resolutions (min, max, opt) */
    const bool *const *deferred;         /* per resolution: nodes deferred to run time */
    int n_at;
    const kiln_plugin_instance *(*plugin_of)(void *user, const kn_node *n, int index);
    void *plugin_user;
} kn_placement;
/* Place every node on a backend (see ir/placement.h): records kiln_backend and
 * kiln_host_inputs, and kiln_placement_reason on nodes a device backend did not take. When
 * only the host is asked for it only refuses plugin nodes whose plugin does not run there. */
kiln_status kn_pass_assign_backends(kn_graph *g, const kn_placement *p);
/* Insert a copy node (kiln.MemcpyToDevice / MemcpyToHost) wherever a value crosses between
 * memory spaces: one per value and direction. Constants are not copied (engines mirror them
 * on the devices that read them); graph inputs and outputs stay host memory (a device-made
 * output is produced under a new name and copied to the host under its own). */
kiln_status kn_pass_insert_copies(kn_graph *g);

#endif
