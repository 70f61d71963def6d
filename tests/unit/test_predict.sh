#!/bin/sh
# Tests of tools/predict, one case per ctest test.
#
#   test_predict.sh CASE PREDICT TRAIN_CLS GEN_SENTENCES SRC_DIR FIXTURE_DIR WORK_DIR
#
# The setup_* cases (CTest fixtures) train tiny models for a few steps with
# train_cls --save-dir into FIXTURE_DIR: a char BERT, a char MLP, a
# WordPiece BERT fine-tuned with --init from the committed tiny Hugging Face
# BERT (tests/data/bert_ref_tiny_hf, given a small vocab.txt here), and a
# char BERT that also saves ZeRO checkpoints (--save-steps). The other cases
# run predict on those directories in WORK_DIR; zero_to_fp32 is taken from
# PREDICT's directory. Prints every mismatch and exits 1 if there was any.
set -u
if [ $# -ne 7 ]; then
  echo "usage: $0 CASE PREDICT TRAIN_CLS GEN_SENTENCES SRC_DIR FIXTURE_DIR WORK_DIR" >&2
  exit 2
fi
tcase=$1
pr=$(readlink -f "$2")
tc=$(readlink -f "$3")
gen=$(readlink -f "$4")
z2f=$(dirname "$pr")/zero_to_fp32
src=$(readlink -f "$5")
mkdir -p "$6" || exit 1
fix=$(readlink -f "$6")
rm -rf "$7" && mkdir -p "$7" && cd "$7" || exit 1

# predict is one process: a launcher environment left by whatever runs ctest
# must not make it look for other ranks.
unset OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_LOCAL_SIZE PMI_SIZE PMI_RANK \
  SLURM_PROCID SLURM_NTASKS RANK WORLD_SIZE LOCAL_RANK
# One thread: the same OpenBLAS code paths in every run of a case (see batch).
export OMP_NUM_THREADS=1

fails=0
fail() {
  echo "FAIL [$tcase]: $*"
  fails=$((fails + 1))
}
finish() {
  [ "$fails" -eq 0 ] && echo "PASS [$tcase]"
  [ "$fails" -eq 0 ]
  exit $?
}

# The six classes of gen_sentences in the engine's class order (names sorted
# by their bytes, text/text.h).
classes="anger disgust fear happiness sadness surprise"
texts_file=$fix/texts.txt

# ---- fixtures ---------------------------------------------------------------
# A config for a few quick steps: constant lr (no scheduler section, and
# --lr-scheduler-type constant instead of the trainer's default linear decay;
# no warmup) large enough that
# 60 steps move the tiny models away from their initial, nearly uniform,
# outputs, so different texts get clearly different logits (case batch:
# measured 0.03 apart, where 30 steps at 3e-3 left them 1e-3 apart).
write_config() {
  cat >"$1" <<'EOF'
{"train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": 1,
 "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.01}},
 "zero_optimization": {"stage": 0}}
EOF
}

make_data() {
  [ -f "$fix/data.csv" ] && return 0
  "$gen" --rows 600 --seed 7 --out "$fix/data.csv" >/dev/null || return 1
  # 40 texts of the data (without the CSV quoting: the quoted rows are left
  # out) for the prediction cases.
  sed -n '2,200p' "$fix/data.csv" | grep -v '"' | head -40 | cut -d, -f2- >"$texts_file"
}

train() { # train NAME ARGS...: train_cls into $fix/NAME, log in $fix/NAME.log
  name=$1
  shift
  write_config "$fix/cfg.json"
  rm -rf "${fix:?}/$name"
  # a later --data replaces this one (getopt: the last wins)
  if ! "$tc" --config "$fix/cfg.json" --data "$fix/data.csv" --max-steps 60 --seed 3 \
    --lr-scheduler-type constant \
    --save-dir "$fix/$name" "$@" >"$fix/$name.log" 2>&1; then
    fail "train_cls $name failed:"
    cat "$fix/$name.log"
  fi
}

# ---- helpers ------------------------------------------------------------------
# run_pr ARGS... [< input]: predict's stdout in out.txt, stderr in err.txt, rc.
run_pr() {
  "$pr" "$@" >out.txt 2>err.txt
  rc=$?
}

# check_lines FILE N: FILE has N lines, each "LABEL<TAB>c=p ...": the names
# are $classes in order, LABEL is the class of the largest
# probability, and the probabilities sum to 1. Each is printed with 6
# decimals, so each is off by at most 5e-7 and the sum by at most
# 6 * 5e-7 = 3e-6 (the softmax itself is computed in double: its own error is
# about 1e-16).
check_lines() {
  n=$(wc -l <"$1")
  [ "$n" -eq "$2" ] || fail "$1: $n lines, expected $2"
  awk -F'\t' -v classes="$classes" '
    BEGIN { nc = split(classes, want, " ") }
    {
      k = split($2, kv, " ")
      if (k != nc) { print "line " NR ": " k " classes: " $0; bad++; next }
      sum = 0; best = ""; bp = -1
      for (i = 1; i <= k; i++) {
        split(kv[i], f, "=")
        if (f[1] != want[i]) { print "line " NR ": class " i " is " f[1] ", expected " want[i]; bad++ }
        p = f[2] + 0
        if (p < 0 || p > 1) { print "line " NR ": probability " p " outside [0, 1]"; bad++ }
        sum += p
        if (p > bp) { bp = p; best = f[1] }
      }
      if (sum < 1 - 3e-6 || sum > 1 + 3e-6) { printf "line %d: probabilities sum to %.9f\n", NR, sum; bad++ }
      # ties in the printed 6 decimals may hide which class is larger
      if ($1 != best) {
        tie = 0
        for (i = 1; i <= k; i++) { split(kv[i], f, "="); if (f[1] == $1 && f[2] + 0 == bp) tie = 1 }
        if (!tie) { print "line " NR ": label " $1 " is not the most probable class " best; bad++ }
      }
    }
    END { exit bad > 0 }' "$1" || fail "$1: malformed output (above)"
}

# expect_error WANT ARGS... [< input]: predict exits 1 with exactly one line
# on stderr that starts with "predict: " and contains WANT.
expect_error() {
  want=$1
  shift
  run_pr "$@"
  [ "$rc" -eq 1 ] || fail "predict $*: exit $rc, expected 1"
  n=$(wc -l <err.txt)
  [ "$n" -eq 1 ] || fail "predict $*: $n lines on stderr, expected 1: $(cat err.txt)"
  grep -q "^predict: .*$want" err.txt || fail "predict $*: stderr lacks '$want': $(cat err.txt)"
  [ -s out.txt ] && fail "predict $*: printed results before failing: $(cat out.txt)"
}

# max_logit_diff A B: largest |logit difference| between two --logits outputs
# of the same texts, and whether any label differs where the top two logits
# are more than 2 * TOL apart (printed as "MAXDIFF LABEL_MISMATCHES").
max_logit_diff() {
  paste "$1" "$2" | awk -F'\t' -v tol="$3" '
    function logits(s, out,   k, kv, i, f) { k = split(s, kv, " ")
      for (i = 1; i <= k; i++) { split(kv[i], f, "="); out[i] = f[2] + 0 } return k }
    {
      k = logits($3, a); logits($6, b)
      for (i = 1; i <= k; i++) { d = a[i] - b[i]; if (d < 0) d = -d; if (d > m) m = d }
      if ($1 != $4) {
        t1 = -1e30; t2 = -1e30
        for (i = 1; i <= k; i++) { if (a[i] > t1) { t2 = t1; t1 = a[i] } else if (a[i] > t2) t2 = a[i] }
        if (t1 - t2 > 2 * tol) mism++
      }
    }
    END { printf "%.3g %d\n", m + 0, mism + 0 }'
}

# ---- cases --------------------------------------------------------------------
case $tcase in
setup_bert)
  make_data || fail "gen_sentences failed"
  train bert --model bert --layers 2 --hidden 32 --heads 2 --intermediate 64 --max-seq-len 32
  ;;
