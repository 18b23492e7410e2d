/*
 * kiln — an inference engine for ONNX models.
 *
 * Usage (error checks shortened to CHECK):
 *
 *     kiln_builder *b;            CHECK(kiln_builder_create(&b));
 *     kiln_network *net;          CHECK(kiln_network_from_onnx_file(b, "model.onnx", &net));
 *     kiln_build_config *cfg;     CHECK(kiln_build_config_create(&cfg));
 *     int64_t mn[] = {1, 3, 224, 224}, op[] = {8, 3, 224, 224}, mx[] = {32, 3, 224, 224};
 *     CHECK(kiln_build_config_add_profile(cfg, "input", 4, mn, op, mx));
 *     CHECK(kiln_build_to_file(b, net, cfg, "model.plan"));
 *
 *     kiln_engine *e;             CHECK(kiln_engine_load_file("model.plan", NULL, &e));
 *     kiln_context *ctx;          CHECK(kiln_context_create(e, &ctx));    // one per thread
 *     int64_t dims[] = {4, 3, 224, 224};
 *     CHECK(kiln_context_set_input_shape(ctx, "input", 4, dims));
 *     CHECK(kiln_context_set_input(ctx, "input", pixels, nbytes));        // caller's buffer
 *     CHECK(kiln_context_execute(ctx));
 *     kiln_tensor_view out;       CHECK(kiln_context_get_output(ctx, "logits", &out));
 *     ... read out.data; it stays valid until the next execute or destroy of ctx ...
 *     kiln_context_destroy(ctx); kiln_engine_destroy(e);
 *     kiln_build_config_destroy(cfg); kiln_network_destroy(net); kiln_builder_destroy(b);
 *
 * Errors: every fallible call returns a kiln_status; on failure kiln_last_error() gives a
 * one-line message naming the file, node, op, input and the condition that failed.
 *
 * Threads: an engine is immutable after load and may be shared by any number of threads. A
 * context belongs to one thread at a time. Builders, networks and configs are not thread-safe;
 * use one per thread. kiln_last_error() is per thread.
 */
#ifndef KILN_H
#define KILN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(KILN_BUILDING) && defined(__GNUC__)
#define KILN_API __attribute__((visibility("default")))
#else
#define KILN_API
#endif

#define KILN_VERSION_MAJOR 0
#define KILN_VERSION_MINOR 1
#define KILN_VERSION_PATCH 0
#define KILN_MAX_RANK 8

typedef enum kiln_status {
    KILN_OK = 0,
    KILN_ERR_INVALID_ARGUMENT = 1, /* a caller passed something wrong: NULL, bad name, bad size */
    KILN_ERR_IO = 2,               /* a file could not be opened, read or written */
    KILN_ERR_MODEL = 3,            /* the ONNX model is malformed or inconsistent */
    KILN_ERR_UNSUPPORTED = 4,      /* a valid construct kiln does not implement */
    KILN_ERR_SHAPE = 5,            /* a shape violates an op's rules or a profile */
    KILN_ERR_DTYPE = 6,            /* a data type is wrong or unsupported */
    KILN_ERR_OUT_OF_MEMORY = 7,
    KILN_ERR_PLAN = 8, /* a plan is truncated, corrupted or from another version */
    KILN_ERR_PLUGIN = 9,
    KILN_ERR_NOT_FOUND = 10,
    KILN_ERR_INTERNAL = 11,
} kiln_status;

/* Data types use ONNX's TensorProto numbering. */
typedef enum kiln_dtype {
    KILN_DTYPE_UNDEFINED = 0,
    KILN_DTYPE_FLOAT32 = 1,
    KILN_DTYPE_UINT8 = 2,
    KILN_DTYPE_INT8 = 3,
    KILN_DTYPE_UINT16 = 4,
    KILN_DTYPE_INT16 = 5,
    KILN_DTYPE_INT32 = 6,
    KILN_DTYPE_INT64 = 7,
    /* A string tensor, held as one block of bytes (shape [bytes], kiln_dtype_size 1): a header
     * {u32 magic 0x54534e4b, i32 rank, i64 dims[8], u64 count, u64 bytes}, then u64 offsets
     * [count + 1] into the UTF-8 characters that follow (docs/strings.md). CPU only. */
    KILN_DTYPE_STRING = 8,
    KILN_DTYPE_BOOL = 9,
    KILN_DTYPE_FLOAT16 = 10,
    KILN_DTYPE_FLOAT64 = 11,
    KILN_DTYPE_UINT32 = 12,
    KILN_DTYPE_UINT64 = 13,
    KILN_DTYPE_BFLOAT16 = 16,
    /* Storage types (one byte per element; the 4- and 2-bit ones in the low bits): Cast,
     * CastLike, QuantizeLinear, DequantizeLinear and the data-movement ops take them. */
    KILN_DTYPE_FLOAT8E4M3FN = 17,
    KILN_DTYPE_FLOAT8E4M3FNUZ = 18,
    KILN_DTYPE_FLOAT8E5M2 = 19,
    KILN_DTYPE_FLOAT8E5M2FNUZ = 20,
    KILN_DTYPE_UINT4 = 21,
    KILN_DTYPE_INT4 = 22,
    KILN_DTYPE_FLOAT4E2M1 = 23,
    KILN_DTYPE_FLOAT8E8M0 = 24, /* a power of two: 2^(code - 127), 0xff NaN */
    KILN_DTYPE_UINT2 = 25,      /* opset 25 */
    KILN_DTYPE_INT2 = 26,
    /* Not an ONNX element type: a sequence or optional value, held as one block of bytes
     * (shape [bytes]) in the layout docs/sequences.md describes. */
    KILN_DTYPE_CONTAINER = 64,
} kiln_dtype;

