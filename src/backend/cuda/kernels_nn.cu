// Row-wise and window kernels: Softmax, LayerNormalization, reductions, 2-D pooling, Resize,
// and the bias + residual + activation epilogue of Conv and Gemm. Templated on the tensor type;
// sums, means, variances and exponentials are float32 whatever the type (kernels_float.cuh).
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/kernels_activate.cuh"
#include "backend/cuda/kernels_float.cuh"

#include <float.h>

namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) {
    int64_t g = (n + kThreads - 1) / kThreads;
    if (g < 1)
        g = 1;
    return (unsigned)(g > 65535 * 8 ? 65535 * 8 : g);
}

// Block-wide sum / max over kThreads threads (warp shuffles, then one warp over the warps).
template <bool Max> __device__ float block_reduce(float v) {
    __shared__ float part[32];
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = Max ? fmaxf(v, w) : v + w;
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0)
        part[warp] = v;
    __syncthreads();
    int nw = blockDim.x >> 5;
    v = lane < nw ? part[lane] : (Max ? -FLT_MAX : 0.f);
    if (warp == 0)
        for (int o = 16; o > 0; o >>= 1) {
            float w = __shfl_xor_sync(0xffffffffu, v, o);
            v = Max ? fmaxf(v, w) : v + w;
        }
    __shared__ float result;
    if (threadIdx.x == 0)
        result = v;
    __syncthreads();
    return result;
}

// One block per row.
template <typename T> __global__ void k_softmax(const T *x, T *y, int64_t n, int log) {
    const T *xr = x + blockIdx.x * n;
    T *yr = y + blockIdx.x * n;
    float m = -FLT_MAX;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        m = fmaxf(m, kc_widen(xr[i]));
    m = block_reduce<true>(m);
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        s += expf(kc_widen(xr[i]) - m);
    s = block_reduce<false>(s);
    if (log) {
        float ls = logf(s);
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
            yr[i] = kc_narrow<T>(kc_widen(xr[i]) - m - ls);
    } else {
        float inv = 1.f / s;
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
            yr[i] = kc_narrow<T>(expf(kc_widen(xr[i]) - m) * inv);
    }
}

// One warp per row, the row held in registers (NV 16-byte vectors a lane): one read of x, the
// mean and variance by shuffles, no block barriers. For rows up to 32 * NV vectors whose length
// and addresses suit 16-byte access (BERT's 768: three vectors a lane in float16).
template <typename T, int NV>
__global__ void k_layernorm_warp(const T *x, const T *scale, const T *bias, T *y, int64_t rows,
                                 int n, float eps) {
    constexpr int V = 16 / sizeof(T);
    int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= rows)
        return;
    const int lane = (int)(threadIdx.x % 32), nvec = n / V;
    const T *xr = x + row * n;
    float v[NV][V];
    float s = 0.f;
#pragma unroll
    for (int c = 0; c < NV; c++) {
        int vi = lane + 32 * c;
        uint4 raw = make_uint4(0, 0, 0, 0);
        if (vi < nvec)
            raw = __ldg(reinterpret_cast<const uint4 *>(xr) + vi);
        const T *e = reinterpret_cast<const T *>(&raw);
#pragma unroll
        for (int j = 0; j < V; j++) {
            v[c][j] = kc_widen(e[j]);
            s += v[c][j];
        }
    }
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    const float mean = s / (float)n;
    float q = 0.f;
#pragma unroll
    for (int c = 0; c < NV; c++)
        if (lane + 32 * c < nvec)
#pragma unroll
            for (int j = 0; j < V; j++) {
                float d = v[c][j] - mean;
                q += d * d;
            }
    for (int o = 16; o > 0; o >>= 1)
        q += __shfl_xor_sync(0xffffffffu, q, o);
    const float rstd = rsqrtf(q / (float)n + eps);
#pragma unroll
    for (int c = 0; c < NV; c++) {
        int vi = lane + 32 * c;
        if (vi >= nvec)
            continue;
        uint4 gr = __ldg(reinterpret_cast<const uint4 *>(scale) + vi), br = make_uint4(0, 0, 0, 0);
        if (bias)
            br = __ldg(reinterpret_cast<const uint4 *>(bias) + vi);
        const T *g = reinterpret_cast<const T *>(&gr), *b = reinterpret_cast<const T *>(&br);
        uint4 out;
        T *o = reinterpret_cast<T *>(&out);
#pragma unroll
        for (int j = 0; j < V; j++)
            o[j] = kc_narrow<T>((v[c][j] - mean) * rstd * kc_widen(g[j]) +
                                (bias ? kc_widen(b[j]) : 0.f));
        reinterpret_cast<uint4 *>(y + row * n)[vi] = out;
    }
}

