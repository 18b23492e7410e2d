/* A layer of the optimized plan stands for the ONNX nodes between its inputs and its outputs:
 * walking the ONNX graph back from the layer's output tensors (which keep their ONNX names)
 * and stopping at its input tensors, constants and graph inputs gives them, whatever the
 * fusion passes did. */
#include "layers.h"

#include "cli.h"
#include "core/alloc.h"
#include "onnx/onnx_import.h"

#include <stdlib.h>
#include <string.h>

static bool is_layer_input(const kiln_layer_info *li, const char *name) {
    for (int j = 0; j < li->n_inputs; j++)
        if (li->inputs[j] != NULL && strcmp(li->inputs[j], name) == 0)
            return true;
    return false;
}

/* Comma-separated names of the ONNX nodes layer li covers, in ONNX order; NULL without one. */
static char *cover(const kn_graph *g, const kiln_layer_info *li) {
    bool *in = kn_calloc((size_t)g->n_nodes + 1, sizeof *in);
    int *stack = kn_calloc((size_t)g->n_values + 1, sizeof *stack);
    bool *seen = kn_calloc((size_t)g->n_values + 1, sizeof *seen);
    char *out = NULL;
    if (in == NULL || stack == NULL || seen == NULL)
        goto out_free;
    int top = 0;
    for (int j = 0; j < li->n_outputs; j++) {
        int v = li->outputs[j] ? kn_graph_find_value(g, li->outputs[j]) : -1;
        if (v >= 0 && !seen[v])
            seen[v] = true, stack[top++] = v;
    }
    while (top > 0) {
        int v = stack[--top];
        int p = g->values[v].producer;
        if (p < 0 || in[p])
            continue;
        in[p] = true;
        for (int k = 0; k < g->nodes[p].n_in; k++) {
            int u = g->nodes[p].in[k];
            if (u < 0 || seen[u] || kn_value_is_const(&g->values[u]) ||
                is_layer_input(li, g->values[u].name))
                continue;
            seen[u] = true;
            stack[top++] = u;
        }
    }
    size_t len = 1;
    for (int i = 0; i < g->n_nodes; i++)
        if (in[i])
            len += strlen(g->nodes[i].name) + 1;
    out = kn_calloc(len, 1);
    if (out == NULL)
        goto out_free;
    for (int i = 0; i < g->n_nodes; i++)
        if (in[i]) {
            if (out[0] != '\0')
                strcat(out, ",");
            strcat(out, g->nodes[i].name);
        }
out_free:
    kn_free(in), kn_free(stack), kn_free(seen);
    return out;
}

int cli_layers_load(cli_layers *l, const kiln_engine *e, const char *model) {
    memset(l, 0, sizeof *l);
    l->n = kiln_engine_num_layers(e);
    l->info = kn_calloc((size_t)l->n + 1, sizeof *l->info);
    l->onnx_nodes = kn_calloc((size_t)l->n + 1, sizeof *l->onnx_nodes);
    if (l->info == NULL || l->onnx_nodes == NULL)
        return cli_fail("out of memory");
    kn_graph *g = NULL;
    if (!cli_is_plan(model) && kn_onnx_import_file(model, &g) != KILN_OK)
        return cli_fail("%s", kiln_last_error());
    for (int i = 0; i < l->n; i++) {
        kiln_engine_layer_info(e, i, &l->info[i]);
        l->onnx_nodes[i] = g != NULL ? cover(g, &l->info[i]) : NULL;
        if (l->onnx_nodes[i] == NULL || l->onnx_nodes[i][0] == '\0') {
            kn_free(l->onnx_nodes[i]);
            l->onnx_nodes[i] = kn_strdup(l->info[i].name);
        }
    }
    if (g != NULL)
        kn_graph_destroy(g);
    return 0;
}

void cli_layers_free(cli_layers *l) {
    for (int i = 0; i < l->n && l->onnx_nodes; i++)
        kn_free(l->onnx_nodes[i]);
    kn_free(l->onnx_nodes);
    kn_free(l->info);
}

