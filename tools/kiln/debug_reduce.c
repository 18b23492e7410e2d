/* kiln debug reduce: the smallest subgraph that still fails a check, as polygraphy debug
 * reduce finds it. Every candidate is a subgraph of the original model between a set of
 * input tensors and a set of output tensors (kn_edit_extract, then cleanup), written as a
 * valid model and checked. The search narrows the outputs by halves, bisects over the
 * execution order from the back (earlier outputs) and from the front (later inputs), then
 * removes nodes one at a time from either end until none can go. */
#include "cli.h"

#include "core/alloc.h"
#include "debug.h"
#include "edit/edit.h"
#include "onnx/onnx_export.h"
#include "onnx/onnx_import.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: kiln debug reduce MODEL.onnx -o MIN.onnx (--check \"CMD {}\" | --fails-compare "
    "[COMPARE OPTIONS...])\n"
    "\n"
    "Reduces MODEL to a small subgraph that still fails: --check runs CMD with {} replaced by a\n"
    "candidate model file (a non-zero exit is a failure); --fails-compare runs 'kiln compare\n"
    "CANDIDATE CANDIDATE' with the options after it (every remaining argument; exit 1 is a\n"
    "failure). Bisection over the outputs and the execution order, then node by node.\n"
    "\n"
    "  -o MIN.onnx     the reduced model (a valid ONNX model)\n"
    "  --verbose       show each check's output and verdict\n";

typedef struct names {
    const char **v; /* value names of the original graph (borrowed) */
    int n;
} names;

typedef struct reducer {
    const kn_graph *orig;
    kn_graph *cur; /* the smallest failing candidate so far */
    debug_check check;
    char dir[64];
    char path[128];
} reducer;

static bool has(const names *s, const char *name) {
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->v[i], name) == 0)
            return true;
    return false;
}

static int add(names *s, const char *name) {
    if (has(s, name))
        return 0;
    const char **n = kn_realloc(s->v, (size_t)s->n * sizeof *n, (size_t)(s->n + 1) * sizeof *n);
    if (n == NULL)
        return cli_fail("out of memory");
    s->v = n;
    s->v[s->n++] = name;
    return 0;
}

/* Live nodes of g in execution order. */
static int live_nodes(const kn_graph *g, int *out) {
    int m = 0;
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead)
            out[m++] = i;
    return m;
}

/* The subgraph of the original between ins and outs: 1 when it still fails (*out is it), 0
 * when it passes or cannot stand alone, -1 when the check broke. */
static int try_candidate(reducer *r, const names *ins, const names *outs, kn_graph **out) {
    *out = NULL;
    if (outs->n == 0)
        return 0;
    kn_graph *g = kn_graph_clone(r->orig);
    if (g == NULL)
        return cli_fail("out of memory"), -1;
    kiln_status st = kn_edit_extract(g, ins->n, ins->v, outs->n, outs->v);
    if (st == KILN_OK)
        st = kn_edit_cleanup(g);
    if (st == KILN_OK)
        st = kn_onnx_export_file(g, r->path, 0);
    int fails = st == KILN_OK ? debug_check_run(&r->check, r->path) : 0;
    if (fails == 1)
        *out = g;
    else
        kn_graph_destroy(g);
    return fails;
}

/* Make a failing candidate the current model. */
static void accept(reducer *r, kn_graph *g) {
    kn_graph_destroy(r->cur);
    r->cur = g;
}

static int graph_io(const kn_graph *g, names *ins, names *outs) {
    int rc = 0;
    for (int i = 0; rc == 0 && i < g->n_inputs; i++)
        rc = add(ins, g->values[g->inputs[i]].name);
    for (int i = 0; rc == 0 && i < g->n_outputs; i++)
        rc = add(outs, g->values[g->outputs[i]].name);
    return rc;
}

/* Keep the first or the second half of the outputs while one half fails alone. */
static int bisect_outputs(reducer *r) {
    for (int got = 1; got == 1;) {
        names ins = {0}, outs = {0};
        if (graph_io(r->cur, &ins, &outs) != 0)
            return 1;
        int n = outs.n;
        got = 0;
        for (int half = 0; half < 2 && n > 1 && got == 0; half++) {
            names part = {.v = outs.v + (half ? n / 2 : 0), .n = half ? n - n / 2 : n / 2};
            kn_graph *g;
            if ((got = try_candidate(r, &ins, &part, &g)) == 1)
                accept(r, g);
        }
        kn_free(ins.v), kn_free(outs.v);
        if (got < 0)
            return 1;
    }
    return 0;
}

