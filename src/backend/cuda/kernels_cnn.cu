// Kernels of convolutional networks that cuDNN or the generic kernels serve badly.
//
// Depthwise 2-D convolution (one filter per channel, groups = C = K): square 3x3 and 5x5
// windows at stride 1 or 2, in NCHW or NHWC, with the bias, residual and activation of the
// conv's epilogue applied before the one store. cuDNN runs depthwise layers as grouped
// convolutions, a poor fit (its heuristic's first choice took most of EfficientNet-B0's time),
// while the layer is memory-bound: each output reads K*K inputs that neighbouring outputs share,
// so a thread computes kRow outputs along W from one register window per input row (NCHW), or
// kRow outputs of 16 bytes of channels each with the threads of a warp on consecutive channel
// vectors (NHWC, coalesced; one output a thread when the channels do not fill vectors).
//
// A convolution over a 1x1 image with a 1x1 filter (squeeze-and-excitation's two layers after
// global pooling) is a small matrix product y[n, k] = w[k, :] . x[n, :]; cuDNN took 0.3 ms
// for EfficientNet-B0's 1152-channel ones at batch 64. One warp computes one output.
//
// Global average / max pooling: one warp per (n, c) row in NCHW; in NHWC a block of 32
// channels by 16 slices of H*W, so a warp reads 32 consecutive channels.
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/kernels_activate.cuh"
#include "backend/cuda/kernels_float.cuh"
#include "backend/cuda/kernels_launch.cuh"

#include <math.h>

namespace {

constexpr int kThreads = 256;
constexpr int kRow = 4; // outputs along W per thread (NCHW)

unsigned grid_for(int64_t n) {
    int64_t g = (n + kThreads - 1) / kThreads;
    if (g < 1)
        g = 1;
    return (unsigned)(g > 65535 * 8 ? 65535 * 8 : g);
}

template <typename T>
__device__ __forceinline__ void store_out(const kc_dwconv &p, float v, int c, int64_t o,
                                          const T *__restrict__ bias, const T *__restrict__ res,
                                          T *__restrict__ y) {
    if (bias)
        v += kc_widen(bias[c]);
    if (res)
        v += kc_widen(res[o]);
    y[o] = kc_narrow<T>(kc_activate_t<T>(p.act, v, p.alpha, p.beta));
}

// The input prologue: min(max(v + in_bias[c], lo), hi), v as loaded (padding never passes
// here); in_act is none, Relu or Clip (kc_dwconv_takes). Activations that cost more than a clamp
// are not applied here: each input is loaded by up to K * K outputs' windows, and SiLU at every
// load made EfficientNet-B0 twice as slow as its own pass over the tensor (perf-notes.md).
__host__ __device__ __forceinline__ float pro_lo(const kc_dwconv &p) {
    return p.in_act == KC_ACT_CLIP ? p.in_alpha : p.in_act == KC_ACT_RELU ? 0.f : -INFINITY;
}

__host__ __device__ __forceinline__ float pro_hi(const kc_dwconv &p) {
    return p.in_act == KC_ACT_CLIP ? p.in_beta : INFINITY;
}

template <typename T>
__device__ __forceinline__ float prologue(const kc_dwconv &p, float v, int c,
                                          const T *__restrict__ xb) {
    if (xb)
        v += kc_widen(xb[c]);
    return fminf(fmaxf(v, pro_lo(p)), pro_hi(p));
}

bool has_prologue(const kc_dwconv &p, const void *xb) {
    return xb != nullptr || p.in_act != KC_ACT_NONE;
}

template <typename T, int K, int S>
__global__ void __launch_bounds__(kThreads)
    k_dw_nchw(kc_dwconv p, const T *__restrict__ x, const T *__restrict__ w,
              const T *__restrict__ bias, const T *__restrict__ res, const T *__restrict__ xb,
              T *__restrict__ y) {
    const bool pro = xb != nullptr || p.in_act != KC_ACT_NONE;
    constexpr int kCols = (kRow - 1) * S + K; // input columns the kRow outputs read
    const int groups = (p.ow + kRow - 1) / kRow;
    const int64_t total = (int64_t)p.n * p.c * p.oh * groups;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int gi = (int)(t % groups);
        const int64_t r = t / groups;
        const int oh = (int)(r % p.oh);
        const int64_t plane = r / p.oh;
        const int c = (int)(plane % p.c);
        const T *xp = x + plane * p.h * p.w;
        const T *wp = w + c * K * K;
        const int ow0 = gi * kRow, iw0 = ow0 * S - p.pw;
        float acc[kRow];
#pragma unroll
        for (int i = 0; i < kRow; i++)
            acc[i] = 0.f;
#pragma unroll
        for (int kh = 0; kh < K; kh++) {
            const int ih = oh * S - p.ph + kh;
            if (ih < 0 || ih >= p.h)
                continue;
            const T *row = xp + (int64_t)ih * p.w;
            float v[kCols];
#pragma unroll
            for (int j = 0; j < kCols; j++) {
                const int iw = iw0 + j;
                v[j] = iw >= 0 && iw < p.w ? kc_widen(row[iw]) : 0.f;
                if (pro && iw >= 0 && iw < p.w)
                    v[j] = prologue(p, v[j], c, xb);
            }
#pragma unroll
            for (int kw = 0; kw < K; kw++) {
                const float wk = kc_widen(wp[kh * K + kw]);
#pragma unroll
                for (int i = 0; i < kRow; i++)
                    acc[i] += v[i * S + kw] * wk;
            }
        }
        const int64_t ob = (plane * p.oh + oh) * p.ow;
#pragma unroll
        for (int i = 0; i < kRow; i++)
            if (ow0 + i < p.ow)
                store_out(p, acc[i], c, ob + ow0 + i, bias, res, y);
    }
}

