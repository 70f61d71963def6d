#!/usr/bin/env bash
# The BERT-mini training step's profile in steady state: the timed steps of
# bench_train alone, without start-up (model init, data set, engine plan) or
# warm-up, and its rate against its GEMMs at OpenBLAS's rates (issue 17).
#
#   bench/step_profile.sh BUILD [STEPS] [WARMUP] [OUT]
#
# BUILD is a build folder (bench/bench_train, bench/bench_kernels), STEPS the
# timed steps (default 12), WARMUP the steps before them (default 2), OUT a
# folder for perf's files (default a new temporary one). One thread
# (OMP_NUM_THREADS=1), so CPU samples are the step's time. bench_train
# --perf-ctl turns perf's events on at the first timed step and off after the
# last, through a pair of fifos (perf record / stat -D -1 --control fd:...).
#
# Prints: the load average before and after, the CPU ms per step (perf stat
# task-clock of the timed steps / STEPS), the profile by kind and by symbol
# (bench/step_profile.py) and, from bench_kernels' BERT-mini GEMM table of the
# same run, the step's rate against its GEMMs' at OpenBLAS's rates; last,
# bench_train --gemm-replay's line: the same ratio with the step's own GEMM
# calls replayed alone after each step (wall clock, in one process).
# Set STEP_PROFILE_KERNELS=0 to skip bench_kernels (about a minute).
set -euo pipefail
if [ $# -lt 1 ]; then
    echo "usage: $0 BUILD [STEPS] [WARMUP] [OUT]" >&2
    exit 2
fi
build=$1 steps=${2:-12} warmup=${3:-2}
out=${4:-$(mktemp -d /tmp/step_profile.XXXXXX)}
here=$(cd "$(dirname "$0")" && pwd)
train=$build/bench/bench_train
[ -x "$train" ] || { echo "$0: no $train" >&2; exit 2; }
mkdir -p "$out"
ctl=$out/ctl.fifo ack=$out/ack.fifo
rm -f "$ctl" "$ack"
mkfifo "$ctl" "$ack"
exec {ctl_fd}<>"$ctl" {ack_fd}<>"$ack"
export OMP_NUM_THREADS=1
args=(--stage 0 --steps "$steps" --warmup "$warmup" --perf-ctl "$ctl_fd,$ack_fd")

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
perf stat -x, -e task-clock -D -1 --control "fd:$ctl_fd,$ack_fd" -o "$out/stat.csv" \
    "$train" "${args[@]}" > "$out/train_stat.txt"
ms=$(awk -F, -v n="$steps" '$3 == "task-clock" { printf "%.1f", $1 / n }' "$out/stat.csv")
echo "CPU per step (task-clock of $steps timed steps / $steps): $ms ms"

perf record -q -F 999 -g -o "$out/perf.data" -D -1 --control "fd:$ctl_fd,$ack_fd" \
    "$train" "${args[@]}" > "$out/train_record.txt" 2> "$out/record.err"
perf script -i "$out/perf.data" 2> /dev/null > "$out/script.txt"
grep "samples/s" "$out/train_record.txt" || true

# The same steps again, each followed by its GEMMs replayed alone in the
# same process (bench/gemm_replay.h): the ratio to OpenBLAS from one phase of
# the host, where the one below compares with bench_kernels' run a minute on.
"$train" --stage 0 --steps "$steps" --warmup "$warmup" --gemm-replay 1 > "$out/train_replay.txt"

kern=()
if [ "${STEP_PROFILE_KERNELS:-1}" != 0 ] && [ -x "$build/bench/bench_kernels" ]; then
    OMP_WAIT_POLICY=passive "$build/bench/bench_kernels" --threads 1 --clock cpu --secs 0.15 \
        --model bert > "$out/kernels.txt"
    kern=(--kernels "$out/kernels.txt" --step-ms "$ms")
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 "$here/step_profile.py" "$out/script.txt" "${kern[@]}"
grep "gemm replay" "$out/train_replay.txt" || true
echo "(files in $out)"
