/* zero-engine: data-parallel training with ZeRO sharding, driven by a
 * DeepSpeed-style ds_config.json. This header is the whole public API.
 *
 *   #include <engine/engine.h>
 *   #include <models/models.h>            // the bundled models, or bring your own
 *
 *   ds_model *model;                       // inputs + an ordered list of modules
 *   ds_mlp_desc md = {.vocab_size = V, .embed_dim = 64, .hidden_dim = 128,
 *                     .n_classes = C, .max_seq_len = 64};
 *   if (ds_mlp_create(&md, &model) != DS_OK) die(ds_last_error());
 *   // or: ds_model_create + ds_model_add_input + ds_model_add_module
 *   // with your own modules (engine/core/module.h is the manual)
 *
 *   ds_init_desc d;
 *   ds_init_desc_defaults(&d);
 *   d.config_path = "ds_config.json";
 *   d.model = model;                        // the engine takes ownership
 *   d.train_data = train;                   // borrowed; the engine samples it
 *   engine_t *e;
 *   if (ds_initialize(&d, &e) != DS_OK) die(ds_last_error());
 *   for (int i = 0; i < 1000; i++) {
 *       ds_step_info info;
 *       if (ds_train_batch(e, &info) != DS_OK) die(ds_last_error());
 *       printf("step %lld loss %.4f\n", (long long)info.step, info.loss);
 *   }
 *   ds_finalize(e);
 *
 * or drive it yourself, DeepSpeed style, one micro-batch at a time:
 *   ds_forward(e, &batch, &loss); ds_backward(e); ds_step(e);
 * where ds_step acts only at a gradient-accumulation boundary.
 *
 * Every rank runs the same calls (zero_engine.check_collectives, or
 * DS_CHECK_COLLECTIVES=1, fails every rank at the first collective where
 * they part, naming both calls). Errors: every function returns a ds_status;
 * ds_last_error() says what and where ("zero_optimization.stage: must be 0..3,
 * got 4"). A refused ds_forward changes nothing, on every rank (below). A
 * module whose backward fails on one rank fails that rank's ds_backward, and
 * the next boundary's ds_step on every rank, which drops the window's
 * gradients everywhere (below); training may go on. After any other failure
 * in ds_backward or ds_step (communication, an NVMe read or write) the
 * engine is in an undefined training state but can still be finalized; such
 * a failure on one rank alone is not agreed, so the others wait in their
 * next collective until zero_engine.comm_timeout_s, unless the failing
 * program exits (the job then ends within 10 s: comm.h, "Ending the job").
 * Nothing here calls exit() or abort().
 *
 * Build against the installed library:
 *   cc my.c $(pkg-config --cflags --libs zero-engine) */
#ifndef DS_ENGINE_H
#define DS_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/config.h"
#include "engine/core/mem.h"
#include "engine/core/module.h"
#include "engine/core/status.h"
#include "engine/comm/comm.h"
#include "engine/data/dataset.h"
#include "engine/io/zero_to_fp32.h"
#include "engine/monitor/monitor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DS_VERSION_MAJOR 0
#define DS_VERSION_MINOR 1
#define DS_VERSION_PATCH 0

typedef struct engine engine_t; /* opaque */

/* What ds_initialize needs. Start from ds_init_desc_defaults(). */
typedef struct ds_init_desc {
    uint32_t struct_size;        /* sizeof(ds_init_desc), set by _defaults */
    const char *config_path;     /* ds_config.json, or */
    const char *config_json;     /* the config as a string (config_path wins) */
    ds_model *model;             /* REQUIRED; ownership passes to the engine,
                                    also when ds_initialize fails */
    const ds_dataset *train_data;/* borrowed, must outlive the engine; NULL if the
                                    caller feeds batches with ds_forward */
    uint64_t seed;               /* init, shuffling and dropout; default 42 */
    ds_config_hints hints;       /* the trainer's values for "auto" keys and
                                    missing optimizer / scheduler sections
                                    (engine/core/config.h); _defaults gives
                                    "nothing given", ds_config_hints_hf_defaults
                                    a Hugging Face Trainer's defaults. world_size,
                                    hidden_size and train_rows are filled here */
    bool quiet;                  /* rank 0 does not print the start-up summary
                                    (ds_config_summary and the memory line);
                                    only rank 0's value counts, so quiet =
                                    rank != 0 is fine */
} ds_init_desc;