typedef enum kiln_log_level {
    KILN_LOG_ERROR = 0,
    KILN_LOG_WARNING = 1,
    KILN_LOG_INFO = 2,
    KILN_LOG_VERBOSE = 3,
} kiln_log_level;

typedef struct kiln_builder kiln_builder;
typedef struct kiln_network kiln_network;
typedef struct kiln_build_config kiln_build_config;
typedef struct kiln_engine kiln_engine;
typedef struct kiln_context kiln_context;
typedef struct kiln_registry kiln_registry; /* plugin registry; see kiln_plugin.h */
struct kiln_plugin_creator;
struct kiln_host_api;

/* ---- errors, version, hooks ------------------------------------------------------------ */

/* The message of the last failed call on this thread; never NULL; valid until the next
 * failing call on this thread. */
KILN_API const char *kiln_last_error(void);
KILN_API const char *kiln_status_name(kiln_status status);
KILN_API const char *kiln_version_string(void);
KILN_API const char *kiln_dtype_name(kiln_dtype dtype);
KILN_API size_t
kiln_dtype_size(kiln_dtype dtype); /* 0 for undefined; 1 for string and container blocks */

/* Allocator hook. alloc returns memory aligned to `align` (a power of two, at most 4096) or
 * NULL; free accepts what alloc returned or NULL. Set it once, before any other kiln call,
 * from one thread; the hook itself must be thread-safe. NULL restores the default. */
typedef struct kiln_allocator {
    void *(*alloc)(void *user, size_t size, size_t align);
    void (*free)(void *user, void *ptr);
    void *user;
} kiln_allocator;
KILN_API void kiln_set_allocator(const kiln_allocator *allocator);
/* Bytes currently allocated through the hook by kiln (weights mapped from a plan excluded). */
KILN_API size_t kiln_allocated_bytes(void);

/* Logger hook: receives warnings and progress (never stdout). Same rules as the allocator. */
typedef void (*kiln_log_fn)(void *user, kiln_log_level level, const char *message);
KILN_API void kiln_set_logger(kiln_log_fn fn, void *user, kiln_log_level max_level);

/* ---- plugins ----------------------------------------------------------------------------- */

/* A registry holds plugin creators and the libraries they came from. It is an object, not a
 * global: builders and engines use the one they are given. Not thread-safe while being
 * changed; lookups from several threads are fine once loading is done. Destroy it after every
 * engine that uses its plugins (libraries are unloaded then). */
KILN_API kiln_status kiln_registry_create(kiln_registry **out);
KILN_API void kiln_registry_destroy(kiln_registry *registry);
/* dlopen a plugin library and call its kiln_plugin_entry. A library whose ABI is newer than
 * this kiln, or that lacks the entry symbol, is refused with a message saying so. */
KILN_API kiln_status kiln_registry_load_library(kiln_registry *registry, const char *path);
/* Load every library named by KILN_PLUGIN_PATH (colon-separated files, or folders whose *.so
 * files are all loaded). Unset or empty: nothing to do. */
KILN_API kiln_status kiln_registry_load_env(kiln_registry *registry);
/* Static registration for plugins linked into the application. The creator's function
 * pointers must outlive the registry; strings and field specs are copied. */
KILN_API kiln_status kiln_registry_register(kiln_registry *registry,
                                            const struct kiln_plugin_creator *creator);
KILN_API kiln_status kiln_registry_deregister(kiln_registry *registry, const char *name,
                                              const char *version, const char *plugin_namespace);
KILN_API int kiln_registry_count(const kiln_registry *registry);
/* Identity of creator `index` (strings owned by the registry). */
KILN_API kiln_status kiln_registry_get(const kiln_registry *registry, int index, const char **name,
                                       const char **version, const char **plugin_namespace);
