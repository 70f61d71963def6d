/* engine_t's insides, shared by engine.c (lifetime), engine_step.c (the
 * training loop) and engine_report.c (memory and config reports). Not
 * installed: users see only engine.h. */
#ifndef DS_ENGINE_INTERNAL_H
#define DS_ENGINE_INTERNAL_H

#include "engine/backend/backend.h"
#include "engine/comm/comm.h"
#include "engine/core/config.h"
#include "engine/engine_timers.h"
#include "engine/engine.h"
#include "zero/flat.h"
#include "zero/loss_scaler.h"
#include "zero/optim.h"
#include "zero/ties.h"
#include "zero/zero.h"

struct engine {
    ds_config cfg; /* resolved */
    ds_rank_info ranks;
    ds_mem *mem;
    ds_backend *be;
    ds_comm *comm;
    ds_model *model;
    ds_flat *flat;
    ds_no_decay *no_decay; /* HF's parameter groups (cfg.optim_hf, weight decay on); or NULL */
    ds_zero *zero;
    ds_ties *ties;        /* gradients of tied parameters */
    ds_dtype param_t, grad_t;
    ds_loss_scaler scaler;
    uint64_t seed;
    bool quiet;

    /* ---- activation plan (allocated once for cap_B x T) ---- */
    int cap_B, T;
    float **act;          /* [n_modules] module outputs */
    size_t *act_elems;    /* [n_modules] */
    void **saved;         /* [n_modules]; checkpointed modules share ckpt_saved */
    size_t *saved_bytes;  /* [n_modules] */
    bool *recompute;      /* [n_modules] activation checkpointing applies */
    void *ckpt_saved;
    size_t ckpt_saved_bytes;
    void *scratch;
    size_t scratch_bytes;
    float *grad_buf[2];   /* ping-pong activation gradients */
    size_t grad_elems;

    /* ---- device copy of the current micro-batch ---- */
    void *d_in[DS_MAX_INPUTS];     /* per model input, cap_B rows at T */
    size_t d_in_bytes[DS_MAX_INPUTS];
    double loss_norm;        /* this rank's share of the micro-batch loss: world * its
                                loss weight / all ranks' */
    ds_batch dbatch;
    bool have_forward;    /* a forward awaits its backward */
    bool have_backward;   /* a backward awaits its ds_step (its gradients are in, and at a
                             boundary reduced or on their way) */
    uint64_t fwd_seed;    /* dropout stream of the pending micro-batch */
    /* the module whose backward runs, and the lowest offset of its span
     * handed to the strategy so far (its end: nothing yet) */
    int bwd_module;
    int64_t bwd_done;
    /* A backward failed on this rank since the last boundary (DS_OK: none),
     * and its message: the boundary's ds_step drops the window's gradients on
     * every rank and fails there with it. */
    ds_status window_failed;
    ds_error_saved window_err;
    /* An update failed (ds_step's apply, on this rank or, agreed, on
     * another), or a checkpoint load after its checks: the ranks'
     * parameters and optimizer state may now differ, part of the partitions
     * updated or loaded and part not. DS_OK: none. Training, evaluation and
     * saves are refused until a full ds_load_checkpoint (ds_engine_usable);
     * lost_what says what failed ("step 12's update"). */
    ds_status lost;
    ds_error_saved lost_err;
    char lost_what[1200];
    bool backward_ended; /* the last ds_backward went through every module (a
                            failure it returned was a module's, walked) */
    bool fetch_failed;    /* this evaluation's fetch of some module failed on this rank
                             (its own piece unread: ds_evaluate's agreement) */
    bool handover_failed; /* the strategy refused a hand-over (grad_done) during the
                             running module's backward: its failure, not the module's */

    /* ---- data loader (when train_data was given) ---- */
    const ds_dataset *train;
    ds_sampler sampler;
    size_t cursor;
    int64_t epoch;
    ds_host_batch hb;

    /* ---- counters ---- */
    int64_t global_step;   /* optimizer steps, skipped ones included */
    int64_t applied_steps; /* steps that updated the weights (scheduler, Adam t) */
    int64_t skipped_steps;
    int64_t consecutive_skips; /* non-finite steps in a row (not under a dynamic fp16 scale) */
    int64_t micro_steps;
    int64_t samples;
    int micro_in_step;
    /* Micro-batches in the running accumulation window: 0 means
     * gradient_accumulation_steps; ds_train_batch sets fewer for the
     * window that ends an epoch, so no window mixes two epochs
     * (ds_engine_window). */
    int64_t window;
    double loss_accum;     /* this rank's micro-batch losses since the boundary */
    ds_step_info last;
    ds_wc_state wc;        /* wall_clock_breakdown (engine_timers.c) */
    ds_prof_state prof;    /* flops_profiler (flops_profiler.c) */