template <typename T, int K, int S>
__global__ void __launch_bounds__(kThreads)
    k_dw_nhwc(kc_dwconv p, const T *__restrict__ x, const T *__restrict__ w,
              const T *__restrict__ bias, const T *__restrict__ res, const T *__restrict__ xb,
              T *__restrict__ y) {
    const bool pro = xb != nullptr || p.in_act != KC_ACT_NONE;
    const int64_t total = (int64_t)p.n * p.oh * p.ow * p.c;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int c = (int)(t % p.c);
        int64_t r = t / p.c;
        const int ow = (int)(r % p.ow);
        r /= p.ow;
        const int oh = (int)(r % p.oh);
        const int64_t n = r / p.oh;
        const T *wp = w + c * K * K;
        float acc = 0.f;
#pragma unroll
        for (int kh = 0; kh < K; kh++) {
            const int ih = oh * S - p.ph + kh;
            if (ih < 0 || ih >= p.h)
                continue;
            const T *row = x + ((n * p.h + ih) * p.w) * p.c + c;
#pragma unroll
            for (int kw = 0; kw < K; kw++) {
                const int iw = ow * S - p.pw + kw;
                if (iw >= 0 && iw < p.w) {
                    float v = kc_widen(row[(int64_t)iw * p.c]);
                    acc += (pro ? prologue(p, v, c, xb) : v) * kc_widen(wp[kh * K + kw]);
                }
            }
        }
        store_out(p, acc, c, t, bias, res, y);
    }
}

// NHWC with 16 bytes of channels a thread (8 halves or 4 floats) and R outputs along W: the R
// outputs share (R - 1) * S + K input columns, each one 16-byte load of V channels. A block
// takes a slice of up to 32 channel vectors (blockIdx.y) and walks output pixels with the rest
// of its threads, consecutive threads on consecutive channel vectors of the same pixels, so a
// warp's loads are contiguous runs of a row. The slice's filter taps (weights are [C, K, K])
// are staged once per block in shared memory as [K * K][channels] float32, so a thread reads
// its V taps of one position as two (or one) 16-byte loads instead of V scattered ones. R is 4
// where that leaves enough threads for the GPU, else 1 (batch 1, small maps). Pro: the input
// prologue (the clamp of v + in_bias to [lo, hi]) applied to each loaded vector, the bias in
// registers.
constexpr int kSliceVecs = 32;

