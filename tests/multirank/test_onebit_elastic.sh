#!/bin/sh
# 1-bit Adam and 0/1 Adam checkpoints resumed at another world size
# (tests/multirank/test_onebit_local.c, part 4): each optimizer saves at
# 2 ranks, then resumes at 1 and at 4 ranks and compares its loss with the
# 2-rank run that never stopped.
#
#   test_onebit_elastic.sh BIN WORKDIR MPIRUN [FLAGS...]
set -eu
bin=$1 work=$2
shift 2
rm -rf "$work"
mkdir -p "$work"
for type in ZeroOneAdam OneBitAdam; do
  "$@" -np 2 "$bin" save "$work" "$type"
  for np in 1 4; do
    "$@" -np "$np" "$bin" resume "$work" "$type"
  done
done
rm -rf "$work"