/* Cut base at position k of its execution order: keep the nodes before k, whose values read
 * from k on become outputs (back), or the nodes from k on, whose values made before k become
 * inputs (front). */
static int cut(reducer *r, const kn_graph *base, const int *order, int m, int k, bool back,
               kn_graph **out) {
    names ins = {0}, outs = {0}, keep_in = {0}, keep_out = {0};
    int rc = graph_io(base, &ins, &outs);
    bool *before = kn_calloc((size_t)base->n_values + 1, sizeof *before);
    if (before == NULL)
        rc = cli_fail("out of memory");
    for (int q = 0; rc == 0 && q < k; q++)
        for (int j = 0; j < base->nodes[order[q]].n_out; j++)
            if (base->nodes[order[q]].out[j] >= 0)
                before[base->nodes[order[q]].out[j]] = true;
    for (int q = k; rc == 0 && q < m; q++) {
        const kn_node *nd = &base->nodes[order[q]];
        for (int j = 0; rc == 0 && j < nd->n_in; j++)
            if (nd->in[j] >= 0 && before[nd->in[j]])
                rc = add(back ? &keep_out : &keep_in, base->values[nd->in[j]].name);
    }
    for (int i = 0; rc == 0 && i < outs.n; i++)
        if (before[kn_graph_find_value(base, outs.v[i])] == back)
            rc = add(&keep_out, outs.v[i]);
    for (int i = 0; rc == 0 && i < ins.n; i++)
        rc = add(&keep_in, ins.v[i]);
    int got = rc == 0 ? try_candidate(r, &keep_in, &keep_out, out) : -1;
    kn_free(before), kn_free(ins.v), kn_free(outs.v), kn_free(keep_out.v), kn_free(keep_in.v);
    return got;
}

/* Binary search for the shortest failing prefix (back) or suffix (front) of the execution
 * order, as if a failure stays once the failing node is in (a wrong guess costs checks only;
 * node_by_node finishes the job). */
static int bisect_order(reducer *r, bool back) {
    const kn_graph *base = r->cur;
    int *order = kn_calloc((size_t)base->n_nodes + 1, sizeof *order);
    if (order == NULL)
        return cli_fail("out of memory");
    int m = live_nodes(base, order);
    int lo = back ? 1 : 0, hi = back ? m : m - 1;
    kn_graph *best = NULL;
    int rc = 0;
    while (lo < hi) {
        int mid = back ? lo + (hi - lo) / 2 : lo + (hi - lo + 1) / 2;
        kn_graph *g;
        int got = cut(r, base, order, m, mid, back, &g);
        if (got < 0) {
            rc = 1;
            break;
        }
        if (got == 1) {
            if (best != NULL)
                kn_graph_destroy(best);
            best = g;
        }
        if (back)
            got ? (hi = mid) : (lo = mid + 1);
        else
            got ? (lo = mid) : (hi = mid - 1);
    }
    kn_free(order);
    if (best != NULL)
        accept(r, best);
    return rc;
}

/* Remove one node at a time: its outputs become graph inputs, or (when nothing else reads
 * them) its inputs become graph outputs in its place; again until no removal keeps the
 * failure. */
static int node_by_node(reducer *r) {
    for (bool changed = true; changed;) {
        changed = false;
        const kn_graph *g = r->cur;
        for (int i = 0; i < g->n_nodes && !changed; i++) {
            const kn_node *nd = &g->nodes[i];
            if (nd->dead)
                continue;
            for (int way = 0; way < 2 && !changed; way++) {
                names ins = {0}, outs = {0}, cand_out = {0};
                int rc = graph_io(g, &ins, &outs);
                bool read_elsewhere = false;
                for (int j = 0; j < nd->n_out; j++)
                    if (nd->out[j] >= 0) {
                        read_elsewhere |= kn_edit_consumers(g, nd->out[j]) > 0;
                        if (way == 0 && rc == 0)
                            rc = add(&ins, g->values[nd->out[j]].name);
                    }
                for (int k = 0; rc == 0 && k < outs.n; k++) {
                    int v = kn_graph_find_value(g, outs.v[k]);
                    if (g->values[v].producer != i)
                        rc = add(&cand_out, outs.v[k]);
                }
                for (int j = 0; way == 1 && rc == 0 && j < nd->n_in; j++) {
                    int v = nd->in[j];
                    if (v >= 0 && !kn_value_is_const(&g->values[v]) && !g->values[v].is_input)
                        rc = add(&cand_out, g->values[v].name);
                }
                kn_graph *cand = NULL;
                int got = rc != 0                      ? -1
                          : way == 1 && read_elsewhere ? 0
                                                       : try_candidate(r, &ins, &cand_out, &cand);
                kn_free(ins.v), kn_free(outs.v), kn_free(cand_out.v);
                if (got < 0)
                    return 1;
                if (got == 1) {
                    accept(r, cand);
                    changed = true;
                }
            }
        }
    }
    return 0;
}

