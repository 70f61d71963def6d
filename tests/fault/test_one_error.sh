#!/usr/bin/env bash
# One error, once (issue 15, item 8): when every rank fails alike, engine-run
# shows the message once, not once per rank, and mpirun's multi-line banners
# become one line naming a rank. train_cls through engine-run:
#   - a bad config (zero_optimization.stage 4) at 2 and at 4 ranks: every
#     rank prints the same error before MPI starts;
#   - a bad data line (a row without a label column): every rank reads the
#     data and fails on the same line;
#   - a second job on a checkpoint folder another job holds: rank 0 finds the
#     lock taken, and the others are told "rank 0 failed with DS_ERR_IO: ..."
#     (the same error in other words);
# each time: a non-zero exit, the message exactly once, no banner line of
# mpirun's ("-----", "Primary job", "mpirun detected"), and one engine-run
# line naming the rank that ended the job. --raw-output shows mpirun's
# banners and every rank's copy, which is what the relay took away.
#
#   test_one_error.sh BINDIR WORKDIR
set -u
. "$(dirname "$0")/../unit/test_util.sh"
need_args 2 "BINDIR WORKDIR" $#
bin=$(readlink -f "$1")
rm -rf "$2" && mkdir -p "$2" && cd "$2" || exit 1
work=$(pwd -P)
export OMP_NUM_THREADS=1
"$bin/gen_sentences" --rows 200 --seed 5 --out data.csv >/dev/null || exit 1
printf 'label,text\nsadness,fine\njoy\n' >bad.csv
cat >good.json <<'JSON'
{"train_micro_batch_size_per_gpu": 8, "zero_optimization": {"stage": 2}}
JSON
cat >bad.json <<'JSON'
{"train_micro_batch_size_per_gpu": 8, "zero_optimization": {"stage": 4}}
JSON
small="--model bert --layers 1 --hidden 32 --heads 2 --intermediate 64 --max-seq-len 32"

# once NAME NEEDLE NP CONFIG ARGS...: the job fails and NEEDLE is in exactly
# one line of its output, which holds no banner of mpirun's
once() {
  local name=$1 needle=$2 np=$3 cfg=$4
  shift 4
  # shellcheck disable=SC2086 # $small is a list of words
  "$bin/engine-run" --np "$np" --config "$cfg" train_cls $small "$@" </dev/null >"$name.out" 2>"$name.err"
  local rc=$? n
  [ "$rc" -ne 0 ] || fail "$name: the job exited 0"
  n=$(grep -cF -- "$needle" "$name.err")
  [ "$n" -eq 1 ] || { fail "$name: '$needle' in $n lines, want 1:"; cat "$name.err"; }
  grep -q '^-----\|Primary job\|mpirun detected\|mpirun noticed' "$name.err" &&
    fail "$name: mpirun's banner reached the output: $(grep -c . "$name.err") lines"
  # the rank seen ending first; or, when every rank failed before the watch
  # saw one and mpirun's banner named none, the rank whose error came first
  grep -Eq "^engine-run: (rank [0-9]+ exited with status [0-9]+|the job ended with status [0-9]+ after rank [0-9]+'s error above); mpirun stopped the other ranks$" "$name.err" ||
    fail "$name: no engine-run line naming the rank that ended the job"
  echo "$name: $(grep -F -- "$needle" "$name.err")"
}

once config2 "zero_optimization.stage: must be 0..3, got 4" 2 bad.json --data data.csv
once config4 "zero_optimization.stage: must be 0..3, got 4" 4 bad.json --data data.csv
once data "bad.csv:3" 2 good.json --data bad.csv

# A job holding ck (its rank 0 holds the lock until it ends) and a second one.
"$bin/engine-run" --np 2 --config good.json train_cls $small --data data.csv --max-steps 100000 \
  --save-steps 1000 --ckpt-dir ck </dev/null >first.out 2>&1 &
first=$!
until grep -q "train_cls: .* train / .* dev rows" first.out || ! kill -0 $first 2>/dev/null; do
  sleep 0.05
done
once lock "ck is being written by another job" 2 good.json --data data.csv --save-steps 5 \
  --ckpt-dir ck
kill -TERM $first # a preemption: it saves and exits 143
wait $first
rc=$?
[ "$rc" -eq 143 ] || fail "the first job exited $rc after SIGTERM, want 143"

# what the relay removed: with --raw-output every rank's copy and the banner
# shellcheck disable=SC2086
"$bin/engine-run" --raw-output --np 2 --config bad.json train_cls $small --data data.csv \
  </dev/null >raw.out 2>raw.err
[ "$(grep -c "zero_optimization.stage: must be 0..3, got 4" raw.err)" -eq 2 ] ||
  fail "--raw-output: not one copy of the error per rank"
grep -q '^-----' raw.err || fail "--raw-output: no banner of mpirun's"
[ $fails -eq 0 ] && cd .. && rm -rf "$work"
finish
