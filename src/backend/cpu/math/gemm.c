/* GEMM driver: BLIS-style blocking. For each NC-wide column block and KC-deep slice, B is packed
 * into NR-wide panels (kept in L3/L2), then for each MC-tall row block A is packed into MR-tall
 * panels (kept in L2) and the micro-kernel sweeps MR x NR tiles, B's micro-panel staying in L1.
 * Threads split the output into a few disjoint blocks per thread, claimed dynamically, so no
 * two threads write the same C; when the split cuts rows, B is packed once up front instead of
 * once per row block. Short products with few rows read a plain B in place. Epilogues run on
 * each tile right after its last K slice, while it is still in L1. */
#include "backend/cpu/clones.h"
#include "backend/cpu/math/gemm.h"

#include "backend/cpu/math/gemm_kernel.h"
#include "core/alloc.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#define KC 256
#define MC_TARGET 120
#define NC_TARGET 2048
#define ONE_BLOCK_NC 512
#define ONE_BLOCK_MAX_M 132
/* Below this many multiply-adds, waking other threads costs more than it saves. */
#define PARALLEL_MIN_WORK ((int64_t)1 << 17)
#define TASKS_PER_THREAD 4
#define MIN_TASK_WORK ((int64_t)1 << 16)
/* B is read in place (no packing) when few row tiles would share each packed panel and the depth
 * (concurrent row streams) is small; measured on MobileNetV2's 1x1 convs: 16 rows x 32 deep
 * 192 -> 166 us, but 96 x 16 583 -> 601 us and 384 x 64 98 -> 114 us. Up to 64 rows (one to
 * six tiles re-reading a panel of B from L1) on the Zen 5 box, 1 thread, alone: 32 x 784 x 192
 * 56 -> 45 us, 40 x 784 x 240 81 -> 73, 64 x 3136 x 256 656 -> 453, 64 x 3136 x 64 132 -> 121;
 * 96 rows were slower (61.8 against 56.7 us for 96 x 196 x 576 at 2 threads). */
#define DIRECT_MAX_K 256
#define DIRECT_MAX_M 64
/* Products this short take row tiles outside column panels (see run_block): EfficientNet-B0's
 * 16 -> 96 1x1 conv + SiLU at 112x112 0.56 -> 0.50 ms in the model. */
#define ROWS_OUTER_MAX_K 32
/* ... and so do products up to this deep over a block this wide. */
#define ROWS_OUTER_WIDE_MAX_K 64
#define ROWS_OUTER_WIDE_MIN_N 1024
/* Grids for a packed A with at most this many column panels split rows only (choose_grid). */
#define ROWS_ONLY_MAX_PANELS 2
/* ... by single row tiles from this many multiply-adds a tile. */
#define ROW_TASK_MIN_WORK ((int64_t)1 << 18)
/* ... and grids over at least this many column panels a thread split columns only. */
#define COLUMN_ONLY_MIN_PANELS 3
#define COLUMN_ONLY_MAX_WORK ((int64_t)1 << 24)

#define S_MR 4
#define S_NR 8

static void ukr_scalar(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                       float alpha, float beta, int mr, int nr, const kn_ukr_ep *ep) {
    float acc[S_MR][S_NR] = {{0}};
    for (int64_t k = 0; k < kc; k++) {
        for (int i = 0; i < S_MR; i++)
            for (int j = 0; j < S_NR; j++)
                acc[i][j] += a[i] * b[j];
        a += S_MR;
        b += S_NR;
    }
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) {
            float v = alpha * acc[i][j];
            if (beta != 0.0f)
                v += beta * c[i * ldc + j];
            c[i * ldc + j] = v;
        }
    if (ep != NULL)
        kn_ukr_ep_apply(ep, c, ldc, mr, nr);
}

const kn_gemm_ukr kn_gemm_ukr_scalar = {.name = "scalar", .mr = S_MR, .nr = S_NR, .fn = ukr_scalar};

static const kn_gemm_ukr *active_ukr;
static pthread_once_t select_once = PTHREAD_ONCE_INIT;

static void select_ukr(void) {
    active_ukr = &kn_gemm_ukr_scalar;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (kn_gemm_ukr_avx512.fn != NULL && __builtin_cpu_supports("avx512f"))
        active_ukr = &kn_gemm_ukr_avx512;
    else if (kn_gemm_ukr_avx2.fn != NULL && __builtin_cpu_supports("avx2") &&
             __builtin_cpu_supports("fma"))
        active_ukr = &kn_gemm_ukr_avx2;
#endif
}

static const kn_gemm_ukr *ukr_get(void) {
    pthread_once(&select_once, select_ukr);
    return active_ukr;
}

int kn_gemm_nr(void) {
    return ukr_get()->nr;
}

const char *kn_gemm_isa(void) {
    return ukr_get()->name;
}

bool kn_gemm_force_isa(const char *name) {
    ukr_get();
    const kn_gemm_ukr *all[] = {&kn_gemm_ukr_avx512, &kn_gemm_ukr_avx2, &kn_gemm_ukr_scalar};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (strcmp(all[i]->name, name) != 0 || all[i]->fn == NULL)
            continue;
#if defined(__x86_64__) && defined(__GNUC__)
        if (all[i] == &kn_gemm_ukr_avx512 && !__builtin_cpu_supports("avx512f"))
            return false;
        if (all[i] == &kn_gemm_ukr_avx2 &&
            !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")))
            return false;
#endif
        active_ukr = all[i];
        return true;
    }
    return false;
}

static inline int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}

static inline int64_t max64(int64_t a, int64_t b) {
    return a > b ? a : b;
}

static inline int64_t round_up(int64_t x, int64_t to) {
    return (x + to - 1) / to * to;
}

/* Rows [i0, i0+mc) x [k0, k0+kc) of op(A) into MR-tall panels. */
static void pack_a(const float *a, int64_t lda, bool trans, int64_t i0, int64_t mc, int64_t k0,
                   int64_t kc, int mr, float *dst) {
    const kn_gemm_ukr *u = ukr_get();
    for (int64_t p = 0; p * mr < mc; p++) {
        float *d = dst + p * kc * mr;
        int64_t r0 = i0 + p * mr;
        int rows = (int)min64(mr, mc - p * mr);
        if (!trans && mr == u->mr && u->fn_pack_a != NULL) {
            u->fn_pack_a(a + r0 * lda + k0, lda, kc, rows, d);
        } else if (!trans) {
            for (int r = 0; r < rows; r++) {
                const float *s = a + (r0 + r) * lda + k0;
                for (int64_t kk = 0; kk < kc; kk++)
                    d[kk * mr + r] = s[kk];
            }
            for (int r = rows; r < mr; r++)
                for (int64_t kk = 0; kk < kc; kk++)
                    d[kk * mr + r] = 0.0f;
        } else {
            for (int64_t kk = 0; kk < kc; kk++) {
                const float *s = a + (k0 + kk) * lda + r0;
                for (int r = 0; r < rows; r++)
                    d[kk * mr + r] = s[r];
                for (int r = rows; r < mr; r++)
                    d[kk * mr + r] = 0.0f;
            }
        }
    }
}

/* Rows [k0, k0+kc) x columns [j0, j0+nc) of B (not transposed), row kk multiplied by
 * scale[kk], into NR-wide panels. */