    /* ---- monitors (engine_monitor.c): rank 0's, NULL elsewhere or when off ---- */
    struct ds_monitor *monitor;
    double monitor_t;         /* when the previous step's scalars were written */
    int64_t monitor_samples;  /* samples then */
};

/* engine.c: DS_OK, or, after a failed update or load (e->lost), that
 * failure again, saying `what` is refused and why (the ranks' state may
 * differ; load the last checkpoint). */
ds_status ds_engine_usable(const engine_t *e, const char *what);
/* engine.c: st (with its message, kept) failed `fmt...` part way: mark the
 * engine lost (above). */
void ds_engine_lose(engine_t *e, ds_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* engine_step.c */
ds_status ds_engine_plan_activations(engine_t *e);
void ds_engine_free_activations(engine_t *e);

/* engine_launch.c: where training is, for a signal's report
 * (ds_preempt_during); and the note to engine-run that this rank has reached
 * the library ('S') or connected to the others ('C'). */
void ds_preempt_note(int phase, int micro, int gas);
void ds_engine_note_join(char stage);

/* engine_monitor.c: open the configured monitors (every rank learns
 * whether rank 0 could; collective), and write a step's scalars (rank 0; a
 * failed write warns once and stops monitoring, so that a full log disk
 * neither ends the run nor leaves rank 0 alone in a collective). */
ds_status ds_engine_monitor_open(engine_t *e);
void ds_engine_monitor_step(engine_t *e);
/* samples_per_sec measures from here: the engine's sample count and now
 * (at open, and after a checkpoint's load moved the count: the first rate
 * after a resume divided every sample since step 0 by the time since
 * ds_initialize, and after a retry's reload went to 0 or below). */
void ds_engine_monitor_rebase(engine_t *e);

/* engine_timers.c: wall_clock_breakdown's state from the config (after
 * the communicator exists), and the step's end: at steps_per_print, the
 * interval's means (ds_wall_clock_last) and rank 0's print. */
void ds_engine_wall_clock_init(engine_t *e);
void ds_engine_wall_clock_step(engine_t *e);

/* flops_profiler.c: its state from the config (ds_engine_wall_clock_init
 * calls it) and freed at ds_finalize; at the first ds_forward after
 * profile_step steps (DeepSpeed's moment) the GEMM counter goes on, at that
 * step's end rank 0 prints the profile and it goes off. */
void ds_engine_prof_init(engine_t *e);
void ds_engine_prof_free(engine_t *e);
void ds_engine_prof_forward(engine_t *e);
void ds_engine_prof_step_end(engine_t *e);
/* The profiled step's window was dropped (a micro-batch failed): the
 * counters go off and the next step is profiled instead. */
void ds_engine_prof_drop(engine_t *e);

/* engine_ckpt.c: every rank learns whether any failed, all reporting the
 * lowest rank with the worst status in its words (ds_comm_agree_one); a
 * failing rank keeps its own status. Collective. */
ds_status ds_engine_ckpt_agree(engine_t *e, ds_status local);

/* engine_config_agree.c: every rank's resolved config is rank 0's, or every
 * rank fails with DS_ERR_CONFIG naming the first key that differs, its
 * values and the rank. Collective. */
ds_status ds_engine_config_agree(engine_t *e);

/* engine_report.c */
/* Collective: every rank calls it; rank 0 prints unless quiet. */
void ds_engine_print_startup(engine_t *e);
/* The memory estimate of this model and config against the host's RAM
 * (MemAvailable, or DS_MEM_LIMIT): DS_ERR_OOM with the estimate and the
 * offload that would fit when it does not; a bad nvme_path fails first.
 * After the flat layout, before the strategy allocates. */
ds_status ds_engine_check_fit(engine_t *e);
void ds_engine_print_step(const engine_t *e);

/* The dropout stream of a (micro-step, module, rank): distinct for each, and
 * the same when activation checkpointing recomputes the module. */
uint64_t ds_engine_module_seed(const engine_t *e, uint64_t micro_seed, int module);

/* This rank's rows of the running epoch the loader walks: the sampler's,
 * less a short last micro-batch with dataloader_drop_last
 * (engine_train_batch.c). */
size_t ds_engine_epoch_rows(const engine_t *e);

/* The open accumulation window's gradients and loss dropped, on every rank
 * alike (they must all call it at the same point): the next micro-batch
 * starts a window of its own (engine_step.c). */
ds_status ds_engine_forget_window(engine_t *e);

/* Micro-batches in the running accumulation window (engine_t.window). */
static inline int64_t ds_engine_window(const engine_t *e) {
    return e->window > 0 ? e->window : e->cfg.gradient_accumulation_steps;
}

#endif /* DS_ENGINE_INTERNAL_H */