/* The host API table given to plugin entry functions (for bindings that register creators
 * written in another language). */
KILN_API const struct kiln_host_api *kiln_host_api_get(void);

/* ---- builder ----------------------------------------------------------------------------- */

KILN_API kiln_status kiln_builder_create(kiln_builder **out);
KILN_API void kiln_builder_destroy(kiln_builder *builder); /* NULL is a no-op */
/* Plugins the builder may use (borrowed; must outlive the builder's builds). */
KILN_API kiln_status kiln_builder_set_registry(kiln_builder *builder, kiln_registry *registry);

/* Import an ONNX model. The network owns copies of everything it needs, external data
 * included (read relative to the model file's folder). */
KILN_API kiln_status kiln_network_from_onnx_file(kiln_builder *builder, const char *path,
                                                 kiln_network **out);
KILN_API kiln_status kiln_network_from_onnx_memory(kiln_builder *builder, const void *data,
                                                   size_t size, kiln_network **out);
KILN_API void kiln_network_destroy(kiln_network *network);

/* ---- networks built by code --------------------------------------------------------------
 *
 * The same network an ONNX import produces, built call by call (TensorRT's network API in C).
 * Tensors are int32_t ids (>= 0) local to their network. Every call checks its arguments at
 * once; when every input shape is fixed it also runs the op's type and shape inference, so a
 * wrong rank, dtype or dim is refused by the call that introduces it (with symbolic dims that
 * check happens at build time, against the profile). Ops are ONNX ops of the default domain at
 * the network's opset (17 unless set), or plugins from the builder's registry. */

typedef enum kiln_attr_type {
    KILN_ATTR_FLOAT = 1,
    KILN_ATTR_INT = 2,
    KILN_ATTR_STRING = 3,
    KILN_ATTR_FLOATS = 6,
    KILN_ATTR_INTS = 7,
} kiln_attr_type;

/* One attribute for kiln_network_add_layer; n counts ints/floats elements. */
typedef struct kiln_attribute {
    const char *name;
    int32_t type; /* kiln_attr_type */
    int64_t i;
    float f;
    const char *s;
    int64_t n;
    const int64_t *ints;
    const float *floats;
} kiln_attribute;

typedef enum kiln_activation {
    KILN_ACT_RELU = 0,
    KILN_ACT_SIGMOID = 1,
    KILN_ACT_TANH = 2,
    KILN_ACT_LEAKY_RELU = 3, /* alpha */
    KILN_ACT_CLIP = 4,       /* alpha = min, beta = max */
    KILN_ACT_GELU = 5,
    KILN_ACT_SWISH = 6, /* x * sigmoid(x), as two layers */
    KILN_ACT_HARD_SWISH = 7,
    KILN_ACT_ELU = 8, /* alpha */
} kiln_activation;

typedef enum kiln_elementwise_op {
    KILN_EW_ADD = 0,
    KILN_EW_SUB = 1,
    KILN_EW_MUL = 2,
    KILN_EW_DIV = 3,
    KILN_EW_MAX = 4,
    KILN_EW_MIN = 5,
    KILN_EW_POW = 6,
} kiln_elementwise_op;

typedef enum kiln_pooling { KILN_POOL_MAX = 0, KILN_POOL_AVERAGE = 1 } kiln_pooling;

/* An empty network; opset is the default-domain ONNX opset its layers follow (0: 17). */
KILN_API kiln_status kiln_network_create(kiln_builder *builder, int opset, kiln_network **out);
/* dims[d] < 0 makes axis d dynamic; symbols[d] (may be NULL) names it, so inputs sharing a
 * symbol share the dim and profiles and inspect show the name. */
KILN_API kiln_status kiln_network_add_input(kiln_network *net, const char *name, kiln_dtype dtype,
                                            int rank, const int64_t *dims,
                                            const char *const *symbols, int32_t *tensor);
/* A constant (weights). copy != 0 copies data now; copy == 0 borrows it: data must then stay
 * valid and unchanged until the network and every plan built from it without a file are
 * destroyed. name may be NULL (generated). */
KILN_API kiln_status kiln_network_add_constant(kiln_network *net, const char *name,
                                               kiln_dtype dtype, int rank, const int64_t *dims,
                                               const void *data, int copy, int32_t *tensor);
/* Any built-in op: op_type in domain "" (or "ai.onnx"); inputs may hold -1 for an omitted
 * optional input. Writes n_out new tensor ids to outputs. name may be NULL (generated). */