KN_CLONES static void pack_b_scaled(const float *b, int64_t ldb, const float *scale, int64_t k0,
                                    int64_t kc, int64_t j0, int64_t nc, int nr, float *dst) {
    for (int64_t p = 0; p * nr < nc; p++) {
        float *d = dst + p * kc * nr;
        int64_t c0 = j0 + p * nr;
        int cols = (int)min64(nr, nc - p * nr);
        for (int64_t kk = 0; kk < kc; kk++) {
            const float *src = b + (k0 + kk) * ldb + c0;
            float f = scale[k0 + kk], *row = d + kk * nr;
            if (cols == 32) {
                for (int j = 0; j < 32; j++)
                    row[j] = src[j] * f;
            } else {
                for (int j = 0; j < cols; j++)
                    row[j] = src[j] * f;
                for (int j = cols; j < nr; j++)
                    row[j] = 0.0f;
            }
        }
    }
}

/* Rows [k0, k0+kc) x columns [j0, j0+nc) of op(B) into NR-wide panels (rows scaled, when
 * scale is not NULL, only for B not transposed). */
static void pack_b(const float *b, int64_t ldb, bool trans, const float *scale, int64_t k0,
                   int64_t kc, int64_t j0, int64_t nc, int nr, float *dst) {
    if (scale != NULL) {
        pack_b_scaled(b, ldb, scale, k0, kc, j0, nc, nr, dst);
        return;
    }
    for (int64_t p = 0; p * nr < nc; p++) {
        float *d = dst + p * kc * nr;
        int64_t c0 = j0 + p * nr;
        int cols = (int)min64(nr, nc - p * nr);
        if (!trans && cols == nr && nr == 32) {
            /* Constant-size copies compile to vector moves instead of library calls. */
            for (int64_t kk = 0; kk < kc; kk++)
                memcpy(d + kk * nr, b + (k0 + kk) * ldb + c0, 32 * sizeof(float));
        } else if (!trans && cols == nr && nr == 16) {
            for (int64_t kk = 0; kk < kc; kk++)
                memcpy(d + kk * nr, b + (k0 + kk) * ldb + c0, 16 * sizeof(float));
        } else if (!trans) {
            for (int64_t kk = 0; kk < kc; kk++) {
                memcpy(d + kk * nr, b + (k0 + kk) * ldb + c0, (size_t)cols * sizeof(float));
                for (int j = cols; j < nr; j++)
                    d[kk * nr + j] = 0.0f;
            }
        } else {
            for (int j = 0; j < cols; j++) {
                const float *s = b + (c0 + j) * ldb + k0;
                for (int64_t kk = 0; kk < kc; kk++)
                    d[kk * nr + j] = s[kk];
            }
            for (int64_t kk = 0; kk < kc; kk++)
                for (int j = cols; j < nr; j++)
                    d[kk * nr + j] = 0.0f;
        }
    }
}

struct kn_gemm_packed {
    const kn_gemm_ukr *ukr; /* the panel geometry it was packed for */
    int64_t rows, k, pad;   /* pad: rows rounded up to the panel height/width */
    float *data;            /* K-slice pc starts at data + pc*pad; panel p at + p*kc*width */
};

