#!/bin/sh
# The language-model quality protocol of issue 13, zero-engine's train_lm
# against transformers' GPT2LMHeadModel in PyTorch, over seeds; the table
# from bench/lm_quality_table.py into WORK/section.md (and, with
# --write-results, into bench/RESULTS.md as section "## Language model
# quality (issue 13)", every other section left as it is).
#
#   bench/lm_quality.sh [--build DIR] [--data FILE] [--python PY] [--work DIR]
#                       [--seeds "42 1 2"] [--steps N] [--sides "ours pt"]
#                       [--generate N] [--skip-done] [--table-only]
#                       [--write-results]
#
#   --build DIR   the CMake build tree with bin/ and bench/ (default build-bench)
#   --data FILE   default ../shared/data/nlpcc2013-emotion/Nlpcc2013Train.tsv
#                 (read in place)
#   --python PY   a Python with torch, transformers and numpy (default
#                 /root/venv/bin/python)
#   --work DIR    logs, metrics, models (default DIR/lm_quality in the build)
#   --seeds LIST  space-separated (default "42 1 2"); each sets the split,
#                 batch order, init and dropout on both sides
#   --steps N     optimizer steps per run (default 500: 2.1 epochs of the
#                 ~7,600 train rows at 32 rows a step)
#   --sides LIST  of ours and pt (default both)
#   --generate N  bytes the engine's trained model generates after each run
#                 (train_lm --generate N --temperature 0.8 --top-k 40,
#                 sampling seed = the seed; default 240, 0: none)
#   --skip-done   keep runs whose metrics file ends with the evaluation
#   --table-only  no runs, only the table from the work folder
#
# The protocol (tools/pytorch_lm_reference.py writes it out in full): byte
# level (vocabulary 257, <|endoftext|> = 256), documents split 90/10 by the
# seed, packed into rows of 128 bytes overlapping by one; GPT-2 4 layers x
# 256, 4 heads, n_positions 128, dropout 0.1; AdamW lr 1e-3, betas (0.9,
# 0.999), eps 1e-8, weight decay 0.01, clip 1.0, WarmupDecayLR 100 warm-up
# steps then linear to 0 at the last step; 32 rows a step in the engine's
# sampler order for 2 ranks; dev loss and bits per byte before and after.
#   zero-engine: engine-run --np 2 (1 thread each) train_lm, ZeRO stage 2,
#                16 rows per rank;
#   PyTorch:     tools/pytorch_lm_reference.py, 1 process x 2 threads, the
#                same 32 rows a step.
# Before a seed trains, bench/lm_dump_pack (the C library's read, split,
# tokenizer, packing and sampler) and the reference's --check-pack must
# agree element for element on every train and dev token, label, mask and
# byte count and on every step's rows, else the script stops. Runs go one
# after another (never two at once: the machine has 2 cores).
set -eu

src=$(cd "$(dirname "$0")/.." && pwd -P)
build=$src/build-bench
data=$src/../shared/data/nlpcc2013-emotion/Nlpcc2013Train.tsv
python=/root/venv/bin/python
work=""
seeds="42 1 2"
steps=500
sides="ours pt"
generate=240
skip_done=""
table_only=""
write_results=""
section_title="Language model quality (issue 13)"
while [ $# -gt 0 ]; do
  case $1 in
  --build) build=$(cd "$2" && pwd -P); shift 2 ;;
  --data) data=$2; shift 2 ;;
  --python) python=$2; shift 2 ;;
  --work) work=$2; shift 2 ;;
  --seeds) seeds=$2; shift 2 ;;
  --steps) steps=$2; shift 2 ;;
  --sides) sides=$2; shift 2 ;;
  --generate) generate=$2; shift 2 ;;
  --skip-done) skip_done=1; shift ;;
  --table-only) table_only=1; shift ;;
  --write-results) write_results=1; shift ;;
  -h | --help) sed -n '2,/^set -eu/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "lm_quality.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
for s in $seeds; do
  case $s in *[!0-9]*) echo "lm_quality.sh: --seeds: $s is not a non-negative integer" >&2; exit 2 ;; esac
done
case $steps in '' | *[!0-9]* | 0) echo "lm_quality.sh: --steps: $steps is not a positive integer" >&2; exit 2 ;; esac
for side in $sides; do
  case $side in ours | pt) ;; *) echo "lm_quality.sh: --sides: $side is not ours or pt" >&2; exit 2 ;; esac
done
[ -n "$work" ] || work=$build/lm_quality
mkdir -p "$work"
work=$(cd "$work" && pwd -P)

