/* The CUDA backend: device memory, one non-blocking stream per context with its cuBLASLt and
 * cuDNN handles, events, and the op tables of ops_*.c. Loaded by the backend registry as
 * libkiln_cuda.so through kn_backend_entry (backend_module.h). */
#include "backend/cuda/cuda_internal.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const kn_backend_host_api *kc_host;

/* cuBLASLt's workspace, allocated with each stream (cuBLAS recommends 32 MiB on Hopper). */
#define KC_DEFAULT_WORKSPACE ((size_t)32 << 20)

kiln_status kc_fail(kiln_status code, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kc_host->error(code, msg);
}

kiln_status kc_check(cudaError_t err, const char *what) {
    if (err == cudaSuccess)
        return KILN_OK;
    (void)cudaGetLastError(); /* clear a sticky launch error so the next call reports its own */
    return kc_fail(err == cudaErrorMemoryAllocation ? KILN_ERR_OUT_OF_MEMORY : KILN_ERR_INTERNAL,
                   "cuda: %s: %s", what, cudaGetErrorString(err));
}

kiln_status kc_check_lt(cublasStatus_t st, const char *what) {
    if (st == CUBLAS_STATUS_SUCCESS)
        return KILN_OK;
    return kc_fail(KILN_ERR_INTERNAL, "cuBLASLt: %s: status %d", what, (int)st);
}

kiln_status kc_check_dnn(cudnnStatus_t st, const char *what) {
    if (st == CUDNN_STATUS_SUCCESS)
        return KILN_OK;
    return kc_fail(KILN_ERR_INTERNAL, "cuDNN: %s: %s", what, cudnnGetErrorString(st));
}

bool kc_reason(kn_caps *caps, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(caps->reason, sizeof caps->reason, fmt, ap);
    va_end(ap);
    return false;
}

bool kc_is_float(int32_t dtype) {
    return dtype == KILN_DTYPE_FLOAT32 || dtype == KILN_DTYPE_FLOAT16 ||
           dtype == KILN_DTYPE_BFLOAT16;
}

bool kc_all_float(const kn_tensor *t, int n, kn_caps *caps, const char *what) {
    for (int j = 0; j < n; j++)
        if (t[j].dtype != 0 && !kc_is_float(t[j].dtype))
            return kc_reason(caps,
                             "cuda: %s %d is %s; only float32, float16 and bfloat16 run on the "
                             "GPU so far",
                             what, j, kn_dtype_name(t[j].dtype));
    return true;
}

bool kc_one_type(const kn_tensor *t, int n, int32_t dtype, kn_caps *caps) {
    for (int j = 0; j < n; j++)
        if (t[j].dtype != 0 && t[j].dtype != dtype)
            return kc_reason(caps, "cuda: input %d is %s, the kernel's type is %s", j,
                             kn_dtype_name(t[j].dtype), kn_dtype_name(dtype));
    return true;
}

const char *kc_attr_string(const kn_node *n, const char *name, const char *def) {
    const kn_attr *a = kc_host->attr(n, name);
    return a != NULL && a->type == KN_ATTR_STRING && a->s != NULL ? a->s : def;
}

int64_t kc_attr_floats(const kn_node *n, const char *name, const float **out) {
    const kn_attr *a = kc_host->attr(n, name);
    if (a == NULL || a->type != KN_ATTR_FLOATS) {
        *out = NULL;
        return 0;
    }
    *out = a->floats;
    return a->n;
}

/* Merge neighbouring dims that every input walks alike (both contiguous in it, or both
 * broadcast) and drop dims of one element: the same elements at the same offsets, with fewer
 * dims for the kernels' index arithmetic (a squeeze-and-excitation Mul of [N, C, H, W] by
 * [N, C, 1, 1] becomes [N * C, H * W]). At least one dim stays. */
