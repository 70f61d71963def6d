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
#   both runs' samples/s and fastest steps and their ratios
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
          same=$($MPI --mca btl self,vader,tcp "$BENCH" "${args[@]}" 2>&1 | grep -E '^bench_train: BERT')
          two=$($two_host "$BENCH" "${args[@]}" 2>&1 | grep -E '^bench_train: BERT')
          echo "same host: $same"
          echo "two hosts: $two"
          # samples/s: the number before "samples/s"; fastest step: after "min"
          printf '%s\n%s\n' "$same" "$two" | awk -v what="stage $stage overlap $ov qwz $w qgz $q" '
            { for (i = 1; i < NF; i++) {
                if ($(i + 1) == "samples/s") r[NR] = $i
                if ($i == "min") { m = $(i + 1); sub(/,$/, "", m); t[NR] = m } } }
            END { if (r[1] > 0 && r[2] > 0 && t[1] > 0 && t[2] > 0)
                    printf "pair: %s: samples/s %s / %s = %.3f, fastest step %s / %s s = %.3f\n",
                           what, r[2], r[1], r[2] / r[1], t[1], t[2], t[1] / t[2]
                  else print "pair: " what ": FAILED" }'
        done
      done
    done
  done
}

if [ "${PAIRS:-0}" = 1 ]; then
  rate=${RATES:-1gbit}
  case "$rate" in *" "*) echo "overlap_twohost: PAIRS=1 takes one rate, not '$rate'" >&2; exit 2 ;; esac
  echo "== pairs, $rate, $REPEATS repeats, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  export BENCH BUCKET STEPS MPI STAGES OVERLAPS QGZ QWZ SPARSE REPEATS
  export -f pairs
  "$TWOHOST" run --name ovl$$ --rate "$rate" -- bash -c '
    '"$TWOHOST"' link --name "$TWOHOST_NAME"
    for rep in $(seq 1 "$REPEATS"); do
      echo "== repeat $rep, load average $(cut -d" " -f1-3 /proc/loadavg)"
      pairs "$MPI --hostfile $TWOHOST_HOSTFILE"
    done' 2>&1 | grep -E '^(link|pair|same host|two hosts|==)|FAILED|rror'
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
