#!/usr/bin/env bash
# Preemption keeps the work: train_cls through engine-run at 2 ranks (a small
# BERT with dropout, ZeRO-2, 4 accumulation micro-steps per step, a
# checkpoint every 10 steps, zero_engine.save_on_signal SIGUSR1) is stopped
# by a signal at 10 moments and resumed, and every time
#   - the job exits 128 + the signal (143 for SIGTERM, 138 for SIGUSR1), and
#     says how long after the signal;
#   - latest names the checkpoint saved at the step boundary after the
#     signal, which verifies (zero_to_fp32 --verify), and the metrics hold
#     every step up to it once;
#   - --resume finishes the run: the metrics of both parts give every step
#     exactly once with the losses of a run that was never stopped, and the
#     final weights (model.safetensors) are the same bytes.
# The moments: a random step (after metrics line k, k random) plus a random
# delay, the signal sent to engine-run (relayed to every rank) or to one rank
# (the others learn at the step boundary), SIGTERM or SIGUSR1, once twice in
# a row; one run gets SIGTERM raised inside a save on rank 1 and a second one
# on rank 0 later in the same save (DS_FAULT_INJECT=term:...). With 4
# micro-steps per step most signals land between micro-steps; the test
# checks that some did, and that one landed in a save. One case saves on
# SIGUSR2 named by the trainer's --save-on-signal flag instead of the config
# (engine-run relays it). Every case's time from the signal to rank 0's
# exit stays within the bound the start-up line promises. Last, the bound
# itself: a save that cannot finish (rank 0 stuck inside it) ends the job
# at zero_engine.preempt_deadline_s with the watchdog's line, exit 143, and
# latest still naming the last complete checkpoint, which verifies.
#
#   test_preempt.sh BINDIR WORKDIR [SEED]
set -u
. "$(dirname "$0")/../unit/test_util.sh"
bin=$(readlink -f "$1")
rm -rf "$2" && mkdir -p "$2" && cd "$2" || exit 1
seed=${3:-7}
export OMP_NUM_THREADS=1
N=30 # steps: about 20 ms each here, so a signal sent after line k lands in the run
"$bin/gen_sentences" --rows 600 --seed 5 --out data.csv >/dev/null || exit 1
cat >cfg.json <<'JSON'
{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4,
 "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01}},
 "zero_optimization": {"stage": 2}, "zero_engine": {"save_on_signal": "SIGUSR1"}}
JSON
# run DIR ARGS...: train_cls in DIR, in the background; sets $pid
run() {
  local d=$1
  shift
  "$bin/engine-run" --np 2 --config cfg.json train_cls --data data.csv --model bert \
    --layers 2 --hidden 64 --heads 2 --intermediate 128 --dropout 0.1 --max-seq-len 64 \
    --max-steps $N --save-steps 10 --ckpt-dir "$d/ck" --metrics "$d/m.jsonl" \
    --save-dir "$d/out" "$@" </dev/null >>"$d/log" 2>&1 &
  pid=$!
}
losses() { sed -n 's/^{"step": \([0-9]*\), .*"loss": \([0-9.]*\),.*/\1 \2/p' "$1"; }

mkdir -p straight
run straight
wait $pid || { fail "the straight run failed"; cat straight/log; finish; }
losses straight/m.jsonl >straight/losses.txt
[ "$(wc -l <straight/losses.txt)" -eq $N ] || fail "straight run: $(wc -l <straight/losses.txt) steps"

# case: target signal twice fault
cases=("engine-run TERM 1 -" "engine-run USR1 1 -" "0 TERM 1 -" "1 TERM 1 -" "1 USR1 1 -"
       "engine-run TERM 2 -" "engine-run TERM 1 save" "engine-run USR2 1 flag" "engine-run TERM 1 -"
       "1 TERM 2 -")
