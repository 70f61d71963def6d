#!/usr/bin/env bash
# GPT-2 training throughput and memory, zero-engine against PyTorch in the
# same session (issue 13): bench/bench_lm (ZeRO stages 0-3 at 2 ranks x 1
# thread, stage 0 at 1 rank x 2 threads, activation checkpointing on and off)
# and bench/bench_pytorch_gpt2.py (transformers' GPT2LMHeadModel, eager and
# sdpa attention, 1 process x 2 threads and 2 processes x 1 thread with DDP),
# interleaved, --reps times over. Writes OUT/runs.jsonl (one record per run)
# and OUT/table.md (bench/lm_table.py).
#
#   bench/lm_speed.sh [--build build-bench] [--python /root/venv/bin/python]
#                     [--reps 3] [--steps 3] [--warmup 1] [--out /tmp/lm_speed]
#                     [--quiet-idle 85] [--max-wait 300] [-- extra model flags]
#
# Extra flags after "--" go to both programs (e.g. "-- --layers 2 --hidden
# 128 --heads 4 --vocab 1000 --seq 64" for a quick check of the script).
#
# The machine may be shared: before each run the script waits (up to
# --max-wait seconds) until the CPUs were at least --quiet-idle percent idle
# over 2 seconds, and it records, per run, how much CPU time OTHER processes
# took while it ran ("others", in cores: (busy time of the machine - the
# run's own user+sys time) / wall time). bench/lm_table.py prints it next to
# every figure, so a disturbed run can be seen, and it takes the median over
# the repetitions.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build-bench
py=/root/venv/bin/python
reps=3 steps=3 warmup=1 out=/tmp/lm_speed quiet_idle=85 max_wait=300
extra=()
while [ $# -gt 0 ]; do
    case $1 in
        --build) build=$2; shift 2 ;;
        --python) py=$2; shift 2 ;;
        --reps) reps=$2; shift 2 ;;
        --steps) steps=$2; shift 2 ;;
        --warmup) warmup=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --quiet-idle) quiet_idle=$2; shift 2 ;;
        --max-wait) max_wait=$2; shift 2 ;;
        --) shift; extra=("$@"); break ;;
        -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
        *) echo "lm_speed.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
bench=$build/bench/bench_lm
[ -x "$bench" ] || { echo "lm_speed.sh: $bench not built" >&2; exit 1; }
mkdir -p "$out"
runs=$out/runs.jsonl
: > "$runs"
root_flag=()
[ "$(id -u)" = 0 ] && root_flag=(--allow-run-as-root)
mpi=(mpirun "${root_flag[@]}" --oversubscribe --bind-to none --mca btl self,vader,tcp
     -x OMP_NUM_THREADS=1 -np 2)
