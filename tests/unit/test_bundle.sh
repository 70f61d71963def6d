#!/usr/bin/env bash
# tools/bundle.sh's promise, checked on this build: the bundle, unpacked in
# another folder and started from a bare environment, runs on its own
# libraries and its own Open MPI.
#   test_bundle.sh SOURCE_DIR BUILD_DIR WORK_DIR
#   1. every library the programs and libzero-engine load resolves inside
#      the bundle, but glibc's, libgcc_s and libstdc++ (the target's own);
#   2. mpirun is the bundle's and loads Open MPI's components from the
#      bundle, none from /usr (the mpirun process's own memory map);
#   3. engine-run starts 2 ranks of train_cls through it and they train.
set -euo pipefail
src=$1 build=$2 work=$3
rm -rf "$work"
mkdir -p "$work/moved"
fail() { echo "test_bundle: FAIL: $*" >&2; exit 1; }

"$src/tools/bundle.sh" "$build" "$work/b.tar"
tar xf "$work/b.tar" -C "$work/moved"
rm -rf "$work/b" "$work/b.tar" # the folder it was made in is gone
B=$work/moved/b
run() {
  env -i HOME="$work" PATH=/usr/bin:/bin OMPI_ALLOW_RUN_AS_ROOT=1 \
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 bash -c ". '$B/env.sh'; $1"
}

libs=$(run "ldd '$B/bin/train_cls' '$B/bin/engine-run' '$B/lib/libzero-engine.so.0'")
if echo "$libs" | grep -q "not found"; then fail "unresolved: $(echo "$libs" | grep 'not found')"; fi
outside=$(echo "$libs" | awk '/=> \// {print $3}' | grep -v "^$B/lib/" |
          grep -v -E '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+)\.so' || true)
[ -z "$outside" ] || fail "loaded from outside the bundle: $(echo $outside)"
echo "test_bundle: libraries: all from $B/lib or glibc"

[ "$(run 'command -v mpirun')" = "$B/ompi/usr/bin/mpirun" ] || fail "mpirun is not the bundle's"
maps=$(run "mpirun -n 1 bash -c 'cat /proc/\$PPID/maps'")
n_in=$(echo "$maps" | grep -c "$B/ompi/usr/lib/.*/openmpi/lib/openmpi3/mca_" || true)
n_out=$(echo "$maps" | grep -c " /usr/lib/.*/openmpi/" || true)
[ "$n_in" -gt 0 ] && [ "$n_out" -eq 0 ] ||
  fail "Open MPI components: $n_in mapped from the bundle, $n_out from /usr"
echo "test_bundle: mpirun: $n_in component mappings from the bundle, none from /usr"

run "gen_sentences --rows 200 --seed 3 --out '$work/data.csv'" > /dev/null
out=$(run "engine-run --np 2 --config '$src/configs/ds_config.json' train_cls \
  --data '$work/data.csv' --max-steps 3 --max-seq-len 32 --layers 1 --hidden 32 --heads 2 \
  --intermediate 64 --seed 1" 2>&1) || fail "train_cls through the bundle: $(echo "$out" | tail -5)"
echo "$out" | grep -q "step 3/3" || fail "no step 3 in: $(echo "$out" | tail -5)"
echo "test_bundle: engine-run --np 2 train_cls: 3 steps"
echo "test_bundle: ok"
