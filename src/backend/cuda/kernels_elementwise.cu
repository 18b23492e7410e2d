// Element-wise kernels: unary and binary float ops with broadcasting, comparisons, Where,
// Cast, and an interpreter of kiln.FusedElementwise programs (one thread per element). Float
// kernels are templated on the tensor type and compute in float32 (kernels_float.cuh).
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/kernels_ew_ops.cuh"
#include "backend/cuda/kernels_float.cuh"

namespace {

constexpr int kThreads = 256;

// Offsets of output element i into each of the first n inputs.
template <int N>
__device__ __forceinline__ void offsets(const kc_bcast &bc, int64_t i, int64_t *off) {
#pragma unroll
    for (int k = 0; k < N; k++)
        off[k] = 0;
    for (int d = bc.rank - 1; d >= 0; d--) {
        int64_t q = i / bc.dims[d];
        int64_t r = i - q * bc.dims[d];
        i = q;
#pragma unroll
        for (int k = 0; k < N; k++)
            off[k] += r * bc.strides[k][d];
    }
}

template <typename T>
__global__ void k_unary(int op, float pa, float pb, const T *x, T *y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = kc_narrow<T>(unary(op, kc_widen(x[i]), pa, pb));
}

template <typename T>
__global__ void k_binary_flat(int op, const T *a, int64_t sa, const T *b, int64_t sb, T *y,
                              int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = kc_narrow<T>(binary(op, kc_widen(a[i * sa]), kc_widen(b[i * sb])));
}

template <typename T>
__global__ void k_binary(int op, const kc_bcast bc, const T *a, const T *b, T *y) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < bc.numel;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[2];
        offsets<2>(bc, i, off);
        y[i] = kc_narrow<T>(binary(op, kc_widen(a[off[0]]), kc_widen(b[off[1]])));
    }
}

// The same below 2^31 elements, in 32-bit index arithmetic: a 64-bit division is a long
// software sequence, a 32-bit one a few instructions, and a broadcast (a squeeze-and-excitation
// multiply of [N * C, H * W] by [N * C, 1]) pays one per dim per element.
template <typename T>
__global__ void k_binary32(int op, const kc_bcast bc, const T *a, const T *b, T *y) {
    const unsigned n = (unsigned)bc.numel;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        unsigned oa = 0, ob = 0, idx = i;
        for (int d = bc.rank - 1; d >= 0; d--) {
            unsigned dim = (unsigned)bc.dims[d], q = idx / dim, r = idx - q * dim;
            idx = q;
            oa += r * (unsigned)bc.strides[0][d];
            ob += r * (unsigned)bc.strides[1][d];
        }
        y[i] = kc_narrow<T>(binary(op, kc_widen(a[oa]), kc_widen(b[ob])));
    }
}

// 16 bytes a thread where the innermost dim is a multiple of the vector: each side's innermost
// stride is 1 (a vector load) or 0 (one value for the vector), the offsets are computed once a
// vector. The squeeze-and-excitation multiply of NHWC [N, H * W, C] by [N, 1, C] takes it.
template <typename T>
__global__ void k_binary_vec(int op, const kc_bcast bc, const T *a, const T *b, T *y) {
    constexpr unsigned V = 16 / sizeof(T);
    const unsigned nvec = (unsigned)bc.numel / V;
    const int last = bc.rank - 1;
    const bool va = bc.strides[0][last] != 0, vb = bc.strides[1][last] != 0;
    for (unsigned t = blockIdx.x * blockDim.x + threadIdx.x; t < nvec;
         t += gridDim.x * blockDim.x) {
        unsigned oa = 0, ob = 0, idx = t * V;
        for (int d = last; d >= 0; d--) {
            unsigned dim = (unsigned)bc.dims[d], q = idx / dim, r = idx - q * dim;
            idx = q;
            oa += r * (unsigned)bc.strides[0][d];
            ob += r * (unsigned)bc.strides[1][d];
        }
        uint4 ra = make_uint4(0, 0, 0, 0), rb = make_uint4(0, 0, 0, 0);
        float sa = 0.f, sb = 0.f;
        if (va)
            ra = __ldg(reinterpret_cast<const uint4 *>(a + oa));
        else
            sa = kc_widen(a[oa]);
        if (vb)
            rb = __ldg(reinterpret_cast<const uint4 *>(b + ob));
        else
            sb = kc_widen(b[ob]);
        const T *ea = reinterpret_cast<const T *>(&ra), *eb = reinterpret_cast<const T *>(&rb);
        uint4 out;
        T *o = reinterpret_cast<T *>(&out);
#pragma unroll
        for (unsigned j = 0; j < V; j++)
            o[j] = kc_narrow<T>(binary(op, va ? kc_widen(ea[j]) : sa, vb ? kc_widen(eb[j]) : sb));
        reinterpret_cast<uint4 *>(y)[t] = out;
    }
}