void ds_init_desc_defaults(ds_init_desc *d);

/* Discover ranks, create backend and communicator, read and resolve the
 * config (rank 0 prints a summary, ds_config_summary; every key is
 * ds_config_to_json(ds_get_config(e))), lay out and initialise parameters (identically
 * on every rank, whatever the world size), plan all memory, build the ZeRO
 * strategy of the configured stage. Collective: all ranks call it. */
ds_status ds_initialize(const ds_init_desc *desc, engine_t **out);

/* Forward one micro-batch given in HOST memory: one tensor per model input
 * (engine/core/module.h: ds_batch, ds_batch_set), named as the model declares
 * them; optional inputs may be left out; a tensor the model does not declare
 * is an error naming the model's inputs. *loss_out: this rank's mean loss of
 * the micro-batch (unscaled). Every rank then agrees the loss weight (one
 * scalar all-reduce: collective), so the loss is normalised over all ranks'
 * rows together (module.h, rule 5). Refused, changing nothing, while the
 * last forward awaits its ds_backward or the last backward its ds_step.
 * A micro-batch one rank refuses (a token id outside the table, more rows
 * than planned) is refused on every rank, at once: that rank's call says
 * why, every other rank's "rank R failed with DS_ERR_INVALID_ARG: <why>",
 * and all of them may go on with other micro-batches (the refused one
 * counts nowhere). */
ds_status ds_forward(engine_t *e, const ds_batch *host_batch, float *loss_out);

/* Backward of the last forward; gradients accumulate (scaled by
 * 1/gradient_accumulation_steps, and by the loss scale under fp16). The
 * backward of the last micro-batch before a boundary also reduces the
 * gradients across ranks as its modules finish (on the communication thread
 * with overlap_comm), so ds_step must follow it, for every micro-batch:
 * until then ds_forward and ds_save_checkpoint fail with DS_ERR_INVALID_ARG
 * and change nothing (a second backward would add to gradients already
 * reduced; a checkpoint would count a micro-batch whose update it lacks).
 * A module whose backward (or recomputed forward) fails fails this call,
 * naming it, but the backward goes on through the modules before it,
 * computing on what it has, so this rank still makes every collective the
 * others make (the failed module's gradients handed over as they stand:
 * the gradient buckets are cut at parameters, not where a module's
 * ds_module_grads_final calls fell). Call ds_step as after any backward: at
 * the boundary it fails on every rank. */
ds_status ds_backward(engine_t *e);

/* At a gradient-accumulation boundary: reduce gradients across ranks, unscale,
 * check overflow (fp16: skip the step on all ranks and lower the scale), clip
 * to gradient_clipping by global norm, update the parameters, advance the
 * scheduler. Between boundaries it only counts the micro-step. Refused,
 * changing nothing, without a ds_backward since the last ds_step.
 * A run that cannot learn fails here with DS_ERR_NONFINITE naming the step:
 * fp32, bf16 and a static fp16 scale after zero_engine.max_consecutive_skips
 * steps in a row with NaN or inf gradients (default 3); fp16 with a dynamic
 * scale when an overflow comes with the scale at fp16.min_loss_scale.
 * When a module's backward failed on some rank since the last boundary
 * (ds_backward), the boundary's ds_step drops the window's gradients on
 * every rank and updates nothing: the step counts as skipped (the loss scale
 * and the schedule as they were; ds_step_info.skipped), and every rank fails,
 * the failing rank with its own error, the others with "rank R failed with
 * ...". The next window trains as if the dropped one had never come (but
 * for dropout, whose streams follow the micro-batches counted). Costs
 * nothing when no backward failed: the flag rides the step's loss
 * all-reduce. So does a hash of each rank's collective calls so far
 * (ds_comm_sequence): where the ranks' calls have differed, every rank's
 * ds_step fails with DS_ERR_COMM and nothing is updated, since what they
 * reduced cannot be trusted (zero_engine.check_collectives names the first
 * call that differed).
 * An update that fails part way (offloaded optimizer state whose swap file
 * cannot be read or written on some rank: a failing or full disk) fails
 * ds_step on every rank at once, the others saying which rank and why (the
 * ranks agree before the parameters' gather). Part of the partitions may
 * then be updated and part not, so from then on ds_forward, ds_evaluate,
 * ds_predict, ds_save_checkpoint and ds_save_weights are refused, naming
 * that step, until a ds_load_checkpoint with the optimizer state (which
 * makes lost swap files anew) or a restart from the last checkpoint, which
 * the failure left intact. */