setup_mlp)
  make_data || fail "gen_sentences failed"
  train mlp --model mlp --layers 1 --hidden 32 --intermediate 32 --max-seq-len 32
  ;;
setup_wordpiece)
  make_data || fail "gen_sentences failed"
  # The committed tiny BERT (vocab_size 99, 32 positions) as a Hugging Face
  # directory with a vocab.txt of 99 entries: specials, two English words and
  # frequent characters of the generated sentences (the rest become [UNK]).
  hf=$fix/tiny_hf
  rm -rf "$hf" && mkdir -p "$hf"
  cp "$src/tests/data/bert_ref_tiny_hf/config.json" "$src/tests/data/bert_ref_tiny_hf/model.safetensors" "$hf/"
  {
    printf '%s\n' '[PAD]' '[UNK]' '[CLS]' '[SEP]' '[MASK]' hello world cafe café
    printf '%s\n' 了 ， 。 的 一 天 说 后 上 友 在 是 不 我 家 老 朋 们 越 很 真 心 开 难 过 \
      害 怕 气 死 讨 厌 恶 惊 喜 哭 笑 好 坏 烦 累 怒 暴 躁 抓 狂 高 兴 伤 吓 人 居 然 竟 \
      他 她 今 昨 明 早 晚 饭 吃 地 铁 医 院 排 队 咖 啡 凉 爸 妈 班 加 深 夜 球 冠 军 相 当 \
      中 午 坐 久 随 便 点 支 持 感 谢 爱 恨
  } | head -99 >"$hf/vocab.txt"
  [ "$(wc -l <"$hf/vocab.txt")" -eq 99 ] || fail "vocab.txt has $(wc -l <"$hf/vocab.txt") lines, expected 99"
  # a tokenizer that lower-cases but keeps accents: café is its own token
  printf '{"do_lower_case": true, "strip_accents": false}\n' >"$hf/tokenizer_config.json"
  # Its classifier has 3 outputs: train on 3 classes so it loads as is.
  "$gen" --rows 300 --seed 8 --classes 3 --out "$fix/data3.csv" >/dev/null || fail "gen_sentences failed"
  train wordpiece --init "$hf" --max-seq-len 32 --data "$fix/data3.csv"
  ;;
