#!/bin/sh
# train_lm end to end, started by engine-run on 2 ranks (ZeRO stage 2) with a
# tiny byte-level GPT-2 on a generated corpus of 300 short English documents
# (python3 writes it; 18 kB):
#   train   40 steps: the training loss falls, dev loss / perplexity / bits per
#           byte are reported before and after, --metrics is valid JSON lines
#           with every key, the dev tokens are exactly the dev documents'
#           bytes plus one <|endoftext|> each (every token counted once), and
#           --generate prints a greedy continuation of the prompt;
#   reload  --init of the --save-dir folder with --max-steps 0 gives the same
#           dev evaluation bit for bit and the same greedy sample; on 1 rank
#           the same token count and the loss within 1e-5;
#   resume  20 steps with a checkpoint, then --resume to 40: steps 21-40 log
#           the losses of the straight run bit for bit;
#   z2f     zero_to_fp32 of that step-20 checkpoint: the safetensors header
#           holds transformer.wte.weight once and no lm_head.weight, the
#           same tensors as --save-dir's model.safetensors;
#   preempt SIGTERM to engine-run a few steps in: exit 143, latest names the
#           checkpoint saved at the next step boundary and it verifies; a
#           stale TAG.tmp is removed at start-up; --resume to 40 completes
#           the metrics with the losses of the straight run, bit for bit;
#   sampling --temperature 0.8 --top-k 5 --sample-seed 7 twice from the saved
#           model: the same text; --top-k 1 gives the greedy text;
#   plain   --init of model/ without lm_tokenizer.json (a Hugging Face
#           folder): read with the byte tokenizer, the same evaluation and
#           sample; --tokenizer byte too;
#   dev     --eval-data FILE: all 300 documents train, dev tokens = the
#           file's bytes + its documents; --dev-ratio 0.2: 240 / 60, the
#           drawn documents' bytes + 60;
#   help    --help mentions every long option of the parser's tables;
#   formats JSON lines with the char tokenizer, a CSV column;
#   errors  a missing file, a folder as --data, an unknown flag, --seq-len
#           past the model's positions, a BPE model folder, an --init folder
#           without weights, a bad JSON line, --tokenizer with --init, a
#           prompt that is not UTF-8 (refused before training), a folder
#           without lm_tokenizer.json whose vocab_size is under 257 or
#           given --tokenizer char: one line on stderr, exit 1 (2 for the
#           command line).
#
#   test_train_lm.sh BINDIR WORKDIR
set -u
. "$(dirname "$0")/test_util.sh"
need_args 2 "BINDIR WORKDIR" $#
bin=$(readlink -f "$1")
rm -rf "$2" && mkdir -p "$2" && cd "$2" || exit 1
export OMP_NUM_THREADS=1 OMPI_MCA_btl=self,vader,tcp

# Documents of 1-3 sentences from small word lists, separated by blank lines.
python3 - <<'PY' || exit 1
import csv, json, random
r = random.Random(7)
names = ["anna", "bob", "the cat", "a dog", "my friend", "the teacher"]
verbs = ["sees", "likes", "finds", "paints", "carries", "wants"]
adjs = ["red", "small", "old", "happy", "green", "quiet"]
nouns = ["ball", "house", "tree", "book", "river", "garden"]
docs = ["\n".join(f"{r.choice(names)} {r.choice(verbs)} the {r.choice(adjs)} {r.choice(nouns)}."
                  for _ in range(r.randint(1, 3))) for _ in range(300)]
open("corpus.txt", "w").write("\n\n".join(docs) + "\n")
with open("corpus.jsonl", "w") as f:
    for d in docs: f.write(json.dumps({"id": len(d), "text": d}) + "\n")
