/* What rank 0 shows while a bundled trainer runs (train_cls, train_lm):
 *
 * - on a terminal (stdout isatty), one status line redrawn in place (at most
 *   ten times a second, and at the last step), tqdm style:
 *     train 120/1194 10% 0:42<6:17 | loss 1.2345 | lr 4.00e-05 | epoch 0.30 |
 *     95.2 samples/s 12.2k tokens/s
 *   (elapsed<left; loss: the mean of the steps since the previous redraw;
 *   cut to the terminal's width);
 * - otherwise (a log file, CI), a plain line every steps_per_print steps,
 *   after the engine's own line, with the rate and the time left:
 *     train_cls: step 120/1194 (10%) epoch 0.30 loss 1.2345 (mean of 10 steps)
 *     lr 4.00e-05 95.2 samples/s 12186 tokens/s elapsed 0:42 left 6:17
 * - evaluation the same way: a status line counting its calls on a terminal,
 *   one line with its rate when it ends otherwise (tr_progress_eval).
 *
 *   tr_progress p;
 *   tr_progress_start(&p, "train_cls", rank, start, total, samples_per_epoch,
 *                     steps_per_print, seq_len, samples_before);
 *   for (...) {
 *       tr_progress_before_step(&p);  // a terminal's line cleared if the engine prints now
 *       ds_train_batch(e, &info);
 *       tr_progress_step(&p, &info);
 *   }
 *   tr_progress_end(&p);              // the line kept, a newline after it
 *
 * Whether stdout is a terminal: DS_PROGRESS_TTY=1 or 0 when set (engine-run
 * sets it from its own stdout, since mpirun gives ranks a pseudo-terminal
 * even when the job's output goes to a file; set it yourself when starting
 * mpirun by hand), else isatty. Ranks other than 0 show nothing. Tokens are samples x the sequence length
 * the rows are padded to (train_lm's rows are full; train_cls counts its
 * padding, as the compute does). */
#ifndef DS_TOOLS_PROGRESS_H
#define DS_TOOLS_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/engine.h"

typedef struct tr_progress {
    const char *prog;
    FILE *out;               /* stdout */
    bool on, tty;            /* rank 0; stdout a terminal */
    int64_t start, total, every;
    double samples_per_epoch; /* the epoch shown is samples / this: right after a
                                 resume at another global batch too */
    double tokens_per_sample;
    double t0, t_last_draw, t_last_print;
    int64_t samples0, samples_last_print;
    double loss_sum;         /* steps since the last draw / print */
    int64_t loss_n;
    bool drawn;              /* a terminal's line holds a status now */
    int width;               /* the terminal's columns (80 if unknown) */
} tr_progress;

void tr_progress_start(tr_progress *p, const char *prog, int rank, int64_t start, int64_t total,
                       double samples_per_epoch, int64_t steps_per_print,
                       double tokens_per_sample, int64_t samples_before);
/* Before ds_train_batch: on a terminal, clears the status line when the
 * engine will print a line during this step (every steps_per_print steps),
 * so its lines scroll above the status instead of running into it. */
void tr_progress_before_step(tr_progress *p, int64_t next_step);
void tr_progress_step(tr_progress *p, const ds_step_info *info);
/* After the last step: a terminal's status line is finished with a newline. */
void tr_progress_end(tr_progress *p);

/* Evaluation's progress, call `done` of `calls` (1-based) over `rows` rows
 * (all ranks'), shown by rank 0 (the caller passes its rank); done 0, before
 * the first call, starts the clock (so the time includes that call). On a terminal
 * a status line, cleared by the last call; elsewhere one line at the last
 * call: "PROG: WHAT: N rows in S s (R rows/s)". */
void tr_progress_eval(const char *prog, const char *what, int rank, int64_t done, int64_t calls,
                      int64_t rows);

/* "1:02:03", "4:05": h:mm:ss past an hour, m:ss below; "?" when negative or
 * not finite. */
void tr_progress_hms(double s, char *buf, size_t cap);

#endif /* DS_TOOLS_PROGRESS_H */
