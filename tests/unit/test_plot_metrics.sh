#!/usr/bin/env bash
# tools/plot_metrics: a 2-rank train_cls run with --eval-steps draws into an
# SVG that a real renderer (librsvg's rsvg-convert) turns into a 960 x 820
# PNG that is not blank; the SVG holds every panel's title, one bar per rank
# and the formula's; a file of another trainer (train_lm's lines, no memory)
# still draws, its empty panels saying why; bad input is one line on
# stderr and exit 1 (2 for the command line). Skips (77) where rsvg-convert
# is missing (Debian: librsvg2-bin, in tools/deps.sh), after the checks that
# need no renderer.
#
#   test_plot_metrics.sh BINDIR CSV "MPIRUN FLAGS"
set -u
. "$(dirname "$0")/test_util.sh"
need_args 3 "BINDIR CSV \"MPIRUN FLAGS\"" $#
bin=$(readlink -f "$1")
data=$(readlink -f "$2")
mpi=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
export OMP_NUM_THREADS=1

printf '{"train_micro_batch_size_per_gpu": 4, "steps_per_print": 1000,
  "zero_optimization": {"stage": 2}, "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}}}' > c.json
# shellcheck disable=SC2086
mpirun $mpi -np 2 "$bin/train_cls" --config c.json --data "$data" --model mlp --hidden 16 \
    --intermediate 32 --max-seq-len 32 --max-steps 30 --eval-steps 10 --metrics m.jsonl > log 2>&1 ||
    { cat log; fail "train_cls exited $?"; }
"$bin/plot_metrics" m.jsonl plot.svg --title "train_cls, 2 ranks, ZeRO stage 2" 2> err ||
    fail "plot_metrics exited $?: $(cat err)"
for want in "training loss" "learning rate" "gradient norm" "dev metrics" "dev loss" \
    "memory per rank" "rank 0" "rank 1" "ZeRO formula" "macro_f1" "EMA 0.9"; do
    grep -q "$want" plot.svg || fail "plot.svg lacks \"$want\""
done
# train_lm's kind of file: steps without memory, an initial and a final eval
printf '%s\n' '{"initial_eval": {"loss": 5.5, "perplexity": 244.7}}' \
    '{"step": 1, "epoch": 0, "loss": 5.4, "lr": 1e-2, "grad_norm": 3.2, "tokens_per_s": 900.0}' \
    '{"step": 2, "epoch": 0, "loss": null, "lr": 1e-2, "grad_norm": null, "nonfinite": ["loss", "grad_norm"]}' \
    '{"step": 3, "epoch": 0, "loss": 4.9, "lr": 1e-2, "grad_norm": 2.5}' \
    '{"eval": {"loss": 4.8, "perplexity": 121.5, "bits_per_byte": 6.9}}' > lm.jsonl
"$bin/plot_metrics" lm.jsonl lm.svg 2> err || fail "plot_metrics lm.jsonl exited $?: $(cat err)"
grep -q "no memory figures" lm.svg || fail "lm.svg: the empty memory panel does not say why"
grep -q "no dev metrics" lm.svg || fail "lm.svg: the empty dev panel does not say why"
# a run that went back (--retries, or --resume after a crash) logs steps
# again: the later lines replace the earlier ones, one point per step
printf '%s\n' '{"step": 1, "loss": 5.4}' '{"step": 2, "loss": 5.0}' '{"step": 3, "loss": 4.9}' \
    '{"retry": {"failed_step": 4, "from_step": 2}}' '{"step": 3, "loss": 4.7}' > back.jsonl
"$bin/plot_metrics" back.jsonl back.svg 2> err || fail "plot_metrics back.jsonl exited $?: $(cat err)"
pts=$(grep -o '<polyline[^>]*stroke="#9ecae1"[^>]*points="[^"]*"' back.svg | head -1 | sed 's/.*points="//; s/"$//' | wc -w)
[ "$pts" -eq 3 ] || fail "back.svg: the loss has $pts points, want 3 (steps 1, 2 and the later 3)"
# --resume from step 3 into the same file: the resumed run evaluates step 3
# again before its first step line; the dev curve is 3, 6, 9 once (the old
# 6 and 9 stayed, and it went 3, 6, 9, 3, 6, 9)
{
  for s in 1 2 3 4 5 6 7 8 9; do
    printf '{"step": %d, "loss": 1.%d}\n' $s $s
    [ $((s % 3)) -eq 0 ] && printf '{"eval_step": %d, "dev": {"loss": 0.%d, "accuracy": 0.5}}\n' $s $s
  done
  printf '{"eval_step": 3, "dev": {"loss": 0.3, "accuracy": 0.5}}\n'
  for s in 4 5 6 7 8 9; do
    printf '{"step": %d, "loss": 1.%d}\n' $s $s
    [ $((s % 3)) -eq 0 ] && printf '{"eval_step": %d, "dev": {"loss": 0.%d, "accuracy": 0.5}}\n' $s $s
  done
} > resumed.jsonl
"$bin/plot_metrics" resumed.jsonl resumed.svg 2> err || fail "plot_metrics resumed.jsonl exited $?: $(cat err)"
pts=$(grep -o '<polyline[^>]*stroke="#9467bd"[^>]*points="[^"]*"' resumed.svg | head -1 | sed 's/.*points="//; s/"$//' | wc -w)
[ "$pts" -eq 3 ] || fail "resumed.svg: the dev loss has $pts points, want 3 (steps 3, 6, 9)"