template <typename T, int K, int S, int R, bool Pro>
__global__ void __launch_bounds__(kThreads)
    k_dw_nhwc_vec(kc_dwconv p, const T *__restrict__ x, const T *__restrict__ w,
                  const T *__restrict__ bias, const T *__restrict__ res, const T *__restrict__ xb,
                  float lo, float hi, T *__restrict__ y) {
    constexpr int V = 16 / sizeof(T);
    constexpr int kCols = (R - 1) * S + K;
    __shared__ __align__(16) float wsm[K * K * kSliceVecs * V];
    const int cv = p.c / V, cs = cv < kSliceVecs ? cv : kSliceVecs, sc = cs * V;
    const int slice0 = (int)blockIdx.y * cs; // first channel vector of the block's slice
    // Eight loads in flight a thread before their stores: a load-store loop waits out one
    // memory latency an element, which at batch 1 was most of the layer's time.
    constexpr int kBatch = 8;
    const int n_taps = sc * K * K;
    for (int base = (int)threadIdx.x; base < n_taps; base += kBatch * (int)blockDim.x) {
        float v[kBatch];
#pragma unroll
        for (int u = 0; u < kBatch; u++) {
            const int i = base + u * (int)blockDim.x, cl = i / (K * K), c = slice0 * V + cl;
            v[u] = i < n_taps && c < p.c ? kc_widen(w[(int64_t)slice0 * V * K * K + i]) : 0.f;
        }
#pragma unroll
        for (int u = 0; u < kBatch; u++) {
            const int i = base + u * (int)blockDim.x, cl = i / (K * K), tap = i - cl * (K * K);
            if (i < n_taps)
                wsm[tap * sc + cl] = v[u];
        }
    }
    __syncthreads();
    const int lane_c = (int)threadIdx.x % cs, sp = (int)threadIdx.x / cs;
    const int lanes_sp = (int)blockDim.x / cs, cvi = slice0 + lane_c;
    if (sp >= lanes_sp || cvi >= cv)
        return;
    const int c0 = cvi * V, groups = (p.ow + R - 1) / R;
    const int64_t total = (int64_t)p.n * p.oh * groups;
    float bv[V], xbv[V];
#pragma unroll
    for (int j = 0; j < V; j++) {
        bv[j] = bias ? kc_widen(bias[c0 + j]) : 0.f;
        xbv[j] = Pro && xb ? kc_widen(xb[c0 + j]) : 0.f;
    }
    for (int64_t t = (int64_t)blockIdx.x * lanes_sp + sp; t < total;
         t += (int64_t)gridDim.x * lanes_sp) {
        const int gi = (int)(t % groups);
        const int64_t r = t / groups;
        const int oh = (int)(r % p.oh);
        const int64_t n = r / p.oh;
        const int ow0 = gi * R, iw0 = ow0 * S - p.pw;
        float acc[R][V];
#pragma unroll
        for (int i = 0; i < R; i++)
#pragma unroll
            for (int j = 0; j < V; j++)
                acc[i][j] = 0.f;
#pragma unroll
        for (int kh = 0; kh < K; kh++) {
            const int ih = oh * S - p.ph + kh;
            if (ih < 0 || ih >= p.h)
                continue;
            const T *row = x + ((n * p.h + ih) * p.w) * p.c + c0;
            float wk[K][V];
#pragma unroll
            for (int kw = 0; kw < K; kw++)
#pragma unroll
                for (int j = 0; j < V; j += 4) {
                    float4 f = *reinterpret_cast<const float4 *>(
                        &wsm[(kh * K + kw) * sc + lane_c * V + j]);
                    wk[kw][j] = f.x;
                    wk[kw][j + 1] = f.y;
                    wk[kw][j + 2] = f.z;
                    wk[kw][j + 3] = f.w;
                }
#pragma unroll
            for (int col = 0; col < kCols; col++) {
                const int iw = iw0 + col;
                if (iw < 0 || iw >= p.w)
                    continue;
                uint4 raw = __ldg(reinterpret_cast<const uint4 *>(row + (int64_t)iw * p.c));
                const T *v = (const T *)&raw;
                float f[V];
#pragma unroll
                for (int j = 0; j < V; j++)
                    f[j] = Pro ? fminf(fmaxf(kc_widen(v[j]) + xbv[j], lo), hi) : kc_widen(v[j]);
#pragma unroll
                for (int i = 0; i < R; i++) {
                    const int kw = col - i * S;
                    if (kw >= 0 && kw < K)
#pragma unroll
                        for (int j = 0; j < V; j++)
                            acc[i][j] += f[j] * wk[kw][j];
                }
            }
        }
        const int64_t ob = ((n * p.oh + oh) * p.ow) * p.c + c0;
#pragma unroll
        for (int i = 0; i < R; i++) {
            if (ow0 + i >= p.ow)
                break;
            const int64_t o = ob + (int64_t)(ow0 + i) * p.c;
            uint4 zr =
                res ? __ldg(reinterpret_cast<const uint4 *>(res + o)) : make_uint4(0, 0, 0, 0);
            const T *zv = (const T *)&zr;
            uint4 out;
            T *ov = (T *)&out;
#pragma unroll
            for (int j = 0; j < V; j++) {
                float v = acc[i][j] + bv[j] + (res ? kc_widen(zv[j]) : 0.f);
                ov[j] = kc_narrow<T>(kc_activate_t<T>(p.act, v, p.alpha, p.beta));
            }
            *reinterpret_cast<uint4 *>(y + o) = out;
        }
    }
}