ds_status ds_step(engine_t *e);

typedef struct ds_step_info {
    int64_t step;         /* optimizer steps taken (including skipped ones) */
    int64_t epoch;        /* data epoch of the last micro-batch */
    int64_t micro_steps;  /* micro-batches since the start */
    double loss;          /* mean loss over the global batch (all ranks) */
    double lr;            /* learning rate used by this step */
    double grad_norm;     /* global gradient norm before clipping (unscaled) */
    double loss_scale;    /* fp16 scale after this step; 1 otherwise */
    bool skipped;         /* no update: an fp16 overflow, non-finite gradients, or a
                             backward that failed on some rank (ds_step) */
    int64_t samples;      /* samples consumed by all ranks since the start */
    int stop_signal;      /* a preemption signal reached some rank before this
                             step's boundary (all ranks agree): save and exit
                             128 + it (ds_preempt_install); 0 otherwise */
} ds_step_info;

/* One optimizer step from the engine's data loader: gradient_accumulation_steps
 * micro-batches of train_micro_batch_size_per_gpu on every rank, forward,
 * backward, step. An epoch is every row once (padded or dropped to equal
 * counts per rank, dataset.h): a step never mixes two epochs, so the last
 * step of an epoch takes the micro-batches left when they are fewer, and
 * its gradient is their mean (as the Hugging Face Trainer's last, partial
 * accumulation window); an epoch is ceil(ceil(rows per rank / micro batch)
 * / gradient_accumulation_steps) steps. The next epoch starts reshuffled
 * from the seed. A module's
 * backward failing on some rank fails the call on every rank at the
 * boundary (ds_step), the window's micro-batches consumed. */
ds_status ds_train_batch(engine_t *e, ds_step_info *out);

/* The info of the last optimizer step (after ds_step at a boundary). */
ds_status ds_last_step_info(const engine_t *e, ds_step_info *out);

/* Inference on a HOST batch: the output of the module before the loss (a
 * classifier's logits [B, n_classes], a language model's [B, T, vocab]) into
 * host memory `out` of ds_output_elems(e, B, T) floats. No dropout; targets
 * are not needed (and not read). Collective under ZeRO stage 3 (parameters
 * are gathered) and at stages 1-2 after an update (an embedding's rows), so
 * every rank calls it the same number of times; a rank with nothing left
 * passes a batch with B = 0. A rank whose batch is refused still takes part
 * in the call's collectives, so the other ranks' calls finish; only its own
 * call fails. A rank whose own piece of the parameters could not be read
 * (stage 3, offload_param on NVMe) fails every rank's call: the others
 * computed with the zeros that went in its place. */
ds_status ds_predict(engine_t *e, const ds_batch *host_batch, float *out);
/* Floats ds_predict writes for a batch of B rows of length T. */
size_t ds_output_elems(const engine_t *e, int B, int T);

/* Evaluation on a HOST batch with its targets: forward through the loss
 * without dropout, keeping nothing for a backward and changing no training
 * state. *loss: this rank's mean loss over the items its batch counts (0
 * when none), *weight: their weight (the loss module's y[1]: rows, counted
 * tokens, a weight sum). Over ranks and batches the mean is
 * sum(loss * weight) / sum(weight) (ds_all_reduce_host). Collective as
 * ds_predict is: a rank with nothing left passes B = 0 and gets 0, 0; a
 * refused batch fails on its rank only. Not between ds_forward and its
 * ds_backward. */
ds_status ds_evaluate(engine_t *e, const ds_batch *host_batch, double *loss, double *weight);

/* Sum a small host buffer over all ranks (e.g. confusion matrices). */
ds_status ds_all_reduce_host(engine_t *e, void *buf, size_t count, ds_dtype t);

