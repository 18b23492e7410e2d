// 1x1 convolution at stride 1 in NHWC, float16 or bfloat16, with its whole epilogue in the store:
// y[m, n] = act(sum_k x[m, k] w[n, k] + bias[n] + residual[m, n]) over the pixels m of [N*H*W, C]
// and the filters n of w [K, C] (kiln's NHWC filter layout [K, 1, 1, C]). This is the matrix
// product it is, on tensor cores (mma.sync m16n8k16, float32 accumulators), so the SiLU, ReLU6
// or HardSwish of an expansion layer costs no pass of its own over the layer's output, which
// cuDNN's fused convolution (ReLU or nothing) leaves to a separate epilogue kernel.
//
// A CTA of 4 warps computes a 128 x BN tile of y (BN 32 or 64); each warp 32 rows of it. The
// k dimension goes in steps of 32 staged in shared memory by cp.async, two stages, so a step's
// loads overlap the previous step's products; rows and columns past the edges load as zeros.
// The tile goes out through shared memory in 16-byte chunks (whole rows of y a warp).
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/kernels_activate.cuh"
#include "backend/cuda/kernels_float.cuh"
#include "backend/cuda/kernels_launch.cuh"
#include "backend/cuda/kernels_mma.cuh"

#include <stdint.h>

namespace {

using namespace kc_mma;

constexpr int kRows = 128; // tile rows (pixels): 4 warps x 32
constexpr int kStep = 32;  // k per stage
constexpr int kLd =
    kStep + 8; // shared row pitch in elements: 80 bytes, ldmatrix rows on distinct banks

template <typename T, int BN>
__global__ void __launch_bounds__(128)
    k_conv1x1(int64_t m, int n, int kdim, const T *__restrict__ x, const T *__restrict__ w,
              const T *__restrict__ bias, const T *__restrict__ z, T *__restrict__ y, int act,
              float alpha, float beta) {
    constexpr int NT = BN / 8; // n8 tiles a warp covers
    __shared__ __align__(16) T as[2][kRows * kLd];
    __shared__ __align__(16) T bs[2][BN * kLd];
    const int tid = (int)threadIdx.x, warp = tid / 32, lane = tid % 32;
    // CTAs in row-tile order with the column tiles of one row tile adjacent, so the pixels a
    // row tile reads are still in L2 for its other column tiles.
    const int ntiles = (n + BN - 1) / BN;
    const int64_t row0 = (int64_t)(blockIdx.x / ntiles) * kRows;
    const int col0 = (int)(blockIdx.x % ntiles) * BN;
    const int steps = (kdim + kStep - 1) / kStep;

    // Stage s of k step kt: A is kRows x 4 chunks of 16 bytes, B BN x 4.
    auto load = [&](int kt, int s) {
        const int k0 = kt * kStep;
#pragma unroll
        for (int i = 0; i < kRows * 4 / 128; i++) {
            int c = tid + 128 * i, r = c / 4, kc = (c % 4) * 8;
            int64_t gr = row0 + r;
            bool in = gr < m && k0 + kc < kdim;
            cp16(&as[s][r * kLd + kc], in ? x + gr * kdim + k0 + kc : x, in);
        }
#pragma unroll
        for (int i = 0; i < (BN * 4 + 127) / 128; i++) {
            int c = tid + 128 * i;
            if (c < BN * 4) {
                int r = c / 4, kc = (c % 4) * 8, gn = col0 + r;
                bool in = gn < n && k0 + kc < kdim;
                cp16(&bs[s][r * kLd + kc], in ? w + (int64_t)gn * kdim + k0 + kc : w, in);
            }
        }
    };

    float acc[2][NT][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[i][j][e] = 0.f;

    load(0, 0);
    cp_commit();
    for (int kt = 0; kt < steps; kt++) {
        const int s = kt & 1;
        if (kt + 1 < steps) {
            load(kt + 1, s ^ 1);
            cp_commit();
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < kStep; kk += 16) {
            uint32_t a[2][4];
#pragma unroll
            for (int i = 0; i < 2; i++) {
                int r = warp * 32 + i * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
                ldsm_x4(a[i], &as[s][r * kLd + kk + (lane >> 4) * 8]);
            }
#pragma unroll
            for (int j = 0; j < NT; j += 2) {
                uint32_t b[4];
                int r = j * 8 + (lane & 7) + (lane >> 4) * 8;
                ldsm_x4(b, &bs[s][r * kLd + kk + ((lane >> 3) & 1) * 8]);
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    mma_op<T>::run(acc[i][j], a[i], b[0], b[1]);
                    mma_op<T>::run(acc[i][j + 1], a[i], b[2], b[3]);
                }
            }
        }
        __syncthreads();
    }

    // The epilogue in two steps. First the accumulators plus bias go to a [kRows][BN + 8]
    // tile in shared memory (over the A stages, no longer read): rows g and g + 8 of each m16
    // tile, columns 2t, 2t + 1 of each n8 tile. Then each thread takes 16-byte chunks of the tile
    // (8 channels of one pixel), adds the residual, applies the activation and stores, so a
    // warp's stores cover whole rows of y rather than 16-byte pieces of eight.
    constexpr int LDO = BN + 8;
    static_assert(kRows * LDO <= 2 * kRows * kLd, "the output tile fits the A stages");
    T *os = &as[0][0];
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int j = 0; j < NT; j++) {
        const int cl = j * 8 + 2 * t, col = col0 + cl;
        float b0 = 0.f, b1 = 0.f;
        if (bias != nullptr && col < n) {
            b0 = kc_widen(bias[col]);
            b1 = kc_widen(bias[col + 1]);
        }
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int rl = warp * 32 + i * 16 + g + 8 * h;
                *reinterpret_cast<uint32_t *>(&os[rl * LDO + cl]) =
                    mma_op<T>::pack(acc[i][j][2 * h] + b0, acc[i][j][2 * h + 1] + b1);
            }
    }
    __syncthreads();
    constexpr int CPR = BN / 8; // 16-byte chunks a row
