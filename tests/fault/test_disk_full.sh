#!/usr/bin/env bash
# A full disk loses nothing and says so in one line (issue 15, item 3).
# Small tmpfs file systems mounted for the test (it needs root or
# CAP_SYS_ADMIN; elsewhere it is skipped with exit 77, saying why):
#
#   save       train_cls at 2 ranks saves into a tmpfs with room for one
#              checkpoint and a half: the save of step 5 works, the save of
#              step 10 runs out of space. The job fails with one line naming
#              the shard file, "No space left on device" and the bytes (free
#              on the file system, held by the shard); latest still names
#              global_step5, which verifies and resumes; nothing of the
#              failed save is left (no global_step10, no global_step10.tmp).
#   z2f        zero_to_fp32 of that checkpoint into a tmpfs too small for the
#              weights, as one file and as a sharded folder: one line naming
#              the file and the bytes; no output under its final name, no
#              .tmp, no folder it made; the checkpoint still verifies.
#   fsize      the same conversion under a file-size limit (ulimit -f, with
#              SIGXFSZ ignored as a job scheduler's limit would be handled):
#              the line names the limit in bytes; nothing is left. This case
#              needs no mount.
#
#   test_disk_full.sh BINDIR WORKDIR
set -u
. "$(dirname "$0")/../unit/test_util.sh"
need_args 2 "BINDIR WORKDIR" $#
bin=$(readlink -f "$1")
rm -rf "$2" && mkdir -p "$2" && cd "$2" || exit 1
work=$(pwd -P)
export OMP_NUM_THREADS=1
mounted=""
cleanup() { for m in $mounted; do umount "$m" 2>/dev/null; done; }
trap cleanup EXIT
# mount_tmpfs DIR BYTES: a tmpfs of BYTES (rounded up to pages) at DIR, or exit 77
mount_tmpfs() {
  mkdir -p "$1"
  if ! mount -t tmpfs -o size=$((($2 + 4095) / 4096 * 4096)) tmpfs "$1" 2>mount.err; then
    echo "skipped: cannot mount a tmpfs for the full disk ($(id -un), $(cat mount.err))"
    exit 77
  fi
  mounted="$1 $mounted"
}

"$bin/gen_sentences" --rows 400 --seed 5 --out data.csv >/dev/null || exit 1
cat >cfg.json <<'JSON'
{"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "zero_optimization": {"stage": 2}, "zero_engine": {"comm_timeout_s": 30}}
JSON
# train DIR STEPS [ARGS]: train_cls at 2 ranks, checkpoints every 5 steps into DIR
train() {
  local d=$1 n=$2
  shift 2
  "$bin/engine-run" --np 2 --config cfg.json train_cls --data data.csv --model bert \
    --layers 2 --hidden 64 --heads 2 --intermediate 128 --max-seq-len 64 --dropout 0 \
    --max-steps "$n" --save-steps 5 --ckpt-dir "$d" "$@" </dev/null
}

# How big one checkpoint is, on the real disk.
train probe 5 >probe.log 2>&1 || { fail "the probe run failed"; tail -5 probe.log; finish; }
size=$(du -sb probe/global_step5 | cut -f1)
echo "one checkpoint: $size bytes"

# ---- save ----
mount_tmpfs full $((size * 3 / 2 + 16384)) # room for one and a half, and the lock and latest
train full 10 >save.log 2>&1
rc=$?
[ "$rc" -ne 0 ] || fail "save: the job exited 0 though its second save cannot fit"
lines=$(grep -c "No space left on device" save.log)
[ "$lines" -eq 1 ] || fail "save: $lines lines say the disk is full, want 1: $(grep 'No space' save.log)"
line=$(grep "No space left on device" save.log)
echo "save: $line"
case "$line" in
*"saving the checkpoint of step 10: "*"full/global_step10.tmp/"*"No space left on device (the file system of "*" bytes free of "*"bytes before compression)"*) ;;
*) fail "save: the line does not name the step, the file, and the bytes" ;;
esac
[ "$(head -n1 full/latest)" = global_step5 ] || fail "save: latest is '$(head -n1 full/latest)', want global_step5"
[ -e full/global_step10 ] && fail "save: full/global_step10 exists after the failed save"
[ -e full/global_step10.tmp ] && fail "save: full/global_step10.tmp was left behind"
"$bin/zero_to_fp32" --verify full >verify.log 2>&1 || fail "save: global_step5 does not verify: $(cat verify.log)"
# it resumes (on the real disk: a copy, as an operator who freed space would)
cp -r full resumed && rm -f resumed/.lock
train resumed 6 --resume >resume.log 2>&1 || fail "save: resuming from global_step5 failed"
grep -q "^train_cls: resumed from resumed/global_step5 at step 5$" resume.log || fail "save: did not resume from step 5"

# ---- z2f: a tmpfs too small for the weights (an eighth of the checkpoint) ----
mount_tmpfs small $((size / 8))
for out in small/model.safetensors small/hf/nested; do
  "$bin/zero_to_fp32" full "$out" >z2f.log 2>&1
  rc=$?
  [ "$rc" -eq 1 ] || fail "z2f $out: exit $rc, want 1"
  [ "$(wc -l <z2f.log)" -eq 1 ] || fail "z2f $out: $(wc -l <z2f.log) lines, want 1: $(cat z2f.log)"
  echo "z2f: $(cat z2f.log)"
  grep -q "^zero_to_fp32: converting: small/.*No space left on device (the file system of small.* bytes free of [0-9]*; the output holds [0-9]* bytes)$" z2f.log ||
    fail "z2f $out: the line does not name the file and the bytes"
  [ -z "$(ls -A small)" ] || fail "z2f $out: left $(ls -A small)"
done
"$bin/zero_to_fp32" --verify full >/dev/null 2>&1 || fail "z2f: the checkpoint no longer verifies"

# ---- fsize: a file-size limit instead of a full disk (no mount needed) ----
mkdir -p lim
(
  trap '' XFSZ
  ulimit -f 64 # bash counts -f in 1024-byte blocks: 64 KiB
  exec "$bin/zero_to_fp32" full lim/model.safetensors
) >fsize.log 2>&1
rc=$?
[ "$rc" -eq 1 ] || fail "fsize: exit $rc, want 1"
echo "fsize: $(cat fsize.log)"
grep -q "^zero_to_fp32: converting: lim/.*File too large (the file-size limit of this process, ulimit -f, is 65536 bytes; the output holds [0-9]* bytes)$" fsize.log ||
  fail "fsize: the line does not name the file and the limit"
[ -z "$(ls -A lim)" ] || fail "fsize: left $(ls -A lim)"

[ $fails -eq 0 ] && cleanup && mounted="" && cd .. && rm -rf "$work"
finish
