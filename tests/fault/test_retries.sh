#!/usr/bin/env bash
# train_cls --retries: a step that fails with an I/O error goes back to the
# last checkpoint in the same engine and trains on, bit for bit as a run that
# never failed. Two ranks, ZeRO stage 2, the optimizer state swapped to
# NVMe files (offload_optimizer nvme) under this test's folder:
#
#   clean      8 steps, a checkpoint every 2: the reference weights.
#   retried    the same, with rank 1's 5th swap write failing as a full disk
#              does (DS_FAULT_INJECT=error:nvme:swap_write:rank=1:nth=5, the
#              update of step 5): every rank's step 5 fails, both load
#              global_step4 into the same engine (rank 1's swap files made
#              anew) and train steps 5-8 again. The job exits 0 and its
#              weights are the clean run's, byte for byte.
#   no retry   the same failure without --retries: the job fails, naming
#              step 5, rank 1 and "No space left on device".
#   stale      the save folder holds another run's checkpoints (the clean
#              run's, up to global_step8) and this run's first update fails,
#              before it saved anything: --retries has nothing of its own to
#              go back to, so the job fails naming step 1, instead of taking
#              the other run's global_step8 and exiting 0 with its weights.
#   spent      --retries 1 and two failures (the 5th and the 7th write on
#              rank 1): the second one ends the job, naming it.
#   restarted  engine-run --max-restarts 1 and train_cls --resume, rank 1
#              killed (SIGKILL) before step 6 in the first start only
#              (DS_FAULT_INJECT=train:step6:rank=1:restart=0): engine-run
#              starts the job again, it resumes from global_step4, exits 0
#              with the clean run's weights.
#   restarts spent  the same kill in every start: the second death ends the
#              job, engine-run naming --max-restarts; --launcher none is
#              refused with --max-restarts; a config typo exits 2 and is not
#              started again.
#
#   test_retries.sh BINDIR WORKDIR      (KEEP=1: leave WORKDIR and its logs)
set -u
. "$(dirname "$0")/../unit/test_util.sh"
need_args 2 "BINDIR WORKDIR" $#
bin=$(readlink -f "$1")
rm -rf "$2" && mkdir -p "$2/nvme" && cd "$2" || exit 1
work=$(pwd -P)
export OMP_NUM_THREADS=1

"$bin/gen_sentences" --rows 400 --seed 5 --out data.csv >/dev/null || exit 1
cat >cfg.json <<JSON
{"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "zero_optimization": {"stage": 2,
   "offload_optimizer": {"device": "nvme", "nvme_path": "$work/nvme"}},
 "zero_engine": {"comm_timeout_s": 30}}
JSON
# train NAME [ARGS]: train_cls at 2 ranks, 8 steps, checkpoints every 2 into NAME/ckpt
train() {
  local d=$1
  shift
  "$bin/engine-run" --np 2 ${ER_OPTS:-} --config cfg.json train_cls --data data.csv --model bert \
    --layers 2 --hidden 64 --heads 2 --intermediate 128 --max-seq-len 64 --dropout 0 \
    --max-steps 8 --save-steps 2 --save-dir "$d" "$@" </dev/null >"$d.log" 2>&1
}

train clean || { fail "clean: the run failed"; tail -5 clean.log; finish; }
# as_clean NAME PATTERN: NAME's job exited 0 (rc), its log says PATTERN (where
# it went back to), and it ends with the clean run's weights, byte for byte
as_clean() {
  [ "$rc" -eq 0 ] || fail "$1: exit $rc, want 0: $(tail -3 "$1.log")"
  grep -q "$2" "$1.log" || fail "$1: no line '$2'"
  cmp -s clean/model.safetensors "$1/model.safetensors" ||
    fail "$1: the weights differ from the run that never failed"
}

# ---- retried ----
DS_FAULT_INJECT=error:nvme:swap_write:rank=1:nth=5 train retried --retries 1 \
  --metrics retried.jsonl
rc=$?
as_clean retried "^train_cls: --retries: resumed from retried/checkpoints at step 4$"
grep -q "step 5 failed with an I/O error: .*rank 1.*No space left on device" retried.log ||
  fail "retried: no line naming step 5's failure on rank 1"
grep "failed with an I/O error\|--retries" retried.log | head -3
# the metrics: steps 1-4, the retry (why steps 5.. come again), steps 5-8
steps=$(grep -o '^{"step": [0-9]*\|^{"retry"' retried.jsonl | sed 's/{"step": //; s/{"retry"/R/' | tr '\n' ' ')
[ "$steps" = "1 2 3 4 R 5 6 7 8 " ] || fail "retried: the metrics' steps are '$steps'"
grep -q '^{"retry": {"failed_step": 5, "from_step": 4, "error": "rank 1 failed with DS_ERR_IO: .*No space left on device' retried.jsonl ||
  fail "retried: the metrics' retry line: $(grep retry retried.jsonl)"
