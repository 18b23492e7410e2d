#include "runtime/memory_plan.h"

#include "core/alloc.h"

#include <stdlib.h>

typedef struct interval {
    int value;
    int first, last; /* node indices: defined at first, last read at last */
    size_t size;
} interval;

static int by_size_desc(const void *a, const void *b) {
    const interval *x = a, *y = b;
    if (x->size != y->size)
        return x->size < y->size ? 1 : -1;
    return x->value - y->value;
}

static size_t align_up(size_t x) {
    return (x + KN_ARENA_ALIGN - 1) & ~(size_t)(KN_ARENA_ALIGN - 1);
}

kiln_status kn_memory_plan(const kn_graph *g, const kn_resolved *vals, const bool *in_arena,
                           const int *alias, size_t *offsets, size_t *total) {
    int nv = g->n_values;
    interval *iv = kn_calloc((size_t)nv + 1, sizeof(interval));
    int *slot = kn_calloc((size_t)nv + 1, sizeof(int));
    int *placed = kn_calloc((size_t)nv + 1, sizeof(int));
    kiln_status rc = KILN_OK;
    if (iv == NULL || slot == NULL || placed == NULL) {
        rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory planning the arena");
        goto out_free;
    }
    for (int v = 0; v < nv; v++) {
        offsets[v] = KN_NO_OFFSET;
        slot[v] = -1;
    }
    int n = 0;
    for (int v = 0; v < nv; v++) {
        if (!in_arena[v])
            continue;
        int p = g->values[v].producer;
        iv[n] = (interval){.value = v,
                           .first = p < 0 ? 0 : p,
                           .last = p < 0 ? 0 : p,
                           .size = align_up(kn_tensor_nbytes(&vals[v].t))};
        if (g->values[v].is_output)
            iv[n].last = g->n_nodes;
        slot[v] = n++;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *nd = &g->nodes[i];
        if (nd->dead)
            continue;
        for (int j = 0; j < nd->n_in; j++) {
            int v = nd->in[j];
            if (v >= 0 && alias && alias[v] >= 0)
                v = alias[v];
            if (v >= 0 && slot[v] >= 0 && iv[slot[v]].last < i)
                iv[slot[v]].last = i;
        }
    }
    for (int v = 0; alias && v < nv; v++)
        if (alias[v] >= 0 && g->values[v].is_output && slot[alias[v]] >= 0)
            iv[slot[alias[v]]].last = g->n_nodes;
    qsort(iv, (size_t)n, sizeof(interval), by_size_desc);
    size_t end = 0;
    int n_placed = 0;
    for (int k = 0; k < n; k++) {
        /* Lowest offset that clears every placed interval alive at the same time. */
        size_t off = 0;
        bool moved = true;
        while (moved) {
            moved = false;
            for (int q = 0; q < n_placed; q++) {
                const interval *o = &iv[placed[q]];
                if (o->last < iv[k].first || iv[k].last < o->first)
                    continue;
                size_t ooff = offsets[o->value];
                if (off < ooff + o->size && ooff < off + iv[k].size) {
                    off = ooff + o->size;
                    moved = true;
                }
            }
        }
        offsets[iv[k].value] = off;
        placed[n_placed++] = k;
        if (off + iv[k].size > end)
            end = off + iv[k].size;
    }
    *total = end;
out_free:
    kn_free(iv);
    kn_free(slot);
    kn_free(placed);
    return rc;
}