// Launches the vector NHWC kernel: one grid row per channel slice, blocks along x for the
// pixels, about eight blocks an SM in all: the blocks loop over pixels, and each one stages its
// slice's taps once (with a block per eight pixels, EfficientNet-B0's 7x7 1152-channel layers
// read ten times more taps than activations).
template <typename T, int K, int S, int R>
void launch_nhwc_vec_r(cudaStream_t s, dim3 grid, const kc_dwconv &p, const T *x, const T *w,
                       const T *b, const T *z, const T *xb, T *y) {
    const float lo = pro_lo(p), hi = pro_hi(p);
    if (has_prologue(p, xb))
        k_dw_nhwc_vec<T, K, S, R, true><<<grid, kThreads, 0, s>>>(p, x, w, b, z, xb, lo, hi, y);
    else
        k_dw_nhwc_vec<T, K, S, R, false><<<grid, kThreads, 0, s>>>(p, x, w, b, z, xb, lo, hi, y);
}

template <typename T, int K, int S>
void launch_nhwc_vec(cudaStream_t s, const kc_dwconv &p, const T *x, const T *w, const T *b,
                     const T *z, const T *xb, T *y) {
    const int cv = p.c / (16 / (int)sizeof(T)), cs = cv < kSliceVecs ? cv : kSliceVecs;
    const int slices = (cv + cs - 1) / cs, lanes_sp = kThreads / cs;
    const int64_t px4 = (int64_t)p.n * p.oh * ((p.ow + 3) / 4);
    const bool wide = px4 * cv >= (int64_t)kc_sm_count() * 1024; // R = 4 still fills the GPU
    const int64_t items = wide ? px4 : (int64_t)p.n * p.oh * p.ow;
    int64_t gx = (items + lanes_sp - 1) / lanes_sp, cap = 8 * kc_sm_count() / slices + 1;
    gx = gx < 1 ? 1 : gx > cap ? cap : gx;
    const dim3 grid((unsigned)gx, (unsigned)slices);
    if (wide)
        launch_nhwc_vec_r<T, K, S, 4>(s, grid, p, x, w, b, z, xb, y);
    else
        launch_nhwc_vec_r<T, K, S, 1>(s, grid, p, x, w, b, z, xb, y);
}

// Whether the vector NHWC kernel takes these tensors.
template <typename T> bool nhwc_vec(const kc_dwconv &p, const T *x, const T *z, const T *y) {
    return (p.c * sizeof(T)) % 16 == 0 && ((uintptr_t)x | (uintptr_t)z | (uintptr_t)y) % 16 == 0;
}

template <typename T, int K, int S>
int launch(cudaStream_t s, const kc_dwconv &p, const T *x, const T *w, const T *b, const T *z,
           const T *xb, T *y) {
    if (p.nhwc && nhwc_vec(p, x, z, y)) {
        launch_nhwc_vec<T, K, S>(s, p, x, w, b, z, xb, y);
    } else if (p.nhwc) {
        int64_t total = (int64_t)p.n * p.oh * p.ow * p.c;
        k_dw_nhwc<T, K, S><<<grid_for(total), kThreads, 0, s>>>(p, x, w, b, z, xb, y);
    } else {
        int64_t total = (int64_t)p.n * p.c * p.oh * ((p.ow + kRow - 1) / kRow);
        k_dw_nchw<T, K, S><<<grid_for(total), kThreads, 0, s>>>(p, x, w, b, z, xb, y);
    }
    return (int)cudaGetLastError();
}

