#!/bin/sh
# wall_clock_breakdown and the communication counters in train_cls
# (engine/wall_clock.h, tools/common/run_stats.h), 10 steps of the MLP at
# ZeRO stage 2 on 2 ranks, steps_per_print 5:
#   on    rank 0 prints 'time (ms) | fwd | bwd | step | comm_wait' and 'comm
#         per step | reduce_scatter: 1 call, ... busbw ... | inside host ...,
#         across hosts 0 B (1 host)' for steps 1-5 and 6-10; --metrics has
#         "wall_clock" on steps 5 and 10 only, with every key, forward and
#         backward time > 0;
#   off   no such print and no "wall_clock"; the counters stay: every step's
#         line has "comm" with one reduce-scatter and one all-gather, all
#         bytes inside the host; the end-of-run report's totals equal the sum
#         over ranks (rank 0's bytes x 2: both ranks send equal halves here);
#   hosts the same run across two simulated hosts (tools/twohost.sh, skipped
#         where namespaces cannot be made): every byte across hosts, none
#         inside, and the print says 2 hosts.
#   test_wall_clock.sh BINDIR CSV WORKDIR TWOHOST
set -u
. "$(dirname "$0")/test_util.sh"
need_args 4 "BINDIR CSV WORKDIR TWOHOST" $#
bin=$(readlink -f "$1")
csv=$(readlink -f "$2")
twohost=$(readlink -f "$4")
rm -rf "$3" && mkdir -p "$3" && cd "$3" || exit 1
work=$(pwd -P)
export OMP_NUM_THREADS=1 OMPI_MCA_btl=self,vader,tcp
# gather_rows false: the counts below are the dense gather's, one all-gather a
# step (the row exchange's are tests/multirank/test_param_rows.c's)
for wcb in true false; do
  printf '{"train_micro_batch_size_per_gpu": 4, "steps_per_print": 5, "wall_clock_breakdown": %s,
  "zero_optimization": {"stage": 2}, "zero_engine": {"gather_rows": false}}\n' $wcb > $wcb.json
done
args="--data $csv --model mlp --hidden 16 --intermediate 32 --max-seq-len 32 --max-steps 10"
# shellcheck disable=SC2086
"$bin/engine-run" --np 2 --config true.json train_cls $args --metrics on.jsonl > on.log 2>&1 ||
  fail "wall_clock_breakdown on: exit $?: $(tail -3 on.log)"
# shellcheck disable=SC2086
"$bin/engine-run" --np 2 --config false.json train_cls $args --metrics off.jsonl > off.log 2>&1 ||
  fail "wall_clock_breakdown off: exit $?: $(tail -3 off.log)"

for r in "1-5" "6-10"; do
  grep -Eq "^\[zero-engine\] time \(ms\) \| fwd: [0-9.]+ \| bwd: [0-9.]+ \| allreduce: [0-9.]+ \| step: [0-9.]+ \| comm_wait: [0-9.]+ \(per step, mean of steps $r\)$" on.log ||
    fail "on: no 'time (ms)' line for steps $r"
done
n=$(grep -Ec '^\[zero-engine\] comm per step \| reduce_scatter: 1 call, [0-9.]+ kB, [0-9.]+ ms, busbw [0-9.]+ GB/s \| all_gather: 1 call, .* \| inside host [0-9.]+ kB, across hosts 0 B \(1 host\)$' on.log)
[ "$n" = 2 ] || fail "on: $n 'comm per step' lines of the expected form, want 2"
grep -q 'time (ms)' off.log && fail "off: a wall-clock line printed"

python3 - on.jsonl off.jsonl off.log <<'PY' || fail "metrics checks"
import json, re, sys
def steps(p): return [l for l in map(json.loads, open(p)) if "step" in l]
bad = []
on, off = steps(sys.argv[1]), steps(sys.argv[2])
wc = [s["step"] for s in on if "wall_clock" in s]
if wc != [5, 10]: bad.append(f"on: wall_clock on steps {wc}")
for s in on:
    w = s.get("wall_clock")
    if not w: continue
    for k in ("from_step", "to_step", "fwd_ms", "bwd_ms", "allreduce_ms", "step_ms", "comm_wait_ms", "comm"):
        if k not in w: bad.append(f"on step {s['step']}: wall_clock lacks {k}")
    if not (w["fwd_ms"] > 0 and w["bwd_ms"] > 0): bad.append(f"on: times {w}")
    if w["to_step"] != s["step"] or w["from_step"] != s["step"] - 5: bad.append(f"on: interval {w}")
    rs = w["comm"].get("reduce_scatter", {})
    if rs.get("calls") != 1.0 or rs.get("across_hosts") != 0.0 or rs.get("busbw_gbps", 0) <= 0:
        bad.append(f"on: wall_clock reduce_scatter {rs}")
