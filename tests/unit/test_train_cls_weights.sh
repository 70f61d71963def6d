#!/usr/bin/env bash
# --class-weight inverse reaches the loss: on skewed data the first step's
# loss differs from the plain run's, and weights 1 everywhere (balanced data)
# give the plain loss exactly.
set -u
bin=$1
data=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '{"train_micro_batch_size_per_gpu": 8, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}' > "$tmp/c.json"
run() { # data, weight mode, metrics file
    OMP_NUM_THREADS=1 "$bin/train_cls" --config "$tmp/c.json" --data "$1" --model mlp --hidden 16 \
        --intermediate 32 --max-seq-len 32 --max-steps 1 --class-weight "$2" --metrics "$3" \
        > "$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
    sed -n 's/.*"loss": \([0-9.e+-]*\),.*/\1/p' "$3" | head -1
}
fails=0
plain=$(run "$data" none "$tmp/a.jsonl")
weighted=$(run "$data" inverse "$tmp/b.jsonl")
if [ -z "$plain" ] || [ "$plain" = "$weighted" ]; then
    echo "FAIL skewed data: plain loss '$plain', weighted '$weighted' (weights not applied?)"
    fails=$((fails + 1))
fi
# balanced: every class equally frequent, so every weight is exactly 1
{ echo "label,text"; for i in $(seq 1 40); do echo "a,好好好$i"; echo "b,坏坏坏$i"; done; } > "$tmp/bal.csv"
p2=$(run "$tmp/bal.csv" none "$tmp/c.jsonl")
w2=$(run "$tmp/bal.csv" inverse "$tmp/d.jsonl")
if [ -z "$p2" ] || [ "$p2" != "$w2" ]; then
    echo "FAIL balanced data: plain loss '$p2', weighted '$w2' should be equal"
    fails=$((fails + 1))
fi
echo "plain $plain weighted $weighted; balanced plain $p2 weighted $w2"
[ "$fails" -eq 0 ] && echo "test_train_cls_weights: ok" || echo "test_train_cls_weights: FAILED"
exit "$fails"
