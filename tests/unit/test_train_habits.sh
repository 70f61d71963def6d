#!/usr/bin/env bash
# The Hugging Face Trainer's habits in train_cls and train_lm
# (tools/common/train_habits.h), on 2 ranks:
#   --eval-steps N     an evaluation every N steps over every dev sample once
#                      (its "total" equals the dev rows), in --metrics and on
#                      stdout, and as Eval/<metric> in the csv_monitor
#   --save-best M      SAVE_DIR/best holds a whole model folder (predict loads
#                      it; no best.tmp left), the "best" flags follow the
#                      running minimum, the summary line names the step
#   --early-stopping P the run ends P evaluations after the last improvement
#   --logging-steps N  a step line every N steps and the last, its loss the
#                      mean of the steps' losses (checked against a run that
#                      logs every step: same seed, same steps)
#   the flags are recorded in --metrics' first line; bad values and missing
#   companions are one line on stderr and exit 2.
#
#   test_train_habits.sh BINDIR CSV WORKDIR "MPIRUN FLAGS"
set -u
. "$(dirname "$0")/test_util.sh"
need_args 4 "BINDIR CSV WORKDIR \"MPIRUN FLAGS\"" $#
bin=$(readlink -f "$1")
data=$(readlink -f "$2")
work=$3
mpi=$4
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
export OMP_NUM_THREADS=1

printf '{"train_micro_batch_size_per_gpu": 4, "steps_per_print": 1000,
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},
  "csv_monitor": {"enabled": true, "output_path": "csv", "job_name": "cls"}}' > cls.json
cls() { # cls LOG ARGS...: train_cls on 2 ranks
    log=$1
    shift
    # shellcheck disable=SC2086
    mpirun $mpi -np 2 "$bin/train_cls" --config cls.json --data "$data" --model mlp --hidden 16 \
        --intermediate 32 --max-seq-len 32 "$@" > "$log" 2>&1 || { fail "train_cls $* exited $?"; tail -5 "$log"; }
}

# ---- train_cls: every step logged, then every 4th; evaluations every 5 ----
cls every.log --max-steps 20 --metrics every.jsonl
rm -rf csv # the CSV monitor appends, as DeepSpeed's: this run's files only
cls habits.log --max-steps 20 --metrics habits.jsonl --logging-steps 4 --eval-steps 5 \
    --save-best loss --save-dir out
python3 - every.jsonl habits.jsonl csv/cls <<'PY' || fails=$((fails + 1))
import json, sys, os
every = [json.loads(l) for l in open(sys.argv[1])]
lines = [json.loads(l) for l in open(sys.argv[2])]
fails = []
first = lines[0].get("trainer")
if first != {"eval_steps": 5, "save_best": "loss", "early_stopping": 0, "logging_steps": 4,
             "total_steps": 20}:
    fails.append(f"first line {lines[0]}")
steps = {l["step"]: l for l in every if "step" in l}
logged = [l for l in lines if "step" in l]
if [l["step"] for l in logged] != [4, 8, 12, 16, 20]:
    fails.append(f"logged steps {[l['step'] for l in logged]}")
for l in logged:
    want = sum(steps[s]["loss"] for s in range(l["step"] - 3, l["step"] + 1)) / 4
    # each loss is printed with 6 decimals: the mean of 4 is within 1e-6 of theirs
    if abs(l["loss"] - want) > 1e-6: fails.append(f"step {l['step']}: loss {l['loss']} != mean {want}")
evals = [l for l in lines if "eval_step" in l]
if [e["eval_step"] for e in evals] != [5, 10, 15, 20]:
    fails.append(f"eval steps {[e.get('eval_step') for e in evals]}")
for e in evals:
    d = e["dev"]
    if d["total"] != 60: fails.append(f"eval at {e['eval_step']}: {d['total']} dev rows, 60 expected")
    if not {"accuracy", "macro_f1", "weighted_f1", "loss"} <= set(d): fails.append(f"keys {d}")
best = min(evals, key=lambda e: e["dev"]["loss"])
flags = [e["best"] for e in evals]
run_min = [e["dev"]["loss"] < min([x["dev"]["loss"] for x in evals[:i]] or [1e9]) for i, e in enumerate(evals)]
if flags != run_min: fails.append(f"best flags {flags}, expected {run_min}")
summary = [l for l in lines if "evaluations" in l]
if not summary or summary[0]["best"]["step"] != best["eval_step"] or summary[0]["early_stopped"]:
    fails.append(f"summary {summary}")