template <typename T>
int dispatch(cudaStream_t s, const kc_dwconv &p, const T *x, const T *w, const T *b, const T *z,
             const T *xb, T *y) {
    if (p.k == 3)
        return p.s == 1 ? launch<T, 3, 1>(s, p, x, w, b, z, xb, y)
                        : launch<T, 3, 2>(s, p, x, w, b, z, xb, y);
    return p.s == 1 ? launch<T, 5, 1>(s, p, x, w, b, z, xb, y)
                    : launch<T, 5, 2>(s, p, x, w, b, z, xb, y);
}

// 16 bytes of x and w from element j on, widened: acc += x[j..] . w[j..].
template <typename T>
__device__ __forceinline__ float dot16(float acc, const T *__restrict__ x,
                                       const T *__restrict__ w) {
    constexpr int V = 16 / sizeof(T);
    uint4 a = __ldg(reinterpret_cast<const uint4 *>(x)),
          b = __ldg(reinterpret_cast<const uint4 *>(w));
    const T *av = (const T *)&a, *bv = (const T *)&b;
#pragma unroll
    for (int i = 0; i < V; i++)
        acc += kc_widen(av[i]) * kc_widen(bv[i]);
    return acc;
}

template <typename T>
__device__ __forceinline__ void store_1x1(float acc, int64_t o, int64_t ki,
                                          const T *__restrict__ bias, const T *__restrict__ res,
                                          T *__restrict__ y, int act, float alpha, float beta) {
    if (bias)
        acc += kc_widen(bias[ki]);
    if (res)
        acc += kc_widen(res[o]);
    y[o] = kc_narrow<T>(kc_activate_t<T>(act, acc, alpha, beta));
}

// Long rows (squeeze-and-excitation's reduction, 1152 -> 48): one warp an output, 16 bytes a
// lane a step where the rows are whole vectors (Vec).
template <typename T, bool Vec>
__global__ void __launch_bounds__(kThreads)
    k_pointwise_1x1(int n, int c, int k, const T *__restrict__ x, const T *__restrict__ w,
                    const T *__restrict__ bias, const T *__restrict__ res, T *__restrict__ y,
                    int act, float alpha, float beta) {
    constexpr int V = 16 / sizeof(T);
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
    for (int64_t o = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
         o < (int64_t)n * k; o += warps) {
        const int64_t ni = o / k, ki = o % k;
        const T *xr = x + ni * c, *wr = w + ki * c;
        float acc = 0.f;
        if (Vec)
            for (int j = lane * V; j < c; j += 32 * V)
                acc = dot16(acc, xr + j, wr + j);
        else
            for (int j = lane; j < c; j += 32)
                acc += kc_widen(xr[j]) * kc_widen(wr[j]);
        for (int off = 16; off > 0; off >>= 1)
            acc += __shfl_xor_sync(0xffffffffu, acc, off);
        if (lane == 0)
            store_1x1(acc, o, ki, bias, res, y, act, alpha, beta);
    }
}

// Short rows (the expansion back, 48 -> 1152): one thread an output, the threads of a warp on
// consecutive outputs of one image (x's row is read by all of them). A warp an output left
// most lanes idle and took about 10 us a layer at batch 64.
template <typename T, bool Vec>
__global__ void __launch_bounds__(kThreads)
    k_pointwise_1x1_short(int n, int c, int k, const T *__restrict__ x, const T *__restrict__ w,
                          const T *__restrict__ bias, const T *__restrict__ res, T *__restrict__ y,
                          int act, float alpha, float beta) {
    constexpr int V = 16 / sizeof(T);
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < (int64_t)n * k;
         o += (int64_t)gridDim.x * blockDim.x) {
        const int64_t ni = o / k, ki = o % k;
        const T *xr = x + ni * c, *wr = w + ki * c;
        float acc = 0.f;
        if (Vec)
            for (int j = 0; j < c; j += V)
                acc = dot16(acc, xr + j, wr + j);
        else
            for (int j = 0; j < c; j++)
                acc += kc_widen(xr[j]) * kc_widen(wr[j]);
        store_1x1(acc, o, ki, bias, res, y, act, alpha, beta);
    }
}