// 16 bytes a thread where one side is laid out as the output (flat: a vector load at the
// output's offset) and the other broadcasts in any way (its offset computed per element, in 32
// bits): the squeeze-and-excitation multiply of NCHW [N * C, H * W] by [N * C, 1] when H * W is
// not a multiple of the vector. FLAT_A says which side is flat.
template <typename T, bool FLAT_A>
__global__ void k_binary_flatvec(int op, const kc_bcast bc, const T *a, const T *b, T *y) {
    constexpr unsigned V = 16 / sizeof(T);
    const unsigned nvec = (unsigned)bc.numel / V;
    const int side = FLAT_A ? 1 : 0;
    const T *flat = FLAT_A ? a : b, *other = FLAT_A ? b : a;
    for (unsigned t = blockIdx.x * blockDim.x + threadIdx.x; t < nvec;
         t += gridDim.x * blockDim.x) {
        uint4 rf = __ldg(reinterpret_cast<const uint4 *>(flat) + t);
        const T *ef = reinterpret_cast<const T *>(&rf);
        uint4 out;
        T *o = reinterpret_cast<T *>(&out);
#pragma unroll
        for (unsigned j = 0; j < V; j++) {
            unsigned off = 0, idx = t * V + j;
            for (int d = bc.rank - 1; d >= 0; d--) {
                unsigned dim = (unsigned)bc.dims[d], q = idx / dim;
                off += (idx - q * dim) * (unsigned)bc.strides[side][d];
                idx = q;
            }
            float fo = kc_widen(other[off]), ff = kc_widen(ef[j]);
            o[j] = kc_narrow<T>(FLAT_A ? binary(op, ff, fo) : binary(op, fo, ff));
        }
        reinterpret_cast<uint4 *>(y)[t] = out;
    }
}

// Whether side's strides in bc are those of the output itself (it is read at the output's own
// offsets).
bool side_is_flat(const kc_bcast *bc, int side) {
    int64_t expect = 1;
    for (int d = bc->rank - 1; d >= 0; d--) {
        if (bc->dims[d] != 1 && bc->strides[side][d] != expect)
            return false;
        expect *= bc->dims[d];
    }
    return true;
}

// Whether k_binary_vec takes bc: below 2^31 elements, the innermost dim a multiple of the
// vector with strides 1 or 0, the other strides of a vector side multiples of the vector (so
// its loads stay 16-byte aligned), every address 16-byte aligned.
bool binary_vec_ok(const kc_bcast *bc, int64_t v, const void *a, const void *b, const void *y) {
    if (bc->rank < 1 || bc->numel >= ((int64_t)1 << 31) || bc->dims[bc->rank - 1] % v != 0 ||
        (((uintptr_t)a | (uintptr_t)b | (uintptr_t)y) & 15u) != 0)
        return false;
    for (int side = 0; side < 2; side++) {
        int64_t inner = bc->strides[side][bc->rank - 1];
        if (inner != 0 && inner != 1)
            return false;
        for (int d = 0; d < bc->rank - 1 && inner == 1; d++)
            if (bc->strides[side][d] % v != 0)
                return false;
    }
    return true;
}

template <typename T>
__global__ void k_compare(int op, const kc_bcast bc, const T *a, const T *b, uint8_t *y) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < bc.numel;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[2];
        offsets<2>(bc, i, off);
        float x = kc_widen(a[off[0]]), z = kc_widen(b[off[1]]);
        bool r = op == KC_CMP_EQ   ? x == z
                 : op == KC_CMP_LT ? x < z
                 : op == KC_CMP_LE ? x <= z
                 : op == KC_CMP_GT ? x > z
                                   : x >= z;
        y[i] = r;
    }
}

template <typename T>
__global__ void k_where(const kc_bcast bc, const uint8_t *c, const T *a, const T *b, T *y) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < bc.numel;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[3];
        offsets<3>(bc, i, off);
        y[i] = c[off[0]] ? a[off[1]] : b[off[2]];
    }
}

