// Tensor-core building blocks of the module's own matrix kernels (attention, 1x1 convolution):
// mma.sync m16n8k16 with float32 accumulators, asynchronous 16-byte copies into shared memory,
// and ldmatrix fragment loads. Fragment coordinates (PTX ISA, mma m16n8k16): lane = 4 g + t; an
// A register holds row g or g + 8, columns 2t, 2t + 1 (+ 8); a B register rows 2t, 2t + 1 (+ 8)
// of column g; an accumulator row g (c0, c1) or g + 8 (c2, c3), columns 2t, 2t + 1.
#ifndef KN_CUDA_KERNELS_MMA_CUH
#define KN_CUDA_KERNELS_MMA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace kc_mma {

template <typename T> struct mma_op;
template <> struct mma_op<__half> {
    __device__ static void run(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    __device__ static uint32_t pack(float lo, float hi) {
        __half2 h = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&h);
    }
};
template <> struct mma_op<__nv_bfloat16> {
    __device__ static void run(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    __device__ static uint32_t pack(float lo, float hi) {
        __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&h);
    }
};

template <typename T> __device__ __forceinline__ uint32_t ld32(const T *p) {
    return *reinterpret_cast<const uint32_t *>(p);
}

// 16 bytes global -> shared without passing through registers (cp.async, sm_80 on); zeros when
// !in (src is then not read).
__device__ __forceinline__ void cp16(void *dst, const void *src, bool in) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
                 "r"(in ? 16 : 0));
}
__device__ __forceinline__ void cp_commit() {
    asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> __device__ __forceinline__ void cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Four 8x8 16-bit matrices from shared memory, transposed (ldmatrix .trans): lane L gives the
// address of row L % 8 of matrix L / 8, and receives in r[m] the two elements of matrix m's
// column L / 4 at rows 2 (L % 4) and 2 (L % 4) + 1: the B operand of mma from a row-major tile.
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const void *p) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

// Four 8x8 16-bit matrices from shared memory as stored (ldmatrix): lane L gives the address
// of row L % 8 of matrix L / 8, and receives in r[m] the elements of matrix m's row L / 4 at
// columns 2 (L % 4) and 2 (L % 4) + 1: an A operand from a row-major tile, or two B operands
// from a tile stored [n][k].
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void *p) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

} // namespace kc_mma

#endif