with open("corpus.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["id", "body"])
    for i, d in enumerate(docs): w.writerow([i, d])
PY
# The dev split as ds_lm_docs_split draws it (engine/data/dataset.h gives the
# permutation in Python): the documents after the first int(n (1 - ratio)) of
# the permuted order.
cat >lmsplit.py <<'PY'
M = 2**64 - 1
def permutation(n, seed):
    s, a = seed & M, list(range(n))
    for i in range(n - 1, 0, -1):
        s = (s + 0x9E3779B97F4A7C15) & M
        z = s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
        z ^= z >> 31
        j = z % (i + 1)
        a[i], a[j] = a[j], a[i]
    return a
def docs(path):  # the text format: documents separated by blank lines
    return open(path, encoding="utf-8").read().strip("\n").split("\n\n")
def dev(path, ratio, seed=42):
    d = docs(path)
    perm = permutation(len(d), seed)
    return [d[i] for i in perm[int(len(d) * (1 - ratio) + 1e-9):]]
PY
# A constant learning rate (no scheduler section, and --lr-scheduler-type
# constant in $shape below), so a run cut at step 20 and
# resumed follows the straight run exactly; dropout stays on (0.1).
cat >cfg.json <<'JSON'
{"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
 "gradient_clipping": 1.0, "steps_per_print": 100,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.01}},
 "zero_optimization": {"stage": 2}}
JSON
# --lr-scheduler-type constant keeps the lr constant: without a scheduler
# section the trainer would run HF's default "linear" schedule, which ties
# the lr to --max-steps, and that differs between the cut and resumed runs.
shape="--seq-len 32 --layers 2 --hidden 32 --heads 2 --lr-scheduler-type constant"
lm() { # lm LOG ARGS...: train_lm on 2 ranks through engine-run
  log=$1
  shift
  # shellcheck disable=SC2086 # $shape is a list of words
  "$bin/engine-run" --np 2 --config cfg.json train_lm $shape "$@" >"$log" 2>&1 ||
    { fail "train_lm $* exited $?:"; tail -5 "$log"; }
}
gen="--generate 30 --prompt anna --temperature 0"

# ---- train ----
lm a.log --data corpus.txt --max-steps 40 --metrics a.jsonl --save-dir model $gen
# The dev split, as ds_lm_docs_split draws it (engine/data/dataset.h gives
# the permutation in Python): dev tokens = its bytes + one <|endoftext|> per
# document. The losses: ln 257 = 5.55 at the start; after 40 steps the
# training loss measured 2.9 and dev 2.9 nats/token, so the bounds below
# (first-5 mean x 0.7, dev 1 nat lower) have room and a model that does not
# learn fails them.
python3 - a.jsonl corpus.txt <<'PY' || fail "a.jsonl (above)"
import json, math, sys
from lmsplit import dev as dev_split
lines = [json.loads(l) for l in open(sys.argv[1])]   # any bad line raises
fails = []
dev = dev_split(sys.argv[2], 0.1)
dev_bytes = sum(len(d.encode()) for d in dev)
init, ev = lines[0].get("initial_eval"), lines[-1].get("eval")
steps = [l for l in lines if "step" in l]
if [s["step"] for s in steps] != list(range(1, 41)): fails.append("steps are not 1..40")
keys = ("epoch", "loss", "lr", "grad_norm", "tokens_per_s", "samples_per_s", "loss_scale")
for s in steps:
    missing = [k for k in keys if k not in s]
    if missing: fails.append(f"step {s['step']} lacks {missing}")
first = sum(s["loss"] for s in steps[:5]) / 5
last = sum(s["loss"] for s in steps[-5:]) / 5
if not last < 0.7 * first: fails.append(f"training loss {first:.3f} -> {last:.3f}")
if not init or not ev: fails.append("no initial_eval first or eval last")
else:
    if not ev["loss"] < init["loss"] - 1.0: fails.append(f"dev loss {init['loss']} -> {ev['loss']}")
    for e in (init, ev):
        if e["bytes"] != dev_bytes or e["tokens"] != dev_bytes + len(dev):
            fails.append(f"dev {e['tokens']} tokens / {e['bytes']} bytes, expected "
                         f"{dev_bytes + len(dev)} / {dev_bytes}")
        # printed with 6 decimals: agree to the last one (and a rounding)
        if abs(e["bits_per_byte"] - e["nats"] / math.log(2) / e["bytes"]) > 2e-6:
            fails.append(f"bits_per_byte {e['bits_per_byte']} is not nats / ln 2 / bytes")
        if abs(e["perplexity"] - math.exp(e["loss"])) > 1e-5 * e["perplexity"]:
            fails.append(f"perplexity {e['perplexity']} is not exp(loss {e['loss']})")
for f in fails: print("FAIL", f)
sys.exit(1 if fails else 0)
PY
grep -q "^train_lm: dev before training: loss [0-9.]* nats/token, perplexity [0-9.]*, [0-9.]* bits/byte" a.log ||
  fail "no dev report before training in a.log"
