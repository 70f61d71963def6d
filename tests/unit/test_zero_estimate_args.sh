#!/bin/sh
# zero_estimate's arguments and environment: what it refuses (exit status 2
# and one line on stderr naming the option or variable and what it takes)
# and what it reads. Arithmetic of the estimate itself is test_estimate's.
#   test_zero_estimate_args.sh BINDIR
set -u
. "$(dirname "$0")/test_util.sh"
need_args 1 "BINDIR" $#
z=$(readlink -f "$1")/zero_estimate
out=$(mktemp)
err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT

# refused ARGS... -- NEEDLE: exit status 2, stderr holds NEEDLE (fixed string), nothing on stdout
refused() {
  needle=$1
  shift
  "$z" "$@" >"$out" 2>"$err"
  rc=$?
  [ "$rc" -eq 2 ] || fail "zero_estimate $*: exit $rc, want 2 (stdout: $(head -c 300 "$out"))"
  grep -qF -- "$needle" "$err" || fail "zero_estimate $*: stderr '$(cat "$err")' lacks '$needle'"
}
# accepted ARGS...: exit 0; stdout in $out
accepted() {
  "$z" "$@" >"$out" 2>"$err"
  rc=$?
  [ "$rc" -eq 0 ] || fail "zero_estimate $*: exit $rc, want 0 ($(cat "$err"))"
}

# DS_MEM_LIMIT that is not a size is refused naming it; nan made
# everything fit ("available 8589934592.000 GiB (DS_MEM_LIMIT): fits")
for v in nan inf 0 -0 0.5 1e30; do
  DS_MEM_LIMIT=$v refused "DS_MEM_LIMIT: '$v'" --params 1e6
done
DS_MEM_LIMIT=12G accepted --params 1e6
grep -q "available 12.000 GiB (DS_MEM_LIMIT): fits" "$out" || fail "DS_MEM_LIMIT=12G: $(cat "$out")"
DS_MEM_LIMIT=off accepted --params 1e6
grep -q "available" "$out" && fail "DS_MEM_LIMIT=off still checks: $(grep available "$out")"

finish