static kiln_status packed_alloc(int64_t rows, int64_t k, int width, kn_gemm_packed **out) {
    kn_gemm_packed *p = kn_calloc(1, sizeof *p);
    if (p == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory packing a GEMM operand");
    p->ukr = ukr_get();
    p->rows = rows;
    p->k = k;
    p->pad = round_up(rows, width);
    size_t n = (size_t)(p->pad * (k > 0 ? k : 1));
    p->data = kn_aligned_alloc(n * sizeof(float), 64);
    if (p->data == NULL) {
        kn_free(p);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory packing a GEMM operand");
    }
    *out = p;
    return KILN_OK;
}

kiln_status kn_gemm_pack_a(const float *a, int64_t lda, bool trans, int64_t m, int64_t k,
                           kn_gemm_packed **out) {
    int mr = ukr_get()->mr;
    KN_TRY(packed_alloc(m, k, mr, out));
    for (int64_t pc = 0; pc < k; pc += KC)
        pack_a(a, lda, trans, 0, m, pc, min64(KC, k - pc), mr, (*out)->data + pc * (*out)->pad);
    return KILN_OK;
}

kiln_status kn_gemm_pack_b(const float *b, int64_t ldb, bool trans, int64_t k, int64_t n,
                           kn_gemm_packed **out) {
    int nr = ukr_get()->nr;
    KN_TRY(packed_alloc(n, k, nr, out));
    for (int64_t pc = 0; pc < k; pc += KC)
        pack_b(b, ldb, trans, NULL, pc, min64(KC, k - pc), 0, n, nr,
               (*out)->data + pc * (*out)->pad);
    return KILN_OK;
}

kiln_status kn_gemm_packed_like(const kn_gemm_packed *a, kn_gemm_packed **out) {
    KN_TRY(packed_alloc(a->rows, a->k, a->ukr->mr, out));
    (*out)->ukr = a->ukr;
    return KILN_OK;
}

#define SCALE_PANEL(MR_)                                                                           \
    for (int64_t kk = 0; kk < kc; kk++) {                                                          \
        float f = s[kk];                                                                           \
        for (int r = 0; r < (MR_); r++)                                                            \
            dst[kk * (MR_) + r] = src[kk * (MR_) + r] * f;                                         \
    }

/* One panel (kc rows of mr), the micro-kernels' heights as constants so the rows unroll. */
KN_CLONES static void scale_panel(const float *src, const float *s, int64_t kc, int mr,
                                  float *dst) {
    if (mr == 12) {
        SCALE_PANEL(12)
    } else if (mr == 6) {
        SCALE_PANEL(6)
    } else {
        SCALE_PANEL(mr)
    }
}

typedef struct scale_job {
    const kn_gemm_packed *a;
    const float *s;
    kn_gemm_packed *dst;
    int64_t panels; /* per K slice */
} scale_job;

static void scale_range(void *arg, int64_t begin, int64_t end) {
    const scale_job *j = arg;
    int mr = j->a->ukr->mr;
    for (int64_t t = begin; t < end; t++) {
        int64_t pc = t / j->panels * KC, p = t % j->panels, kc = min64(KC, j->a->k - pc);
        int64_t at = pc * j->a->pad + p * kc * mr;
        scale_panel(j->a->data + at, j->s + pc, kc, mr, j->dst->data + at);
    }
}

void kn_gemm_packed_scale_k(kn_threadpool *pool, const kn_gemm_packed *a, const float *s,
                            kn_gemm_packed *dst) {
    scale_job j = {.a = a, .s = s, .dst = dst, .panels = a->pad / a->ukr->mr};
    int64_t slices = (a->k + KC - 1) / KC;
    /* a task is at least a panel of KC rows: 12K floats */
    kn_parallel_for(a->pad * a->k >= 32768 ? pool : NULL, slices * j.panels, 1, scale_range, &j);
}

void kn_gemm_packed_free(kn_gemm_packed *p) {
    if (p == NULL)
        return;
    kn_free(p->data);
    kn_free(p);
}

typedef struct gemm_job {
    const kn_gemm_ukr *u;
    int64_t m, n, k;
    float alpha, beta;
    const kn_gemm_operand *a, *b;
    float *c;
    int64_t ldc;
    const kn_epilogue *ep;    /* NULL when there is nothing to apply */
    bool ep_act_after;        /* an activation the micro-kernel cannot apply in registers */
    bool direct;              /* B read in place by u->fn_direct, never packed */
    int64_t mc, nc;           /* block sizes, multiples of MR / NR */
    int64_t tm, tn;           /* task grid */
    int64_t units_m, units_n; /* units_n: a last panel of <= tail columns is in the one before */
    int64_t panels_n;
    int tail;     /* columns of a last panel taken with the panel before it by fn_tail, or 0 */
    bool tail_ok; /* fn_tail may run (its scatters reach C and the residual) */
    float *scratch;
    int64_t scratch_a, scratch_b; /* floats per task */
    atomic_int_fast64_t *next;    /* the next task to claim (run_claimed) */
    /* Operands packed once for all tasks (kn_gemm: B where rows are split, A where columns
     * are) are packed by the tasks that read them, a shared item a panel or strip whose pieces
     * are its KC slices (kn_shared_item_fill), so the packing needs no job and no barrier of
     * its own: NULL where there is none. */
    const struct prepack_job *prepack_b;
    const struct prepack_a_job *prepack_a;
    kn_shared_item *b_items, *a_items;
} gemm_job;

static void need_prepacked(const gemm_job *j, int64_t m0, int64_t m1, int64_t n0, int64_t n1);

static kn_gemm_ukr_fn pick(const kn_gemm_ukr *u, int mr, int nr) {
    bool hm = 2 * mr <= u->mr, hn = 2 * nr <= u->nr;
    if (mr == 1 && u->fn_m1 != NULL)
        return u->fn_m1;
    if (mr <= 4 && u->fn_rows4 != NULL)
        return hn ? u->fn_rows4_half_n : u->fn_rows4;
    if (mr > u->mr / 2 && mr <= 8 && u->fn_rows8 != NULL)
        return hn ? u->fn_rows8_half_n : u->fn_rows8;
    if (hm && hn && u->fn_half_mn != NULL)
        return u->fn_half_mn;
    if (hm && u->fn_half_m != NULL)
        return u->fn_half_m;
    if (hn && u->fn_half_n != NULL)
        return u->fn_half_n;
    return u->fn;
}

/* The micro-kernel's share of the epilogue for the tile at (i0, j0), tiles taken rows first
 * (run_block) or not.
 *
 * pf_c / pf_r tell the kernel where to fetch lines of C and the residual for a tile to come
 * while it stores this one: each tile row is a stream in C and another in the residual, 24 for
 * a 12-row tile, and once the tensors no longer fit the L3 (ResNet-50 at batch 8) the hardware
 * prefetcher lost them and every store and residual read waited on memory. Rows first: the
 * tile after next on the same rows; columns first: the next row tile's. ResNet-50 at batch 8,
 * 2 threads: its 64 -> 256 1x1 convs with a residual at 56x56 3.9 -> 2.5 ms, the 128 -> 512
 * ones at 28x28 3.4 -> 2.0 ms, the layers' sum 159 -> 146 ms; batch 1 level. */
static kn_ukr_ep *tile_ep(const gemm_job *j, int64_t i0, int64_t j0, bool rows_outer,
                          kn_ukr_ep *te) {
    const kn_epilogue *ep = j->ep;
    te->bias_row = ep->bias != NULL && ep->bias_per_row ? ep->bias + i0 : NULL;
    te->bias_col = ep->bias != NULL && !ep->bias_per_row ? ep->bias + j0 : NULL;
    te->res = ep->residual != NULL ? ep->residual + i0 * ep->ldr + j0 : NULL;
    te->ldr = ep->ldr;
    te->clamp = ep->act == KN_ACT_RELU || ep->act == KN_ACT_CLIP;
    te->lo = ep->act == KN_ACT_RELU ? 0.0f : ep->alpha;
    te->hi = ep->act == KN_ACT_RELU ? INFINITY : ep->beta;
    te->act = KN_UKR_ACT_NONE;
    te->pf_c = rows_outer ? 2 * j->u->nr : j->u->mr * j->ldc;
    te->pf_r = rows_outer ? 2 * j->u->nr : j->u->mr * ep->ldr;
    return te;
}

/* Sigmoid and SiLU in the micro-kernel's registers, before its only store, where it can: a
 * second pass over the stored tile read it back and wrote it again. */
static bool act_regs(const gemm_job *j, kn_gemm_ukr_fn fn, kn_ukr_ep *te) {
    if (!j->ep_act_after || !j->u->act_in_regs || fn == j->u->fn_m1 || fn == j->u->fn_narrow_n)
        return false;
    if (j->ep->act == KN_ACT_SWISH)
        te->act = KN_UKR_ACT_SWISH;
    else if (j->ep->act == KN_ACT_SIGMOID)
        te->act = KN_UKR_ACT_SIGMOID;
    return te->act != KN_UKR_ACT_NONE;
}

static void run_block(const gemm_job *j, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                      float *buf_a, float *buf_b) {
    const kn_gemm_ukr *u = j->u;
    const kn_gemm_operand *a = j->a, *b = j->b;
    for (int64_t jc = n0, nc; jc < n1; jc += nc) {
        nc = min64(j->nc, n1 - jc);
        if (n1 - jc - nc <= j->tail)
            nc = n1 - jc;
        for (int64_t pc = 0; pc < j->k; pc += KC) {
            int64_t kc = min64(KC, j->k - pc);
            const float *bp;
            if (j->direct) {
                bp = b->p + pc * b->ld + jc;
            } else if (b->packed != NULL) {
                bp = b->packed->data + pc * b->packed->pad + jc * kc;
            } else if (b->pack != NULL) {
                b->pack(b->pack_arg, pc, kc, jc, nc, buf_b);
                bp = buf_b;
            } else {
                pack_b(b->p, b->ld, b->trans, b->scale, pc, kc, jc, nc, u->nr, buf_b);
                bp = buf_b;
            }
            float beta = pc == 0 ? j->beta : 1.0f;
            bool last = pc + kc >= j->k;
            for (int64_t ic = m0; ic < m1; ic += j->mc) {
                int64_t mc = min64(j->mc, m1 - ic);
                const float *ap;
                if (a->packed != NULL) {
                    ap = a->packed->data + pc * a->packed->pad + ic * kc;
                } else {
                    pack_a(a->p, a->ld, a->trans, ic, mc, pc, kc, u->mr, buf_a);
                    ap = buf_a;
                }
                /* Short products (k <= ROWS_OUTER_MAX_K) are bound by their stores: each row
                 * tile then sweeps all the column panels before the next, so C is written as
                 * MR sequential row streams, which the hardware prefetcher follows, rather than
                 * as MR x (rows in the block) streams a panel at a time, each store then waiting
                 * on its line; B's small panels are read again from L2 instead. */
                bool rows_outer = j->k <= ROWS_OUTER_MAX_K ||
                                  (j->k <= ROWS_OUTER_WIDE_MAX_K && nc >= ROWS_OUTER_WIDE_MIN_N);
                int64_t n_jr = (nc + u->nr - 1) / u->nr, n_ir = (mc + u->mr - 1) / u->mr;
                /* A last panel of <= tail columns goes with the one before (see fn_tail). */
                bool fuse = n_jr >= 2 && nc - (n_jr - 1) * u->nr <= j->tail;
                if (fuse)
                    n_jr--;
                for (int64_t t = 0; t < n_jr * n_ir; t++) {
                    int64_t jr = (rows_outer ? t % n_jr : t / n_ir) * u->nr;
                    int64_t ir = (rows_outer ? t / n_jr : t % n_ir) * u->mr;
                    int nr =
                        (int)(fuse && jr == (n_jr - 1) * u->nr ? nc - jr : min64(u->nr, nc - jr));
                    int mr = (int)min64(u->mr, mc - ir);
                    if (j->direct) {
                        float *ct = j->c + (ic + ir) * j->ldc + jc + jr;
                        kn_ukr_ep te, *tep = NULL;
                        bool in_regs = false;
                        if (last && j->ep != NULL) {
                            tep = tile_ep(j, ic + ir, jc + jr, rows_outer, &te);
                            in_regs = act_regs(j, NULL, tep);
                        }
                        u->fn_direct(kc, ap + ir * kc, bp + jr, b->ld, ct, j->ldc, j->alpha, beta,
                                     mr, nr, tep);
                        if (last && j->ep_act_after && !in_regs)
                            kn_act_apply_rows(j->ep->act, j->ep->alpha, j->ep->beta, ct, j->ldc, mr,
                                              nr);
                        continue;
                    }
                    /* A panel's last columns may take the narrow kernel: e.g. 17 = 16 + 1, or
                     * 36 = 32 + 4 with the next panel's 4; tall enough tiles take both parts
                     * in one pass (fn_tail). */
                    int split = nr;
                    bool tail = j->tail_ok && mr > u->mr * 2 / 3 &&
                                (nr > u->nr || (nr > u->nr / 2 && nr <= u->nr / 2 + u->narrow_n));
                    if (tail)
                        split = nr;
                    else if (nr > u->nr)
                        split = u->nr;
                    else if (u->fn_narrow_n != NULL && nr <= u->nr / 2 + u->narrow_n)
                        split = nr <= u->narrow_n ? 0 : nr > u->nr / 2 ? u->nr / 2 : nr;
                    for (int part = 0; part < 2; part++) {
                        int off = part == 0 ? 0 : split, w = part == 0 ? split : nr - split;
                        if (w == 0)
                            continue;
                        int64_t col = jc + jr + off;
                        float *ct = j->c + (ic + ir) * j->ldc + col;
                        kn_gemm_ukr_fn fn = part == 1 ? u->fn_narrow_n
                                            : tail    ? u->fn_tail
                                                      : pick(u, mr, w);
                        if (fn == u->fn && b->packed != NULL && u->fn_b_ahead != NULL)
                            fn = u->fn_b_ahead;
                        kn_ukr_ep te, *tep = NULL;
                        bool in_regs = false;
                        if (last && j->ep != NULL) {
                            tep = tile_ep(j, ic + ir, col, rows_outer, &te);
                            in_regs = act_regs(j, fn, tep);
                        }
                        /* part 1 past the panel (36 = 32 + 4) reads the next panel */
                        const float *bt = off < u->nr ? bp + jr * kc + off
                                                      : bp + (jr + u->nr) * kc + (off - u->nr);
                        fn(kc, ap + ir * kc, bt, ct, j->ldc, j->alpha, beta, mr, w, tep);
                        if (last && j->ep_act_after && !in_regs)
                            kn_act_apply_rows(j->ep->act, j->ep->alpha, j->ep->beta, ct, j->ldc, mr,
                                              w);
                    }
                }
            }
        }
    }
}

static void run_tasks(void *arg, int64_t begin, int64_t end) {
    const gemm_job *j = arg;
    for (int64_t t = begin; t < end; t++) {
        int64_t ti = t / j->tn, tj = t % j->tn;
        int64_t m0 = ti * j->units_m / j->tm * j->u->mr;
        int64_t m1 = min64((ti + 1) * j->units_m / j->tm * j->u->mr, j->m);
        int64_t n0 = tj * j->units_n / j->tn * j->u->nr;
        int64_t n1 = tj == j->tn - 1 ? j->n : (tj + 1) * j->units_n / j->tn * j->u->nr;
        float *scratch = j->scratch != NULL ? j->scratch + t * (j->scratch_a + j->scratch_b) : NULL;
        if (m0 < m1 && n0 < n1) {
            need_prepacked(j, m0, m1, n0, n1);
            run_block(j, m0, m1, n0, n1, scratch, scratch != NULL ? scratch + j->scratch_a : NULL);
        }
    }
}

/* Each thread claims task after task, one at a time: the pool hands out chunks of several
 * once there are more than 8 a thread. */
static void run_claimed(void *arg, int64_t begin, int64_t end) {
    const gemm_job *j = arg;
    (void)begin;
    (void)end;
    for (int64_t t;
         (t = atomic_fetch_add_explicit(j->next, 1, memory_order_relaxed)) < j->tm * j->tn;)
        run_tasks(arg, t, t + 1);
}

/* Split the output into a few tasks per thread, claimed dynamically: a thread that is slow or
 * descheduled (the machine may be shared) then delays only a small share. Columns are split
 * first: each task packs only its own B panels, while splitting rows makes every row task pack
 * the same B again. */
static void choose_grid(gemm_job *j, int threads) {
    j->tm = j->tn = 1;
    int64_t work = j->m * j->n * j->k;
    if (threads <= 1 || work < PARALLEL_MIN_WORK)
        return;
    int64_t target = (int64_t)threads * TASKS_PER_THREAD;
    if (target > work / MIN_TASK_WORK)
        target = work / MIN_TASK_WORK > threads ? work / MIN_TASK_WORK : threads;
    /* Many rows of a packed A and few columns (ResNet-50's 1x1 convs at 7x7: 512 x 49 x 2048):
     * a column split gives each task half of a 2-panel B and all of A's rows to stream, so
     * A crosses the cache once per column task; split by rows only, B shared from L2. */
    if (j->a->packed != NULL && j->units_n <= ROWS_ONLY_MAX_PANELS &&
        j->units_m >= (int64_t)threads * 2) {
        /* Deep ones by single row tiles, claimed one at a time (run_claimed): tasks of 3-4
         * tiles left one thread up to a task behind at the end (MobileNetV2's 960 -> 320 at
         * 7x7, 27 tiles). Shallow tiles stay grouped: one task a 12 x 49 x 160 tile made
         * its 160 -> 960 convs 7 % slower. */
        int64_t tile_work = j->u->mr * j->n * j->k;
        j->tm = tile_work >= ROW_TASK_MIN_WORK ? j->units_m : min64(j->units_m, target);
        return;
    }
    /* Short products over wide rows (MobileNetV2's 16 -> 96 1x1 conv at 112x112, ResNet-50's
     * 64 -> 256 at 56x56) split by columns too: each task packs its own block of B and sweeps
     * all rows over it from cache. Split by rows, every row task streamed the whole of a B
     * packed once for all (800 KB for both) from beyond L2, the other core's half included: on
     * the 2-core Xeon, at 2 threads, 96 x 12544 x 16 354-421 -> 258-280 us, and MobileNetV2's
     * 16 -> 96 in the model 0.371 -> 0.300 ms (docs/perf-notes.md, "Short products on two
     * threads"). */
    if (j->units_n >= target) {
        j->tn = target;
        return;
    }
    j->tn = j->units_n;
    /* Small products with enough column panels for every thread to take three or more: one
     * column task a panel packs its own B, where a row split too would pack B up front behind
     * a barrier of its own (MobileNetV2's 14x14 1x1 convs, 5-11M multiply-adds). Larger ones
     * (ResNet-50's at 14x14, 51M) keep the finer grid: 7 tasks on 2 threads leave one idle
     * for a seventh of the time. */
    if (j->b->packed == NULL && j->units_n >= (int64_t)threads * COLUMN_ONLY_MIN_PANELS &&
        work <= COLUMN_ONLY_MAX_WORK)
        return;
    j->tm = min64(j->units_m, (target + j->tn - 1) / j->tn);
}

static bool ep_needed(const kn_epilogue *ep) {
    return ep != NULL && (ep->bias != NULL || ep->residual != NULL || ep->act != KN_ACT_NONE);
}

static void scale_c(float *c, int64_t ldc, int64_t m, int64_t n, float beta) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t jj = 0; jj < n; jj++)
            c[i * ldc + jj] = beta == 0.0f ? 0.0f : beta * c[i * ldc + jj];
}