[ -z "$(ls -A nvme)" ] || fail "retried: swap folders left: $(ls nvme)"

# ---- no retry ----
DS_FAULT_INJECT=error:nvme:swap_write:rank=1:nth=5 train noretry
rc=$?
[ "$rc" -ne 0 ] || fail "no retry: the job exited 0 through a failed update"
grep -q "training step 5: .*rank 1.*No space left on device" noretry.log ||
  fail "no retry: no line naming step 5 and the disk: $(grep -i 'error\|fail' noretry.log | head -3)"

# ---- stale: another run's checkpoints are not this run's to go back to ----
cp -r clean stale || exit 1
DS_FAULT_INJECT=error:nvme:swap_write:rank=1:nth=1 train stale --retries 1
rc=$?
[ "$rc" -ne 0 ] || fail "stale: the job exited 0 through a failed first update"
grep -q "^train_cls: --retries: no checkpoint of this run's to go back to (none saved or resumed from yet)$" stale.log ||
  fail "stale: no line saying there is nothing to go back to: $(grep -i 'retries\|resumed' stale.log | head -3)"
grep -q "training step 1: .*No space left on device" stale.log ||
  fail "stale: step 1's failure is not named: $(grep -i 'error\|fail' stale.log | head -3)"

# ---- spent: a second failure after the one retry ends the job ----
DS_FAULT_INJECT=error:nvme:swap_write:rank=1:nth=5,error:nvme:swap_write:rank=1:nth=7 \
  train spent --retries 1
rc=$?
[ "$rc" -ne 0 ] || fail "spent: the job exited 0 through a second failure with one retry"
[ "$(grep -c 'resumed from' spent.log)" -eq 1 ] || fail "spent: want one retry"
grep -q "training step [0-9]*: .*No space left on device" spent.log ||
  fail "spent: the second failure is not named"

# ---- restarted: engine-run --max-restarts starts the killed job again ----
DS_FAULT_INJECT=train:step6:rank=1:restart=0 ER_OPTS="--max-restarts 1" train restarted --resume
rc=$?
as_clean restarted "^train_cls: resumed from restarted/checkpoints/global_step4 at step 4$"
grep -q "^engine-run: the job ended with status 137: starting it again (restart 1 of --max-restarts 1; DS_RESTART_COUNT=1)$" restarted.log ||
  fail "restarted: no line saying the job starts again: $(grep '^engine-run' restarted.log | tail -3)"

# ---- restarts spent ----
DS_FAULT_INJECT=train:step6:rank=1 ER_OPTS="--max-restarts 1" train respent --resume
rc=$?
[ "$rc" -eq 137 ] || fail "restarts spent: exit $rc, want 137 (rank 1's SIGKILL)"
grep -q "^engine-run: the job ended with status 137 after 1 restart(s); --max-restarts 1 spent$" respent.log ||
  fail "restarts spent: no line saying so: $(grep '^engine-run' respent.log | tail -2)"
# killed in its first save between the folder's rename and latest: the
# restart goes on from that checkpoint (no latest yet) and ends as clean
DS_FAULT_INJECT=ckpt:after_rename:rank=0:restart=0 ER_OPTS="--max-restarts 1" train firstsave --resume
rc=$?
as_clean firstsave "firstsave/checkpoints has no latest .*continuing from the newest complete checkpoint, global_step2"
"$bin/engine-run" --launcher none --max-restarts 1 --config cfg.json train_cls >none.log 2>&1
rc=$?
[ "$rc" -eq 2 ] && grep -q "max-restarts: .*runs APP in place" none.log ||
  fail "--launcher none --max-restarts: exit $rc: $(cat none.log)"
# a config error is not a failure a restart gets past: train_cls exits 2,
# and engine-run does not start the job again
sed 's/"gradient_accumulation_steps"/"gradient_acumulation_steps"/' cfg.json >typo.json
"$bin/engine-run" --np 2 --max-restarts 3 --config typo.json train_cls --data data.csv \
  --max-steps 2 </dev/null >typo.log 2>&1
rc=$?
[ "$rc" -eq 2 ] && grep -q "did you mean gradient_accumulation_steps" typo.log &&
  ! grep -q "starting it again" typo.log ||
  fail "a config typo under --max-restarts 3: exit $rc: $(cat typo.log)"

[ $fails -eq 0 ] && [ -z "${KEEP:-}" ] && cd .. && rm -rf "$work"
finish
