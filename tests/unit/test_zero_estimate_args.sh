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

# counts are whole decimal numbers in a stated range: NaN became stage 0,
# fractions were cut (--stage 2.9 -> 2, --ranks 2.5 -> 2), hex read (0x10
# -> 16), --largest-layer nan reached the library as -9223372036854775808
refused "--stage: must be a whole number from 0 to 3, got 'nan'" --params 1e6 --stage nan
refused "--stage: must be a whole number from 0 to 3, got '2.9'" --params 1e6 --stage 2.9
refused "--ranks: must be a whole number from 1 to 1000000, got '2.5'" --params 1e6 --ranks 2.5
refused "--ranks: must be a whole number from 1 to 1000000, got '0x10'" --params 1e6 --ranks 0x10
refused "--ranks: must be a whole number from 1 to 1000000, got '2e6'" --params 1e6 --ranks 2e6
refused "--params: must be a whole number from 1 to" --params 1.7
refused "--params: must be a whole number from 1 to" --params inf
refused "--params: must be a whole number from 1 to 1000000000000000, got '3e18'" --params 3e18
refused "--params: must be a whole number from 1 to" --params -5
refused "--largest-layer: must be a whole number from 0 to" --params 1e6 --largest-layer nan
refused "--micro-batch: must be a whole number from 1 to 1000000, got '1.5'" --params 1e6 --micro-batch 1.5
refused "--ranks-per-host: must be a whole number from 1 to" --params 1e6 --ranks-per-host ""
# 1e9- and 1.5e9-style whole numbers stay
accepted --params 1.5e9 --largest-layer 2.5e7 --stage 2 --ranks 1e1
grep -q "^Estimated memory per rank: 1500000000 parameters .*10 ranks" "$out" ||
  fail "--params 1.5e9 --ranks 1e1: $(head -1 "$out")"

# stage 3 from a count needs the largest layer, as DeepSpeed's
# estimate_zero3_model_states_mem_needs_all_live(total_params,
# largest_layer_params, ...) does: without it the gather slots were left
# out silently (124.4M bf16 on cuda, 8 ranks: 474.7 MiB of buffers, 1.470
# GiB with --largest-layer 38597376); 0 given leaves them out knowingly
refused "--stage 3 needs --largest-layer" --params 124.4e6 --ranks 8 --stage 3 --precision bf16 --backend cuda
accepted --params 124.4e6 --ranks 8 --stage 3 --precision bf16 --backend cuda --largest-layer 38597376
grep -Eq "^  buffers +1\.470 " "$out" || fail "stage 3 with --largest-layer: $(grep buffers "$out")"
accepted --params 124.4e6 --ranks 8 --stage 3 --largest-layer 0
grep -q "no largest layer (buffers sized by it left out)" "$out" ||
  fail "--largest-layer 0 at stage 3 does not say what is left out: $(head -1 "$out")"
accepted --params 124.4e6 --ranks 8 --stage 2
# more ranks on a host than in all was accepted and multiplied the RAM
refused "--ranks-per-host 8 is more than --ranks 2" --params 1e6 --ranks 2 --ranks-per-host 8
# uneven: the estimate is for the fullest host, and says what the last has
accepted --params 1e6 --ranks 10 --ranks-per-host 8
grep -q "10 ranks (8 per host; the last of 2 hosts has 2)" "$out" ||
  fail "--ranks 10 --ranks-per-host 8: $(head -1 "$out")"
grep -q "RAM of this host for its 8 ranks" "$out" || fail "--ranks 10 --ranks-per-host 8: $(grep RAM "$out")"

# the suggested fix also lowers offload_param.max_in_cpu (default 1e9: the
# whole partition stayed in RAM under nvme) and combines
# stage3_max_live_parameters 0 with offload; it said no setting fits
# (13.97 GiB) where sub_group_size 1e8, max_in_cpu 1e7 and max-live 0 need 11.03
DS_MEM_LIMIT=12G accepted --params 1e9 --largest-layer 5e7 --stage 3 --offload-optimizer nvme \
  --offload-param nvme
fix=$(grep "^fix:" "$out")
echo "$fix" | grep -q "max_in_cpu 1e7" && echo "$fix" | grep -q "stage3_max_live_parameters 0" &&
  echo "$fix" | grep -q "would fit: 11.03 GiB of RAM" ||
  fail "12G, 1e9 parameters on nvme: '$fix'"

# from stage 2 without --largest-layer the fix does not offer stage 3 (it
# was sized without its gather slots: 29.86 GiB "would fit" where the
# setting needs 49.2 with a largest layer of 5e7); it says why
DS_MEM_LIMIT=40e9 accepted --params 1e9 --ranks 8 --stage 2 --precision bf16
fix=$(grep "^fix:" "$out")
echo "$fix" | grep -q "stage 3 is not judged without the largest layer" &&
  ! echo "$fix" | grep -q "would fit" || fail "stage 2, no largest layer: '$fix'"

finish