/* Everything but the scratch; false when there is no product to run (handled here). */
/* Whether the kernels read a plain B in place (no packing) for m rows over k. */
static bool direct_shape(const kn_gemm_ukr *u, int64_t m, int64_t k) {
    return u->fn_direct != NULL && k <= DIRECT_MAX_K && m <= DIRECT_MAX_M;
}

static bool job_init(gemm_job *j, int threads, int64_t m, int64_t n, int64_t k, float alpha,
                     const kn_gemm_operand *a, const kn_gemm_operand *b, float beta, float *c,
                     int64_t ldc, const kn_epilogue *ep) {
    if (m <= 0 || n <= 0)
        return false;
    const kn_epilogue *epi = ep_needed(ep) ? ep : NULL;
    if (k <= 0) {
        scale_c(c, ldc, m, n, beta);
        if (epi != NULL)
            kn_epilogue_apply(epi, c, ldc, 0, 0, m, n);
        return false;
    }
    *j = (gemm_job){.u = ukr_get(),
                    .m = m,
                    .n = n,
                    .k = k,
                    .alpha = alpha,
                    .beta = beta,
                    .a = a,
                    .b = b,
                    .c = c,
                    .ldc = ldc,
                    .ep = epi};
    j->ep_act_after = epi != NULL && epi->act != KN_ACT_NONE && epi->act != KN_ACT_RELU &&
                      epi->act != KN_ACT_CLIP;
    KN_ASSERT(a->packed == NULL ||
              (a->packed->ukr == j->u && a->packed->rows == m && a->packed->k == k));
    KN_ASSERT(b->packed == NULL ||
              (b->packed->ukr == j->u && b->packed->rows == n && b->packed->k == k));
    KN_ASSERT(b->scale == NULL || (b->packed == NULL && b->pack == NULL && !b->trans));
    j->direct = direct_shape(j->u, m, k) && b->packed == NULL && b->pack == NULL && !b->trans &&
                b->scale == NULL;
    j->units_m = (m + j->u->mr - 1) / j->u->mr;
    j->units_n = j->panels_n = (n + j->u->nr - 1) / j->u->nr;
    int64_t lim = INT32_MAX / j->u->mr;
    j->tail_ok = j->u->fn_tail != NULL && !j->direct && ldc <= lim &&
                 (epi == NULL || epi->residual == NULL || epi->ldr <= lim);
    if (j->tail_ok && j->units_n >= 2 && n % j->u->nr <= j->u->narrow_n && n % j->u->nr > 0) {
        j->tail = (int)(n % j->u->nr);
        j->units_n--;
    }
    choose_grid(j, threads);
    j->mc = MC_TARGET / j->u->mr * j->u->mr;
    /* A few rows over the one block (ResNet-50's 256 -> 128 1x1 conv at 56x56: 120 + 8 rows)
     * made the second block read all of B again for one row tile; take them in one. */
    if (m <= ONE_BLOCK_MAX_M && b->pack == NULL)
        j->mc = round_up(m, j->u->mr);
    int64_t task_n = round_up((j->units_n + j->tn - 1) / j->tn * j->u->nr, j->u->nr);
    j->nc = min64(NC_TARGET / j->u->nr * j->u->nr, task_n);
    /* All of A's rows in one block (m <= mc): each packed B block is read once, right after
     * it is packed, so keep it in L2 (KC x ONE_BLOCK_NC floats, 512 KB) instead of packing
     * NC_TARGET columns (2 MB) and reading them back from L3. The short products keep wide
     * blocks for the rows-first order. */
    if (m <= j->mc && k > ROWS_OUTER_WIDE_MAX_K && b->pack == NULL)
        j->nc = min64(j->nc, ONE_BLOCK_NC / j->u->nr * j->u->nr);
    j->scratch_a = a->packed != NULL ? 0 : round_up(j->mc * KC, 16);
    /* a block may take the tail's panel too (run_block) */
    int64_t nc_max = j->nc + (j->tail > 0 ? j->u->nr : 0);
    j->scratch_b = b->packed != NULL || j->direct ? 0 : round_up(nc_max * KC, 16);
    return true;
}