KILN_API kiln_status kiln_network_add_layer(kiln_network *net, const char *name,
                                            const char *op_type, int n_in, const int32_t *inputs,
                                            int n_attrs, const kiln_attribute *attrs, int n_out,
                                            int32_t *outputs);
/* Conv over NCHW x with weights w [M, C/group, kH, kW] and optional bias b (-1: none).
 * strides/dilations: 2 values (NULL: 1); pads: 4 values top, left, bottom, right (NULL: 0). */
KILN_API kiln_status kiln_network_add_convolution(kiln_network *net, const char *name, int32_t x,
                                                  int32_t w, int32_t b, const int64_t *strides,
                                                  const int64_t *pads, const int64_t *dilations,
                                                  int64_t group, int32_t *out);
/* y = a * b^T + c when trans_b (Gemm, 2-D), or numpy MatMul when c < 0 and !trans_b. */
KILN_API kiln_status kiln_network_add_matmul(kiln_network *net, const char *name, int32_t a,
                                             int32_t b, int32_t c, int trans_b, int32_t *out);
KILN_API kiln_status kiln_network_add_activation(kiln_network *net, const char *name, int32_t x,
                                                 kiln_activation kind, float alpha, float beta,
                                                 int32_t *out);
KILN_API kiln_status kiln_network_add_elementwise(kiln_network *net, const char *name, int32_t a,
                                                  int32_t b, kiln_elementwise_op op, int32_t *out);
/* kernel/strides: 2 values; pads: 4 (NULL: 0). global != 0 ignores them (GlobalXPool). */
KILN_API kiln_status kiln_network_add_pooling(kiln_network *net, const char *name, int32_t x,
                                              kiln_pooling kind, int global, const int64_t *kernel,
                                              const int64_t *strides, const int64_t *pads,
                                              int32_t *out);
KILN_API kiln_status kiln_network_add_reshape(kiln_network *net, const char *name, int32_t x,
                                              int rank, const int64_t *dims, int32_t *out);
KILN_API kiln_status kiln_network_add_transpose(kiln_network *net, const char *name, int32_t x,
                                                int rank, const int64_t *perm, int32_t *out);
KILN_API kiln_status kiln_network_add_concat(kiln_network *net, const char *name, int n,
                                             const int32_t *inputs, int64_t axis, int32_t *out);
KILN_API kiln_status kiln_network_add_softmax(kiln_network *net, const char *name, int32_t x,
                                              int64_t axis, int32_t *out);
/* BatchNormalization (inference; scale, bias, mean, var constants) when mean >= 0, else
 * LayerNormalization over the last axis (scale, bias). */
KILN_API kiln_status kiln_network_add_normalization(kiln_network *net, const char *name, int32_t x,
                                                    int32_t scale, int32_t bias, int32_t mean,
                                                    int32_t var, float epsilon, int32_t *out);
/* A plugin layer: the creator (name, version, namespace; NULL version/namespace match any) is
 * looked up in the builder's registry now and created with fields, so a missing plugin or a
 * bad field is reported by this call. */
struct kiln_field;
KILN_API kiln_status kiln_network_add_plugin(kiln_network *net, const char *name,
                                             const char *plugin, const char *version,
                                             const char *plugin_namespace, int n_in,
                                             const int32_t *inputs, int n_fields,
                                             const struct kiln_field *fields, int n_out,
                                             int32_t *outputs);
KILN_API kiln_status kiln_network_set_tensor_name(kiln_network *net, int32_t tensor,
                                                  const char *name);
KILN_API kiln_status kiln_network_mark_output(kiln_network *net, int32_t tensor);
/* dtype and shape of a tensor as far as known (dims of symbolic axes are -1). */
KILN_API kiln_status kiln_network_tensor_info(const kiln_network *net, int32_t tensor,
                                              kiln_dtype *dtype, int *rank, int64_t *dims);
KILN_API int kiln_network_num_layers(const kiln_network *net);

KILN_API kiln_status kiln_build_config_create(kiln_build_config **out);
KILN_API void kiln_build_config_destroy(kiln_build_config *config);
/* Threads each context of the built engine uses by default (0: one per core, at least 1). */
KILN_API kiln_status kiln_build_config_set_threads(kiln_build_config *config, int threads);
/* min/opt/max shapes for one input with dynamic dims. Inputs with only fixed dims need none.
 * A dynamic input without a profile is refused at build time, naming it. */
KILN_API kiln_status kiln_build_config_add_profile(kiln_build_config *config, const char *input,
                                                   int rank, const int64_t *min, const int64_t *opt,
                                                   const int64_t *max);
/* Let a plugin named op_type replace the built-in op of that name (by default built-in ops
 * win and only unknown ops go to plugins). */
KILN_API kiln_status kiln_build_config_prefer_plugin(kiln_build_config *config,
                                                     const char *op_type);
