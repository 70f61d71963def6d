#!/usr/bin/env bash
# A rank that fails on its own ends the job at once, not after
# comm_timeout_s; ranks that fail together still exit cleanly. engine-run at
# 2 ranks with zero_engine.comm_timeout_s 100 (tests/fault/test_lone_exit.c):
#
#   lone  rank 1 exits 3 while rank 0 waits for it in a collective: the job
#         ends with status 3 within 50 s (half the timeout; the exit handler's
#         grace is 10 s), rank 0 never reports a timeout, and engine-run names
#         rank 1 and its status.
#   all   both ranks exit 3, two seconds apart: status 3 with no MPI_Abort.
#
#   test_lone_exit.sh BINDIR PROGRAM WORKDIR
set -u
. "$(dirname "$0")/../unit/test_util.sh"
need_args 3 "BINDIR PROGRAM WORKDIR" $#
bin=$(readlink -f "$1")
prog=$(readlink -f "$2")
rm -rf "$3" && mkdir -p "$3" && cd "$3" || exit 1
work=$(pwd -P)
export OMP_NUM_THREADS=1
cat >cfg.json <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "zero_engine": {"comm_timeout_s": 100}}
JSON
for mode in lone all; do
  t0=$(now)
  "$bin/engine-run" --np 2 --config cfg.json "$prog" "$mode" </dev/null >"$mode.out" 2>"$mode.err"
  rc=$?
  took=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
  [ "$rc" -eq 3 ] || { fail "$mode: the job exited $rc, want 3"; cat "$mode.err"; }
  grep -q "returned\|agreement failed\|waited" "$mode.err" &&
    fail "$mode: rank 0 saw the collective end: $(grep "returned\|agreement\|waited" "$mode.err")"
  case $mode in
  lone)
    awk -v t="$took" 'BEGIN { exit !(t < 50) }' ||
      fail "lone: the job took $took s to end, want under 50 (comm_timeout_s is 100)"
    # rank 1 says it ends the job, and engine-run names rank 1 from that line
    # (mpirun's banner may name rank 0, which it killed with rank 1's status)
    grep -q "^\[zero-engine\] rank 1 ends the job with MPI_Abort (status 3): it exits with a failure" \
      lone.err || { fail "lone: rank 1 did not say it ends the job:"; cat lone.err; }
    grep -q "^engine-run: rank 1 ended the job with MPI_Abort (status 3)" lone.err ||
      { fail "lone: engine-run did not name rank 1:"; cat lone.err; } ;;
  all)
    grep -q "MPI_Abort\|MPI_ABORT" all.err && { fail "all: the job was aborted:"; cat all.err; } ;;
  esac
  echo "$mode: status $rc after $took s"
done
[ $fails -eq 0 ] && cd .. && rm -rf "$work"
finish
