#include "passes/passes.h"

#include "core/alloc.h"

kiln_status kn_pass_eliminate_dead(kn_graph *g) {
    bool *live = kn_calloc((size_t)g->n_values + 1, sizeof(bool));
    if (live == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory in dead-node elimination");
    for (int i = 0; i < g->n_outputs; i++)
        live[g->outputs[i]] = true;
    /* Nodes are in topological order: one backward sweep finds everything that matters. */
    for (int i = g->n_nodes - 1; i >= 0; i--) {
        kn_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        bool needed = false;
        for (int j = 0; j < n->n_out; j++)
            if (n->out[j] >= 0 && live[n->out[j]])
                needed = true;
        if (!needed) {
            n->dead = true;
            continue;
        }
        for (int j = 0; j < n->n_in; j++)
            if (n->in[j] >= 0)
                live[n->in[j]] = true;
    }
    kn_free(live);
    return KILN_OK;
}
