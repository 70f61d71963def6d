#!/usr/bin/env bash
# train_cls with "tensorboard" and "csv_monitor" on: TensorBoard's own event
# reader (tensorboard.backend.event_processing.EventAccumulator, from PyPI)
# loads the event file, and its scalars equal, tag for tag and step for
# step, what test_monitor's reader (written from the format's description)
# finds and what the CSV files hold. Skips (77) without a Python that has
# tensorboard: $DS_TB_PYTHON, else /root/venv/bin/python, else python3.
set -u
bin=$1
reader=$2
data=$3
py=${DS_TB_PYTHON:-}
for c in "$py" /root/venv/bin/python python3; do
    [ -n "$c" ] && command -v "$c" > /dev/null && "$c" -c 'import tensorboard' 2> /dev/null && {
        py=$c
        break
    }
    py=
done
if [ -z "$py" ]; then
    echo "test_monitor_tensorboard: skipped: no Python with the tensorboard package (pip install tensorboard into /root/venv, or set DS_TB_PYTHON)"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '{"train_micro_batch_size_per_gpu": 4, "steps_per_print": 1000,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
  "tensorboard": {"enabled": true, "output_path": "%s/tb", "job_name": "run1"},
  "csv_monitor": {"enabled": true, "output_path": "%s/csv", "job_name": "run1"}}' \
    "$tmp" "$tmp" > "$tmp/c.json"
OMP_NUM_THREADS=1 "$bin/train_cls" --config "$tmp/c.json" --data "$data" --model mlp --hidden 16 \
    --intermediate 32 --max-seq-len 32 --max-steps 6 --eval-steps 3 > "$tmp/log" 2>&1 ||
    { cat "$tmp/log"; echo "test_monitor_tensorboard: FAILED (train_cls)"; exit 1; }
ev=$(ls "$tmp"/tb/run1/events.out.tfevents.* 2> /dev/null | head -1)
[ -n "$ev" ] || { ls -R "$tmp"; echo "test_monitor_tensorboard: FAILED (no event file)"; exit 1; }
"$reader" dump "$ev" > "$tmp/ours.txt" || { echo "test_monitor_tensorboard: FAILED (our reader)"; exit 1; }
"$py" - "$tmp/tb/run1" "$tmp/ours.txt" "$tmp/csv/run1" <<'PY'
import csv, os, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
acc.Reload()
tb = {}
for tag in acc.Tags()["scalars"]:
    for s in acc.Scalars(tag):
        tb.setdefault(tag, []).append((s.step, s.value))
ours = {}
for line in open(sys.argv[2]):
    tag, step, value = line.rsplit(" ", 2)
    ours.setdefault(tag, []).append((int(step), float(value)))
fails = []
need = ["Train/Samples/train_loss", "Train/Samples/lr", "Train/Samples/grad_norm",
        "Train/Samples/samples_per_sec", "Train/Samples/memory_params_MiB", "Eval/accuracy",
        "Eval/macro_f1", "Eval/loss"]
for t in need:
    if t not in tb: fails.append(f"TensorBoard sees no {t} (tags: {sorted(tb)})")
if len(tb.get("Train/Samples/train_loss", [])) != 6:
    fails.append(f"train_loss events: {tb.get('Train/Samples/train_loss')}")
if sorted(tb) != sorted(ours): fails.append(f"tags differ: {sorted(tb)} vs {sorted(ours)}")
for t in tb:
    a, b = tb[t], ours.get(t, [])
    # both read the same float32; %.9g prints it exactly enough to compare equal
    if len(a) != len(b) or any(x[0] != y[0] or abs(x[1] - y[1]) > 1e-7 * max(1, abs(x[1]))
                               for x, y in zip(a, b)):
        fails.append(f"{t}: TensorBoard {a[:3]}... vs ours {b[:3]}...")
    # the CSV holds the same numbers (in double; the event file in float32)
    path = os.path.join(sys.argv[3], t.replace("/", "_").replace(" ", "_") + ".csv")
    rows = list(csv.reader(open(path)))
    if rows[0] != ["step", t.split("/")[-1]]: fails.append(f"{path}: header {rows[0]}")
    vals = [(int(r[0]), float(r[1])) for r in rows[1:]]
    # float32 keeps 24 bits: a relative 2^-23 covers the rounding
    if len(vals) != len(a) or any(x[0] != y[0] or abs(x[1] - y[1]) > 2**-23 * max(1e-30, abs(y[1]))
                                  for x, y in zip(a, vals)):
        fails.append(f"{path}: {vals[:3]} vs TensorBoard {a[:3]}")
for f in fails: print("FAIL", f)
print(f"TensorBoard read {sum(len(v) for v in tb.values())} scalars of {len(tb)} tags")
print("test_monitor_tensorboard:", "FAILED" if fails else "ok")
sys.exit(1 if fails else 0)
PY