static void bcast_collapse(kc_bcast *b) {
    int r = 0;
    for (int d = 0; d < b->rank; d++) {
        if (b->dims[d] == 1 && b->rank > 1)
            continue;
        bool merge = r > 0;
        for (int k = 0; k < b->n_in && merge; k++) {
            int64_t outer = b->strides[k][r - 1], inner = b->strides[k][d];
            merge = (outer == 0 && inner == 0) || (inner != 0 && outer == inner * b->dims[d]);
        }
        if (merge) {
            b->dims[r - 1] *= b->dims[d];
            for (int k = 0; k < b->n_in; k++)
                b->strides[k][r - 1] = b->strides[k][d];
            continue;
        }
        b->dims[r] = b->dims[d];
        for (int k = 0; k < b->n_in; k++)
            b->strides[k][r] = b->strides[k][d];
        r++;
    }
    if (r == 0) { /* every dim one element */
        b->dims[0] = 1;
        for (int k = 0; k < b->n_in; k++)
            b->strides[k][0] = 0;
        r = 1;
    }
    b->rank = r;
}

bool kc_bcast_init(kc_bcast *b, const kn_shape *out, int n, const kn_shape *const *in) {
    memset(b, 0, sizeof *b);
    if (out->rank > KC_MAX_RANK || n > KC_MAX_EW_IN)
        return false;
    b->rank = out->rank;
    b->n_in = n;
    b->numel = kn_shape_numel(out);
    for (int d = 0; d < out->rank; d++)
        b->dims[d] = out->d[d];
    for (int k = 0; k < n; k++) {
        const kn_shape *s = in[k];
        if (s->rank > out->rank)
            return false;
        int64_t stride = 1;
        for (int d = out->rank - 1; d >= 0; d--) {
            int sd = d - (out->rank - s->rank);
            int64_t dim = sd >= 0 ? s->d[sd] : 1;
            if (dim != 1 && dim != out->d[d])
                return false;
            b->strides[k][d] = dim == 1 ? 0 : stride;
            stride *= dim;
        }
    }
    bcast_collapse(b);
    return true;
}

/* The KC_ACT_* code of the activation attribute name_attr names, with its parameters. */
static int activation_named(const kn_node *n, const char *name_attr, const char *alpha_attr,
                            const char *beta_attr, float *alpha, float *beta) {
    const char *act = kc_attr_string(n, name_attr, NULL);
    *alpha = kc_attr_float(n, alpha_attr, 0.0f);
    *beta = kc_attr_float(n, beta_attr, 0.0f);
    if (act == NULL)
        return KC_ACT_NONE;
    if (strcmp(act, "Relu") == 0)
        return KC_ACT_RELU;
    if (strcmp(act, "Clip") == 0)
        return KC_ACT_CLIP;
    if (strcmp(act, "Sigmoid") == 0)
        return KC_ACT_SIGMOID;
    if (strcmp(act, "Swish") == 0)
        return KC_ACT_SWISH;
    if (strcmp(act, "LeakyRelu") == 0)
        return KC_ACT_LEAKY;
    if (strcmp(act, "HardSigmoid") == 0)
        return KC_ACT_HARD_SIGMOID;
    if (strcmp(act, "HardSwish") == 0)
        return KC_ACT_HARD_SWISH;
    if (strcmp(act, "Gelu") == 0)
        return KC_ACT_GELU;
    if (strcmp(act, "GeluTanh") == 0)
        return KC_ACT_GELU_TANH;
    if (strcmp(act, "Mish") == 0)
        return KC_ACT_MISH;
    if (strcmp(act, "Tanh") == 0)
        return KC_ACT_TANH;
    return -1;
}

int kc_activation(const kn_node *n, float *alpha, float *beta) {
    return activation_named(n, "kiln_activation", "kiln_alpha", "kiln_beta", alpha, beta);
}

int kc_input_activation(const kn_node *n, float *alpha, float *beta) {
    return activation_named(n, "kiln_input_activation", "kiln_input_alpha", "kiln_input_beta",
                            alpha, beta);
}

/* --- ops --- */

static const kc_op *const families[] = {kc_ops_elementwise, kc_ops_tensor, kc_ops_nn,
                                        kc_ops_gemm,        kc_ops_conv,   kc_ops_attention};