common=(--steps "$steps" --warmup "$warmup" "${extra[@]}")

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
ncpu=$(nproc)
# run LABEL REP CMD...: one run, its JSON line with the conditions added
run() {
    local label=$1 rep=$2; shift 2
    local iw idle waited b1 t1 b2 t2 log=$out/$label.rep$rep.log
    iw=$(wait_quiet); idle=${iw% *}; waited=${iw#* }
    read -r b1 t1 < <(cpu_now)
    local s0; s0=$(date +%s.%N)
    /usr/bin/time -f '%U %S' -o "$out/time.txt" "$@" > "$log" 2>&1 || {
        echo "lm_speed.sh: $label failed, see $log" >&2; tail -5 "$log" >&2; return 1; }
    local s1; s1=$(date +%s.%N)
    read -r b2 t2 < <(cpu_now)
    local own; own=$(awk '{print $1 + $2}' "$out/time.txt")
    local others; others=$(awk -v b="$((b2 - b1))" -v hz="$hz" -v own="$own" -v w0="$s0" -v w1="$s1" \
        'BEGIN { o = (b / hz - own) / (w1 - w0); if (o < 0) o = 0; printf "%.2f", o }')
    local json; json=$(grep '^bench_lm_json: ' "$log" | tail -1 | sed 's/^bench_lm_json: //')
    [ -n "$json" ] || { echo "lm_speed.sh: $label printed no result, see $log" >&2; return 1; }
    "$py" -c 'import json, sys
r = json.loads(sys.argv[1])
r.update(label=sys.argv[2], rep=int(sys.argv[3]), idle_before=int(sys.argv[4]),
         waited_s=int(sys.argv[5]), others_cores=float(sys.argv[6]), wall_s=float(sys.argv[7]))
print(json.dumps(r))' "$json" "$label" "$rep" "$idle" "$waited" "$others" \
        "$(awk -v a="$s0" -v b="$s1" 'BEGIN{printf "%.1f", b - a}')" >> "$runs"
    echo "lm_speed.sh: rep $rep $label: $(tail -1 "$runs" | "$py" -c 'import json, sys
r = json.loads(sys.stdin.read())
print("{tokens_per_s:.1f} tokens/s, steps {step_s} s, {gflops:.0f} GFLOP/s, idle before {idle_before}%, others {others_cores:.2f} cores".format(**r))')" >&2
}

{
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "repository HEAD: $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown) (the programs: $build)"
    echo "cpu: $(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo), $ncpu cpus"
    echo "flags: $(grep -m1 -o -w -E 'avx512f|avx2|fma|avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
    echo "mem: $(awk '/MemTotal/{printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
    echo "OPENBLAS_CORETYPE: ${OPENBLAS_CORETYPE:-unset}"
    echo "openblas: $(dpkg-query -W -f '${Package} ${Version}' libopenblas0-openmp 2>/dev/null || echo unknown)"
    echo "mpi: $(mpirun --version 2>/dev/null | head -1)"
    echo "python: $("$py" -c 'import torch, transformers, sys; print(sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__, "blas", "mkl" if torch.backends.mkl.is_available() else "other", torch.backends.cpu.get_cpu_capability())')"
    echo "bench args: steps $steps warmup $warmup ${extra[*]}"
} > "$out/env.txt"
cat "$out/env.txt" >&2

for rep in $(seq 1 "$reps"); do
    # interleaved: each engine run sits between PyTorch runs
    run pt_1x2_eager "$rep" env OMP_NUM_THREADS=2 "$py" "$here/bench/bench_pytorch_gpt2.py" --procs 1 --threads 2 --attn eager "${common[@]}"
    run zs0_1x2 "$rep" env OMP_NUM_THREADS=2 "$bench" --stage 0 "${common[@]}"
    run pt_1x2_sdpa "$rep" env OMP_NUM_THREADS=2 "$py" "$here/bench/bench_pytorch_gpt2.py" --procs 1 --threads 2 --attn sdpa "${common[@]}"
    run zs0_2x1 "$rep" env OMP_NUM_THREADS=1 "${mpi[@]}" "$bench" --stage 0 "${common[@]}"
    run pt_2x1_eager "$rep" env OMP_NUM_THREADS=1 "$py" "$here/bench/bench_pytorch_gpt2.py" --procs 2 --threads 1 --attn eager "${common[@]}"
    run zs1_2x1 "$rep" env OMP_NUM_THREADS=1 "${mpi[@]}" "$bench" --stage 1 "${common[@]}"
    run zs2_2x1 "$rep" env OMP_NUM_THREADS=1 "${mpi[@]}" "$bench" --stage 2 "${common[@]}"
    run pt_2x1_sdpa "$rep" env OMP_NUM_THREADS=1 "$py" "$here/bench/bench_pytorch_gpt2.py" --procs 2 --threads 1 --attn sdpa "${common[@]}"
    run zs3_2x1 "$rep" env OMP_NUM_THREADS=1 "${mpi[@]}" "$bench" --stage 3 "${common[@]}"
    run zs0_1x2_ckpt "$rep" env OMP_NUM_THREADS=2 "$bench" --stage 0 --activation-checkpointing 1 "${common[@]}"
    run zs3_2x1_ckpt "$rep" env OMP_NUM_THREADS=1 "${mpi[@]}" "$bench" --stage 3 --activation-checkpointing 1 "${common[@]}"
done
"$py" "$here/bench/lm_table.py" "$out" > "$out/table.md"
cat "$out/table.md"
