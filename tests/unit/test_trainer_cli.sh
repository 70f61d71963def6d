#!/bin/sh
# What the trainers say (train_lm and train_cls, 1 process each):
#   exit     --help of both states the exit codes as tr_exit_code gives them,
#            and they are: a data error (a bad JSON line) exits 2, a file
#            that cannot be opened 1;
#   flags    a file that cannot be read is named with its option:
#            "--eval-data nope.txt: cannot open", "--model-config nope.json:
#            cannot open" (train_cls: --model-config, --vocab);
#   ratio    --dev-ratio with --eval-data is a usage error (exit 2), in both;
#   empty    JSON lines with 3 empty texts of 15: "train 12 documents (3 empty
#            skipped)" (also when --dev-ratio splits them), and --eval-data's
#            own count on the dev side;
#   ebatch   --eval-batch 64 at micro batch 4: one line saying it evaluates 4
#            rows a call; --help says a larger N is lowered;
#   metrics  a run to step 8 (checkpoints at 5 and 8, --eval-steps 5), then
#            --resume-from global_step5 to 12 with a line cut by a kill at the
#            end of the file: the file holds steps 1-12 once each, eval_step
#            5 and 10 once each, one final eval (the last line), every line
#            JSON; the run says what it removed; plot_metrics reads it.
#   test_trainer_cli.sh BINDIR WORKDIR
set -u
. "$(dirname "$0")/test_util.sh"
need_args 2 "BINDIR WORKDIR" $#
bin=$(readlink -f "$1")
rm -rf "$2" && mkdir -p "$2" && cd "$2" || exit 1
export OMP_NUM_THREADS=1

printf '{"train_micro_batch_size_per_gpu": 4, "steps_per_print": 100,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}}}\n' >cfg.json
python3 - <<'PY' || exit 1
import random
r = random.Random(5)
w = ["red", "small", "ball", "house", "tree", "sees", "likes", "cat", "dog", "river"]
s = lambda: " ".join(r.choice(w) for _ in range(r.randint(3, 8)))
open("corpus.txt", "w").write("\n\n".join(s() for _ in range(40)) + "\n")
import json
# 15 documents, 3 of them empty
with open("docs.jsonl", "w") as f:
    for i in range(15): f.write(json.dumps({"text": s() if i % 5 else ""}) + "\n")
for name, n in (("train.csv", 60), ("dev.csv", 8)):
    with open(name, "w") as f:
        f.write("label,text\n")
        for i in range(n): f.write(f"{'ab'[i % 2]},{s()}\n")
PY
printf '{"text": "fine"}\n{"text": "broken\n' >bad.jsonl
lm="$bin/train_lm --config cfg.json --seq-len 16 --layers 1 --hidden 16 --heads 2"
cls="$bin/train_cls --config cfg.json --model mlp --hidden 16 --intermediate 32 --max-seq-len 16"
# expect PROG CODE TEXT ARGS...: exit CODE, one stderr line containing TEXT
expect() {
  prog=$1 code=$2 want=$3
  shift 3
  "$@" >err.out 2>err.txt
  rc=$?
  if [ "$rc" -ne "$code" ] || [ "$(wc -l <err.txt)" -ne 1 ] || ! grep -qF -- "$want" err.txt; then
    fail "$prog: exit $rc (want $code), stderr (want '$want'): $(cat err.txt)"
  fi
}

# ---- exit ----
for p in train_lm train_cls; do
  "$bin/$p" --help >help_$p.txt 2>&1 || fail "$p --help exited $?"
  tr '\n' ' ' <help_$p.txt | tr -s ' ' | grep -qF "Exit codes: 2 for what starting the run again the same way cannot get past (a bad command line, a config, data or argument error" ||
    fail "$p --help does not say data errors exit 2"
  tr '\n' ' ' <help_$p.txt | tr -s ' ' | grep -qF "1 for the rest (a file that cannot be opened" ||
    fail "$p --help does not say what exits 1"
done
# shellcheck disable=SC2086 # $lm is a list of words
expect train_lm 2 "bad.jsonl:2: bad JSON" $lm --data bad.jsonl --max-steps 0
# shellcheck disable=SC2086
expect train_lm 1 "--data nope.txt: cannot open" $lm --data nope.txt

# ---- flags ----
# shellcheck disable=SC2086
expect train_lm 1 "train_lm: reading data: --eval-data nope.txt: cannot open" $lm --data corpus.txt --eval-data nope.txt
# shellcheck disable=SC2086
expect train_lm 1 "train_lm: building the model: --model-config nope.json: cannot open" $lm --data corpus.txt --model-config nope.json
# shellcheck disable=SC2086
expect train_cls 1 "--model-config nope.json: " $cls --model bert --data train.csv --model-config nope.json
# shellcheck disable=SC2086
expect train_cls 1 "--vocab nope.txt: " $cls --data train.csv --vocab nope.txt