/* B packed once up front, for grids that split rows: every row task would otherwise pack the
 * same B panels again (for im2col B, the gather). */
typedef struct prepack_job {
    const gemm_job *j;
    const kn_gemm_operand *b;
    int64_t panels, pad;
    float *data;
} prepack_job;

/* Panel p's K slice `slice`. */
static void prepack_piece(void *arg, int64_t p, int32_t slice) {
    const prepack_job *pj = arg;
    const gemm_job *j = pj->j;
    int nr = j->u->nr;
    int64_t pc = (int64_t)slice * KC, kc = min64(KC, j->k - pc), n0 = p * nr,
            nc = min64(nr, j->n - n0);
    float *dst = pj->data + pc * pj->pad + n0 * kc;
    if (pj->b->pack != NULL)
        pj->b->pack(pj->b->pack_arg, pc, kc, n0, nc, dst);
    else
        pack_b(pj->b->p, pj->b->ld, pj->b->trans, pj->b->scale, pc, kc, n0, nc, nr, dst);
}

/* A packed once up front, for grids that split columns: every column task would otherwise
 * pack the same rows of A again (for a 128-row activation times weights, 8 to 16 times). */
typedef struct prepack_a_job {
    const gemm_job *j;
    const kn_gemm_operand *a;
    int64_t strips, pad;
    float *data;
} prepack_a_job;

/* Strip s's K slice `slice`. */
static void prepack_a_piece(void *arg, int64_t s, int32_t slice) {
    const prepack_a_job *pj = arg;
    const gemm_job *j = pj->j;
    int mr = j->u->mr;
    int64_t pc = (int64_t)slice * KC, i0 = s * mr;
    int64_t kc = min64(KC, j->k - pc), mc = min64(mr, j->m - i0);
    pack_a(pj->a->p, pj->a->ld, pj->a->trans, i0, mc, pc, kc, mr,
           pj->data + pc * pj->pad + i0 * kc);
}

/* The prepacked panels of columns [n0, n1) and strips of rows [m0, m1) a task reads. */
static void need_prepacked(const gemm_job *j, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    int32_t slices = (int32_t)((j->k + KC - 1) / KC);
    /* B's panels: help with every one first, so tasks that start together (row tasks of a
     * wide B, all needing every panel) pack different panels instead of one packing while
     * the rest wait for it, panel after panel; then wait for the ones others took */
    for (int64_t p = n0 / j->u->nr; j->prepack_b != NULL && p * j->u->nr < n1; p++)
        kn_shared_item_help(&j->b_items[p], p, slices, prepack_piece, (void *)j->prepack_b);
    if (j->prepack_b != NULL)
        for (int64_t p = n0 / j->u->nr; p * j->u->nr < n1; p++)
            kn_shared_item_fill(&j->b_items[p], p, slices, prepack_piece, (void *)j->prepack_b);
    if (j->prepack_a != NULL)
        for (int64_t s = m0 / j->u->mr; s * j->u->mr < m1; s++)
            kn_shared_item_fill(&j->a_items[s], s, slices, prepack_a_piece, (void *)j->prepack_a);
}

/* One column (squeeze-excitation 1x1 convs on a 1x1 map) with A packed: the tile path ran a
 * 12-row tile at a time, each one chain of k dependent multiply-adds plus a tile epilogue. */
#define GEMV_MAX_ROWS 4096
#define GEMV_PANELS_PER_TASK 8

typedef struct gemv_job {
    const kn_gemm_packed *a;
    const float *x;
    int64_t ldx, strips;
    float *y; /* strips * mr floats */
} gemv_job;