grep -q "^train_lm: dev after training: loss [0-9.]* nats/token, perplexity [0-9.]*, [0-9.]* bits/byte" a.log ||
  fail "no dev report after training in a.log"
sed -n '/^train_lm: sample (30 tokens, greedy):$/{n;p;}' a.log >a_sample.txt
grep -q "^anna.\{10,\}" a_sample.txt || fail "no greedy sample continuing 'anna': $(cat a_sample.txt)"
for f in config.json model.safetensors lm_tokenizer.json; do
  [ -f "model/$f" ] || fail "--save-dir wrote no model/$f"
done

# ---- reload ----
lm b.log --data corpus.txt --init model --max-steps 0 --metrics b.jsonl $gen
grep -q "loaded [0-9]* parameters" b.log || fail "b.log: no weight load report"
grep -q "newly initialised" b.log && fail "b.log: parameters missing from model/"
tail -1 a.jsonl >a_eval.json
cmp -s a_eval.json b.jsonl || fail "reloaded eval differs: $(cat a_eval.json) vs $(cat b.jsonl)"
sed -n '/^train_lm: sample (30 tokens, greedy):$/{n;p;}' b.log >b_sample.txt
cmp -s a_sample.txt b_sample.txt || fail "reloaded sample differs: $(cat b_sample.txt)"
"$bin/train_lm" --config "$(pwd)/cfg.json" $shape --data corpus.txt --init model --max-steps 0 \
  --metrics c.jsonl >c.log 2>&1 || fail "1 rank: exit $?: $(tail -3 c.log)"
# One rank sums the same per-token losses in another order: measured 1e-7
# relative; 1e-5 still catches a token lost or counted twice (1 / 1870).
python3 - a_eval.json c.jsonl <<'PY' || fail "1-rank evaluation (above)"
import json, sys
a, c = (json.loads(open(p).read().splitlines()[-1])["eval"] for p in sys.argv[1:])
ok = a["tokens"] == c["tokens"] and a["bytes"] == c["bytes"] and abs(a["loss"] - c["loss"]) <= 1e-5 * a["loss"]
if not ok: print("FAIL 2 ranks", a, "1 rank", c)
sys.exit(0 if ok else 1)
PY

# ---- sampling ----
# sample LOG: the text train_lm printed after its "sample (...):" line (it
# may hold line breaks; nothing follows it in the log).
sample() { sed -n '/^train_lm: sample (/,$p' "$1" | tail -n +2; }
samp="--init model --max-steps 0 --generate 30 --prompt anna --temperature 0.8"
# shellcheck disable=SC2086 # $samp is a list of words
lm s1.log --data corpus.txt $samp --top-k 5 --sample-seed 7
# shellcheck disable=SC2086
lm s2.log --data corpus.txt $samp --top-k 5 --sample-seed 7
grep -q "^train_lm: sample (30 tokens, temperature 0.8, top-k 5, seed 7):$" s1.log ||
  fail "s1.log: no sample line naming temperature 0.8, top-k 5, seed 7"
sample s1.log >s1.txt
sample s2.log >s2.txt
[ -s s1.txt ] || fail "s1.log: no sampled text"
cmp -s s1.txt s2.txt || fail "the same --sample-seed sampled different text: $(cat s1.txt) / $(cat s2.txt)"
# top-k 1 keeps only the most likely token: greedy whatever the temperature
# shellcheck disable=SC2086
lm s3.log --data corpus.txt $samp --top-k 1 --sample-seed 7
sample s3.log >s3.txt
sample b.log >greedy.txt
cmp -s s3.txt greedy.txt || fail "--top-k 1 differs from greedy: '$(cat s3.txt)' vs '$(cat greedy.txt)'"

# ---- a plain Hugging Face folder (no lm_tokenizer.json) ----
# model/ without its tokenizer description is what a Hugging Face GPT-2
# folder of a byte-level model looks like: vocab_size 257 holds the byte ids,
# so it is read with the byte tokenizer and evaluates as model/ did.
mkdir -p plain && cp model/config.json model/model.safetensors plain/
lm h.log --data corpus.txt --init plain --max-steps 0 --metrics h.jsonl $gen
grep -q "^train_lm: --init plain has no lm_tokenizer.json: its ids are read as the byte tokenizer's (vocab_size 257)$" h.log ||
  fail "h.log: no line saying plain/ is read with the byte tokenizer"
