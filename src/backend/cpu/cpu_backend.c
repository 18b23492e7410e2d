#include "backend/cpu/cpu.h"
#include "backend/cpu/math/gemm_bf16.h"
#include "backend/cpu/nn/conv.h"
#include "backend/cpu/nn/pool_nhwc.h"
#include "ops/op.h"

#include "ops/fused_elementwise.h"

#include <stdio.h>
#include <string.h>

static const kn_kernel kernels[] = {
#define KN_CPU_KERNEL(domain, name, run) {domain, name, run, NULL, NULL},
#define KN_CPU_KERNEL_STATE(domain, name, run, prepare, release)                                   \
    {domain, name, run, prepare, release},
#include "backend/cpu/kernel_list.h"
#undef KN_CPU_KERNEL
#undef KN_CPU_KERNEL_STATE
};

static const kn_kernel *cpu_find_kernel(const char *domain, const char *name) {
    if (domain == NULL || strcmp(domain, "ai.onnx") == 0)
        domain = "";
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++)
        if (strcmp(kernels[i].name, name) == 0 && strcmp(kernels[i].domain, domain) == 0)
            return &kernels[i];
    return NULL;
}

static const kn_kernel *cpu_backend_find_kernel(kn_backend *b, const char *domain,
                                                const char *name) {
    (void)b;
    return cpu_find_kernel(domain, name);
}

/* Ops whose CPU kernels run float16 as they run float32 (element-wise math goes through float;
 * data movement copies bytes): the precision pass may lower them, for memory. Not in bfloat16:
 * there the products keep float32 activations (below), so lowering what sits between them
 * would only add Casts. */
static uint32_t cpu_lowerable(const kn_node *n) {
    if (n->domain[0] != '\0')
        return 0;
    const kn_op_schema *op = kn_op_find(n->domain, n->op_type);
    bool elementwise =
        op != NULL && (op->flags & KN_OP_ELEMENTWISE) && strcmp(n->op_type, "Cast") != 0;
    return elementwise || kn_op_moves_data(n) ? KN_LOWER_FP16 : 0;
}

static bool op_is(const kn_node *n, const char *onnx, const char *fused) {
    return (n->domain[0] == '\0' && strcmp(n->op_type, onnx) == 0) ||
           (strcmp(n->domain, KN_DOMAIN) == 0 && strcmp(n->op_type, fused) == 0);
}

/* Convs whose bf16 kernel (nn/conv_bf16.c) reads bf16 activations in place, AMX tiles loading
 * rows of NHWC pixels with no packing: 2-D, one group, constant weights, input channels a
 * multiple of 32 (a tile row), or so few that a row of the kernel's width fits one tile row (a
 * stem: 3 channels x 7 columns, folded into 32 values). */
static bool bf16_activation_conv(const kn_node *n, int n_in, const kn_tensor *in) {
    if (!op_is(n, "Conv", "FusedConv") || n_in < 2 || in[1].data == NULL || in[1].shape.rank != 4 ||
        in[0].shape.rank != 4 || kn_attr_int(n, "group", 1) != 1)
        return false;
    int64_t c = in[1].shape.d[1], kw = in[1].shape.d[3];
    return c > 0 && (c % 32 == 0 || c * kw <= 32);
}

/* Products whose constant weights (input 1) the CPU holds in bfloat16 (packed for the bf16
 * GEMM, activations rounded as they are packed, fp32 accumulation and epilogue) or float16
 * (storage alone: widened to float32 when the engine is made); otherwise why they stay. */