setup_ckpt)
  make_data || fail "gen_sentences failed"
  # checkpoints at steps 30 and 60 (the last one = the final weights)
  train ckpt --model bert --layers 2 --hidden 32 --heads 2 --intermediate 64 --max-seq-len 32 \
    --save-steps 30
  ;;
checkpoint)
  # The recipe predict --help gives for a ZeRO checkpoint: zero_to_fp32 into
  # a folder, plus config.json and vocab.txt of the run. The last checkpoint
  # (step 60) holds the final weights, so the output is byte for byte that of
  # the run's own --save-dir: same weights, same batches, same arithmetic.
  run_pr --model "$fix/ckpt" --logits <"$texts_file"
  [ "$rc" -eq 0 ] || fail "the run's directory: exit $rc: $(cat err.txt)"
  cp out.txt saved.txt
  for form in single sharded; do
    if [ $form = single ]; then
      "$z2f" "$fix/ckpt/checkpoints" "$form" >z2f.log 2>&1 || fail "zero_to_fp32: $(cat z2f.log)"
    else
      "$z2f" "$fix/ckpt/checkpoints" "$form" --max-shard-size 20000 >z2f.log 2>&1 ||
        fail "zero_to_fp32 --max-shard-size: $(cat z2f.log)"
      [ -f $form/model.safetensors.index.json ] || fail "zero_to_fp32 wrote no sharded index"
    fi
    cp "$fix/ckpt/config.json" "$fix/ckpt/vocab.txt" $form/
    run_pr --model $form --logits <"$texts_file"
    [ "$rc" -eq 0 ] || fail "$form: exit $rc: $(cat err.txt)"
    cmp -s out.txt saved.txt || fail "$form: output differs from the run's own directory"
  done
  ;;
argv)
  # A few texts on the command line, an empty one among them.
  run_pr --model "$fix/bert" "今天真开心" "气死我了，真讨厌" "" "明天要考试，好害怕"
  [ "$rc" -eq 0 ] || fail "exit $rc: $(cat err.txt)"
  [ -s err.txt ] && fail "stderr not empty: $(cat err.txt)"
  check_lines out.txt 4
  ;;
stdin)
  # The same texts on stdin (one with CRLF) give the same bytes as on the
  # command line: the same batch of the same rows is the same arithmetic.
  run_pr --model "$fix/bert" "今天真开心" "气死我了，真讨厌" "" "明天要考试，好害怕"
  cp out.txt argv.txt
  printf '今天真开心\n气死我了，真讨厌\r\n\n明天要考试，好害怕' >in.txt
  run_pr --model "$fix/bert" <in.txt
  [ "$rc" -eq 0 ] || fail "exit $rc: $(cat err.txt)"
  check_lines out.txt 4
  cmp -s out.txt argv.txt || fail "stdin and argv outputs differ: $(diff argv.txt out.txt)"
  run_pr --model "$fix/bert" </dev/null
  [ "$rc" -eq 0 ] && [ ! -s out.txt ] || fail "empty stdin: exit $rc, output $(cat out.txt)"
  ;;
