#!/usr/bin/env bash
# tests/fuzz/make_corpus.sh: (re)write the committed seed corpora of the
# fuzz harnesses, tests/fuzz/corpus/<harness>/, from the repository's test
# inputs (tests/data, configs/) and a few lines written here for what those
# lack; the binary seeds (safetensors, meta.json, latest, shard files) come
# from fuzz_make_seeds, which writes them with the library's own writers.
#
#   tests/fuzz/make_corpus.sh BUILD_FUZZ_DIR
#
# Every seed starts with the flags byte its harness reads first (see each
# fuzz_*.c), except fuzz_config's, whose input is the file alone.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${1:?usage: make_corpus.sh BUILD_FUZZ_DIR}
out=tests/fuzz/corpus
rm -rf "$out"
mkdir -p "$out"/{config,text,lm_docs,vocab,wordpiece,hf_config,safetensors,ckpt_meta,ckpt_file}

# seed HARNESS NAME "BYTES"  (body on stdin): BYTES (hex: the flags byte,
# none for fuzz_config), then the body
seed() {
  local f="$out/$1/$2" b
  : > "$f"
  for b in $3; do printf "\\x$b" >> "$f"; done
  cat >> "$f"
}

# ---- config: the shipped configs and the rules they do not exercise
for f in configs/*.json; do seed config "$(basename "$f" .json)" "" < "$f"; done
seed config auto "" <<'J'
{"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
 "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
 "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
   "weight_decay": "auto"}},
 "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto",
   "warmup_max_lr": "auto", "warmup_num_steps": "auto", "total_num_steps": "auto"}},
 "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"},
 "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto",
   "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto"}}
J
seed config cosine_offload_engine "" <<'J'
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 3,
 "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 100,
   "warmup_min_ratio": 0.1, "cos_min_ratio": 0.01, "warmup_num_steps": 10, "warmup_type": "linear"}},
 "optimizer": {"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9, "nesterov": true}},
 "communication_data_type": "bf16", "bfloat16": {"enabled": true},
 "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp/x",
   "ratio": 0.5}, "offload_param": {"device": "cpu", "pin_memory": true}},
 "activation_checkpointing": {"partition_activations": false, "number_checkpoints": 2},
 "checkpoint": {"tag_validation": "Fail"},
 "zero_engine": {"backend": "cpu", "comm_timeout_s": 20, "num_threads": 2,
   "max_consecutive_skips": 5, "save_on_signal": "SIGUSR1", "preempt_deadline_s": 10},
 "unknown_top_level": 1}
J
seed config fp16_static "" <<'J'
{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 8,
 "fp16": {"enabled": true, "loss_scale": 128, "initial_scale_power": 12, "hysteresis": 1,
   "loss_scale_window": 500, "min_loss_scale": 0.5, "consecutive_hysteresis": true},
 "gradient_clipping": 1.0, "steps_per_print": 5e2, "wall_clock_breakdown": false}
J

# ---- text: every test file, read as AUTO, and some under the options
for f in tests/data/text/*; do seed text "auto_$(basename "$f")" 00 < "$f"; done
seed text csv_filtered_mapped 1c < tests/data/text/quoted.csv  # AUTO, conflicts, keep, map
seed text jsonl_classes 22 < tests/data/text/rows.jsonl          # JSONL, classes given
seed text json_list 03 < tests/data/text/pairs.json
seed text conflicts_dropped 04 < tests/data/text/conflicts.csv
printf 'x\ty\nhello world\tpos\n"tab\there"\tneg\n' | seed text tsv_xy 40

# ---- lm_docs: each format, AUTO by suffix, a named column
printf 'First document,\nits second line.\r\n\n  \nSecond\tdocument.\n\n\n\xe4\xb8\xad\xe6\x96\x87\n' |
  seed lm_docs text 00
printf 'one\ntwo\r\n\n three \n' | seed lm_docs lines 01
seed lm_docs jsonl 02 < tests/data/text/rows.jsonl
seed lm_docs csv 03 < tests/data/text/quoted.csv
seed lm_docs auto_jsonl 06 < tests/data/text/rows.jsonl
printf '{"body": "a document"}\n{"body": ""}\n\n{"body": "\\u00e9t\\u00e9", "text": 1}\n' |
  seed lm_docs jsonl_body 0a
printf 'id,body\n1,"a ""quoted""\ndocument"\n2,\n3,plain\n' | seed lm_docs csv_body 0b

# ---- vocab: a char vocab (escapes, specials) and lm_tokenizer.json
printf '[PAD]\n[UNK]\n[CLS]\n[SEP]\n\xe7\x9a\x84\n\xe5\xa5\xbd\na\n\\u000A\n\\u0009\n[MASK]\n' |
  seed vocab char_vocab 00
printf '{"kind": "char", "vocab_size": 6, "eot_id": 3, "eot_token": "[SEP]"}\n' |
  seed vocab lm_char 01
printf '{"kind": "byte", "vocab_size": 257, "eot_id": 256, "eot_token": "<|endoftext|>"}\n' |
  seed vocab lm_byte 01

# ---- wordpiece: a vocab cut from MiniLM's, tokenizer_config.json, texts
{ head -n 110 tests/data/wordpiece/minilm_vocab.txt
  sed -n '1996,2100p' tests/data/wordpiece/minilm_vocab.txt
  grep -m 40 '^##' tests/data/wordpiece/minilm_vocab.txt; } | seed wordpiece minilm_cut 24
head -n 60 tests/data/wordpiece/zh_vocab.txt | seed wordpiece zh_cut 20
printf '{"do_lower_case": false, "strip_accents": null, "tokenize_chinese_chars": true,\n "model_max_length": 512, "tokenizer_class": "BertTokenizer"}\n' |
  seed wordpiece tokenizer_config 01
# the fixture's texts (tests/data/wordpiece/README.md), MiniLM lower-cased and
# the Chinese vocab
python3 - "$out/wordpiece" <<'P'
import json, sys
out = sys.argv[1]
lines = open("tests/data/wordpiece/fixture.jsonl", encoding="utf-8").read().split("\n")[1:]
texts = [json.loads(l)["text"] for l in lines if l.strip() and "text" in json.loads(l)]
for i, t in enumerate(texts[:40]):
    flags = 0x26 if i % 2 == 0 else 0x23  # mode 2 lower+chinese / mode 3
    with open(f"{out}/fixture_{i:02d}", "wb") as f:
        f.write(bytes([flags]) + t.encode("utf-8"))
P

# ---- hf_config: the reference models' configs and a saved classifier's
seed hf_config bert_tiny 00 < tests/data/bert_ref_tiny_hf/config.json
seed hf_config bert_tiny_3 01 < tests/data/bert_ref_tiny_hf/config.json
seed hf_config gpt2_tiny 02 < tests/data/gpt2_ref_tiny_hf/config.json
seed hf_config saved_bert 03 <<'J'
{"architectures": ["BertForSequenceClassification"], "model_type": "bert", "vocab_size": 100,
 "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32,
 "max_position_embeddings": 32, "type_vocab_size": 2, "hidden_dropout_prob": 0.1,
 "id2label": {"0": "neg", "1": "pos"}, "label2id": {"neg": 0, "pos": 1},
 "zero_engine": {"tokenizer": "wordpiece", "do_lower_case": true, "max_seq_len": 16}}
J
seed hf_config saved_mlp 03 <<'J'
{"model_type": "zero_engine_mlp", "vocab_size": 50, "id2label": {"0": "a", "1": "b", "2": "c"},
 "zero_engine": {"embed_dim": 8, "hidden_dim": 16, "n_hidden": 2, "tokenizer": "char",
   "do_lower_case": false, "max_seq_len": 24}}
J

# ---- safetensors: the index (the files come from fuzz_make_seeds)
seed safetensors index 02 <<'J'
{"metadata": {"total_size": 1234},
 "weight_map": {"a.weight": "model-00001-of-00002.safetensors",
   "a.bias": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
J

# ---- json.dict: libFuzzer's dictionary for the JSON readers (run.sh passes
# it with -dict): the key and value names the readers look for, taken from
# their sources, JSON's tokens, and numbers at the edges of the integer and
# real ranges, which random mutation of digits rarely builds
{
  echo '# written by tests/fuzz/make_corpus.sh'
  for t in '{' '}' '[' ']' ',' ':' '\"' 'null' 'true' 'false' '\"auto\"' '\\u0000' '\\ud800' \
           '0' '-1' '1e308' '-1e308' '1e-320' '0.5' '2147483647' '2147483648' '-2147483649' \
           '4294967296' '9223372036854775807' '-9223372036854775808' '9223372036854775808' \
           '18446744073709551615' '1e19' '0x7fffffffffffffff' '0xffffffffffffffff'; do
    printf '"%s"\n' "$t"
  done
  grep -ho '"[A-Za-z_][A-Za-z0-9_.]\{1,40\}"' engine/core/config_sections.c engine/core/config.c \
    engine/io/ckpt_meta.c engine/io/safetensors.c hf/hf_config.c hf/saved_model.c \
    text/wordpiece.c text/lm_tokenizer.c text/text.c | sort -u | sed 's/^"\(.*\)"$/"\\"\1\\""/'
} > tests/fuzz/json.dict

# ---- binary seeds: safetensors, meta.json, latest, shard files
"$build/fuzz/fuzz_make_seeds" "$out"
echo "make_corpus: $(find "$out" -type f | wc -l) seeds, $(du -sh "$out" | cut -f1)"
