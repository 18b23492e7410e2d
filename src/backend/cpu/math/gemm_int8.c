/* int8 GEMM (see gemm_int8.h): the packing, the portable kernel and the dispatch. The VNNI
 * micro-kernel lives in arch/gemm_int8_vnni.c, the AMX-INT8 one in arch/gemm_int8_amx.c. */
#include "backend/cpu/math/gemm_int8.h"

#include "backend/cpu/arch/amx.h"
#include "core/alloc.h"

#include <string.h>

/* Bytes after the last block: the AMX kernel's last K step reads a whole 16-row B tile. */
#define AMX_SLACK 1024

kiln_status kn_qgemm_pack_b(const int8_t *b, int64_t k, int64_t n, int64_t sk, int64_t sn,
                            kn_qgemm_b *out) {
    memset(out, 0, sizeof *out);
    out->k = k;
    out->n = n;
    out->kp = (k + 3) / 4 * 4;
    out->nb = (n + 15) / 16;
    size_t bytes = (size_t)(out->nb * out->kp * 16) + AMX_SLACK;
    out->packed = kn_aligned_alloc(bytes, 64);
    out->colsum = kn_calloc((size_t)(out->nb * 16 + 1), sizeof(int32_t));
    if (out->packed == NULL || out->colsum == NULL) {
        kn_qgemm_b_free(out);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "no memory to pack int8 weights");
    }
    memset(out->packed, 0, bytes);
    /* Row by row when B's rows are contiguous (a weight matrix, k x n): column by column read B
     * n bytes apart, and BERT-base's int8 plan spent 75 ms of its load here. */
    bool rows = sn == 1;
    for (int64_t outer = 0; outer < (rows ? k : n); outer++)
        for (int64_t inner = 0; inner < (rows ? n : k); inner++) {
            int64_t i = rows ? outer : inner, j = rows ? inner : outer;
            int8_t v = b[i * sk + j * sn];
            out->packed[(j / 16) * out->kp * 16 + (i / 4) * 64 + (j % 16) * 4 + i % 4] = v;
            out->colsum[j] += v;
        }
    return KILN_OK;
}

void kn_qgemm_b_free(kn_qgemm_b *b) {
    kn_free(b->packed);
    kn_free(b->colsum);
    b->packed = NULL;
    b->colsum = NULL;
}

void kn_qgemm_u8s8_portable(const uint8_t *a, int64_t lda, int64_t m, const kn_qgemm_b *b,
                            int32_t *c, int64_t ldc) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t nb = 0; nb < b->nb; nb++) {
            const int8_t *blk = b->packed + nb * b->kp * 16;
            int32_t acc[16] = {0};
            for (int64_t e = 0; e < b->kp; e++) {
                int32_t x = a[i * lda + e];
                const int8_t *row = blk + (e / 4) * 64 + e % 4;
                for (int j = 0; j < 16; j++)
                    acc[j] += x * row[j * 4];
            }
            memcpy(c + i * ldc + nb * 16, acc, sizeof acc);
        }
}

bool kn_qgemm_has_vnni(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
#else
    return false;
#endif
}

bool kn_qgemm_has_amx(void) {
    return kn_qgemm_has_vnni() && kn_cpu_amx(KN_AMX_INT8);
}

const char *kn_qgemm_path_name(void) {
    if (kn_qgemm_has_amx())
        return "int8: AMX-INT8 tiles (tdpbusd) for products of 16 rows or more, AVX512-VNNI "
               "(vpdpbusd) for the rest";
    if (!kn_qgemm_has_vnni())
        return "int8: this CPU has no AVX512-VNNI; portable path (int32 multiply-add; slower)";
    if (kn_cpu_amx_turned_off() && kn_cpu_amx_supported(KN_AMX_INT8))
        return "int8: AVX512-VNNI dot products (vpdpbusd); AMX turned off by KILN_CPU_AMX=0";
    return "int8: AVX512-VNNI dot products (vpdpbusd); no AMX-INT8 on this CPU (or the kernel "
           "did not grant tile data)";
}

void kn_qgemm_u8s8(const uint8_t *a, int64_t lda, int64_t m, const kn_qgemm_b *b, int32_t *c,
                   int64_t ldc) {
#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
    if (m >= 16 && kn_qgemm_has_amx()) {
        kn_qgemm_u8s8_amx(a, lda, m, b, c, ldc);
        return;
    }
#endif
#if defined(__x86_64__) && defined(__GNUC__)
    if (kn_qgemm_has_vnni()) {
        kn_qgemm_u8s8_vnni(a, lda, m, b, c, ldc);
        return;
    }
#endif
    kn_qgemm_u8s8_portable(a, lda, m, b, c, ldc);
}
