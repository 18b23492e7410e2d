/* Single-precision GEMM for the CPU backend: C = act(alpha*op(A)*op(B) + beta*C + bias + R).
 * Row-major with arbitrary leading dimensions, cache-blocked over packed panels, micro-kernels
 * chosen at run time (AVX-512, AVX2+FMA, portable C), parallel over a thread pool. Operands can
 * be packed once ahead of time (constant weights) or packed on the fly by a caller-supplied
 * routine (convolution packs straight from the image: im2col without a column buffer). */
#ifndef KN_CPU_GEMM_H
#define KN_CPU_GEMM_H

#include "backend/backend.h"
#include "core/status.h"
#include "core/threadpool.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum kn_act {
    KN_ACT_NONE = 0,
    KN_ACT_RELU,
    KN_ACT_CLIP, /* min(max(x, alpha), beta) */
    KN_ACT_SIGMOID,
    KN_ACT_SWISH,        /* x * sigmoid(x) */
    KN_ACT_LEAKY_RELU,   /* x < 0 ? alpha * x : x */
    KN_ACT_HARD_SIGMOID, /* clamp(alpha * x + beta, 0, 1) */
    KN_ACT_HARD_SWISH,   /* x * clamp(x / 6 + 1/2, 0, 1) */
    KN_ACT_GELU,         /* x/2 (1 + erf(x / sqrt 2)) */
    KN_ACT_GELU_TANH,    /* GELU's tanh approximation */
    KN_ACT_MISH,         /* x * tanh(softplus(x)) */
    KN_ACT_TANH,
} kn_act;

/* Applied to each output element after the product is complete, while the tile is in cache:
 * y = act(y + bias + residual). */
typedef struct kn_epilogue {
    const float *bias; /* NULL, or one value per row (bias_per_row) or per column */
    bool bias_per_row;
    const float *residual; /* NULL, or a matrix of C's shape with leading dimension ldr */
    int64_t ldr;
    int act; /* kn_act */
    float alpha, beta;
} kn_epilogue;

/* Whether the direct kernels apply act in registers (kn_act_in_regs512); any other is applied
 * to the stored rows after them (kn_act_apply_rows). */
static inline bool kn_act_in_regs(int act) {
    return act == KN_ACT_NONE || act == KN_ACT_RELU || act == KN_ACT_CLIP ||
           act == KN_ACT_SIGMOID || act == KN_ACT_SWISH;
}

/* Apply the epilogue to an m x n block at row i0, column j0 of the full output (bias and
 * residual are indexed by full-output coordinates; c points at the block). */
void kn_epilogue_apply(const kn_epilogue *ep, float *c, int64_t ldc, int64_t i0, int64_t j0,
                       int64_t m, int64_t n);
/* Activation alone on a contiguous array, or on m rows of n at stride ld. */
void kn_act_apply(int act, float alpha, float beta, float *x, int64_t n);
void kn_act_apply_rows(int act, float alpha, float beta, float *x, int64_t ld, int64_t m,
                       int64_t n);

/* An operand packed once (e.g. constant weights). Immutable afterwards; shareable by threads. */
typedef struct kn_gemm_packed kn_gemm_packed;

/* Pack op(A) (m x k) or op(B) (k x n). trans means the stored matrix is the transpose. */
kiln_status kn_gemm_pack_a(const float *a, int64_t lda, bool trans, int64_t m, int64_t k,
                           kn_gemm_packed **out);
kiln_status kn_gemm_pack_b(const float *b, int64_t ldb, bool trans, int64_t k, int64_t n,
                           kn_gemm_packed **out);
void kn_gemm_packed_free(kn_gemm_packed *p);
/* An operand of a packed A's geometry (kn_gemm_pack_a), its values unset, for
 * kn_gemm_packed_scale_k. */
kiln_status kn_gemm_packed_like(const kn_gemm_packed *a, kn_gemm_packed **out);
/* dst (from kn_gemm_packed_like(a)) = packed A (m x k) with column kk multiplied by s[kk]: the
 * weights of a product whose input rows are scaled, without packing again. */
void kn_gemm_packed_scale_k(kn_threadpool *pool, const kn_gemm_packed *a, const float *s,
                            kn_gemm_packed *dst);

/* C = A B (+ epilogue, bias per row) over output rows [oy0, oy1) of a grid of oh rows of ow,
 * on the calling thread: C is m x (oh * ow), row-major, and B is never packed: element
 * (k, oy * ow + ox) of B is b[off[k] + (oy - oy0) * row_step + ox], so each tile's rows of B
 * are runs read in place, and B can be prepared a band of rows at a time (oy1 - oy0 best a
 * multiple of kn_gemm_gather_row_group(ow)). A is packed (kn_gemm_pack_a, m x k). For strided
 * convs over prepared phase planes, whose im2col copy cost as much as the product when the conv
 * has few output channels. Only where kn_gemm_gather_ok(a): the CPU's kernels take it and a was
 * packed for them. */
