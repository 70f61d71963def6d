#!/usr/bin/env bash
# hier_twohost.sh: stage 3 plain, with hpZ and with MiCS on two simulated
# hosts x 2 ranks (tools/twohost.sh --slots 2) joined by a rate-limited link
# (issue 22, item 3): train_cls's samples/s per step (median of steps 3..N)
# and every rank's bytes per step inside and across hosts from the counters
# (train_cls's end-of-run report, which sums the ranks).
#
#   bench/hier_twohost.sh BUILD_DIR [RATE] [STEPS] [REPEATS]
#   RATE: tc rate of each direction of the link (default 1gbit); STEPS per
#   run (default 12); REPEATS: rounds of the four runs (default 2), which go
#   one after the other in each round so that ratios come from neighbouring
#   runs on a machine whose load changes.
#
# The model: train_cls's BERT (4 x 256, 4 heads, 1024; 3.3M parameters) on
# gen_sentences' rows, 64 tokens, global batch 16, fp32, one thread per rank,
# --bind-to none (engine-run passes it). Lines go to stdout, one per run:
# "hier: CASE round R: samples/s MEDIAN; all ranks per step KIND X inside / Y
# across; ...".
# Needs root (namespaces); exits 77 where the hosts cannot be made.
set -u
BUILD=$(readlink -f "${1:?usage: hier_twohost.sh BUILD_DIR [RATE] [STEPS] [REPEATS]}")
RATE=${2:-1gbit}
STEPS=${3:-12}
REPEATS=${4:-2}
HERE=$(cd "$(dirname "$0")/.." && pwd)
TWOHOST=$HERE/tools/twohost.sh
"$TWOHOST" check >/dev/null || { "$TWOHOST" check; exit 77; }
WORK=$(mktemp -d /tmp/hier_twohost.XXXXXX)
NAME=hb$$
trap '"$TWOHOST" down --name $NAME >/dev/null 2>&1; rm -rf "$WORK"' EXIT
"$BUILD/bin/gen_sentences" --rows 2000 --seed 7 --out "$WORK/data.csv" >/dev/null || exit 1
"$TWOHOST" up --name $NAME --slots 2 --rate "$RATE" >"$WORK/up.log" 2>&1 ||
  { echo "hier_twohost: twohost.sh up failed: $(tail -2 "$WORK/up.log")" >&2; exit 1; }
declare -A EXTRA=([plain]="" [hpz2]=', "zero_hpz_partition_size": 2'
                  [mics2]=', "mics_shard_size": 2'
                  [mics4_hier]=', "mics_shard_size": 4, "mics_hierarchical_params_gather": true')
for r in $(seq 1 "$REPEATS"); do
  for c in plain hpz2 mics2 mics4_hier; do
    printf '{"train_micro_batch_size_per_gpu": 4, "steps_per_print": 1000,
 "zero_optimization": {"stage": 3%s}}\n' "${EXTRA[$c]}" >"$WORK/$c.json"
    "$TWOHOST" exec --name $NAME -- "$BUILD/bin/engine-run" --np 4 \
      --hostfile /run/twohost/$NAME/hostfile --config "$WORK/$c.json" train_cls \
      --data "$WORK/data.csv" --max-seq-len 64 --max-steps "$STEPS" --dev-ratio 0.02 \
      --metrics "$WORK/$c.jsonl" </dev/null >"$WORK/$c.log" 2>&1 ||
      { echo "hier_twohost: $c failed: $(tail -3 "$WORK/$c.log")" >&2; exit 1; }
    python3 - "$WORK/$c.jsonl" "$WORK/$c.log" "$c" "$r" <<'PY'
import json, re, statistics, sys
steps = [s for s in map(json.loads, open(sys.argv[1])) if "step" in s]
sps = statistics.median(s["samples_per_s"] for s in steps[2:])
# the end-of-run report: every rank's bytes per step, inside a host / across
rep = next(l for l in open(sys.argv[2]) if "communication over" in l)
per = re.findall(r"(\w+) [\d.]+ calls, [^(]*\(per step [\d.]+ calls, ([^/]+) / ([^,]+),", rep)
print(f"hier: {sys.argv[3]} round {sys.argv[4]}: samples/s {sps:.2f}; all ranks per step "
      + "; ".join(f"{k} {a.strip()} inside / {b.strip()} across" for k, a, b in per))
PY
  done
done
