#!/bin/sh
# 1-bit Adam and 0/1 Adam against Adam on a bundled trainer (issue 22,
# item 5): three runs at 2 ranks, one process per rank, and a table of the
# training loss (mean over windows of 100 steps), the bytes each rank sends
# per step (every collective and the host all-reduces, from --metrics' comm
# members; warm-up step and last step) and the dev evaluation.
#
#   bench/onebit_curve.sh [--build DIR] [--data FILE] [--steps N] [--work DIR]
#                         [--freeze N] [--shape "FLAGS"]
#
# train_cls, BERT --layers 2 --hidden 128 --heads 4 --intermediate 512, micro
# batch 16, lr 3e-4 constant, seed 42, betas [0.9, 0.98]: DeepSpeed's 1-bit
# update has no bias correction, so the variance frozen at step F is
# (1 - beta2^F) of its value; 0.98^200 leaves 0.98 of it where 0.999 would
# leave 0.18 (DeepSpeed's own configs freeze after 16,000-23,000 steps).
# Adam runs as AdamW with bias_correction false, the update 1-bit Adam's
# warm-up equals bit for bit. freeze_step = var_freeze_step = N (default 200,
# DeepSpeed's 15-25% of the run); 0/1 Adam with the tutorial's
# var_update_scaler 16, local_step_scaler 1000, local_step_clipper 16.
set -eu
build=build data=../shared/data/nlpcc2013-emotion/Nlpcc2013Train.tsv steps=1000
work=/tmp/onebit_curve freeze=200
shape="--layers 2 --hidden 128 --heads 4 --intermediate 512"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2 ;; --data) data=$2 ;; --steps) steps=$2 ;; --work) work=$2 ;;
    --freeze) freeze=$2 ;; --shape) shape=$2 ;;
    *) echo "onebit_curve.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
mkdir -p "$work"
common='"lr": 3e-4, "betas": [0.9, 0.98], "weight_decay": 0.01'
cat > "$work/cfg_adam.json" <<JSON
{"train_micro_batch_size_per_gpu": 16, "steps_per_print": 100000,
 "optimizer": {"type": "AdamW", "params": {$common, "bias_correction": false}}}
JSON
cat > "$work/cfg_onebit.json" <<JSON
{"train_micro_batch_size_per_gpu": 16, "steps_per_print": 100000,
 "optimizer": {"type": "OneBitAdam", "params": {$common, "freeze_step": $freeze}}}
JSON
cat > "$work/cfg_zeroone.json" <<JSON
{"train_micro_batch_size_per_gpu": 16, "steps_per_print": 100000,
 "optimizer": {"type": "ZeroOneAdam", "params": {$common, "var_freeze_step": $freeze,
   "var_update_scaler": 16, "local_step_scaler": 1000, "local_step_clipper": 16}}}
JSON
for o in adam onebit zeroone; do
  # shellcheck disable=SC2086 # $shape is a list of flags
  mpirun --allow-run-as-root -np 2 -x OMP_NUM_THREADS=1 "$build/bin/train_cls" \
    --config "$work/cfg_$o.json" --data "$data" $shape --max-steps "$steps" --seed 42 \
    --lr-scheduler-type constant \
    --metrics "$work/metrics_$o.jsonl" > "$work/log_$o.txt" 2>&1
done
python3 - "$work" "$freeze" <<'PY'
import json, sys
work, freeze = sys.argv[1], int(sys.argv[2])
runs = {}
for o in ("adam", "onebit", "zeroone"):
    steps, ev = [], None
    for line in open(f"{work}/metrics_{o}.jsonl"):
        r = json.loads(line)
        if "eval" in r: ev = r["eval"]
        elif "loss" in r: steps.append(r)
    runs[o] = (steps, ev)
def sent(s):
    c = s.get("comm", {})
    return sum(v["bytes"] for v in c.values() if isinstance(v, dict) and "bytes" in v)
for o in ("adam", "onebit", "zeroone"):
    st = runs[o][0]
    after = [sent(s) for s in st[freeze:]]
    print(f"{o}: bytes per step per rank (rank 0): step {freeze} {sent(st[freeze - 1])}, "
          f"after step {freeze}: mean {sum(after) / len(after):.0f}, max {max(after)} "
          f"({sent(st[freeze - 1]) / max(after):.1f}x fewer than step {freeze})")
a, b, z = (runs[o][0] for o in ("adam", "onebit", "zeroone"))
print("| steps | Adam | 1-bit Adam | difference | 0/1 Adam | difference |")
print("|---|---|---|---|---|---|")
for lo in range(0, len(a), 100):
    m = lambda r: sum(s["loss"] for s in r[lo:lo + 100]) / len(r[lo:lo + 100])
    print(f"| {lo + 1}-{min(lo + 100, len(a))} | {m(a):.4f} | {m(b):.4f} | {m(b) - m(a):+.4f} "
          f"| {m(z):.4f} | {m(z) - m(a):+.4f} |")
for o, name in (("adam", "Adam"), ("onebit", "1-bit Adam"), ("zeroone", "0/1 Adam")):
    ev = runs[o][1] or {}
    keys = {k: v for k, v in ev.items() if isinstance(v, (int, float))}
    print(f"dev eval, {name}: " + ", ".join(f"{k} {v:.4f}" for k, v in sorted(keys.items())))
PY
