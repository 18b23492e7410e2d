// Fused attention, softmax(Q K^T * scale + mask) V per (batch, head), in one kernel: the scores
// never reach global memory. Accumulation and the softmax are float32 whatever the I/O type.
//
// Two kernels:
//  - k_attn_tc (float16, bfloat16; head size a multiple of 16 up to 128, keys up to what fits
//    in shared memory): a CTA of 4 warps takes 64 query rows of one (batch, head); Q and K, then
//    V in their room, are staged in shared memory, Q K^T and P V run on tensor cores (WMMA
//    16x16x16, float32 accumulators), each warp normalises its 16 score rows in shared memory in
//    between.
//  - k_attn_rows (everything else, float32 included): one warp per query row, one pass over
//    the keys with a running maximum (online softmax), the row's dot products by warp shuffles.
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/kernels_float.cuh"

#include <float.h>
#include <mma.h>

namespace {

constexpr int kRowsPerCta = 64; // tensor-core kernel: 4 warps x 16 query rows
constexpr int kMaxPerLane = 8;  // row kernel: head size up to 32 x 8
constexpr size_t kMaxSmem = 227 * 1024;
constexpr int kMaxKeys = 512; // tensor-core kernel: scores of a row held in registers

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
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

// Shared memory of k_attn_tc (byte offsets): region A holds Q [64][d+8] and K [skp][d+8] while
// the scores are computed, then V [skp][d+8]; region S holds the float32 scores [64][ld_s], then
// in each row the probabilities in T (its first skp * sizeof(T) bytes) and the float32 output
// (from byte o_col on); a mask row shared by every query (float32 [skp]) comes last. Loading V
// after the scores lets it reuse Q and K's room: 61 KB instead of 80 KB for d 64 and 128 keys,
// three CTAs an SM instead of two. The pads keep rows off the same banks and every WMMA pointer
// 32-byte aligned.
struct tc_layout {
    int ld, ld_s, o_col; // T elements a Q/K/V row; floats a score row; float column of the output
    size_t q_off, k_off, v_off, s_off, m_off, bytes;
};

__host__ __device__ inline tc_layout tc_layout_of(int d, int skp, int elem) {
    tc_layout t;
    t.ld = d + 8;
    t.o_col = ((skp * elem + 31) / 32 * 32) / 4;
    int need = t.o_col + d + 4;
    t.ld_s = (skp + 4 > need ? skp + 4 : need + 3) / 4 * 4;
    size_t q = (size_t)kRowsPerCta * t.ld * elem, kv = (size_t)skp * t.ld * elem;
    size_t a = q + kv;
    t.q_off = 0;
    t.k_off = q;
    t.v_off = 0;
    t.s_off = (a + 127) / 128 * 128;
    t.m_off = t.s_off + (size_t)kRowsPerCta * t.ld_s * 4;
    t.bytes = t.m_off + (size_t)skp * 4;
    return t;
}

// Copies rows [0, n) of a strided [rows, d] matrix into shared memory with pitch ld, zeros
// for rows in [n, rows): 16-byte vectors (d and the row stride are multiples of 8), issued
// kBatch at a time per thread so that the loads are in flight together.
template <typename T>
__device__ void stage(T *dst, int ld, const T *__restrict__ src, int64_t stride, int64_t n,
                      int rows, int d) {
    constexpr int kBatch = 8;
    const int chunks = d / 8, total = rows * chunks, step = (int)blockDim.x;
    for (int base = (int)threadIdx.x; base < total; base += step * kBatch) {
        uint4 val[kBatch];
#pragma unroll
        for (int u = 0; u < kBatch; u++) {
            int t = base + u * step, r = t / chunks, c = t - r * chunks;
            val[u] = make_uint4(0, 0, 0, 0);
            if (t < total && r < n)
                val[u] = __ldg(reinterpret_cast<const uint4 *>(src + r * stride + c * 8));
        }
#pragma unroll
        for (int u = 0; u < kBatch; u++) {
            int t = base + u * step, r = t / chunks, c = t - r * chunks;
            if (t < total)
                *reinterpret_cast<uint4 *>(dst + r * ld + c * 8) = val[u];
        }
    }
}

// NC: 32-key chunks of a score row each lane holds (skp <= 32 * NC).
template <typename T, int NC>
__global__ void k_attn_tc(kc_attention a, int skp, const T *q, const T *k, const T *v,
                          const T *mask, T *o) {
    using namespace nvcuda;
    extern __shared__ __align__(128) unsigned char smem[];
    const int d = (int)a.d;
    tc_layout L = tc_layout_of(d, skp, (int)sizeof(T));
    T *qs = reinterpret_cast<T *>(smem + L.q_off);
    T *ks = reinterpret_cast<T *>(smem + L.k_off);
    T *vs = reinterpret_cast<T *>(smem + L.v_off);
    float *ss = reinterpret_cast<float *>(smem + L.s_off);
    T *ps = reinterpret_cast<T *>(smem + L.s_off);
    float *ms = reinterpret_cast<float *>(smem + L.m_off);
    const int ld_p = (int)(L.ld_s * 4 / sizeof(T));

    int64_t blocks_per_bh = (a.sq + kRowsPerCta - 1) / kRowsPerCta;
    int64_t bh = blockIdx.x / blocks_per_bh;
    int64_t i0 = (blockIdx.x - bh * blocks_per_bh) * kRowsPerCta;
    int64_t h = bh % a.heads, b = bh / a.heads;
    int64_t rows_here = a.sq - i0 < kRowsPerCta ? a.sq - i0 : kRowsPerCta;
    stage(qs, L.ld, q + b * a.q_stride[0] + h * a.q_stride[1] + i0 * a.q_stride[2], a.q_stride[2],
          rows_here, kRowsPerCta, d);
    stage(ks, L.ld, k + b * a.k_stride[0] + h * a.k_stride[1], a.k_stride[2], a.sk, skp, d);
    // A mask row every query shares (a padding mask [B, 1, 1, S]) is read once into shared
    // memory; a per-query mask is read from global memory in the softmax.
    const bool shared_mask = mask != nullptr && a.m_stride[2] == 0;
    const T *mb = mask ? mask + b * a.m_stride[0] + h * a.m_stride[1] : nullptr;
    if (shared_mask)
        for (int j = (int)threadIdx.x; j < a.sk; j += (int)blockDim.x)
            ms[j] = kc_widen(mb[j * a.m_stride[3]]);
    __syncthreads();

    const int warp = (int)(threadIdx.x / 32), lane = (int)(threadIdx.x % 32);
    const int r0 = warp * 16;
    // Scores of the warp's 16 rows: S = Q K^T (K^T is K read column-major).
    for (int n = 0; n < skp / 16; n++) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.f);
        for (int kk = 0; kk < d / 16; kk++) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
            wmma::load_matrix_sync(fa, qs + r0 * L.ld + kk * 16, L.ld);
            wmma::load_matrix_sync(fb, ks + n * 16 * L.ld + kk * 16, L.ld);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(ss + r0 * L.ld_s + n * 16, acc, L.ld_s, wmma::mem_row_major);
    }
    __syncthreads(); // every warp is done with Q and K: their room takes V
    stage(vs, L.ld, v + b * a.v_stride[0] + h * a.v_stride[1], a.v_stride[2], a.sk, skp, d);
    // Softmax of each row, written back over the row as T (each lane holds its scores of the
    // row in registers first: NC of them), while V's loads are in flight.
    for (int r = r0; r < r0 + 16; r++) {
        int64_t i = i0 + r;
        float sv[NC];
        const T *mr = mask && !shared_mask && i < a.sq ? mb + i * a.m_stride[2] : nullptr;
        float m = -FLT_MAX;
#pragma unroll
        for (int c = 0; c < NC; c++) {
            int j = lane + 32 * c;
            float s = -INFINITY;
            if (j < a.sk && i < a.sq)
                s = ss[r * L.ld_s + j] * a.scale + (shared_mask ? ms[j]
                                                    : mr        ? kc_widen(mr[j * a.m_stride[3]])
                                                                : 0.f);
            sv[c] = s;
            m = fmaxf(m, s);
        }
        m = warp_max(m);
        float sum = 0.f;
#pragma unroll
        for (int c = 0; c < NC; c++) {
            sv[c] = expf(sv[c] - m);
            sum += sv[c];
        }
        sum = warp_sum(sum);
        float inv = i < a.sq ? 1.f / sum : 0.f;
        __syncwarp();
#pragma unroll
        for (int c = 0; c < NC; c++) {
            int j = lane + 32 * c;
            if (j < skp)
                ps[r * ld_p + j] = kc_narrow<T>(sv[c] * inv);
        }
        __syncwarp();
    }
    __syncthreads(); // V is staged
    // O = P V for the warp's rows, a 16-column tile at a time, stored beside P in each row.
    float *os = ss + L.o_col;
    for (int dn = 0; dn < d / 16; dn++) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.f);
        for (int kt = 0; kt < skp / 16; kt++) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
            wmma::load_matrix_sync(fa, ps + r0 * ld_p + kt * 16, ld_p);
            wmma::load_matrix_sync(fb, vs + kt * 16 * L.ld + dn * 16, L.ld);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(os + r0 * L.ld_s + dn * 16, acc, L.ld_s, wmma::mem_row_major);
    }
    __syncwarp();
    for (int r = r0; r < r0 + 16; r++) {
        int64_t i = i0 + r;
        if (i >= a.sq)
            break;
        T *orow = o + b * a.o_stride[0] + h * a.o_stride[1] + i * a.o_stride[2];
        for (int c = lane; c < d; c += 32)
            orow[c] = kc_narrow<T>(os[r * L.ld_s + c]);
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

// One instantiation of the tensor-core kernel, its shared-memory limit raised once per size (the
// warm-up run does it, before any stream capture).
template <typename T, int NC>
int launch_tc_nc(cudaStream_t s, const kc_attention *a, int skp, size_t bytes, int64_t blocks,
                 const void *q, const void *k, const void *v, const void *mask, void *o) {
    static size_t allowed = 48 * 1024;
    if (bytes > allowed) {
        cudaError_t err = cudaFuncSetAttribute(
            k_attn_tc<T, NC>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
        if (err != cudaSuccess)
            return (int)err;
        allowed = bytes;
    }
    k_attn_tc<T, NC><<<(unsigned)blocks, 128, bytes, s>>>(*a, skp, (const T *)q, (const T *)k,
                                                          (const T *)v, (const T *)mask, (T *)o);
    return (int)cudaGetLastError();
}

// The tensor-core kernel takes the call when the head sizes, strides and addresses suit it and
// its shared memory fits; 0 with *done false otherwise.
template <typename T>
int launch_tc(cudaStream_t s, const kc_attention *a, const void *q, const void *k, const void *v,
              const void *mask, void *o, bool *done) {
    *done = false;
    if (a->d != a->dv || a->d % 16 != 0 || a->d > 128 || a->sk == 0)
        return 0;
    const int64_t *st[] = {a->q_stride, a->k_stride, a->v_stride};
    for (int t = 0; t < 3; t++)
        if (st[t][0] % 8 || st[t][1] % 8 || st[t][2] % 8)
            return 0;
    if (!aligned16<T>(q) || !aligned16<T>(k) || !aligned16<T>(v))
        return 0;
    int64_t skp = (a->sk + 15) / 16 * 16;
    if (skp > kMaxKeys)
        return 0;
    tc_layout L = tc_layout_of((int)a->d, (int)skp, (int)sizeof(T));
    if (L.bytes > kMaxSmem)
        return 0;
    int64_t blocks = a->batch * a->heads * ((a->sq + kRowsPerCta - 1) / kRowsPerCta);
    int rc = skp <= 32    ? launch_tc_nc<T, 1>(s, a, (int)skp, L.bytes, blocks, q, k, v, mask, o)
             : skp <= 64  ? launch_tc_nc<T, 2>(s, a, (int)skp, L.bytes, blocks, q, k, v, mask, o)
             : skp <= 128 ? launch_tc_nc<T, 4>(s, a, (int)skp, L.bytes, blocks, q, k, v, mask, o)
             : skp <= 256 ? launch_tc_nc<T, 8>(s, a, (int)skp, L.bytes, blocks, q, k, v, mask, o)
                          : launch_tc_nc<T, 16>(s, a, (int)skp, L.bytes, blocks, q, k, v, mask, o);
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
        rc = launch_tc<__half>(st, a, q, k, v, mask, o, &done);
    else if (dt == KC_DT_BF16)
        rc = launch_tc<__nv_bfloat16>(st, a, q, k, v, mask, o, &done);
    if (rc != 0 || done)
        return rc;
    KC_FLOAT_DISPATCH(dt, T, return launch_rows<T>(st, a, q, k, v, mask, o));
    return 0;
}