bad() { # bad RC WANT ARGS...
    rc_want=$1 want=$2
    shift 2
    "$bin/plot_metrics" "$@" > out 2> err
    rc=$?
    [ $rc -eq "$rc_want" ] || fail "plot_metrics $*: exit $rc, $rc_want expected"
    [ "$(wc -l < err)" -eq 1 ] && grep -q -- "$want" err || fail "plot_metrics $*: stderr '$(cat err)', want '$want'"
}
printf '{"step": 1, "loss": 1}\nnot json\n' > broken.jsonl
bad 1 "broken.jsonl line 2: not a JSON object" broken.jsonl x.svg
bad 1 "cannot open nope.jsonl" nope.jsonl x.svg
bad 1 "cannot write /nonexistent/x.svg" m.jsonl /nonexistent/x.svg
bad 2 "give METRICS.jsonl and OUT.svg" m.jsonl
bad 2 "unknown option --width" m.jsonl x.svg --width 3

if [ $fails -eq 0 ] && ! command -v rsvg-convert > /dev/null; then
    echo "test_plot_metrics: skipped: rsvg-convert not found (Debian: apt-get install librsvg2-bin)"
    exit 77
fi
for svg in plot.svg lm.svg; do
    rsvg-convert "$svg" -o "${svg%.svg}.png" 2> err || fail "rsvg-convert $svg: $(cat err)"
    python3 - "${svg%.svg}.png" <<'PY' || fails=$((fails + 1))
import struct, sys, zlib
b = open(sys.argv[1], "rb").read()
fails = []
if b[:8] != b"\x89PNG\r\n\x1a\n": fails.append("not a PNG")
w, h, depth, ctype = struct.unpack(">IIBB", b[16:26])
if (w, h) != (960, 820): fails.append(f"{w} x {h}, 960 x 820 expected")
# decode the pixels: a picture with lines and bars has many colours and
# many non-white pixels; a blank or failed render has one or two
data, i = b"", 8
while i < len(b):
    n, kind = struct.unpack(">I4s", b[i:i + 8])
    if kind == b"IDAT": data += b[i + 8:i + 8 + n]
    i += 12 + n
raw = zlib.decompress(data)
bpp = {2: 3, 6: 4}.get(ctype, 0) * depth // 8
stride = 1 + w * bpp
prev = bytearray(w * bpp)
colours, ink = set(), 0
for y in range(h):
    f, line = raw[y * stride], bytearray(raw[y * stride + 1:(y + 1) * stride])
    for x in range(len(line)):  # PNG row filters (None, Sub, Up, Average, Paeth)
        a = line[x - bpp] if x >= bpp else 0
        c = prev[x - bpp] if x >= bpp else 0
        up = prev[x]
        if f == 1: line[x] = (line[x] + a) & 255
        elif f == 2: line[x] = (line[x] + up) & 255
        elif f == 3: line[x] = (line[x] + (a + up) // 2) & 255
        elif f == 4:
            p = a + up - c
            pa, pb, pc = abs(p - a), abs(p - up), abs(p - c)
            line[x] = (line[x] + (a if pa <= pb and pa <= pc else up if pb <= pc else c)) & 255
    for x in range(0, len(line), bpp):
        px = bytes(line[x:x + 3])
        colours.add(px)
        ink += px != b"\xff\xff\xff"
    prev = line
# measured: the train_cls plot 1871 colours and 11.4% ink, the train_lm-like one
# 621 and 5.9% (antialiased text and lines); the bounds leave room
if len(colours) < 20 or ink < 0.01 * w * h:
    fails.append(f"{len(colours)} colours, {ink} non-white pixels: blank?")
for f in fails: print(f"FAIL {sys.argv[1]}: {f}")
print(f"{sys.argv[1]}: {w} x {h}, {len(colours)} colours, {100 * ink / (w * h):.1f}% ink")
sys.exit(1 if fails else 0)
PY
done
finish
