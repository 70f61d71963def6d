#!/usr/bin/env bash
# "Bring your own model" from the outside: installs the built project into a
# temporary prefix, builds examples/conv_regressor (a model written against
# the installed headers only) with the README's command, runs its gradient
# check, then trains it at ZeRO stages 0-3 on 1 and 2 ranks, plus stage 3 with
# activation checkpointing started through the installed engine-run, and
# checks the loss curves:
#   - every run starts from the same loss (same initialisation whatever the
#     stage and world size): step 1 within 1e-6 relative of the reference;
#   - every curve stays within 1e-4 relative of the 1-rank stage-0 curve at
#     every step;
#   - the model learns: the reference's mean loss over the last 5 steps is
#     below 0.2x its mean over the first 5, and every run's held-out mean
#     squared error is below 0.2 (the targets have variance 1, so predicting
#     their mean scores about 1).
# Tolerances: on one rank stages 0-3 take the same arithmetic in the same
# order, and measured bit-identical curves. On two ranks a step's loss is the
# mean of two half-batch means and the gradients are summed across ranks, so
# the sums are ordered differently: step 1 measured 3.8e-8 relative (a few
# fp32 ulps), the largest deviation over 100 steps 1.04e-6. 1e-6 and 1e-4
# leave 25x and 100x room; a gradient not reduced, or a shard not updated,
# moves the curve by 1e-2 or more within a few steps.
#
#   test_conv_example.sh BUILD_DIR SOURCE_DIR "MPIRUN FLAGS"
set -euo pipefail
build_dir=$1
src_dir=$2
mpirun_flags=${3:-}
steps=100

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
cmake --install "$build_dir" --prefix "$prefix" >/dev/null
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig:$prefix/lib/x86_64-linux-gnu/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"

# The user's copy of the example, built as the README says (plus -Werror, so
# that a warning fails the test).
cp -r "$src_dir/examples/conv_regressor" "$work/conv"
cd "$work/conv"
# shellcheck disable=SC2046
cc -std=c11 -O2 -Wall -Wextra -Werror train.c conv_model.c \
   $(pkg-config --cflags --libs zero-engine) -lm -o conv_train
# shellcheck disable=SC2046
cc -std=c11 -O2 -Wall -Wextra -Werror gradcheck.c conv_model.c \
   $(pkg-config --cflags --libs zero-engine) -lm -o gradcheck
./gradcheck

# One config per stage, from the example's own.
for s in 0 1 2 3; do
    sed "s/\"stage\": 2/\"stage\": $s/" ds_config.json > "zero$s.json"
    grep -q "\"stage\": $s" "zero$s.json" || { echo "FAIL: could not set stage $s"; exit 1; }
done
# Stage 3 with activation checkpointing: the section's presence turns it on;
# the convs' forward is recomputed in backward and must give the same values.
sed 's/"zero_optimization"/"activation_checkpointing": {},\n  "zero_optimization"/' zero3.json \
    > zero3_ckpt.json
grep -q activation_checkpointing zero3_ckpt.json || { echo "FAIL: no ckpt section"; exit 1; }

export OMP_NUM_THREADS=1
runs=()
# run NAME COMMAND...: stdout into NAME.log, stderr into NAME.err; a run that
# fails says which it was, its exit status and the end of both (the folder is
# removed at exit). One exception, run once more: Open MPI 4's race at a
# rank's exit (open-mpi/ompi#7833, a hello world fails once in 1000-2000
# launches there), where mpirun reports a rank "with PID 0" (engine-run:
# "pid 0") as ended without MPI_Finalize although the program had finished:
# rank 0's last line, the held-out error, is in the log. Seen twice in CI
# (stops 40 and 41), never in 37 runs here under load.
run() {
    local name=$1 rc=0
    shift
    "$@" > "$name.log" 2> "$name.err" || rc=$?
    if [ $rc -ne 0 ] && grep -q "^held-out mse" "$name.log" &&
       grep -qE "with PID 0 on|pid 0: mpirun lost track" "$name.err"; then
        echo "note: run $name: Open MPI's race at exit after the program finished" \
             "(open-mpi/ompi#7833); running it once more"
        rc=0
        "$@" > "$name.log" 2> "$name.err" || rc=$?
    fi
    if [ $rc -ne 0 ]; then
        echo "FAIL: run $name exited with status $rc; the end of its output:"
        tail -5 "$name.log"
        tail -20 "$name.err"
        exit 1
    fi
    runs+=("$name")
}
for s in 0 1 2 3; do
    run "np1_stage$s" ./conv_train --config "zero$s.json" --steps $steps
    # shellcheck disable=SC2086
    run "np2_stage$s" mpirun $mpirun_flags -np 2 -x OMP_NUM_THREADS ./conv_train \
        --config "zero$s.json" --steps $steps