/* Introspection. */
int ds_rank(const engine_t *e);
int ds_world_size(const engine_t *e);
const ds_config *ds_get_config(const engine_t *e);   /* resolved */
const ds_model *ds_get_model(const engine_t *e);
/* The config's monitors (tensorboard, csv_monitor; engine/monitor/monitor.h)
 * on rank 0, NULL elsewhere and when none is enabled; borrowed. The engine
 * writes Train/Samples/{train_loss, lr, grad_norm, loss_scale,
 * samples_per_sec, memory_<purpose>_MiB} at every step; a training loop adds
 * its own with ds_monitor_write(ds_get_monitor(e), "Eval/accuracy", v,
 * info.samples), a no-op on NULL. */
ds_monitor *ds_get_monitor(const engine_t *e);
int64_t ds_global_step(const engine_t *e);
double ds_get_lr(const engine_t *e);
void ds_memory_report(const engine_t *e, ds_mem_report *out);
void ds_comm_report(const engine_t *e, ds_comm_stats *out);
/* Model-state bytes the ZeRO paper predicts per rank for this engine's
 * Psi, N, stage and precision (params + grads + master + optimizer), and
 * at stage 3 the persistent modules' whole fp32 copy on every rank
 * (stage3_param_persistence_threshold) and hpZ's secondary piece. */
uint64_t ds_expected_model_state_bytes(const engine_t *e);
/* Before building an engine: what a model and config will hold per rank,
 * by purpose and place, is zero/estimate.h (ds_estimate_model,
 * ds_estimate_params; the zero_estimate program). ds_initialize runs it
 * and fails DS_ERR_OOM, naming the offload that would fit, when the
 * host's ranks would need more than MemAvailable (DS_MEM_LIMIT overrides;
 * "off" skips the check; a DS_MEM_LIMIT that is not a size from 1M to 2^63
 * bytes fails DS_ERR_INVALID_ARG). */

/* Copy the full fp32 parameter of `name` (Hugging Face name) into host
 * `out` (numel floats); gathers under stage 3. Collective. */
ds_status ds_get_param(engine_t *e, const char *name, float *out, size_t numel);
/* After ds_backward and before the boundary ds_step: the full fp32 gradient
 * of `name` accumulated so far on this rank, averaged over ranks (gathers
 * and reduces as the stage requires; for tests and debugging). Collective. */
ds_status ds_get_grad(engine_t *e, const char *name, float *out, size_t numel);
/* Overwrite a parameter everywhere (e.g. loading pretrained weights before
 * training); every rank passes the same values. Collective. Errors:
 * DS_ERR_NONFINITE naming the parameter and the first element that is NaN
 * or inf (nothing is changed). */
ds_status ds_set_param(engine_t *e, const char *name, const float *values, size_t numel);
/* DeepSpeed's exp_avg_mask for OneBitAdam and ZeroOneAdam (in DeepSpeed a
 * param group's key, e.g. zeros over BERT's padded embedding rows): mask
 * (numel floats, the shape of parameter `name`, every rank the same) is
 * multiplied into the compressed momentum / gradient / synchronised change
 * of that parameter after each decompression, so a 0 element gets no
 * momentum from the compressed phases (zero/onebit.h). Parameters never
 * given one keep 1. Not saved in checkpoints (as DeepSpeed, which keeps the
 * training script's mask on load): call it after ds_initialize, also when
 * resuming. Local. Errors: DS_ERR_INVALID_ARG for another optimizer, an
 * unknown name or a wrong numel; DS_ERR_NONFINITE for a NaN or inf. */
ds_status ds_set_exp_avg_mask(engine_t *e, const char *name, const float *mask, size_t numel);
/* ds_set_param shaped as a weight loader's callback (hf/hf.h's
 * ds_hf_set_fn): `engine` is the engine_t. */
ds_status ds_set_param_cb(void *engine, const char *name, const float *values, size_t numel);

/* Write every parameter, fp32, under its Hugging Face name, to one
 * safetensors file at `path` (rank 0 writes, atomically: path.tmp then
 * rename; one tensor in memory at a time). Collective. When rank 0 cannot
 * write it (a missing folder, a full disk part way) the call fails on every
 * rank, the others' saying "rank 0 failed with DS_ERR_IO: ...", and `path`
 * keeps what it held. */
