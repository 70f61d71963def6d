# Shared by the shell tests; source it before the script changes directory:
#
#   . "$(dirname "$0")/test_util.sh"
#   need_args N "ARG..." $#   exit 2 with "usage: SCRIPT ARG..." unless N arguments
#   fail MSG...   count a failure and print "FAIL [NAME]: MSG"; the test goes on
#   finish        print "NAME: ok" and exit 0, or "NAME: N failure(s)" and exit 1
#   rank_pid PID R  the pid of rank R of the job that engine-run PID started
#   now           seconds since the epoch, with nanoseconds
#
# NAME is $tcase where the script runs one case per ctest test, else the
# script's name.
need_args() {
  if [ "$3" -ne "$1" ]; then
    echo "usage: $0 $2" >&2
    exit 2
  fi
}
fails=0
fail() {
  echo "FAIL [${tcase:-$(basename "$0" .sh)}]: $*"
  fails=$((fails + 1))
}
finish() {
  if [ "$fails" -ne 0 ]; then
    echo "${tcase:-$(basename "$0" .sh)}: $fails failure(s)"
    exit 1
  fi
  echo "${tcase:-$(basename "$0" .sh)}: ok"
  exit 0
}
# Rank R of engine-run's job is a child of its mpirun: the children of
# engine-run's children, found by their OMPI_COMM_WORLD_RANK; a few pgrep
# calls, not a scan of /proc (which took 0.3 s here, a third of a short run,
# and let signals miss a rank). Prints nothing while the rank has not started.
rank_pid() {
  local m p
  for m in $(pgrep -P "$1"); do
    for p in $(pgrep -P "$m"); do
      tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" &&
        { echo "$p"; return; }
    done
  done
}
now() { date +%s.%N; }
