#!/usr/bin/env bash
# overlap_twohost.sh: BERT-mini samples/s at stages 0-2 with overlap_comm off
# and on, on one host (shared memory) and on two simulated hosts joined by a
# 10 Gbit/s and a 1 Gbit/s link (tools/twohost.sh), with the raw TCP rate of
# each link measured in the same session (issue 22, item 2).
#
#   bench/overlap_twohost.sh BUILD_DIR [REPEATS] [BUCKET] [STEPS]
#   RATES="10gbit 1gbit" SAME=1 STAGES="0 1 2" OVERLAPS="0 1" (environment)
#   choose the links, whether to run on one host too, the stages and the
#   runs per stage: OVERLAPS=ab runs one process per stage that alternates
#   the steps of an overlap-off and an overlap-on engine (bench_train
#   --overlap ab), whose paired ratio is robust to the machine's load;
#   QGZ="0 1" runs each of them without and with ZeRO++ qgZ (bench_train
#   --qgz, stage 3 only; default "0"), QWZ="0 1" likewise with qwZ
#   (--qwz), every pair of the two; SPARSE=ab passes --sparse ab (one
#   process per stage alternating sparse_gradients off and on; SPARSE=0|1
#   sets it), unset leaves the key out; PAIRS=1 (with one rate in RATES)
#   runs each setting on one host and then across the link back to back,
#   inside one session of the two hosts, and prints a "pair:" line with
#   both runs' samples/s and fastest steps and their ratios; VS=OTHER_BUILD
#   (with one rate) runs each setting across the link with OTHER_BUILD's
#   bench_train and BUILD_DIR's back to back, in turns (other first in odd
#   repeats, second in even ones), and prints a "vs:" line with both runs'
#   samples/s, fastest step and the step phase (bench_train's median "step":
#   the wait for the gradients' last buckets, the update), OTHER_BUILD's ->
#   BUILD_DIR's
#
# PAIRS=1 is for a host whose speed drifts by tens of percent over minutes
# (the 2-core VMs of bench/RESULTS.md: a run's samples/s 30-70 within one
# hour): the default order runs every same-host setting and then every
# two-host one, a minute or more apart, so a ratio of the two can hold a
# change of the host's phase. A pair's two runs start seconds apart. The
# same-host run of a pair is mpirun without a hostfile on host 1 (both
# ranks in its namespace, shared memory between them): the same machine and
# transport as SAME=1's, started from where the two-host run starts.
#
# Two ranks, one thread each (OMP_NUM_THREADS=1), --bind-to none (each
# simulated host's daemon would otherwise bind both ranks to core 0). In each
# repeat and setting the six runs go one after the other (stage 0 off, on,
# stage 1 off, on, ...) so that off/on ratios come from neighbouring runs on
# a machine whose load changes. BUCKET: reduce_bucket_size in elements for
# both off and on (default 500000: 2 MB of fp32, about a quarter of one
# encoder layer), so off and on reduce the same buckets and differ only in
# the thread that runs them. Lines go to stdout; one per run starts
# "bench_train:", one per link "link:". Needs root (namespaces); exits 77
# where the hosts cannot be made.
set -u
BUILD=${1:?usage: overlap_twohost.sh BUILD_DIR [REPEATS] [BUCKET] [STEPS]}
REPEATS=${2:-2}
BUCKET=${3:-500000}
STEPS=${4:-6}
HERE=$(cd "$(dirname "$0")/.." && pwd)
TWOHOST=$HERE/tools/twohost.sh
BENCH=$(readlink -f "$BUILD/bench/bench_train")
[ -x "$BENCH" ] || { echo "overlap_twohost: no $BENCH (build the bench target)" >&2; exit 1; }
"$TWOHOST" check >/dev/null || { "$TWOHOST" check; exit 77; }
ROOT=""
[ "$(id -u)" -eq 0 ] && ROOT=--allow-run-as-root
MPI="mpirun $ROOT --bind-to none -np 2 -x OMP_NUM_THREADS=1"


runs() { # $1: mpirun prefix
  local stage ov q w
  for stage in ${STAGES:-0 1 2}; do
    for ov in ${OVERLAPS:-0 1}; do
      for w in ${QWZ:-0}; do
        for q in ${QGZ:-0}; do
          $1 "$BENCH" --stage "$stage" --overlap "$ov" --bucket "$BUCKET" --steps "$STEPS" \
            --warmup 2 --qwz "$w" --qgz "$q" ${SPARSE:+--sparse "$SPARSE"} 2>&1 |
            grep -E '^bench_train:|rror' ||
            echo "bench_train: stage $stage overlap $ov qwz $w qgz $q FAILED"
        done
      done
    done
  done
}

# One run's line "bench_train: BERT-mini ..." with args "$@" under mpirun
# prefix $1.
one() {
  local mpi=$1
  shift
  $mpi "$@" 2>&1 | grep -E '^bench_train: BERT'
}

