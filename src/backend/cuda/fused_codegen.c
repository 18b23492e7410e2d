/* kiln.FusedElementwise as generated CUDA C: at build, each fused program becomes a kernel of
 * its own (its registers real registers, its constants literals, its ops inlined), compiled by
 * NVRTC to a cubin for this GPU plus PTX for others; the builder stores both in the node's
 * kiln_code attribute, so loading a plan needs no compiler (the driver JIT-compiles the PTX
 * only on a GPU of another architecture). The interpreter of kernels_elementwise.cu remains
 * for plans without code and for code that does not load.
 *
 * The kernel has two paths, chosen per launch: when every input is either the output's shape
 * (read at the element's own index) or a single value, eight elements per thread with 16-byte
 * vector loads and stores (two for float32; the inputs and output 16-byte aligned, the element
 * count a multiple of eight) or one per thread; otherwise the broadcast offsets of
 * every input from the element's coordinates, as the interpreter does.
 *
 * NVRTC (libnvrtc.so.13) is loaded on first use at build only; without it the build keeps
 * the interpreter and says so once. KILN_CUDA_CODEGEN=0 turns generation off. */
#include "backend/cuda/cuda_internal.h"

#include <dlfcn.h>
#include <nvrtc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The element-wise functions, stringized from the same text the compiled kernels include. */
#define KC_EW_SOURCE(...) static const char ew_source[] = #__VA_ARGS__;
#include "backend/cuda/kernels_ew_ops.cuh"
#undef KC_EW_SOURCE

#define CODE_MAGIC "KCG1"
#define KERNEL_NAME "kc_fused_gen"

/* --- source text --- */

typedef struct text {
    char *p;
    size_t n, cap;
    bool failed;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
    if (t->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(t->p ? t->p + t->n : NULL, t->p ? t->cap - t->n : 0, fmt, ap);
        va_end(ap);
        if (w < 0) {
            t->failed = true;
            return;
        }
        if (t->p && t->n + (size_t)w < t->cap) {
            t->n += (size_t)w;
            return;
        }
        size_t cap = t->cap ? t->cap * 2 : 16384;
        while (cap <= t->n + (size_t)w)
            cap *= 2;
        char *p = kc_host->alloc(cap);
        if (p == NULL) {
            t->failed = true;
            return;
        }
        if (t->p) {
            memcpy(p, t->p, t->n + 1);
            kc_host->free(t->p);
        }
        t->p = p;
        t->cap = cap;
    }
}

static uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Storage type, loads (widen to float) and stores (round to nearest even) for dtype. */
static void put_type(text *t, int dtype) {
    if (dtype == KILN_DTYPE_FLOAT32) {
        put(t, "typedef float kc_t;\nstruct kc_t8 { float4 a, b; };\n"
               "__device__ __forceinline__ float kc_ld(kc_t v) { return v; }\n"
               "__device__ __forceinline__ kc_t kc_st(float v) { return v; }\n"
               "__device__ __forceinline__ void kc_unpack(kc_t8 v, float *f) {\n"
               "  f[0] = v.a.x; f[1] = v.a.y; f[2] = v.a.z; f[3] = v.a.w;\n"
               "  f[4] = v.b.x; f[5] = v.b.y; f[6] = v.b.z; f[7] = v.b.w; }\n"
               "__device__ __forceinline__ kc_t8 kc_pack(const float *f) {\n"
               "  kc_t8 v; v.a = make_float4(f[0], f[1], f[2], f[3]);\n"
               "  v.b = make_float4(f[4], f[5], f[6], f[7]); return v; }\n");
        return;
    }
    put(t, "typedef unsigned short kc_t;\ntypedef uint4 kc_t8;\n");
    if (dtype == KILN_DTYPE_FLOAT16)
        put(t, "__device__ __forceinline__ float kc_ld(kc_t v) "
               "{ float f; asm(\"cvt.f32.f16 %%0, %%1;\" : \"=f\"(f) : \"h\"(v)); return f; }\n"
               "__device__ __forceinline__ kc_t kc_st(float f) "
               "{ kc_t v; asm(\"cvt.rn.f16.f32 %%0, %%1;\" : \"=h\"(v) : \"f\"(f)); return v; }\n");
    else
        put(t,
            "__device__ __forceinline__ float kc_ld(kc_t v) "
            "{ return __int_as_float(((unsigned)v) << 16); }\n"
            "__device__ __forceinline__ kc_t kc_st(float f) "
            "{ kc_t v; asm(\"cvt.rn.bf16.f32 %%0, %%1;\" : \"=h\"(v) : \"f\"(f)); return v; }\n");
    put(t, "__device__ __forceinline__ void kc_unpack(kc_t8 v, float *f) {\n"
           "  unsigned w[4] = {v.x, v.y, v.z, v.w};\n"
           "  for (int j = 0; j < 4; j++) {\n"
           "    f[2 * j] = kc_ld((kc_t)(w[j] & 0xffffu)); f[2 * j + 1] = kc_ld((kc_t)(w[j] >> "
           "16)); }\n"
           "}\n"
           "__device__ __forceinline__ kc_t8 kc_pack(const float *f) {\n"
           "  unsigned w[4];\n"
           "  for (int j = 0; j < 4; j++)\n"
           "    w[j] = (unsigned)kc_st(f[2 * j]) | ((unsigned)kc_st(f[2 * j + 1]) << 16);\n"
           "  return make_uint4(w[0], w[1], w[2], w[3]); }\n");
}