static void gemv_range(void *arg, int64_t begin, int64_t end) {
    const gemv_job *j = arg;
    const kn_gemm_ukr *u = j->a->ukr;
    int64_t s0 = begin * GEMV_PANELS_PER_TASK, s1 = min64(end * GEMV_PANELS_PER_TASK, j->strips);
    for (int64_t pc = 0; pc < j->a->k; pc += KC) {
        int64_t kc = min64(KC, j->a->k - pc);
        u->fn_gemv(kc, j->a->data + pc * j->a->pad + s0 * kc * u->mr, s1 - s0, j->x + pc * j->ldx,
                   j->ldx, j->y + s0 * u->mr);
    }
}

static bool gemv(kn_threadpool *pool, int64_t m, int64_t n, int64_t k, float alpha,
                 const kn_gemm_operand *a, const kn_gemm_operand *b, float beta, float *c,
                 int64_t ldc, const kn_epilogue *ep) {
    const kn_gemm_packed *pa = a->packed;
    if (n != 1 || pa == NULL || pa->ukr != ukr_get() || pa->ukr->fn_gemv == NULL ||
        pa->pad > GEMV_MAX_ROWS || b->p == NULL || b->packed != NULL || b->pack != NULL ||
        b->scale != NULL || b->trans || alpha != 1.0f || beta != 0.0f || ldc != 1 ||
        (ep != NULL && ((ep->bias != NULL && !ep->bias_per_row) || ep->residual != NULL)))
        return false;
    float y[GEMV_MAX_ROWS];
    memset(y, 0, (size_t)pa->pad * sizeof(float));
    gemv_job j = {.a = pa, .x = b->p, .ldx = b->ld, .strips = pa->pad / pa->ukr->mr, .y = y};
    int64_t tasks = (j.strips + GEMV_PANELS_PER_TASK - 1) / GEMV_PANELS_PER_TASK;
    /* Threads only from 64K multiply-adds: the squeeze-excitation products (<= 55K) take a few
     * microseconds, about what waking the pool costs. */
    kn_parallel_for(m * k >= 65536 ? pool : NULL, tasks, 1, gemv_range, &j);
    for (int64_t i = 0; i < m; i++)
        c[i] = y[i] + (ep != NULL && ep->bias != NULL ? ep->bias[i] : 0.0f);
    if (ep != NULL)
        kn_act_apply(ep->act, ep->alpha, ep->beta, c, m);
    return true;
}

/* Deep products over a small output on two threads, split by depth (K): each thread multiplies
 * half of A's columns by half of B's rows into an output of its own (the first into C), and the
 * two are summed, with the epilogue, by rows. A grid of output tiles made each thread read all
 * of A and wait at the end for the other's last tile; split by depth each reads half, and the
 * halves are equal. The 1x1 convs of MobileNetV2's and ResNet-50's narrow stages on the 2-core
 * Xeon, B written by both threads before each call and 8 MB of other memory after (a
 * prototype, medians of 200 calls, minimum of six rounds, us, tiles / depth halves): 160 x 49 x
 * 960 88 / 71-79, 320 x 49 x 960 142-147 / 122-124, 96 x 196 x 576 115-117 / 98-102, 64 x 196
 * x 384 62-67 / 54, 256 x 196 x 1024 455-463 / 382-384, 512 x 49 x 2048 438 / 381. Where the
 * output is large or shallow it loses: 128 x 784 x 512 598 / 666, 64 x 3136 x 256 751 / 892,
 * 1280 x 49 x 320 153-180 / 169-228. In the models at 2 threads (minimum of 6-8 rounds of each
 * layer's median, in turns): MobileNetV2's projections 7-27 % faster (960 -> 320 at 7x7 0.159 ->
 * 0.138 ms, 576 -> 96 at 14x14 0.109 -> 0.092), ResNet-50's 1024 -> 256 at 14x14 0.44-0.45 ->
 * 0.385-0.394, and with B from the conv's im2col packer its stride-2 3x3 convs of 256 and 512
 * channels 1.067 -> 0.920 and 1.146 -> 1.072 (docs/perf-notes.md, "Short products on two
 * threads"). The halves' sum runs in another order than one thread's K slices, so 2 threads give
 * other last bits than 1 or 3 (as the pixel-row convs from 8 threads do); one thread count gives
 * the same bits in every run and context. */
#define KSPLIT_THREADS 2
#define KSPLIT_MAX_MN ((int64_t)64 * 1024)
#define KSPLIT_MIN_K 64

typedef struct ksplit_job {
    const kn_gemm_ukr *u;
    const kn_gemm_packed *a;
    const float *b;
    kn_gemm_pack_fn pack; /* B's packing routine (conv's im2col), or NULL: b is plain */
    void *pack_arg;
    int64_t ldb, m, n, k, half, ldc, b_floats;
    bool direct; /* B read in place by fn_direct (direct_shape), else packed a piece at a time */
    float *c, *part, *bufs; /* part: the second half's m x n sum; bufs: a packed B slice each */
    const kn_epilogue *ep;
} ksplit_job;

static bool ksplit_applies(const kn_gemm_ukr *u, int threads, int64_t m, int64_t n, int64_t k,
                           float alpha, const kn_gemm_operand *a, const kn_gemm_operand *b,
                           float beta) {
    bool plain_b = b->p != NULL && !b->trans && b->scale == NULL;
    return threads == KSPLIT_THREADS && alpha == 1.0f && beta == 0.0f && a->packed != NULL &&
           a->packed->ukr == u && b->packed == NULL && (b->pack != NULL || plain_b) &&
           k >= KSPLIT_MIN_K && k >= 2 * m && m * n <= KSPLIT_MAX_MN &&
           m * n * k >= PARALLEL_MIN_WORK;
}

/* Half p of the depth: columns [k0, k1) of A times rows [k0, k1) of B, B read in place or packed
 * (by pack_b or the caller's routine) a piece of A's KC slice at a time (A's strips are read from
 * inside their slice: element kk of a strip is at kk * MR). */
static void ksplit_half(void *arg, int64_t begin, int64_t end) {
    const ksplit_job *j = arg;
    const kn_gemm_ukr *u = j->u;
    for (int64_t p = begin; p < end; p++) {
        int64_t k0 = p == 0 ? 0 : j->half, k1 = p == 0 ? j->half : j->k;
        float *out = p == 0 ? j->c : j->part, *bb = j->bufs + p * j->b_floats;
        int64_t ldo = p == 0 ? j->ldc : j->n;
        for (int64_t kk = k0, len; kk < k1; kk += len) {
            int64_t pc = kk / KC * KC, slice = min64(KC, j->k - pc);
            len = min64(pc + slice, k1) - kk;
            if (j->pack != NULL)
                j->pack(j->pack_arg, kk, len, 0, j->n, bb);
            else if (!j->direct)
                pack_b(j->b, j->ldb, false, NULL, kk, len, 0, j->n, u->nr, bb);
            float beta = kk == k0 ? 0.0f : 1.0f;
            for (int64_t ir = 0; ir < j->m; ir += u->mr) {
                int rows = (int)min64(u->mr, j->m - ir);
                const float *ap = j->a->data + pc * j->a->pad + ir * slice + (kk - pc) * u->mr;
                for (int64_t jr = 0; jr < j->n; jr += u->nr) {
                    int w = (int)min64(u->nr, j->n - jr);
                    if (j->direct) {
                        u->fn_direct(len, ap, j->b + kk * j->ldb + jr, j->ldb, out + ir * ldo + jr,
                                     ldo, 1.0f, beta, rows, w, NULL);
                        continue;
                    }
                    kn_gemm_ukr_fn fn = w <= u->narrow_n && u->fn_narrow_n != NULL && rows > 1
                                            ? u->fn_narrow_n
                                            : pick(u, rows, w);
                    fn(len, ap, bb + jr * len, out + ir * ldo + jr, ldo, 1.0f, beta, rows, w, NULL);
                }
            }
        }
    }
}