static void json_str(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n && s[i]; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

void cli_layers_json_nodes(FILE *f, const char *csv) {
    fputc('[', f);
    for (const char *p = csv; p && *p;) {
        const char *c = strchr(p, ',');
        size_t n = c ? (size_t)(c - p) : strlen(p);
        if (p != csv)
            fputs(", ", f);
        json_str(f, p, n);
        p = c ? c + 1 : p + n;
    }
    fputc(']', f);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct layer_time {
    int index;
    double median;
} layer_time;

static int by_time_desc(const void *a, const void *b) {
    double x = ((const layer_time *)a)->median, y = ((const layer_time *)b)->median;
    return x > y ? -1 : x < y;
}

/* The shape of layer li's first output in ctx as text ("1x64x56x56"; "?" where not known). */
static void output_shape(kiln_context *ctx, const kiln_layer_info *li, char *buf, size_t size,
                         bool json) {
    int rank = 0;
    int64_t d[KILN_MAX_RANK];
    if (li->n_outputs < 1 || li->outputs[0] == NULL ||
        kiln_context_get_tensor_shape(ctx, li->outputs[0], &rank, d) != KILN_OK) {
        snprintf(buf, size, "%s", json ? "null" : "?");
        return;
    }
    size_t used = (size_t)snprintf(buf, size, "%s", json ? "[" : rank == 0 ? "scalar" : "");
    for (int i = 0; i < rank && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%lld", i ? (json ? ", " : "x") : "",
                                 (long long)d[i]);
    if (json && used < size)
        snprintf(buf + used, size - used, "]");
}

/* ms[layer][iteration]: per-layer medians in execution order and sorted by time, with each
 * layer's output shape in ctx. */
int bench_profile_report(const cli_layers *l, kiln_context *ctx, double *const *ms, int iterations,
                         bool json) {
    char shape[KILN_MAX_RANK * 22 + 8];
    layer_time *t = kn_calloc((size_t)l->n + 1, sizeof *t);
    if (t == NULL)
        return cli_fail("out of memory");
    double total = 0;
    for (int i = 0; i < l->n; i++) {
        qsort(ms[i], (size_t)iterations, sizeof **ms, cmp_double);
        int h = iterations / 2;
        t[i].index = i;
        t[i].median = iterations % 2 ? ms[i][h] : (ms[i][h - 1] + ms[i][h]) / 2;
        total += t[i].median;
    }
    if (json) {
        fputs(", \"layers\": [", stdout);
        for (int i = 0; i < l->n; i++) {
            const kiln_layer_info *li = &l->info[i];
            fputs(i ? ", {\"name\": " : "{\"name\": ", stdout);
            json_str(stdout, li->name, strlen(li->name));
            fputs(", \"op\": ", stdout);
            json_str(stdout, li->op_type, strlen(li->op_type));
            fputs(", \"kernel\": ", stdout);
            json_str(stdout, li->kernel, strlen(li->kernel));
            fputs(", \"onnx_nodes\": ", stdout);
            cli_layers_json_nodes(stdout, l->onnx_nodes[i]);
            output_shape(ctx, li, shape, sizeof shape, true);
            printf(", \"output_shape\": %s, \"median_ms\": %.6f, \"share\": %.6f}", shape,
                   t[i].median, total > 0 ? t[i].median / total : 0);
        }
        fputs("]", stdout);
    } else {
        printf("\nper-layer median ms over %d iterations (execution order):\n", iterations);
        printf("  %-4s %-10s %6s  %-28s %-20s %-16s %s\n", "#", "ms", "share", "layer", "op",
               "output", "onnx nodes");
        for (int i = 0; i < l->n; i++) {
            output_shape(ctx, &l->info[i], shape, sizeof shape, false);
            printf("  %-4d %-10.4f %5.1f%%  %-28s %-20s %-16s %s\n", i, t[i].median,
                   total > 0 ? 100 * t[i].median / total : 0, l->info[i].name, l->info[i].op_type,
                   shape, l->onnx_nodes[i]);
        }
        qsort(t, (size_t)l->n, sizeof *t, by_time_desc);
        printf("\nslowest layers:\n");
        for (int i = 0; i < l->n && i < 10; i++) {
            output_shape(ctx, &l->info[t[i].index], shape, sizeof shape, false);
            printf("  %-10.4f %5.1f%%  %-28s %s (kernel %s) -> %s\n", t[i].median,
                   total > 0 ? 100 * t[i].median / total : 0, l->info[t[i].index].name,
                   l->info[t[i].index].op_type, l->info[t[i].index].kernel, shape);
        }
    }
    kn_free(t);
    return 0;
}
