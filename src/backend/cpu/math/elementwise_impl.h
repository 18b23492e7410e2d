/* CPU element-wise kernels: pieces shared by elementwise.c (broadcasting, dtype tiles),
 * elementwise_unary.c, elementwise_binary.c, elementwise_mixed.c and kiln/fused_elementwise.c. */
#ifndef KN_CPU_ELEMENTWISE_IMPL_H
#define KN_CPU_ELEMENTWISE_IMPL_H

#include "backend/cpu/clones.h"
#include "backend/cpu/cpu.h"
#include "ops/fused_elementwise.h"

#include <stdbool.h>
#include <stdint.h>

/* Element-wise loops may run in place (y == x exactly), which GCC's run-time overlap check
 * treats as overlap, falling back to scalar code. Element i reads only element i, so
 * exact aliasing carries no dependence and the loop may be vectorised unconditionally. */
#if defined(__GNUC__) && !defined(__clang__)
#define EW_IVDEP _Pragma("GCC ivdep")
#else
#define EW_IVDEP
#endif

/* Elements per parallel chunk: large enough to amortise a task, small enough to spread. */
#define EW_GRAIN 16384
/* Binary operations do a multiply or an add per element, too little for a second thread below
 * this many: EfficientNet's squeeze-excitation Mul at 7x7 (56K elements) took 0.015 ms on one
 * thread and 0.019 on two with EW_GRAIN. */
#define EW_BINARY_GRAIN 65536
/* Elements per conversion tile (float16 through float, the fused program's registers). */
#define EW_TILE 256
/* Size of tables indexed by dtype (bfloat16 = 16 is the largest supported). */
#define EW_NDT 17
/* Most inputs one broadcast walk follows. */
#define EW_MAX_WALK 3

/* An op's scalar parameters: a and b for float ops (see kn_ew_unary), lo and hi for integer
 * Clip (each points to one element of the input dtype, or is NULL when absent). */
typedef struct ew_params {
    double a, b, c;
    const void *lo, *hi;
} ew_params;

/* y[i] = op(x[i]) over n contiguous elements; x and y may be the same buffer. */
typedef void (*ew_unary_loop)(const void *x, void *y, int64_t n, const ew_params *p);
/* y[i] = op(a[i*sa], b[i*sb]) with sa, sb in {0, 1}; y may alias a or b when its stride is 1. */
typedef void (*ew_binary_loop)(const void *a, int64_t sa, const void *b, int64_t sb, void *y,
                               int64_t n);

/* Float loops indexed by kn_ew_unary / kn_ew_binary (the fused kernel's instruction set). */
extern const ew_unary_loop ew_unary_f32[KN_EW_UNARY_COUNT];
extern const ew_unary_loop ew_unary_f64[KN_EW_UNARY_COUNT];
extern const ew_binary_loop ew_binary_f32[KN_EW_BINARY_COUNT];

/* Broadcast of up to EW_MAX_WALK inputs to an output shape, with dims of 1 dropped and
 * adjacent dims merged where every input allows it: the innermost dim is then as long as
 * possible and each input's stride along it is 0 or 1. */
typedef struct ew_bcast {
    int rank; /* >= 1 */
    int n_in;
    int64_t numel;
    int64_t dims[KN_MAX_RANK];
    int64_t strides[EW_MAX_WALK][KN_MAX_RANK];
} ew_bcast;

void ew_bcast_init(ew_bcast *b, const kn_shape *out, int n_in, const kn_shape *const *in);
/* Calls fn once per contiguous run of output elements within [begin, end): off[k] is input
 * k's element offset at the run's start, stride[k] its stride (0 or 1) along the run. */
typedef void (*ew_run_fn)(void *arg, const int64_t *off, const int64_t *stride, int64_t pos,
                          int64_t n);
void ew_bcast_walk(const ew_bcast *b, int64_t begin, int64_t end, ew_run_fn fn, void *arg);

/* Tiles between a dtype and float/double/int64 (n <= EW_TILE is not required). stride is the
 * source stride in elements (0 repeats one element). */
void ew_load_f32(const void *src, int32_t dt, int64_t stride, int64_t n, float *dst);
void ew_store_f32(void *dst, int32_t dt, int64_t n, const float *src);
void ew_load_f64(const void *src, int32_t dt, int64_t stride, int64_t n, double *dst);
void ew_load_i64(const void *src, int32_t dt, int64_t stride, int64_t n, int64_t *dst);
bool ew_is_half(int32_t dt); /* float16 or bfloat16: computed through float */

/* Run a binary op y = a op b with broadcasting, in parallel. table is indexed by the dtype of
 * a; float16/bfloat16 go through table[FLOAT32] on float tiles. y's dtype may differ from a's
 * only when it is bool. */
kiln_status ew_binary(kn_kernel_ctx *k, const kn_tensor *a, const kn_tensor *b, kn_tensor *y,
                      const ew_binary_loop *table);
/* Copy x into y, broadcasting x to y's shape (same dtype). */
void ew_broadcast_copy(kn_kernel_ctx *k, const kn_tensor *x, kn_tensor *y);

#endif