template <typename T>
__global__ void k_layernorm(const T *x, const T *scale, const T *bias, T *y, int64_t n, float eps) {
    const T *xr = x + blockIdx.x * n;
    T *yr = y + blockIdx.x * n;
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        s += kc_widen(xr[i]);
    float mean = block_reduce<false>(s) / (float)n;
    float v = 0.f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        float d = kc_widen(xr[i]) - mean;
        v += d * d;
    }
    float rstd = rsqrtf(block_reduce<false>(v) / (float)n + eps);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        yr[i] = kc_narrow<T>((kc_widen(xr[i]) - mean) * rstd * kc_widen(scale[i]) +
                             (bias ? kc_widen(bias[i]) : 0.f));
}

// One thread per output of [outer, inner], walking the reduced dim (inner is contiguous, so
// neighbouring threads read neighbouring addresses).
template <typename T>
__global__ void k_reduce(int op, const T *x, T *y, int64_t outer, int64_t n, int64_t inner) {
    int64_t total = outer * inner;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        int64_t o = t / inner, in = t - o * inner;
        const T *p = x + o * n * inner + in;
        float acc = op == KC_RED_MAX    ? -INFINITY
                    : op == KC_RED_MIN  ? INFINITY
                    : op == KC_RED_PROD ? 1.f
                                        : 0.f;
        float m = -INFINITY;
        if (op == KC_RED_LOGSUMEXP)
            for (int64_t j = 0; j < n; j++)
                m = fmaxf(m, kc_widen(p[j * inner]));
        for (int64_t j = 0; j < n; j++) {
            float v = kc_widen(p[j * inner]);
            switch (op) {
            case KC_RED_MAX:
                acc = (v != v || acc != acc) ? v + acc : fmaxf(acc, v);
                break;
            case KC_RED_MIN:
                acc = (v != v || acc != acc) ? v + acc : fminf(acc, v);
                break;
            case KC_RED_PROD:
                acc *= v;
                break;
            case KC_RED_SUMSQ:
            case KC_RED_L2:
                acc += v * v;
                break;
            case KC_RED_L1:
                acc += fabsf(v);
                break;
            case KC_RED_LOGSUMEXP:
                acc += expf(v - m);
                break;
            default:
                acc += v;
                break;
            }
        }
        if (op == KC_RED_MEAN)
            acc /= (float)n;
        else if (op == KC_RED_L2)
            acc = sqrtf(acc);
        else if (op == KC_RED_LOGSUMEXP)
            acc = m + logf(acc);
        else if (op == KC_RED_LOGSUM)
            acc = logf(acc);
        y[t] = kc_narrow<T>(acc);
    }
}

template <typename T> __global__ void k_pool2d(const kc_pool2d p, const T *x, T *y) {
    int64_t total = p.n * p.c * p.oh * p.ow;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        /* NCHW: x of plane n*c + ci at unit stride; NHWC: x of pixel n with channel stride */
        int64_t ox, oy, step;
        const T *xp;
        if (p.nhwc) {
            int64_t ci = t % p.c, r = t / p.c;
            ox = r % p.ow;
            r /= p.ow;
            oy = r % p.oh;
            xp = x + (r / p.oh) * p.h * p.w * p.c + ci;
            step = p.c;
        } else {
            int64_t r = t / p.ow;
            ox = t % p.ow;
            oy = r % p.oh;
            xp = x + (r / p.oh) * p.h * p.w;
            step = 1;
        }
        float acc = p.kind == 0 ? -INFINITY : 0.f;
        int cnt = 0;
        for (int ky = 0; ky < p.kh; ky++) {
            int64_t iy = oy * p.sh - p.ph + (int64_t)ky * p.dh;
            for (int kx = 0; kx < p.kw; kx++) {
                int64_t ix = ox * p.sw - p.pw + (int64_t)kx * p.dw;
                bool in = iy >= 0 && iy < p.h && ix >= 0 && ix < p.w;
                if (p.kind == 0) {
                    if (in) {
                        float v = kc_widen(xp[(iy * p.w + ix) * step]);
                        acc = v > acc || v != v ? v : acc;
                    }
                } else {
                    if (in) {
                        acc += kc_widen(xp[(iy * p.w + ix) * step]);
                        cnt++;
                    } else if (p.count_include_pad && iy < p.h + p.ph && ix < p.w + p.pw) {
                        cnt++;
                    }
                }
            }
        }
        y[t] = kc_narrow<T>(p.kind == 0 ? acc : acc / (float)(cnt > 0 ? cnt : 1));
    }
}

