#!/usr/bin/env bash
# tools/test_sanitize.sh: build with DS_SANITIZE (AddressSanitizer,
# UndefinedBehaviorSanitizer, LeakSanitizer) into a build folder of its own
# and run the unit and multi-rank tests under it. .ci/run calls it after
# tools/test.sh; exits with ctest's status.
#
# Environment:
#   ASAN_BUILD_DIR  build directory (default build-asan)
#   CTEST_JOBS      tests at once (default 2), as in tools/test.sh
#   CMAKE_ARGS      extra cmake arguments, split on spaces
#
# Undefined behaviour stops the program (-fno-sanitize-recover, CMakeLists),
# so a test that meets it fails. Leaks fail too, except Open MPI's own
# (tests/sanitizer/lsan.supp names its libraries, and only them).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${ASAN_BUILD_DIR:-build-asan}
# shellcheck disable=SC2086 # CMAKE_ARGS is a list of words on purpose
# No benchmarks (DS_BENCH=OFF): no test runs them, and timing under the
# sanitizers measures nothing.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDS_WERROR=ON -DDS_SANITIZE=ON \
  -DDS_CUDA=OFF -DDS_BENCH=OFF ${CMAKE_ARGS:-}
cmake --build "$build" -j "$(nproc)"
# Open MPI's components stay loaded to the end (keep_modules.c, preloaded
# into every process of a test: built here without sanitizers, since the
# shell and mpirun load it too), so LeakSanitizer names them in the fast
# unwinder's stacks and lsan.supp can match them. verify_asan_link_order=0:
# the preloaded library comes before the ASan runtime, which is harmless here
# because it defines only dlclose. (The DWARF unwinder, fast_unwind_on_malloc=0,
# finds whole stacks through libmpi instead, but made this stage 3x slower.)
keep=$(cd "$build" && pwd)/keep_modules.so
cc -shared -fPIC -O2 -o "$keep" tests/sanitizer/keep_modules.c
export LD_PRELOAD="$keep${LD_PRELOAD:+:$LD_PRELOAD}"
export ASAN_OPTIONS="verify_asan_link_order=0:detect_leaks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
# use_tls=0: LeakSanitizer does not scan threads' thread-local storage for
# pointers. On an AMD EPYC (Zen 4) VM its tracer crashed while doing so at
# the exit of a 2-rank train_cls ("Tracer caught signal 11: addr=0xc50", a pc
# inside libasan), in every run of test_train_cls_ckpt's first command (6 of
# 6, the suite's retry included), and with use_tls=0 never; on the other
# hosts only now and then (below). What only thread-local storage holds is
# the C runtime's own (lsan.supp: libgomp's per-thread state, libc's dlerror
# buffer, ld.so's bookkeeping); zero-engine keeps no heap pointer there, and
# test_lsan_probe still sees a leak of its own at 2 ranks.
export LSAN_OPTIONS="suppressions=$PWD/tests/sanitizer/lsan.supp:print_suppressions=0:use_tls=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
# The gradient checks compare at most 64 entries of each tensor here (600 in
# tools/test.sh): every code path still runs under the sanitizers, and each
# entry is two forward passes, 15x slower with them (test_gradcheck_models
# took 23.5 s of this stage, 1.6 s in tools/test.sh).
export GC_MAX_PER_TENSOR=${GC_MAX_PER_TENSOR:-64}
# A test that fails is run once more, and its first failure stays in the
# log (--output-on-failure): in one full run on the loaded 2-core machine
# LeakSanitizer's own tracer crashed at exit ("Tracer caught signal 11",
# "LeakSanitizer has encountered a fatal error") in four launcher_nodes_*
# tests in a row, in a plain engine-run --np 2 train_cls that exits 0, and
# the same binaries passed those tests in 3 later runs (alone, at -j2 and
# beside two busy loops). A crash of the sanitizer is not a finding about
# the program; a real leak or error fails both runs. (That crash was the one
# use_tls=0 above avoids.)
# Label nosan: tests whose time is deliberate waiting, or the same code as a
# sibling that stays, over another transport (each says why in tests/*.cmake);
# about 40 s of the stage.
exec ctest --test-dir "$build" -L 'unit|multirank' -LE nosan --output-on-failure \
  -j "${CTEST_JOBS:-2}" --repeat until-pass:2