static const kc_op *find_op(const char *domain, const char *name) {
    if (domain == NULL || strcmp(domain, "ai.onnx") == 0)
        domain = "";
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
        for (const kc_op *o = families[f]; o->kernel.name != NULL; o++)
            if (strcmp(o->kernel.name, name) == 0 && strcmp(o->kernel.domain, domain) == 0)
                return o;
    return NULL;
}

static const kn_kernel *cuda_find_kernel(kn_backend *b, const char *domain, const char *name) {
    (void)b;
    const kc_op *o = find_op(domain, name);
    return o ? &o->kernel : NULL;
}

static bool cuda_supports(kn_backend *b, const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                          const kn_tensor *out, kn_caps *caps) {
    (void)b;
    const kc_op *o = find_op(n->domain, n->op_type);
    if (o == NULL)
        return kc_reason(caps, "cuda: no GPU kernel for %s%s%s yet", n->domain,
                         n->domain[0] ? "." : "", n->op_type);
    for (int j = 0; j < n_out; j++)
        if (out[j].dtype != 0 && !kn_shape_valid(&out[j].shape))
            return kc_reason(caps, "cuda: output %d has no concrete shape", j);
    caps->capture_safe = true;
    if (!o->supports(n, n_in, in, n_out, out, caps))
        return false;
    if (!kc_nhwc_offered)
        caps->layouts = 0;
    /* Every float kernel here reads and writes float32, float16 or bfloat16 and computes in
     * float32 (cuBLASLt and cuDNN accumulate in float32 too), so the precision pass may lower
     * any op but Cast, which is the conversion itself. */
    if (strcmp(n->op_type, "Cast") != 0)
        caps->lower = KN_LOWER_FP16 | KN_LOWER_BF16;
    return true;
}

/* --- build-time tuning --- */

char kc_device_id[192];

static const struct {
    const char *domain, *name;
    kc_tune_key_fn key;
    kc_tune_fn tune;
} tunables[] = {
    {"", "Conv", kc_conv_tune_key, kc_conv_tune},
    {"kiln", "FusedConv", kc_conv_tune_key, kc_conv_tune},
    {"", "Gemm", kc_gemm_tune_key, kc_gemm_tune},
    {"", "MatMul", kc_gemm_tune_key, kc_gemm_tune},
    {"kiln", "FusedGemm", kc_gemm_tune_key, kc_gemm_tune},
    {"kiln", "FusedMatMul", kc_gemm_tune_key, kc_gemm_tune},
};

static int tunable_of(const kn_node *n) {
    const char *domain = strcmp(n->domain, "ai.onnx") == 0 ? "" : n->domain;
    for (int i = 0; i < (int)(sizeof tunables / sizeof tunables[0]); i++)
        if (strcmp(tunables[i].name, n->op_type) == 0 && strcmp(tunables[i].domain, domain) == 0)
            return i;
    return -1;
}

static bool cuda_tune_key(kn_backend *b, const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                          const kn_tensor *out, char *key, size_t size) {
    (void)b;
    int t = tunable_of(n);
    return t >= 0 && tunables[t].key(n, n_in, in, n_out, out, key, size);
}

static kiln_status cuda_tune(kn_backend *b, const kn_node *n, int n_in, const kn_tensor *in,
                             int n_out, const kn_tensor *out, int64_t *tactic, int *n_tactic,
                             char *note, size_t note_size) {
    int t = tunable_of(n);
    if (t < 0)
        return kc_fail(KILN_ERR_INTERNAL, "cuda: nothing to tune for %s", n->op_type);
    return tunables[t].tune(b, n, n_in, in, n_out, out, tactic, n_tactic, note, note_size);
}

static kiln_status cuda_generate(kn_backend *b, const kn_node *n, int n_in, const kn_tensor *in,
                                 int n_out, const kn_tensor *out, void **code, size_t *size,
                                 char *note, size_t note_size) {
    (void)b;
    return kc_fused_generate(n, n_in, in, n_out, out, code, size, note, note_size);
}

