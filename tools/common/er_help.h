/* engine-run's --help text, kept apart from the launcher's logic
 * (tools/engine_run.c) because it is most of its length. */
#ifndef DS_TOOLS_ER_HELP_H
#define DS_TOOLS_ER_HELP_H

#include <stdio.h>

/* The whole of engine-run --help, to out. */
void er_usage(FILE *out);

#endif /* DS_TOOLS_ER_HELP_H */