cmp -s a_eval.json h.jsonl || fail "plain folder's eval differs: $(cat h.jsonl) vs $(cat a_eval.json)"
sample h.log >h_sample.txt
cmp -s h_sample.txt greedy.txt || fail "plain folder's sample differs: $(cat h_sample.txt)"
lm hb.log --data corpus.txt --init plain --tokenizer byte --max-steps 0 --metrics hb.jsonl
cmp -s a_eval.json hb.jsonl || fail "plain folder with --tokenizer byte: $(cat hb.jsonl)"

# ---- --eval-data and --dev-ratio ----
# A dev file of its own (with 2- and 3-byte UTF-8 characters, so bytes are
# not characters): every --data document trains, and the dev tokens are
# exactly the eval file's bytes plus one <|endoftext|> per document.
printf 'the caf\303\251 sees the old river.\n\nanna likes \346\227\245\346\234\254 books.\nbob finds the tree.\n\na dog wants the red ball.\n' >eval.txt
lm e.log --data corpus.txt --eval-data eval.txt --max-steps 2 --metrics e.jsonl
grep -q "^train_lm: train 300 documents .* dev 3 documents" e.log ||
  fail "e.log: not 300 training and 3 dev documents: $(grep '^train_lm: train' e.log)"
# --dev-ratio 0.2 given: 240 documents train, the 60 that the split draws
# are dev, their bytes + 60 tokens.
lm d2.log --data corpus.txt --dev-ratio 0.2 --max-steps 2 --metrics d2.jsonl
grep -q "^train_lm: train 240 documents .* dev 60 documents" d2.log ||
  fail "d2.log: not 240 training and 60 dev documents: $(grep '^train_lm: train' d2.log)"
python3 - <<'PY' || fail "--eval-data / --dev-ratio token counts (above)"
import json, sys
from lmsplit import docs, dev
fails = []
for log, want in (("e.jsonl", docs("eval.txt")), ("d2.jsonl", dev("corpus.txt", 0.2))):
    ev = [json.loads(l) for l in open(log)][-1]["eval"]
    b = sum(len(d.encode()) for d in want)
    if ev["bytes"] != b or ev["tokens"] != b + len(want):
        fails.append(f"{log}: {ev['tokens']} tokens / {ev['bytes']} bytes, expected "
                     f"{b + len(want)} / {b} ({len(want)} documents)")
for f in fails: print("FAIL", f)
sys.exit(1 if fails else 0)
PY

# ---- --help names every option ----
# The long options the parser accepts, read from its tables (the shared
# trainer flags and train_lm's own): each must appear in --help.
src=$(dirname "$0")/../../tools/common
opts=$(sed -n 's/^ *{"\([a-z0-9-]*\)", *\(no\|required\)_argument.*/\1/p' "$src/trainer_opts.c" \
  "$src/lm_opts.c")
[ "$(echo "$opts" | wc -w)" -ge 40 ] || fail "read only $(echo "$opts" | wc -w) options from $src"
"$bin/train_lm" --help >help.txt 2>&1 || fail "train_lm --help exited $?"
for o in $opts; do
  grep -q -- "--$o\([^a-z0-9-]\|$\)" help.txt || fail "train_lm --help does not mention --$o"
done

# ---- resume ----
lm r1.log --data corpus.txt --max-steps 20 --save-steps 20 --ckpt-dir ck
[ "$(head -n1 ck/latest 2>/dev/null)" = "global_step20" ] || fail "ck/latest is not global_step20"
lm r2.log --data corpus.txt --max-steps 40 --ckpt-dir ck --resume --metrics r2.jsonl
grep -q "resumed from ck/global_step20 at step 20" r2.log || fail "r2.log: no resume line"
steps_from() { sed -n 's/^{"step": \([0-9]*\), .*"loss": \([0-9.]*\),.*/\1 \2/p' "$1" | awk -v f="$2" '$1 >= f'; }
steps_from a.jsonl 21 >want.txt
steps_from r2.jsonl 1 >got.txt
[ "$(wc -l <want.txt)" -eq 20 ] || fail "straight run: $(wc -l <want.txt) steps from 21"
cmp -s want.txt got.txt || { fail "resumed losses differ:"; paste want.txt got.txt | head; }
tail -1 r2.jsonl | cmp -s - a_eval.json || fail "resumed eval differs: $(tail -1 r2.jsonl)"

