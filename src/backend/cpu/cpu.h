/* CPU backend internals: kernel families and shared helpers. */
#ifndef KN_CPU_H
#define KN_CPU_H

#include "backend/backend.h"

/* Kernel families: each file defines one array terminated by a zeroed entry. */
extern const kn_kernel kn_cpu_elementwise[];
extern const kn_kernel kn_cpu_tensor[];
extern const kn_kernel kn_cpu_reduce[];
extern const kn_kernel kn_cpu_nn[];
extern const kn_kernel kn_cpu_pool[];
extern const kn_kernel kn_cpu_norm[];
extern const kn_kernel kn_cpu_rnn[];
extern const kn_kernel kn_cpu_misc[];
extern const kn_kernel kn_cpu_extra[];

/* The CPU backend object (registered in the backend registry as "cpu"). */
kn_backend *kn_cpu_backend(void);

#endif