#pragma unroll
    for (int c = tid; c < kRows * CPR; c += 128) {
        const int rl = c / CPR, cl = (c % CPR) * 8;
        const int64_t row = row0 + rl;
        const int col = col0 + cl;
        if (row >= m || col >= n)
            continue;
        const int64_t at = row * n + col;
        uint4 v = *reinterpret_cast<const uint4 *>(&os[rl * LDO + cl]);
        uint4 r = make_uint4(0, 0, 0, 0);
        if (z != nullptr)
            r = *reinterpret_cast<const uint4 *>(z + at);
        const T *pv = reinterpret_cast<const T *>(&v);
        const T *pr = reinterpret_cast<const T *>(&r);
        float f[8];
#pragma unroll
        for (int e = 0; e < 8; e++)
            f[e] = kc_activate_t<T>(act, kc_widen(pv[e]) + (z != nullptr ? kc_widen(pr[e]) : 0.f),
                                    alpha, beta);
        uint4 o;
        o.x = mma_op<T>::pack(f[0], f[1]);
        o.y = mma_op<T>::pack(f[2], f[3]);
        o.z = mma_op<T>::pack(f[4], f[5]);
        o.w = mma_op<T>::pack(f[6], f[7]);
        *reinterpret_cast<uint4 *>(y + at) = o;
    }
}

template <typename T>
int launch(cudaStream_t s, int64_t m, int n, int k, const T *x, const T *w, const T *bias,
           const T *z, T *y, int act, float alpha, float beta) {
    const int64_t mt = (m + kRows - 1) / kRows;
    // The wider tile reads each pixel row fewer times; the narrower one where the wide one
    // would leave multiprocessors idle (small maps) or the filters are few.
    const bool wide = n > 32 && mt * ((n + 63) / 64) >= kc_sm_count();
    const int64_t ctas = mt * ((n + (wide ? 63 : 31)) / (wide ? 64 : 32));
    if (ctas > 2147483647)
        return (int)cudaErrorNotSupported;
    if (wide)
        k_conv1x1<T, 64>
            <<<(unsigned)ctas, 128, 0, s>>>(m, n, k, x, w, bias, z, y, act, alpha, beta);
    else
        k_conv1x1<T, 32>
            <<<(unsigned)ctas, 128, 0, s>>>(m, n, k, x, w, bias, z, y, act, alpha, beta);
    return (int)cudaGetLastError();
}

} // namespace

extern "C" int kc_conv1x1_takes(int dt, int64_t m, int n, int k, const void *x, const void *w,
                                const void *bias, const void *z, const void *y) {
    const uintptr_t v = (uintptr_t)x | (uintptr_t)w | (uintptr_t)z | (uintptr_t)y;
    return (dt == KC_DT_F16 || dt == KC_DT_BF16) && m > 0 && n > 0 && k > 0 && n % 8 == 0 &&
           k % 8 == 0 && (v & 15) == 0 && ((uintptr_t)bias & 3) == 0 &&
           ((m + kRows - 1) / kRows) * ((n + 31) / 32) <= 2147483647;
}

extern "C" int kc_conv1x1_run(void *s, int dt, int64_t m, int n, int k, const void *x,
                              const void *w, const void *bias, const void *z, void *y, int act,
                              float alpha, float beta) {
    if (!kc_conv1x1_takes(dt, m, n, k, x, w, bias, z, y))
        return (int)cudaErrorNotSupported;
    if (dt == KC_DT_F16)
        return launch<__half>((cudaStream_t)s, m, n, k, (const __half *)x, (const __half *)w,
                              (const __half *)bias, (const __half *)z, (__half *)y, act, alpha,
                              beta);
    return launch<__nv_bfloat16>((cudaStream_t)s, m, n, k, (const __nv_bfloat16 *)x,
                                 (const __nv_bfloat16 *)w, (const __nv_bfloat16 *)bias,
                                 (const __nv_bfloat16 *)z, (__nv_bfloat16 *)y, act, alpha, beta);
}
