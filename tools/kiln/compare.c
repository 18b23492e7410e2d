#include "cli.h"
int cmd_compare(int argc, char **argv) {
    (void)argc, (void)argv;
    return 2;
}