// The fused program: registers live in local memory (indexed at run time); an NVRTC
// specialisation per program replaces this later.
template <typename T> struct fused_inputs { const T *p[KC_MAX_EW_IN]; };

template <typename T>
__global__ void k_fused(const kc_program p, const kc_bcast bc, const fused_inputs<T> in, T *y) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < bc.numel;
         i += (int64_t)gridDim.x * blockDim.x) {
        float reg[16];
        for (int t = 0; t < p.n_instr; t++) {
            const int32_t *ins = p.instr[t];
            int kind = ins[0], op = ins[1], dst = ins[2], a = ins[3], b = ins[4];
            if (kind == 0) {
                int64_t idx = i, off = 0;
                for (int d = bc.rank - 1; d >= 0; d--) {
                    int64_t q = idx / bc.dims[d];
                    off += (idx - q * bc.dims[d]) * bc.strides[a][d];
                    idx = q;
                }
                reg[dst] = kc_widen(in.p[a][off]);
            } else if (kind == 1) {
                reg[dst] = p.consts[a];
            } else if (kind == 2) {
                float pa = p.consts[b];
                float pb = b + 1 < KC_MAX_CONSTS ? p.consts[b + 1] : 0.f;
                reg[dst] = unary(op, reg[a], pa, pb);
            } else if (kind == 3) {
                reg[dst] = binary(op, reg[a], reg[b]);
            } else {
                y[i] = kc_narrow<T>(reg[a]);
            }
        }
    }
}

// Conversions go through float where either side is a 16-bit float (round to nearest even
// into 16 bits).
template <typename S, typename D> struct converter {
    static __device__ __forceinline__ D run(S v) {
        return static_cast<D>(v);
    }
};
template <typename S> struct converter<S, __half> {
    static __device__ __forceinline__ __half run(S v) {
        return __float2half_rn((float)v);
    }
};
template <typename S> struct converter<S, __nv_bfloat16> {
    static __device__ __forceinline__ __nv_bfloat16 run(S v) {
        return __float2bfloat16_rn((float)v);
    }
};
template <typename D> struct converter<__half, D> {
    static __device__ __forceinline__ D run(__half v) {
        return static_cast<D>(__half2float(v));
    }
};
template <typename D> struct converter<__nv_bfloat16, D> {
    static __device__ __forceinline__ D run(__nv_bfloat16 v) {
        return static_cast<D>(__bfloat162float(v));
    }
};
template <> struct converter<__half, __nv_bfloat16> {
    static __device__ __forceinline__ __nv_bfloat16 run(__half v) {
        return __float2bfloat16_rn(__half2float(v));
    }
};
template <> struct converter<__nv_bfloat16, __half> {
    static __device__ __forceinline__ __half run(__nv_bfloat16 v) {
        return __float2half_rn(__bfloat162float(v));
    }
};

template <> struct converter<__half, __half> {
    static __device__ __forceinline__ __half run(__half v) {
        return v;
    }
};
template <> struct converter<__nv_bfloat16, __nv_bfloat16> {
    static __device__ __forceinline__ __nv_bfloat16 run(__nv_bfloat16 v) {
        return v;
    }
};

template <typename S, typename D> __device__ __forceinline__ D convert(S v) {
    return converter<S, D>::run(v);
}

template <typename S, typename D> __global__ void k_cast(const S *x, D *y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = convert<S, D>(x[i]);
}

template <typename S> __device__ __forceinline__ bool nonzero(S v) {
    return v != S(0);
}
template <> __device__ __forceinline__ bool nonzero<__half>(__half v) {
    return __half2float(v) != 0.f;
}
template <> __device__ __forceinline__ bool nonzero<__nv_bfloat16>(__nv_bfloat16 v) {
    return __bfloat162float(v) != 0.f;
}

// float -> integer casts saturate NaN/inf differently per platform; kiln's CPU truncates
// through C's conversion, which for in-range values this matches.
template <typename S> __global__ void k_cast_bool(const S *x, uint8_t *y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = nonzero(x[i]);
}

unsigned grid_for(int64_t n) {
    int64_t g = (n + kThreads - 1) / kThreads;
    if (g < 1)
        g = 1;
    return (unsigned)(g > 65535 * 8 ? 65535 * 8 : g);
}