# the protocol's constants, shared by both sides
seq_len=128 layers=4 hidden=256 heads=4 dropout=0.1 lr=1e-3 warmup=100 micro=16 world=2
cfg=$work/lm_quality.json
cat >"$cfg" <<EOF
{
  "train_micro_batch_size_per_gpu": $micro,
  "gradient_accumulation_steps": 1,
  "steps_per_print": 100,
  "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW",
                "params": {"lr": $lr, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}},
  "scheduler": {"type": "WarmupDecayLR",
                "params": {"warmup_min_lr": 0, "warmup_max_lr": $lr, "warmup_num_steps": $warmup,
                           "warmup_type": "linear", "total_num_steps": "auto"}},
  "zero_optimization": {"stage": 2}
}
EOF

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", b - a }'; }
finished() { [ -s "$1" ] && tail -1 "$1" | grep -q '^{"eval"'; }

run_one() { # SIDE SEED
  base=$work/$1_s$2
  if [ -n "$skip_done" ] && finished "$base.jsonl" && [ -s "$base.wall" ]; then
    echo "lm_quality.sh: $1, seed $2: done before, skipped"
    return
  fi
  rm -f "$base.wall"
  echo "lm_quality.sh: $1, seed $2 ..."
  t0=$(now)
  case $1 in
  ours)
    gen=""
    [ "$generate" -gt 0 ] && gen="--generate $generate --temperature 0.8 --top-k 40 --sample-seed $2"
    # shellcheck disable=SC2086 # gen is a list of words
    OMP_NUM_THREADS=1 "$build/bin/engine-run" --np $world --config "$cfg" train_lm \
      --data "$data" --seed "$2" --seq-len $seq_len --layers $layers --hidden $hidden \
      --heads $heads --dropout $dropout --max-steps "$steps" --metrics "$base.jsonl" \
      --save-dir "$work/model_s$2" $gen >"$base.log" 2>&1 ||
      { echo "lm_quality.sh: train_lm failed, see $base.log" >&2; tail -5 "$base.log" >&2; exit 1; }
    ;;
  pt)
    OMP_NUM_THREADS=2 "$python" "$src/tools/pytorch_lm_reference.py" --data "$data" --seed "$2" \
      --seq-len $seq_len --layers $layers --hidden $hidden --heads $heads --dropout $dropout \
      --world $world --micro-batch $micro --max-steps "$steps" --lr $lr --warmup $warmup \
      --threads 2 --log-every 1 --metrics "$base.jsonl" >"$base.log" 2>&1 ||
      { echo "lm_quality.sh: the PyTorch run failed, see $base.log" >&2; tail -5 "$base.log" >&2; exit 1; }
    ;;
  esac
  elapsed "$t0" "$(now)" >"$base.wall"
  echo "lm_quality.sh: $1, seed $2: $(tail -1 "$base.jsonl" | cut -c1-120) ($(cat "$base.wall") s)"
}

run_all() {
  data=$(readlink -f "$data")
  for f in "$build/bin/engine-run" "$build/bin/train_lm" "$build/bench/lm_dump_pack"; do
    [ -x "$f" ] || { echo "lm_quality.sh: $f missing: build first" >&2; exit 1; }
  done
  [ -r "$data" ] || { echo "lm_quality.sh: cannot read $data" >&2; exit 1; }
  "$python" -c 'import torch, transformers, numpy' 2>/dev/null ||
    { echo "lm_quality.sh: $python lacks torch, transformers or numpy" >&2; exit 1; }
  if [ -z "$skip_done" ] || [ ! -s "$work/date" ]; then
    date -u '+%Y-%m-%d %H:%M UTC' >"$work/date"
  fi
  for seed in $seeds; do
    # 0. the same tokens in the same order, or nothing trains
    "$build/bench/lm_dump_pack" "$data" "$work/pack_s$seed.bin" --seed "$seed" \
      --seq-len $seq_len --world $world --micro-batch $micro --steps "$steps" \
      >"$work/pack_s$seed.txt"
    if ! "$python" "$src/tools/pytorch_lm_reference.py" --data "$data" --seed "$seed" \
      --seq-len $seq_len --world $world --micro-batch $micro --max-steps "$steps" \
      --check-pack "$work/pack_s$seed.bin" >>"$work/pack_s$seed.txt" 2>&1; then
      echo "lm_quality.sh: seed $seed: the C and Python data differ:" >&2
      grep -i 'differ' "$work/pack_s$seed.txt" >&2
      exit 1
    fi
    rm -f "$work/pack_s$seed.bin"
    echo "lm_quality.sh: seed $seed: $(tail -1 "$work/pack_s$seed.txt")"
    for side in $sides; do run_one "$side" "$seed"; done
  done
}
[ -n "$table_only" ] || run_all

section=$work/section.md
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
[ -z "${OPENBLAS_CORETYPE:-}" ] || cpu="$cpu, OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE"
"$python" "$src/bench/lm_quality_table.py" --work "$work" --seeds "$seeds" --steps "$steps" \
  --cpu "$cpu" --ncpu "$(nproc)" --heading "$section_title" >"$section"
cat "$section"
[ -n "$write_results" ] || exit 0
results=$src/bench/RESULTS.md
python3 "$src/bench/results_section.py" "$results" "$section" "$section_title"
echo "lm_quality.sh: wrote the section into $results"