/* --- captures and device-wide calls ---
 *
 * CUDA invalidates every stream capture on a device when any thread makes a call that
 * synchronises the device (cudaFree, a module load, library handle creation, ...), whatever
 * the capture mode. Contexts of one engine run on their own threads, and one context's
 * warm-up (allocating its arena, growing its workspace, choosing cuDNN algorithms, loading
 * generated kernels) may coincide with another context's recording of its stream graph. So
 * such calls and captures exclude each other: any number of captures at once, or any number of
 * device-wide calls at once, never both. A capturing thread's own calls pass (they would fail
 * its capture anyway, which the runtime then replaces by plain runs). */
static pthread_mutex_t guard_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t guard_cv = PTHREAD_COND_INITIALIZER;
static int guard_captures, guard_device_calls;
static _Thread_local bool guard_capturing;

void kc_device_call_begin(void) {
    if (guard_capturing)
        return;
    pthread_mutex_lock(&guard_mu);
    while (guard_captures > 0)
        pthread_cond_wait(&guard_cv, &guard_mu);
    guard_device_calls++;
    pthread_mutex_unlock(&guard_mu);
}

void kc_device_call_end(void) {
    if (guard_capturing)
        return;
    pthread_mutex_lock(&guard_mu);
    if (--guard_device_calls == 0)
        pthread_cond_broadcast(&guard_cv);
    pthread_mutex_unlock(&guard_mu);
}

static void capture_enter(void) {
    pthread_mutex_lock(&guard_mu);
    while (guard_device_calls > 0)
        pthread_cond_wait(&guard_cv, &guard_mu);
    guard_captures++;
    guard_capturing = true;
    pthread_mutex_unlock(&guard_mu);
}

static void capture_leave(void) {
    pthread_mutex_lock(&guard_mu);
    guard_capturing = false;
    if (--guard_captures == 0)
        pthread_cond_broadcast(&guard_cv);
    pthread_mutex_unlock(&guard_mu);
}

/* --- memory --- */

static kiln_status cuda_buffer_alloc(kn_backend *b, kn_mem mem, size_t size, kn_buffer *out) {
    (void)b;
    memset(out, 0, sizeof *out);
    void *p = NULL;
    kc_device_call_begin();
    cudaError_t err = mem == KN_MEM_DEVICE   ? cudaMalloc(&p, size ? size : 1)
                      : mem == KN_MEM_PINNED ? cudaMallocHost(&p, size ? size : 1)
                                             : cudaErrorInvalidValue;
    kc_device_call_end();
    if (err != cudaSuccess) {
        char what[96];
        snprintf(what, sizeof what, "allocating %zu bytes of %s memory", size,
                 mem == KN_MEM_DEVICE ? "device" : "pinned host");
        return kc_check(err, what);
    }
    out->base = p;
    out->size = size;
    out->mem = mem;
    return KILN_OK;
}

static void cuda_buffer_free(kn_backend *b, kn_buffer *buf) {
    (void)b;
    if (buf->base == NULL)
        return;
    kc_device_call_begin();
    if (buf->mem == KN_MEM_PINNED)
        cudaFreeHost(buf->base);
    else
        cudaFree(buf->base);
    kc_device_call_end();
    memset(buf, 0, sizeof *buf);
}

static kiln_status cuda_copy(kn_backend *b, kn_stream *s, void *dst, kn_mem dst_mem,
                             const void *src, kn_mem src_mem, size_t n) {
    (void)b;
    if (n == 0)
        return KILN_OK;
    bool dd = dst_mem == KN_MEM_DEVICE, sd = src_mem == KN_MEM_DEVICE;
    enum cudaMemcpyKind kind = dd && sd ? cudaMemcpyDeviceToDevice
                               : dd     ? cudaMemcpyHostToDevice
                               : sd     ? cudaMemcpyDeviceToHost
                                        : cudaMemcpyHostToHost;
    /* from or to pageable host memory the copy synchronises with the host */
    if (!(dd && sd))
        kc_device_call_begin();
    kiln_status rc =
        kc_check(cudaMemcpyAsync(dst, src, n, kind, s ? s->s : cudaStreamPerThread), "copy");
    if (!(dd && sd))
        kc_device_call_end();
    return rc;
}

/* --- streams --- */