// NHWC pooling, 16 bytes of channels a thread (8 halves or 4 floats, one vector load a window
// cell): consecutive threads read consecutive 16-byte pieces of a pixel's channels, so a warp
// reads 512 contiguous bytes, and the index arithmetic is paid once per vector rather than per
// element. Taken when C * sizeof(T) is a multiple of 16 (the launcher checks the alignment).
template <typename T> __global__ void k_pool2d_nhwc16(const kc_pool2d p, const T *x, T *y) {
    constexpr int V = 16 / sizeof(T);
    const int64_t cv = p.c / V, total = p.n * p.oh * p.ow * cv;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        int64_t vi = t % cv, r = t / cv;
        int ox = (int)(r % p.ow);
        r /= p.ow;
        int oy = (int)(r % p.oh);
        const T *xp = x + (r / p.oh) * p.h * p.w * p.c + vi * V;
        float acc[V];
        for (int j = 0; j < V; j++)
            acc[j] = p.kind == 0 ? -INFINITY : 0.f;
        int cnt = 0;
        for (int ky = 0; ky < p.kh; ky++) {
            int iy = oy * p.sh - p.ph + ky * p.dh;
            for (int kx = 0; kx < p.kw; kx++) {
                int ix = ox * p.sw - p.pw + kx * p.dw;
                if (iy >= 0 && iy < p.h && ix >= 0 && ix < p.w) {
                    uint4 raw = *(const uint4 *)(xp + ((int64_t)iy * p.w + ix) * p.c);
                    const T *v = (const T *)&raw;
                    for (int j = 0; j < V; j++) {
                        float f = kc_widen(v[j]);
                        acc[j] = p.kind == 0 ? (f > acc[j] || f != f ? f : acc[j]) : acc[j] + f;
                    }
                    cnt++;
                } else if (p.kind == 1 && p.count_include_pad && iy < p.h + p.ph &&
                           ix < p.w + p.pw) {
                    cnt++;
                }
            }
        }
        uint4 out;
        T *o = (T *)&out;
        for (int j = 0; j < V; j++)
            o[j] = kc_narrow<T>(p.kind == 0 ? acc[j] : acc[j] / (float)(cnt > 0 ? cnt : 1));
        *(uint4 *)(y + t * V) = out;
    }
}

template <typename T>
__global__ void k_epilogue(T *y, const T *bias, const T *res, int64_t outer, int64_t c,
                           int64_t inner, int act, float a, float b) {
    int64_t total = outer * c * inner;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        float v = kc_widen(y[t]);
        if (bias)
            v += kc_widen(bias[(t / inner) % c]);
        if (res)
            v += kc_widen(res[t]);
        y[t] = kc_narrow<T>(kc_activate_t<T>(act, v, a, b));
    }
}

// The epilogue 16 bytes a thread, for tensors under 2^31 elements. BIAS says where the channel
// runs: 0, across the vector (inner 1, as in NHWC; c a multiple of V, the bias read as a
// vector); 1, not within a vector (inner a multiple of V: one bias value); 2, anywhere (the
// channel of each element, a 32-bit division each: NCHW maps of 14x14 or 7x7). Index arithmetic
// in 32 bits instead of a 64-bit division per element.
template <typename T, int BIAS>
__global__ void k_epilogue_vec(T *y, const T *bias, const T *res, unsigned nvec, unsigned c,
                               unsigned inner, int act, float a, float b) {
    constexpr unsigned V = 16 / sizeof(T);
    for (unsigned t = blockIdx.x * blockDim.x + threadIdx.x; t < nvec;
         t += gridDim.x * blockDim.x) {
        uint4 raw = reinterpret_cast<const uint4 *>(y)[t], rr = make_uint4(0, 0, 0, 0),
              braw = make_uint4(0, 0, 0, 0);
        const unsigned e0 = t * V;
        float bv[V];
        if (res)
            rr = __ldg(reinterpret_cast<const uint4 *>(res) + t);
        if (bias && BIAS == 0)
            braw = __ldg(reinterpret_cast<const uint4 *>(bias + e0 % c));
        const T *be = reinterpret_cast<const T *>(&braw);
#pragma unroll
        for (unsigned j = 0; j < V; j++)
            bv[j] = !bias       ? 0.f
                    : BIAS == 0 ? kc_widen(be[j])
                    : BIAS == 1 ? kc_widen(bias[(e0 / inner) % c])
                                : kc_widen(bias[((e0 + j) / inner) % c]);
        const T *yv = reinterpret_cast<const T *>(&raw), *rv = reinterpret_cast<const T *>(&rr);
        uint4 out;
        T *o = reinterpret_cast<T *>(&out);
#pragma unroll
        for (unsigned j = 0; j < V; j++) {
            float v = kc_widen(yv[j]) + bv[j];
            if (res)
                v += kc_widen(rv[j]);
            o[j] = kc_narrow<T>(kc_activate_t<T>(act, v, a, b));
        }
        reinterpret_cast<uint4 *>(y)[t] = out;
    }
}