batch)
  # The 40 texts in batches of 16 (three batches, the last one partial) and
  # one at a time.
  run_pr --model "$fix/bert" --logits --batch 16 <"$texts_file"
  [ "$rc" -eq 0 ] || fail "batch 16: exit $rc: $(cat err.txt)"
  check_lines out.txt 40
  cp out.txt b16.txt
  run_pr --model "$fix/bert" --logits --batch 16 <"$texts_file"
  cmp -s out.txt b16.txt || fail "two runs of the same batches differ"
  run_pr --model "$fix/bert" --logits --batch 1 <"$texts_file"
  [ "$rc" -eq 0 ] || fail "batch 1: exit $rc: $(cat err.txt)"
  cp out.txt b1.txt
  # Batched and one-at-a-time logits are NOT bit-identical, although every
  # row is padded to the same width and rows never mix: OpenBLAS's sgemm
  # gives a row a slightly different rounding depending on where it sits
  # in the matrix (its edge and blocking kernels; a plain cblas_sgemm with 5
  # equal rows returns 2 distinct results). The differences measured are a
  # few float32 ulps per product, at most 6e-8 on logits of size 0.2 to 1
  # through these 2-layer models. TOL = 1e-5 is 100x that, and 100x smaller than the
  # differences between the logits of distinct texts, checked below, so a
  # row that saw another row's tokens or mask would fail.
  tol=1e-5
  set -- $(max_logit_diff b16.txt b1.txt $tol)
  awk -v d="$1" -v t=$tol 'BEGIN { exit !(d <= t) }' ||
    fail "batched vs one-at-a-time logits differ by $1 > $tol"
  [ "$2" -eq 0 ] || fail "$2 labels differ between batched and one-at-a-time"
  # distinct texts: rows 1 and 2 (different sentences) differ by far more
  head -1 b1.txt >r1.txt
  sed -n 2p b1.txt >r2.txt
  set -- $(max_logit_diff r1.txt r2.txt $tol)
  awk -v d="$1" -v t=$tol 'BEGIN { exit !(d >= 100 * t) }' ||
    fail "two different texts' logits differ by only $1: the model is too flat for this check"
  ;;
weights_file)
  # PATH as the .safetensors file (config.json beside it) gives the same
  # output as PATH as the directory; --vocab replaces vocab.txt.
  run_pr --model "$fix/bert" --logits "今天真开心" "好害怕"
  cp out.txt dir.txt
  run_pr --model "$fix/bert/model.safetensors" --logits "今天真开心" "好害怕"
  [ "$rc" -eq 0 ] || fail "file form: exit $rc: $(cat err.txt)"
  cmp -s out.txt dir.txt || fail "file form differs from directory form"
  mkdir -p elsewhere
  cp "$fix/bert/config.json" "$fix/bert/model.safetensors" elsewhere/
  expect_error "elsewhere/vocab.txt" --model elsewhere/model.safetensors "x"
  run_pr --model elsewhere/model.safetensors --vocab "$fix/bert/vocab.txt" --logits "今天真开心" "好害怕"
  [ "$rc" -eq 0 ] || fail "--vocab: exit $rc: $(cat err.txt)"
  cmp -s out.txt dir.txt || fail "--vocab output differs from the directory's"
  ;;
max_seq_len)
  # A shorter width truncates: a long text's result changes, a short one is
  # still classified; beyond max_position_embeddings is an error.
  long="今天真开心今天真开心今天真开心今天真开心今天真开心今天真开心今天真开心"
  run_pr --model "$fix/bert" --max-seq-len 8 "$long" "开心"
  [ "$rc" -eq 0 ] || fail "--max-seq-len 8: exit $rc: $(cat err.txt)"
  check_lines out.txt 2
  expect_error "max_position_embeddings 512" --model "$fix/bert" --max-seq-len 513 "x"
  ;;
mlp)
  run_pr --model "$fix/mlp" --batch 3 <"$texts_file"
  [ "$rc" -eq 0 ] || fail "exit $rc: $(cat err.txt)"
  check_lines out.txt 40
  ;;
