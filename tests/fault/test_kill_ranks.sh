#!/usr/bin/env bash
# A dead rank ends the job with its name, and the last complete checkpoint
# resumes (issue 15, item 2). One training run of train_cls through
# engine-run at 2 ranks (a BERT of 1.6M parameters, ZeRO-2, a checkpoint
# every 3 steps: about 10 MB of state per rank, so saves take a good part of
# the run), killed with SIGKILL KILLS times at random points and resumed with
# --resume each time:
#   - start-up (the rank is killed as soon as it exists: loading data,
#     MPI_Init, ds_initialize), during training (forward, backward, the
#     collectives; a random moment after the first step), or during a save
#     (the moment a TAG.tmp folder appears); the rank, 0 or 1, at random;
#   - every time the job ends within 15 s of the kill, non-zero, and
#     engine-run names the rank ("rank R ... was killed by signal 9");
#   - every time `latest` (once there is one) names a checkpoint that
#     zero_to_fp32 --verify accepts, and the next run resumes from exactly
#     that step ("resumed from ck/global_stepN at step N") and clears what
#     the killed save left;
#   - a last run without a kill finishes all steps from the last checkpoint.
# The test reports where the kills landed and the longest kill-to-end time;
# it needs at least 2 kills at start-up and 2 inside a save.
#
#   test_kill_ranks.sh BINDIR WORKDIR [KILLS [SEED]]
set -u
. "$(dirname "$0")/../unit/test_util.sh"
[ $# -ge 2 ] || need_args 2 "BINDIR WORKDIR [KILLS [SEED]]" $#
bin=$(readlink -f "$1")
rm -rf "$2" && mkdir -p "$2" && cd "$2" || exit 1
work=$(pwd -P)
KILLS=${3:-20}
RANDOM=${4:-15}
export OMP_NUM_THREADS=1
N=100000 # steps: the runs never end by themselves, the last one stops at $last
"$bin/gen_sentences" --rows 800 --seed 5 --out data.csv >/dev/null || exit 1
cat >cfg.json <<'JSON'
{"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "zero_optimization": {"stage": 2}, "zero_engine": {"comm_timeout_s": 5}}
JSON
# run LOG STEPS: train_cls in the background, resuming; sets $pid
run() {
  "$bin/engine-run" --np 2 --config cfg.json train_cls --data data.csv --model bert \
    --layers 2 --hidden 256 --heads 4 --intermediate 1024 --max-seq-len 64 --dropout 0 \
    --max-steps "$2" --save-steps 3 --ckpt-dir ck --resume </dev/null >"$1" 2>&1 &
  pid=$!
}
latest_step() { head -n1 ck/latest 2>/dev/null | sed -n 's/^global_step\([0-9]*\)$/\1/p'; }

at_start=0 in_save=0 in_train=0 worst=0 resumed=0
for i in $(seq "$KILLS"); do
  before=$(latest_step)
  log=run$i.log
  run "$log" $N
  rank=$((RANDOM % 2))
  mode=$((i % 4)) # 0: start-up, 1: a save, 2-3: training
  victim=""
  while [ -z "$victim" ] && kill -0 $pid 2>/dev/null; do victim=$(rank_pid $pid $rank); done
  if [ $mode -eq 1 ]; then # the moment a save has begun
    until ls -d ck/*.tmp >/dev/null 2>&1 || ! kill -0 $pid 2>/dev/null; do :; done
    sleep "0.0$((RANDOM % 5))"
  elif [ $mode -ge 2 ]; then # a random moment after the first step
    until grep -q "resumed from\|no checkpoint in" "$log" || ! kill -0 $pid 2>/dev/null; do sleep 0.01; done
    sleep "0.$((RANDOM % 10))"
  fi
  kill -KILL "$victim" 2>/dev/null || { fail "kill $i: rank $rank ($victim) was gone already"; }
  t0=$(now)
  while kill -0 $pid 2>/dev/null; do
    [ "$(awk -v a="$t0" -v b="$(now)" 'BEGIN { print (b - a > 60) }')" = 1 ] && break
    sleep 0.02
  done
  took=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
  if kill -0 $pid 2>/dev/null; then
    fail "kill $i: the job still runs 60 s after rank $rank was killed"
    for r in 0 1; do p=$(rank_pid $pid $r) && [ -n "$p" ] && kill -KILL "$p"; done
  fi
  wait $pid
  rc=$?
  worst=$(awk -v a="$worst" -v b="$took" 'BEGIN { print (b > a ? b : a) }')
  awk -v t="$took" 'BEGIN { exit !(t <= 15) }' || fail "kill $i: the job ended $took s after the kill (> 15 s)"
  [ "$rc" -ne 0 ] || fail "kill $i: the job exited 0 with rank $rank killed"
  grep -q "^engine-run: rank $rank .*killed by signal 9" "$log" ||
    fail "kill $i: engine-run did not name rank $rank as killed: $(grep '^engine-run: rank' "$log")"
  # where it landed: before training, inside a save (its TAG.tmp is left), or training
  where=training
  if ! grep -q "resumed from\|no checkpoint in" "$log"; then
    where=start-up
    at_start=$((at_start + 1))
  elif ls -d ck/*.tmp >/dev/null 2>&1; then
    where=save
    in_save=$((in_save + 1))
  else
    in_train=$((in_train + 1))
  fi
  # what a resume finds: latest names a complete checkpoint, or none yet
  step=$(latest_step)
  if [ -n "$step" ]; then
    "$bin/zero_to_fp32" --verify ck >verify$i.log 2>&1 ||
      fail "kill $i: latest (global_step$step) does not verify: $(cat verify$i.log)"
  elif [ -e ck/latest ]; then
    fail "kill $i: ck/latest does not name a global_step tag: $(head -n1 ck/latest)"
  fi
  # this run resumed from the latest the previous kill left
  if grep -q "resumed from" "$log"; then
    resumed=$((resumed + 1))
    grep -q "^train_cls: resumed from ck/global_step$before at step $before\$" "$log" ||
      fail "kill $i: did not resume from global_step$before: $(grep 'resumed from' "$log")"
  fi
  printf 'kill %2d: rank %d during %-8s: job ended %5s s later (rc %d), latest global_step%s\n' \
    "$i" "$rank" "$where" "$took" "$rc" "${step:-(none)}"
done
# the last run: from the last checkpoint to its end, no kill
before=$(latest_step)
last=$((${before:-0} + 9))
run final.log $last
wait $pid
rc=$?
[ "$rc" -eq 0 ] || { fail "the last run failed (rc $rc)"; tail -5 final.log; }
[ -z "$before" ] || grep -q "^train_cls: resumed from ck/global_step$before at step $before\$" final.log ||
  fail "the last run did not resume from global_step$before"
[ "$(latest_step)" = "$last" ] || fail "the last run ended with latest global_step$(latest_step), want $last"
"$bin/zero_to_fp32" --verify ck >/dev/null 2>&1 || fail "the last checkpoint does not verify"
ls -d ck/*.tmp >/dev/null 2>&1 && fail "debris left after the last run: $(ls -d ck/*.tmp)"
echo "$KILLS kills: $at_start at start-up, $in_save inside a save, $in_train while training; $resumed runs resumed; longest kill-to-end $worst s"
[ $at_start -ge 2 ] || fail "only $at_start kills landed at start-up"
[ $in_save -ge 2 ] || fail "only $in_save kills landed inside a save"
[ $fails -eq 0 ] && cd .. && rm -rf "$work"
finish
