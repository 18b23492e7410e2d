/* kiln build: ONNX model -> plan file. */
#include "cli.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: kiln build MODEL.onnx -o PLAN [--shapes SPEC]... [--threads N] [--quiet|--verbose]\n"
    "                  [--plugins LIB.so]... [--int8 --calibration DIR [--calibration-method M]\n"
    "                  [--calibration-cache FILE]]\n"
    "\n"
    "Optimizes MODEL (constant folding, batch-norm folding, activation and element-wise\n"
    "fusion, memory planning) into PLAN. PLAN is written to a temporary file and renamed,\n"
    "so a failed build never damages an existing plan.\n"
    "\n"
    "  -o PLAN            where to write the plan (required)\n"
    "  --shapes SPEC      NAME:DIMS fixes a dynamic input, NAME:MIN,OPT,MAX sets its\n"
    "                     optimization profile (e.g. input:1x3x224x224,8x3x224x224,32x3x224x224).\n"
    "                     Required for every input with dynamic dims.\n"
    "  --threads N        default threads per execution context of the plan (default: cores)\n"
    "  --quiet            no progress output (progress goes to stderr on a terminal "
    "only)\n"
    "  --verbose          progress as one line a stage (each tuned layer counted), and a line\n"
    "                     for each layer timed, on stderr whether a terminal or "
    "not\n" CLI_BUILD_OPTIONS_HELP
    "  --int8             run Conv (2-D, ungrouped), Gemm and MatMul layers of a float32\n"
    "                     model in int8, calibrated by running it in float32 over the samples of\n"
    "                     --calibration (a model with QuantizeLinear/DequantizeLinear pairs\n"
    "                     runs them in int8 without this)\n"
    "  --calibration DIR  the samples: one folder per sample holding INPUT.npy for each model\n"
    "                     input ('/' in a name becomes '_'), or, for a one-input model, one\n"
    "                     .npy file per sample\n"
    "  --calibration-method entropy|minmax\n"
    "                     entropy (default): the KL-divergence threshold over a 2048-bin\n"
    "                     histogram per tensor; minmax: the largest |value| seen\n"
    "  --calibration-cache FILE\n"
    "                     the tensor scales as text: read when it exists (no calibration runs;\n"
    "                     a cache of another model or method fails the build), else written\n";

int cli_set_int8(const cli_opts *o, kiln_build_config *cfg) {
    if (!o->int8) {
        if (o->calibration != NULL || o->calibration_method != NULL || o->calibration_cache != NULL)
            return cli_fail("--calibration, --calibration-method and --calibration-cache need "
                            "--int8");
        return 0;
    }
    kiln_calibration_method m = KILN_CALIBRATION_ENTROPY;
    if (o->calibration_method != NULL && strcmp(o->calibration_method, "minmax") == 0)
        m = KILN_CALIBRATION_MINMAX;
    else if (o->calibration_method != NULL && strcmp(o->calibration_method, "entropy") != 0)
        return cli_fail("--calibration-method '%s': expected entropy or minmax",
                        o->calibration_method);
    if (o->calibration == NULL && o->calibration_cache == NULL)
        return cli_fail("--int8 needs --calibration DIR (or --calibration-cache FILE of an "
                        "earlier build)");
    if (kiln_build_config_set_int8(cfg, o->calibration, m, o->calibration_cache) != KILN_OK)
        return cli_fail_kiln("--int8");
    return 0;
}

static void on_progress(void *user, const char *stage, double fraction) {
    (void)user;
    fprintf(stderr, "\r\033[Kbuilding: %-20s %3.0f%%", stage, fraction * 100.0);
    if (fraction >= 1.0)
        fputc('\n', stderr);
    fflush(stderr);
}

static void on_progress_lines(void *user, const char *stage, double fraction) {
    (void)user;
    fprintf(stderr, "kiln: building: %s (%.0f%%)\n", stage, fraction * 100.0);
}

/* --verbose: the build's informational messages (a line per layer timed) too. */
static void log_verbose(void *user, kiln_log_level level, const char *message) {
    (void)user;
    fprintf(stderr, "kiln: %s%s\n",
            level == KILN_LOG_ERROR     ? "error: "
            : level == KILN_LOG_WARNING ? "warning: "
                                        : "",
            message);
}

int cmd_build(int argc, char **argv) {
    cli_opts o;
    int rc = cli_parse(argc, argv, "ostqpvI", usage, &o);
    if (rc != 0) {
        cli_opts_free(&o);
        return rc < 0 ? 0 : rc;
    }
    kiln_builder *b = NULL;
    kiln_network *net = NULL;
    kiln_build_config *cfg = NULL;
    if (o.output == NULL) {
        rc = cli_fail("build needs -o PLAN (see kiln build --help)");
        goto out;
    }
    if ((rc = cli_load_plugins(&o)) != 0)
        goto out;
    if (kiln_builder_create(&b) != KILN_OK) {
        rc = cli_fail_kiln("builder");
        goto out;
    }
    kiln_builder_set_registry(b, o.registry);
    if (kiln_network_from_onnx_file(b, o.model, &net) != KILN_OK) {
        rc = cli_fail("%s", kiln_last_error());
        goto out;
    }
    if ((rc = cli_make_config(&o, net, &cfg)) != 0)
        goto out;
    if (o.verbose) {
        kiln_set_logger(log_verbose, NULL, KILN_LOG_INFO);
        kiln_build_config_set_progress(cfg, on_progress_lines, NULL);
    } else if (!o.quiet && isatty(2)) {
        kiln_build_config_set_progress(cfg, on_progress, NULL);
    }
    if (kiln_build_to_file(b, net, cfg, o.output) != KILN_OK) {
        if (!o.quiet && !o.verbose && isatty(2))
            fputc('\n', stderr);
        rc = cli_fail("%s: %s", o.model, kiln_last_error());
    }
out:
    kiln_build_config_destroy(cfg);
    kiln_network_destroy(net);
    kiln_builder_destroy(b);
    cli_opts_free(&o);
    return rc;
}
