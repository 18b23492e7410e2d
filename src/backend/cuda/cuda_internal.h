/* The CUDA backend module's shared pieces: the host table, the per-context stream state and
 * the op tables each ops_*.c file contributes. */
#ifndef KN_CUDA_INTERNAL_H
#define KN_CUDA_INTERNAL_H

#include "backend/backend_module.h"
#include "backend/cuda/cuda_kernels.h"
#include "kiln/kiln_plugin.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

/* The host's table, set by kn_backend_entry: errors must reach the caller's thread through
 * libkiln (its error text is thread-local there). */
extern const kn_backend_host_api *kc_host;

/* One per context: the CUDA stream (non-blocking), the library handles bound to it and a
 * device workspace shared by the kernels that run on it (one at a time, in stream order).
 * bad_index is a word of mapped host memory that kernels checking run-time indices set; the
 * stream's synchronisation reports it as an error and clears it. */
#define KC_MAX_RETIRED_WS 24
struct kn_stream {
    cudaStream_t s;
    cublasLtHandle_t lt;
    cudnnHandle_t dnn;
    void *ws;
    size_t ws_size;
    /* Workspaces outgrown: stream graphs recorded at earlier shapes still point into them, so
     * they live as long as the stream (each growth at least doubles: a bounded list). */
    void *retired[KC_MAX_RETIRED_WS];
    int n_retired;
    unsigned *bad_index;
};

struct kn_event {
    cudaEvent_t e;
};