__device__ __forceinline__ float src_coord(int coord, float o, float scale, int64_t in_n,
                                           int64_t out_n) {
    switch (coord) {
    case 1:
        return o / scale;
    case 2:
        return out_n > 1 ? o * (float)(in_n - 1) / (float)(out_n - 1) : 0.f;
    case 3:
        return out_n > 1 ? (o + 0.5f) / scale - 0.5f : 0.f;
    case 4:
        return (o + 0.5f) / scale;
    default:
        return (o + 0.5f) / scale - 0.5f;
    }
}

__device__ __forceinline__ int64_t nearest(int mode, float v) {
    switch (mode) {
    case 1:
        return (int64_t)(v == floorf(v) + 0.5f ? ceilf(v) : roundf(v));
    case 2:
        return (int64_t)floorf(v);
    case 3:
        return (int64_t)ceilf(v);
    default:
        return (int64_t)(v == floorf(v) + 0.5f ? floorf(v) : roundf(v));
    }
}

template <typename T> __global__ void k_resize(const kc_resize r, const T *x, T *y) {
    int64_t total = r.outer * r.oh * r.ow;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        int64_t ox = t % r.ow, q = t / r.ow;
        int64_t oy = q % r.oh, o = q / r.oh;
        const T *xp = x + o * r.h * r.w;
        float sy = src_coord(r.coord, (float)oy, r.scale_h, r.h, r.oh);
        float sx = src_coord(r.coord, (float)ox, r.scale_w, r.w, r.ow);
        if (r.mode == 0) {
            int64_t iy = nearest(r.nearest_mode, sy), ix = nearest(r.nearest_mode, sx);
            iy = iy < 0 ? 0 : iy >= r.h ? r.h - 1 : iy;
            ix = ix < 0 ? 0 : ix >= r.w ? r.w - 1 : ix;
            y[t] = xp[iy * r.w + ix];
        } else {
            sy = fminf(fmaxf(sy, 0.f), (float)(r.h - 1));
            sx = fminf(fmaxf(sx, 0.f), (float)(r.w - 1));
            int64_t y0 = (int64_t)floorf(sy), x0 = (int64_t)floorf(sx);
            int64_t y1 = y0 + 1 < r.h ? y0 + 1 : y0, x1 = x0 + 1 < r.w ? x0 + 1 : x0;
            float fy = sy - (float)y0, fx = sx - (float)x0;
            float top = kc_widen(xp[y0 * r.w + x0]) * (1.f - fx) + kc_widen(xp[y0 * r.w + x1]) * fx;
            float bot = kc_widen(xp[y1 * r.w + x0]) * (1.f - fx) + kc_widen(xp[y1 * r.w + x1]) * fx;
            y[t] = kc_narrow<T>(top * (1.f - fy) + bot * fy);
        }
    }
}

} // namespace

extern "C" int kc_softmax(void *s, int dt, const void *x, void *y, int64_t rows, int64_t n,
                          int log) {
    if (rows * n == 0)
        return 0;
    KC_FLOAT_DISPATCH(dt, T,
                      k_softmax<T><<<(unsigned)rows, kThreads, 0, (cudaStream_t)s>>>(
                          (const T *)x, (T *)y, n, log));
    return (int)cudaGetLastError();
}