/* Progress callback for long builds: stage name and fraction done in [0, 1]. */
typedef void (*kiln_progress_fn)(void *user, const char *stage, double fraction);
/* The backends to place nodes on, in order of preference (each node goes to the first that
 * runs it at the profile's min, opt and max shapes); the host ("cpu") is always the last
 * resort, whether listed or not. Names are checked at build: an unknown or unavailable
 * backend fails the build with the reason. Default: "cpu" alone. */
KILN_API kiln_status kiln_build_config_set_backends(kiln_build_config *config,
                                                    const char *const *names, int count);
/* Arithmetic precision. FP32 is strict float32 everywhere (the default); TF32 lets device
 * backends use TF32 tensor cores for Conv/Gemm/MatMul (float32 storage, 10-bit mantissa
 * products); FP16 and BF16 run each layer whose backend offers it in that type (storage and
 * products; accumulation stays float32), with casts where layers of different precision meet.
 * Graph inputs and outputs keep their dtypes. */
typedef enum kiln_precision {
    KILN_PRECISION_FP32 = 0,
    KILN_PRECISION_TF32 = 1,
    KILN_PRECISION_FP16 = 2,
    KILN_PRECISION_BF16 = 3,
} kiln_precision;
KILN_API kiln_status kiln_build_config_set_precision(kiln_build_config *config,
                                                     kiln_precision precision);
/* Override the precision of the layers whose ONNX node name matches a shell-style pattern
 * (fnmatch: * ? [...]); later calls win. E.g. ("*attn*", KILN_PRECISION_FP32) keeps attention
 * in float32 in an FP16 build. */
KILN_API kiln_status kiln_build_config_set_layer_precision(kiln_build_config *config,
                                                           const char *pattern,
                                                           kiln_precision precision);
/* How device backends choose among the algorithms of a layer that has several (cuDNN
 * convolutions and cuBLASLt products on CUDA). TIMED: each candidate is timed at the profile's
 * opt shapes on the build's device, those whose output differs from the first candidate's are
 * dropped, and the fastest is recorded in the plan (seconds more a build; two builds without a
 * timing cache may choose differently). HEURISTIC: nothing is timed; each library's own first
 * choice runs. AUTO (the default): TIMED when the build has a timing cache file (below) or the
 * backend is told to by its environment (KILN_CUDA_TUNE=1; KILN_CUDA_TUNE=0 keeps the heuristic
 * even with a cache), else HEURISTIC. The host's per-layer thread counts follow the timing
 * cache alone (see kiln_build_config_set_timing_cache). */
typedef enum kiln_tactics {
    KILN_TACTICS_AUTO = 0,
    KILN_TACTICS_TIMED = 1,
    KILN_TACTICS_HEURISTIC = 2,
} kiln_tactics;
KILN_API kiln_status kiln_build_config_set_tactics(kiln_build_config *config, kiln_tactics tactics);
/* A timing cache file (NULL or "": none). Device backends time the candidate algorithms of
 * layers that have several (cuDNN convolutions and cuBLASLt products on CUDA; unless
 * kiln_build_config_set_tactics says HEURISTIC) and record the fastest in the plan; the cache
 * keeps those choices by device, library versions and layer signature. It is read before
 * tuning (a malformed or foreign file is ignored with a warning) and written (temporary file,
 * then rename) when layers were timed, so a rebuild with it times nothing and writes the same
 * plan. On the CPU, a build for more than one thread also times each layer on fewer of
 * the context's threads and keeps the layers that are clearly faster so in the cache (and in
 * the plan's per-layer thread counts); KILN_CPU_THREAD_TUNE=0 turns that off. Without a cache
 * file the CPU times nothing (KILN_CPU_THREAD_TUNE=1: it does, and the plan then varies from
 * build to build). A build that times nothing leaves the file as it is. */
KILN_API kiln_status kiln_build_config_set_timing_cache(kiln_build_config *config,
                                                        const char *path);
/* int8 for a float32 model, calibrated on the CPU. The model runs in float32 over the samples
 * in calibration_dir: one sub-folder per sample holding INPUT.npy for each model input (a '/'
 * in an input's name becomes '_'), or, for a model of one input, one .npy file per sample.
 * Each Conv (2-D, ungrouped), Gemm and MatMul with constant weights whose output is not a graph
 * output then runs in int8: its input and output tensors get the scale that method gives
 * (ENTROPY: the threshold of least KL divergence over a 2048-bin histogram of |x|; MINMAX: the
 * largest |x| seen), uint8 where the tensor was never negative, int8 otherwise, and its weights
 * one symmetric int8 scale per output channel. cache (NULL or "": none) is a text file of the
 * scales, one tensor a line, under a header naming the model's hash and the method: a build
 * that finds it runs no calibration (calibration_dir may then be NULL) and writes the same plan;
 * one made for another model or method fails the build with the reason. A build that
 * calibrates writes it (temporary file, then rename). The build's progress callback reports
 * the calibration runs. */