/* Errors: a formatted message through the host table. */
kiln_status kc_fail(kiln_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A CUDA runtime error as a kiln error naming what failed ("" on success: KILN_OK). */
kiln_status kc_check(cudaError_t err, const char *what);
kiln_status kc_check_lt(cublasStatus_t st, const char *what);
kiln_status kc_check_dnn(cudnnStatus_t st, const char *what);
#define KC_TRY(expr)                                                                               \
    do {                                                                                           \
        kiln_status kc_rc_ = (expr);                                                               \
        if (kc_rc_ != KILN_OK)                                                                     \
            return kc_rc_;                                                                         \
    } while (0)
/* A launcher's result (cuda_kernels.h) as a kiln status. */
#define KC_LAUNCH(expr, what) kc_check((cudaError_t)(expr), what)

/* Around a CUDA call that synchronises the device (allocation, freeing, module loads, handle
 * creation, cuDNN's algorithm queries): waits while another thread records a stream graph,
 * whose capture the call would invalidate (cuda_backend.c). */
void kc_device_call_begin(void);
void kc_device_call_end(void);

/* Make the stream's workspace at least size bytes (waits for the stream when it grows). */
kiln_status kc_workspace(kn_stream *st, size_t size);

/* A 2-D convolution's geometry (1-D as H = 1), as ops_conv.c reads it from a node. */
typedef struct kc_conv_geom {
    int n, c, h, w; /* input, as 4-D */
    int k, kh, kw;  /* filters */
    int oh, ow;
    int ph, pw, sh, sw, dh, dw, groups;
    int dtype, tf32; /* the tensors' kiln dtype; float32 with TF32 allowed */
    int nhwc;        /* X, Y, Z stored NHWC and W as [K, R, S, C/g] (kiln_nhwc) */
} kc_conv_geom;

/* A convolution and its epilogue y = act(conv(x, w) + b + z) as one kernel of cuDNN's graph
 * API (conv_graph.c). kc_conv_graph_takes says whether g and act may ask (16-bit NHWC, an
 * activation cuDNN's pointwise nodes have, KILN_CUDA_CONV_GRAPH=1: off by default);
 * kc_conv_graph_make sets *out NULL and *why to cuDNN's reason when it makes no plan (the caller
 * runs the conv and the epilogue kernel instead). The plan belongs to handle h; runs enqueue on
 * h's stream. */
typedef struct kc_conv_graph kc_conv_graph;
bool kc_conv_graph_takes(const kc_conv_geom *g, int act);
kiln_status kc_conv_graph_make(cudnnHandle_t h, const kc_conv_geom *g, bool bias, bool residual,
                               int act, float aa, float ab, kc_conv_graph **out, const char **why);
size_t kc_conv_graph_workspace(const kc_conv_graph *cg);
kiln_status kc_conv_graph_run(cudnnHandle_t h, kc_conv_graph *cg, const void *x, const void *w,
                              const void *b, const void *z, void *y, void *ws);
void kc_conv_graph_free(kc_conv_graph *cg);

/* Attributes through the host table. */
static inline int64_t kc_attr_int(const kn_node *n, const char *name, int64_t def) {
    return kc_host->attr_int(n, name, def);
}
static inline float kc_attr_float(const kn_node *n, const char *name, float def) {
    return kc_host->attr_float(n, name, def);
}
static inline int64_t kc_attr_ints(const kn_node *n, const char *name, const int64_t **out) {
    return kc_host->attr_ints(n, name, out);
}
const char *kc_attr_string(const kn_node *n, const char *name, const char *def);
int64_t kc_attr_floats(const kn_node *n, const char *name, const float **out);

/* Whether a node with these inputs/outputs runs here (see kn_backend_iface.supports): fill
 * caps (host_in; reason when false). */
typedef bool (*kc_supports_fn)(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                               const kn_tensor *out, kn_caps *caps);

/* One op of the backend: its kernel and its capability check. */
typedef struct kc_op {
    kn_kernel kernel;
    kc_supports_fn supports;
} kc_op;

/* Op tables, each ended by an entry with a NULL kernel.name. */
extern const kc_op kc_ops_elementwise[];
extern const kc_op kc_ops_tensor[];
extern const kc_op kc_ops_nn[];
extern const kc_op kc_ops_gemm[];
extern const kc_op kc_ops_conv[];
extern const kc_op kc_ops_attention[];

/* Build-time tuning of one op (kn_backend_iface.tune_key and tune, for nodes of that op). */
typedef bool (*kc_tune_key_fn)(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                               const kn_tensor *out, char *key, size_t size);
typedef kiln_status (*kc_tune_fn)(kn_backend *b, const kn_node *n, int n_in, const kn_tensor *in,
                                  int n_out, const kn_tensor *out, int64_t *tactic, int *n_tactic,
                                  char *note, size_t note_size);
bool kc_conv_tune_key(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                      const kn_tensor *out, char *key, size_t size);
kiln_status kc_conv_tune(kn_backend *b, const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                         const kn_tensor *out, int64_t *tactic, int *n_tactic, char *note,
                         size_t note_size);
/* What the tunings share (tune_data.c): n values of a fixed pseudo-random sequence in [-1, 1]
 * (the same for every build); h (float32, host) into dst (dtype, device) through tmp (float32,
 * device, n values) and synchronized; a monotonic clock in seconds; whether cur matches ref, the
 * largest difference within tol of ref's largest magnitude and every value finite. */
void kc_tune_pattern(float *h, int64_t n, uint32_t seed);
kiln_status kc_tune_upload(kn_stream *st, int dtype, const float *h, void *dst, float *tmp,
                           int64_t n);
double kc_now_s(void);
bool kc_outputs_agree(const float *ref, const float *cur, int64_t n, double tol);
/* A candidate's output cur (n float32 values) checked: the first one checked becomes the
 * reference (copied into ref, *have_ref set); a later one must agree with it (kc_outputs_agree). */
bool kc_tune_accept(float *ref, const float *cur, int64_t n, double tol, bool *have_ref);
/* Gemm, MatMul and their kiln fused forms: cuBLASLt's algorithms (ops_gemm.c). */
bool kc_gemm_tune_key(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                      const kn_tensor *out, char *key, size_t size);
kiln_status kc_gemm_tune(kn_backend *b, const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                         const kn_tensor *out, int64_t *tactic, int *n_tactic, char *note,
                         size_t note_size);
/* What a tuning key starts with: the device, its compute capability and the CUDA, cuDNN and
 * cuBLASLt versions in use (set by kn_backend_entry). */
extern char kc_device_id[192];

/* Helpers for supports functions. */
/* Whether dtype is a float type the float kernels take (float32, float16, bfloat16). */
bool kc_is_float(int32_t dtype);
/* Every present tensor of t[n] is of such a type (else false, with the reason in caps). */
bool kc_all_float(const kn_tensor *t, int n, kn_caps *caps, const char *what);
/* Every present tensor of t[n] is of type dtype (a kernel's tensors share one type). */
bool kc_one_type(const kn_tensor *t, int n, int32_t dtype, kn_caps *caps);
bool kc_reason(kn_caps *caps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Broadcast of n inputs to out (all with the dims of out's rank, right-aligned). */
bool kc_bcast_init(kc_bcast *b, const kn_shape *out, int n, const kn_shape *const *in);

/* kiln.FusedElementwise: its program checked and copied (ops_elementwise.c); its kernel
 * generated at build (kn_backend_iface.generate), loaded from the plan's code (lib NULL when
 * there is none or it does not load here: the interpreter runs) and launched (fused_codegen.c). */
kiln_status kc_fused_program(const kn_node *node, int n_in, kc_program *p);
kiln_status kc_fused_generate(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                              const kn_tensor *out, void **code, size_t *size, char *note,
                              size_t note_size);
kiln_status kc_fused_code_load(const kn_node *n, cudaLibrary_t *lib, cudaKernel_t *kernel);
kiln_status kc_fused_code_launch(cudaKernel_t kernel, cudaStream_t st, const kc_bcast *bc,
                                 const void *const *in, void *y);
/* Whether input j / output j of node n is stored NHWC (kiln_nhwc, passes/layout_nhwc.c: the
 * value keeps its NCHW shape, its bytes are ordered N, H, W, C). */
bool kc_nhwc_in(const kn_node *n, int j);
bool kc_nhwc_out(const kn_node *n, int j);
/* kc_bcast_init over the order node n's tensors are stored in: when its output 0 is NHWC
 * (rank 4), every shape, right-aligned to rank 4, is taken as [N, H, W, C] (inputs stored NCHW
 * are then ones whose bytes are the same in both orders: the layout pass sees to that). */
bool kc_bcast_stored(kc_bcast *b, const kn_node *n, const kn_shape *out, int n_in,
                     const kn_shape *const *in);
/* Whether the module offers NHWC to the layout pass (yes unless KILN_CUDA_NHWC=0). */
extern bool kc_nhwc_offered;

/* The fused epilogue attributes of fuse_activations (passes.h) as KC_ACT_*. */
int kc_activation(const kn_node *n, float *alpha, float *beta);
/* kiln.FusedDepthwiseConv's input activation (kiln_input_activation and its parameters). */
int kc_input_activation(const kn_node *n, float *alpha, float *beta);

#endif
