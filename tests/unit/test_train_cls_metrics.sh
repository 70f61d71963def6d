#!/usr/bin/env bash
# train_cls --metrics at 2 ranks: one JSON line per optimizer step with step,
# epoch, loss, lr, grad_norm, samples_per_s and every rank's memory by purpose
# and place (model state equal to the formula's total), then one "eval" line.
set -u
bin=$1
data=$2
mpirun_flags=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '{"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2},
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}' > "$tmp/c.json"
# shellcheck disable=SC2086
OMP_NUM_THREADS=1 mpirun $mpirun_flags -np 2 "$bin/train_cls" --config "$tmp/c.json" --data "$data" \
    --model mlp --hidden 16 --intermediate 32 --max-seq-len 32 --max-steps 5 \
    --metrics "$tmp/m.jsonl" > "$tmp/log" 2>&1 || { cat "$tmp/log"; echo "test_train_cls_metrics: FAILED"; exit 1; }
python3 - "$tmp/m.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
fails = []
steps = [l for l in lines if "step" in l]
if [s["step"] for s in steps] != [1, 2, 3, 4, 5]:
    fails.append(f"steps {[s.get('step') for s in steps]}")
for s in steps:
    for k in ("epoch", "loss", "lr", "grad_norm", "samples_per_s"):
        if k not in s: fails.append(f"step {s['step']} lacks {k}")
    mem = s.get("memory_bytes", [])
    if [m["rank"] for m in mem] != [0, 1]:
        fails.append(f"step {s['step']}: memory for ranks {[m.get('rank') for m in mem]}")
        continue
    for m in mem:
        state = sum(m["device"][p] + m["host"][p] for p in ("params", "grads", "master", "optim"))
        if state != s["model_state_formula"]:
            fails.append(f"rank {m['rank']}: model state {state} != formula {s['model_state_formula']}")
ev = lines[-1].get("eval")
if not ev or not {"accuracy", "macro_f1", "weighted_f1", "per_class"} <= set(ev):
    fails.append(f"last line is not an eval record: {lines[-1]}")
for f in fails: print("FAIL", f)
print("test_train_cls_metrics:", "FAILED" if fails else "ok")
sys.exit(1 if fails else 0)
PY