typedef enum kiln_calibration_method {
    KILN_CALIBRATION_ENTROPY = 0,
    KILN_CALIBRATION_MINMAX = 1,
} kiln_calibration_method;
KILN_API kiln_status kiln_build_config_set_int8(kiln_build_config *config,
                                                const char *calibration_dir,
                                                kiln_calibration_method method, const char *cache);
KILN_API kiln_status kiln_build_config_set_progress(kiln_build_config *config, kiln_progress_fn fn,
                                                    void *user);

/* Build a plan into memory. On success *data is owned by the caller: free it with
 * kiln_free(). The network is not modified and may be built again. */
KILN_API kiln_status kiln_build(kiln_builder *builder, const kiln_network *network,
                                const kiln_build_config *config, void **data, size_t *size);
/* Build a plan into a file: written to a temporary file beside it, then renamed, so a failed
 * build never damages an existing plan. */
KILN_API kiln_status kiln_build_to_file(kiln_builder *builder, const kiln_network *network,
                                        const kiln_build_config *config, const char *path);
KILN_API void kiln_free(void *ptr);

/* ---- runtime ----------------------------------------------------------------------------- */

/* Load a plan. A file is mapped and its weights used in place; memory is copied. registry
 * supplies the plugins the plan names (NULL when it needs none); it is borrowed and must
 * outlive the engine. A plugin the registry lacks is named in the error, with the layer that
 * needs it. */
KILN_API kiln_status kiln_engine_load_file(const char *path, kiln_registry *registry,
                                           kiln_engine **out);
KILN_API kiln_status kiln_engine_load_memory(const void *data, size_t size, kiln_registry *registry,
                                             kiln_engine **out);
/* Destroy after every context of it is destroyed. */
KILN_API void kiln_engine_destroy(kiln_engine *engine);

/* What a graph input or output of dtype KILN_DTYPE_CONTAINER holds, as the model declares it
 * (KILN_IO_TENSOR for tensors and for containers a network built by hand left undeclared). */
typedef enum kiln_io_kind {
    KILN_IO_TENSOR = 0,
    KILN_IO_SEQUENCE = 1,
    KILN_IO_OPTIONAL = 2,          /* an optional tensor */
    KILN_IO_OPTIONAL_SEQUENCE = 3, /* an optional sequence */
} kiln_io_kind;

typedef struct kiln_io_info {
    const char *name; /* owned by the engine */
    kiln_dtype dtype;
    int rank;
    int64_t dims[KILN_MAX_RANK];        /* fixed dims; for inputs' dynamic dims the profile max;
                                           for outputs' dynamic dims -1 (see symbols) */
    const char *symbols[KILN_MAX_RANK]; /* NULL for fixed dims, else the dim's symbol */
    int64_t min[KILN_MAX_RANK];         /* profile bounds (equal to dims when fixed) */
    int64_t opt[KILN_MAX_RANK];
    int64_t max[KILN_MAX_RANK];
    kiln_io_kind kind; /* what a KILN_DTYPE_CONTAINER input or output holds */
} kiln_io_info;

KILN_API int kiln_engine_num_inputs(const kiln_engine *engine);
KILN_API int kiln_engine_num_outputs(const kiln_engine *engine);
/* The device backend the plan places nodes on besides the host ("cuda"), or NULL for a plan
 * that runs on the host alone. */
KILN_API const char *kiln_engine_device_backend(const kiln_engine *engine);
KILN_API kiln_status kiln_engine_input_info(const kiln_engine *engine, int index,
                                            kiln_io_info *info);
KILN_API kiln_status kiln_engine_output_info(const kiln_engine *engine, int index,
                                             kiln_io_info *info);

/* A context holds everything mutable for one thread: activation arena, shapes, scratch. */
KILN_API kiln_status kiln_context_create(kiln_engine *engine, kiln_context **out);
KILN_API void kiln_context_destroy(kiln_context *ctx);
KILN_API kiln_status kiln_context_set_threads(kiln_context *ctx, int threads);

/* Set an input's shape. Checked against the profile: the error names input, axis and range.
 * Inputs with fixed shapes need no call. */
KILN_API kiln_status kiln_context_set_input_shape(kiln_context *ctx, const char *name, int rank,
                                                  const int64_t *dims);
/* Output shapes are known once every input shape is set, before execute. An output whose
 * shape depends on data (e.g. after NonZero) reports KILN_ERR_SHAPE before the first execute. */