/* The program's instructions for one element; reg names carry the lane suffix. `load` prints
 * the value of input a for that lane. */
static void put_body(text *t, const kc_program *p, const char *lane,
                     void (*load)(text *, int, const char *)) {
    for (int i = 0; i < p->n_instr; i++) {
        const int32_t *ins = p->instr[i];
        int kind = ins[0], op = ins[1], dst = ins[2], a = ins[3], b = ins[4];
        switch (kind) {
        case 0:
            put(t, "    r%d%s = ", dst, lane);
            load(t, a, lane);
            put(t, ";\n");
            break;
        case 1:
            put(t, "    r%d%s = __int_as_float(0x%08xu);\n", dst, lane, float_bits(p->consts[a]));
            break;
        case 2: {
            float pb = b + 1 < KC_MAX_CONSTS ? p->consts[b + 1] : 0.f;
            put(t,
                "    r%d%s = unary(%d, r%d%s, __int_as_float(0x%08xu), __int_as_float(0x%08xu));\n",
                dst, lane, op, a, lane, float_bits(p->consts[b]), float_bits(pb));
            break;
        }
        case 3:
            put(t, "    r%d%s = binary(%d, r%d%s, r%d%s);\n", dst, lane, op, a, lane, b, lane);
            break;
        default:
            put(t, "    out%s = r%d%s;\n", lane, a, lane);
            break;
        }
    }
}

static void load_vec(text *t, int a, const char *lane) {
    put(t, "v%d[%c]", a, lane[1]);
}
static void load_flat(text *t, int a, const char *lane) {
    (void)lane;
    put(t, "kc_ld(in.p[%d][(full >> %d & 1u) ? i : 0])", a, a);
}
static void load_strided(text *t, int a, const char *lane) {
    (void)lane;
    put(t, "kc_ld(in.p[%d][off[%d]])", a, a);
}

static void put_regs(text *t, const char *lane) {
    put(t, "    float ");
    for (int r = 0; r < 16; r++)
        put(t, "%sr%d%s = 0.f", r ? ", " : "", r, lane);
    put(t, ", out%s = 0.f;\n", lane);
}

/* The program on the eight lanes v<input>[0..8) of a vector path, the 16-byte store of its
 * results and the end of the path's loop. */
static void put_eight(text *t, const kc_program *p) {
    static const char *const lanes[8] = {"_0", "_1", "_2", "_3", "_4", "_5", "_6", "_7"};
    for (int l = 0; l < 8; l++) {
        put_regs(t, lanes[l]);
        put_body(t, p, lanes[l], load_vec);
    }
    put(t, "    float o[8] = {out_0, out_1, out_2, out_3, out_4, out_5, out_6, out_7};\n"
           "    ((kc_t8 *)y)[q] = kc_pack(o);\n"
           "   }\n"
           "   return;\n"
           "  }\n");
}

