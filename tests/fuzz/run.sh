#!/usr/bin/env bash
# tests/fuzz/run.sh: run every fuzz harness for a fixed time on its
# committed corpus (README.md here). Exits non-zero when any harness finds
# a crash, a leak, undefined behaviour or a hang, after running them all.
#
#   tests/fuzz/run.sh BUILD_FUZZ_DIR SECONDS_EACH [HARNESS...]
#
# New inputs and crash artifacts go to a scratch folder (printed), never to
# tests/fuzz/corpus. Environment: FUZZ_JOBS harnesses at once (default 1).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${1:?usage: run.sh BUILD_FUZZ_DIR SECONDS_EACH [HARNESS...]}
secs=${2:?usage: run.sh BUILD_FUZZ_DIR SECONDS_EACH [HARNESS...]}
shift 2
harnesses=("$@")
if [ ${#harnesses[@]} -eq 0 ]; then
  harnesses=(config text lm_docs vocab wordpiece hf_config safetensors ckpt_meta ckpt_file)
fi
scratch=$(mktemp -d "${TMPDIR:-/tmp}/ds-fuzz-run.XXXXXX")
echo "fuzz: ${#harnesses[@]} harnesses, ${secs} s each; scratch and artifacts in $scratch"

# One harness: libFuzzer's own limits (-timeout per input, -rss_limit_mb)
# turn hangs and runaway memory into findings too; json.dict (key names and
# edge numbers, make_corpus.sh) helps every harness, the JSON readers most.
run_one() {
  local name=$1 bin="$build/fuzz/fuzz_$1"
  mkdir -p "$scratch/$name/new" "$scratch/$name/artifacts"
  "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -dict=tests/fuzz/json.dict \
    -artifact_prefix="$scratch/$name/artifacts/" \
    "$scratch/$name/new" "tests/fuzz/corpus/$name" > "$scratch/$name/log" 2>&1
  local rc=$?
  local runs
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$scratch/$name/log" | grep -o '[0-9]*$')
  if [ $rc -eq 0 ]; then
    echo "fuzz: $name: ok, ${runs:-?} executions in ${secs} s"
  else
    echo "fuzz: $name: FAILED (exit $rc); the end of its log ($scratch/$name/log):"
    tail -n 40 "$scratch/$name/log"
    ls "$scratch/$name/artifacts"
  fi
  return $rc
}

status=0
jobs=${FUZZ_JOBS:-1}
if [ "$jobs" -le 1 ]; then
  for h in "${harnesses[@]}"; do run_one "$h" || status=1; done
else
  pids=()
  for h in "${harnesses[@]}"; do
    run_one "$h" & pids+=($!)
    if [ ${#pids[@]} -ge "$jobs" ]; then wait "${pids[0]}" || status=1; pids=("${pids[@]:1}"); fi
  done
  for p in "${pids[@]}"; do wait "$p" || status=1; done
fi
if [ $status -eq 0 ]; then rm -rf "$scratch"; fi
exit $status