KILN_API kiln_status kiln_context_get_output_shape(kiln_context *ctx, const char *name, int *rank,
                                                   int64_t *dims);
/* The same for any tensor of the plan: a layer's input or output (kiln_layer_info's names), at
 * the context's current input shapes; dims holds up to KILN_MAX_RANK values. A tensor fused
 * away or folded at build is KILN_ERR_NOT_FOUND. */
KILN_API kiln_status kiln_context_get_tensor_shape(kiln_context *ctx, const char *name, int *rank,
                                                   int64_t *dims);

/* Bind an input's data. The buffer is borrowed: it must stay valid and unchanged until
 * execute returns. size must equal the input's byte size for the current shape. */
KILN_API kiln_status kiln_context_set_input(kiln_context *ctx, const char *name, const void *data,
                                            size_t size);
/* Optionally bind an output buffer (borrowed) of at least the output's byte size; NULL unbinds.
 * A host buffer aligned to 64 bytes and apart from every bound input is written by the layer
 * that produces the output, in place, when that layer runs on the host; otherwise the output is
 * copied into it when the run ends. Outputs not bound are read where the context holds them
 * (kiln_context_get_output), with no copy. */
KILN_API kiln_status kiln_context_set_output(kiln_context *ctx, const char *name, void *data,
                                             size_t size);

/* Where a bound buffer lives: host memory, or device memory of the plan's device backend
 * (a CUDA device pointer for a plan built with --backend cuda). */
typedef enum kiln_memory { KILN_MEMORY_HOST = 0, KILN_MEMORY_DEVICE = 2 } kiln_memory;

/* As kiln_context_set_input / _set_output, with the memory the buffer lives in. A device
 * input may only feed nodes placed on the device (the plan's copy to the device then moves it
 * device to device); a host node reading it is refused at execute with the node's name. */
KILN_API kiln_status kiln_context_set_input_memory(kiln_context *ctx, const char *name,
                                                   const void *data, size_t size,
                                                   kiln_memory memory);
KILN_API kiln_status kiln_context_set_output_memory(kiln_context *ctx, const char *name, void *data,
                                                    size_t size, kiln_memory memory);

/* Run the plan: execute = enqueue + synchronize. enqueue starts the work (on a device
 * backend it returns once the work is queued on the context's streams); bound inputs must stay
 * valid and unchanged, and outputs are not ready, until synchronize returns. On a plan that
 * runs on the host only, enqueue does all the work. One enqueue may be in flight per context:
 * a second enqueue first waits for the one before. */
KILN_API kiln_status kiln_context_enqueue(kiln_context *ctx);
KILN_API kiln_status kiln_context_synchronize(kiln_context *ctx);
KILN_API kiln_status kiln_context_execute(kiln_context *ctx);

typedef struct kiln_tensor_view {
    kiln_dtype dtype;
    int rank;
    int64_t dims[KILN_MAX_RANK];
    const void *data; /* owned by the context (or the caller's bound buffer) */
    size_t size;      /* bytes */
} kiln_tensor_view;
/* An output after execute: the bound buffer, else the context's own memory (a graph input
 * that is also an output: a copy). Valid until the next execute, input shape change
 * (kiln_context_set_input_shape) or destroy of ctx. */
KILN_API kiln_status kiln_context_get_output(kiln_context *ctx, const char *name,
                                             kiln_tensor_view *view);

/* ---- model editing (graph surgery on ONNX models) -----------------------------------------
 *
 * An ONNX model loaded for editing, changed by the operations below in any order, and written
 * back as ONNX. Each operation either succeeds or leaves the model as it was. Value types are
 * inferred on load and after each edit wherever input shapes are fixed. Not thread-safe; one
 * model per thread. The same operations are `kiln edit`'s options and kiln.edit in Python. */

typedef struct kiln_model kiln_model;

KILN_API kiln_status kiln_model_load(const char *path, kiln_model **out);
KILN_API void kiln_model_destroy(kiln_model *model); /* NULL is a no-op */
/* Write the model (temp file, then rename). Initializers of at least external_threshold bytes
 * (0: none) go to "<file name>.data" beside it. The result passes onnx.checker's full check. */
KILN_API kiln_status kiln_model_save(const kiln_model *model, const char *path,
                                     size_t external_threshold);
KILN_API int kiln_model_num_nodes(const kiln_model *model);
/* Name and op type of node index (strings owned by the model, valid until the next edit). */
KILN_API kiln_status kiln_model_node(const kiln_model *model, int index, const char **name,
                                     const char **op_type);
/* Keep the subgraph between the named tensors; they become the graph's inputs and outputs. */
KILN_API kiln_status kiln_model_extract(kiln_model *model, int n_inputs, const char *const *inputs,
                                        int n_outputs, const char *const *outputs);