// Rows up to this long take a thread an output.
constexpr int kShortRow = 128;

template <typename T>
void pointwise_1x1(cudaStream_t s, int n, int c, int k, const T *x, const T *w, const T *bias,
                   const T *res, T *y, int act, float alpha, float beta) {
    const bool vec = (c * sizeof(T)) % 16 == 0 && ((uintptr_t)x | (uintptr_t)w) % 16 == 0;
    const int64_t outs = (int64_t)n * k;
    if (c <= kShortRow) {
        if (vec)
            k_pointwise_1x1_short<T, true>
                <<<grid_for(outs), kThreads, 0, s>>>(n, c, k, x, w, bias, res, y, act, alpha, beta);
        else
            k_pointwise_1x1_short<T, false>
                <<<grid_for(outs), kThreads, 0, s>>>(n, c, k, x, w, bias, res, y, act, alpha, beta);
    } else if (vec) {
        k_pointwise_1x1<T, true><<<grid_for(outs * 32), kThreads, 0, s>>>(n, c, k, x, w, bias, res,
                                                                          y, act, alpha, beta);
    } else {
        k_pointwise_1x1<T, false><<<grid_for(outs * 32), kThreads, 0, s>>>(n, c, k, x, w, bias, res,
                                                                           y, act, alpha, beta);
    }
}

// A sum, or a maximum that a NaN wins (as on the CPU).
template <bool Max> __device__ __forceinline__ float pool_step(float acc, float v) {
    return Max ? (v > acc || v != v ? v : acc) : acc + v;
}

template <typename T, bool Max>
__global__ void __launch_bounds__(kThreads)
    k_gpool_nchw(int64_t rows, int64_t hw, const T *__restrict__ x, T *__restrict__ y) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
    for (int64_t r = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5); r < rows;
         r += warps) {
        const T *xr = x + r * hw;
        float acc = Max ? -INFINITY : 0.f;
        for (int64_t j = lane; j < hw; j += 32)
            acc = pool_step<Max>(acc, kc_widen(xr[j]));
        for (int off = 16; off > 0; off >>= 1)
            acc = pool_step<Max>(acc, __shfl_xor_sync(0xffffffffu, acc, off));
        if (lane == 0)
            y[r] = kc_narrow<T>(Max ? acc : acc / (float)hw);
    }
}

constexpr int kSlices = 16; // H*W slices of the NHWC global pool's block (x 32 channels)

template <typename T, bool Max>
__global__ void __launch_bounds__(32 * kSlices)
    k_gpool_nhwc(int64_t hw, int c, const T *__restrict__ x, T *__restrict__ y,
                 float *__restrict__ partial) {
    __shared__ float part[kSlices][33];
    const int ci = blockIdx.x * 32 + threadIdx.x;
    const int64_t n = blockIdx.y;
    // blockIdx.z: this block's share of H*W when the pool is split (gridDim.z > 1)
    const int64_t chunk = (hw + gridDim.z - 1) / gridDim.z, j0 = blockIdx.z * chunk;
    const int64_t j1 = j0 + chunk < hw ? j0 + chunk : hw;
    float acc = Max ? -INFINITY : 0.f;
    if (ci < c) {
        const T *xn = x + n * hw * c + ci;
        for (int64_t j = j0 + threadIdx.y; j < j1; j += kSlices)
            acc = pool_step<Max>(acc, kc_widen(xn[j * c]));
    }
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && ci < c) {
        for (int s = 1; s < kSlices; s++)
            acc = pool_step<Max>(acc, part[s][threadIdx.x]);
        if (gridDim.z > 1)
            partial[(n * gridDim.z + blockIdx.z) * c + ci] = acc;
        else
            y[n * c + ci] = kc_narrow<T>(Max ? acc : acc / (float)hw);
    }
}

