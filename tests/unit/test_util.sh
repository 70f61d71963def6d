# Shared by the shell tests; source it before the script changes directory:
#
#   . "$(dirname "$0")/test_util.sh"
#   need_args N "ARG..." $#   exit 2 with "usage: SCRIPT ARG..." unless N arguments
#   fail MSG...   count a failure and print "FAIL [NAME]: MSG"; the test goes on
#   finish        print "NAME: ok" and exit 0, or "NAME: N failure(s)" and exit 1
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