/* Remove a node; its consumers read its first input instead. */
KILN_API kiln_status kiln_model_remove_node(kiln_model *model, const char *node);
/* Insert op_type after tensor: every consumer of tensor (and a graph output of that name)
 * reads the new node's output, which takes the name; the original tensor is renamed. */
KILN_API kiln_status kiln_model_insert_after(kiln_model *model, const char *tensor,
                                             const char *op_type, int n_attrs,
                                             const kiln_attribute *attrs);
/* Rename a tensor, or a node when no tensor has that name. */
KILN_API kiln_status kiln_model_rename(kiln_model *model, const char *old_name,
                                       const char *new_name);
/* Replace every instance of pattern ("swish": x*sigmoid(x) with an optional constant bias
 * Add, "relu-sigmoid-mul", "gelu", "layer-norm") by one node of op type `plugin` (version and
 * plugin_namespace may be NULL), inputs x and the pattern's constants, and attrs. Its domain
 * is plugin_namespace when given and not empty, else "kiln.plugins". *count (may be NULL)
 * receives the number of replacements. */
KILN_API kiln_status kiln_model_replace_pattern(kiln_model *model, const char *pattern,
                                                const char *plugin, const char *version,
                                                const char *plugin_namespace, int n_attrs,
                                                const kiln_attribute *attrs, int *count);
/* Evaluate every node whose inputs are all constant (Shape of a static shape included). */
KILN_API kiln_status kiln_model_fold_constants(kiln_model *model);
/* Remove nodes that reach no output, unused initializers and unused inputs. */
KILN_API kiln_status kiln_model_cleanup(kiln_model *model);
KILN_API kiln_status kiln_model_toposort(kiln_model *model);
/* Shape of a tensor: dims[d] >= 0 fixes axis d, else symbols[d] names it. */
KILN_API kiln_status kiln_model_set_shape(kiln_model *model, const char *name, int rank,
                                          const int64_t *dims, const char *const *symbols);
/* Change the default-domain opset where that is a plain renumbering (no op of the model has a
 * new version in between); otherwise refused naming the node. */
KILN_API kiln_status kiln_model_set_opset(kiln_model *model, int opset);

/* ---- layers and per-layer profiling --------------------------------------------------------
 *
 * A layer is one node of the optimized plan (a fused group counts once), in execution order.
 * Its outputs keep the ONNX names of the tensors they stand for. */

typedef struct kiln_layer_info {
    const char *name;    /* owned by the engine */
    const char *op_type; /* e.g. "Conv", "FusedElementwise", or the plugin's name */
    const char *domain;  /* "" for ONNX ops, "kiln" for fused ops */
    const char *kernel;  /* the backend kernel bound to it */
    int n_inputs, n_outputs;
    const char *inputs[16];  /* tensor names (NULL for an omitted optional input); at most 16 */
    const char *outputs[16]; /* at most 16 */
} kiln_layer_info;

KILN_API int kiln_engine_num_layers(const kiln_engine *engine);
KILN_API kiln_status kiln_engine_layer_info(const kiln_engine *engine, int index,
                                            kiln_layer_info *info);
/* Time every layer of each execute (off by default; costs two clock reads a layer). */
KILN_API kiln_status kiln_context_set_profiling(kiln_context *ctx, int enabled);
/* Milliseconds layer `index` took in the last execute (0 for layers evaluated when shapes
 * were set). Profiling must be on. */
KILN_API kiln_status kiln_context_layer_time(const kiln_context *ctx, int index, double *ms);
/* Milliseconds the last execute took on the device, measured by the device backend's events
 * on the context's stream from before its first queued work (input copies included) to after
 * its last (with stream graphs: the replay). Always measured, profiling on or off; host-only
 * plans have no device time (KILN_ERR_UNSUPPORTED). */
KILN_API kiln_status kiln_context_device_time(const kiln_context *ctx, double *ms);

/* Capture intermediate tensors without changing the plan: after each execute, a host copy of
 * every named tensor (an output of some layer; NULL names with count < 0: every tensor any
 * layer writes; count 0: capture off) is kept by the context. The copy is taken as soon as
 * its layer has run, so fusion and memory reuse stay as built. */
KILN_API kiln_status kiln_context_set_capture(kiln_context *ctx, const char *const *names,
                                              int count);
/* A captured tensor after execute; valid until the next execute, set_capture or destroy. */
KILN_API kiln_status kiln_context_get_captured(const kiln_context *ctx, const char *name,
                                               kiln_tensor_view *view);

#ifdef __cplusplus
}
#endif
#endif /* KILN_H */
