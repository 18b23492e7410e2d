// Data movement: one strided gather serves Transpose, Slice and Expand; row copies serve
// Concat; Gather along an axis.
#include "backend/cuda/cuda_kernels.h"

#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;

struct view {
    int32_t rank;
    int64_t dims[KC_MAX_RANK];
    int64_t strides[KC_MAX_RANK];
    int64_t base;
};

template <typename T> __global__ void k_strided(const view v, int64_t n, const T *x, T *y) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t idx = i, off = v.base;
        for (int d = v.rank - 1; d >= 0; d--) {
            int64_t q = idx / v.dims[d];
            off += (idx - q * v.dims[d]) * v.strides[d];
            idx = q;
        }
        y[i] = x[off];
    }
}

// The same in 32-bit index arithmetic, for views whose element count and source offsets fit:
// a 64-bit division is a long software sequence and this kernel paid one per dim per element
// (an NCHW -> NHWC reorder of a batch-64 input ran at a tenth of the bandwidth).
template <typename T> __global__ void k_strided32(const view v, unsigned n, const T *x, T *y) {
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        unsigned idx = i, off = (unsigned)v.base;
        for (int d = v.rank - 1; d >= 0; d--) {
            unsigned dim = (unsigned)v.dims[d], q = idx / dim;
            off += (idx - q * dim) * (unsigned)v.strides[d];
            idx = q;
        }
        y[i] = x[off];
    }
}

template <typename T>
__global__ void k_rows(const T *x, T *y, int64_t outer, int64_t inner_x, int64_t inner_y,
                       int64_t offset) {
    int64_t n = outer * inner_x;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t o = i / inner_x, j = i - o * inner_x;
        y[o * inner_y + offset + j] = x[i];
    }
}

template <typename T, typename I>
__global__ void k_gather(const T *x, const I *idx, T *y, int64_t outer, int64_t axis_n,
                         int64_t n_idx, int64_t inner, unsigned *bad) {
    int64_t n = outer * n_idx * inner;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t in = i % inner, r = i / inner;
        int64_t j = r % n_idx, o = r / n_idx;
        int64_t k = (int64_t)idx[j];
        if (k < 0)
            k += axis_n;
        // An index out of range reads element 0 of the row rather than faulting, and raises
        // the stream's flag: the host reports it as an error once the stream is done.
        if (k < 0 || k >= axis_n) {
            if (bad != nullptr)
                *bad = 1u;
            k = 0;
        }
        y[i] = x[(o * axis_n + k) * inner + in];
    }
}

// Split of [outer, inner_x] rows into up to kMaxSplit outputs by column ranges
// [off[p], off[p + 1]), in units of U (the widest of 16, 8, 4, 2, 1 bytes that every range and
// pointer allows): one launch for all outputs.
constexpr int kMaxSplit = 4;
struct split_args {
    int64_t outer, inner_x;
    int n;
    int64_t off[kMaxSplit + 1];
    void *y[kMaxSplit];
};

template <typename U> __global__ void k_split(const split_args a, const U *x) {
    int64_t n = a.outer * a.inner_x;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t o = i / a.inner_x, j = i - o * a.inner_x;
        int p = 0;
        while (p + 1 < a.n && j >= a.off[p + 1])
            p++;
        int64_t w = a.off[p + 1] - a.off[p];
        static_cast<U *>(a.y[p])[o * w + (j - a.off[p])] = x[i];
    }
}

unsigned grid_for(int64_t n) {
    int64_t g = (n + kThreads - 1) / kThreads;
    if (g < 1)
        g = 1;
    return (unsigned)(g > 65535 * 8 ? 65535 * 8 : g);
}

template <template <typename> class F, typename... A> int by_size(int elem_size, A... a) {
    switch (elem_size) {
    case 1:
        return F<uint8_t>::run(a...);
    case 2:
        return F<uint16_t>::run(a...);
    case 4:
        return F<uint32_t>::run(a...);
    case 8:
        return F<uint64_t>::run(a...);
    default:
        return (int)cudaErrorNotSupported;
    }
}

template <typename T> struct strided_run {
    static int run(cudaStream_t s, view v, int64_t n, bool small, const void *x, void *y) {
        if (small)
            k_strided32<T><<<grid_for(n), kThreads, 0, s>>>(v, (unsigned)n, (const T *)x, (T *)y);
        else
            k_strided<T><<<grid_for(n), kThreads, 0, s>>>(v, n, (const T *)x, (T *)y);
        return (int)cudaGetLastError();
    }
};

template <typename T> struct rows_run {
    static int run(cudaStream_t s, const void *x, void *y, int64_t outer, int64_t ix, int64_t iy,
                   int64_t off) {
        k_rows<T>
            <<<grid_for(outer * ix), kThreads, 0, s>>>((const T *)x, (T *)y, outer, ix, iy, off);
        return (int)cudaGetLastError();
    }
};

