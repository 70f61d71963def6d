#!/usr/bin/env bash
# zeropp_twohost.sh: ZeRO++ timed on a rate-limited link (issue 22, items 3
# and 4): bench_train (BERT-mini, 8.77M parameters, global batch 32, seq 128,
# fp32, stage 3) on two simulated hosts x 2 ranks (tools/twohost.sh --slots
# 2, one thread per rank, --bind-to none), plain stage 3 and with qwZ, qgZ,
# hpZ (zero_hpz_partition_size 2: the ranks of a host) and all three, with
# the raw TCP rate of the link measured in each round and every rank's bytes
# per step across hosts from the engine's counters.
#
#   bench/zeropp_twohost.sh BUILD_DIR [RATE] [REPEATS] [STEPS]
#   RATE: tc rate of each direction of the link (default 1gbit); REPEATS:
#   rounds (default 3); STEPS: timed steps per run after 2 warm-up steps
#   (default 6). SAME=0 leaves out the same-host run (4 ranks on this
#   machine over shared memory, plain stage 3) that each round starts with;
#   KEEP=1 keeps the runs' logs (their folder is printed at the end);
#   PAIRED=0 leaves out each round's last run, one process that alternates
#   the steps of a plain and a ZeRO++ engine (bench_train --zeropp ab: each
#   pair of steps sees the same load; the median of the pairs' ratios).
#
# In each round the five runs go one after the other, in an order rotated by
# one each round, so that the ratios to plain stage 3 come from neighbouring
# runs on a machine whose load changes; the summary gives each case's median
# and range over the rounds, of samples/s and of the ratio to the same
# round's plain run. A run's samples/s is bench_train's (median of its timed
# steps); "across" is the sum over the 4 ranks of what each sent to a rank
# on the other host per step, i.e. both directions of the link together;
# "waited for" is the part of rank 0's step its threads spent blocked on
# communication (bench_train's, from the engine's counters): the link's
# share of the step, which the machine's load moves less than samples/s.
# Lines go to stdout: "link: ..." per round, "zeropp: CASE round R: ..." per
# run, then the summary table (markdown). Needs root (namespaces); exits 77
# where the hosts cannot be made.
set -u
BUILD=$(readlink -f "${1:?usage: zeropp_twohost.sh BUILD_DIR [RATE] [REPEATS] [STEPS]}")
RATE=${2:-1gbit}
REPEATS=${3:-3}
STEPS=${4:-6}
HERE=$(cd "$(dirname "$0")/.." && pwd)
TWOHOST=$HERE/tools/twohost.sh
BENCH=$BUILD/bench/bench_train
[ -x "$BENCH" ] || { echo "zeropp_twohost: no $BENCH (build the bench_train target)" >&2; exit 1; }
"$TWOHOST" check >/dev/null || { "$TWOHOST" check; exit 77; }
WORK=$(mktemp -d /tmp/zeropp_twohost.XXXXXX)
NAME=zp$$
trap '"$TWOHOST" down --name $NAME >/dev/null 2>&1; [ "${KEEP:-0}" = 1 ] || rm -rf "$WORK"' EXIT
"$TWOHOST" up --name $NAME --slots 2 --rate "$RATE" >"$WORK/up.log" 2>&1 ||
  { echo "zeropp_twohost: twohost.sh up failed: $(tail -2 "$WORK/up.log")" >&2; exit 1; }
ROOT=""
[ "$(id -u)" -eq 0 ] && ROOT=--allow-run-as-root
MPI="mpirun $ROOT --bind-to none -np 4 -x OMP_NUM_THREADS=1"
ARGS="--stage 3 --steps $STEPS --warmup 2"
declare -A FLAGS=([plain]="" [qwz]="--qwz 1" [qgz]="--qgz 1" [hpz]="--hpz 2"
                  [zeropp]="--hpz 2 --qwz 1 --qgz 1")
CASES=(plain qwz qgz hpz zeropp)

# One run's line from bench_train's output ($1: log, $2: case, $3: round).
summarise() {
  python3 - "$@" <<'PY'
import re, sys
log, case, rnd = sys.argv[1], sys.argv[2], sys.argv[3]
text = open(log).read()
sps = float(re.search(r"([\d.]+) samples/s \(median step", text).group(1))
# rank 0's time in collectives per step and the part its threads waited for
coll, wait = re.search(r"([\d.]+) s in collectives, ([\d.]+) s waited for", text).groups()
ranks = re.findall(r"rank (\d+) bytes per step: (\d+) inside its host, (\d+) across hosts", text)
inside = sum(int(a) for _, a, _ in ranks)
across = sum(int(b) for _, _, b in ranks)
print(f"zeropp: {case} round {rnd}: {sps:.2f} samples/s; all {len(ranks)} ranks per step "
      f"{inside / 1e6:.2f} MB inside hosts, {across / 1e6:.2f} MB across; rank 0 per step "
      f"{coll} s in collectives, {wait} s waited for")
PY
}