static int count_nodes(const kn_graph *g) {
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++)
        n += !g->nodes[i].dead;
    return n;
}

static int reduce(reducer *r, const char *model, const char *out) {
    int n0 = count_nodes(r->orig);
    int first = debug_check_run(&r->check, model);
    if (first < 0)
        return 2;
    if (first == 0)
        return cli_fail("%s does not fail the check: nothing to reduce", model) + 1;
    r->cur = kn_graph_clone(r->orig);
    if (r->cur == NULL)
        return cli_fail("out of memory") + 1;
    if (bisect_outputs(r) != 0 || bisect_order(r, true) != 0 || bisect_order(r, false) != 0 ||
        node_by_node(r) != 0)
        return 2;
    if (kn_onnx_export_file(r->cur, out, 0) != KILN_OK)
        return cli_fail("-o %s: %s", out, kiln_last_error()) + 1;
    printf("reduced %s from %d nodes to %d (%d checks): %s\n", model, n0, count_nodes(r->cur),
           r->check.runs, out);
    for (int i = 0; i < r->cur->n_nodes; i++)
        if (!r->cur->nodes[i].dead)
            printf("  %s (%s)\n", r->cur->nodes[i].name, r->cur->nodes[i].op_type);
    return 0;
}

int cmd_debug_reduce(int argc, char **argv) {
    reducer r = {0};
    const char *model = NULL, *out = NULL;
    int rc = 0;
    for (int i = 1; i < argc && rc == 0; i++) {
        const char *a = argv[i];
        int used = 1;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(usage, stdout);
            debug_check_free(&r.check);
            return 0;
        } else if (strcmp(a, "-o") == 0 && i + 1 < argc) {
            out = argv[i + 1];
            used = 2;
        } else if (strcmp(a, "--verbose") == 0) {
            r.check.verbose = true;
        } else if (strcmp(a, "--check") == 0 || strcmp(a, "--fails-compare") == 0) {
            rc = debug_check_parse(&r.check, argc, argv, i, &used);
        } else if (a[0] != '-' && model == NULL) {
            model = a;
        } else {
            rc = cli_fail("unexpected argument '%s' (see kiln debug reduce --help)", a);
        }
        i += used - 1;
    }
    if (rc == 0 && (model == NULL || out == NULL || r.check.command == NULL))
        rc = cli_fail("debug reduce needs MODEL, -o MIN.onnx and --check or --fails-compare "
                      "(see kiln debug reduce --help)");
    kn_graph *orig = NULL;
    if (rc == 0 &&
        (kn_onnx_import_file(model, &orig) != KILN_OK || kn_edit_infer_types(orig) != KILN_OK))
        rc = cli_fail("%s: %s", model, kiln_last_error());
    strcpy(r.dir, "/tmp/kiln-reduce-XXXXXX");
    if (rc == 0 && mkdtemp(r.dir) == NULL)
        rc = cli_fail("cannot create a temporary folder in /tmp");
    if (rc == 0) {
        snprintf(r.path, sizeof r.path, "%s/candidate.onnx", r.dir);
        r.orig = orig;
        rc = reduce(&r, model, out);
        unlink(r.path);
        rmdir(r.dir);
    } else {
        rc = 2;
    }
    if (r.cur != NULL)
        kn_graph_destroy(r.cur);
    if (orig != NULL)
        kn_graph_destroy(orig);
    debug_check_free(&r.check);
    return rc;
}
