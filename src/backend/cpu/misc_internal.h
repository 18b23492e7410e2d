/* Kernels of the misc family, defined across several files; the table is in misc.c. */
#ifndef KN_CPU_MISC_INTERNAL_H
#define KN_CPU_MISC_INTERNAL_H

#include "backend/cpu/cpu.h"

/* Writes v to element i of an integer tensor, rounding half to even and saturating. */
void cpu_misc_store_int(kn_tensor *t, int64_t i, double v);

#endif