/* off[a] of every input a for the element at index idx (consumed). */
static void put_offsets(text *t, int n_in) {
    for (int a = 0; a < n_in; a++)
        put(t, "    off[%d] = 0;\n", a);
    put(t, "    for (int d = bc.rank - 1; d >= 0; d--) {\n"
           "      long long qd = idx / bc.dims[d], r = idx - qd * bc.dims[d];\n"
           "      idx = qd;\n");
    for (int a = 0; a < n_in; a++)
        put(t, "      off[%d] += r * bc.strides[%d][d];\n", a, a);
    put(t, "    }\n");
}

/* The kernel's source for program p on tensors of dtype with n_in inputs. Its parameters:
 * the broadcast (cuda_kernels.h's kc_bcast layout), the input pointers, the output, the mask
 * of inputs at the output's shape (the others of the flat paths are single values), and the
 * path (0 strided, 1 flat, 2 eight elements per thread, 3 strided by eights). */
static char *source(const kc_program *p, int dtype, int n_in) {
    text t = {0};
    put(&t, "%s\n", ew_source);
    put_type(&t, dtype);
    put(&t,
        "struct kc_bcast { int rank; int n_in; long long numel; long long dims[%d];"
        " long long strides[%d][%d]; };\n"
        "struct kc_ptrs { const kc_t *p[%d]; };\n"
        "extern \"C\" __global__ void " KERNEL_NAME "(const kc_bcast bc, const kc_ptrs in,"
        " kc_t *y, unsigned full, int path) {\n"
        "  long long step = (long long)gridDim.x * blockDim.x;\n"
        "  long long start = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n",
        KC_MAX_RANK, KC_MAX_EW_IN, KC_MAX_RANK, KC_MAX_EW_IN);
    /* eight per thread: 16-byte vectors (two for float32) */
    put(&t, "  if (path == 2) {\n"
            "   for (long long q = start; q < bc.numel / 8; q += step) {\n");
    for (int a = 0; a < n_in; a++)
        put(&t,
            "    float v%d[8];\n"
            "    if (full >> %d & 1u) kc_unpack(((const kc_t8 *)in.p[%d])[q], v%d);\n"
            "    else for (int j = 0; j < 8; j++) v%d[j] = kc_ld(in.p[%d][0]);\n",
            a, a, a, a, a, a);
    put_eight(&t, p);
    /* one per thread, flat */
    put(&t, "  if (path == 1) {\n"
            "   for (long long i = start; i < bc.numel; i += step) {\n");
    put_regs(&t, "");
    put_body(&t, p, "", load_flat);
    put(&t, "    y[i] = kc_st(out);\n"
            "   }\n"
            "   return;\n"
            "  }\n");
    /* broadcast offsets once per eight elements: the innermost dim a multiple of eight that
     * every input either walks contiguously (one or two vector loads) or repeats (one value) */
    put(&t,
        "  if (path == 3) {\n"
        "   for (long long q = start; q < bc.numel / 8; q += step) {\n"
        "    long long off[%d], idx = q * 8;\n",
        n_in > 0 ? n_in : 1);
    put_offsets(&t, n_in);
    for (int a = 0; a < n_in; a++)
        put(&t,
            "    float v%d[8];\n"
            "    if (bc.strides[%d][bc.rank - 1]) kc_unpack(*(const kc_t8 *)(in.p[%d] + off[%d]), "
            "v%d);\n"
            "    else for (int j = 0; j < 8; j++) v%d[j] = kc_ld(in.p[%d][off[%d]]);\n",
            a, a, a, a, a, a, a, a);
    put_eight(&t, p);
    /* broadcast offsets */
    put(&t,
        "  for (long long i = start; i < bc.numel; i += step) {\n"
        "    long long off[%d], idx = i;\n",
        n_in > 0 ? n_in : 1);
    put_offsets(&t, n_in);
    put_regs(&t, "");
    put_body(&t, p, "", load_strided);
    put(&t, "    y[i] = kc_st(out);\n"
            "  }\n"
            "}\n");
    if (t.failed) {
        kc_host->free(t.p);
        return NULL;
    }
    return t.p;
}

