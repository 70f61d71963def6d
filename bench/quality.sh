#!/bin/sh
# Issue 3's text-classification quality protocol, both ways, for one or more
# seeds, and the result into bench/RESULTS.md (section "## Text
# classification quality (issue 3 protocol)", or --section's; the rest of
# the file is left as it is).
#
#   bench/quality.sh [--build DIR] [--data FILE] [--python PY] [--work DIR]
#                    [--seeds "42 1 2"] [--losses none,inverse] [--skip-done]
#                    [--sides "ours pt pt_same pt_ctl"] [--parity N]
#                    [--max-steps N] [--section TITLE]
#                    [--table-only]
#
#   --build DIR     the CMake build tree with bin/ and bench/ (default: build)
#   --data FILE     default ../shared/data/nlpcc2013-emotion/Nlpcc2013Train.tsv
#   --python PY     a Python with torch and numpy (default /tmp/venv/bin/python
#                   when it exists, else python3); /usr/bin/python3 is Debian's
#                   PyTorch 1.13, the version the issue names
#   --work DIR      logs and metrics files (default DIR/quality in the build)
#   --seeds LIST    space-separated seeds (default "42"); each sets the split,
#                   init, batch order and dropout on both sides
#   --losses LIST   comma-separated, of none and inverse (default both)
#   --skip-done     do not run again a (side, loss, seed) whose metrics file
#                   already ends with the evaluation (to finish a cut-off run)
#   --sides LIST    which runs, of ours, pt, pt_same and pt_ctl (default
#                   "ours pt"): pt_same is PyTorch from the engine's initial
#                   weights with the engine's batch order, so that with ours
#                   it differs in the dropout masks only; pt_ctl is pt_same
#                   again with torch's generator seeded 1000 + S, so that it
#                   differs from pt_same in the dropout masks only: the
#                   control, how far other masks alone move a PyTorch run
#   --parity N      also the deterministic checks per seed and loss: the
#                   engine's initial weights and batch order on both sides, N
#                   steps (100 warm-up, then linear decay to 0 at step N), every
#                   step's loss logged (200 covers both phases); once with
#                   dropout 0, once with dropout 0.1 where PyTorch drops out
#                   exactly what the engine does (--engine-dropout)
#   --max-steps N   a smoke test of this script: N steps per run, results
#                   printed but not written to RESULTS.md
#   --section TITLE the heading of the section written (default "Text
#                   classification quality (issue 3 protocol)"), so that a
#                   differently shaped measurement gets a section of its own
#   --table-only    no runs: the section again from the files in the work
#                   directory, for the seeds and losses given (runs not
#                   finished are shown as such; with --max-steps N if they
#                   came from a smoke test)
#
# What runs, one after another (never two at once: the machine has 2 cores),
# for every seed:
#   0. bench/dump_split --seed S and tools/pytorch_cls_reference.py
#      --dump-split --seed S must print the same rows, classes and char
#      vocabulary, else nothing trains;
#   then for every loss (plain cross-entropy "none", then "inverse"), the
#   runs --sides names, in the order it gives them:
#   1. ours, zero-engine: engine-run --np 2 --config configs/quality.json
#      train_cls --seed S --class-weight LOSS (2 ranks x 1 thread, ZeRO
#      stage 2, global batch 32);
#   2. pt, PyTorch: tools/pytorch_cls_reference.py --seed S --class-weight
#      LOSS (1 process x 2 threads);
#   3. pt_same: the engine's initial weights (train_cls --max-steps 1
#      --save-dir: the first step runs at learning rate 0), then PyTorch
#      from them with --engine-order 2; pt_ctl: the same with --torch-seed
#      1000+S;
#   4. with --parity N: both sides again from those weights, in the
#      engine's order, for N steps: with dropout 0 (sides par_ours and
#      par_pt), then with the engine's dropout masks on both (parm_ours,
#      parm_pt).
# Each (side, loss, seed) leaves SIDE_LOSS_sS.{jsonl,log,wall} in the work
# folder; bench/quality_table.py turns them into the
# section: per-seed scores, mean and standard deviation per loss, a verdict on
# the means. The protocol itself is written out in tools/pytorch_cls_reference.py.
# Each run takes 5 to 20 minutes here; start it with nice in the background.
set -eu

