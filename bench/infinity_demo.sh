#!/bin/sh
# ZeRO-Infinity demonstration (issue 14, item 7): the disk's own sequential
# throughput (dd, direct I/O, 4 GiB) and bench_infinity in the same run.
#   bench/infinity_demo.sh BUILD_DIR SWAP_DIR [bench_infinity options]
# The swap folder is emptied afterwards.
set -eu
build=$1 dir=$2
shift 2
mkdir -p "$dir"
f="$dir/dd_probe"
echo "dd write (oflag=direct, 4 GiB):"
dd if=/dev/zero of="$f" bs=16M count=256 oflag=direct 2>&1 | tail -1
echo "dd read (iflag=direct, 4 GiB):"
dd if="$f" of=/dev/null bs=16M iflag=direct 2>&1 | tail -1
rm -f "$f"
OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} /usr/bin/time -v "$build/bench/bench_infinity" --dir "$dir" "$@" \
    2> "$dir/time.txt" | grep -v '^\[zero-engine\]   \|^\[zero-engine\] \(batch\|optimizer\|scheduler\|DeepSpeed\|other\)'
grep -E 'Maximum resident|Elapsed' "$dir/time.txt"
rm -f "$dir/time.txt"
