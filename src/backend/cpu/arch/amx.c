/* AMX detection, the process's permission for tile data and the shared tile configuration
 * (see amx.h). */
#include "backend/cpu/arch/amx.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

bool kn_cpu_amx_turned_off(void) {
    const char *e = getenv("KILN_CPU_AMX");
    return e != NULL && strcmp(e, "0") == 0;
}

bool kn_cpu_amx(unsigned features) {
    return !kn_cpu_amx_turned_off() && kn_cpu_amx_supported(features);
}

#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_GET_XCOMP_PERM 0x1022
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILECFG 17
#define XFEATURE_XTILEDATA 18

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static unsigned amx_features; /* CPUID leaf 7 EDX's AMX bits, 0 where tiles are unusable */

static uint64_t xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t)hi << 32 | lo;
}

static void probe(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE))
        return;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & KN_AMX_TILE))
        return;
    uint64_t tiles = (1ull << XFEATURE_XTILECFG) | (1ull << XFEATURE_XTILEDATA);
    if ((xcr0() & tiles) != tiles)
        return;
    unsigned long perm = 0;
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0 ||
        syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &perm) != 0 ||
        !(perm & (1ul << XFEATURE_XTILEDATA)))
        return;
    amx_features = d & (KN_AMX_TILE | KN_AMX_BF16 | KN_AMX_INT8);
}

bool kn_cpu_amx_supported(unsigned features) {
    pthread_once(&probe_once, probe);
    unsigned want = features | KN_AMX_TILE;
    return (amx_features & want) == want;
}

/* The 64-byte operand of ldtilecfg. A constant object, not one filled on the stack: GCC 12's
 * _tile_loadconfig tells the compiler it reads only 8 bytes, so stores to the rest of a local
 * configuration are dropped as dead (and every tile instruction then faults). */
static const struct {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config __attribute__((aligned(64))) = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

__attribute__((target("amx-tile"))) void kn_cpu_amx_begin(void) {
    _tile_loadconfig(&tile_config);
}

__attribute__((target("amx-tile"))) void kn_cpu_amx_end(void) {
    _tile_release();
}

#else

bool kn_cpu_amx_supported(unsigned features) {
    (void)features;
    return false;
}

void kn_cpu_amx_begin(void) {}

void kn_cpu_amx_end(void) {}

#endif
