#!/bin/sh
# qgZ's two schemes against the full-precision reduce-scatter on two
# simulated hosts (issue 22, item 4): a bundled trainer at 2 hosts x 2 ranks
# (tools/twohost.sh --slots 2, TCP between the hosts, one thread per rank)
# three times, stage 3 with zero_quantized_gradients false, true (int8, one
# level: zero_engine.qgz_scheme "int8", the default) and true with
# qgz_scheme "int4" (DeepSpeed's: int4, inside hosts then across). Prints
# rank 0's gradient bytes per step (reduce_scatter + all_to_all, from
# --metrics' comm members, inside its host / across hosts), the training
# loss (mean over windows of 100 steps) and the dev evaluation.
#
#   bench/qgz_int4_curve.sh [--build DIR] [--data FILE] [--steps N]
#                           [--work DIR] [--trainer cls|lm] [--shape "FLAGS"]
#                           [--runs "full int8 int4"]
#
# cls: train_cls, BERT --layers 2 --hidden 128 --heads 4 --intermediate 512,
#      lr 3e-4; lm: train_lm, GPT-2 --layers 2 --hidden 128 --heads 4
#      --seq-len 64, lr 1e-3. Both: micro batch 16 per rank (global 64),
#      constant lr, seed 42, as bench/qwz_curve.sh at 2 ranks. --shape
#      replaces the model flags (BERT-mini: "--layers 4 --hidden 256
#      --heads 4 --intermediate 1024"). --runs: which of the three (full
#      comes first and is needed). Needs root
#      (namespaces); exits 77 where the hosts cannot be made.
set -eu
build=build data=../shared/data/nlpcc2013-emotion/Nlpcc2013Train.tsv steps=1000
work=/tmp/qgz_int4_curve trainer=cls custom="" runs="full int8 int4"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2 ;; --data) data=$2 ;; --steps) steps=$2 ;; --work) work=$2 ;;
    --trainer) trainer=$2 ;; --shape) custom=$2 ;; --runs) runs=$2 ;;
    *) echo "qgz_int4_curve.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
case "$trainer" in
  cls) prog=train_cls lr=3e-4 shape="--layers 2 --hidden 128 --heads 4 --intermediate 512" ;;
  lm) prog=train_lm lr=1e-3 shape="--layers 2 --hidden 128 --heads 4 --seq-len 64" ;;
  *) echo "qgz_int4_curve.sh: --trainer cls or lm, got $trainer" >&2; exit 2 ;;
esac
[ -z "$custom" ] || shape=$custom
here=$(cd "$(dirname "$0")/.." && pwd)
twohost=$here/tools/twohost.sh
"$twohost" check >/dev/null || { "$twohost" check; exit 77; }
prog=$(readlink -f "$build/bin/$prog")
data=$(readlink -f "$data")
mkdir -p "$work"
work=$(readlink -f "$work")
for run in $runs; do
  q=true scheme=int8
  [ $run = full ] && q=false
  [ $run = int4 ] && scheme=int4
  cat > "$work/cfg_$run.json" <<JSON
{"train_micro_batch_size_per_gpu": 16, "steps_per_print": 100000,
 "zero_optimization": {"stage": 3, "zero_quantized_gradients": $q},
 "zero_engine": {"qgz_scheme": "$scheme"}}
JSON
  # shellcheck disable=SC2016 # $TWOHOST_HOSTFILE is the inner shell's
  "$twohost" run --name qgz4c$$ --slots 2 -- sh -c 'mpirun --allow-run-as-root --bind-to none \
    -np 4 --hostfile "$TWOHOST_HOSTFILE" -x OMP_NUM_THREADS=1 "$@"' mpirun "$prog" \
    --config "$work/cfg_$run.json" --data "$data" $shape --max-steps "$steps" --lr "$lr" \
    --lr-scheduler-type constant --seed 42 --metrics "$work/metrics_$run.jsonl" \
    > "$work/log_$run.txt" 2>&1
done
python3 - "$work" $runs <<'PY'
import json, sys
work, names = sys.argv[1], sys.argv[2:]
runs = {}
for q in names:
    steps, ev = [], None
    for line in open(f"{work}/metrics_{q}.jsonl"):
        r = json.loads(line)
        if "eval" in r: ev = r["eval"]
        elif "loss" in r: steps.append(r)
    runs[q] = (steps, ev)
kinds = ("reduce_scatter", "all_to_all")
def grad_bytes(q, key):
    return sum(runs[q][0][-1]["comm"].get(k, {}).get(key, 0) for k in kinds)
print("gradient bytes per step, rank 0 (reduce_scatter + all_to_all, last step):")
for q in names:
    print(f"  {q}: {grad_bytes(q, 'bytes')} ({grad_bytes(q, 'inside_host')} inside its host, "
          f"{grad_bytes(q, 'across_hosts')} across hosts)")
quant = [q for q in names if q != "full"]
print("| steps | loss, fp32 reduce-scatter |" + "".join(f" qgZ {q} | difference |" for q in quant))
print("|---|---|" + "---|---|" * len(quant))
full = runs["full"][0]
for lo in range(0, len(full), 100):
    m = {q: sum(s["loss"] for s in runs[q][0][lo:lo + 100]) / len(runs[q][0][lo:lo + 100])
         for q in runs}
    print(f"| {lo + 1}-{min(lo + 100, len(full))} | {m['full']:.4f} |" +
          "".join(f" {m[q]:.4f} | {m[q] - m['full']:+.4f} |" for q in quant))
for q in names:
    ev = runs[q][1] or {}
    keys = {k: v for k, v in ev.items() if isinstance(v, (int, float))}
    print(f"dev eval, {q}: " + ", ".join(f"{k} {v:.4f}" for k, v in sorted(keys.items())))
PY
