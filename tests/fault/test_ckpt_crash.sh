#!/bin/sh
# Kill a rank (SIGKILL, through DS_FAULT_INJECT) at every stage of a save and
# show that the previous checkpoint still loads and verifies, and that the
# next save succeeds over the debris. test_ckpt_crash.c has the phases.
#
#   test_ckpt_crash.sh BIN WORKDIR MPIRUN [FLAGS...]
set -u
bin=$1 work=$2
shift 2
rm -rf "$work"
mkdir -p "$work/base"
"$@" -np 2 "$bin" --phase base --dir "$work/base/ckpt" --work "$work/base" || {
    echo "FAIL: the base save did not complete"; exit 1; }
fails=0
# site:rank  the checkpoint latest must name afterwards
for case in mid_shard_write:1:2 after_shard_write:0:2 after_shard_write:1:2 before_meta:0:2 \
            after_meta:0:2 after_rename:0:2 after_latest:0:3; do
    site=${case%%:*} rest=${case#*:}
    rank=${rest%%:*} expect=${rest#*:}
    dir="$work/$site.$rank"
    cp -r "$work/base" "$dir"
    echo "== kill rank $rank at ckpt:$site"
    DS_FAULT_INJECT="ckpt:$site:rank=$rank" "$@" -np 2 -x DS_FAULT_INJECT "$bin" --phase crash \
        --dir "$dir/ckpt" --work "$dir" >"$dir/crash.log" 2>&1
    rc=$?
    if [ $rc -eq 0 ] || grep -q "never fired" "$dir/crash.log"; then
        echo "FAIL: the save at ckpt:$site survived (exit $rc)"; cat "$dir/crash.log"
        fails=$((fails + 1)); continue
    fi
    grep -q "kills itself at ckpt:$site" "$dir/crash.log" || {
        echo "FAIL: rank $rank did not die at ckpt:$site"; cat "$dir/crash.log"
        fails=$((fails + 1)); continue; }
    echo "   left: $(cd "$dir/ckpt" && ls -d * | tr '\n' ' ')"
    "$@" -np 2 "$bin" --phase check --dir "$dir/ckpt" --work "$dir" --expect "$expect" ||
        fails=$((fails + 1))
done
[ $fails -eq 0 ] && rm -rf "$work"
exit $fails
