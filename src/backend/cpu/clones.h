/* KN_CLONES: per-ISA clones of a hot loop (AVX-512, AVX2, baseline), picked once at load time
 * through an ifunc, so simple loops vectorize on the machine that runs them while the build
 * stays generic. ifuncs need GCC and glibc; ThreadSanitizer instruments ifunc resolvers, which
 * run before it is initialised, so clones stay out of TSan builds. */
#ifndef KN_CPU_CLONES_H
#define KN_CPU_CLONES_H

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__) &&       \
    !defined(__SANITIZE_THREAD__)
#define KN_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define KN_CLONES
#endif

#endif