src=$(cd "$(dirname "$0")/.." && pwd -P)
build=$src/build
data=$src/../shared/data/nlpcc2013-emotion/Nlpcc2013Train.tsv
python=python3
[ -x /tmp/venv/bin/python ] && python=/tmp/venv/bin/python
work=""
seeds=42
losses=none,inverse
skip_done=""
sides="ours pt"
parity=""
max_steps=""
table_only=""
section_title="Text classification quality (issue 3 protocol)"
while [ $# -gt 0 ]; do
  case $1 in
  --build) build=$(cd "$2" && pwd -P); shift 2 ;;
  --data) data=$2; shift 2 ;;
  --python) python=$2; shift 2 ;;
  --work) work=$2; shift 2 ;;
  --seeds) seeds=$2; shift 2 ;;
  --losses) losses=$2; shift 2 ;;
  --skip-done) skip_done=1; shift ;;
  --sides) sides=$2; shift 2 ;;
  --parity) parity=$2; shift 2 ;;
  --max-steps) max_steps=$2; shift 2 ;;
  --table-only) table_only=1; shift ;;
  --section) section_title=$2; shift 2 ;;
  -h | --help) sed -n '2,/^set -eu/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "quality.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
for s in $seeds; do
  case $s in
  *[!0-9]*) echo "quality.sh: --seeds: $s is not a non-negative integer" >&2; exit 2 ;;
  esac
done
seeds=$(echo "$seeds" | tr -s ' \t' '  ' | sed 's/^ //; s/ $//') # one space between seeds
[ -n "$seeds" ] || { echo "quality.sh: --seeds: no seed given" >&2; exit 2; }
loss_list=$(echo "$losses" | tr ',' ' ')
for cw in $loss_list; do
  case $cw in
  none | inverse) ;;
  *) echo "quality.sh: --losses: $cw is not none or inverse" >&2; exit 2 ;;
  esac
done
[ -n "$loss_list" ] || { echo "quality.sh: --losses: no loss given" >&2; exit 2; }
losses=$(echo "$loss_list" | tr -s ' ' ',')
case $max_steps in
'') ;;
*[!0-9]* | 0) echo "quality.sh: --max-steps: $max_steps is not a positive integer" >&2; exit 2 ;;
esac
for side in $sides; do
  case $side in
  ours | pt | pt_same | pt_ctl) ;;
  *) echo "quality.sh: --sides: $side is not ours, pt, pt_same or pt_ctl" >&2; exit 2 ;;
  esac
done
case $parity in
'') ;;
*[!0-9]* | 0 | 1) echo "quality.sh: --parity: $parity is not an integer of at least 2" >&2; exit 2 ;;
esac
[ -n "$work" ] || work=$build/quality
mkdir -p "$work"
work=$(cd "$work" && pwd -P)

steps_arg=""
[ -n "$max_steps" ] && steps_arg="--max-steps $max_steps"
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", b - a }'; }
# finished FILE: the metrics file ends with the evaluation
finished() { [ -s "$1" ] && tail -1 "$1" | grep -q '^{"eval"'; }

# engine SEED LOSS OUT_BASE ARGS...: the protocol's train_cls run on 2 ranks,
# ARGS added; output in OUT_BASE.log
engine() {
  seed=$1 cw=$2 out=$3
  shift 3
  OMP_NUM_THREADS=1 "$build/bin/engine-run" --np 2 --config "$src/configs/quality.json" train_cls \
    --data "$data" --labels none,like,disgust,sadness,happiness,anger --drop-conflicts \
    --model bert --layers 4 --hidden 256 --heads 4 --intermediate 1024 \
    --max-seq-len 64 --epochs 3 --seed "$seed" --class-weight "$cw" "$@" >"$out.log" 2>&1 ||
    { echo "quality.sh: train_cls failed, see $out.log" >&2; tail -5 "$out.log" >&2; exit 1; }
}

# pytorch SEED LOSS OUT_BASE ARGS...: tools/pytorch_cls_reference.py, likewise
pytorch() {
  seed=$1 cw=$2 out=$3
  shift 3
  "$python" "$src/tools/pytorch_cls_reference.py" --data "$data" --class-weight "$cw" --threads 2 \
    --seed "$seed" "$@" >"$out.log" 2>&1 ||
    { echo "quality.sh: the PyTorch run failed, see $out.log" >&2; tail -5 "$out.log" >&2; exit 1; }
}

# init_weights SEED: the engine's initial weights for SEED, once
# (init_sSEED/model.safetensors; the first step runs at learning rate 0, so
# the weights it saves are the initial ones).
init_weights() {
  init=$work/init_s$1
  [ -s "$init/model.safetensors" ] && return
  rm -rf "$init"
  engine "$1" none "$work/init_s$1" --dropout 0.1 --max-steps 1 --save-dir "$init"
}

