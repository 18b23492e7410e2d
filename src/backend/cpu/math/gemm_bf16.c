/* bf16 GEMM: packing and the two dot-product paths (see gemm_bf16.h). */
#include "backend/cpu/math/gemm_bf16.h"

#include "core/alloc.h"
#include "core/tensor.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#define PANEL 16

bool kn_bf16_native(void) {
    const char *e = getenv("KILN_BF16_PORTABLE");
    if (e != NULL && e[0] != '\0' && strcmp(e, "0") != 0)
        return false;
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
}

const char *kn_bf16_path_name(void) {
    return kn_bf16_native() ? "bf16: AVX512-BF16 dot products (vdpbf16ps), fp32 accumulation"
                            : "bf16: this CPU has no AVX512-BF16; portable path (bf16 converted "
                              "to fp32, fp32 multiply-add)";
}

bool kn_bf16_pack_b(kn_bf16_packed_b *pb, const float *b, int64_t ldb, int64_t k, int64_t n) {
    pb->k = k;
    pb->n = n;
    pb->kpairs = (k + 1) / 2;
    pb->panels = (n + PANEL - 1) / PANEL;
    size_t count = (size_t)(pb->panels * pb->kpairs * 2 * PANEL);
    pb->data = kn_malloc((count > 0 ? count : 1) * sizeof(uint16_t));
    if (pb->data == NULL)
        return false;
    for (int64_t p = 0; p < pb->panels; p++)
        for (int64_t kp = 0; kp < pb->kpairs; kp++) {
            uint16_t *d = pb->data + (p * pb->kpairs + kp) * 2 * PANEL;
            for (int j = 0; j < PANEL; j++)
                for (int h = 0; h < 2; h++) {
                    int64_t col = p * PANEL + j, row = 2 * kp + h;
                    d[2 * j + h] = col < n && row < k ? kn_float_to_bf16(b[row * ldb + col]) : 0;
                }
        }
    return true;
}

void kn_bf16_packed_b_free(kn_bf16_packed_b *pb) {
    kn_free(pb->data);
    pb->data = NULL;
}

/* One row of A rounded to bf16, padded to the pair with a zero. */
static void pack_a_row(uint16_t *dst, const float *a, int64_t k, int64_t kpairs) {
    for (int64_t i = 0; i < k; i++)
        dst[i] = kn_float_to_bf16(a[i]);
    if (2 * kpairs > k)
        dst[k] = 0;
}

__attribute__((target("avx512f,avx512bf16"))) static void
row_native(const uint16_t *arow, const kn_bf16_packed_b *pb, float *crow) {
    const uint32_t *apairs = (const uint32_t *)arow;
    for (int64_t p = 0; p < pb->panels; p++) {
        const uint16_t *bp = pb->data + p * pb->kpairs * 2 * PANEL;
        __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
        int64_t kp = 0;
        /* Two accumulators hide the dot product's latency. */
        for (; kp + 1 < pb->kpairs; kp += 2) {
            __m512i a0 = _mm512_set1_epi32((int)apairs[kp]);
            __m512i a1 = _mm512_set1_epi32((int)apairs[kp + 1]);
            __m512i b0 = _mm512_loadu_si512(bp + kp * 2 * PANEL);
            __m512i b1 = _mm512_loadu_si512(bp + (kp + 1) * 2 * PANEL);
            acc0 = _mm512_dpbf16_ps(acc0, (__m512bh)a0, (__m512bh)b0);
            acc1 = _mm512_dpbf16_ps(acc1, (__m512bh)a1, (__m512bh)b1);
        }
        if (kp < pb->kpairs) {
            __m512i a0 = _mm512_set1_epi32((int)apairs[kp]);
            __m512i b0 = _mm512_loadu_si512(bp + kp * 2 * PANEL);
            acc0 = _mm512_dpbf16_ps(acc0, (__m512bh)a0, (__m512bh)b0);
        }
        __m512 acc = _mm512_add_ps(acc0, acc1);
        int64_t left = pb->n - p * PANEL;
        __mmask16 mask = left >= PANEL ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
        _mm512_mask_storeu_ps(crow + p * PANEL, mask, acc);
    }
}

static void row_portable(const uint16_t *arow, const kn_bf16_packed_b *pb, float *crow) {
    for (int64_t p = 0; p < pb->panels; p++) {
        const uint16_t *bp = pb->data + p * pb->kpairs * 2 * PANEL;
        float acc[PANEL] = {0};
        for (int64_t kp = 0; kp < pb->kpairs; kp++) {
            float a0 = kn_bf16_to_float(arow[2 * kp]), a1 = kn_bf16_to_float(arow[2 * kp + 1]);
            const uint16_t *b = bp + kp * 2 * PANEL;
            for (int j = 0; j < PANEL; j++)
                acc[j] += a0 * kn_bf16_to_float(b[2 * j]) + a1 * kn_bf16_to_float(b[2 * j + 1]);
        }
        int64_t left = pb->n - p * PANEL;
        memcpy(crow + p * PANEL, acc, (size_t)(left < PANEL ? left : PANEL) * sizeof(float));
    }
}

bool kn_gemm_bf16(int64_t m, const float *a, int64_t lda, const kn_bf16_packed_b *pb, float *c,
                  int64_t ldc) {
    uint16_t *arow = kn_malloc((size_t)(2 * pb->kpairs + 1) * sizeof(uint16_t));
    if (arow == NULL)
        return false;
    bool native = kn_bf16_native();
    for (int64_t i = 0; i < m; i++) {
        pack_a_row(arow, a + i * lda, pb->k, pb->kpairs);
        if (native)
            row_native(arow, pb, c + i * ldc);
        else
            row_portable(arow, pb, c + i * ldc);
    }
    kn_free(arow);
    return true;
}
