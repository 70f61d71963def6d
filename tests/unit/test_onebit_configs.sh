#!/bin/sh
# DeepSpeed's own example configs for 1-bit Adam and 0/1 Adam (configs/,
# from docs/_tutorials/onebit-adam.md and zero-one-adam.md) run as written
# through engine-run at 2 ranks: train_cls on a small BERT for 2 optimizer
# steps of 4096 samples (micro batch 16, so 128 accumulation steps), fp16.
# Each must exit 0, log 2 steps, name its optimizer in the resolved config,
# and (below freeze_step / var_freeze_step) send the fp32 all-reduce.
# The tutorial's first example ends "enabled": true, } - a trailing comma
# no JSON reader takes (Python's json, DeepSpeed's, refuses it too); the
# file here has it removed, nothing else changed.
#
#   test_onebit_configs.sh BIN_DIR CONFIG_DIR WORK_DIR
. "$(dirname "$0")/test_util.sh"
need_args 3 "BIN_DIR CONFIG_DIR WORK_DIR" $#
bin=$1 cfgs=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
"$bin/gen_sentences" --rows 300 --seed 7 --out data.csv >/dev/null || exit 1
for c in onebit_adam onebit_adam_bert zero_one_adam; do
  tcase=$c
  out=$work/$c
  mkdir -p "$out"
  if ! "$bin/engine-run" --np 2 --config "$cfgs/$c.json" "$bin/train_cls" --data data.csv \
      --model bert --layers 1 --hidden 32 --heads 2 --intermediate 64 --max-seq-len 32 \
      --max-steps 2 --metrics "$out/m.jsonl" >"$out/log" 2>&1; then
    fail "engine-run exited non-zero"; tail -5 "$out/log"; continue
  fi
  steps=$(grep -c '"step"' "$out/m.jsonl")
  [ "$steps" -ge 2 ] || fail "metrics hold $steps step lines, want 2"
  want=OneBitAdam
  [ $c = zero_one_adam ] && want=ZeroOneAdam
  grep -q "\"type\": \"$want\"" "$out/ds_config.resolved.json" ||
    fail "the resolved config does not name $want"
  grep -q '"all_reduce"' "$out/m.jsonl" || fail "no fp32 all-reduce in the warm-up"
done
tcase=
finish