extern "C" int kc_layernorm(void *s, int dt, const void *x, const void *scale, const void *bias,
                            void *y, int64_t rows, int64_t n, float eps) {
    if (rows * n == 0)
        return 0;
    const int es = dt == KC_DT_F32 ? 4 : 2, v = 16 / es;
    const int64_t nv = n / v, per_lane = (nv + 31) / 32;
    if (n % v == 0 && per_lane <= 8 && rows < ((int64_t)1 << 31) / 8 &&
        (((uintptr_t)x | (uintptr_t)y | (uintptr_t)scale | (uintptr_t)bias) & 15u) == 0) {
        const unsigned grid = (unsigned)((rows + 7) / 8), nn = (unsigned)n;
        cudaStream_t st = (cudaStream_t)s;
#define KC_LN_WARP(NV)                                                                             \
    KC_FLOAT_DISPATCH(dt, T,                                                                       \
                      k_layernorm_warp<T, NV><<<grid, 256, 0, st>>>(                               \
                          (const T *)x, (const T *)scale, (const T *)bias, (T *)y, rows, nn, eps))
        if (per_lane <= 1) {
            KC_LN_WARP(1);
        } else if (per_lane <= 2) {
            KC_LN_WARP(2);
        } else if (per_lane <= 4) {
            KC_LN_WARP(4);
        } else {
            KC_LN_WARP(8);
        }
#undef KC_LN_WARP
        return (int)cudaGetLastError();
    }
    KC_FLOAT_DISPATCH(dt, T,
                      k_layernorm<T><<<(unsigned)rows, kThreads, 0, (cudaStream_t)s>>>(
                          (const T *)x, (const T *)scale, (const T *)bias, (T *)y, n, eps));
    return (int)cudaGetLastError();
}

extern "C" int kc_reduce(void *s, int dt, int op, const void *x, void *y, int64_t outer, int64_t n,
                         int64_t inner) {
    if (outer * inner == 0)
        return 0;
    KC_FLOAT_DISPATCH(dt, T,
                      k_reduce<T><<<grid_for(outer * inner), kThreads, 0, (cudaStream_t)s>>>(
                          op, (const T *)x, (T *)y, outer, n, inner));
    return (int)cudaGetLastError();
}

extern "C" int kc_pool2d_run(void *s, int dt, const kc_pool2d *p, const void *x, void *y) {
    int64_t total = p->n * p->c * p->oh * p->ow;
    if (total == 0)
        return 0;
    int es = dt == KC_DT_F32 ? 4 : 2;
    if (p->nhwc && (p->c * es) % 16 == 0 && ((uintptr_t)x | (uintptr_t)y) % 16 == 0) {
        KC_FLOAT_DISPATCH(dt, T,
                          k_pool2d_nhwc16<T>
                          <<<grid_for(total * es / 16), kThreads, 0, (cudaStream_t)s>>>(
                              *p, (const T *)x, (T *)y));
        return (int)cudaGetLastError();
    }
    KC_FLOAT_DISPATCH(
        dt, T,
        k_pool2d<T><<<grid_for(total), kThreads, 0, (cudaStream_t)s>>>(*p, (const T *)x, (T *)y));
    return (int)cudaGetLastError();
}

extern "C" int kc_epilogue(void *s, int dt, void *y, const void *bias, const void *residual,
                           int64_t outer, int64_t c, int64_t inner, int act, float alpha,
                           float beta) {
    int64_t total = outer * c * inner;
    if (total == 0)
        return 0;
    const int64_t v = dt == KC_DT_F32 ? 4 : 8;
    if (total % v == 0 && total < ((int64_t)1 << 31) &&
        (((uintptr_t)y | (uintptr_t)bias | (uintptr_t)residual) & 15u) == 0) {
        const unsigned nvec = (unsigned)(total / v), uc = (unsigned)c, ui = (unsigned)inner;
        const unsigned grid = grid_for(nvec);
        cudaStream_t st = (cudaStream_t)s;
#define KC_EPI_VEC(B)                                                                              \
    KC_FLOAT_DISPATCH(dt, T,                                                                       \
                      k_epilogue_vec<T, B>                                                         \
                      <<<grid, kThreads, 0, st>>>((T *)y, (const T *)bias, (const T *)residual,    \
                                                  nvec, uc, ui, act, alpha, beta))
        if (inner == 1 && c % v == 0) {
            KC_EPI_VEC(0);
        } else if (inner % v == 0) {
            KC_EPI_VEC(1);
        } else {
            KC_EPI_VEC(2);
        }
#undef KC_EPI_VEC
        return (int)cudaGetLastError();
    }
    KC_FLOAT_DISPATCH(
        dt, T,
        k_epilogue<T><<<grid_for(total), kThreads, 0, (cudaStream_t)s>>>(
            (T *)y, (const T *)bias, (const T *)residual, outer, c, inner, act, alpha, beta));
    return (int)cudaGetLastError();
}

extern "C" int kc_resize_run(void *s, int dt, const kc_resize *r, const void *x, void *y) {
    int64_t total = r->outer * r->oh * r->ow;
    if (total == 0)
        return 0;
    KC_FLOAT_DISPATCH(
        dt, T,
        k_resize<T><<<grid_for(total), kThreads, 0, (cudaStream_t)s>>>(*r, (const T *)x, (T *)y));
    return (int)cudaGetLastError();
}