template <typename T> struct gather_run {
    static int run(cudaStream_t s, const void *x, const void *idx, int idx64, void *y,
                   int64_t outer, int64_t axis_n, int64_t n_idx, int64_t inner, unsigned *bad) {
        unsigned g = grid_for(outer * n_idx * inner);
        if (idx64)
            k_gather<T, int64_t><<<g, kThreads, 0, s>>>((const T *)x, (const int64_t *)idx, (T *)y,
                                                        outer, axis_n, n_idx, inner, bad);
        else
            k_gather<T, int32_t><<<g, kThreads, 0, s>>>((const T *)x, (const int32_t *)idx, (T *)y,
                                                        outer, axis_n, n_idx, inner, bad);
        return (int)cudaGetLastError();
    }
};

} // namespace

extern "C" int kc_strided_copy(void *s, int rank, const int64_t *dims, const int64_t *src_strides,
                               int64_t src_base, const void *x, void *y, int elem_size) {
    view v = {};
    v.base = src_base;
    int64_t n = 1;
    // Dims of 1 dropped, and a dim merged into the one before it where the source walks the
    // two as one (a Slice of whole rows, the untouched dims of a Transpose): fewer divisions.
    for (int d = 0; d < rank; d++) {
        n *= dims[d];
        if (dims[d] == 1)
            continue;
        if (v.rank > 0 && v.strides[v.rank - 1] == src_strides[d] * dims[d]) {
            v.dims[v.rank - 1] *= dims[d];
            v.strides[v.rank - 1] = src_strides[d];
            continue;
        }
        v.dims[v.rank] = dims[d];
        v.strides[v.rank] = src_strides[d];
        v.rank++;
    }
    if (n == 0)
        return 0;
    // 32-bit indexing when the count and every source offset (base plus the walk's extremes,
    // strides of either sign) stay below 2^31.
    int64_t lo = src_base, hi = src_base;
    for (int d = 0; d < v.rank; d++) {
        int64_t span = (v.dims[d] - 1) * v.strides[d];
        if (span < 0)
            lo += span;
        else
            hi += span;
    }
    const int64_t limit = (int64_t)1 << 31;
    const bool small = n < limit && lo >= 0 && hi < limit;
    return by_size<strided_run>(elem_size, (cudaStream_t)s, v, n, small, x, y);
}

extern "C" int kc_copy_rows(void *s, const void *x, void *y, int64_t outer, int64_t inner_x,
                            int64_t inner_y, int64_t offset, int elem_size) {
    if (outer * inner_x == 0)
        return 0;
    return by_size<rows_run>(elem_size, (cudaStream_t)s, x, y, outer, inner_x, inner_y, offset);
}

extern "C" int kc_split(void *s, const void *x, int n, void *const *y, const int64_t *widths,
                        int64_t outer, int elem_size) {
    if (n < 1 || n > kMaxSplit || elem_size < 1)
        return (int)cudaErrorNotSupported;
    split_args a;
    a.outer = outer;
    a.n = n;
    a.off[0] = 0;
    uintptr_t bits = (uintptr_t)x;
    for (int p = 0; p < n; p++) {
        a.off[p + 1] = a.off[p] + widths[p] * elem_size; // bytes, for now
        a.y[p] = y[p];
        bits |= (uintptr_t)y[p] | (uintptr_t)(widths[p] * elem_size);
    }
    int64_t unit = (bits & 15) == 0  ? 16
                   : (bits & 7) == 0 ? 8
                   : (bits & 3) == 0 ? 4
                   : (bits & 1) == 0 ? 2
                                     : 1;
    for (int p = 0; p <= n; p++)
        a.off[p] /= unit;
    a.inner_x = a.off[n];
    if (outer * a.inner_x == 0)
        return 0;
    cudaStream_t st = (cudaStream_t)s;
    unsigned g = grid_for(outer * a.inner_x);
    switch (unit) {
    case 16:
        k_split<uint4><<<g, kThreads, 0, st>>>(a, (const uint4 *)x);
        break;
    case 8:
        k_split<uint64_t><<<g, kThreads, 0, st>>>(a, (const uint64_t *)x);
        break;
    case 4:
        k_split<uint32_t><<<g, kThreads, 0, st>>>(a, (const uint32_t *)x);
        break;
    case 2:
        k_split<uint16_t><<<g, kThreads, 0, st>>>(a, (const uint16_t *)x);
        break;
    default:
        k_split<uint8_t><<<g, kThreads, 0, st>>>(a, (const uint8_t *)x);
    }
    return (int)cudaGetLastError();
}

extern "C" int kc_gather(void *s, const void *x, const void *idx, int idx64, void *y, int64_t outer,
                         int64_t axis_n, int64_t n_idx, int64_t inner, int elem_size,
                         unsigned *bad) {
    if (outer * n_idx * inner == 0)
        return 0;
    return by_size<gather_run>(elem_size, (cudaStream_t)s, x, idx, idx64, y, outer, axis_n, n_idx,
                               inner, bad);
}
