#!/bin/sh
# Three process groups in turn: the straight run (NP2 ranks, stage S2, 2K
# steps), the first half (NP1 ranks, stage S1, K steps, save) and the second
# half (NP2 ranks, stage S2, load, K steps), which compares itself with the
# straight run (test_ckpt_resume.c says what it checks).
#
#   test_ckpt_resume.sh BIN WORKDIR K TOL NP1 S1 NP2 S2 MODEL PRECISION DROPOUT MPIRUN [FLAGS...]
set -eu
bin=$1 work=$2 k=$3 tol=$4 np1=$5 s1=$6 np2=$7 s2=$8 model=$9
shift 9
precision=$1 dropout=$2
shift 2
# CK_EXTRA: more arguments for every phase (--nvme DIR: state swapped to DIR)
common="--model $model --precision $precision --dropout $dropout ${CK_EXTRA:-}"
rm -rf "$work"
mkdir -p "$work"
echo "== straight: $np2 rank(s), stage $s2, $((2 * k)) steps"
"$@" -np "$np2" "$bin" --mode straight --steps $((2 * k)) --out "$work/straight" \
    --stage "$s2" $common
echo "== first: $np1 rank(s), stage $s1, $k steps, save"
"$@" -np "$np1" "$bin" --mode first --steps "$k" --dir "$work/ckpt" --out "$work/first" \
    --stage "$s1" $common
echo "== second: a new process group of $np2 rank(s), stage $s2: load, $k steps"
"$@" -np "$np2" "$bin" --mode second --steps "$k" --dir "$work/ckpt" --out "$work/second" \
    --ref "$work/straight" --saved "$work/first" --tol "$tol" --stage "$s2" $common
rm -rf "$work"