# ---- ratio ----
# shellcheck disable=SC2086
expect train_lm 2 "--dev-ratio and --eval-data: give one" $lm --data corpus.txt --eval-data corpus.txt --dev-ratio 0.2
# shellcheck disable=SC2086
expect train_cls 2 "--dev-ratio and --eval-data: give one" $cls --data train.csv --eval-data dev.csv --dev-ratio 0.2

# ---- empty ----
# shellcheck disable=SC2086
$lm --data docs.jsonl --dev-ratio 0 --max-steps 0 >empty.log 2>&1 || fail "docs.jsonl: exit $?: $(tail -2 empty.log)"
grep -q "^train_lm: train 12 documents (3 empty skipped) -> " empty.log ||
  fail "empty.log: $(grep '^train_lm: train' empty.log)"
# shellcheck disable=SC2086
$lm --data docs.jsonl --dev-ratio 0.25 --max-steps 0 >empty1.log 2>&1 || fail "docs.jsonl --dev-ratio 0.25: exit $?"
grep -q "^train_lm: train 9 documents (3 empty skipped) -> .*; dev 3 documents -> " empty1.log ||
  fail "empty1.log: $(grep '^train_lm: train' empty1.log)"
# shellcheck disable=SC2086
$lm --data corpus.txt --eval-data docs.jsonl --max-steps 0 >empty2.log 2>&1 ||
  fail "--eval-data docs.jsonl: exit $?: $(tail -2 empty2.log)"
grep -q "^train_lm: train 40 documents -> .*; dev 12 documents (3 empty skipped) -> " empty2.log ||
  fail "empty2.log: $(grep '^train_lm: train' empty2.log)"

# ---- ebatch ----
for p in train_lm train_cls; do
  tr '\n' ' ' <help_$p.txt | tr -s ' ' | grep -qF "a larger N is lowered to the micro batch" ||
    fail "$p --help does not say a larger --eval-batch is lowered"
done
# shellcheck disable=SC2086
$lm --data corpus.txt --eval-batch 64 --max-steps 1 >eb.log 2>&1 || fail "--eval-batch 64: exit $?: $(tail -2 eb.log)"
[ "$(grep -c -- "--eval-batch 64 is larger than the micro batch: evaluating 4 rows a call" eb.log)" -eq 1 ] ||
  fail "eb.log: not one line on --eval-batch 64: $(grep -- --eval-batch eb.log)"
# shellcheck disable=SC2086
$cls --data train.csv --eval-data dev.csv --eval-batch 64 --max-steps 1 >ebc.log 2>&1 || fail "train_cls --eval-batch 64: exit $?"
grep -q -- "--eval-batch 64 is larger than the micro batch: evaluating 4 rows a call" ebc.log ||
  fail "ebc.log: no line on --eval-batch 64"
# train_cls's own default (32) is no --eval-batch the user gave: not said
$cls --data train.csv --eval-data dev.csv --max-steps 1 >ebd.log 2>&1 || fail "train_cls default eval batch: exit $?"
! grep -q -- "is larger than the micro batch" ebd.log || fail "ebd.log: a line on an --eval-batch not given"

# ---- metrics ----
h="--data train.csv --eval-data dev.csv --eval-steps 5 --lr-scheduler-type constant --ckpt-dir ck --metrics m.jsonl"
# shellcheck disable=SC2086
$cls $h --max-steps 8 --save-steps 5 >m1.log 2>&1 || fail "metrics run 1: exit $?: $(tail -2 m1.log)"
printf '{"step": 9, "lo' >>m.jsonl # what a kill in the middle of a write leaves
# shellcheck disable=SC2086
$cls $h --max-steps 12 --resume-from global_step5 >m2.log 2>&1 || fail "metrics run 2: exit $?: $(tail -2 m2.log)"
grep -q "^train_cls: --metrics m.jsonl: kept the [0-9]* lines up to step 5, removed the [0-9]* written after it" m2.log ||
  fail "m2.log: no line on what --metrics lost: $(grep -- '--metrics' m2.log)"
python3 - m.jsonl <<'PY' || fail "m.jsonl after the resume (above)"
import json, sys
fails, lines = [], []
for l in open(sys.argv[1]):
    try: lines.append(json.loads(l))
    except ValueError: fails.append(f"not JSON: {l!r}")
steps = [j["step"] for j in lines if "step" in j]
evals = [j["eval_step"] for j in lines if "eval_step" in j]
if steps != list(range(1, 13)): fails.append(f"steps {steps}")
if evals != [5, 10]: fails.append(f"eval_step {evals}")
if [i for i, j in enumerate(lines) if "eval" in j] != [len(lines) - 1]:
    fails.append("not one final eval, last")
for f in fails: print("FAIL", f)
sys.exit(1 if fails else 0)
PY
"$bin/plot_metrics" m.jsonl m.svg >plot.log 2>&1 || fail "plot_metrics m.jsonl: exit $?: $(cat plot.log)"
finish
