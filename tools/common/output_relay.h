/* engine-run's relay of what an mpirun job prints (supervise.h starts mpirun
 * with --tag-output and its stdout and stderr on pipes into this):
 *
 *  - Tags off, lines whole. mpirun prefixes every piece of a rank's output
 *    with "[JOB,RANK]<stdout>:" or "<stderr>:", also in the middle of a line
 *    when two ranks' partial writes interleave. The relay strips the tags and
 *    reassembles each rank's lines, so two ranks never share a line.
 *  - One error, once. A line a rank prints to stderr that another rank
 *    already printed, word for word, is not printed again: when every rank
 *    fails alike (a bad config, a bad data line) the user reads the message
 *    once, not once per rank. The same rank printing a line twice shows it
 *    twice. stdout is passed on as it is.
 *  - mpirun's banners in one line. The multi-line blocks mpirun prints
 *    between rows of dashes when a job fails become one line naming the rank
 *    and what happened to it: "engine-run: rank 1 was killed by signal 9
 *    (SIGKILL); mpirun stopped the other ranks", "engine-run: rank 0 ended
 *    the job with MPI_Abort (status 1) ...", "engine-run: rank 0 exited with
 *    status 1 ...". A block it does not recognise is passed on whole.
 *
 * Lines not tagged and outside a banner (mpirun's own one-line messages) are
 * passed on to stderr as they are. A partial line is held until its newline,
 * or printed after ER_RELAY_PARTIAL_S without one. */
#ifndef DS_TOOLS_OUTPUT_RELAY_H
#define DS_TOOLS_OUTPUT_RELAY_H

#include <stddef.h>

typedef struct er_relay er_relay;

/* A relay for a job of np ranks writing to out_fd (stdout lines) and
 * err_fd (everything else). NULL when out of memory. */
er_relay *er_relay_create(int np, int out_fd, int err_fd);
/* n bytes read from mpirun's stdout (from_stderr 0) or stderr (1). */
void er_relay_feed(er_relay *r, int from_stderr, const char *buf, size_t n);
/* Print partial lines that have waited ER_RELAY_PARTIAL_S; `now` in seconds
 * on any monotonic clock. */
void er_relay_tick(er_relay *r, double now);
/* The job ended: print whatever is held (partial lines, an unfinished
 * banner, as they are). */
void er_relay_finish(er_relay *r);
void er_relay_destroy(er_relay *r);
/* Whether a banner of mpirun's named the rank that ended the job (and the
 * relay printed that line). */
int er_relay_named_rank(const er_relay *r);
/* The rank (the job's numbering) whose library said it ends the job with
 * MPI_Abort ("[zero-engine] rank R ends the job with MPI_Abort (status
 * S)": engine/comm/mpi_boot.c), and *status, or -1. */
int er_relay_abort_rank(const er_relay *r, int *status);
/* The first rank (the job's numbering) that wrote a line to stderr, or -1:
 * whose error ended the job when neither a banner nor the rank watch can
 * say which rank ended first. */
int er_relay_first_error_rank(const er_relay *r);
/* One node of a job started in parts (engine-run --nnodes): mpirun numbers
 * its ranks from 0, and this is added where its banners name one, so the
 * lines name the job's ranks. MPI_Abort's banner already names the rank in
 * the job's communicator and is left as it is. */
void er_relay_set_rank_offset(er_relay *r, int offset);

#endif /* DS_TOOLS_OUTPUT_RELAY_H */