// Cast between kiln dtypes: float32 = 1, uint8 = 2, int8 = 3, int32 = 6, int64 = 7, bool = 9,
// float16 = 10, float64 = 11, bfloat16 = 16.
template <typename S> int cast_from(cudaStream_t st, int to, const S *x, void *y, int64_t n) {
    unsigned g = grid_for(n);
    switch (to) {
    case 1:
        k_cast<S, float><<<g, kThreads, 0, st>>>(x, (float *)y, n);
        break;
    case 2:
        k_cast<S, uint8_t><<<g, kThreads, 0, st>>>(x, (uint8_t *)y, n);
        break;
    case 3:
        k_cast<S, int8_t><<<g, kThreads, 0, st>>>(x, (int8_t *)y, n);
        break;
    case 6:
        k_cast<S, int32_t><<<g, kThreads, 0, st>>>(x, (int32_t *)y, n);
        break;
    case 7:
        k_cast<S, int64_t><<<g, kThreads, 0, st>>>(x, (int64_t *)y, n);
        break;
    case 9:
        k_cast_bool<S><<<g, kThreads, 0, st>>>(x, (uint8_t *)y, n);
        break;
    case 10:
        k_cast<S, __half><<<g, kThreads, 0, st>>>(x, (__half *)y, n);
        break;
    case 11:
        k_cast<S, double><<<g, kThreads, 0, st>>>(x, (double *)y, n);
        break;
    case 16:
        k_cast<S, __nv_bfloat16><<<g, kThreads, 0, st>>>(x, (__nv_bfloat16 *)y, n);
        break;
    default:
        return (int)cudaErrorNotSupported;
    }
    return (int)cudaGetLastError();
}

} // namespace

extern "C" int kc_unary(void *s, int dt, int op, float pa, float pb, const void *x, void *y,
                        int64_t n) {
    if (n == 0)
        return 0;
    KC_FLOAT_DISPATCH(dt, T,
                      k_unary<T><<<grid_for(n), kThreads, 0, (cudaStream_t)s>>>(
                          op, pa, pb, (const T *)x, (T *)y, n));
    return (int)cudaGetLastError();
}

extern "C" int kc_binary(void *s, int dt, int op, const kc_bcast *bc, const void *a, const void *b,
                         void *y) {
    if (bc->numel == 0)
        return 0;
    cudaStream_t st = (cudaStream_t)s;
    // Same shapes, or one side a scalar: a flat loop without index arithmetic.
    bool flat = true;
    int64_t sa = -1, sb = -1;
    for (int d = 0; d < bc->rank && flat; d++) {
        int64_t ea = bc->strides[0][d] == 0 ? 0 : 1, eb = bc->strides[1][d] == 0 ? 0 : 1;
        if (bc->dims[d] == 1)
            continue;
        if ((sa >= 0 && sa != ea) || (sb >= 0 && sb != eb))
            flat = false;
        sa = ea;
        sb = eb;
    }
    const int64_t v = dt == KC_DT_F32 ? 4 : 8;
    if (binary_vec_ok(bc, v, a, b, y)) {
        KC_FLOAT_DISPATCH(dt, T,
                          k_binary_vec<T><<<grid_for(bc->numel / v), kThreads, 0, st>>>(
                              op, *bc, (const T *)a, (const T *)b, (T *)y));
        return (int)cudaGetLastError();
    }
    if (bc->numel % v == 0 && bc->numel < ((int64_t)1 << 31) &&
        (((uintptr_t)a | (uintptr_t)b | (uintptr_t)y) & 15u) == 0 && !flat) {
        const bool fa = side_is_flat(bc, 0), fb = !fa && side_is_flat(bc, 1);
        if (fa || fb) {
            unsigned gv = grid_for(bc->numel / v);
            if (fa) {
                KC_FLOAT_DISPATCH(dt, T,
                                  k_binary_flatvec<T, true><<<gv, kThreads, 0, st>>>(
                                      op, *bc, (const T *)a, (const T *)b, (T *)y));
            } else {
                KC_FLOAT_DISPATCH(dt, T,
                                  k_binary_flatvec<T, false><<<gv, kThreads, 0, st>>>(
                                      op, *bc, (const T *)a, (const T *)b, (T *)y));
            }
            return (int)cudaGetLastError();
        }
    }
    unsigned g = grid_for(bc->numel);
    if (flat) {
        KC_FLOAT_DISPATCH(dt, T,
                          k_binary_flat<T>
                          <<<g, kThreads, 0, st>>>(op, (const T *)a, sa < 0 ? 1 : sa, (const T *)b,
                                                   sb < 0 ? 1 : sb, (T *)y, bc->numel));
    } else if (bc->numel < ((int64_t)1 << 31)) {
        KC_FLOAT_DISPATCH(dt, T,
                          k_binary32<T>
                          <<<g, kThreads, 0, st>>>(op, *bc, (const T *)a, (const T *)b, (T *)y));
    } else {
        KC_FLOAT_DISPATCH(dt, T,
                          k_binary<T>
                          <<<g, kThreads, 0, st>>>(op, *bc, (const T *)a, (const T *)b, (T *)y));
    }
    return (int)cudaGetLastError();
}