ds_status ds_save_weights(engine_t *e, const char *path);

/* ---- checkpoints (engine/engine_ckpt.c) -----------------------------------
 *
 *   DS_TRY(ds_save_checkpoint(e, "ckpt", NULL, "{\"epoch\": 3}"));  // tag global_step{N}
 *   ...                                   // a crash, a new job, maybe another world size
 *   DS_TRY(ds_load_checkpoint(e, "ckpt", NULL, DS_LOAD_ALL));         // tag from ckpt/latest
 *
 * Layout: DIR/TAG/meta.json (config, world size, stage, precision, parameter
 * table, counters, scheduler, loss scaler, RNG seed, data position, client
 * state, its own checksum; engine/io/ckpt_meta.h) and one
 * DIR/TAG/shard-RRRRR-of-WWWWW.dsck per
 * rank holding its partition of the fp32 master weights, then of the
 * optimizer moments, in zstd frames with checksums (engine/io/ckpt_file.h).
 * DIR/latest names the newest complete tag (first line) and carries its
 * checksum (second line).
 *
 * Crash safety: ranks write into DIR/TAG.tmp/ and fsync their file and its
 * entry in the folder; after every rank has finished (a collective), rank 0
 * writes meta.json (meta.json.tmp, fsync, rename, fsync TAG.tmp), renames
 * TAG.tmp to TAG, then replaces DIR/latest through latest.tmp + fsync +
 * rename, fsyncing DIR after each rename. A test records a save's system
 * calls and checks that order, and that every fsync in it is needed. A process killed
 * at any point leaves DIR/latest naming a complete checkpoint (the previous
 * one until the last rename); a stale TAG.tmp is removed by the next save of
 * that tag, or by ds_checkpoint_clean at the start of the next job. A save
 * that fails (a full disk) removes its TAG.tmp (rank 0, before it returns).
 *
 * Exact resume: at the same world size the loaded run continues bit for bit
 * as if it had never stopped (weights, moments, step counters, Adam's step,
 * scheduler position, loss scaler, RNG seed and dropout stream, data order).
 * Elastic resume: a checkpoint of N ranks at stage S loads into M ranks at
 * stage S' (the flat offsets do not depend on the world size; each rank reads
 * and decompresses only the frames overlapping its new partition, all of them
 * at stage 0, which replicates the optimizer state). The data loader
 * continues at the same global sample of the same epoch; results then differ
 * from the N-rank run only by the order of floating-point sums (and dropout
 * masks, which are drawn per rank).
 *
 * Tuning through the environment (read by ds_save_checkpoint):
 *   DS_CKPT_FRAME_ELEMS  fp32 values per compressed frame (default 1048576 =
 *                        4 MiB; 16 .. 67108864)
 *   DS_CKPT_ZSTD_LEVEL   zstd level (default 1; see bench/RESULTS.md) */

/* Save the engine's complete training state as DIR/TAG (tag NULL:
 * "global_step{N}"). client_state_json: any JSON value stored verbatim in
 * meta.json (NULL for none); read it back with ds_checkpoint_client_state.
 * Collective: every rank calls it with the same arguments, at a
 * gradient-accumulation boundary (not between ds_forward and the ds_step
 * completing the step). DIR is created if needed; an existing DIR/TAG is
 * replaced atomically. Every rank returns the same status; a failure names the
 * rank and file; a full disk also says how many bytes were free. DIR is
 * locked for this job on the first save (ds_checkpoint_clean): another job
 * writing into it makes the save fail. Every rank must see the same DIR (a
 * shared file system at the same path on every host): before writing its
 * shard each rank reads back a marker rank 0 has just written into DIR
 * (engine/io/ckpt_shared.h; one small file write and read a save), and a
 * rank that sees another folder fails the save with one line naming it,
 * its host and DIR. Errors: DS_ERR_INVALID_ARG (bad tag
 * or JSON, not at a boundary), DS_ERR_IO (the file system, the lock),
 * DS_ERR_COMM, DS_ERR_NONFINITE (a
 * weight or optimizer moment is NaN or inf: nothing is saved, `latest` keeps
 * naming the last good checkpoint). */
