#!/bin/sh
# ZeRO++ qwZ (zero_quantized_weights) against full-precision stage-3 gathers
# on a bundled trainer (issue 22, item 4): the same run twice at 2 ranks, one
# process per rank, and a table of the training loss (mean over windows of
# 100 steps), the all-gather bytes per step per rank (from --metrics' comm
# members) and the dev evaluation.
#
#   bench/qwz_curve.sh [--build DIR] [--data FILE] [--steps N] [--work DIR]
#                      [--trainer cls|lm] [--shape "FLAGS"]
#
# cls: train_cls, BERT --layers 2 --hidden 128 --heads 4 --intermediate 512,
#      lr 3e-4; lm: train_lm, GPT-2 (output tied to the embedding)
#      --layers 2 --hidden 128 --heads 4 --seq-len 64, byte tokens, lr 1e-3.
#      Both: micro batch 16, constant lr, seed 42.
set -eu
build=build data=../shared/data/nlpcc2013-emotion/Nlpcc2013Train.tsv steps=1000
work=/tmp/qwz_curve shape="" trainer=cls
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2 ;; --data) data=$2 ;; --steps) steps=$2 ;; --work) work=$2 ;;
    --shape) shape=$2 ;; --trainer) trainer=$2 ;;
    *) echo "qwz_curve.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
case "$trainer" in
  cls) prog=train_cls lr=3e-4 def="--layers 2 --hidden 128 --heads 4 --intermediate 512" ;;
  lm) prog=train_lm lr=1e-3 def="--layers 2 --hidden 128 --heads 4 --seq-len 64" ;;
  *) echo "qwz_curve.sh: --trainer cls or lm, got $trainer" >&2; exit 2 ;;
esac
[ -n "$shape" ] || shape=$def
mkdir -p "$work"
for q in false true; do
  cat > "$work/cfg_$q.json" <<JSON
{"train_micro_batch_size_per_gpu": 16, "steps_per_print": 100000,
 "zero_optimization": {"stage": 3, "zero_quantized_weights": $q}}
JSON
  # shellcheck disable=SC2086 # $shape is a list of flags
  mpirun --allow-run-as-root -np 2 -x OMP_NUM_THREADS=1 "$build/bin/$prog" \
    --config "$work/cfg_$q.json" --data "$data" $shape --max-steps "$steps" \
    --lr "$lr" --lr-scheduler-type constant --seed 42 \
    --metrics "$work/metrics_$q.jsonl" > "$work/log_$q.txt" 2>&1
done
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
runs = {}
for q in ("false", "true"):
    steps, ev = [], None
    for line in open(f"{work}/metrics_{q}.jsonl"):
        r = json.loads(line)
        if "eval" in r: ev = r["eval"]
        elif "loss" in r: steps.append(r)
    runs[q] = (steps, ev)
full, qwz = runs["false"][0], runs["true"][0]
ag = lambda s: s[-1]["comm"]["all_gather"]["bytes"]
print(f"all-gather bytes per step per rank (rank 0, last step): full {ag(full)}, "
      f"qwZ {ag(qwz)} ({ag(qwz) / ag(full):.4f})")
print("| steps | loss, full precision | loss, qwZ | difference |")
print("|---|---|---|---|")
for lo in range(0, len(full), 100):
    a = sum(s["loss"] for s in full[lo:lo + 100]) / len(full[lo:lo + 100])
    b = sum(s["loss"] for s in qwz[lo:lo + 100]) / len(qwz[lo:lo + 100])
    print(f"| {lo + 1}-{min(lo + 100, len(full))} | {a:.4f} | {b:.4f} | {b - a:+.4f} |")
for q, name in (("false", "full"), ("true", "qwZ")):
    ev = runs[q][1] or {}
    keys = {k: v for k, v in ev.items() if isinstance(v, (int, float))}
    print(f"dev eval, {name}: " + ", ".join(f"{k} {v:.4f}" for k, v in sorted(keys.items())))
PY
