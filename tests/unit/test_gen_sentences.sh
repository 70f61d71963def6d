#!/bin/sh
# Tests of gen_sentences (tools/gen_sentences.c).
#
#   test_gen_sentences.sh GEN_SENTENCES WORKDIR
#
# Checks determinism per seed, the CSV shape (header, one row per line, RFC
# 4180 quoting exactly where needed), the label set, and the one-line errors.
set -u
. "$(dirname "$0")/test_util.sh"
need_args 2 "GEN_SENTENCES WORKDIR" $#
gen=$1
rm -rf "$2" && mkdir -p "$2" && cd "$2" || exit 1

"$gen" --rows 3000 --seed 7 --out a.csv >/dev/null || fail "gen_sentences --seed 7 failed"
"$gen" --seed 7 --out b.csv --rows 3000 >/dev/null || fail "gen_sentences --seed 7 (again) failed"
"$gen" --rows 3000 --seed 8 --out c.csv >/dev/null || fail "gen_sentences --seed 8 failed"
cmp -s a.csv b.csv || fail "the same seed gave different files"
cmp -s a.csv c.csv && fail "seeds 7 and 8 gave the same file"
ls ./*.tmp.* >/dev/null 2>&1 && fail "temporary files left behind: $(ls ./*.tmp.*)"

[ "$(head -n 1 a.csv)" = "label,text" ] || fail "header is '$(head -n 1 a.csv)', want 'label,text'"
[ "$(wc -l <a.csv)" -eq 3001 ] || fail "expected 3001 lines (header + 3000 rows), got $(wc -l <a.csv)"

# Every row: a known label, a comma, then either a bare text without ',' or
# '"', or a quoted text whose inner quotes are doubled. Prints problems and
# the per-label counts.
check_rows() {
  LC_ALL=C awk -v want_labels="$2" '
    BEGIN { n = split(want_labels, w, " "); for (i = 1; i <= n; i++) ok[w[i]] = 1 }
    NR == 1 { next }
    {
      c = index($0, ",")
      label = substr($0, 1, c - 1)
      text = substr($0, c + 1)
      if (!(label in ok)) { print "bad label on line " NR ": " $0; bad++ }
      if (substr(text, 1, 1) == "\"") {
        inner = substr(text, 2, length(text) - 2)
        if (substr(text, length(text), 1) != "\"" || length(text) < 2) { print "unterminated quote on line " NR; bad++ }
        gsub(/""/, "", inner)
        if (index(inner, "\"")) { print "undoubled quote on line " NR ": " $0; bad++ }
        if (!index(text, ",") && !index(substr(text, 2, length(text) - 2), "\"")) {
          print "quoted without need on line " NR ": " $0; bad++
        }
        quoted++
      } else if (index(text, "\"") || index(text, ",")) {
        print "needs quoting on line " NR ": " $0; bad++
      }
      if (text == "" || text == "\"\"") { print "empty text on line " NR; bad++ }
      count[label]++
    }
    END {
      for (l in ok) if (!count[l]) { print "label " l " never appears"; bad++ }
      if (!quoted) { print "no quoted row at all: the RFC 4180 path is not exercised"; bad++ }
      exit bad > 0
    }' "$1"
}
out=$(check_rows a.csv "happiness sadness anger fear surprise disgust") || fail "a.csv: $out"

"$gen" --rows 500 --seed 1 --classes 3 --out k3.csv >/dev/null || fail "--classes 3 failed"
out=$(check_rows k3.csv "happiness sadness anger") || fail "k3.csv: $out"

# Errors: exit 2 for the command line, 1 for an unwritable file; one line.
expect_error() { # CODE ARGS...
  code=$1
  shift
  "$gen" "$@" >out.txt 2>err.txt
  rc=$?
  [ "$rc" -eq "$code" ] || fail "gen_sentences $* exited $rc, want $code"
  [ "$(wc -l <err.txt)" -eq 1 ] || fail "gen_sentences $*: want one line on stderr, got: $(cat err.txt)"
  grep -q '^gen_sentences: ' err.txt || fail "gen_sentences $*: stderr: $(cat err.txt)"
}
expect_error 2 --rows 0 --seed 1 --out x.csv
expect_error 2 --rows 10 --out x.csv
expect_error 2 --rows 10 --seed -1 --out x.csv
expect_error 2 --rows 10 --seed 1
expect_error 2 --rows 10 --seed 1 --out x.csv --classes 7
expect_error 2 --rows 10 --seed 1 --out x.csv --colour blue
expect_error 1 --rows 10 --seed 1 --out "$(pwd)/no/such/dir/x.csv"
[ -e x.csv ] && fail "a failed run left x.csv behind"
"$gen" --help >/dev/null || fail "--help exited non-zero"

finish
