/* kiln debug: the verbs that search for a failure (reduce, precision) and the check they run. */
#ifndef KILN_DEBUG_H
#define KILN_DEBUG_H

#include <stdbool.h>

/* A failure test: a shell command with {} for the candidate file (fails: exit != 0), or kiln
 * compare with the candidate on both sides and the given options (fails: exit 1). */
typedef struct debug_check {
    char *command; /* owned: the shell command line, {} not yet substituted */
    bool compare;  /* exit 1 fails; any other non-zero exit is an error */
    bool verbose;
    int runs;
} debug_check;

/* --check "CMD {}" or --fails-compare OPTIONS... (every argument after it). Returns 0 or an
 * exit code; *consumed is how many arguments of argv it took. */
int debug_check_parse(debug_check *c, int argc, char **argv, int at, int *consumed);
/* Run the check on path: 1 fails, 0 passes, -1 the check itself broke (printed). */
int debug_check_run(debug_check *c, const char *path);
void debug_check_free(debug_check *c);

int cmd_debug_reduce(int argc, char **argv);
int cmd_debug_precision(int argc, char **argv);

#endif
