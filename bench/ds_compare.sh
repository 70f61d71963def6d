#!/usr/bin/env bash
# zero-engine against DeepSpeed on CPU, same model, batch and ds_config, run
# for run in one session (issue 17 item 4, issue 22 item 7): bench/bench_train
# --stage S (mpirun, 2 ranks x 1 thread) and bench/bench_deepspeed.py --stage
# S (torchrun, 2 processes x 1 thread, DS_ACCELERATOR=cpu, gloo), BERT-mini,
# global batch 32, seq 128, fp32, 2 warm-up + 8 timed steps each. Every
# DeepSpeed run follows the engine run it is paired with (engine, DeepSpeed,
# engine, DeepSpeed, ... over the stages and repetitions), so that each ratio
# comes from two neighbouring runs on a machine whose load changes.
#
#   bench/ds_compare.sh [--build build-h6] [--python /root/venv/bin/python]
#                       [--reps 3] [--stages "0 1 2 3"] [--where same|twohost|both]
#                       [--rate 1gbit] [--out /tmp/ds_compare]
#                       [--quiet-idle 85] [--max-wait 60]
#                       [--engine-args "--overlap 1 --sparse 1"] [--ds-args "--overlap 1"]
#
# --engine-args: more bench_train options for every engine run (split on
# spaces), e.g. the features a slow link wants, "--overlap 1 --sparse 1" at
# stages 0-2 or "--qwz 1 --qgz 1" at stage 3. --ds-args: the same for every
# bench_deepspeed.py run ("--overlap 1 --bucket 500000": overlap_comm and
# reduce_bucket_size; unset, DeepSpeed's default overlap and a 5e8 bucket).
# --where twohost runs both programs across the two simulated hosts of
# tools/twohost.sh (one rank each, link limited to --rate): the engine's
# ranks through mpirun --hostfile as bench/overlap_twohost.sh does, DeepSpeed
# as a cluster would run it, one torchrun per host (--nnodes 2, --node_rank
# 0 on host 1 started by 'twohost.sh exec', 1 on host 2 by 'ip netns exec',
# rendezvous at host 1's address 10.77.0.1 on the veth link, gloo bound to
# that link by GLOO_SOCKET_IFNAME=eth0). The raw TCP rate of the link is
# measured once at the start. Needs root; skipped (exit 77 when it is the only
# place asked for) where the hosts cannot be made.
#
# Load: before each run the script waits (up to --max-wait s) for the CPUs to
# be --quiet-idle % idle over 2 s, and records how much CPU OTHER processes
# took while it ran ("others", cores: (the machine's busy time - the run's
# own user+sys) / wall), as bench/lm_speed.sh does; bench/ds_table.py marks a
# pair disturbed when either run had others >= 0.10 cores.
#
# DeepSpeed's first start JIT-compiles two ops (about a minute, more on a busy
# machine; cached in ~/.cache/torch_extensions): one untimed DeepSpeed run at
# the start takes that out of the comparison.
#
# Writes OUT/runs.jsonl (one record per run), OUT/env.txt, the logs, and
# OUT/table.md (bench/ds_table.py).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build-h6
py=/root/venv/bin/python
reps=3 stages="0 1 2 3" where=same rate=1gbit out=/tmp/ds_compare quiet_idle=85 max_wait=60
eargs=() dargs=()
while [ $# -gt 0 ]; do
    case $1 in
        --build) build=$2; shift 2 ;;
        --python) py=$2; shift 2 ;;
        --reps) reps=$2; shift 2 ;;
        --stages) stages=$2; shift 2 ;;
        --where) where=$2; shift 2 ;;
        --rate) rate=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --quiet-idle) quiet_idle=$2; shift 2 ;;
        --max-wait) max_wait=$2; shift 2 ;;
        --engine-args) read -r -a eargs <<< "$2"; shift 2 ;;
        --ds-args) read -r -a dargs <<< "$2"; shift 2 ;;
        -h|--help) sed -n '2,40p' "$0"; exit 0 ;;
        *) echo "ds_compare.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
case $where in same|twohost|both) ;; *) echo "ds_compare.sh: --where same, twohost or both" >&2; exit 2 ;; esac
bench=$(readlink -f "$build/bench/bench_train")
[ -x "$bench" ] || { echo "ds_compare.sh: $build/bench/bench_train not built" >&2; exit 1; }
torchrun=$(dirname "$py")/torchrun
[ -x "$torchrun" ] || { echo "ds_compare.sh: no $torchrun beside $py" >&2; exit 1; }
twohost=$here/tools/twohost.sh
dsbench=$here/bench/bench_deepspeed.py
mkdir -p "$out"
runs=$out/runs.jsonl
: > "$runs"
root_flag=()
[ "$(id -u)" = 0 ] && root_flag=(--allow-run-as-root)
export DS_ACCELERATOR=cpu OMP_NUM_THREADS=1