rows = open(os.path.join(sys.argv[3], "Eval_macro_f1.csv")).read().split()
# the 4 evaluations during training, then the final one at the last step
if rows[0] != "step,macro_f1" or [r.split(",")[0] for r in rows[1:]] != ["40", "80", "120", "160", "160"]:
    fails.append(f"Eval_macro_f1.csv: {rows}")
for f in fails: print("FAIL", f)
sys.exit(1 if fails else 0)
PY
[ -f out/best/model.safetensors ] && [ -f out/best/config.json ] && [ -f out/best/vocab.txt ] ||
    fail "out/best lacks a file: $(ls out/best 2>&1)"
[ -e out/best.tmp ] || [ -e out/best.old ] && fail "a best.tmp or best.old was left"
grep -q "train_cls: step 5 dev: accuracy" habits.log || fail "no evaluation line on stdout"
# the best model is what predict loads (a real model folder)
"$bin/predict" --model out/best "the cat is happy" > pred.txt 2>&1 || fail "predict --model out/best: $(tail -2 pred.txt)"

# ---- --resume keeps judging against the same best: a run cut at step 12
# and resumed to 20 makes the evaluations, best flags and summary of a
# straight 20-step run (a constant lr, so the cut run's schedule is the
# straight one's). Measured: accuracy 0.1833 at step 5, 0.2333 at 10, 15 and
# 20, so step 15 is no improvement only if the resumed run remembers step
# 10's best. Then a run cut at 10, an evaluation step whose checkpoint is
# saved before its evaluation, which the resumed run evaluates again ----
h="--eval-steps 5 --save-best accuracy --lr-scheduler-type constant --save-steps 4"
# shellcheck disable=SC2086
cls straight.log --max-steps 20 $h --save-dir s1 --metrics straight.jsonl
# shellcheck disable=SC2086
cls cut.log --max-steps 12 $h --save-dir s2 --metrics cut.jsonl
# The trainer's state comes from the checkpoint the run loaded, not from
# `latest`: without latest, --resume loads the newest complete one (12:
# best 0.2333 at 10); --resume-from global_step8 has step 5's best (before
# the fix both read `latest`, the first failing, the second judging against
# step 10's best)
cp -r s2 s2nolatest && rm s2nolatest/checkpoints/latest
cp -r s2 s2from8
# shellcheck disable=SC2086
cls nolatest.log --max-steps 13 $h --save-dir s2nolatest --resume
grep -q "resume: best accuracy 0.2333 at step 10" nolatest.log ||
    fail "--resume without latest: $(grep -i "resume" nolatest.log | tail -2)"
# shellcheck disable=SC2086
cls from8.log --max-steps 9 $h --save-dir s2from8 --resume-from global_step8
grep -q "resume: best accuracy 0.1833 at step 5" from8.log ||
    fail "--resume-from global_step8: $(grep -i "resume" from8.log | tail -2)"
# shellcheck disable=SC2086
cls resumed.log --max-steps 20 $h --save-dir s2 --metrics cut.jsonl --resume
grep -q "resume: best accuracy 0.2333 at step 10" resumed.log ||
    fail "the resumed run does not say the best it resumed: $(grep resume resumed.log)"
# shellcheck disable=SC2086
cls cut10.log --max-steps 10 $h --save-steps 5 --save-dir s3 --metrics cut10.jsonl
# shellcheck disable=SC2086
cls resumed10.log --max-steps 20 $h --save-steps 5 --save-dir s3 --metrics cut10.jsonl --resume
grep -q "train_cls: step 10 dev: accuracy" resumed10.log || fail "step 10 not evaluated again after --resume"
for cut in cut.jsonl cut10.jsonl; do
python3 - straight.jsonl $cut <<'PY' || fails=$((fails + 1))
import json, sys
def evals(p):
    out = {}
    for l in open(p):
        j = json.loads(l)
        if "eval_step" in j: out[j["eval_step"]] = (j["dev"]["loss"], j["best"])  # the last of a repeat
    return out
a, b = evals(sys.argv[1]), evals(sys.argv[2])
summ = lambda p: [json.loads(l)["best"] for l in open(p) if "evaluations" in l][-1]
ok = a == b and summ(sys.argv[1]) == summ(sys.argv[2])
print("" if ok else f"FAIL resume: straight {a} {summ(sys.argv[1])} vs cut+resumed {b} {summ(sys.argv[2])}")
sys.exit(0 if ok else 1)
PY
done

# ---- early stopping: macro_f1 of a model whose lr is 0 never improves ----
printf '{"train_micro_batch_size_per_gpu": 4, "steps_per_print": 1000,
  "optimizer": {"type": "AdamW", "params": {"lr": 0}}}' > frozen.json
