#!/usr/bin/env bash
# onebit_twohost.sh: step time of Adam, 1-bit Adam and 0/1 Adam on one host
# (shared memory) and on two simulated hosts joined by a rate-limited link
# (tools/twohost.sh, default 1 Gbit/s), with the raw TCP rate of the link
# measured in the same session (issue 22, item 5).
#
#   bench/onebit_twohost.sh BUILD_DIR [STEPS] [FREEZE] [RATE]
#
# train_cls at 2 ranks, one thread each, --bind-to none, the default BERT
# (4 layers x 256, 4 heads, 1024; 4.9M parameters with its char vocabulary)
# on the bundled NLPCC data, micro batch 16, STEPS steps (default 40) with
# freeze_step = var_freeze_step = FREEZE (default 10; 0/1 Adam's local steps
# with local_step_scaler 1 and local_step_clipper 4: synchronising every 4th
# step soon after the freeze). Reported per optimizer: the median samples/s
# of the steps after FREEZE + 2 and the bytes rank 0 sent per step there.
# Needs root (namespaces); exits 77 where the hosts cannot be made.
set -u
BUILD=$(readlink -f "${1:?usage: onebit_twohost.sh BUILD_DIR [STEPS] [FREEZE] [RATE]}")
STEPS=${2:-40}
FREEZE=${3:-10}
RATE=${4:-1gbit}
HERE=$(cd "$(dirname "$0")/.." && pwd)
TWOHOST=$HERE/tools/twohost.sh
DATA=$(readlink -f "$HERE/../shared/data/nlpcc2013-emotion/Nlpcc2013Train.tsv")
"$TWOHOST" check >/dev/null || { "$TWOHOST" check; exit 77; }
WORK=$(mktemp -d /tmp/onebit_twohost.XXXXXX)
common='"lr": 3e-4, "betas": [0.9, 0.98], "weight_decay": 0.01'
echo "{\"train_micro_batch_size_per_gpu\": 16, \"steps_per_print\": 100000, \"optimizer\": {\"type\": \"AdamW\", \"params\": {$common, \"bias_correction\": false}}}" > "$WORK/cfg_adam.json"
echo "{\"train_micro_batch_size_per_gpu\": 16, \"steps_per_print\": 100000, \"optimizer\": {\"type\": \"OneBitAdam\", \"params\": {$common, \"freeze_step\": $FREEZE}}}" > "$WORK/cfg_onebit.json"
echo "{\"train_micro_batch_size_per_gpu\": 16, \"steps_per_print\": 100000, \"optimizer\": {\"type\": \"ZeroOneAdam\", \"params\": {$common, \"var_freeze_step\": $FREEZE, \"local_step_scaler\": 1, \"local_step_clipper\": 4}}}" > "$WORK/cfg_zeroone.json"
ROOT=""
[ "$(id -u)" -eq 0 ] && ROOT=--allow-run-as-root
MPI="mpirun $ROOT --bind-to none -np 2 -x OMP_NUM_THREADS=1"
runs() { # $1: mpirun prefix, $2: tag
  for o in adam onebit zeroone; do
    $1 "$BUILD/bin/train_cls" --config "$WORK/cfg_$o.json" --data "$DATA" --max-steps "$STEPS" \
      --seed 42 --lr-scheduler-type constant --metrics "$WORK/m_$2_$o.jsonl" \
      > "$WORK/log_$2_$o.txt" 2>&1 || echo "train_cls $2 $o FAILED (see $WORK/log_$2_$o.txt)"
  done
}
echo "== load average $(cut -d' ' -f1-3 /proc/loadavg)"
runs "$MPI --mca btl self,vader,tcp" same
echo "== two hosts, $RATE, load average $(cut -d' ' -f1-3 /proc/loadavg)"
export BUILD WORK DATA STEPS MPI
export -f runs
"$TWOHOST" run --name ob$$ --rate "$RATE" -- bash -c '
  '"$TWOHOST"' link --name "$TWOHOST_NAME"
  runs "$MPI --hostfile $TWOHOST_HOSTFILE" two' 2>&1 | grep -E '^link:|FAILED|rror'
echo "== end, load average $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$WORK" "$FREEZE" <<'PY'
import json, statistics, sys
work, freeze = sys.argv[1], int(sys.argv[2])
def sent(s):
    c = s.get("comm", {})
    return sum(v["bytes"] for v in c.values() if isinstance(v, dict) and "bytes" in v)
base = {}
for tag, name in (("same", "same host"), ("two", "two hosts")):
    for o in ("adam", "onebit", "zeroone"):
        try:
            st = [json.loads(l) for l in open(f"{work}/m_{tag}_{o}.jsonl")]
        except OSError:
            continue
        st = [s for s in st if "loss" in s][freeze + 2:]
        if not st: continue
        sps = statistics.median(s["samples_per_s"] for s in st)
        b = statistics.mean(sent(s) for s in st)
        base.setdefault(tag, sps if o == "adam" else base.get(tag))
        print(f"{name}: {o:8s} {sps:7.1f} samples/s (x{sps / base[tag]:.2f} of Adam), "
              f"{b / 1e6:.3f} MB sent per step per rank")
PY
echo "work: $WORK"
