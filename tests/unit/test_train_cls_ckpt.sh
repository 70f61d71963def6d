#!/bin/sh
# train_cls --save-steps / --resume: a run of 6 steps straight through and a
# run of 3 steps with a checkpoint, resumed in a new process group for 3 more,
# log the same losses for steps 4-6 (a small BERT with dropout 0.1, 2 ranks,
# ZeRO stage 2: exact resume restores the data order and the dropout stream).
# Also: a stale TAG.tmp is removed (and said) when the job starts, --resume
# with nothing saved starts from step 0, with checkpoints but no latest goes
# on from the newest (--resume-from TAG names another), and zero_to_fp32
# converts the checkpoint train_cls wrote.
#
#   test_train_cls_ckpt.sh BINDIR WORKDIR MPIRUN [FLAGS...]
set -u
. "$(dirname "$0")/test_util.sh"
bin=$(readlink -f "$1")
rm -rf "$2" && mkdir -p "$2" && cd "$2" || exit 1
shift 2
"$bin/gen_sentences" --rows 300 --seed 7 --out data.csv >/dev/null || exit 1
cat >cfg.json <<'JSON'
{"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
 "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.01}},
 "zero_optimization": {"stage": 2}}
JSON
# The trainer's linear schedule (no scheduler section) decays towards the
# run's last step from the first step on unless it warms up: --warmup 3 makes
# the first 3 steps' lr the same in the 3-step and the 6-step run, so the
# resumed run can equal the straight one.
tc() { # tc LOG ARGS...
  log=$1
  shift
  "$@" -np 2 "$bin/train_cls" --config cfg.json --data data.csv --model bert --layers 1 \
    --hidden 32 --heads 2 --intermediate 64 --dropout 0.1 --max-seq-len 32 --warmup 3 \
    $TC_ARGS >"$log" 2>&1 ||
    { fail "train_cls $TC_ARGS:"; cat "$log"; }
}
losses() { # step and loss of each step line of a metrics file, from step $2 on
  sed -n 's/^{"step": \([0-9]*\), .*"loss": \([0-9.]*\),.*/\1 \2/p' "$1" | awk -v from="$2" '$1 >= from'
}

TC_ARGS="--max-steps 6 --metrics straight.jsonl" tc straight.log "$@"
TC_ARGS="--max-steps 3 --save-steps 3 --ckpt-dir ck --metrics first.jsonl" tc first.log "$@"
[ "$(head -n1 ck/latest 2>/dev/null)" = "global_step3" ] || fail "ck/latest is not global_step3"
mkdir -p ck/global_step99.tmp # what a save killed half-way leaves: removed at start-up
TC_ARGS="--max-steps 6 --save-steps 3 --ckpt-dir ck --resume --metrics second.jsonl" \
  tc second.log "$@"
[ -e ck/global_step99.tmp ] && fail "the stale ck/global_step99.tmp is still there"
grep -q "removed ck/global_step99.tmp" second.log || fail "no line about removing global_step99.tmp"
grep -q "resumed from ck/global_step3 at step 3" second.log || fail "no resume line in second.log"
losses straight.jsonl 4 >want.txt
losses second.jsonl 1 >got.txt
[ "$(wc -l <want.txt)" -eq 3 ] || fail "straight run: $(wc -l <want.txt) steps from step 4"
cmp -s want.txt got.txt || { fail "resumed losses differ:"; paste want.txt got.txt; }
[ "$(head -n1 ck/latest 2>/dev/null)" = "global_step6" ] || fail "ck/latest is not global_step6"

# without latest (a first save killed before writing it, or latest
# removed): --resume goes on from the newest complete checkpoint, saying so,
# rather than train afresh over the folder; --resume-from names another (a
# tag that is not there is refused, naming those that are); zero_to_fp32
# names them and takes --tag
cp -a ck ck2 && rm ck2/latest
TC_ARGS="--max-steps 6 --ckpt-dir ck2 --resume" tc nolatest.log "$@"
grep -q "ck2 has no latest .*continuing from the newest complete checkpoint, global_step6 (of global_step6 (step 6), global_step3 (step 3))" \
  nolatest.log || { fail "--resume without latest:"; cat nolatest.log; }
grep -q "resumed from ck2/global_step6 at step 6" nolatest.log || fail "no resume line in nolatest.log"
rm -f ck2/latest
"$@" -np 2 "$bin/train_cls" --config cfg.json --data data.csv --model bert --layers 1 \
  --hidden 32 --heads 2 --intermediate 64 --max-seq-len 32 --max-steps 6 --ckpt-dir ck2 \
  --resume-from global_step4 >notag.log 2>&1
[ $? -eq 2 ] && grep -q "ck2/global_step4: no such checkpoint (the folder holds global_step6" notag.log ||
  { fail "--resume-from a missing tag:"; cat notag.log; }
TC_ARGS="--max-steps 6 --ckpt-dir ck2 --resume-from global_step3 --metrics third.jsonl" \
  tc third.log "$@"
grep -q "resumed from ck2/global_step3 at step 3" third.log || fail "no resume line in third.log"
losses third.jsonl 1 >got3.txt
cmp -s want.txt got3.txt || { fail "--resume-from losses differ:"; paste want.txt got3.txt; }
rm -f ck2/latest # the third run saved at its end
"$bin/zero_to_fp32" ck2 model_nl >z2f_nl.log 2>&1 && fail "zero_to_fp32 without latest went on"
grep -q "though the folder holds global_step6 (step 6)" z2f_nl.log ||
  { fail "zero_to_fp32 without latest:"; cat z2f_nl.log; }
"$bin/zero_to_fp32" ck2 model_nl --tag global_step3 >z2f_tag.log 2>&1 ||
  { fail "zero_to_fp32 --tag:"; cat z2f_tag.log; }

TC_ARGS="--max-steps 1 --ckpt-dir empty --resume" tc empty.log "$@"
grep -q "no checkpoint in empty yet" empty.log || fail "--resume without a checkpoint: $(cat empty.log)"

"$bin/zero_to_fp32" ck model_out >z2f.log 2>&1 || { fail "zero_to_fp32:"; cat z2f.log; }
[ -f model_out/model.safetensors ] || fail "zero_to_fp32 wrote no model_out/model.safetensors"
[ $fails -eq 0 ] && echo "resumed steps 4-6 match the straight run: $(tr '\n' ' ' <got.txt)"
finish