/* --- NVRTC, loaded at build only --- */

static struct {
    pthread_once_t once;
    bool ok;
    char why[160];
    nvrtcResult (*create)(nvrtcProgram *, const char *, const char *, int, const char *const *,
                          const char *const *);
    nvrtcResult (*compile)(nvrtcProgram, int, const char *const *);
    nvrtcResult (*log_size)(nvrtcProgram, size_t *);
    nvrtcResult (*log)(nvrtcProgram, char *);
    nvrtcResult (*cubin_size)(nvrtcProgram, size_t *);
    nvrtcResult (*cubin)(nvrtcProgram, char *);
    nvrtcResult (*ptx_size)(nvrtcProgram, size_t *);
    nvrtcResult (*ptx)(nvrtcProgram, char *);
    nvrtcResult (*destroy)(nvrtcProgram *);
} nv = {.once = PTHREAD_ONCE_INIT};

static void nvrtc_load(void) {
    void *h = dlopen("libnvrtc.so.13", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        h = dlopen("libnvrtc.so", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        snprintf(nv.why, sizeof nv.why, "NVRTC (libnvrtc.so.13) is not installed");
        return;
    }
#define SYM(field, name)                                                                           \
    do {                                                                                           \
        *(void **)&nv.field = dlsym(h, name);                                                      \
        if (nv.field == NULL) {                                                                    \
            snprintf(nv.why, sizeof nv.why, "libnvrtc lacks %s", name);                            \
            return;                                                                                \
        }                                                                                          \
    } while (0)
    SYM(create, "nvrtcCreateProgram");
    SYM(compile, "nvrtcCompileProgram");
    SYM(log_size, "nvrtcGetProgramLogSize");
    SYM(log, "nvrtcGetProgramLog");
    SYM(cubin_size, "nvrtcGetCUBINSize");
    SYM(cubin, "nvrtcGetCUBIN");
    SYM(ptx_size, "nvrtcGetPTXSize");
    SYM(ptx, "nvrtcGetPTX");
    SYM(destroy, "nvrtcDestroyProgram");
#undef SYM
    nv.ok = true;
}

/* Compile src for arch ("sm_90" gives a cubin, "compute_90" PTX) into *out (host alloc). */
static kiln_status nvrtc_compile(const char *src, const char *arch, bool want_cubin, char **out,
                                 size_t *size) {
    nvrtcProgram prog;
    if (nv.create(&prog, src, "kiln_fused.cu", 0, NULL, NULL) != NVRTC_SUCCESS)
        return kc_fail(KILN_ERR_INTERNAL, "NVRTC: cannot create a program");
    char opt_arch[48];
    snprintf(opt_arch, sizeof opt_arch, "--gpu-architecture=%s", arch);
    const char *opts[] = {opt_arch, "--std=c++17"};
    nvrtcResult rc = nv.compile(prog, 2, opts);
    if (rc != NVRTC_SUCCESS) {
        size_t n = 0;
        char log[512] = "";
        if (nv.log_size(prog, &n) == NVRTC_SUCCESS && n > 0) {
            char *full = kc_host->alloc(n);
            if (full != NULL && nv.log(prog, full) == NVRTC_SUCCESS)
                snprintf(log, sizeof log, "%s", full);
            kc_host->free(full);
        }
        for (char *c = log; *c; c++)
            if (*c == '\n')
                *c = ' ';
        nv.destroy(&prog);
        return kc_fail(KILN_ERR_INTERNAL, "NVRTC: the generated kernel does not compile: %s", log);
    }
    rc = want_cubin ? nv.cubin_size(prog, size) : nv.ptx_size(prog, size);
    *out = rc == NVRTC_SUCCESS ? kc_host->alloc(*size) : NULL;
    if (*out != NULL && (want_cubin ? nv.cubin(prog, *out) : nv.ptx(prog, *out)) != NVRTC_SUCCESS) {
        kc_host->free(*out);
        *out = NULL;
    }
    nv.destroy(&prog);
    return *out ? KILN_OK : kc_fail(KILN_ERR_INTERNAL, "NVRTC: cannot read the compiled code");
}

static void put_u32(char *p, uint32_t v) {
    memcpy(p, &v, sizeof v);
}
static uint32_t get_u32(const char *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* --- the backend's generate (kn_backend_iface.generate) --- */

kiln_status kc_fused_generate(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                              const kn_tensor *out, void **code, size_t *size, char *note,
                              size_t note_size) {
    (void)in;
    *code = NULL;
    *size = 0;
    const char *env = getenv("KILN_CUDA_CODEGEN");
    if (strcmp(n->op_type, "FusedElementwise") != 0 || strcmp(n->domain, "kiln") != 0 ||
        n_out != 1 || (env != NULL && strcmp(env, "0") == 0))
        return KILN_OK;
    int dtype = out[0].dtype;
    if (dtype != KILN_DTYPE_FLOAT32 && dtype != KILN_DTYPE_FLOAT16 && dtype != KILN_DTYPE_BFLOAT16)
        return KILN_OK;
    pthread_once(&nv.once, nvrtc_load);
    if (!nv.ok) {
        static bool told;
        if (!told) {
            char msg[256];
            snprintf(msg, sizeof msg,
                     "cuda: %s; fused element-wise layers run the interpreter kernel", nv.why);
            kc_host->log(KILN_LOG_WARNING, msg);
            told = true;
        }
        return KILN_OK;
    }
    kc_program p;
    KC_TRY(kc_fused_program(n, n_in, &p));
    char *src = source(&p, dtype, n_in);
    if (src == NULL)
        return kc_fail(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    int dev, major, minor;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        kc_host->free(src);
        return kc_fail(KILN_ERR_INTERNAL, "cuda: cannot read the device's compute capability");
    }
    int sm = major * 10 + minor;
    char arch[32];
    char *cubin = NULL, *ptx = NULL;
    size_t n_cubin = 0, n_ptx = 0;
    snprintf(arch, sizeof arch, "sm_%d", sm);
    kiln_status rc = nvrtc_compile(src, arch, true, &cubin, &n_cubin);
    snprintf(arch, sizeof arch, "compute_%d", sm);
    if (rc == KILN_OK)
        rc = nvrtc_compile(src, arch, false, &ptx, &n_ptx);
    kc_host->free(src);
    if (rc == KILN_OK) {
        /* "KCG1", sm, cubin bytes, PTX bytes, then both */
        *size = 16 + n_cubin + n_ptx;
        char *blob = kc_host->alloc(*size);
        if (blob == NULL) {
            rc = kc_fail(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        } else {
            memcpy(blob, CODE_MAGIC, 4);
            put_u32(blob + 4, (uint32_t)sm);
            put_u32(blob + 8, (uint32_t)n_cubin);
            put_u32(blob + 12, (uint32_t)n_ptx);
            memcpy(blob + 16, cubin, n_cubin);
            memcpy(blob + 16 + n_cubin, ptx, n_ptx);
            *code = blob;
            snprintf(note, note_size, "generated kernel: %zu bytes of sm_%d cubin, %zu of PTX",
                     n_cubin, sm, n_ptx);
        }
    }
    kc_host->free(cubin);
    kc_host->free(ptx);
    if (rc != KILN_OK)
        *size = 0;
    return rc;
}

/* --- loading and launching --- */

kiln_status kc_fused_code_load(const kn_node *n, cudaLibrary_t *lib, cudaKernel_t *kernel) {
    *lib = NULL;
    const kn_attr *a = kc_host->attr(n, KN_ATTR_CODE);
    if (a == NULL || a->type != KN_ATTR_STRING || a->s == NULL)
        return KILN_OK;
    if (a->slen < 16 || memcmp(a->s, CODE_MAGIC, 4) != 0 ||
        16 + (uint64_t)get_u32(a->s + 8) + get_u32(a->s + 12) != a->slen)
        return kc_fail(KILN_ERR_MODEL, "node '%s': its generated code is malformed", n->name);
    uint32_t sm = get_u32(a->s + 4), n_cubin = get_u32(a->s + 8), n_ptx = get_u32(a->s + 12);
    int dev, major = 0, minor = 0;
    if (cudaGetDevice(&dev) == cudaSuccess) {
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    }
    cudaError_t err = cudaErrorInvalidKernelImage;
    if ((uint32_t)(major * 10 + minor) == sm && n_cubin > 0)
        err = cudaLibraryLoadData(lib, a->s + 16, NULL, NULL, 0, NULL, NULL, 0);
    if (err != cudaSuccess && n_ptx > 0) {
        /* PTX must end in a NUL the driver can see: it is stored with its own. */
        (void)cudaGetLastError();
        err = cudaLibraryLoadData(lib, a->s + 16 + n_cubin, NULL, NULL, 0, NULL, NULL, 0);
    }
    if (err == cudaSuccess)
        err = cudaLibraryGetKernel(kernel, *lib, KERNEL_NAME);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        if (*lib != NULL)
            cudaLibraryUnload(*lib);
        *lib = NULL;
        char msg[256];
        snprintf(msg, sizeof msg,
                 "cuda: the generated kernel of '%s' (sm_%u) does not load here (%s); it runs the "
                 "interpreter kernel",
                 n->name, sm, cudaGetErrorString(err));
        kc_host->log(KILN_LOG_WARNING, msg);
    }
    return KILN_OK;
}

/* Whether path 3 takes the broadcast: the innermost dim a multiple of eight, every input
 * either contiguous along it (its other strides multiples of eight and its address 16-byte
 * aligned, so each run of eight is one aligned vector) or repeating one value along it. */
static bool strided_by_eights(const kc_bcast *bc, const void *const *in, const void *y) {
    int last = bc->rank - 1;
    if (last < 0 || bc->dims[last] % 8 != 0 || (uintptr_t)y % 16 != 0)
        return false;
    for (int k = 0; k < bc->n_in; k++) {
        int64_t s = bc->strides[k][last];
        if (s == 0)
            continue;
        if (s != 1 || (uintptr_t)in[k] % 16 != 0)
            return false;
        for (int d = 0; d < last; d++)
            if (bc->strides[k][d] % 8 != 0)
                return false;
    }
    return true;
}

kiln_status kc_fused_code_launch(cudaKernel_t kernel, cudaStream_t st, const kc_bcast *bc,
                                 const void *const *in, void *y) {
    if (bc->numel == 0)
        return KILN_OK;
    struct {
        const void *p[KC_MAX_EW_IN];
    } ptrs = {{0}};
    /* Input k is at the output's shape when its strides are the output's own (row-major). */
    unsigned full = 0;
    bool flat = true, vec = bc->numel % 8 == 0;
    size_t align = 16;
    vec = vec && ((uintptr_t)y % align) == 0;
    for (int k = 0; k < bc->n_in; k++) {
        ptrs.p[k] = in[k];
        bool same = true, single = true;
        int64_t want = 1;
        for (int d = bc->rank - 1; d >= 0; d--) {
            if (bc->dims[d] != 1) {
                same &= bc->strides[k][d] == want;
                single &= bc->strides[k][d] == 0;
            }
            want *= bc->dims[d];
        }
        if (same)
            full |= 1u << k;
        else if (!single)
            flat = false;
        if (same)
            vec = vec && ((uintptr_t)in[k] % align) == 0;
    }
    int path = !flat ? (strided_by_eights(bc, in, y) ? 3 : 0) : vec ? 2 : 1;
    int64_t work = path >= 2 ? bc->numel / 8 : bc->numel;
    int64_t blocks = (work + 255) / 256;
    if (blocks > 65536)
        blocks = 65536;
    void *y_arg = y;
    void *args[] = {(void *)bc, &ptrs, &y_arg, &full, &path};
    return kc_check(cudaLaunchKernel((const void *)kernel, (dim3){(unsigned)blocks, 1, 1},
                                     (dim3){256, 1, 1}, args, 0, st),
                    "FusedElementwise (generated)");
}