# run_one SIDE LOSS SEED: one training run; its files SIDE_LOSS_sSEED.*
run_one() {
  base=$work/$1_$2_s$3
  if [ -n "$skip_done" ] && finished "$base.jsonl" && [ -s "$base.wall" ]; then
    echo "quality.sh: $1, class weights $2, seed $3: done before, skipped"
    return
  fi
  rm -f "$base.wall" # written only when the run completes
  echo "quality.sh: $1, class weights $2, seed $3 ..."
  case $1 in pt_same | pt_ctl | par*) init_weights "$3" ;; esac
  same="--init-from $work/init_s$3/model.safetensors --engine-order 2"
  t0=$(now)
  # shellcheck disable=SC2086 # steps_arg and same are lists of words
  case $1 in
  ours) engine "$3" "$2" "$base" --dropout 0.1 $steps_arg --metrics "$base.jsonl" ;;
  pt) pytorch "$3" "$2" "$base" $steps_arg --metrics "$base.jsonl" ;;
  pt_same) pytorch "$3" "$2" "$base" $same $steps_arg --metrics "$base.jsonl" ;;
  pt_ctl) pytorch "$3" "$2" "$base" $same --torch-seed $(($3 + 1000)) $steps_arg \
            --metrics "$base.jsonl" ;;
  par_ours) engine "$3" "$2" "$base" --dropout 0 --max-steps "$parity" --metrics "$base.jsonl" ;;
  par_pt) pytorch "$3" "$2" "$base" $same --dropout 0 --max-steps "$parity" --log-every 1 \
            --metrics "$base.jsonl" ;;
  parm_ours) engine "$3" "$2" "$base" --dropout 0.1 --max-steps "$parity" --metrics "$base.jsonl" ;;
  parm_pt) pytorch "$3" "$2" "$base" $same --engine-dropout --max-steps "$parity" --log-every 1 \
             --metrics "$base.jsonl" ;;
  esac
  elapsed "$t0" "$(now)" >"$base.wall"
}

run_all() {
  data=$(readlink -f "$data")
  for f in "$build/bin/engine-run" "$build/bin/train_cls" "$build/bench/dump_split"; do
    [ -x "$f" ] || { echo "quality.sh: $f missing: build first" >&2; exit 1; }
  done
  [ -r "$data" ] || { echo "quality.sh: cannot read $data" >&2; exit 1; }
  "$python" -c 'import torch, numpy' 2>/dev/null ||
    { echo "quality.sh: $python lacks torch or numpy (python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch numpy)" >&2; exit 1; }
  echo "quality.sh: seeds $seeds, losses $loss_list, $("$python" -c 'import torch; print("torch", torch.__version__)')"
  # the start of the measurement (a run finished with --skip-done keeps it)
  if [ -z "$skip_done" ] || [ ! -s "$work/date" ]; then
    date -u '+%Y-%m-%d %H:%M UTC' >"$work/date"
  fi
  for seed in $seeds; do
    # 0. same rows, same ids
    "$build/bench/dump_split" "$data" --seed "$seed" >"$work/split_c_s$seed.txt"
    "$python" "$src/tools/pytorch_cls_reference.py" --data "$data" --seed "$seed" --dump-split \
      >"$work/split_py_s$seed.txt"
    if ! cmp -s "$work/split_c_s$seed.txt" "$work/split_py_s$seed.txt"; then
      echo "quality.sh: seed $seed: the C and Python splits differ:" >&2
      diff "$work/split_c_s$seed.txt" "$work/split_py_s$seed.txt" | head -20 >&2
      exit 1
    fi
    echo "quality.sh: seed $seed: C and Python agree on the split and vocab:" \
      "$(head -1 "$work/split_c_s$seed.txt"), vocab $(grep -c '^vocab' "$work/split_c_s$seed.txt")"
    for cw in $loss_list; do
      for side in $sides; do run_one "$side" "$cw" "$seed"; done # 1.-3.
      [ -z "$parity" ] || for side in par_ours par_pt parm_ours parm_pt; do # 4.
        run_one "$side" "$cw" "$seed"
      done
    done
  done
}
[ -n "$table_only" ] || run_all

# 3. the table
section=$work/section.md
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
# OpenBLAS's kernels change the rounding, so a run is reproduced bit for bit
# only with the same choice
[ -z "${OPENBLAS_CORETYPE:-}" ] || cpu="$cpu, OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE"
python3 "$src/bench/quality_table.py" --work "$work" --out "$section" --seeds "$seeds" \
  --losses "$losses" --ncpu "$(nproc)" --cpu "$cpu" --max-steps "$max_steps" \
  --heading "$section_title"
cat "$section"

if [ -n "$max_steps" ]; then
  echo "quality.sh: smoke test (--max-steps): bench/RESULTS.md left alone"
  exit 0
fi
# Replace our section (from its heading to the next "## " heading) or append
# it; every other section stays byte for byte.
results=$src/bench/RESULTS.md
python3 "$src/bench/results_section.py" "$results" "$section" "$section_title"
echo "quality.sh: wrote the section into $results"
