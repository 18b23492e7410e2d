/* All heap memory goes through the allocator hook, with accounting. */
#ifndef KN_ALLOC_H
#define KN_ALLOC_H

#include <stddef.h>

void *kn_malloc(size_t size);           /* 16-byte aligned; NULL on failure */
void *kn_calloc(size_t n, size_t size); /* zeroed; checks n*size for overflow */
void *kn_aligned_alloc(size_t size, size_t align);
void *kn_realloc(void *ptr, size_t old_size, size_t new_size);
void kn_free(void *ptr);
char *kn_strdup(const char *s);
char *kn_strndup(const char *s, size_t n);

/* Test hook: make the nth allocation from now fail (0 disables). */
void kn_alloc_fail_after(long n);

#endif