if any("wall_clock" in s for s in off): bad.append("off: a wall_clock member")
tot = {}
for s in off:
    c = s.get("comm", {})
    for k in ("reduce_scatter", "all_gather"):
        x = c.get(k)
        if not x or x["calls"] != 1 or x["inside_host"] != x["bytes"] or x["across_hosts"] != 0 \
           or x["bytes"] <= 0 or x["seconds"] < 0:
            bad.append(f"off step {s['step']}: comm {k} = {x}")
            continue
        tot[k] = tot.get(k, 0) + x["bytes"]
    if "wait_s" not in c: bad.append(f"off step {s['step']}: comm lacks wait_s")
rep = [l for l in open(sys.argv[3]) if l.startswith("train_cls: communication over 10 steps")]
if len(rep) != 1: bad.append(f"{len(rep)} end-of-run communication reports")
else:
    # The all-gather sends each rank's padded partition, equal on both ranks,
    # so the all-rank total is rank 0's x 2 (the padded parameters). The
    # reduce-scatter sends each rank the other's block, the last one without
    # its padding: more than rank 0's share, at most the padded total.
    got = {}
    for k in tot:
        m = re.search(k + r" 10 calls, ([0-9.]+) kB / 0 B", rep[0])
        if not m: bad.append(f"report lacks {k}: {rep[0]}")
        else: got[k] = float(m.group(1))
    if len(got) == 2:
        ag, rs = got["all_gather"], got["reduce_scatter"]
        if abs(ag - 2 * tot["all_gather"] / 1e3) > 0.006:  # printed to 0.01 kB
            bad.append(f"report all_gather {ag} kB, metrics say 2 x {tot['all_gather']} B")
        if not tot["reduce_scatter"] / 1e3 < rs <= ag:
            bad.append(f"report reduce_scatter {rs} kB, rank 0 sent {tot['reduce_scatter']} B, "
                       f"padded total {ag} kB")
for b in bad: print("FAIL", b)
sys.exit(1 if bad else 0)
PY

if why=$("$twohost" check); then
  name=zw$$
  for d in /run/twohost/zw*; do
    [ -d "$d" ] && ! kill -0 "${d##*/zw}" 2>/dev/null && "$twohost" down --name "${d##*/}"
  done
  trap '"$twohost" down --name $name >/dev/null 2>&1' EXIT
  if "$twohost" up --name $name > up.log 2>&1; then
    # shellcheck disable=SC2086
    "$twohost" exec --name $name -- "$bin/engine-run" --np 2 --hostfile /run/twohost/$name/hostfile \
      --config "$work/true.json" train_cls $args --metrics "$work/hosts.jsonl" </dev/null > hosts.log 2>&1 ||
      fail "two hosts: exit $?: $(tail -3 hosts.log)"
    grep -Eq '\| inside host 0 B, across hosts [0-9.]+ kB \(2 hosts\)$' hosts.log ||
      fail "two hosts: the print does not put every byte across 2 hosts: $(grep 'comm per step' hosts.log | head -1)"
    python3 - hosts.jsonl <<'PY' || fail "two hosts: metrics"
import json, sys
bad = 0
for s in (l for l in map(json.loads, open(sys.argv[1])) if "step" in l):
    for k, x in s["comm"].items():
        if k not in ("wait_s", "host") and (x["inside_host"] != 0 or x["across_hosts"] != x["bytes"]):
            print("FAIL step", s["step"], k, x); bad = 1
sys.exit(bad)
PY
  else
    fail "two hosts: twohost.sh up failed: $(tail -3 up.log)"
  fi
else
  echo "test_wall_clock: two hosts skipped: $why"
fi
finish