awk -v s="$seed" 'BEGIN { srand(s); for (i = 0; i < 10; i++) print 1 + int(rand() * 18), int(rand() * 40) }' >moments.txt
in_step=0 in_save=0 i=0
while read -r k delay_ms; do
  read -r target sig times fault <<<"${cases[$i]}"
  i=$((i + 1))
  d=case$i
  mkdir -p $d
  if [ "$fault" = save ]; then
    # a SIGTERM inside the save of step 10 on rank 1, a second one on rank 0
    # in the same save: the save completes, the next boundary saves again
    DS_FAULT_INJECT="term:ckpt:after_shard_write:rank=1,term:ckpt:before_meta:rank=0" run $d
  else
    if [ "$fault" = flag ]; then run $d --save-on-signal USR2; else run $d; fi
    to=$pid
    if [ "$target" != engine-run ]; then # found while the ranks start up
      to=""
      while [ -z "$to" ] && kill -0 $pid 2>/dev/null; do to=$(rank_pid $pid "$target"); done
    fi
    until [ "$(cat $d/m.jsonl 2>/dev/null | wc -l)" -ge "$k" ] || ! kill -0 $pid 2>/dev/null; do
      sleep 0.01
    done
    sleep "0.0$(printf %02d "$delay_ms")"
    t0=$(now)
    for _ in $(seq "$times"); do kill -"$sig" "$to" 2>/dev/null; sleep 0.005; done
  fi
  wait $pid
  rc=$?
  took=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
  [ "$fault" = save ] && took="-"
  code=143
  [ "$sig" = USR1 ] && code=138
  [ "$sig" = USR2 ] && code=140
  saved=$(sed -n 's/.*saved [^ ]*\/global_step\([0-9]*\); exiting.*/\1/p' $d/log | head -1)
  after=$(sed -n 's/.*exiting [0-9]*, \([0-9.]*\) s after the signal.*/\1/p' $d/log | head -1)
  came=$(sed -n 's/.*(came \([^)]*\)).*/\1/p' $d/log | head -1)
  printf 'case %2d: %-4s to %-10s x%s%s after line %2s + %2s ms: exit %s, saved step %s, came %s, ' \
    $i "$sig" "$target" "$times" "$([ "$fault" = save ] && echo ' in a save')" "$k" "$delay_ms" \
    "$rc" "${saved:-none}" "${came:-?}"
  echo "${after:-?} s from signal to exit (rank 0), $took s to engine-run's exit"
  case "$came" in *micro-batch*) in_step=$((in_step + 1)) ;; *save*) in_save=$((in_save + 1)) ;; esac
  if [ "$rc" -ne $code ] || [ -z "$saved" ]; then
    fail "case $i: exit $rc (want $code), saved '${saved}'"
    tail -20 $d/log
    continue
  fi
  [ "$(head -n1 $d/ck/latest)" = "global_step$saved" ] || fail "case $i: latest is not global_step$saved"
  "$bin/zero_to_fp32" --verify $d/ck >/dev/null 2>&1 || fail "case $i: the checkpoint does not verify"
  [ "$(losses $d/m.jsonl | awk '{print $1}' | tr '\n' ' ')" = "$(seq 1 "$saved" | tr '\n' ' ')" ] ||
    fail "case $i: the metrics before the stop are not steps 1..$saved"
  bound=$(sed -n 's/.*within \([0-9.]*\) s of the signal.*/\1/p' $d/log | head -1)
  [ -n "$bound" ] || fail "case $i: no start-up line saying the bound"
  [ -n "$after" ] && [ -n "$bound" ] && awk -v a="$after" -v b="$bound" 'BEGIN { exit !(a > b) }' &&
    fail "case $i: $after s from the signal to the exit, past the promised $bound s"
  if [ "$fault" = flag ]; then run $d --resume --save-on-signal USR2; else run $d --resume; fi
  wait $pid || { fail "case $i: the resumed run failed"; tail -20 $d/log; continue; }
  losses $d/m.jsonl >$d/losses.txt
  cmp -s straight/losses.txt $d/losses.txt ||
    { fail "case $i: the losses differ from the run never stopped:"; diff straight/losses.txt $d/losses.txt | head; }
  cmp -s straight/out/model.safetensors $d/out/model.safetensors ||
    fail "case $i: the final weights differ from the run never stopped"
done <moments.txt
[ $in_save -ge 1 ] || fail "no signal came during a save"
[ $in_step -ge 1 ] || fail "no signal came between micro-steps"
echo "$in_step of 10 signals came between accumulation micro-steps, $in_save during a save"

# The bound: the steps before a preemption save the job at step 5; resumed
# without scheduled saves, a SIGTERM's save stalls on rank 0 (before its
# meta.json), so only the watchdog can end it, preempt_deadline_s (2 s)
# after the signal. The 2 s leave the ranks time to start the save here.
d=deadline
mkdir -p $d
sed 's/"save_on_signal": "SIGUSR1"/&, "preempt_deadline_s": 2/' cfg.json >$d/cfg.json
grep -q preempt_deadline_s $d/cfg.json || fail "deadline: the config edit did not apply"
"$bin/engine-run" --np 2 --config $d/cfg.json train_cls --data data.csv --model bert \
  --layers 2 --hidden 64 --heads 2 --intermediate 128 --dropout 0.1 --max-seq-len 64 \
  --max-steps 5 --save-steps 5 --ckpt-dir $d/ck </dev/null >>$d/log 2>&1 ||
  fail "deadline: the first part failed"
DS_FAULT_INJECT="stall:ckpt:before_meta:rank=0" "$bin/engine-run" --np 2 --config $d/cfg.json \
  train_cls --data data.csv --model bert --layers 2 --hidden 64 --heads 2 --intermediate 128 \
  --dropout 0.1 --max-seq-len 64 --max-steps $N --save-steps 1000 --ckpt-dir $d/ck --resume \
  --metrics $d/m.jsonl </dev/null >>$d/log 2>&1 &
pid=$!
until [ "$(cat $d/m.jsonl 2>/dev/null | wc -l)" -ge 2 ] || ! kill -0 $pid 2>/dev/null; do sleep 0.01; done
kill -TERM $pid
wait $pid
rc=$?
[ $rc -eq 143 ] || fail "deadline: exit $rc, want 143"
grep -q "within 2 s of the signal" $d/log || fail "deadline: the start-up line does not say 2 s"
grep -q "did not finish within zero_engine.preempt_deadline_s: exiting 143" $d/log ||
  { fail "deadline: no watchdog line"; tail -5 $d/log; }
[ "$(head -n1 $d/ck/latest)" = global_step5 ] || fail "deadline: latest is not global_step5"
"$bin/zero_to_fp32" --verify $d/ck >/dev/null 2>&1 || fail "deadline: global_step5 does not verify"
echo "deadline: $(grep -o 'came [0-9]* s ago' $d/log | head -1), exit $rc, latest $(head -n1 $d/ck/latest)"
[ $fails -eq 0 ] && cd .. && rm -rf "$2"
finish