// The NHWC pool 16 bytes of channels a thread (c a multiple of the vector, x 16-byte aligned):
// a block of up to 32 channel vectors by kSlices slices of H*W, so a warp reads up to 512
// contiguous bytes of a pixel where the scalar form read 64 (two bytes a thread).
template <typename T, bool Max>
__global__ void __launch_bounds__(32 * kSlices)
    k_gpool_nhwc_vec(int64_t hw, int c, const T *__restrict__ x, T *__restrict__ y,
                     float *__restrict__ partial) {
    constexpr int V = 16 / sizeof(T);
    __shared__ float part[kSlices][32 * V + 1];
    const int cv = c / V, cvi = blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t n = blockIdx.y;
    const int64_t chunk = (hw + gridDim.z - 1) / gridDim.z, j0 = blockIdx.z * chunk;
    const int64_t j1 = j0 + chunk < hw ? j0 + chunk : hw;
    float acc[V];
#pragma unroll
    for (int i = 0; i < V; i++)
        acc[i] = Max ? -INFINITY : 0.f;
    if (cvi < cv) {
        const uint4 *xn = reinterpret_cast<const uint4 *>(x + n * hw * c) + cvi;
#pragma unroll 4
        for (int64_t j = j0 + threadIdx.y; j < j1; j += kSlices) {
            uint4 raw = __ldg(xn + j * cv);
            const T *v = reinterpret_cast<const T *>(&raw);
#pragma unroll
            for (int i = 0; i < V; i++)
                acc[i] = pool_step<Max>(acc[i], kc_widen(v[i]));
        }
    }
#pragma unroll
    for (int i = 0; i < V; i++)
        part[threadIdx.y][threadIdx.x * V + i] = acc[i];
    __syncthreads();
    if (threadIdx.y != 0 || cvi >= cv)
        return;
    for (int s = 1; s < kSlices; s++)
#pragma unroll
        for (int i = 0; i < V; i++)
            acc[i] = pool_step<Max>(acc[i], part[s][threadIdx.x * V + i]);
    const int64_t c0 = (int64_t)cvi * V;
#pragma unroll
    for (int i = 0; i < V; i++) {
        if (gridDim.z > 1)
            partial[(n * gridDim.z + blockIdx.z) * c + c0 + i] = acc[i];
        else
            y[n * c + c0 + i] = kc_narrow<T>(Max ? acc[i] : acc[i] / (float)hw);
    }
}

// The split pool's second step: y[n, c] from the chunks' partial results.
template <typename T, bool Max>
__global__ void k_gpool_finish(int64_t n, int c, int chunks, int64_t hw,
                               const float *__restrict__ partial, T *__restrict__ y) {
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < n * c;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t ni = t / c, ci = t - ni * c;
        float acc = Max ? -INFINITY : 0.f;
        for (int z = 0; z < chunks; z++)
            acc = pool_step<Max>(acc, partial[(ni * chunks + z) * c + ci]);
        y[t] = kc_narrow<T>(Max ? acc : acc / (float)hw);
    }
}

// How many H*W chunks an NHWC pool launched as `blocks` blocks over hw pixels is split into:
// enough blocks for two an SM (at batch 1 a 96-channel pool was three blocks), chunks of at
// least 64 pixels a slice.
int gpool_chunks(int64_t blocks, int64_t hw) {
    const int64_t want = 2 * (int64_t)kc_sm_count();
    if (blocks >= want)
        return 1;
    int64_t z = (want + blocks - 1) / blocks, most = hw / (64 * kSlices);
    z = z < most ? z : most;
    return z > 1 ? (int)(z > 1024 ? 1024 : z) : 1;
}

// The blocks of the NHWC pool along C: 32 channels each (scalar), or up to 32 vectors (vec).
int64_t gpool_cblocks(int64_t c, int64_t cv, bool vec) {
    return vec ? (cv + 31) / 32 : (c + 31) / 32;
}

