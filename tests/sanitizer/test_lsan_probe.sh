#!/bin/sh
# The sanitizer run's leak check keeps its teeth (tools/test_sanitize.sh):
# ASan's fast unwinder with lsan.supp and keep_modules.c must suppress Open
# MPI's own leaks and nothing else. Two runs of lsan_probe at 2 ranks: one
# that leaks nothing of its own exits 0; one that loses 77 bytes per rank in
# probe_alloc fails, and the report names that function. And the library
# imports no asprintf: lsan.supp suppresses every leak that ends in glibc's
# asprintf (the fast unwinder cannot see past it), which is safe only while
# nothing of ours calls it.
#
#   test_lsan_probe.sh PROBE LIBRARY MPIRUN [MPIRUN_FLAGS...]
#
# Skipped (77) outside tools/test_sanitize.sh's environment, whose preloaded
# keep_modules.so the suppressions rely on.
probe=$1 lib=$2
shift 2
if nm -D --undefined-only "$lib" | grep -E '\b_*(v?asprintf|v?asprintf_chk)\b'; then
  echo "FAIL [test_lsan_probe]: $lib calls asprintf (above), whose leaks lsan.supp suppresses"
  exit 1
fi
case "${LD_PRELOAD:-}" in
*keep_modules.so*) ;;
*)
  echo "test_lsan_probe: keep_modules.so is not preloaded: run it through tools/test_sanitize.sh"
  exit 77
  ;;
esac
work=$(mktemp -d) || exit 1
trap 'rm -rf "$work"' EXIT
if ! "$@" -np 2 "$probe" >"$work/clean.log" 2>&1; then
  echo "FAIL [test_lsan_probe]: a program with no leak of its own failed the leak check"
  echo "(one of Open MPI's leaks not suppressed?):"
  cat "$work/clean.log"
  exit 1
fi
if "$@" -np 2 "$probe" leak >"$work/leak.log" 2>&1; then
  echo "FAIL [test_lsan_probe]: 77 bytes lost in probe_alloc on each rank, and the run passed:"
  cat "$work/leak.log"
  exit 1
fi
if ! grep -q 'Direct leak of 77 byte' "$work/leak.log" || ! grep -q 'probe_alloc' "$work/leak.log"; then
  echo "FAIL [test_lsan_probe]: the run failed, but not with the leak in probe_alloc:"
  cat "$work/leak.log"
  exit 1
fi
echo "test_lsan_probe: Open MPI's leaks suppressed, ours reported: ok"
