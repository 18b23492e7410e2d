int cmd_debug_precision(int argc, char **argv) {
    (void)argc, (void)argv;
    return 2;
}