ds_status ds_save_checkpoint(engine_t *e, const char *dir, const char *tag,
                             const char *client_state_json);

/* The tag ds_save_checkpoint gives a NULL tag at this step, "global_step{N}",
 * into buf (cap bytes): what a training loop that saved with NULL remembers
 * to go back to. */
void ds_checkpoint_tag(const engine_t *e, char *buf, size_t cap);

/* Remove what unfinished saves left in DIR (every TAG.tmp folder and
 * latest.tmp; nothing else), rank 0 printing each path it removes. Call it
 * once at the start of a job that will save into DIR (train_cls does). It
 * first takes DIR's lock (as ds_save_checkpoint does): one job at a time
 * writes into a folder, and a second one fails here, at start-up, naming the
 * job that holds it ("DIR is being written by another job (DIR/.lock held by
 * pid 4242 on node7 since ...)") instead of interleaving its tags with the
 * first's. The lock is an flock on DIR/.lock that rank 0's process holds
 * until it ends, so a job that dies however it dies frees it. DIR is
 * created if needed. It then checks, as every save does, that every rank
 * sees the DIR rank 0 locked, so a job whose hosts do not share DIR stops
 * here: "checkpoint folder DIR: rank 1 (host node2) does not see the folder
 * rank 0 (host node1) writes (...); every rank must see the same checkpoint
 * folder: ...". Collective; every rank returns the same status.
 * Errors: DS_ERR_IO. */
ds_status ds_checkpoint_clean(engine_t *e, const char *dir);

/* Bounded disk use: keep the newest `keep` checkpoints in DIR (by the step
 * their meta.json records) and the one DIR/latest names, removing the
 * others, rank 0 printing each. Folders that are not checkpoints this
 * version reads are left alone; a removal is crash-safe (renamed to TAG.tmp
 * first, which ds_checkpoint_clean clears). Call it after a save
 * (train_cls and train_lm --save-total-limit K do). Collective; every rank
 * returns the same status. Errors: DS_ERR_IO, DS_ERR_CORRUPT (latest
 * unreadable: nothing is removed), DS_ERR_INVALID_ARG (keep < 1). */
ds_status ds_checkpoint_prune(engine_t *e, const char *dir, int keep);

/* What ds_load_checkpoint restores; DeepSpeed's load_checkpoint arguments. */
typedef enum ds_load_flags {
    DS_LOAD_ALL = 0,               /* everything: exact resume */
    DS_LOAD_NO_OPTIMIZER = 1 << 0, /* keep this engine's optimizer moments, Adam step
                                      count and loss scaler (load_optimizer_states=False) */
    DS_LOAD_NO_SCHEDULER = 1 << 1, /* keep this engine's lr schedule position
                                      (load_lr_scheduler_states=False) */
    DS_LOAD_MODULE_ONLY = 1 << 2,  /* only the weights: also no step counters, data
                                      position or RNG (load_module_only=True) */
} ds_load_flags;

/* Load DIR/TAG (tag NULL: the one DIR/latest names) into the engine.
 * Collective. Verifies first, before changing anything, the checks of
 * ds_checkpoint_verify shared out over the ranks: every rank reads `latest`
 * and meta.json, verifying their checksums (engine/io/ckpt_seal.h), and
 * finds every shard file present with its recorded size and no file
 * extra; it opens the files it will read (header, index, their checksums
 * against meta.json) and checks the checksum of every frame it will read; it
 * checks that the parameter table equals this model's and the optimizer's
 * moments match (unless not loaded). All ranks agree on the outcome: a
 * failure anywhere leaves every engine as it was and returns the same error
 * (naming the file) on every rank; only a failure while reading what was
 * just verified (a file changed underneath, or a NaN or inf in the values,
 * which a save refuses to write: DS_ERR_NONFINITE naming the tensor and the
 * element) leaves the engine partly loaded: it is then refused like after a
 * failed update (ds_step), naming the load, until a load succeeds in full.
 * With the optimizer state (no DS_LOAD_NO_OPTIMIZER / DS_LOAD_MODULE_ONLY)
 * the load also restores an engine whose offload files an I/O failure lost
 * (offload_optimizer / offload_param on NVMe): it makes them anew, empty,
 * and writes every value, so training goes on in the same engine.
 * The world size, ZeRO stage, precision and batch split may differ from the
 * saving run's; the config in use is this engine's own. Pending gradients are
 * dropped.
 * flags: DS_LOAD_* or'ed. Errors: DS_ERR_IO (missing files), DS_ERR_CORRUPT
 * (checksums, truncation, a world-size mismatch inside the folder),
 * DS_ERR_INVALID_ARG (another model, incompatible optimizer state, flags). */
