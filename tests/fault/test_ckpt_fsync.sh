#!/bin/sh
# Crash consistency beyond SIGKILL: a SIGKILL keeps the page cache, so the
# crash tests cannot show that a checkpoint reaches the disk. Here strace
# records the system calls of two saves (2 ranks): the first into a folder
# that does not exist yet, the second replacing that tag (the atomic
# exchange). tests/fault/fsync_order.c then checks the ordering rule of
# crash-consistency checkers on each: every file's bytes fsynced before the
# rename that publishes them, every entry synced by the process that made it,
# the folder fsynced after each rename and before the next (latest replaced
# the same way), a new checkpoint folder's parent synced. With --drop-each it
# also leaves out each fsync of the save in turn and shows that every one of
# them breaks a rule: the test fails if a save ever loses one.
#
#   test_ckpt_fsync.sh CHECKER SAVE_BIN WORKDIR MPIRUN [FLAGS...]
# Exit 77 (skipped) when strace is missing or may not trace here.
set -u
checker=$1 bin=$2 work=$3
shift 3
if ! command -v strace >/dev/null; then
    echo "SKIP: strace is not installed (Debian package strace)"
    exit 77
fi
rm -rf "$work"
mkdir -p "$work/run"
work=$(cd "$work" && pwd -P)
if ! strace -qq -e trace=none true 2>"$work/probe.txt"; then
    echo "SKIP: strace cannot trace here: $(cat "$work/probe.txt")"
    exit 77
fi
fails=0
for phase in base resave; do
    strace -f -qq -s 0 -y -o "$work/$phase.trace" \
        -e trace=openat,creat,write,pwrite64,fsync,fdatasync,rename,renameat,renameat2,mkdir,mkdirat \
        "$@" -np 2 "$bin" --phase "$phase" --dir "$work/run/ckpt" --work "$work/run" \
        >"$work/$phase.log" 2>&1 || { echo "FAIL: the $phase save"; cat "$work/$phase.log"; exit 1; }
    echo "== $phase save"
    "$checker" --drop-each "$work/run/ckpt" "$work/$phase.trace" || fails=$((fails + 1))
done
[ $fails -eq 0 ] && rm -rf "$work"
exit $fails
