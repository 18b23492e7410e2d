/* Private to the GEMM files: the micro-kernel contract shared by the per-ISA implementations. */
#ifndef KN_CPU_GEMM_KERNEL_H
#define KN_CPU_GEMM_KERNEL_H

#include <stdint.h>

/* The part of the epilogue a micro-kernel applies while the tile is still in registers, with
 * pointers already offset to the tile: y = clamp(y + bias + residual, lo, hi). Activations that
 * are not a clamp run afterwards on the stored tile. */
typedef struct kn_ukr_ep {
    const float *bias_row; /* one per tile row, or NULL */
    const float *bias_col; /* one per tile column, or NULL */
    const float *res;      /* tile of the residual, or NULL */
    int64_t ldr;
    int clamp; /* apply [lo, hi] */
    float lo, hi;
    int act; /* KN_UKR_ACT_*, after the clamp; only for kernels with act_in_regs */
    /* Floats past each tile row of C and of the residual whose lines the kernel fetches while
     * it stores this tile, for a tile to come (0: none; set by gemm.c's tile_ep). Kernels may
     * ignore them. */
    int64_t pf_c, pf_r;
} kn_ukr_ep;

enum { KN_UKR_ACT_NONE = 0, KN_UKR_ACT_SIGMOID, KN_UKR_ACT_SWISH };

/* c (mr x nr of an MR x NR tile, leading dimension ldc) = alpha * A*B + beta * c, then the
 * epilogue when ep is not NULL; a holds kc columns of MR rows (a[k*MR + i]) and b holds kc rows
 * of NR columns (b[k*NR + j]), both zero-padded to full MR/NR. beta == 0 never reads c. */
typedef void (*kn_gemm_ukr_fn)(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                               float alpha, float beta, int mr, int nr, const kn_ukr_ep *ep);

/* A tile whose B is read in place through per-k offsets (kn_gemm_gather): B row k of the tile is
 * b + off[k], its first vector n0 lanes there, its second n1 lanes at + b1; in C (and the
 * residual) the second vector's columns start c1 after the first's. */
typedef struct kn_gather_tile {
    const float *b;
    const int64_t *off;
    int64_t b1, c1;
    int n0, n1;
} kn_gather_tile;

typedef void (*kn_gemm_gather_fn)(int64_t kc, const float *a, const kn_gather_tile *t, float *c,
                                  int64_t ldc, float beta, int mr, const kn_ukr_ep *ep);

typedef struct kn_gemm_ukr {
    const char *name;
    int mr, nr;
    kn_gemm_ukr_fn fn;
    /* Optional: fn fetching B's packed panel ahead, for a B packed once at load (constant
     * weights), which comes from L2 or further on a panel's first row tile; NULL: fn. */
    kn_gemm_ukr_fn fn_b_ahead;
    /* Optional cheaper kernels for edge tiles with mr <= MR/2 and/or nr <= NR/2 (same packed
     * layout, less padded work); NULL when the ISA has none. */
    kn_gemm_ukr_fn fn_half_m, fn_half_n, fn_half_mn;
    /* Optional kernel for the last few columns (nr <= narrow_n) of a panel: vectors run down
     * the tile's rows instead of along its columns, so a 1-column remainder (7x7 maps: 49 =
     * 32 + 16 + 1) costs one multiply-add per k instead of a whole padded vector row. b still
     * has the panel's NR stride. */
    kn_gemm_ukr_fn fn_narrow_n;
    int narrow_n;
    /* Optional: an mr x nr tile, mr > MR * 2 / 3, of nr = NR / 2 + w or NR + w columns
     * (1 <= w <= narrow_n) in one pass: the last w columns' b at b + NR / 2 (the same panel) or
     * at b + NR * kc (the next panel, same stride). Applies the whole epilogue, activation
     * included, in registers; ldc and ep->ldr must be at most INT32_MAX / MR. */
    kn_gemm_ukr_fn fn_tail;
    /* Optional: any mr x nr tile with B read in place (b[k * ldb + j], only j < nr touched) for
     * a plain row-major B, so small-k products skip packing B. */
    void (*fn_direct)(int64_t kc, const float *a, const float *b, int64_t ldb, float *c,
                      int64_t ldc, float alpha, float beta, int mr, int nr, const kn_ukr_ep *ep);
    /* Optional kernel for single-row tiles (mr == 1), same packed layout. */
    kn_gemm_ukr_fn fn_m1;
    /* Optional kernels for edge tiles of <= 8 and <= 4 rows (full width and half width). */
    kn_gemm_ukr_fn fn_rows8, fn_rows8_half_n, fn_rows4, fn_rows4_half_n;
    /* Optional: any mr x (n0 + n1) tile with B gathered by offsets (kn_gather_tile). */
    kn_gemm_gather_fn fn_gather;
    /* Optional matrix-vector product over packed A: y[s * MR + i] += sum over k < kc of
     * a[s * kc * MR + k * MR + i] * x[k * ldx], for the `strips` panels of one K slice; y holds
     * strips * MR floats. */
    void (*fn_gemv)(int64_t kc, const float *a, int64_t strips, const float *x, int64_t ldx,
                    float *y);
    /* Optional: one MR-row panel of a row-major A into the kernels' layout, dst[k * MR + i] =
     * a[i * lda + k] for k < kc and i < rows, zero for rows <= i < MR. */
    void (*fn_pack_a)(const float *a, int64_t lda, int64_t kc, int rows, float *dst);
    /* Whether fn, its half and row variants, fn_direct and fn_gather apply kn_ukr_ep.act
     * (sigmoid, SiLU) in registers; the others (narrow, m1) never do. */
    int act_in_regs;
} kn_gemm_ukr;

extern const kn_gemm_ukr kn_gemm_ukr_avx512;
extern const kn_gemm_ukr kn_gemm_ukr_avx2;
extern const kn_gemm_ukr kn_gemm_ukr_scalar;

/* The epilogue on an already stored mr x nr tile (edge tiles and the portable kernel). */
static inline void kn_ukr_ep_apply(const kn_ukr_ep *ep, float *c, int64_t ldc, int mr, int nr) {
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) {
            float v = c[i * ldc + j];
            if (ep->bias_row != 0)
                v += ep->bias_row[i];
            if (ep->bias_col != 0)
                v += ep->bias_col[j];
            if (ep->res != 0)
                v += ep->res[i * ep->ldr + j];
            if (ep->clamp) {
                v = v < ep->lo ? ep->lo : v;
                v = v > ep->hi ? ep->hi : v;
            }
            c[i * ldc + j] = v;
        }
}

#endif
