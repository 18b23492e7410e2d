/* libFuzzer glue, compiled once per target with KN_FUZZ_ENTRY naming its entry point. A
 * promise broken without a crash is turned into one, so libFuzzer saves the input. */
#include "fuzz_targets.h"

#include <stdio.h>
#include <stdlib.h>

#include "kiln/kiln.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    kn_fuzz_setup();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (KN_FUZZ_ENTRY(data, size) != 0) {
        fprintf(stderr, "fuzz: broken promise; last error: %s\n", kiln_last_error());
        abort();
    }
    return 0;
}
