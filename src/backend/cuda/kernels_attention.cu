// Fused attention, softmax(Q K^T * scale + mask) V per (batch, head), in one kernel: the scores
// never reach global memory. Accumulation and the softmax are float32 whatever the I/O type.
//
// Two kernels:
//  - k_attn_mma (float16, bfloat16; head size a multiple of 16 up to 128): each warp owns 16
//    query rows, its Q fragments and its scores in registers; the CTA's warps walk the keys in
//    tiles of 64 that they stage together in shared memory (K as read, V transposed), with a
//    running maximum and sum per row (online softmax), so any number of keys fits. The products
//    are tensor-core mma.sync m16n8k16 with float32 accumulators, whose fragment layout is
//    documented, so the probabilities go from the score accumulators straight into the A
//    operand of P V without a trip through shared memory.
//  - k_attn_rows (everything else, float32 included): one warp per query row, one pass over
//    the keys with a running maximum (online softmax), the row's dot products by warp shuffles.
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/kernels_float.cuh"
#include "backend/cuda/kernels_launch.cuh"
#include "backend/cuda/kernels_mma.cuh"

#include <float.h>
#include <stdint.h>

namespace {

constexpr int kMaxPerLane = 8; // row kernel: head size up to 32 x 8

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <typename T>
__global__ void k_attn_rows(kc_attention a, const T *q, const T *k, const T *v, const T *mask,
                            T *o) {
    int warp = (int)(threadIdx.x / 32), lane = (int)(threadIdx.x % 32);
    int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + warp;
    if (row >= a.batch * a.heads * a.sq)
        return;
    int64_t i = row % a.sq, bh = row / a.sq, h = bh % a.heads, b = bh / a.heads;
    const T *qr = q + b * a.q_stride[0] + h * a.q_stride[1] + i * a.q_stride[2];
    const T *kb = k + b * a.k_stride[0] + h * a.k_stride[1];
    const T *vb = v + b * a.v_stride[0] + h * a.v_stride[1];
    const T *mr = mask ? mask + b * a.m_stride[0] + h * a.m_stride[1] + i * a.m_stride[2] : nullptr;
    float qv[kMaxPerLane], acc[kMaxPerLane];
#pragma unroll
    for (int c = 0; c < kMaxPerLane; c++) {
        int64_t d = lane + 32 * c;
        qv[c] = d < a.d ? kc_widen(qr[d]) : 0.f;
        acc[c] = 0.f;
    }
    // -FLT_MAX as the start, as the Softmax kernel: a row whose scores are all -inf ends with
    // a zero sum (and NaN), as there.
    float m = -FLT_MAX, l = 0.f;
    for (int64_t j = 0; j < a.sk; j++) {
        const T *kr = kb + j * a.k_stride[2];
        float s = 0.f;
#pragma unroll
        for (int c = 0; c < kMaxPerLane; c++) {
            int64_t d = lane + 32 * c;
            if (d < a.d)
                s += qv[c] * kc_widen(kr[d]);
        }
        s = warp_sum(s) * a.scale + (mr ? kc_widen(mr[j * a.m_stride[3]]) : 0.f);
        float mn = fmaxf(m, s), corr = expf(m - mn), p = expf(s - mn);
        l = l * corr + p;
        const T *vr = vb + j * a.v_stride[2];
#pragma unroll
        for (int c = 0; c < kMaxPerLane; c++) {
            int64_t d = lane + 32 * c;
            if (d < a.dv)
                acc[c] = acc[c] * corr + p * kc_widen(vr[d]);
        }
        m = mn;
    }
    float inv = 1.f / l;
    T *orow = o + b * a.o_stride[0] + h * a.o_stride[1] + i * a.o_stride[2];
#pragma unroll
    for (int c = 0; c < kMaxPerLane; c++) {
        int64_t d = lane + 32 * c;
        if (d < a.dv)
            orow[d] = kc_narrow<T>(acc[c] * inv);
    }
}

constexpr int kKeyTile = 64;                  // keys a CTA stages at a time
constexpr float kLog2e = 1.4426950408889634f; // softmax in base 2: exp2f is one instruction

using namespace kc_mma;

// Shared memory of k_attn_mma: two stages of a K tile and a V tile [key][d + 8] (the pad keeps
// the 8 rows an ldmatrix or a fragment load reads on distinct banks), then two stages of the
// shared mask row (float32, base 2).
template <typename T> constexpr size_t attn_smem_bytes(int d) {
    return 4 * (size_t)kKeyTile * (d + 8) * sizeof(T) + 2 * kKeyTile * sizeof(float);
}

// ND: the head size in 16-column steps (d = 16 ND). Fragment coordinates (PTX ISA, mma
// m16n8k16): lane = 4 g + t; an A register holds row g or g + 8, columns 2t, 2t + 1 (+ 8); a B
// register rows 2t, 2t + 1 (+ 8) of column g; an accumulator row g (c0, c1) or g + 8 (c2, c3),
// columns 2t, 2t + 1.
template <typename T, int ND>
__global__ void __launch_bounds__(128)
    k_attn_mma(kc_attention a, const T *__restrict__ q, const T *__restrict__ k,
               const T *__restrict__ v, const T *__restrict__ mask, T *__restrict__ o) {
    constexpr int D = ND * 16, LDK = D + 8, NK = kKeyTile / 8;
    extern __shared__ __align__(16) unsigned char smem[];
    T *ks = reinterpret_cast<T *>(smem);                            // [2][kKeyTile * LDK]
    T *vs = ks + 2 * kKeyTile * LDK;                                // [2][kKeyTile * LDK]
    float *ms = reinterpret_cast<float *>(vs + 2 * kKeyTile * LDK); // [2][kKeyTile]
    const int warps = (int)(blockDim.x / 32), warp = (int)(threadIdx.x / 32);
    const int lane = (int)(threadIdx.x % 32), g = lane >> 2, t = lane & 3;
    const int64_t rows_cta = 16 * warps, blocks_per_bh = (a.sq + rows_cta - 1) / rows_cta;
    const int64_t bh = blockIdx.x / blocks_per_bh, h = bh % a.heads, b = bh / a.heads;
    const int64_t r0 = (blockIdx.x - bh * blocks_per_bh) * rows_cta + warp * 16 + g, r1 = r0 + 8;
    const bool ok0 = r0 < a.sq, ok1 = r1 < a.sq;
    const T *qb = q + b * a.q_stride[0] + h * a.q_stride[1];
    const T *kb = k + b * a.k_stride[0] + h * a.k_stride[1];
    const T *vb = v + b * a.v_stride[0] + h * a.v_stride[1];
    const T *mb = mask ? mask + b * a.m_stride[0] + h * a.m_stride[1] : nullptr;
    const bool shared_mask = mask != nullptr && a.m_stride[2] == 0;
    const float sl2 = a.scale * kLog2e;
    const int ntiles = (int)((a.sk + kKeyTile - 1) / kKeyTile);

    // Tile `tile`'s K and V rows into stage `st` (asynchronous copies, one group).
    auto issue = [&](int tile, int st) {
        const int64_t j0 = (int64_t)tile * kKeyTile;
        for (int idx = (int)threadIdx.x; idx < kKeyTile * (D / 8); idx += (int)blockDim.x) {
            const int r = idx / (D / 8), c = (idx - r * (D / 8)) * 8;
            const bool in = j0 + r < a.sk;
            cp16(ks + (st * kKeyTile + r) * LDK + c, in ? kb + (j0 + r) * a.k_stride[2] + c : kb,
                 in);
            cp16(vs + (st * kKeyTile + r) * LDK + c, in ? vb + (j0 + r) * a.v_stride[2] + c : vb,
                 in);
        }
        cp_commit();
    };
    // The shared mask row of tile `tile`, entries this thread stages (kKeyTile / 32 at most).
    auto mask_of = [&](int tile, float(&out)[kKeyTile / 32]) {
        const int64_t j0 = (int64_t)tile * kKeyTile;
#pragma unroll
        for (int u = 0; u < kKeyTile / 32; u++) {
            const int r = (int)threadIdx.x + u * (int)blockDim.x;
            out[u] = r < kKeyTile && j0 + r < a.sk ? kc_widen(mb[(j0 + r) * a.m_stride[3]]) * kLog2e
                                                   : 0.f;
        }
    };
    auto mask_put = [&](int st, const float(&in)[kKeyTile / 32]) {
#pragma unroll
        for (int u = 0; u < kKeyTile / 32; u++) {
            const int r = (int)threadIdx.x + u * (int)blockDim.x;
            if (r < kKeyTile)
                ms[st * kKeyTile + r] = in[u];
        }
    };

    issue(0, 0);
    float mnext[kKeyTile / 32];
    if (shared_mask) {
        mask_of(0, mnext);
        mask_put(0, mnext);
    }

    uint32_t qf[ND][4];
#pragma unroll
    for (int kk = 0; kk < ND; kk++) {
        const int c = kk * 16 + 2 * t;
        qf[kk][0] = ok0 ? ld32(qb + r0 * a.q_stride[2] + c) : 0u;
        qf[kk][1] = ok1 ? ld32(qb + r1 * a.q_stride[2] + c) : 0u;
        qf[kk][2] = ok0 ? ld32(qb + r0 * a.q_stride[2] + c + 8) : 0u;
        qf[kk][3] = ok1 ? ld32(qb + r1 * a.q_stride[2] + c + 8) : 0u;
    }
    float acc[2 * ND][4];
#pragma unroll
    for (int n = 0; n < 2 * ND; n++)
        acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
    // Running maximum (base 2) and this lane's part of the running sum, rows r0 and r1.
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;

    // Two stages: tile + 1's copies are in flight while tile is computed.
    for (int tile = 0; tile < ntiles; tile++) {
        const int st = tile & 1;
        const bool more = tile + 1 < ntiles;
        if (more) {
            issue(tile + 1, st ^ 1);
            if (shared_mask)
                mask_of(tile + 1, mnext);
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads(); // tile's copies (and its mask row) are visible to every warp
        const int64_t j0 = (int64_t)tile * kKeyTile;
        const T *kt_s = ks + st * kKeyTile * LDK;
        const T *vt_s = vs + st * kKeyTile * LDK;
        const float *mt_s = ms + st * kKeyTile;

        float s[NK][4];
#pragma unroll
        for (int n = 0; n < NK; n++) {
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
            for (int kk = 0; kk < ND; kk++) {
                const T *kp = kt_s + (n * 8 + g) * LDK + kk * 16 + 2 * t;
                mma_op<T>::run(s[n], qf[kk], ld32(kp), ld32(kp + 8));
            }
        }
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int n = 0; n < NK; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int jt = n * 8 + 2 * t + (e & 1);
                const int64_t j = j0 + jt;
                float x = s[n][e] * sl2;
                if (j >= a.sk)
                    x = -INFINITY;
                else if (shared_mask)
                    x += mt_s[jt];
                else if (mb != nullptr && (e < 2 ? ok0 : ok1))
                    x += kc_widen(mb[(e < 2 ? r0 : r1) * a.m_stride[2] + j * a.m_stride[3]]) *
                         kLog2e;
                s[n][e] = x;
                if (e < 2)
                    mx0 = fmaxf(mx0, x);
                else
                    mx1 = fmaxf(mx1, x);
            }
#pragma unroll
        for (int off = 1; off < 4; off <<= 1) {
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
        }
        // A row whose keys are all masked so far keeps maximum -inf: its probabilities are 0
        // and its sum stays 0, so that a row masked everywhere ends 0 / 0 = NaN, as onnxruntime
        // and the CPU give.
        const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
        const float c0 = n0 == -INFINITY ? 1.f : exp2f(m0 - n0);
        const float c1 = n1 == -INFINITY ? 1.f : exp2f(m1 - n1);
        const float b0 = n0 == -INFINITY ? 0.f : n0, b1 = n1 == -INFINITY ? 0.f : n1;
        m0 = n0;
        m1 = n1;
        float ps0 = 0.f, ps1 = 0.f;
#pragma unroll
        for (int n = 0; n < NK; n++) {
            s[n][0] = exp2f(s[n][0] - b0);
            s[n][1] = exp2f(s[n][1] - b0);
            s[n][2] = exp2f(s[n][2] - b1);
            s[n][3] = exp2f(s[n][3] - b1);
            ps0 += s[n][0] + s[n][1];
            ps1 += s[n][2] + s[n][3];
        }
        l0 = l0 * c0 + ps0;
        l1 = l1 * c1 + ps1;
#pragma unroll
        for (int n = 0; n < 2 * ND; n++) {
            acc[n][0] *= c0;
            acc[n][1] *= c0;
            acc[n][2] *= c1;
            acc[n][3] *= c1;
        }
        // O += P V: the A operand of keys [16 kt, 16 kt + 16) is score blocks 2 kt and 2 kt + 1.
#pragma unroll
        for (int kt = 0; kt < kKeyTile / 16; kt++) {
            uint32_t pa[4] = {mma_op<T>::pack(s[2 * kt][0], s[2 * kt][1]),
                              mma_op<T>::pack(s[2 * kt][2], s[2 * kt][3]),
                              mma_op<T>::pack(s[2 * kt + 1][0], s[2 * kt + 1][1]),
                              mma_op<T>::pack(s[2 * kt + 1][2], s[2 * kt + 1][3])};
            // V's B operands two 8-column blocks at a time: lanes 0-15 address keys
            // 16 kt + (0..15) of block n, lanes 16-31 the same keys of block n + 1.
            const T *vrow = vt_s + (kt * 16 + (lane & 15)) * LDK + (lane >> 4) * 8;
#pragma unroll
            for (int n = 0; n < 2 * ND; n += 2) {
                uint32_t vf[4];
                ldsm_x4_trans(vf, vrow + n * 8);
                mma_op<T>::run(acc[n], pa, vf[0], vf[1]);
                mma_op<T>::run(acc[n + 1], pa, vf[2], vf[3]);
            }
        }
        if (more && shared_mask)
            mask_put(st ^ 1, mnext);
        __syncthreads(); // every warp is done with stage st before tile + 2's copies reuse it
    }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
        l0 += __shfl_xor_sync(0xffffffffu, l0, off);
        l1 += __shfl_xor_sync(0xffffffffu, l1, off);
    }
    const float i0 = 1.f / l0, i1 = 1.f / l1;
    T *ob = o + b * a.o_stride[0] + h * a.o_stride[1];
#pragma unroll
    for (int n = 0; n < 2 * ND; n++) {
        const int c = n * 8 + 2 * t;
        if (ok0)
            *reinterpret_cast<uint32_t *>(ob + r0 * a.o_stride[2] + c) =
                mma_op<T>::pack(acc[n][0] * i0, acc[n][1] * i0);
        if (ok1)
            *reinterpret_cast<uint32_t *>(ob + r1 * a.o_stride[2] + c) =
                mma_op<T>::pack(acc[n][2] * i1, acc[n][3] * i1);
    }
}