bool kn_gemm_gather_ok(const kn_gemm_packed *a);
void kn_gemm_gather(const kn_gemm_packed *a, const float *b, const int64_t *off, int64_t oh,
                    int64_t ow, int64_t oy0, int64_t oy1, int64_t row_step, float *c,
                    const kn_epilogue *ep);
/* Output rows the gathered product takes together (1 or 2): rows of at most 16 columns, and
 * the rests of at most 16 columns past whole tiles, go two rows a tile. */
int kn_gemm_gather_row_group(int64_t ow);

/* Writes rows [k0, k0+kc) x columns [n0, n0+nc) of op(B) into dst as kn_gemm_nr()-wide
 * column panels: panel p holds kc rows of nr floats at dst + p*kc*nr, columns past nc zero. */
typedef void (*kn_gemm_pack_fn)(void *arg, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
                                float *dst);

/* One of: a plain matrix (p, ld, trans), a pre-packed one, or (B only) a packing routine. */
typedef struct kn_gemm_operand {
    const float *p;
    int64_t ld;
    bool trans;
    const kn_gemm_packed *packed;
    kn_gemm_pack_fn pack;
    void *pack_arg;
    /* B given plainly (p, ld, not trans) only, or NULL: row kk of B is multiplied by scale[kk]
     * as it is packed, for a product whose input channels are scaled (kn_gemm_scales_b). */
    const float *scale;
} kn_gemm_operand;

/* Whether a product of m rows over k packs a plain B, so that kn_gemm_operand.scale costs
 * nothing; otherwise (few rows over a short k) B is read in place and a scale makes it packed. */
bool kn_gemm_scales_b(int64_t m, int64_t k);

/* C (m x n, leading dimension ldc) = epilogue(alpha*op(A)*op(B) + beta*C). beta == 0 never
 * reads C. ep may be NULL. pool may be NULL (single thread). Fails only on out-of-memory. */
kiln_status kn_gemm(kn_threadpool *pool, int64_t m, int64_t n, int64_t k, float alpha,
                    const kn_gemm_operand *a, const kn_gemm_operand *b, float beta, float *c,
                    int64_t ldc, const kn_epilogue *ep);

/* kn_gemm on the calling thread alone, for callers already inside kn_parallel_for: packing
 * buffers come from `scratch` (64-byte aligned, kn_gemm_serial_scratch() floats). Never fails. */
int64_t kn_gemm_serial_scratch(int64_t n, const kn_gemm_operand *a, const kn_gemm_operand *b);
void kn_gemm_serial(int64_t m, int64_t n, int64_t k, float alpha, const kn_gemm_operand *a,
                    const kn_gemm_operand *b, float beta, float *c, int64_t ldc,
                    const kn_epilogue *ep, float *scratch);

/* kn_gemm_serial over one part of the product's rows: part p of `parts` takes rows
 * [p * u / parts, (p + 1) * u / parts) of its u row tiles (kn_gemm_mr() rows each; a part may
 * be empty), so several threads can share one product (A packed for all m rows, as a whole
 * product takes it; bias and residual by full-output rows). Scratch as kn_gemm_serial's. */
void kn_gemm_serial_part(int64_t part, int64_t parts, int64_t m, int64_t n, int64_t k, float alpha,
                         const kn_gemm_operand *a, const kn_gemm_operand *b, float beta, float *c,
                         int64_t ldc, const kn_epilogue *ep, float *scratch);

/* Plain BLAS-like entry. */
kiln_status kn_sgemm(kn_threadpool *pool, bool trans_a, bool trans_b, int64_t m, int64_t n,
                     int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                     int64_t ldb, float beta, float *c, int64_t ldc, const kn_epilogue *ep);

/* Panel width of B in the active micro-kernel (for kn_gemm_pack_fn implementations). */
int kn_gemm_nr(void);
/* Row tile height of the active micro-kernel. */
int kn_gemm_mr(void);
/* Name of the micro-kernel in use: "avx512", "avx2" or "scalar". */
const char *kn_gemm_isa(void);
/* Force a micro-kernel ("avx512", "avx2", "scalar") for tests; false if unsupported here.
 * Not thread-safe; packed operands made before a switch must not be used after it. */
bool kn_gemm_force_isa(const char *name);

/* Activation and residual of a Conv, ConvTranspose, Gemm or MatMul node from its fused
 * attributes; the residual is input `residual_at` when kiln_residual is set (ep->ldr is left
 * for the caller). */
kiln_status kn_cpu_fused_epilogue(const kn_kernel_ctx *k, int residual_at, kn_epilogue *ep);

#endif