static void stream_free(kn_stream *st) {
    kc_device_call_begin();
    if (st->bad_index)
        cudaFreeHost(st->bad_index);
    if (st->ws)
        cudaFree(st->ws);
    for (int i = 0; i < st->n_retired; i++)
        cudaFree(st->retired[i]);
    if (st->dnn)
        cudnnDestroy(st->dnn);
    if (st->lt)
        cublasLtDestroy(st->lt);
    if (st->s)
        cudaStreamDestroy(st->s);
    kc_device_call_end();
    kc_host->free(st);
}

static kiln_status cuda_stream_create(kn_backend *b, kn_stream **out) {
    (void)b;
    *out = NULL;
    kn_stream *st = kc_host->alloc(sizeof *st);
    if (st == NULL)
        return kc_fail(KILN_ERR_OUT_OF_MEMORY, "out of memory creating a CUDA stream");
    memset(st, 0, sizeof *st);
    kc_device_call_begin();
    kiln_status rc =
        kc_check(cudaStreamCreateWithFlags(&st->s, cudaStreamNonBlocking), "creating a stream");
    if (rc == KILN_OK)
        rc = kc_check_lt(cublasLtCreate(&st->lt), "creating a handle");
    if (rc == KILN_OK)
        rc = kc_check_dnn(cudnnCreate(&st->dnn), "creating a handle");
    if (rc == KILN_OK)
        rc = kc_check_dnn(cudnnSetStream(st->dnn, st->s), "binding the stream");
    if (rc == KILN_OK)
        rc = kc_workspace(st, KC_DEFAULT_WORKSPACE);
    if (rc == KILN_OK)
        rc = kc_check(
            cudaHostAlloc((void **)&st->bad_index, sizeof *st->bad_index, cudaHostAllocMapped),
            "allocating the stream's index flag");
    kc_device_call_end();
    if (rc != KILN_OK) {
        stream_free(st);
        return rc;
    }
    *out = st;
    return KILN_OK;
}

static void cuda_stream_destroy(kn_backend *b, kn_stream *s) {
    (void)b;
    if (s != NULL) {
        cudaStreamSynchronize(s->s);
        stream_free(s);
    }
}

static kiln_status cuda_stream_sync(kn_backend *b, kn_stream *s) {
    (void)b;
    KC_TRY(kc_check(cudaStreamSynchronize(s ? s->s : cudaStreamPerThread), "running the stream"));
    if (s != NULL && s->bad_index != NULL && *s->bad_index != 0) {
        *s->bad_index = 0;
        return kc_fail(KILN_ERR_INVALID_ARGUMENT,
                       "a Gather index read on the GPU is out of range of its data's axis");
    }
    return KILN_OK;
}

static void *cuda_stream_native(kn_backend *b, kn_stream *s) {
    (void)b;
    return s ? (void *)s->s : NULL;
}

kiln_status kc_workspace(kn_stream *st, size_t size) {
    if (size <= st->ws_size)
        return KILN_OK;
    if (st->ws != NULL && size < 2 * st->ws_size)
        size = 2 * st->ws_size;
    KC_TRY(kc_check(cudaStreamSynchronize(st->s), "growing the workspace"));
    void *grown = NULL;
    kc_device_call_begin();
    kiln_status rc = kc_check(cudaMalloc(&grown, size), "allocating the workspace");
    /* the old one stays allocated (see retired), unless the list is full: then it goes, and
     * with it the stream's graphs would dangle, so the runtime's graphs must not outlive it;
     * 24 doublings past the default never happen in practice */
    if (rc == KILN_OK && st->ws != NULL) {
        if (st->n_retired < KC_MAX_RETIRED_WS)
            st->retired[st->n_retired++] = st->ws;
        else
            rc = kc_fail(KILN_ERR_OUT_OF_MEMORY, "the workspace grew %d times", KC_MAX_RETIRED_WS);
    }
    kc_device_call_end();
    if (rc != KILN_OK) {
        if (grown != NULL)
            cudaFree(grown);
        return rc;
    }
    st->ws = grown;
    st->ws_size = size;
    return KILN_OK;
}

/* --- events --- */

