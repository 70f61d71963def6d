#!/usr/bin/env bash
# The trainers' side of "auto" (issue 19): train_cls with Hugging Face's
# ds_config_zero2.json (every key the Trainer knows written "auto") and only
# --batch and --lr starts, and its start-up print is short and names where
# each filled value came from (the flags given, the flags' HF defaults,
# computed); the full resolved config goes to ds_config.resolved.json beside
# --metrics (else into --save-dir), and --print-config prints the same JSON
# and exits 0 without training. A config without optimizer and scheduler
# sections runs AdamW and HF's linear schedule (its LambdaLR, stepped as the
# Trainer steps it) from the flags, step by step; --lr-scheduler-type constant keeps the lr.
# Without --batch a micro batch "auto" takes HF's per_device_train_batch_size
# default, 8; a number in the config stands. Bad flags and a config with no
# batch key at all are one line each.
#   test_config_trainer.sh BINDIR
set -u
. "$(dirname "$0")/test_util.sh"
need_args 1 "BINDIR" $#
bin=$(readlink -f "$1")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
"$bin/gen_sentences" --rows 200 --seed 7 --out d.csv >/dev/null || exit 1

# HF's docs' ds_config_zero2.json, as users copy it
cat >zero2.json <<'EOF'
{
    "fp16": {
        "enabled": "auto",
        "loss_scale": 0,
        "loss_scale_window": 1000,
        "initial_scale_power": 16,
        "hysteresis": 2,
        "min_loss_scale": 1
    },
    "bf16": {
        "enabled": "auto"
    },
    "optimizer": {
        "type": "AdamW",
        "params": {
            "lr": "auto",
            "betas": "auto",
            "eps": "auto",
            "weight_decay": "auto"
        }
    },
    "scheduler": {
        "type": "WarmupLR",
        "params": {
            "warmup_min_lr": "auto",
            "warmup_max_lr": "auto",
            "warmup_num_steps": "auto"
        }
    },
    "zero_optimization": {
        "stage": 2,
        "offload_optimizer": {
            "device": "cpu",
            "pin_memory": true
        },
        "allgather_partitions": true,
        "allgather_bucket_size": 2e8,
        "overlap_comm": true,
        "reduce_scatter": true,
        "reduce_bucket_size": 2e8,
        "contiguous_gradients": true
    },
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "steps_per_print": 2000,
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "wall_clock_breakdown": false
}
EOF
small="--data d.csv --model mlp --hidden 16 --intermediate 32 --max-seq-len 32"
tc() { # tc LOG ARGS...: train_cls on one rank, its stdout and stderr in LOG
  log=$1
  shift
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=1 "$bin/train_cls" $small "$@" >"$log" 2>&1
}

# ---- the HF template with --batch and --lr -------------------------------
mkdir -p m
tc run.log --config zero2.json --batch 4 --lr 3e-4 --max-steps 3 --metrics m/metrics.jsonl ||
  { fail "train_cls exited $?"; cat run.log; }
grep -q "trained 3 steps" run.log || fail "no training in run.log"
startup=$(grep '^\[zero-engine\]' run.log | grep -v '\] step ')
n=$(printf '%s\n' "$startup" | wc -l)
[ "$n" -le 15 ] || fail "start-up print of $n lines (at most 15):"$'\n'"$startup"
for want in \
  "[zero-engine] batch: train_batch_size 4 (auto) = micro 4 (--batch) x accumulation 1 (auto) x world 1" \
  "[zero-engine] optimizer: AdamW lr 0.0003, betas [0.9, 0.999], eps 1e-08, weight_decay 0; gradient_clipping 1" \
  "[zero-engine] scheduler: WarmupLR, log warmup 0 -> 0.0003 over 2 steps (DeepSpeed's least), then constant" \
  "[zero-engine] from the trainer: lr, warmup_max_lr 0.0003 (--lr)" \
  "[zero-engine] trainer defaults: gradient_clipping 1 (--max-grad-norm)" \
  "betas [0.9, 0.999] (--adam-beta1/2)" \
  "warmup_num_steps 1 (--warmup 0, raised to DeepSpeed's least)" \
  "fp16.enabled, bf16.enabled false (--fp16, --bf16)" \
  "[zero-engine] computed: warmup_min_lr 0 (HF's fill for \"auto\")" \
  "[zero-engine] other keys off DeepSpeed's defaults (default in brackets): steps_per_print 2000 (null)" \
  "offload_optimizer.device \"cpu\" (\"none\")" \
  "train_cls: the resolved config, every key: m/ds_config.resolved.json (--print-config prints it)"; do
  grep -qF -- "$want" run.log || fail "run.log lacks: $want"
done
# no JSON dump in the log any more
if grep -q '^  "' run.log; then fail "run.log still holds JSON lines"; fi

# ---- the files and --print-config -----------------------------------------
tc print.out --config zero2.json --batch 4 --lr 3e-4 --max-steps 3 --print-config
rc=$?
[ "$rc" -eq 0 ] || { fail "--print-config exited $rc"; cat print.out; }
if grep -q "trained\|\[zero-engine\]" print.out; then fail "--print-config trained or printed more"; fi
# without --metrics it goes into --save-dir
tc save.log --config zero2.json --batch 4 --lr 3e-4 --max-steps 1 --save-dir out ||
  { fail "--save-dir run: exit $?"; cat save.log; }
grep -qF "train_cls: the resolved config, every key: out/ds_config.resolved.json" save.log ||
  fail "save.log does not name out/ds_config.resolved.json"