# busy and total jiffies of the whole machine
cpu_now() { awk '/^cpu /{b=$2+$3+$4+$7+$8+$9; print b, b+$5+$6; exit}' /proc/stat; }
idle_pct() {
    local b1 t1 b2 t2
    read -r b1 t1 < <(cpu_now); sleep 2; read -r b2 t2 < <(cpu_now)
    echo $(( 100 - 100 * (b2 - b1) / (t2 - t1 > 0 ? t2 - t1 : 1) ))
}
wait_quiet() {
    local waited=0 idle
    idle=$(idle_pct)
    while [ "$idle" -lt "$quiet_idle" ] && [ "$waited" -lt "$max_wait" ]; do
        sleep 8; waited=$((waited + 10)); idle=$(idle_pct)
    done
    echo "$idle $waited"
}
hz=$(getconf CLK_TCK)
port=29600 # torchrun's rendezvous port, a new one per run (no TIME_WAIT clash)

# The commands of one run; each writes its own user+sys seconds to $out/time.*
# (/usr/bin/time counts the waited-for children: the ranks; across the two
# hosts the engine's ranks time themselves, see engine_twohost).
timed() { local tag=$1; shift; /usr/bin/time -f '%U %S' -o "$out/time.$tag" "$@"; }
engine_same() {
    timed e mpirun "${root_flag[@]}" --oversubscribe --bind-to none --mca btl self,vader,tcp \
        -x OMP_NUM_THREADS=1 -np 2 "$bench" --stage "$1" "${eargs[@]}"
}
ds_same() {
    port=$((port + 1))
    timed d "$torchrun" --nproc_per_node 2 --master_addr 127.0.0.1 --master_port "$port" \
        "$dsbench" --stage "$1" "${dargs[@]}"
}
# Across the hosts each rank times itself: host 2's rank runs under an orted
# that mpirun does not wait for, so mpirun's own rusage would leave it out.
engine_twohost() {
    "$twohost" exec --name "$hosts" -- bash -c 'exec mpirun --hostfile "$TWOHOST_HOSTFILE" "$@"' \
        mpirun "${root_flag[@]}" --bind-to none -np 2 -x OMP_NUM_THREADS=1 \
        sh -c 'exec /usr/bin/time -f "%U %S" -o "$0.$OMPI_COMM_WORLD_RANK" "$@"' "$out/time.r" \
        "$bench" --stage "$1" "${eargs[@]}"
}
ds_twohost() {
    port=$((port + 1))
    local tr=(--nnodes 2 --nproc_per_node 1 --master_addr 10.77.0.1 --master_port "$port")
    GLOO_SOCKET_IFNAME=eth0 timed d2 ip netns exec "$hosts-2" \
        "$torchrun" "${tr[@]}" --node_rank 1 "$dsbench" --stage "$1" "${dargs[@]}" > "$out/ds_host2.log" 2>&1 &
    local h2=$!
    GLOO_SOCKET_IFNAME=eth0 timed d "$twohost" exec --name "$hosts" -- \
        "$torchrun" "${tr[@]}" --node_rank 0 "$dsbench" --stage "$1" "${dargs[@]}"
    local rc=$?
    wait "$h2" || { echo "ds_compare.sh: host 2's torchrun failed, see $out/ds_host2.log" >&2; return 1; }
    return $rc
}

