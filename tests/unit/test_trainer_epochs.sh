#!/bin/sh
# --epochs at gradient accumulation > 1 (tools/common/trainer_run.c, the
# engine's ds_train_batch), train_cls on 2 ranks through engine-run, 149
# training rows, micro batch 4, accumulation 4: 75 rows a rank (the last
# padded), 19 micro-batches a rank an epoch, so 4 full windows and one of 3:
#   count   --epochs 2 is "10 steps (5 per epoch)"; the metrics' epoch is 0 for
#           steps 1-5 and 1 for 6-10 (no step mixes two epochs); the progress
#           line at step 5 says epoch 1.00 and at step 10 epoch 2.00 (every
#           row once: before the fix an epoch was 4 steps, 16 of the 19
#           micro-batches, "epoch 0.85");
#   resume  the same run cut at step 5 (the end of epoch 0, its short step
#           saved) and at step 3 (inside the epoch), each resumed with
#           --resume to --epochs 2: steps after the cut log the straight
#           run's losses bit for bit (the data position is exact);
#   lm      train_lm's summary line counts the same rule.
#   test_trainer_epochs.sh BINDIR WORKDIR
set -u
. "$(dirname "$0")/test_util.sh"
need_args 2 "BINDIR WORKDIR" $#
bin=$(readlink -f "$1")
rm -rf "$2" && mkdir -p "$2" && cd "$2" || exit 1
export OMP_NUM_THREADS=1 OMPI_MCA_btl=self,vader,tcp

python3 - <<'PY' || exit 1
import random
r = random.Random(3)
w = ["red", "small", "ball", "house", "tree", "sees", "likes", "cat", "dog", "river"]
for name, n in (("train.csv", 149), ("dev.csv", 10)):
    with open(name, "w") as f:
        f.write("label,text\n")
        for i in range(n):
            f.write(f"{'ab'[i % 2]},{' '.join(r.choice(w) for _ in range(r.randint(3, 8)))}\n")
PY
# a constant lr (--lr-scheduler-type constant below), so a run cut short
# and resumed follows the straight run whatever its length
printf '{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4,
  "steps_per_print": 1, "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}}}\n' >cfg.json
cls() { # cls LOG ARGS...: train_cls on 2 ranks
  log=$1
  shift
  "$bin/engine-run" --np 2 --config cfg.json train_cls --data train.csv --eval-data dev.csv \
    --model mlp --hidden 16 --intermediate 32 --max-seq-len 16 --lr-scheduler-type constant \
    "$@" >"$log" 2>&1 || { fail "train_cls $* exited $?:"; tail -5 "$log"; }
}
steps_from() { sed -n 's/^{"step": \([0-9]*\), .*"loss": \([0-9.]*\),.*/\1 \2/p' "$1" | awk -v f="$2" '$1 >= f'; }

# ---- count ----
cls a.log --epochs 2 --metrics a.jsonl
grep -q "10 steps (5 per epoch)" a.log || fail "a.log: not 10 steps (5 per epoch): $(grep 'per epoch' a.log)"
python3 - a.jsonl <<'PY' || fail "a.jsonl: epochs of the steps (above)"
import json, sys
ep = [(j["step"], j["epoch"]) for j in map(json.loads, open(sys.argv[1])) if "step" in j]
want = [(s, 0 if s <= 5 else 1) for s in range(1, 11)]
if ep != want: print("FAIL (step, epoch)", ep, "want", want); sys.exit(1)
PY
for se in "5/10 1.00" "10/10 2.00"; do
  s=${se% *} e=${se#* }
  grep -q "^train_cls: step $s (.*) epoch $e " a.log ||
    fail "a.log: step $s is not at epoch $e: $(grep "^train_cls: step $s " a.log)"
done

# ---- resume ----
steps_from a.jsonl 1 >straight.txt
for cut in 5 3; do
  cls c$cut.log --max-steps $cut --save-steps $cut --ckpt-dir ck$cut --metrics c$cut.jsonl
  cls r$cut.log --epochs 2 --ckpt-dir ck$cut --resume --metrics r$cut.jsonl
  grep -q "resumed from ck$cut/global_step$cut at step $cut" r$cut.log ||
    fail "r$cut.log: no resume at step $cut: $(grep -i resum r$cut.log)"
  steps_from a.jsonl $((cut + 1)) >want.txt
  steps_from r$cut.jsonl 1 >got.txt
  [ "$(wc -l <want.txt)" -eq $((10 - cut)) ] || fail "straight run: $(wc -l <want.txt) steps after $cut"
  cmp -s want.txt got.txt || { fail "cut at $cut and resumed: the losses differ:"; paste want.txt got.txt; }
done

# ---- train_lm: the same rule (the shared trainer) ----
python3 -c 'print("\n\n".join(f"doc {i} " + "word " * (i % 7) for i in range(300)))' >corpus.txt
"$bin/train_lm" --config "$(pwd)/cfg.json" --data corpus.txt --dev-ratio 0 --seq-len 16 \
  --layers 1 --hidden 16 --heads 2 --max-steps 0 >lm.log 2>&1 || fail "train_lm exited $?: $(tail -3 lm.log)"
rows=$(sed -n 's/^train_lm: train [0-9]* documents -> [0-9]* tokens in \([0-9]*\) rows.*/\1/p' lm.log)
per=$(sed -n 's/.* steps (\([0-9]*\) per epoch).*/\1/p' lm.log)
# 1 rank: ceil(ceil(rows / 4) / 4) steps an epoch
[ -n "$rows" ] && [ "$per" = "$(( ( (rows + 3) / 4 + 3) / 4 ))" ] ||
  fail "train_lm: $rows rows, $per steps per epoch, want ceil(ceil(rows / 4) / 4)"
finish