static void cpu_weight_offer(const kn_node *n, int n_in, const kn_tensor *in, kn_caps *caps) {
    bool conv = op_is(n, "Conv", "FusedConv");
    if (!conv && !op_is(n, "Gemm", "FusedGemm") && !op_is(n, "MatMul", "FusedMatMul")) {
        if (op_is(n, "ConvTranspose", "FusedConvTranspose"))
            caps->keep_fp32 = "ConvTranspose has no reduced-precision kernel on the CPU";
        return;
    }
    if (n_in < 2 || in[1].data == NULL || in[1].dtype != KILN_DTYPE_FLOAT32) {
        caps->keep_fp32 = "a product of two activations: the CPU narrows only constant "
                          "weights";
        return;
    }
    const kn_shape *w = &in[1].shape;
    if (conv) {
        int64_t group = kn_attr_int(n, "group", 1);
        if (w->rank < 3 || (group == w->d[0] && w->d[1] == 1)) {
            caps->keep_fp32 = "depthwise conv: the direct fp32 kernel is memory-bound, a bf16 "
                              "GEMM would not help";
            return;
        }
    } else if (w->rank != 2) {
        caps->keep_fp32 = "batched weights: the CPU packs only 2-D weights";
        return;
    }
    caps->lower_weights = KN_LOWER_FP16 | KN_LOWER_BF16;
    caps->widen_weights = KN_LOWER_FP16; /* fp16 is storage only */
    /* With AMX, a conv that reads bf16 activations in place saves the packing of every call,
     * where its neighbours are bf16 too (a region: the precision pass weighs its edges). */
    if (conv && kn_bf16_amx() && bf16_activation_conv(n, n_in, in)) {
        caps->lower |= KN_LOWER_BF16;
        caps->lower_region |= KN_LOWER_BF16;
        caps->lower_work = (double)w->d[1] * (double)w->d[2] * (double)w->d[3];
    }
    /* On AMX tiles the bf16 GEMM outruns fp32 Winograd even with four times the multiplies
     * (docs/perf-notes.md, "AMX-BF16"), so a plan built there computes these in bf16. */
    if (conv && kn_cpu_conv_prefers_winograd(n, &in[0], w) && !kn_bf16_amx()) {
        caps->widen_weights |= KN_LOWER_BF16;
        caps->keep_fp32 =
            "3x3 conv: fp32 Winograd (a quarter of the multiplies) beats the bf16 GEMM; "
            "weights stored in 16 bits";
    }
}

/* Weights the precision pass stored in 16 bits (kiln_weights): constant, and read by the
 * product's prepare, which packs or widens them. */
static bool narrow_weights(const kn_node *n, const kn_tensor *w) {
    const kn_attr *a = kn_node_attr(n, "kiln_weights");
    return a != NULL && a->type == KN_ATTR_STRING &&
           ((strcmp(a->s, "bf16") == 0 && w->dtype == KILN_DTYPE_BFLOAT16) ||
            (strcmp(a->s, "fp16") == 0 && w->dtype == KILN_DTYPE_FLOAT16));
}

/* A Cast between float32 and bfloat16 of rank 4 reorders between NCHW and NHWC as it converts
 * (tensor/cast_layout.c): the edges of a region of bf16 convs. */
static bool cast_reorders(const kn_node *n, int n_in, const kn_tensor *in) {
    if (n->domain[0] != '\0' || strcmp(n->op_type, "Cast") != 0 || n_in < 1 ||
        in[0].shape.rank != 4)
        return false;
    int32_t to = (int32_t)kn_attr_int(n, "to", 0);
    return (in[0].dtype == KILN_DTYPE_FLOAT32 && to == KILN_DTYPE_BFLOAT16) ||
           (in[0].dtype == KILN_DTYPE_BFLOAT16 && to == KILN_DTYPE_FLOAT32);
}

/* A MaxPool the NHWC bf16 kernel runs (nn/pool_nhwc.c): 2-D, no indices output. */
static bool nhwc_maxpool(const kn_node *n, int n_in, const kn_tensor *in, int n_out) {
    if (n->domain[0] != '\0' || strcmp(n->op_type, "MaxPool") != 0 || n_in < 1 ||
        (n_out > 1 && n->out[1] >= 0) || in[0].shape.rank != 4)
        return false;
    kn_pool_geom g;
    return kn_pool_geom_read(n, &in[0].shape, &g) == KILN_OK &&
           kn_cpu_maxpool_nhwc_bf16_applies(&in[0].shape, &g);
}

