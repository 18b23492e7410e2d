/* AMX tiles on this CPU and in this process, for the bf16 and int8 GEMM kernels. Linux keeps
 * tile data off until a process asks for it (arch_prctl ARCH_REQ_XCOMP_PERM); the permission is
 * the process's, so one successful request serves every thread. KILN_CPU_AMX=0 turns AMX off. */
#ifndef KN_CPU_ARCH_AMX_H
#define KN_CPU_ARCH_AMX_H

#include <stdbool.h>

/* CPUID leaf 7 EDX bits of the AMX features a kernel needs. */
#define KN_AMX_BF16 (1u << 22)
#define KN_AMX_TILE (1u << 24)
#define KN_AMX_INT8 (1u << 25)

/* true when the CPU has AMX-TILE and all of `features`, and the kernel lets this process use
 * tile data (asked once per process). Ignores KILN_CPU_AMX. */
bool kn_cpu_amx_supported(unsigned features);
/* kn_cpu_amx_supported(features) unless KILN_CPU_AMX is 0. */
bool kn_cpu_amx(unsigned features);
/* true when KILN_CPU_AMX is 0. */
bool kn_cpu_amx_turned_off(void);

/* Load the tile configuration the kernels share (palette 1, tiles 0-7 of 16 rows x 64 bytes)
 * on the calling thread before its first tile instruction; release the tiles after the last.
 * Only where kn_cpu_amx_supported(). */
void kn_cpu_amx_begin(void);
void kn_cpu_amx_end(void);

#endif
