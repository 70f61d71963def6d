#!/usr/bin/env bash
# Fine-tuning a real pretrained BERT end to end, as the README documents it:
# engine-run --np 2 train_cls --init MINILM_DIR (ZeRO-2, WordPiece tokenizer
# from its vocab.txt) on 32 generated sentences of two classes, evaluated on
# the same 32 rows, then --save-dir read back by predict.
#
#   test_train_cls_minilm.sh BIN_DIR MINILM_DIR "MPIRUN_FLAGS"
#
# Checks: all 103 checkpoint tensors load and only classifier.* is new; the
# training loss falls from about ln 2 to under 0.2 in 25 steps (the run this
# test was written with ends at 0.037: memorising 32 rows is easy for a
# pretrained encoder, so 0.2 leaves room for any BLAS's rounding without
# letting a model that does not learn pass); at least 30 of the 32 rows are
# classified right afterwards (32 of 32 when written; 2 rows of slack for the
# same reason); predict loads the saved folder and labels two texts; a
# rank that cannot read --init stops every rank at once, named; and ranks
# whose copies of --init hold other tensors stop before a mismatched set.
set -u
. "$(dirname "$0")/test_util.sh"
need_args 3 "BIN_DIR MINILM_DIR MPIRUN_FLAGS" $#
bin=$1
minilm=$2
mpirun_flags=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$bin/gen_sentences" --rows 32 --seed 7 --classes 2 --out "$tmp/d.csv" >/dev/null ||
  { fail "gen_sentences"; finish; }
cat >"$tmp/c.json" <<'EOF'
{"train_micro_batch_size_per_gpu": 16, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.01}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 1e-4,
                                              "warmup_num_steps": 5, "warmup_type": "linear"}},
 "zero_optimization": {"stage": 2}}
EOF
# shellcheck disable=SC2086 # the flags are a list of words
OMP_NUM_THREADS=1 mpirun $mpirun_flags -np 2 "$bin/train_cls" --config "$tmp/c.json" \
  --data "$tmp/d.csv" --eval-data "$tmp/d.csv" --init "$minilm" --max-seq-len 32 --max-steps 25 \
  --metrics "$tmp/m.jsonl" --save-dir "$tmp/out" >"$tmp/log" 2>&1 ||
  { cat "$tmp/log"; fail "train_cls --init exited non-zero"; finish; }

grep -q 'hf weights: loaded 103 parameters' "$tmp/log" || fail "not all 103 tensors loaded"
grep -A3 'newly initialised' "$tmp/log" | grep -q 'classifier.bias' ||
  fail "classifier.* not reported as newly initialised"
grep -q '(wordpiece)' "$tmp/log" || fail "the WordPiece tokenizer of --init was not used"

python3 - "$tmp/m.jsonl" >"$tmp/check" 2>&1 <<'PY' || fail "$(cat "$tmp/check")"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
losses = [r["loss"] for r in recs if "loss" in r]
ev = [r["eval"] for r in recs if "eval" in r]
errs = []
if len(losses) != 25:
    errs.append(f"{len(losses)} steps logged, want 25")
elif not (0.6 < losses[0] < 0.8 and losses[-1] < 0.2):
    errs.append(f"loss {losses[0]:.3f} -> {losses[-1]:.3f}: want about ln 2 -> under 0.2")
if not ev or ev[-1]["total"] != 32 or ev[-1]["accuracy"] * 32 < 29.5:
    errs.append(f"evaluation {ev[-1] if ev else None}: want at least 30 of 32 rows right")
print("; ".join(errs) if errs else f"loss {losses[0]:.3f} -> {losses[-1]:.3f}, "
      f"accuracy {ev[-1]['accuracy']:.4f}")
sys.exit(1 if errs else 0)
PY
cat "$tmp/check"

# A rank that cannot read --init (DS_FAULT_INJECT=error:init:read:rank=1, as
# a folder missing on its host): every rank stops at once, rank 0 naming
# rank 1, instead of rank 0 waiting in its first ds_set_param for a rank
# that never comes (which ended only when rank 1's exit took the job down).
# shellcheck disable=SC2086 # the flags are a list of words
OMP_NUM_THREADS=1 DS_FAULT_INJECT=error:init:read:rank=1 mpirun $mpirun_flags -np 2 \
  -x DS_FAULT_INJECT "$bin/train_cls" --config "$tmp/c.json" --data "$tmp/d.csv" \
  --init "$minilm" --max-seq-len 32 --max-steps 2 >"$tmp/log_fail" 2>&1 &&
  fail "train_cls --init with rank 1 unable to read it exited 0"
grep -q 'loading --init .*: rank 1 could not load it' "$tmp/log_fail" ||
  fail "rank 0 did not name rank 1: $(tail -n 4 "$tmp/log_fail")"
grep -q 'init:read: failure injected by DS_FAULT_INJECT on rank 1' "$tmp/log_fail" ||
  fail "rank 1 did not say why: $(tail -n 4 "$tmp/log_fail")"
grep -q 'ends the job with MPI_Abort' "$tmp/log_fail" &&
  fail "a rank waited for the other until its exit: $(tail -n 4 "$tmp/log_fail")"

# Ranks whose copies of --init differ (rank 1's lacks layer 2: its loader
# would initialise those tensors and set one tensor fewer, pairing the
# others' layer-2 ds_set_param with its layer-3 one): every rank stops before a
# mismatched set. Rank 1's folder: MiniLM's, its safetensors rewritten
# without encoder.layer.2.* (mpirun's ':' gives each rank its own --init).
mkdir -p "$tmp/short"
cp "$minilm/config.json" "$minilm/vocab.txt" "$tmp/short/"
python3 - "$minilm/model.safetensors" "$tmp/short/model.safetensors" <<'PY'
import json, struct, sys
src = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", src[:8])[0]
head = json.loads(src[8:8 + n])
data = src[8 + n:]
out, blob = {}, bytearray()
for k, v in head.items():
    if k == "__metadata__":
        out[k] = v
        continue
    if "layer.2." in k:
        continue
    a, b = v["data_offsets"]
    out[k] = dict(v, data_offsets=[len(blob), len(blob) + b - a])
    blob += data[a:b]
h = json.dumps(out).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + bytes(blob))
PY
args=(--config "$tmp/c.json" --data "$tmp/d.csv" --max-seq-len 32 --max-steps 2)
# shellcheck disable=SC2086 # the flags are a list of words
OMP_NUM_THREADS=1 timeout 120 mpirun $mpirun_flags -np 1 "$bin/train_cls" "${args[@]}" \
  --init "$minilm" : -np 1 "$bin/train_cls" "${args[@]}" --init "$tmp/short" \
  >"$tmp/log_short" 2>&1 && fail "train_cls with a shorter --init on rank 1 exited 0"
grep -q "loading --init .*: the ranks' folders differ" "$tmp/log_short" ||
  fail "the ranks did not say their folders differ: $(tail -n 4 "$tmp/log_short")"

for f in config.json model.safetensors vocab.txt; do
  [ -s "$tmp/out/$f" ] || fail "--save-dir lacks $f"
done
OMP_NUM_THREADS=1 "$bin/predict" --model "$tmp/out" "今天真开心" "心里很难过" >"$tmp/pred" 2>&1 ||
  fail "predict on the saved folder: $(tail -n 1 "$tmp/pred")"
[ "$(grep -cE '^(happiness|sadness)'$'\t' "$tmp/pred")" -eq 2 ] ||
  fail "predict printed no label per text: $(cat "$tmp/pred")"
cat "$tmp/pred"
finish