static kiln_status cuda_event_create(kn_backend *b, kn_event **out) {
    (void)b;
    kn_event *e = kc_host->alloc(sizeof *e);
    if (e == NULL)
        return kc_fail(KILN_ERR_OUT_OF_MEMORY, "out of memory creating an event");
    kiln_status rc = kc_check(cudaEventCreate(&e->e), "creating an event");
    if (rc != KILN_OK) {
        kc_host->free(e);
        return rc;
    }
    *out = e;
    return KILN_OK;
}

static void cuda_event_destroy(kn_backend *b, kn_event *e) {
    (void)b;
    if (e != NULL) {
        cudaEventDestroy(e->e);
        kc_host->free(e);
    }
}

static kiln_status cuda_event_record(kn_backend *b, kn_event *e, kn_stream *s) {
    (void)b;
    return kc_check(cudaEventRecord(e->e, s ? s->s : cudaStreamPerThread), "recording an event");
}

static kiln_status cuda_event_wait(kn_backend *b, kn_stream *s, kn_event *e) {
    (void)b;
    return kc_check(cudaStreamWaitEvent(s ? s->s : cudaStreamPerThread, e->e, 0),
                    "waiting for an event");
}

static kiln_status cuda_event_sync(kn_backend *b, kn_event *e) {
    (void)b;
    return kc_check(cudaEventSynchronize(e->e), "waiting for an event");
}

static kiln_status cuda_event_elapsed(kn_backend *b, kn_event *start, kn_event *end, float *ms) {
    (void)b;
    return kc_check(cudaEventElapsedTime(ms, start->e, end->e), "timing events");
}

/* --- stream graphs --- */

/* Thread-local capture: another context's thread may keep launching work meanwhile (its
 * device-wide calls wait: see kc_device_call_begin), and a call of this thread that cannot be
 * recorded fails the capture (the runtime then runs plainly). */
static kiln_status cuda_capture_begin(kn_backend *b, kn_stream *s) {
    (void)b;
    capture_enter();
    kiln_status rc = kc_check(cudaStreamBeginCapture(s->s, cudaStreamCaptureModeThreadLocal),
                              "beginning a stream capture");
    if (rc != KILN_OK)
        capture_leave();
    return rc;
}

static kiln_status cuda_capture_end(kn_backend *b, kn_stream *s, void **graph) {
    (void)b;
    *graph = NULL;
    cudaGraph_t g = NULL;
    kiln_status ended = kc_check(cudaStreamEndCapture(s->s, &g), "ending a stream capture");
    capture_leave();
    KC_TRY(ended);
    cudaGraphExec_t exec = NULL;
    kc_device_call_begin();
    kiln_status rc = kc_check(cudaGraphInstantiateWithFlags(&exec, g, 0), "instantiating a graph");
    kc_device_call_end();
    cudaGraphDestroy(g);
    KC_TRY(rc);
    *graph = exec;
    return KILN_OK;
}

static kiln_status cuda_graph_launch(kn_backend *b, kn_stream *s, void *graph) {
    (void)b;
    return kc_check(cudaGraphLaunch((cudaGraphExec_t)graph, s->s), "launching a graph");
}

static void cuda_graph_destroy(kn_backend *b, void *graph) {
    (void)b;
    kc_device_call_begin();
    cudaGraphExecDestroy((cudaGraphExec_t)graph);
    kc_device_call_end();
}

static const kn_backend_iface cuda_iface = {
    .name = "cuda",
    .mem = KN_MEM_DEVICE,
    .find_kernel = cuda_find_kernel,
    .supports = cuda_supports,
    .buffer_alloc = cuda_buffer_alloc,
    .buffer_free = cuda_buffer_free,
    .copy = cuda_copy,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .stream_sync = cuda_stream_sync,
    .stream_native = cuda_stream_native,
    .plugin_stream_kind = KILN_BACKEND_CUDA,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .event_wait = cuda_event_wait,
    .event_sync = cuda_event_sync,
    .event_elapsed = cuda_event_elapsed,
    .capture_begin = cuda_capture_begin,
    .capture_end = cuda_capture_end,
    .graph_launch = cuda_graph_launch,
    .graph_destroy = cuda_graph_destroy,
    .tune_key = cuda_tune_key,
    .tune = cuda_tune,
    .generate = cuda_generate,
};