extern "C" int kc_compare(void *s, int dt, int op, const kc_bcast *bc, const void *a, const void *b,
                          uint8_t *y) {
    if (bc->numel == 0)
        return 0;
    KC_FLOAT_DISPATCH(dt, T,
                      k_compare<T><<<grid_for(bc->numel), kThreads, 0, (cudaStream_t)s>>>(
                          op, *bc, (const T *)a, (const T *)b, y));
    return (int)cudaGetLastError();
}

extern "C" int kc_where(void *s, const kc_bcast *bc, const uint8_t *c, const void *a, const void *b,
                        void *y, int elem_size) {
    if (bc->numel == 0)
        return 0;
    cudaStream_t st = (cudaStream_t)s;
    unsigned g = grid_for(bc->numel);
    switch (elem_size) {
    case 1:
        k_where<uint8_t>
            <<<g, kThreads, 0, st>>>(*bc, c, (const uint8_t *)a, (const uint8_t *)b, (uint8_t *)y);
        break;
    case 2:
        k_where<uint16_t><<<g, kThreads, 0, st>>>(*bc, c, (const uint16_t *)a, (const uint16_t *)b,
                                                  (uint16_t *)y);
        break;
    case 4:
        k_where<uint32_t><<<g, kThreads, 0, st>>>(*bc, c, (const uint32_t *)a, (const uint32_t *)b,
                                                  (uint32_t *)y);
        break;
    case 8:
        k_where<uint64_t><<<g, kThreads, 0, st>>>(*bc, c, (const uint64_t *)a, (const uint64_t *)b,
                                                  (uint64_t *)y);
        break;
    default:
        return (int)cudaErrorNotSupported;
    }
    return (int)cudaGetLastError();
}

namespace {

template <typename T>
int fused_launch(cudaStream_t st, const kc_program *p, const kc_bcast *bc, const void *const *in,
                 void *y) {
    fused_inputs<T> ptrs = {};
    for (int k = 0; k < bc->n_in; k++)
        ptrs.p[k] = (const T *)in[k];
    k_fused<T><<<grid_for(bc->numel), kThreads, 0, st>>>(*p, *bc, ptrs, (T *)y);
    return (int)cudaGetLastError();
}

} // namespace

extern "C" int kc_fused(void *s, int dt, const kc_program *p, const kc_bcast *bc,
                        const void *const *in, void *y) {
    if (bc->numel == 0)
        return 0;
    KC_FLOAT_DISPATCH(dt, T, return fused_launch<T>((cudaStream_t)s, p, bc, in, y));
    return 0;
}

extern "C" int kc_cast(void *s, int from, int to, const void *x, void *y, int64_t n) {
    if (n == 0)
        return 0;
    cudaStream_t st = (cudaStream_t)s;
    switch (from) {
    case 1:
        return cast_from(st, to, (const float *)x, y, n);
    case 2:
        return cast_from(st, to, (const uint8_t *)x, y, n);
    case 3:
        return cast_from(st, to, (const int8_t *)x, y, n);
    case 6:
        return cast_from(st, to, (const int32_t *)x, y, n);
    case 7:
        return cast_from(st, to, (const int64_t *)x, y, n);
    case 9:
        return cast_from(st, to, (const uint8_t *)x, y, n);
    case 10:
        return cast_from(st, to, (const __half *)x, y, n);
    case 11:
        return cast_from(st, to, (const double *)x, y, n);
    case 16:
        return cast_from(st, to, (const __nv_bfloat16 *)x, y, n);
    default:
        return (int)cudaErrorNotSupported;
    }
}
