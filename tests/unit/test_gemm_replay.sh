#!/usr/bin/env bash
# bench_train --gemm-replay (bench/gemm_replay.h) records the GEMM calls of a
# BERT-mini step through the backend's slot and replays them alone: the
# FLOPs of the calls it recorded must be the matmul FLOPs bench_train counts
# from the model's shapes (66.2 GFLOP per step at batch 32 x 128), and both
# replays must run. A product of the full layers missed or recorded twice
# moves the sum by 0.27 GFLOP or more (the smallest, one layer's attention
# scores); the [CLS]-row products of the last layer, the pooler's and the
# classifier's are below the tolerance, which is the rounding of the printed
# figures (bench_train prints the count to 0.1 GFLOP, the recording to 0.01).
# --gemm-replay 2 also times them by shape: the shapes' lines must hold every
# recorded call once (their call counts add up to the recording's), their
# GFLOP the recording's, their shares of the time 100%.
#
#   tests/unit/test_gemm_replay.sh BENCH_TRAIN
set -u
out=$("$1" --stage 0 --steps 1 --warmup 1 --gemm-replay 2 2>&1) ||
  { echo "$out"; echo "test_gemm_replay: FAILED (bench_train exited non-zero)"; exit 1; }
counted=$(echo "$out" | sed -n 's/.*executed \([0-9.]*\) GFLOP\/step.*/\1/p')
recorded=$(echo "$out" | sed -n 's/.*calls per step recorded, \([0-9.]*\) GFLOP;.*/\1/p')
calls=$(echo "$out" | sed -n 's/.*gemm replay: \([0-9]*\) GEMM calls.*/\1/p')
if [ -z "$counted" ] || [ -z "$recorded" ] || [ -z "$calls" ]; then
  echo "$out"
  echo "test_gemm_replay: FAILED (no count, recording or call count in the output)"
  exit 1
fi
# 0.055: half a unit of the count's last printed digit (0.05) plus half of the
# recording's (0.005)
if ! awk -v c="$counted" -v r="$recorded" 'BEGIN { d = c - r; if (d < 0) d = -d; exit !(d <= 0.055) }'; then
  echo "$out"
  echo "test_gemm_replay: FAILED (recorded $recorded GFLOP in $calls calls, counted $counted)"
  exit 1
fi
# by shape: "...: N calls, G GFLOP, S s, R GFLOP/s (fastest call F), P% of the GEMMs' time"
shapes=$(echo "$out" | sed -n 's/.*gemm replay by shape: .*: *\([0-9]*\) calls, *\([0-9.]*\) GFLOP, .*, *\([0-9.]*\)% of the GEMMs.*/\1 \2 \3/p')
if [ -z "$shapes" ]; then
  echo "$out"
  echo "test_gemm_replay: FAILED (no line by shape with --gemm-replay 2)"
  exit 1
fi
# tolerances: each line's GFLOP is printed to 0.01 and its share to 0.1, so
# their sums may be off by half a unit per line
if ! echo "$shapes" | awk -v calls="$calls" -v rec="$recorded" '
    { n++; c += $1; g += $2; p += $3 }
    END { dg = g - rec; if (dg < 0) dg = -dg; dp = p - 100; if (dp < 0) dp = -dp;
          exit !(c == calls && dg <= 0.005 * (n + 1) && dp <= 0.05 * n) }'; then
  echo "$out"
  echo "test_gemm_replay: FAILED (the lines by shape do not add up to $calls calls, $recorded GFLOP, 100%)"
  exit 1
fi
echo "test_gemm_replay: ok ($calls calls, $recorded GFLOP recorded, $counted counted, $(echo "$shapes" | wc -l) shapes)"
