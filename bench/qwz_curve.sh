#!/bin/sh
# ZeRO++ qwZ (zero_quantized_weights) against full-precision stage-3 gathers
# on a bundled trainer (issue 22, item 4): the same run twice at 2 ranks, one
# process per rank, and a table of the training loss (mean over windows of
# 100 steps), the all-gather bytes per step per rank (from --metrics' comm
# members) and the dev evaluation. --quant gradients does the same for qgZ
# (zero_quantized_gradients): the gradient bytes are the reduce_scatter's
# and the all_to_all's.
#
#   bench/qwz_curve.sh [--build DIR] [--data FILE] [--steps N] [--work DIR]
#                      [--trainer cls|lm] [--shape "FLAGS"]
#                      [--quant weights|gradients]
#
# cls: train_cls, BERT --layers 2 --hidden 128 --heads 4 --intermediate 512,
#      lr 3e-4; lm: train_lm, GPT-2 (output tied to the embedding)
#      --layers 2 --hidden 128 --heads 4 --seq-len 64, byte tokens, lr 1e-3.
#      Both: micro batch 16, constant lr, seed 42.
set -eu
build=build data=../shared/data/nlpcc2013-emotion/Nlpcc2013Train.tsv steps=1000
work=/tmp/qwz_curve shape="" trainer=cls quant=weights
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2 ;; --data) data=$2 ;; --steps) steps=$2 ;; --work) work=$2 ;;
    --shape) shape=$2 ;; --trainer) trainer=$2 ;; --quant) quant=$2 ;;
    *) echo "qwz_curve.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
case "$trainer" in
  cls) prog=train_cls lr=3e-4 def="--layers 2 --hidden 128 --heads 4 --intermediate 512" ;;
  lm) prog=train_lm lr=1e-3 def="--layers 2 --hidden 128 --heads 4 --seq-len 64" ;;
  *) echo "qwz_curve.sh: --trainer cls or lm, got $trainer" >&2; exit 2 ;;
esac
case "$quant" in
  weights) name=qwZ ;; gradients) name=qgZ ;;
  *) echo "qwz_curve.sh: --quant weights or gradients, got $quant" >&2; exit 2 ;;
esac
[ -n "$shape" ] || shape=$def
mkdir -p "$work"
for q in false true; do
  cat > "$work/cfg_$q.json" <<JSON
{"train_micro_batch_size_per_gpu": 16, "steps_per_print": 100000,
 "zero_optimization": {"stage": 3, "zero_quantized_$quant": $q}}
JSON
  # shellcheck disable=SC2086 # $shape is a list of flags
  mpirun --allow-run-as-root -np 2 -x OMP_NUM_THREADS=1 "$build/bin/$prog" \
    --config "$work/cfg_$q.json" --data "$data" $shape --max-steps "$steps" \
    --lr "$lr" --lr-scheduler-type constant --seed 42 \
    --metrics "$work/metrics_$q.jsonl" > "$work/log_$q.txt" 2>&1
done
python3 - "$work" "$quant" "$name" <<'PY'
import json, sys
work, quant, name = sys.argv[1:4]
runs = {}
for q in ("false", "true"):
    steps, ev = [], None
    for line in open(f"{work}/metrics_{q}.jsonl"):
        r = json.loads(line)
        if "eval" in r: ev = r["eval"]
        elif "loss" in r: steps.append(r)
    runs[q] = (steps, ev)
full, qwz = runs["false"][0], runs["true"][0]
kinds = ("all_gather",) if quant == "weights" else ("reduce_scatter", "all_to_all")
ag = lambda s: sum(s[-1]["comm"].get(k, {}).get("bytes", 0) for k in kinds)
what = "all-gather" if quant == "weights" else "gradient (reduce_scatter + all_to_all)"
print(f"{what} bytes per step per rank (rank 0, last step): full {ag(full)}, "
      f"{name} {ag(qwz)} ({ag(qwz) / ag(full):.4f})")
print(f"| steps | loss, full precision | loss, {name} | difference |")
print("|---|---|---|---|")
for lo in range(0, len(full), 100):
    a = sum(s["loss"] for s in full[lo:lo + 100]) / len(full[lo:lo + 100])
    b = sum(s["loss"] for s in qwz[lo:lo + 100]) / len(qwz[lo:lo + 100])
    print(f"| {lo + 1}-{min(lo + 100, len(full))} | {a:.4f} | {b:.4f} | {b - a:+.4f} |")
for q, label in (("false", "full"), ("true", name)):
    ev = runs[q][1] or {}
    keys = {k: v for k, v in ev.items() if isinstance(v, (int, float))}
    print(f"dev eval, {label}: " + ", ".join(f"{k} {v:.4f}" for k, v in sorted(keys.items())))
PY