template <typename T>
int launch_rows(cudaStream_t s, const kc_attention *a, const void *q, const void *k, const void *v,
                const void *mask, void *o) {
    int64_t rows = a->batch * a->heads * a->sq;
    const int warps = 4;
    k_attn_rows<T><<<(unsigned)((rows + warps - 1) / warps), warps * 32, 0, s>>>(
        *a, (const T *)q, (const T *)k, (const T *)v, (const T *)mask, (T *)o);
    return (int)cudaGetLastError();
}

template <typename T> bool aligned16(const void *p) {
    return ((uintptr_t)p & 15u) == 0;
}

// One head size of the tensor-core kernel; its shared-memory limit is raised once where it
// needs more than the default 48 KB (the warm-up run does it, before any stream capture).
template <typename T, int ND>
int launch_nd(cudaStream_t s, dim3 grid, dim3 block, const kc_attention *a, const void *q,
              const void *k, const void *v, const void *mask, void *o) {
    constexpr size_t bytes = attn_smem_bytes<T>(ND * 16);
    static bool raised = false;
    if (bytes > 48 * 1024 && !raised) {
        cudaError_t err = cudaFuncSetAttribute(
            k_attn_mma<T, ND>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
        if (err != cudaSuccess)
            return (int)err;
        raised = true;
    }
    k_attn_mma<T, ND><<<grid, block, bytes, s>>>(*a, (const T *)q, (const T *)k, (const T *)v,
                                                 (const T *)mask, (T *)o);
    return (int)cudaGetLastError();
}

// The tensor-core kernel takes the call when the head sizes, strides and addresses suit it; 0
// with *done false otherwise. CTAs of 4 warps (64 query rows, K and V staged once for them),
// fewer warps when that would leave the GPU under two CTAs an SM (batch 1).
template <typename T>
int launch_mma(cudaStream_t s, const kc_attention *a, const void *q, const void *k, const void *v,
               const void *mask, void *o, bool *done) {
    *done = false;
    if (a->d != a->dv || a->d % 16 != 0 || a->d > 128 || a->sk == 0)
        return 0;
    const int64_t *st[] = {a->q_stride, a->k_stride, a->v_stride, a->o_stride};
    for (int i = 0; i < 4; i++)
        if (st[i][0] % 8 || st[i][1] % 8 || st[i][2] % 8)
            return 0;
    if (!aligned16<T>(q) || !aligned16<T>(k) || !aligned16<T>(v) || !aligned16<T>(o))
        return 0;
    const int64_t bh = a->batch * a->heads;
    int warps = 4;
    while (warps > 1 && bh * ((a->sq + 16 * warps - 1) / (16 * warps)) < 2 * kc_sm_count())
        warps /= 2;
    const int64_t blocks = bh * ((a->sq + 16 * warps - 1) / (16 * warps));
    if (blocks > INT32_MAX)
        return 0;
    const dim3 grid((unsigned)blocks), block((unsigned)(32 * warps));
    int rc;
    switch (a->d / 16) {
    case 1:
        rc = launch_nd<T, 1>(s, grid, block, a, q, k, v, mask, o);
        break;
    case 2:
        rc = launch_nd<T, 2>(s, grid, block, a, q, k, v, mask, o);
        break;
    case 3:
        rc = launch_nd<T, 3>(s, grid, block, a, q, k, v, mask, o);
        break;
    case 4:
        rc = launch_nd<T, 4>(s, grid, block, a, q, k, v, mask, o);
        break;
    case 5:
        rc = launch_nd<T, 5>(s, grid, block, a, q, k, v, mask, o);
        break;
    case 6:
        rc = launch_nd<T, 6>(s, grid, block, a, q, k, v, mask, o);
        break;
    case 7:
        rc = launch_nd<T, 7>(s, grid, block, a, q, k, v, mask, o);
        break;
    default:
        rc = launch_nd<T, 8>(s, grid, block, a, q, k, v, mask, o);
        break;
    }
    if (rc != 0)
        return rc;
    *done = true;
    return (int)cudaGetLastError();
}

} // namespace

extern "C" int kc_attention_run(void *s, int dt, const kc_attention *a, const void *q,
                                const void *k, const void *v, const void *mask, void *o) {
    if (a->batch * a->heads * a->sq == 0 || a->dv == 0)
        return 0;
    if (a->d > 32 * kMaxPerLane || a->dv > 32 * kMaxPerLane)
        return (int)cudaErrorNotSupported;
    cudaStream_t st = (cudaStream_t)s;
    bool done = false;
    int rc = 0;
    if (dt == KC_DT_F16)
        rc = launch_mma<__half>(st, a, q, k, v, mask, o, &done);
    else if (dt == KC_DT_BF16)
        rc = launch_mma<__nv_bfloat16>(st, a, q, k, v, mask, o, &done);
    if (rc != 0 || done)
        return rc;
    KC_FLOAT_DISPATCH(dt, T, return launch_rows<T>(st, a, q, k, v, mask, o));
    return 0;
}