ds_status ds_load_checkpoint(engine_t *e, const char *dir, const char *tag, unsigned flags);

/* ---- preemption (engine/engine_launch.c) -------------------------------
 *
 * A job told to stop keeps its work: Slurm preemption, a spot instance or a
 * Kubernetes eviction send SIGTERM, and a scheduler can warn earlier with a
 * chosen signal (sbatch --signal=USR1@90). The library installs no handler
 * unless asked:
 *
 *   DS_TRY(ds_preempt_install(e, NULL, 0));  // SIGTERM + zero_engine.save_on_signal
 *   for (;;) {
 *       DS_TRY(ds_train_batch(e, &info));
 *       if (info.stop_signal) {               // every rank sees the same value
 *           DS_TRY(ds_save_checkpoint(e, "ckpt", NULL, NULL));
 *           return 128 + info.stop_signal;   // 143 for SIGTERM, as a shell reports it
 *       }
 *   }
 *
 * A signal reaching any one rank (or engine-run, which passes it to every
 * rank) is seen by all ranks at the next optimizer-step boundary: the flag
 * rides on the boundary's existing loss all-reduce (two doubles instead of
 * one; a second small all-reduce only when a signal came), so it costs
 * nothing when none comes. Signals during accumulation micro-steps or during
 * a save wait for that boundary; a second signal is counted and changes
 * nothing (the save goes on). An application with its own handlers calls
 * ds_preempt_request from them instead of installing these. */

/* Handlers for SIGTERM, the config's zero_engine.save_on_signal (e may be
 * NULL: none) and extra[0..n_extra) (SIGUSR1, SIGUSR2, SIGINT, SIGHUP,
 * SIGXCPU, SIGPWR), process-wide, each recording a request and printing one
 * line on stderr. Also the relay engine-run asks for (DS_PREEMPT_RELAY).
 * Safe to call again. Errors: DS_ERR_INVALID_ARG for another signal. */
ds_status ds_preempt_install(const engine_t *e, const int *extra, int n_extra);
/* Put back the handlers that were there before ds_preempt_install. */
void ds_preempt_uninstall(void);
/* The signals installed (relay excluded) into out[0..cap); returns how many. */
int ds_preempt_signals(int *out, int cap);
/* Record a request for `signo` as the handlers do; async-signal-safe. */
void ds_preempt_request(int signo);
/* This process's first requested signal, 0 when none. */
int ds_preempt_pending(void);

typedef enum ds_preempt_during {
    DS_PREEMPT_BETWEEN_STEPS = 0, /* after a boundary, before the next forward */
    DS_PREEMPT_IN_STEP,           /* during micro-batch `micro` (1-based) of `gas` */
    DS_PREEMPT_IN_SAVE,           /* during ds_save_checkpoint */
} ds_preempt_during;

typedef struct ds_preempt_info {
    int signo;          /* the first signal; 0: none came */
    int count;          /* signals received */
    double seconds_ago; /* since the first came */
    int during;         /* ds_preempt_during when it came */
    int micro, gas;
} ds_preempt_info;
void ds_preempt_get(ds_preempt_info *out);
/* Block until a request (returns its signal; 0 if nothing is installed): for
 * a watchdog thread that ends the process when a save takes too long. */
int ds_preempt_wait(void);
/* Forget the request (an application that handled it and goes on). */
void ds_preempt_reset(void);

/* Free everything; collective (barrier). Safe on NULL. */
void ds_finalize(engine_t *e);

#ifdef __cplusplus
}
#endif
#endif /* DS_ENGINE_H */