for r in $(seq 1 "$REPEATS"); do
  echo "== round $r, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  "$TWOHOST" link --name $NAME || exit 1
  if [ "${SAME:-1}" = 1 ]; then
    $MPI --oversubscribe --mca btl self,vader,tcp "$BENCH" $ARGS >"$WORK/same_$r.log" 2>&1 ||
      { echo "zeropp_twohost: same host failed: $(tail -3 "$WORK/same_$r.log")" >&2; exit 1; }
    summarise "$WORK/same_$r.log" same-host "$r"
  fi
  for k in $(seq 0 $((${#CASES[@]} - 1))); do
    c=${CASES[$(((k + r - 1) % ${#CASES[@]}))]}
    "$TWOHOST" exec --name $NAME -- sh -c "$MPI --hostfile \"\$TWOHOST_HOSTFILE\" $BENCH $ARGS \
      ${FLAGS[$c]}" </dev/null >"$WORK/${c}_$r.log" 2>&1 ||
      { echo "zeropp_twohost: $c failed: $(tail -3 "$WORK/${c}_$r.log")" >&2; exit 1; }
    summarise "$WORK/${c}_$r.log" "$c" "$r"
  done
  if [ "${PAIRED:-1}" = 1 ]; then
    "$TWOHOST" exec --name $NAME -- sh -c "$MPI --hostfile \"\$TWOHOST_HOSTFILE\" $BENCH $ARGS \
      --zeropp ab" </dev/null >"$WORK/paired_$r.log" 2>&1 ||
      { echo "zeropp_twohost: paired failed: $(tail -3 "$WORK/paired_$r.log")" >&2; exit 1; }
    sed -n "s/^bench_train: stage 3 paired steps: /zeropp: paired round $r: /p" "$WORK/paired_$r.log"
  fi
done | tee "$WORK/lines.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
echo "== end, load average $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$WORK/lines.txt" <<'PY'
import re, statistics, sys
runs, links, paired = {}, [], []
for line in open(sys.argv[1]):
    m = re.match(r"zeropp: (\S+) round (\d+): ([\d.]+) samples/s; .* ([\d.]+) MB inside hosts, "
                 r"([\d.]+) MB across; .* ([\d.]+) s waited for", line)
    if m:
        runs.setdefault(m.group(1), {})[int(m.group(2))] = tuple(float(m.group(k))
                                                                 for k in (3, 4, 5, 6))
    m = re.match(r"zeropp: paired round \d+: .* = ([\d.]+) \(median", line)
    if m:
        paired.append(float(m.group(1)))
    m = re.match(r"link: ([\d.]+) MB/s", line)
    if m:
        links.append(float(m.group(1)))
def rng(x):
    return f"{statistics.median(x):.2f} ({min(x):.2f}-{max(x):.2f})"
print(f"raw TCP rate of the link, host 2 -> host 1, per round: "
      + ", ".join(f"{v:.1f}" for v in links) + " MB/s")
print("| case | samples/s, median (range) | x plain stage 3, same round | MB per step "
      "across hosts (all ranks) | MB inside hosts | rank 0's wait for communication, s per step |")
print("|---|---|---|---|---|---|")
plain = runs.get("plain", {})
for case in ("same-host", "plain", "qwz", "qgz", "hpz", "zeropp"):
    if case not in runs:
        continue
    rs = runs[case]
    sps = [v[0] for v in rs.values()]
    ratio = [rs[r][0] / plain[r][0] for r in rs if r in plain]
    across = statistics.median(v[2] for v in rs.values())
    inside = statistics.median(v[1] for v in rs.values())
    wait = rng([v[3] for v in rs.values()])
    print(f"| {case} | {rng(sps)} | {rng(ratio) if ratio else '-'} | {across:.2f} | "
          f"{inside:.2f} | {wait} |")
if paired:
    print(f"\nZeRO++ / plain, steps paired in one process (bench_train --zeropp ab), each "
          f"round's median: {rng(paired)} over {len(paired)} rounds")
PY
[ "${KEEP:-0}" = 1 ] && echo "logs: $WORK"
exit 0