mpirun $mpi -np 2 "$bin/train_cls" --config frozen.json --data "$data" --model mlp --hidden 16 \
    --intermediate 32 --max-seq-len 32 --max-steps 40 --eval-steps 2 --save-best macro_f1 \
    --early-stopping 3 --save-dir out2 --metrics stop.jsonl > stop.log 2>&1 || fail "early-stopping run exited $?"
grep -q "early stopping at step 8: macro_f1 has not improved" stop.log || fail "early stop: $(grep -i early stop.log)"
grep -q "train_cls: trained 8 steps" stop.log || fail "early stop: $(grep trained stop.log)"
python3 - stop.jsonl <<'PY' || fails=$((fails + 1))
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
s = [l for l in lines if "evaluations" in l]
steps = [l["step"] for l in lines if "step" in l]
ok = s and s[0]["evaluations"] == 4 and s[0]["early_stopped"] and s[0]["best"]["step"] == 2 and max(steps) == 8
print("" if ok else f"FAIL early stopping: {s}, steps {steps}")
sys.exit(0 if ok else 1)
PY

# ---- train_lm: loss and perplexity during training ----
python3 -c "
import random
r = random.Random(3)
w = ['anna', 'sees', 'the', 'red', 'ball', 'bob', 'likes', 'a', 'green', 'tree']
open('corpus.txt', 'w').write('\n\n'.join(' '.join(r.choice(w) for _ in range(12)) for _ in range(200)) + '\n')"
printf '{"train_micro_batch_size_per_gpu": 8, "steps_per_print": 1000,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}}}' > lm.json
mpirun $mpi -np 2 "$bin/train_lm" --config lm.json --data corpus.txt --seq-len 32 --layers 1 \
    --hidden 32 --heads 2 --max-steps 12 --eval-steps 4 --save-best perplexity --save-dir lm \
    --metrics lm.jsonl > lm.log 2>&1 || { fail "train_lm exited $?"; tail -5 lm.log; }
python3 - lm.jsonl <<'PY' || fails=$((fails + 1))
import json, math, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
ev = [l for l in lines if "eval_step" in l]
ok = [e["eval_step"] for e in ev] == [4, 8, 12] and all(
    abs(math.exp(e["dev"]["loss"]) - e["dev"]["perplexity"]) < 1e-4 * e["dev"]["perplexity"] for e in ev)
# (6 printed decimals: exp of the rounded loss agrees to 1e-4 relative)
s = [l for l in lines if "evaluations" in l]
ok = ok and s and s[0]["best"]["metric"] == "perplexity"
print("" if ok else f"FAIL train_lm evaluations: {ev} {s}")
sys.exit(0 if ok else 1)
PY
[ -f lm/best/model.safetensors ] && [ -f lm/best/config.json ] || fail "lm/best: $(ls lm/best 2>&1)"

# ---- bad values: one line, exit 2 ----
bad() { # bad PROG WANT ARGS...
    prog=$1 want=$2
    shift 2
    "$bin/$prog" --config cls.json --data "$data" "$@" > bad.out 2> bad.err
    rc=$?
    [ $rc -eq 2 ] || fail "$prog $*: exit $rc, 2 expected"
    [ "$(wc -l < bad.err)" -eq 1 ] && grep -q -- "$want" bad.err || fail "$prog $*: stderr '$(cat bad.err)', want '$want'"
}
bad train_cls "--eval-steps 0: " --eval-steps 0
# --labels with a typo dropped a whole class without a word; one label left
# one class
bad train_cls 'the label filter names "happyness", which no row has' --labels anger,happyness
bad train_cls "1 class (anger) after the label filter: a classifier needs at least 2" --labels anger
# no dev rows: --eval-steps says so (it evaluated nothing, a table of zeros)
bad train_cls "the dev split has no rows" --dev-ratio 0 --eval-steps 1 --max-steps 2
bad train_cls "--eval-steps x: " --eval-steps x
bad train_cls "--logging-steps -1: " --logging-steps -1
bad train_cls "--early-stopping 0: " --early-stopping 0
bad train_cls "--save-best perplexity: one of accuracy,macro_f1,weighted_f1,loss" --save-best perplexity --eval-steps 5 --save-dir x
bad train_cls "--save-best needs --eval-steps" --save-best loss --save-dir x
bad train_cls "--save-best needs --save-dir" --save-best loss --eval-steps 5
bad train_cls "--early-stopping needs --save-best" --early-stopping 2 --eval-steps 5
bad train_lm "--save-best accuracy: one of loss,perplexity" --save-best accuracy --eval-steps 5 --save-dir x
finish