template <typename T, bool Max>
int gpool(cudaStream_t s, int64_t n, int64_t c, int64_t hw, int nhwc, const T *x, T *y, void *ws,
          size_t ws_size) {
    if (nhwc) {
        constexpr int V = 16 / sizeof(T);
        const int64_t cv = c / V;
        const bool vec = c % V == 0 && (uintptr_t)x % 16 == 0;
        const int64_t cblocks = gpool_cblocks(c, cv, vec);
        int chunks = gpool_chunks(n * cblocks, hw);
        if ((size_t)(n * c * chunks) * sizeof(float) > ws_size)
            chunks = 1;
        dim3 grid((unsigned)cblocks, (unsigned)n, (unsigned)chunks);
        if (vec)
            k_gpool_nhwc_vec<T, Max><<<grid, dim3((unsigned)(cv < 32 ? cv : 32), kSlices), 0, s>>>(
                hw, (int)c, x, y, (float *)ws);
        else
            k_gpool_nhwc<T, Max><<<grid, dim3(32, kSlices), 0, s>>>(hw, (int)c, x, y, (float *)ws);
        if (chunks > 1)
            k_gpool_finish<T, Max>
                <<<grid_for(n * c), kThreads, 0, s>>>(n, (int)c, chunks, hw, (const float *)ws, y);
    } else {
        k_gpool_nchw<T, Max><<<grid_for(n * c * 32), kThreads, 0, s>>>(n * c, hw, x, y);
    }
    return (int)cudaGetLastError();
}

} // namespace

extern "C" int kc_pointwise_1x1(void *s, int dt, int n, int c, int k, const void *x, const void *w,
                                const void *bias, const void *residual, void *y, int act,
                                float alpha, float beta) {
    if ((int64_t)n * k == 0)
        return 0;
    KC_FLOAT_DISPATCH(dt, T,
                      pointwise_1x1<T>((cudaStream_t)s, n, c, k, (const T *)x, (const T *)w,
                                       (const T *)bias, (const T *)residual, (T *)y, act, alpha,
                                       beta));
    return (int)cudaGetLastError();
}

// The workspace of the split NHWC pool: the larger of the two forms' (the vector form, which
// launches fewer blocks along C and so may split H*W more, depends on x's alignment, not known
// here; its vector is 4 or 8 channels, and 8 gives the fewest blocks, so the most chunks).
extern "C" size_t kc_global_pool_ws(int64_t n, int64_t c, int64_t hw, int nhwc) {
    if (!nhwc)
        return 0;
    int scalar = gpool_chunks(n * gpool_cblocks(c, 0, false), hw);
    int vec = gpool_chunks(n * gpool_cblocks(c, c / 8, true), hw);
    int chunks = scalar > vec ? scalar : vec;
    return chunks > 1 ? (size_t)(n * c * chunks) * sizeof(float) : 0;
}

extern "C" int kc_global_pool(void *s, int dt, int max, int64_t n, int64_t c, int64_t hw, int nhwc,
                              const void *x, void *y, void *ws, size_t ws_size) {
    if (n * c == 0)
        return 0;
    if ((nhwc && n > 65535) || c > 2147483647)
        return (int)cudaErrorNotSupported;
    KC_FLOAT_DISPATCH(dt, T,
                      return max ? gpool<T, true>((cudaStream_t)s, n, c, hw, nhwc, (const T *)x,
                                                  (T *)y, ws, ws_size)
                                 : gpool<T, false>((cudaStream_t)s, n, c, hw, nhwc, (const T *)x,
                                                   (T *)y, ws, ws_size));
    return 0;
}

extern "C" int kc_dwconv_takes(const kc_dwconv *p) {
    return (p->k == 3 || p->k == 5) && (p->s == 1 || p->s == 2) && p->ph >= 0 && p->ph < p->k &&
           p->pw >= 0 && p->pw < p->k &&
           (p->in_act == KC_ACT_NONE || p->in_act == KC_ACT_RELU || p->in_act == KC_ACT_CLIP);
}

extern "C" int kc_dwconv_run(void *s, int dt, const kc_dwconv *p, const void *x, const void *w,
                             const void *bias, const void *residual, const void *in_bias, void *y) {
    if (!kc_dwconv_takes(p))
        return (int)cudaErrorNotSupported;
    if ((int64_t)p->n * p->c * p->oh * p->ow == 0)
        return 0;
    KC_FLOAT_DISPATCH(dt, T,
                      return dispatch<T>((cudaStream_t)s, *p, (const T *)x, (const T *)w,
                                         (const T *)bias, (const T *)residual, (const T *)in_bias,
                                         (T *)y));
    return 0;
}
