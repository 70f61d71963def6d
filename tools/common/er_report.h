/* engine-run --report: what this installation is and can use, as
 * DeepSpeed's ds_report prints it (tools/common/er_report.c). */
#ifndef DS_TOOLS_ER_REPORT_H
#define DS_TOOLS_ER_REPORT_H

#include <stdio.h>

/* Prints the report to `out`; returns the exit code (0; the report itself
 * says what is missing, which is not an error). Needs no config, starts no
 * rank, initialises neither MPI nor a GPU context beyond asking the driver
 * for its devices. */
int er_report(FILE *out);

#endif /* DS_TOOLS_ER_REPORT_H */