# ---- zero_to_fp32 of a GPT-2 checkpoint ----
# The tied table is stored once under its owner's name: the safetensors
# header names transformer.wte.weight once ([257, 32]) and no
# lm_head.weight, and lists the same tensors, shapes and dtypes as
# --save-dir's model.safetensors.
"$bin/zero_to_fp32" ck z.safetensors --tag global_step20 >z.log 2>&1 ||
  fail "zero_to_fp32 ck: exit $?: $(tail -3 z.log)"
python3 - z.safetensors model/model.safetensors <<'PY' || fail "zero_to_fp32 of a GPT-2 checkpoint (above)"
import json, struct, sys
def tensors(path):  # [(name, {dtype, shape, data_offsets})], duplicates kept
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        top = json.loads(f.read(n), object_pairs_hook=list)
    return [(k, dict(v)) for k, v in top if k != "__metadata__"]
z, m = tensors(sys.argv[1]), tensors(sys.argv[2])
names = [k for k, _ in z]
fails = []
if names.count("transformer.wte.weight") != 1:
    fails.append(f"transformer.wte.weight {names.count('transformer.wte.weight')} times")
elif dict(z)["transformer.wte.weight"]["shape"] != [257, 32]:
    fails.append(f"transformer.wte.weight {dict(z)['transformer.wte.weight']['shape']}")
if "lm_head.weight" in names: fails.append("lm_head.weight stored")
if len(set(names)) != len(names): fails.append("a name stored twice")
shape = lambda ts: sorted((k, v["dtype"], v["shape"]) for k, v in ts)
if shape(z) != shape(m): fails.append(f"tensors differ from model/: {shape(z)} vs {shape(m)}")
for f in fails: print("FAIL", f)
sys.exit(1 if fails else 0)
PY

# ---- preemption ----
# Up to 1000 steps (a step takes a few ms here), SIGTERM to engine-run once 5
# are logged: every rank saves at the next step boundary and the job exits
# 143. The constant learning rate makes the run's length irrelevant to its
# losses, so the stopped run plus a --resume to 40 must log steps 1-40 with
# the straight run's losses.
"$bin/engine-run" --np 2 --config cfg.json train_lm $shape --data corpus.txt --max-steps 1000 \
  --ckpt-dir pk --metrics p.jsonl >p1.log 2>&1 &
pid=$!
until [ "$(cat p.jsonl 2>/dev/null | grep -c '^{"step"')" -ge 5 ] || ! kill -0 $pid 2>/dev/null; do
  sleep 0.01
done
kill -TERM $pid
wait $pid
rc=$?
saved=$(sed -n 's/^train_lm: SIGTERM (came .*): saved pk\/global_step\([0-9]*\); exiting 143,.*/\1/p' p1.log)
if [ "$rc" -ne 143 ] || [ -z "$saved" ] || [ "$saved" -ge 40 ]; then
  fail "SIGTERM: exit $rc (want 143), saved step '$saved' (want one below 40):"
  tail -5 p1.log
else
  [ "$(head -n1 pk/latest)" = "global_step$saved" ] || fail "pk/latest is not global_step$saved"
  "$bin/zero_to_fp32" --verify pk >/dev/null 2>&1 || fail "the preemption checkpoint does not verify"
  [ "$(steps_from p.jsonl 1 | awk '{print $1}' | tr '\n' ' ')" = "$(seq 1 "$saved" | tr '\n' ' ')" ] ||
    fail "p.jsonl before the stop is not steps 1..$saved"
  mkdir pk/global_step999.tmp # what a save cut short leaves
  lm p2.log --data corpus.txt --max-steps 40 --ckpt-dir pk --resume --metrics p.jsonl
  grep -q "removed pk/global_step999.tmp" p2.log && [ ! -e pk/global_step999.tmp ] ||
    fail "p2.log: pk/global_step999.tmp not removed at start-up"
  steps_from p.jsonl 1 >got.txt
  steps_from a.jsonl 1 >want.txt
  cmp -s want.txt got.txt || { fail "stopped + resumed losses differ:"; diff want.txt got.txt | head; }
fi