static bool cpu_supports(kn_backend *b, const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                         const kn_tensor *out, kn_caps *caps) {
    (void)out;
    if (cpu_backend_find_kernel(b, n->domain, n->op_type) == NULL) {
        snprintf(caps->reason, sizeof caps->reason, "the cpu backend has no kernel for %s%s%s",
                 n->domain, n->domain[0] ? "." : "", n->op_type);
        return false;
    }
    /* the CPU products and fused element-wise programs compute in float32 only; a plain
     * MatMul of 16-bit floats is staged through float32 (math/matmul.c) */
    bool staged_matmul = n->domain[0] == '\0' && strcmp(n->op_type, "MatMul") == 0 && n_in == 2 &&
                         in[0].dtype == in[1].dtype &&
                         (in[0].dtype == KILN_DTYPE_FLOAT16 || in[0].dtype == KILN_DTYPE_BFLOAT16);
    bool bf16_conv = bf16_activation_conv(n, n_in, in) && in[0].dtype == KILN_DTYPE_BFLOAT16;
    for (int j = 0; bf16_conv && j < n_in; j++)
        bf16_conv = in[j].dtype == 0 || in[j].dtype == KILN_DTYPE_BFLOAT16;
    if (bf16_conv)
        caps->layouts |= KN_LAYOUT_NHWC_BIT;
    if (cast_reorders(n, n_in, in))
        caps->layouts |= KN_LAYOUT_NHWC_BIT;
    if ((kn_op_is_product(n) && !staged_matmul && !bf16_conv) ||
        (strcmp(n->domain, "kiln") == 0 && strcmp(n->op_type, "FusedElementwise") == 0))
        for (int j = 0; j < n_in; j++)
            if (in[j].dtype != 0 && kn_dtype_is_float(in[j].dtype) &&
                in[j].dtype != KILN_DTYPE_FLOAT32 && !(j == 1 && narrow_weights(n, &in[1]))) {
                snprintf(caps->reason, sizeof caps->reason,
                         "the cpu backend runs %s in float32 only (input %d is %s)", n->op_type, j,
                         kn_dtype_name(in[j].dtype));
                return false;
            }
    if (strcmp(n->domain, KN_DOMAIN) == 0 && strcmp(n->op_type, "ScaledConv") == 0 &&
        (n_in < 2 || in[1].data == NULL || in[1].dtype != KILN_DTYPE_FLOAT32)) {
        snprintf(caps->reason, sizeof caps->reason,
                 "the cpu backend runs kiln.ScaledConv with constant float32 weights only");
        return false;
    }
    caps->lower = cpu_lowerable(n);
    cpu_weight_offer(n, n_in, in, caps);
    if (nhwc_maxpool(n, n_in, in, n_out)) {
        /* between bf16 convs (a ResNet's stem and first block) it keeps their region whole */
        if (in[0].dtype == KILN_DTYPE_FLOAT32 && kn_bf16_amx()) {
            caps->lower |= KN_LOWER_BF16;
            caps->lower_region |= KN_LOWER_BF16;
        }
        if (in[0].dtype == KILN_DTYPE_BFLOAT16)
            caps->layouts |= KN_LAYOUT_NHWC_BIT;
    }
    return true;
}

/* The CPU runs every kernel synchronously on the calling thread (and the context's pool):
 * no stream, no events, host memory from the host allocator. */
static const kn_backend_iface cpu_iface = {
    .name = KN_BACKEND_HOST,
    .mem = KN_MEM_HOST,
    .find_kernel = cpu_backend_find_kernel,
    .supports = cpu_supports,
};

static kn_backend cpu_backend = {.iface = &cpu_iface, .device = 0, .context = NULL};

kn_backend *kn_cpu_backend(void) {
    return &cpu_backend;
}