# samples/s, fastest step and the median step phase of two runs' lines,
# first ($1) -> second ($2), and the second's speed over the first's, as
# "what: ..." ($3). pair: same host -> two hosts; vs: OTHER_BUILD -> ours.
compare() {
  printf '%s\n%s\n' "$1" "$2" | awk -v what="$3" '
    { for (i = 1; i < NF; i++) {
        if ($(i + 1) == "samples/s") r[NR] = $i
        if ($i == "min") { m = $(i + 1); sub(/,$/, "", m); t[NR] = m }
        if ($i == "step" && $(i + 2) == "s" && $(i - 1) ~ /s,$/) p[NR] = $(i + 1) } }
    END { if (r[1] > 0 && r[2] > 0 && t[1] > 0 && t[2] > 0)
            printf "%s: samples/s %s -> %s (x%.3f), fastest step %s -> %s s (speed x%.3f), " \
                   "step phase %s -> %s s\n", what, r[1], r[2], r[2] / r[1], t[1], t[2],
                   t[1] / t[2], p[1], p[2]
          else print what ": FAILED" }'
}

# PAIRS=1: for each setting, the same-host run then the two-host run; a
# "pair:" line with samples/s (bench_train's median step) and fastest steps
# of both, and two-host / same-host for each.
pairs() { # $1: the two-host mpirun prefix
  local two_host=$1 stage ov q w same two args
  for stage in ${STAGES:-0 1 2}; do
    for ov in ${OVERLAPS:-0 1}; do
      for w in ${QWZ:-0}; do
        for q in ${QGZ:-0}; do
          args=(--stage "$stage" --overlap "$ov" --bucket "$BUCKET" --steps "$STEPS" --warmup 2
                --qwz "$w" --qgz "$q" ${SPARSE:+--sparse "$SPARSE"})
          what="stage $stage overlap $ov qwz $w qgz $q"
          if [ -n "${VS:-}" ]; then # OTHER_BUILD's and ours, across the link
            local first=$OTHER second=$BENCH a b
            [ $((REP % 2)) = 0 ] && first=$BENCH second=$OTHER
            a=$(one "$two_host" "$first" "${args[@]}")
            b=$(one "$two_host" "$second" "${args[@]}")
            [ "$first" = "$BENCH" ] && { local x=$a; a=$b; b=$x; }
            echo "other: $a"
            echo "this:  $b"
            compare "$a" "$b" "vs: $what"
            continue
          fi
          same=$(one "$MPI --mca btl self,vader,tcp" "$BENCH" "${args[@]}")
          two=$(one "$two_host" "$BENCH" "${args[@]}")
          echo "same host: $same"
          echo "two hosts: $two"
          compare "$same" "$two" "pair: $what"
        done
      done
    done
  done
}

if [ "${PAIRS:-0}" = 1 ] || [ -n "${VS:-}" ]; then
  rate=${RATES:-1gbit}
  case "$rate" in *" "*) echo "overlap_twohost: PAIRS=1 and VS take one rate, not '$rate'" >&2; exit 2 ;; esac
  OTHER=""
  if [ -n "${VS:-}" ]; then
    OTHER=$(readlink -f "$VS/bench/bench_train")
    [ -x "$OTHER" ] || { echo "overlap_twohost: no $VS/bench/bench_train" >&2; exit 1; }
  fi
  echo "== ${VS:+vs $VS, }pairs, $rate, $REPEATS repeats, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  export BENCH OTHER VS BUCKET STEPS MPI STAGES OVERLAPS QGZ QWZ SPARSE REPEATS
  export -f pairs one compare
  "$TWOHOST" run --name ovl$$ --rate "$rate" -- bash -c '
    '"$TWOHOST"' link --name "$TWOHOST_NAME"
    for REP in $(seq 1 "$REPEATS"); do
      export REP
      echo "== repeat $REP, load average $(cut -d" " -f1-3 /proc/loadavg)"
      pairs "$MPI --hostfile $TWOHOST_HOSTFILE"
    done' 2>&1 | grep -E '^(link|pair|vs|same host|two hosts|other|this|==)|FAILED|rror'
  echo "== end, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  exit 0
fi

for rep in $(seq 1 "$REPEATS"); do
  echo "== repeat $rep, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  if [ "${SAME:-1}" = 1 ]; then
    echo "-- same host (shared memory)"
    runs "$MPI --mca btl self,vader,tcp"
  fi
  for rate in ${RATES:-10gbit 1gbit}; do
    echo "-- two hosts, $rate, load average $(cut -d' ' -f1-3 /proc/loadavg)"
    export BENCH BUCKET STEPS MPI STAGES OVERLAPS QGZ QWZ SPARSE
    export -f runs
    "$TWOHOST" run --name ovl$$ --rate "$rate" -- bash -c '
      '"$TWOHOST"' link --name "$TWOHOST_NAME"
      runs "$MPI --hostfile $TWOHOST_HOSTFILE"' 2>&1 | grep -E '^(link|bench_train):|FAILED|rror'
  done
done
echo "== end, load average $(cut -d' ' -f1-3 /proc/loadavg)"
