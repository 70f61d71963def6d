#!/usr/bin/env bash
# A hung rank ends the job with its name; a slow one does not (issue 15,
# item 1). train_cls through engine-run at 2 ranks (a small BERT, ZeRO-2
# with overlap_comm, so gradient buckets travel on the communication thread),
# zero_engine.comm_timeout_s = 5, one case per ctest test:
#
#   stop     rank 1 gets SIGSTOP during training and never SIGCONT. Rank 0's
#            deadline fires: one line names the step, the collective and what
#            it was for (gradient bucket / module, or the step's loss
#            all-reduce), rank 1 and the time waited; the job ends non-zero
#            within comm_timeout_s + 15 s of the SIGSTOP (rank 0 ends it with
#            MPI_Abort at exit instead of MPI_Finalize, which would wait for
#            the stopped rank forever), and no rank is left behind.
#   compute  rank 1 is stuck computing (DS_FAULT_INJECT=stall:train:step30:
#            rank=1 spins at the start of step 30): the same, timed from the
#            line rank 1 prints when it starts spinning.
#   slow     rank 1 gets SIGSTOP, and SIGCONT 1.5 s later (a third of the
#            timeout): the job trains to the end and exits 0, every step in
#            its metrics, no timeout printed.
#
#   test_hung_rank.sh BINDIR WORKDIR CASE
set -u
. "$(dirname "$0")/../unit/test_util.sh"
need_args 3 "BINDIR WORKDIR CASE" $#
bin=$(readlink -f "$1")
tcase=$3
rm -rf "$2" && mkdir -p "$2" && cd "$2" || exit 1
work=$(pwd -P)
export OMP_NUM_THREADS=1
T=5 # comm_timeout_s: short, so the test is; the bound checked is T + 15 s
"$bin/gen_sentences" --rows 600 --seed 5 --out data.csv >/dev/null || exit 1
cat >cfg.json <<JSON
{"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "zero_optimization": {"stage": 2, "overlap_comm": true},
 "zero_engine": {"comm_timeout_s": $T}}
JSON
# start STEPS: train_cls in the background; sets $pid
start() {
  "$bin/engine-run" --np 2 --config cfg.json train_cls --data data.csv --model bert \
    --layers 2 --hidden 64 --heads 2 --intermediate 128 --max-seq-len 64 --dropout 0 \
    --max-steps "$1" --metrics "$work/m.jsonl" </dev/null >out.log 2>err.log &
  pid=$!
}
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
steps() { grep -c "^{\"step\"" m.jsonl 2>/dev/null; }
# wait for the job, at most LIMIT s (then kill it, a hang); sets rc
wait_job() {
  local limit=$1 t0
  t0=$(now)
  while kill -0 $pid 2>/dev/null; do
    if [ "$(awk -v a="$t0" -v b="$(now)" -v l="$limit" 'BEGIN { print (b - a > l) }')" = 1 ]; then
      fail "the job did not end within $limit s: killing it"
      for r in 0 1; do p=$(rank_pid $pid $r) && [ -n "$p" ] && kill -KILL "$p"; done
      kill -KILL $pid 2>/dev/null
      break
    fi
    sleep 0.05
  done
  wait $pid
  rc=$?
}
# The one line of a hung job: the step, the operation, rank 1, the time.
check_hung() {
  local took=$1 lines
  [ "$rc" -ne 0 ] || fail "the job exited 0 with a rank hung"
  awk -v t="$took" -v l=$((T + 15)) 'BEGIN { exit !(t <= l) }' ||
    fail "the job ended $took s after rank 1 hung, more than comm_timeout_s + 15 = $((T + 15)) s"
  lines=$(grep -c "waited [0-9.]* s for" err.log)
  [ "$lines" -eq 1 ] || fail "$lines lines say what was waited for, want 1"
  grep -Eq "^train_cls: training step [0-9]+: [a-z_]+( of [^:]+)?: rank 0 waited [0-9.]+ s for rank 1( \(.*\))?$" err.log ||
    fail "no line naming the step, the operation, rank 1 and the time"
  # The last step before the hang is at most a step away from the one named.
  echo "$(sed -n 's/^train_cls: \(training step [0-9]*: .*\)/\1/p' err.log); job ended $took s after rank 1 hung (rc $rc)"
  grep -q "MPI_Finalize\|^-----" err.log && fail "mpirun's banners reached the output"
  sleep 0.5 # the launcher reaps; then no rank of this job may remain
  pgrep -f "train_cls --config $work/cfg.json" >/dev/null &&
    fail "ranks still running after engine-run returned: $(pgrep -af "train_cls --config $work/cfg.json")"
}

case $tcase in
stop)
  start 100000
  r1=""
  while [ -z "$r1" ] && kill -0 $pid 2>/dev/null; do r1=$(rank_pid $pid 1); done
  until [ "$(steps)" -ge 20 ] || ! kill -0 $pid 2>/dev/null; do sleep 0.02; done
  kill -STOP "$r1"
  t0=$(now)
  wait_job $((T + 60))
  check_hung "$(since "$t0")"
  ;;
compute)
  DS_FAULT_INJECT=stall:train:step30:rank=1 start 100000
  t0=""
  until [ -n "$t0" ] || ! kill -0 $pid 2>/dev/null; do
    grep -q "computes forever at train:step30" err.log 2>/dev/null && t0=$(now)
    sleep 0.02
  done
  [ -n "$t0" ] || t0=$(now)
  wait_job $((T + 60))
  check_hung "$(since "$t0")"
  [ "$(steps)" -eq 29 ] || fail "$(steps) steps before the stuck one, want 29"
  ;;
slow)
  N=200 # a few seconds of training: the stop lands in the middle
  start $N
  r1=""
  while [ -z "$r1" ] && kill -0 $pid 2>/dev/null; do r1=$(rank_pid $pid 1); done
  until [ "$(steps)" -ge 20 ] || ! kill -0 $pid 2>/dev/null; do sleep 0.02; done
  kill -STOP "$r1"
  sleep 1.5
  kill -CONT "$r1"
  wait_job 120
  [ "$rc" -eq 0 ] || { fail "a rank stopped for 1.5 s (timeout $T s) failed the job: rc $rc"; tail -5 err.log; }
  [ "$(steps)" -eq $N ] || fail "$(steps) steps in the metrics, want $N"
  grep -q "waited" err.log && fail "a timeout was printed: $(grep waited err.log)"
  echo "rank 1 stopped for 1.5 s after step 20 or later: the job trained all $N steps (rc $rc)"
  ;;
*)
  echo "unknown case $tcase" >&2
  exit 2
  ;;
esac
[ $fails -eq 0 ] && cd .. && rm -rf "$work"
finish