# ---- formats and the char tokenizer ----
# (the corpus is ASCII: a character is a byte, and the 30 dev documents add
# one end-of-text token each)
lm j.log --data corpus.jsonl --tokenizer char --max-steps 3 --metrics j.jsonl
python3 -c 'import json, math, sys
e = [json.loads(l) for l in open(sys.argv[1])][-1]["eval"]
sys.exit(0 if math.isfinite(e["bits_per_byte"]) and e["tokens"] == e["bytes"] + 30 else 1)' j.jsonl ||
  fail "char tokenizer on JSON lines: $(tail -1 j.jsonl)"
grep -q "tokenizer char (vocab [0-9]*)" j.log || fail "j.log: no char tokenizer line"
lm csv.log --data corpus.csv --column body --max-steps 2
grep -q "^train_lm: train 270 documents" csv.log || fail "csv.log: not 270 training documents"
grep -q "^train_lm: dev after training: loss" csv.log || fail "csv.log: no dev report"

# ---- errors ----
# expect CODE TEXT ARGS...: train_lm (1 process) exits CODE with one line on
# stderr, starting with 'train_lm: ' and containing TEXT. CODE 2: what no
# restart gets past (usage, data, a model that does not fit the flags), 1:
# the rest (a file that cannot be opened).
expect() {
  code=$1
  want=$2
  shift 2
  "$bin/train_lm" --config "$(pwd)/cfg.json" "$@" >err.out 2>err.txt
  rc=$?
  if [ "$rc" -ne "$code" ] || [ "$(wc -l <err.txt)" -ne 1 ] || ! grep -q '^train_lm: ' err.txt ||
    ! grep -qF -- "$want" err.txt; then
    fail "train_lm $*: exit $rc (want $code), stderr: $(cat err.txt)"
  fi
}
printf '{"text": "fine"}\n{"text": "broken\n' >bad.jsonl
python3 -c 'import json; json.dump({"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024,
  "n_embd": 64, "n_layer": 1, "n_head": 2}, open("config.json", "w"))' && mkdir -p bpe && mv config.json bpe/
expect 1 "nope.txt: cannot open" --data nope.txt
expect 2 "reading data: --data bpe: is a folder, not a file" --data bpe
expect 2 "unknown or incomplete option --bogus" --data corpus.txt --bogus
expect 2 "--seq-len 64 exceeds the model's n_positions 32" --data corpus.txt --init model --seq-len 64
expect 2 "BPE vocabulary (vocab_size 50257" --data corpus.txt --init bpe --seq-len 32
mkdir -p noweights && cp model/config.json model/lm_tokenizer.json noweights/
expect 1 "train_lm: loading --init noweights: " --data corpus.txt --init noweights --seq-len 32
expect 2 "bad.jsonl:2: bad JSON" --data bad.jsonl
expect 2 "--init brings the model's own tokenizer" --data corpus.txt --init model --tokenizer char
python3 -c 'import json; c = json.load(open("model/config.json")); c["vocab_size"] = 200
[c.pop(k, None) for k in ("bos_token_id", "eos_token_id")]
json.dump(c, open("small_config.json", "w"))' && mkdir -p small && mv small_config.json small/config.json
expect 2 "loading --init small: no lm_tokenizer.json, and vocab_size 200 is smaller than the byte tokenizer's 257 ids"   --data corpus.txt --init small --seq-len 32
expect 2 "loading --init plain: no lm_tokenizer.json, and --tokenizer char builds its ids"   --data corpus.txt --init plain --tokenizer char --seq-len 32
expect 2 "--format xml: must be text, lines, jsonl or csv" --data corpus.txt --format xml
expect 2 "--prompt: invalid UTF-8 at byte 1" --data corpus.txt --tokenizer char --generate 5 \
  --prompt "a$(printf '\377')"
# through engine-run the job fails too (each rank says why; mpirun adds its own lines)
"$bin/engine-run" --np 2 --config cfg.json train_lm --data nope.txt >np2.log 2>&1 &&
  fail "engine-run with a missing file exited 0"
grep -q "train_lm: reading data: --data nope.txt: cannot open" np2.log || fail "np2.log: $(head -3 np2.log)"
[ "$fails" -eq 0 ] && echo "dev $(sed -n 's/^train_lm: dev after training: //p' a.log); sample: $(cat a_sample.txt)"
finish