/* The same without stream graphs (KILN_CUDA_GRAPHS=0: every run enqueues each kernel) or with
 * another default for build-time tuning: a build that leaves the choice to the backend
 * (KILN_TACTICS_AUTO) times its layers when it has a timing cache file; KILN_CUDA_TUNE=1 times
 * them always, KILN_CUDA_TUNE=0 never (a plan without tactics runs cuDNN's and cuBLASLt's first
 * heuristic choices). */
static kn_backend_iface cuda_iface_env;

static kn_backend cuda_backend = {.iface = &cuda_iface, .device = 0, .context = NULL};

/* Whether this process can run the module's code: a device, a driver at least as new as the
 * runtime it was built with, and compute capability 9.0 or newer (the sm_90 code and
 * compute_90 PTX it carries). */
static kiln_status check_device(void) {
    int driver = 0;
    cudaDriverGetVersion(&driver);
    if (driver == 0)
        return kc_fail(KILN_ERR_UNSUPPORTED, "no NVIDIA driver is loaded (no GPU here)");
    if (driver < CUDART_VERSION)
        return kc_fail(KILN_ERR_UNSUPPORTED,
                       "the NVIDIA driver supports CUDA %d.%d, the module needs %d.%d: update "
                       "the driver",
                       driver / 1000, driver % 1000 / 10, CUDART_VERSION / 1000,
                       CUDART_VERSION % 1000 / 10);
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess || n == 0)
        return kc_fail(KILN_ERR_UNSUPPORTED, "no CUDA device: %s",
                       err != cudaSuccess ? cudaGetErrorString(err) : "none found");
    struct cudaDeviceProp prop;
    KC_TRY(kc_check(cudaGetDeviceProperties(&prop, 0), "reading the device's properties"));
    if (prop.major < 9)
        return kc_fail(KILN_ERR_UNSUPPORTED,
                       "%s has compute capability %d.%d; the module is built for 9.0 and newer",
                       prop.name, prop.major, prop.minor);
    int runtime = 0;
    cudaRuntimeGetVersion(&runtime);
    snprintf(kc_device_id, sizeof kc_device_id, "%.100s sm_%d%d cuda %d cudnn %zu cublasLt %zu",
             prop.name, prop.major, prop.minor, runtime, cudnnGetVersion(), cublasLtGetVersion());
    for (char *c = kc_device_id; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == '|')
            *c = ' '; /* a key is one line of printable text; '|' separates its fields */
    return kc_check(cudaSetDevice(0), "selecting device 0");
}

__attribute__((visibility("default"))) kiln_status
kn_backend_entry(const kn_backend_host_api *host, uint32_t version, kn_backend **out) {
    if (host == NULL || out == NULL || version != KN_BACKEND_MODULE_VERSION ||
        host->struct_size < sizeof *host)
        return KILN_ERR_UNSUPPORTED; /* no host table to report through */
    kc_host = host;
    *out = NULL;
    KC_TRY(check_device());
    const char *graphs = getenv("KILN_CUDA_GRAPHS"), *tune = getenv("KILN_CUDA_TUNE");
    const char *nhwc = getenv("KILN_CUDA_NHWC"); /* 0: no NHWC storage offered at build */
    kc_nhwc_offered = nhwc == NULL || strcmp(nhwc, "0") != 0;
    cuda_iface_env = cuda_iface;
    if (graphs != NULL && strcmp(graphs, "0") == 0) {
        cuda_iface_env.capture_begin = NULL;
        cuda_iface_env.capture_end = NULL;
        cuda_iface_env.graph_launch = NULL;
        cuda_iface_env.graph_destroy = NULL;
        cuda_backend.iface = &cuda_iface_env;
    }
    if (tune != NULL && (strcmp(tune, "1") == 0 || strcmp(tune, "0") == 0)) {
        cuda_iface_env.tune_auto = tune[0] == '1' ? KN_TUNE_ALWAYS : KN_TUNE_NEVER;
        cuda_backend.iface = &cuda_iface_env;
    }
    *out = &cuda_backend;
    return KILN_OK;
}