python3 - <<'PY' || fail "resolved config files"
import json, sys
a = json.load(open("m/ds_config.resolved.json"))
b = json.load(open("out/ds_config.resolved.json"))
c = json.load(open("print.out"))
assert a == c, "the file and --print-config differ"
# the --save-dir run had --max-steps 1: WarmupLR has no total, so the same
assert a == b, "the --save-dir file differs"
o = a["optimizer"]
assert o["type"] == "AdamW" and o["params"]["lr"] == 3e-4, o
assert o["params"]["betas"] == [0.9, 0.999] and o["params"]["eps"] == 1e-8, o
assert a["gradient_clipping"] == 1 and a["train_micro_batch_size_per_gpu"] == 4, a
assert a["scheduler"]["params"]["warmup_max_lr"] == 3e-4, a["scheduler"]
assert a["fp16"]["enabled"] is False and a["bf16"]["enabled"] is False
assert '"auto"' not in json.dumps(a)
PY

# ---- no optimizer or scheduler section: AdamW and HF's linear schedule -----
printf '{"train_micro_batch_size_per_gpu": 4}' >bare.json
tc bare.log --config bare.json --lr 1e-3 --warmup 2 --max-steps 6 --metrics bare.jsonl ||
  { fail "bare config: exit $?"; cat bare.log; }
grep -qF "scheduler: HF's linear (the Trainer's LambdaLR): warmup 0 -> 0.001 over 2 steps, then linear decay to 0 at step 6" \
  bare.log || { fail "bare.log: no linear schedule"; grep zero-engine bare.log; }
grep -qF "optimizer: AdamW lr 0.001, betas [0.9, 0.999], eps 1e-08, weight_decay 0; gradient_clipping 1" \
  bare.log || fail "bare.log: no AdamW line"
# HF's get_linear_schedule_with_warmup as its Trainer steps it, step k (from
# 1) at lambda(k - 1): 0, half way up, the top, then down by a quarter a
# step (sched.h; transformers' own scheduler gives these six, test_sched);
# exact to the metrics' 7 significant digits
python3 - <<'PY' || fail "bare.jsonl: lr per step"
import json
lrs = [json.loads(l)["lr"] for l in open("bare.jsonl") if '"step"' in l]
want = [0.0, 5e-4, 1e-3, 7.5e-4, 5e-4, 2.5e-4]
assert len(lrs) == 6 and all(abs(a - b) <= 1e-12 for a, b in zip(lrs, want)), lrs
PY
tc const.log --config bare.json --lr 1e-3 --max-steps 3 --lr-scheduler-type constant \
  --metrics const.jsonl || fail "constant: exit $?"
grep -qF "scheduler: none, constant lr 0.001" const.log || fail "const.log: not constant"

# ---- one line for each mistake ---------------------------------------------
expect() { # expect NAME RC WANT ARGS...: exit RC and one stderr line holding WANT
  name=$1 want_rc=$2 want=$3
  shift 3
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=1 "$bin/train_cls" $small "$@" >/dev/null 2>err
  rc=$?
  if [ "$rc" -ne "$want_rc" ] || [ "$(wc -l <err)" -ne 1 ] || ! grep -qF -- "$want" err; then
    fail "$name: exit $rc (want $want_rc), wanted one stderr line holding '$want':"
    cat err
  fi
}
tc nobatch.log --config zero2.json --lr 3e-4 --max-steps 1 || { fail "no --batch: exit $?"; cat nobatch.log; }
want="[zero-engine] batch: train_batch_size 8 (auto) = micro 8 (--batch default) x accumulation 1 (auto) x world 1"
grep -qF -- "$want" nobatch.log || fail "nobatch.log lacks: $want"
# a flag the user gave for a key the config leaves out: DeepSpeed's default
# stands (HF leaves an absent key alone), and the summary says the flag went unused
tc clip.log --config bare.json --max-grad-norm 0.5 --max-steps 1 || fail "clip: exit $?"
grep -qF 'DeepSpeed defaults: gradient_clipping 1 (absent from the config, so not --max-grad-norm 0.5; "auto" takes the flag)' clip.log ||
  fail "clip.log: the unused --max-grad-norm is not said: $(grep 'zero-engine' clip.log | head -8)"
# wall_clock_breakdown without steps_per_print (DeepSpeed's null): a line
# every step, as DeepSpeed logs its timers
printf '{"train_micro_batch_size_per_gpu": 4, "wall_clock_breakdown": true}' >wc.json
tc wc.log --config wc.json --max-steps 3 || fail "wc: exit $?"
[ "$(grep -c 'time (ms) | fwd' wc.log)" -eq 3 ] || fail "wc.log: not a timer line a step: $(grep -c 'time (ms)' wc.log)"
# bare.json's micro batch 4 stands (the default neither overrides nor conflicts)
grep -qF "batch: train_batch_size 4 (derived) = micro 4 x accumulation 1" bare.log || fail "bare.log: the config's micro batch 4 is not what runs"
printf '{"gradient_accumulation_steps": 2}' >nobatch.json
expect no_batch 2 "or \"auto\" with the trainer's micro batch in --batch" --config nobatch.json
expect bad_sched 2 "--lr-scheduler-type polynomial: must be linear, cosine, constant or constant_with_warmup" \
  --config zero2.json --lr-scheduler-type polynomial
expect both_precisions 2 "--fp16 and --bf16: give one" --config zero2.json --fp16 --bf16
printf '{"train_micro_batch_size_per_gpu": 4, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}' >lr.json
expect lr_mismatch 2 "optimizer.params.lr: the config says 0.001 but the trainer's value (--lr) is 0.002" \
  --config lr.json --lr 2e-3
finish