done
# The README's launcher line: engine-run finds no MPI job and starts mpirun.
run np2_stage3_ckpt "$prefix/bin/engine-run" --np 2 --config zero3_ckpt.json ./conv_train \
    --steps $steps

ref=np1_stage0.log
status=0
printf '%-16s %12s %12s %14s %10s\n' run "step 1" "step $steps" "max rel dev" held-out
for r in "${runs[@]}"; do
    if ! awk -v steps=$steps -v run="$r" '
        # first file: the reference curve; second: this run
        FNR == NR { if ($1 == "step") ref[$2] = $4; next }
        $1 == "step" { n++; loss[$2] = $4 }
        $1 == "held-out" { held = $3 }
        END {
            if (n != steps) { printf "FAIL %s: %d loss lines, want %d\n", run, n, steps; exit 1 }
            worst = 0
            for (i = 1; i <= steps; i++) {
                if (!(i in loss) || !(i in ref)) { printf "FAIL %s: no step %d\n", run, i; exit 1 }
                d = (loss[i] - ref[i]) / ref[i]; if (d < 0) d = -d
                if (d > worst) worst = d
                if (i == 1 && d > 1e-6) {
                    printf "FAIL %s: initial loss %.9g, reference %.9g\n", run, loss[1], ref[1]
                    exit 1
                }
            }
            printf "%-16s %12.9f %12.9f %14.3e %10s\n", run, loss[1], loss[steps], worst, held
            if (worst > 1e-4) { printf "FAIL %s: deviates %.3g from the reference\n", run, worst; exit 1 }
            if (held == "" || held + 0 >= 0.2) { printf "FAIL %s: held-out mse %s\n", run, held; exit 1 }
        }' "$ref" "$r.log"; then
        status=1
    fi
done

# Learning, on the reference: the first five and the last five steps.
awk -v steps=$steps '
    $1 == "step" && $2 <= 5 { first += $4 / 5 }
    $1 == "step" && $2 > steps - 5 { last += $4 / 5 }
    END {
        printf "reference: mean loss of steps 1-5 %.4f, of steps %d-%d %.4f\n", first, steps - 4, steps, last
        if (!(last < 0.2 * first)) { print "FAIL: the model did not learn"; exit 1 }
    }' "$ref" || status=1
# flops_profiler on a model built outside the library against the installed
# headers: its modules' GEMMs are counted as the bundled models' are (issue
# 16 item 4): every conv has forward FLOPs in the detailed table.
sed 's/"zero_optimization"/"flops_profiler": {"enabled": true, "profile_step": 2, "output_file": "flops.txt"},\n  "zero_optimization"/' \
    ds_config.json > flops.json
if ./conv_train --config flops.json --steps 3 > flops_run.log 2>&1; then
    n=$(grep -Ec '^conv\.[012] +cr_conv1d +[0-9.]+ +[0-9.]+% +[1-9][0-9.]* [KMG] ' flops.txt)
    [ "$n" = 3 ] || { echo "FAIL: flops_profiler: $n conv rows with forward FLOPs, want 3"; status=1; }
else
    echo "FAIL: conv_train with flops_profiler: $(tail -2 flops_run.log)"
    status=1
fi
[ $status -eq 0 ] && echo "conv example: all runs agree and learn"
exit $status