/* C += the second half's sum, then the epilogue, rows [begin, end). */
static void ksplit_sum(void *arg, int64_t begin, int64_t end) {
    const ksplit_job *j = arg;
    for (int64_t r = begin; r < end; r++) {
        float *cr = j->c + r * j->ldc;
        const float *pr = j->part + r * j->n;
        for (int64_t x = 0; x < j->n; x++)
            cr[x] += pr[x];
    }
    if (j->ep != NULL)
        kn_epilogue_apply(j->ep, j->c + begin * j->ldc, j->ldc, begin, 0, end - begin, j->n);
}

/* Runs the product split by depth where ksplit_applies; false if it did not (no scratch). */
static bool ksplit(kn_threadpool *pool, int64_t m, int64_t n, int64_t k, const kn_gemm_operand *a,
                   const kn_gemm_operand *b, float *c, int64_t ldc, const kn_epilogue *ep) {
    const kn_gemm_ukr *u = ukr_get();
    ksplit_job j = {.u = u,
                    .a = a->packed,
                    .b = b->p,
                    .pack = b->pack,
                    .pack_arg = b->pack_arg,
                    .ldb = b->ld,
                    .m = m,
                    .n = n,
                    .k = k,
                    .half = k / 2,
                    .ldc = ldc,
                    .b_floats = round_up(KC * round_up(n, u->nr), 16),
                    .c = c,
                    .ep = ep_needed(ep) ? ep : NULL,
                    .direct = b->pack == NULL && direct_shape(u, m, k)};
    if (j.direct)
        j.b_floats = 0;
    int64_t part_floats = round_up(m * n, 16);
    float *buf =
        kn_threadpool_scratch(pool, (size_t)(part_floats + 2 * j.b_floats) * sizeof(float));
    if (buf == NULL)
        return false;
    j.part = buf;
    j.bufs = buf + part_floats;
    kn_parallel_for(pool, 2, 1, ksplit_half, &j);
    kn_parallel_for(pool, m, (m + 1) / 2, ksplit_sum, &j);
    return true;
}

kiln_status kn_gemm(kn_threadpool *pool, int64_t m, int64_t n, int64_t k, float alpha,
                    const kn_gemm_operand *a, const kn_gemm_operand *b, float beta, float *c,
                    int64_t ldc, const kn_epilogue *ep) {
    if (gemv(pool, m, n, k, alpha, a, b, beta, c, ldc, ep))
        return KILN_OK;
    if (ksplit_applies(ukr_get(), kn_threadpool_size(pool), m, n, k, alpha, a, b, beta) &&
        ksplit(pool, m, n, k, a, b, c, ldc, ep))
        return KILN_OK;
    gemm_job j;
    if (!job_init(&j, kn_threadpool_size(pool), m, n, k, alpha, a, b, beta, c, ldc, ep))
        return KILN_OK;
    int64_t tasks = j.tm * j.tn;
    bool prepack = j.tm > 1 && b->packed == NULL && !j.direct;
    kn_gemm_packed pb = {.ukr = j.u, .rows = n, .k = k, .pad = round_up(n, j.u->nr)};
    kn_gemm_operand bp = {.packed = &pb};
    int64_t pb_floats = prepack ? round_up(pb.pad * k, 16) : 0;
    if (prepack)
        j.scratch_b = 0;
    bool prepack_a = j.tn > 1 && a->packed == NULL;
    kn_gemm_packed pa = {.ukr = j.u, .rows = m, .k = k, .pad = round_up(m, j.u->mr)};
    kn_gemm_operand ap = {.packed = &pa};
    int64_t pa_floats = prepack_a ? round_up(pa.pad * k, 16) : 0;
    if (prepack_a)
        j.scratch_a = 0;
    /* the shared items of B's panels and A's strips, in the float scratch */
    int64_t b_items = prepack ? pb.pad / j.u->nr : 0, a_items = prepack_a ? pa.pad / j.u->mr : 0;
    int64_t items_floats =
        round_up((b_items + a_items) *
                     (int64_t)((sizeof(kn_shared_item) + sizeof(float) - 1) / sizeof(float)),
                 16);
    size_t bytes =
        (size_t)(pb_floats + pa_floats + items_floats + tasks * (j.scratch_a + j.scratch_b)) *
        sizeof(float);
    float *own = NULL, *buf = bytes > 0 ? kn_threadpool_scratch(pool, bytes) : NULL;
    if (bytes > 0 && buf == NULL) {
        buf = own = kn_aligned_alloc(bytes, 64);
        if (own == NULL)
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for GEMM packing buffers");
    }
    /* Both operands may need no packing (A prepacked, B read in place): then there is no
     * buffer, and an offset from NULL is undefined even when it is zero. */
    j.scratch = buf != NULL ? buf + pb_floats + pa_floats + items_floats : NULL;
    if (items_floats > 0) {
        j.b_items = (kn_shared_item *)(buf + pb_floats + pa_floats);
        j.a_items = j.b_items + b_items;
        memset(j.b_items, 0, (size_t)(b_items + a_items) * sizeof(kn_shared_item));
    }
    prepack_a_job pja = {.j = &j, .a = a, .strips = j.units_m, .pad = pa.pad};
    if (prepack_a) {
        pa.data = pja.data = buf + pb_floats;
        j.prepack_a = &pja;
        j.a = &ap;
    }
    prepack_job pjb = {.j = &j, .b = b, .panels = j.panels_n, .pad = pb.pad, .data = buf};
    if (prepack) {
        pb.data = buf;
        j.prepack_b = &pjb;
        j.b = &bp;
    }
    atomic_int_fast64_t next;
    atomic_init(&next, 0);
    j.next = &next;
    int threads = kn_threadpool_size(pool);
    if (tasks > (int64_t)threads * 8)
        kn_parallel_for(pool, threads, 1, run_claimed, &j);
    else
        kn_parallel_for(tasks > 1 ? pool : NULL, tasks, 1, run_tasks, &j);
    kn_free(own);
    return KILN_OK;
}

typedef struct gather_job {
    const kn_gemm_ukr *u;
    const kn_gemm_packed *a;
    const float *b;
    const int64_t *off;
    int64_t oh, ow, row_step, ncol;
    int64_t oy0, oy1; /* the output rows computed; B row oy is at b + (oy - oy0) * row_step */
    int rows;         /* output rows per tile group (kn_gemm_gather_row_group) */
    int64_t full;     /* with rows 2 and wider rows: full tiles a row, the rests paired */
    float *c;
    const kn_epilogue *ep;
} gather_job;