wordpiece)
  classes="anger happiness sadness"
  # config.json says wordpiece with lower-casing: the same words in capitals
  # give the same tokens, hence the same bits (one text per run).
  run_pr --model "$fix/wordpiece" --logits "Hello world 真开心"
  [ "$rc" -eq 0 ] || fail "exit $rc: $(cat err.txt)"
  check_lines out.txt 1
  cp out.txt lower.txt
  run_pr --model "$fix/wordpiece" --logits "HELLO World 真开心"
  cmp -s out.txt lower.txt || fail "upper case differs from lower case: $(cat lower.txt out.txt)"
  grep -q '"tokenizer": "wordpiece"' "$fix/wordpiece/config.json" ||
    fail "the fixture did not save a wordpiece model"
  # the --init tokenizer keeps accents (strip_accents false): predict must
  # too, as training did (it rebuilt the tokenizer with BertTokenizer's
  # defaults, café read as cafe), and the saved folder says so to
  # transformers (tokenizer_config.json)
  run_pr --model "$fix/wordpiece" --logits "café"
  cp out.txt accent.txt
  run_pr --model "$fix/wordpiece" --logits "cafe"
  cmp -s out.txt accent.txt && fail "café and cafe give the same logits: the accent was stripped"
  grep -q '"strip_accents": false' "$fix/wordpiece/tokenizer_config.json" 2>/dev/null &&
    grep -q '"do_lower_case": true' "$fix/wordpiece/tokenizer_config.json" ||
    fail "tokenizer_config.json: $(cat "$fix/wordpiece/tokenizer_config.json" 2>&1)"
  ;;
errors)
  # Each bad input: exit 1, one line naming the file (or the input line).
  expect_error "$PWD/nope: No such file or directory" --model "$PWD/nope" "x"
  mkdir -p noconfig
  expect_error "noconfig/config.json" --model noconfig "x"
  mkdir -p badjson && cp "$fix/bert/model.safetensors" "$fix/bert/vocab.txt" badjson/
  printf '{"model_type": "bert",' >badjson/config.json
  expect_error "badjson/config.json" --model badjson "x"
  mkdir -p nokey && cp "$fix/bert/model.safetensors" "$fix/bert/vocab.txt" nokey/
  sed 's/"hidden_size"/"hidden_sizes"/' "$fix/bert/config.json" >nokey/config.json
  expect_error "nokey/config.json: hidden_size" --model nokey "x"
  mkdir -p noweights && cp "$fix/bert/config.json" "$fix/bert/vocab.txt" noweights/
  expect_error "noweights" --model noweights "x"
  mkdir -p truncated && cp "$fix/bert/config.json" "$fix/bert/vocab.txt" truncated/
  head -c 1000 "$fix/bert/model.safetensors" >truncated/model.safetensors
  expect_error "truncated/model.safetensors" --model truncated "x"
  # the MLP's weights under the BERT's config: nothing has the right name
  mkdir -p wrongweights && cp "$fix/bert/config.json" "$fix/bert/vocab.txt" wrongweights/
  cp "$fix/mlp/model.safetensors" wrongweights/
  expect_error "wrongweights/model.safetensors" --model wrongweights "x"
  # issue 15: an integer beyond int was narrowed first (2^32 + 16 read as 16)
  mkdir -p wideint && cp "$fix/bert/model.safetensors" "$fix/bert/vocab.txt" wideint/
  sed 's/"max_seq_len": [0-9]*/"max_seq_len": 4294967312/' "$fix/bert/config.json" >wideint/config.json
  expect_error "wideint/config.json: max_seq_len: 4294967312 does not fit an int" --model wideint "x"
  # a vocabulary larger than the model's embedding table
  mkdir -p bigvocab && cp "$fix/bert/config.json" "$fix/bert/model.safetensors" bigvocab/
  { cat "$fix/bert/vocab.txt"; printf '%s\n' 龘 龖 齉 靐; } >bigvocab/vocab.txt
  expect_error "bigvocab/vocab.txt: .* tokens, but the model's vocab_size" --model bigvocab "x"
  printf 'fine\n\377\376\n' >badutf8.txt
  expect_error "stdin line 2: invalid UTF-8" --model "$fix/bert" <badutf8.txt
  expect_error "argument 2: invalid UTF-8" --model "$fix/bert" "ok" "$(printf '\377')"
  ;;
usage)
  run_pr "今天"
  [ "$rc" -eq 2 ] || fail "no --model: exit $rc, expected 2"
  grep -q "^predict: --model PATH is required" err.txt || fail "no --model: $(cat err.txt)"
  run_pr --model "$fix/bert" --batch 0 x
  [ "$rc" -eq 2 ] || fail "--batch 0: exit $rc, expected 2"
  run_pr --model "$fix/bert" --bogus x
  [ "$rc" -eq 2 ] || fail "--bogus: exit $rc, expected 2"
  run_pr --help
  [ "$rc" -eq 0 ] && grep -q "^usage: predict --model PATH" out.txt || fail "--help: exit $rc"
  ;;
*)
  echo "unknown case $tcase" >&2
  exit 2
  ;;
esac
finish
