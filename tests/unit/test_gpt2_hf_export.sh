#!/bin/sh
# The engine's GPT-2 export loads in transformers as it is:
#   test_gpt2_hf_export.sh EXPORT_PROGRAM PYTHON CHECK_SCRIPT
# EXPORT_PROGRAM (gpt2_hf_export) writes config.json, model.safetensors and
# the engine's logits on the reference batch into a temporary folder;
# CHECK_SCRIPT (tests/tools/check_gpt2_hf.py) loads it with
# GPT2LMHeadModel.from_pretrained and compares. Exit 77 (skipped) when PYTHON
# is missing or lacks torch / transformers (CI has no Python ML stack); the
# export itself runs and is checked for its files either way.
set -u
export_prog=$1 python=$2 check=$3
dir=$(mktemp -d /tmp/ds_gpt2_export_XXXXXX) || exit 1
trap 'rm -rf "$dir"' EXIT
"$export_prog" "$dir" || exit 1
for f in config.json model.safetensors logits.f32; do
    [ -s "$dir/$f" ] || { echo "FAIL: the export has no $f"; exit 1; }
done
if [ -z "$python" ] || ! [ -x "$python" ]; then
    echo "skipped: no Python with transformers ('$python'; set DS_HF_PYTHON)"
    exit 77
fi
"$python" "$check" "$dir"