static void gather_tiles(void *arg, int64_t begin, int64_t end) {
    const gather_job *j = arg;
    const kn_gemm_ukr *u = j->u;
    int64_t m = j->a->rows, k = j->a->k, ldc = j->oh * j->ow;
    const kn_epilogue *ep = j->ep;
    for (int64_t t = begin; t < end; t++) {
        int64_t oy = j->oy0 + t / j->ncol * j->rows, ox0 = t % j->ncol * u->nr;
        /* A pair of rows: each row's full tiles (none for rows of <= 16), then one tile of
         * both rows' rests. */
        bool pair = j->rows == 2;
        if (pair) {
            int64_t i = t % j->ncol;
            pair = i == 2 * j->full;
            oy += pair ? 0 : i / j->full;
            ox0 = pair ? j->full * u->nr : i % j->full * u->nr;
            if (oy >= j->oy1)
                continue;
        }
        kn_gather_tile gt;
        if (pair) {
            int rest = (int)(j->ow - ox0);
            gt = (kn_gather_tile){
                .b1 = j->row_step, .c1 = j->ow, .n0 = rest, .n1 = oy + 1 < j->oy1 ? rest : 0};
        } else {
            int64_t left = j->ow - ox0;
            gt = (kn_gather_tile){.b1 = 16,
                                  .c1 = 16,
                                  .n0 = (int)min64(16, left),
                                  .n1 = (int)(left > 16 ? min64(16, left - 16) : 0)};
        }
        float *cbase = j->c + oy * j->ow + ox0;
        gt.b = j->b + (oy - j->oy0) * j->row_step + ox0;
        for (int64_t k0 = 0; k0 < k; k0 += KC) {
            int64_t kc = min64(KC, k - k0);
            bool last = k0 + kc >= k;
            gt.off = j->off + k0;
            const float *ap = j->a->data + k0 * j->a->pad;
            for (int64_t ir = 0; ir < m; ir += u->mr) {
                int mr = (int)min64(u->mr, m - ir);
                float *ct = cbase + ir * ldc;
                kn_ukr_ep te = {0}, *tep = NULL;
                if (last && ep != NULL) {
                    te.bias_row = ep->bias != NULL ? ep->bias + ir : NULL;
                    te.res = ep->residual != NULL ? ep->residual + ir * ep->ldr + oy * j->ow + ox0
                                                  : NULL;
                    te.ldr = ep->ldr;
                    te.clamp = ep->act == KN_ACT_RELU || ep->act == KN_ACT_CLIP;
                    te.lo = ep->act == KN_ACT_RELU ? 0.0f : ep->alpha;
                    te.hi = ep->act == KN_ACT_RELU ? INFINITY : ep->beta;
                    /* Sigmoid and SiLU in registers where the kernel has them (act_regs). */
                    if (u->act_in_regs)
                        te.act = ep->act == KN_ACT_SWISH     ? KN_UKR_ACT_SWISH
                                 : ep->act == KN_ACT_SIGMOID ? KN_UKR_ACT_SIGMOID
                                                             : KN_UKR_ACT_NONE;
                    tep = &te;
                }
                u->fn_gather(kc, ap + ir * kc, &gt, ct, ldc, k0 == 0 ? 0.0f : 1.0f, mr, tep);
                if (tep != NULL && !te.clamp && te.act == KN_UKR_ACT_NONE &&
                    ep->act != KN_ACT_NONE) {
                    kn_act_apply_rows(ep->act, ep->alpha, ep->beta, ct, ldc, mr, gt.n0);
                    if (gt.n1 > 0)
                        kn_act_apply_rows(ep->act, ep->alpha, ep->beta, ct + gt.c1, ldc, mr, gt.n1);
                }
            }
        }
    }
}

bool kn_gemm_gather_ok(const kn_gemm_packed *a) {
    return a != NULL && a->ukr == ukr_get() && a->ukr->fn_gather != NULL && a->ukr->nr == 32;
}

static gather_job gather_init(const kn_gemm_packed *a, const float *b, const int64_t *off,
                              int64_t oh, int64_t ow, int64_t oy0, int64_t oy1, int64_t row_step,
                              float *c, const kn_epilogue *ep, int64_t *tiles) {
    gather_job j = {.u = ukr_get(),
                    .a = a,
                    .b = b,
                    .off = off,
                    .oh = oh,
                    .ow = ow,
                    .oy0 = oy0,
                    .oy1 = oy1,
                    .row_step = row_step,
                    .rows = kn_gemm_gather_row_group(ow),
                    .c = c,
                    .ep = ep};
    j.full = ow > 16 ? ow / j.u->nr : 0;
    j.ncol = j.rows == 2 ? (j.full > 0 ? 2 * j.full + 1 : 1) : (ow + j.u->nr - 1) / j.u->nr;
    *tiles = ow <= 0 || a->rows <= 0 ? 0 : (oy1 - oy0 + j.rows - 1) / j.rows * j.ncol;
    return j;
}

int kn_gemm_gather_row_group(int64_t ow) {
    /* A row of at most 16 columns, or a rest of at most 16 past whole 32-column tiles, would
     * fill half a tile: two rows' share one instead. */
    return ow <= 16 || (ow % 32 != 0 && ow % 32 <= 16) ? 2 : 1;
}

void kn_gemm_gather(const kn_gemm_packed *a, const float *b, const int64_t *off, int64_t oh,
                    int64_t ow, int64_t oy0, int64_t oy1, int64_t row_step, float *c,
                    const kn_epilogue *ep) {
    int64_t tiles;
    gather_job j = gather_init(a, b, off, oh, ow, oy0, oy1, row_step, c, ep, &tiles);
    if (tiles > 0)
        gather_tiles(&j, 0, tiles);
}

bool kn_gemm_scales_b(int64_t m, int64_t k) {
    return !direct_shape(ukr_get(), m, k);
}

int64_t kn_gemm_serial_scratch(int64_t n, const kn_gemm_operand *a, const kn_gemm_operand *b) {
    const kn_gemm_ukr *u = ukr_get();
    int64_t nc = min64(NC_TARGET / u->nr * u->nr, round_up(n, u->nr));
    /* job_init's block of A: MC_TARGET rows, or all of up to ONE_BLOCK_MAX_M */
    int64_t mc = max64(MC_TARGET / u->mr * u->mr, round_up(ONE_BLOCK_MAX_M, u->mr));
    return (a->packed != NULL ? 0 : round_up(mc * KC, 16)) +
           (b->packed != NULL ? 0 : round_up((nc + u->nr) * KC, 16));
}

void kn_gemm_serial(int64_t m, int64_t n, int64_t k, float alpha, const kn_gemm_operand *a,
                    const kn_gemm_operand *b, float beta, float *c, int64_t ldc,
                    const kn_epilogue *ep, float *scratch) {
    gemm_job j;
    if (!job_init(&j, 1, m, n, k, alpha, a, b, beta, c, ldc, ep))
        return;
    j.scratch = scratch;
    run_tasks(&j, 0, 1);
}

void kn_gemm_serial_part(int64_t part, int64_t parts, int64_t m, int64_t n, int64_t k, float alpha,
                         const kn_gemm_operand *a, const kn_gemm_operand *b, float beta, float *c,
                         int64_t ldc, const kn_epilogue *ep, float *scratch) {
    if (k <= 0) { /* nothing but C's scaling and the epilogue: one part does all of it */
        if (part == 0)
            kn_gemm_serial(m, n, k, alpha, a, b, beta, c, ldc, ep, scratch);
        return;
    }
    gemm_job j;
    if (!job_init(&j, 1, m, n, k, alpha, a, b, beta, c, ldc, ep))
        return;
    int64_t m0 = part * j.units_m / parts * j.u->mr;
    int64_t m1 = min64((part + 1) * j.units_m / parts * j.u->mr, m);
    if (m0 < m1)
        run_block(&j, m0, m1, 0, n, scratch, scratch != NULL ? scratch + j.scratch_a : NULL);
}

int kn_gemm_mr(void) {
    return ukr_get()->mr;
}

kiln_status kn_sgemm(kn_threadpool *pool, bool trans_a, bool trans_b, int64_t m, int64_t n,
                     int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                     int64_t ldb, float beta, float *c, int64_t ldc, const kn_epilogue *ep) {
    kn_gemm_operand oa = {.p = a, .ld = lda, .trans = trans_a};
    kn_gemm_operand ob = {.p = b, .ld = ldb, .trans = trans_b};
    return kn_gemm(pool, m, n, k, alpha, &oa, &ob, beta, c, ldc, ep);
}
