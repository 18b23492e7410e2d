/* kiln bench: latency distribution and throughput. */
#include "cli.h"

#include "core/alloc.h"
#include "layers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char usage[] =
    "usage: kiln bench MODEL|PLAN [--shapes SPEC]... [--input NAME=FILE]... [--warmup N]\n"
    "                  [--iterations N] [--threads N] [--json] [--profile]\n"
    "\n"
    "Runs the model --warmup times untimed, then --iterations times timed, and prints latency\n"
    "min/median/mean/p90/p95/p99/max in milliseconds and throughput (batches per second).\n"
    "Latency is the host's clock around each execute (host inputs and outputs are read and\n"
    "written in place; on a device backend the copies to and from the device count); a\n"
    "plan on a device backend also reports the device time of each execute, by the backend's\n"
    "events around all it queued (\"device ms\"; --json: \"device_ms\", the same statistics).\n"
    "Inputs not given with --input are filled with deterministic random data at the --shapes\n"
    "shape (the OPT shape of a range), or the plan's profile OPT shape.\n"
    "\n"
    "  --warmup N         untimed runs first (default 10)\n"
    "  --iterations N     timed runs (default 50)\n"
    "  --threads N        threads for execution (default: the plan's setting, else cores)\n"
    "  --json             print one JSON object: {\"latency_ms\": {min, median, mean, p90, p95,\n"
    "                     p99, max}, \"throughput_per_s\": ...}\n"
    "  --profile          time every layer too: median ms per layer in execution order and\n"
    "                     sorted, its share, its output shape, the ONNX nodes it stands for\n"
    "                     and its kernel (with --json: \"layers\": [{name, op, kernel,\n"
    "                     onnx_nodes, output_shape, median_ms, share}])\n" CLI_BUILD_OPTIONS_HELP;

/* ms[layer] gets the iteration's time of every layer. */
static void record_layers(kiln_context *ctx, const cli_layers *l, double **ms, int iteration) {
    for (int k = 0; k < l->n; k++)
        kiln_context_layer_time(ctx, k, &ms[k][iteration]);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const double *s, int n, double p) {
    double idx = p / 100.0 * (n - 1);
    int lo = (int)idx;
    int hi = lo + 1 < n ? lo + 1 : lo;
    return s[lo] + (s[hi] - s[lo]) * (idx - lo);
}

int cmd_bench(int argc, char **argv) {
    cli_opts o;
    int rc = cli_parse(argc, argv, "sitwjpP", usage, &o);
    if (rc != 0) {
        cli_opts_free(&o);
        return rc < 0 ? 0 : rc;
    }
    kiln_engine *e = NULL;
    kiln_context *ctx = NULL;
    kn_tensor owned[CLI_MAX_ITEMS];
    int n_owned = 0;
    double *times = NULL, *dev = NULL;
    int n_dev = 0;
    cli_layers layers = {0};
    double **layer_ms = NULL;
    /* Inputs without data use the OPT shape of --shapes or of the plan's profile. */
    if ((rc = cli_prepare_context(&o, true, &e, &ctx, owned, &n_owned)) != 0)
        goto out;
    for (int i = 0; i < o.warmup; i++)
        if (kiln_context_execute(ctx) != KILN_OK) {
            rc = cli_fail("%s", kiln_last_error());
            goto out;
        }
    times = kn_calloc((size_t)o.iterations, sizeof *times);
    dev = kn_calloc((size_t)o.iterations, sizeof *dev);
    if (times == NULL || dev == NULL) {
        rc = cli_fail("out of memory");
        goto out;
    }
    if (o.profile) {
        if ((rc = cli_layers_load(&layers, e, o.model)) != 0)
            goto out;
        layer_ms = kn_calloc((size_t)layers.n + 1, sizeof *layer_ms);
        for (int k = 0; layer_ms != NULL && k < layers.n; k++)
            if ((layer_ms[k] = kn_calloc((size_t)o.iterations, sizeof **layer_ms)) == NULL) {
                rc = cli_fail("out of memory");
                goto out;
            }
        if (layer_ms == NULL || kiln_context_set_profiling(ctx, 1) != KILN_OK) {
            rc = cli_fail("out of memory");
            goto out;
        }
    }
    double total = 0;
    for (int i = 0; i < o.iterations; i++) {
        double t0 = now_ms();
        if (kiln_context_execute(ctx) != KILN_OK) {
            rc = cli_fail("%s", kiln_last_error());
            goto out;
        }
        times[i] = now_ms() - t0;
        total += times[i];
        /* host-only plans have no device time: the call fails and nothing is recorded */
        n_dev += kiln_context_device_time(ctx, &dev[n_dev]) == KILN_OK;
        if (o.profile)
            record_layers(ctx, &layers, layer_ms, i);
    }
    qsort(times, (size_t)o.iterations, sizeof *times, cmp_double);
    int n = o.iterations;
    double dev_mean = 0;
    for (int i = 0; i < n_dev; i++)
        dev_mean += dev[i] / n_dev;
    qsort(dev, (size_t)n_dev, sizeof *dev, cmp_double);
    double mean = total / n, med = pct(times, n, 50);
    double tput = mean > 0 ? 1000.0 / mean : 0;
    if (o.json) {
        printf("{\"latency_ms\": {\"min\": %.4f, \"median\": %.4f, \"mean\": %.4f, \"p90\": %.4f, "
               "\"p95\": %.4f, \"p99\": %.4f, \"max\": %.4f}, \"throughput_per_s\": %.3f, "
               "\"iterations\": %d, \"warmup\": %d",
               times[0], med, mean, pct(times, n, 90), pct(times, n, 95), pct(times, n, 99),
               times[n - 1], tput, n, o.warmup);
        if (n_dev == n)
            printf(", \"device_ms\": {\"min\": %.4f, \"median\": %.4f, \"mean\": %.4f, "
                   "\"p90\": %.4f, \"p95\": %.4f, \"p99\": %.4f, \"max\": %.4f}",
                   dev[0], pct(dev, n, 50), dev_mean, pct(dev, n, 90), pct(dev, n, 95),
                   pct(dev, n, 99), dev[n - 1]);
        if (o.profile)
            rc = bench_profile_report(&layers, ctx, layer_ms, n, true);
        printf("}\n");
    } else {
        printf("%s: %d iterations after %d warmup\n", o.model, n, o.warmup);
        printf("latency ms: min %.3f  median %.3f  mean %.3f  p90 %.3f  p95 %.3f  p99 %.3f  "
               "max %.3f\n",
               times[0], med, mean, pct(times, n, 90), pct(times, n, 95), pct(times, n, 99),
               times[n - 1]);
        if (n_dev == n)
            printf("device ms:  min %.3f  median %.3f  mean %.3f  p90 %.3f  p95 %.3f  p99 %.3f  "
                   "max %.3f\n",
                   dev[0], pct(dev, n, 50), dev_mean, pct(dev, n, 90), pct(dev, n, 95),
                   pct(dev, n, 99), dev[n - 1]);
        printf("throughput: %.2f inferences/s\n", tput);
        if (o.profile)
            rc = bench_profile_report(&layers, ctx, layer_ms, n, false);
    }
out:
    for (int k = 0; layer_ms != NULL && k < layers.n; k++)
        kn_free(layer_ms[k]);
    kn_free(layer_ms);
    cli_layers_free(&layers);
    kn_free(times);
    kn_free(dev);
    for (int i = 0; i < n_owned; i++)
        kn_free(owned[i].data);
    kiln_context_destroy(ctx);
    kiln_engine_destroy(e);
    cli_opts_free(&o);
    return rc;
}
