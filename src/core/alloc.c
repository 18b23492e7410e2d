/* Every allocation carries a small header recording its size and the offset back to the
 * block the hook returned, so frees need no size and accounting stays exact. */
#include "core/alloc.h"

#include "kiln/kiln.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define KN_HEADER 64

typedef struct header {
    size_t size;   /* user bytes */
    size_t offset; /* from the hook's block to the user pointer */
} header;

static kiln_allocator hook;
static atomic_size_t used_bytes;
static atomic_long fail_countdown;

static void *default_alloc(void *user, size_t size, size_t align) {
    (void)user;
    void *p = NULL;
    if (posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, size) != 0)
        return NULL;
    return p;
}

static void default_free(void *user, void *ptr) {
    (void)user;
    free(ptr);
}

void kiln_set_allocator(const kiln_allocator *allocator) {
    if (allocator == NULL || allocator->alloc == NULL || allocator->free == NULL) {
        memset(&hook, 0, sizeof hook);
        return;
    }
    hook = *allocator;
}

size_t kiln_allocated_bytes(void) {
    return atomic_load(&used_bytes);
}

void kn_alloc_fail_after(long n) {
    atomic_store(&fail_countdown, n);
}

static bool should_fail(void) {
    long n = atomic_load(&fail_countdown);
    while (n > 0) {
        if (atomic_compare_exchange_weak(&fail_countdown, &n, n - 1))
            return n == 1;
    }
    return false;
}

void *kn_aligned_alloc(size_t size, size_t align) {
    if (align < 16)
        align = 16;
    if (align > 4096 || (align & (align - 1)) != 0)
        return NULL;
    size_t pre = align > KN_HEADER ? align : KN_HEADER;
    if (size > SIZE_MAX - pre || should_fail())
        return NULL;
    void *block = hook.alloc ? hook.alloc(hook.user, size + pre, align)
                             : default_alloc(NULL, size + pre, align);
    if (block == NULL)
        return NULL;
    char *user = (char *)block + pre;
    header *h = (header *)(user - sizeof(header));
    h->size = size;
    h->offset = pre;
    atomic_fetch_add(&used_bytes, size);
    return user;
}

void *kn_malloc(size_t size) {
    return kn_aligned_alloc(size, 64);
}

void *kn_calloc(size_t n, size_t size) {
    if (size != 0 && n > SIZE_MAX / size)
        return NULL;
    void *p = kn_malloc(n * size);
    if (p != NULL)
        memset(p, 0, n * size);
    return p;
}

void kn_free(void *ptr) {
    if (ptr == NULL)
        return;
    header *h = (header *)((char *)ptr - sizeof(header));
    atomic_fetch_sub(&used_bytes, h->size);
    void *block = (char *)ptr - h->offset;
    if (hook.free)
        hook.free(hook.user, block);
    else
        default_free(NULL, block);
}

void *kn_realloc(void *ptr, size_t old_size, size_t new_size) {
    void *p = kn_malloc(new_size);
    if (p == NULL)
        return NULL;
    if (ptr != NULL) {
        memcpy(p, ptr, old_size < new_size ? old_size : new_size);
        kn_free(ptr);
    }
    return p;
}

char *kn_strndup(const char *s, size_t n) {
    char *p = kn_malloc(n + 1);
    if (p == NULL)
        return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *kn_strdup(const char *s) {
    return kn_strndup(s, strlen(s));
}

void kiln_free(void *ptr) {
    kn_free(ptr);
}