# run WHERE SIDE STAGE REP: one run and its record in runs.jsonl
run() {
    local at=$1 side=$2 stage=$3 rep=$4
    local log=$out/$at.$side.s$stage.rep$rep.log iw idle waited b1 t1 b2 t2 s0 s1 own load
    iw=$(wait_quiet); idle=${iw% *}; waited=${iw#* }
    load=$(cut -d' ' -f1 /proc/loadavg)
    rm -f "$out"/time.*
    read -r b1 t1 < <(cpu_now)
    s0=$(date +%s.%N)
    "${side}_$at" "$stage" > "$log" 2>&1 || {
        echo "ds_compare.sh: $at $side stage $stage failed, see $log" >&2; tail -5 "$log" >&2; return 1; }
    s1=$(date +%s.%N)
    read -r b2 t2 < <(cpu_now)
    own=$(cat "$out"/time.* | awk '{s += $1 + $2} END {print s + 0}')
    "$py" - "$log" "$at" "$side" "$stage" "$rep" "$idle" "$waited" "$load" "$own" \
        "$((b2 - b1))" "$hz" "$s0" "$s1" >> "$runs" <<'EOF'
import json, re, sys
log, at, side, stage, rep, idle, waited, load, own, busy, hz, s0, s1 = sys.argv[1:]
text = open(log, errors="replace").read()
wall = float(s1) - float(s0)
r = dict(where=at, side=side, stage=int(stage), rep=int(rep), idle_before=int(idle),
         waited_s=int(waited), loadavg_before=float(load), wall_s=round(wall, 1),
         others_cores=round(max(0.0, (int(busy) / int(hz) - float(own)) / wall), 2))
if side == "ds":
    m = re.search(r"^bench_deepspeed_json: (.*)$", text, re.M)
    if not m:
        sys.exit(f"ds_compare.sh: no bench_deepspeed_json line in {log}")
    d = json.loads(m.group(1))
    r.update(samples_per_s=d["samples_per_s"], step_s=d["step_s"], step_min_s=d["step_min_s"],
             step_max_s=d["step_max_s"], psi=d["psi"], loss0=d["loss0"], world=d["world"],
             optimizer=d.get("optimizer"), basic_optimizer=d.get("basic_optimizer"),
             overlap_comm=d.get("overlap_comm"))
else:
    m = re.search(r"^bench_train: BERT-mini Psi=(\d+) stage (\d) .* world (\d+) .*: ([\d.]+) "
                  r"samples/s \(median step ([\d.]+) s, min ([\d.]+), max ([\d.]+)\)", text, re.M)
    l = re.search(r"^bench_train: stage \d overlap -?\d first step loss ([\d.]+)", text, re.M)
    if not m or not l:
        sys.exit(f"ds_compare.sh: no bench_train result in {log}")
    r.update(samples_per_s=float(m.group(4)), step_s=float(m.group(5)),
             step_min_s=float(m.group(6)), step_max_s=float(m.group(7)), psi=int(m.group(1)),
             loss0=float(l.group(1)), world=int(m.group(3)))
print(json.dumps(r))
EOF
    echo "ds_compare.sh: $at rep $rep stage $stage $side: $(tail -1 "$runs" | "$py" -c 'import json, sys
r = json.loads(sys.stdin.read())
print("{samples_per_s:.2f} samples/s, loss0 {loss0:.4f}, idle before {idle_before}%, others {others_cores:.2f} cores".format(**r))')" >&2
}

series() { # WHERE: the pairs of every repetition and stage
    local rep stage
    for rep in $(seq 1 "$reps"); do
        for stage in $stages; do
            run "$1" engine "$stage" "$rep"
            run "$1" ds "$stage" "$rep"
        done
    done
}

{
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "repository HEAD: $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
    echo "bench_train: $bench, built from $src ($(git -C "$src" rev-parse --short HEAD 2>/dev/null || cat "$src/.head" 2>/dev/null || echo unknown))"
    echo "engine args: ${eargs[*]:-(none)}; DeepSpeed args: ${dargs[*]:-(none)}"
    echo "cpu: $(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo), $(getconf _NPROCESSORS_ONLN) cpus"
    echo "flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -o -w -E 'avx512f|avx512bw|avx512_bf16|avx2|fma|amx_bf16' | sort -u | tr '\n' ' ')"
    echo "mem: $(awk '/MemTotal/{printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
    echo "mpi: $(mpirun --version 2>/dev/null | head -1)"
    echo "python: $("$py" -c 'import sys, torch, deepspeed, transformers; print(sys.version.split()[0], "torch", torch.__version__, "deepspeed", deepspeed.__version__, "transformers", transformers.__version__, "cpu capability", torch.backends.cpu.get_cpu_capability())' 2>/dev/null | tail -1)"
    echo "runs: engine and DeepSpeed alternating, stages $stages, $reps repetitions, where $where (two hosts at $rate)"
} > "$out/env.txt"
cat "$out/env.txt" >&2

# DeepSpeed's JIT build (and a first import) outside the timing
echo "ds_compare.sh: untimed DeepSpeed warm-up run (JIT-builds its ops the first time)" >&2
"$torchrun" --nproc_per_node 2 --master_addr 127.0.0.1 --master_port 29599 "$dsbench" \
    --stage 0 --steps 1 --warmup 0 > "$out/ds_warmup.log" 2>&1 ||
    { echo "ds_compare.sh: DeepSpeed warm-up failed, see $out/ds_warmup.log" >&2; tail -5 "$out/ds_warmup.log" >&2; exit 1; }

if [ "$where" != twohost ]; then
    series same
fi
if [ "$where" != same ]; then
    if ! why=$("$twohost" check); then
        echo "ds_compare.sh: two hosts skipped: $why" >&2
        echo "two hosts: skipped ($why)" >> "$out/env.txt"
        [ "$where" = twohost ] && exit 77
    else
        hosts=dsc$$
        "$twohost" up --name "$hosts" --rate "$rate" >&2
        trap '"$twohost" down --name "$hosts"' EXIT
        # the raw TCP rate from host 2 to host 1 (tools/twohost.sh link)
        "$twohost" link --name "$hosts" > "$out/link.txt"
        echo "two hosts: tools/twohost.sh --rate $rate, one rank per host; $(cat "$out/link.txt")" >> "$out/env.txt"
        cat "$out/link.txt" >&2
        series twohost
    fi
fi
"$py" "$here/bench/ds_table.py" "$out" > "$out/table.md"
cat "$out/table.md"
