/* kiln: build, run, benchmark and inspect ONNX models and kiln plans. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static const char usage[] =
    "usage: kiln <command> [options]\n"
    "\n"
    "commands:\n"
    "  build    MODEL.onnx -o PLAN      optimize a model into a plan file\n"
    "  run      MODEL|PLAN --input ...  run once, write outputs as .npy\n"
    "  bench    MODEL|PLAN              measure latency and throughput\n"
    "  inspect  MODEL|PLAN              show inputs, outputs, profiles and layers\n"
    "  plugin-check LIB.so              exercise every plugin a library registers\n"
    "  edit     MODEL.onnx -o OUT.onnx  graph surgery: extract, remove, insert, patterns\n"
    "  compare  REF TARGET              run both on the same inputs, compare the outputs\n"
    "  debug    reduce|precision ...    shrink a failing model; find layers to keep in fp32\n"
    "\n"
    "Shapes: --shapes NAME:DIMS fixes a dynamic input (DIMS like 1x3x224x224);\n"
    "        --shapes NAME:MIN,OPT,MAX gives a range (an optimization profile).\n"
    "Run 'kiln <command> --help' for a command's options. 'kiln --version' prints the version.\n";

/* Warnings (e.g. a plugin ignoring fields it does not use) go to stderr, one line each. */
static void log_to_stderr(void *user, kiln_log_level level, const char *message) {
    (void)user;
    fprintf(stderr, "kiln: %s: %s\n", level == KILN_LOG_ERROR ? "error" : "warning", message);
}

int main(int argc, char **argv) {
    kiln_set_logger(log_to_stderr, NULL, KILN_LOG_WARNING);
    if (argc < 2) {
        fputs(usage, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage, stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
        printf("kiln %s\n", kiln_version_string());
        return 0;
    }
    if (strcmp(cmd, "build") == 0)
        return cmd_build(argc - 1, argv + 1);
    if (strcmp(cmd, "run") == 0)
        return cmd_run(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0)
        return cmd_bench(argc - 1, argv + 1);
    if (strcmp(cmd, "inspect") == 0)
        return cmd_inspect(argc - 1, argv + 1);
    if (strcmp(cmd, "plugin-check") == 0)
        return cmd_plugin_check(argc - 1, argv + 1);
    if (strcmp(cmd, "edit") == 0)
        return cmd_edit(argc - 1, argv + 1);
    if (strcmp(cmd, "compare") == 0)
        return cmd_compare(argc - 1, argv + 1);
    if (strcmp(cmd, "debug") == 0)
        return cmd_debug(argc - 1, argv + 1);
    return cli_fail("unknown command '%s' (commands: build, run, bench, inspect, plugin-check, "
                    "edit, compare, debug; see "
                    "kiln --help)",
                    cmd);
}
