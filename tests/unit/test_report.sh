#!/bin/sh
# engine-run --report (DeepSpeed's ds_report), checked against independent
# sources on this machine:
#   version       DS_VERSION_MAJOR/MINOR/PATCH of engine/engine.h
#   backends      the cpu kernel variants; DS_CPU_ISA=scalar makes the
#                 chosen one cpu/scalar; the cuda row found or says why not
#   cpu features  avx2, fma, avx512f ... as /proc/cpuinfo's flags say
#   openblas      the config string OpenBLAS reports (starts "OpenBLAS"), a
#                 thread count and a threading model
#   blas core     whether OpenBLAS's core fits the CPU, and a fallback core
#                 replaced (faked: ENGINE_RUN_TEST_OPENBLAS)
#   mpi           the library's version string (mpirun --version's name and
#                 number) and the standard it implements
#   cuda, nccl    a row each, whether or not the machine has them
#   features      zstd and jansson versions as pkg-config says
# and exit 0, without a config, starting no rank.
#   test_report.sh BINDIR SOURCEDIR
set -u
. "$(dirname "$0")/test_util.sh"
need_args 2 "BINDIR SOURCEDIR" $#
bin=$(readlink -f "$1")
src=$(readlink -f "$2")
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$bin/engine-run" --report > "$out" 2>&1 || fail "engine-run --report exited $?: $(cat "$out")"
row() { grep -E "^$1 " "$out"; }
v=$(sed -n 's/^#define DS_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' "$src/engine/engine.h" | tr '\n' '.' | sed 's/\.$//')
row version | grep -q " $v\$" || fail "version row '$(row version)', engine.h says $v"
row backends | grep -Eq "cpu \(OpenBLAS \+ OpenMP\): kernels built for [a-z0-9, ]+; this CPU runs [a-z0-9, ]+; chosen: cpu/[a-z0-9]+" ||
  fail "backends row: '$(row backends)'"
# a DS_NATIVE build has one variant, "native": then asking for scalar names the refusal
if row backends | grep -q "kernels built for [a-z0-9, ]*scalar"; then
  DS_CPU_ISA=scalar "$bin/engine-run" --report | grep -q "chosen: cpu/scalar (DS_CPU_ISA=scalar)" ||
    fail "DS_CPU_ISA=scalar does not show as the chosen kernels"
else
  DS_CPU_ISA=scalar "$bin/engine-run" --report | grep -q "chosen: none: .*scalar" ||
    fail "DS_CPU_ISA=scalar in a build without it: the refusal is not in the backends row"
fi
grep -Eq "^ +cuda(:| \()" "$out" || fail "no cuda backend row"
if grep -q '^flags' /proc/cpuinfo; then
  flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
  for f in avx2 fma f16c avx512f avx512bw avx512vl avx512dq; do
    case "$flags" in *" $f "*) want=yes ;; *) want=no ;; esac
    row "cpu features" | grep -q "$f $want" || fail "cpu features: $f should be $want: '$(row "cpu features")'"
  done
fi
row openblas | grep -Eq "^openblas +OpenBLAS .*; core [A-Za-z0-9_]+; [0-9]+ threads?, threading (none|pthreads|OpenMP)" ||
  fail "openblas row: '$(row openblas)'"
# the core's diagnosis: a row on any host; with OpenBLAS taken to have fallen
# back (engine-run's test-only ENGINE_RUN_TEST_OPENBLAS), the core it sets
row "blas core" | grep -Eq "nothing to change|fixed when OpenBLAS was built|OpenBLAS (chose|runs) core|OPENBLAS_CORETYPE=" ||
  fail "blas core row: '$(row "blas core")'"
ENGINE_RUN_TEST_OPENBLAS=Prescott:avx,avx2,fma "$bin/engine-run" --report | grep -qx \
  "blas core  *OpenBLAS chose core Prescott, but this CPU has AVX2 and FMA: engine-run sets OPENBLAS_CORETYPE=Haswell for the ranks it starts; started otherwise, rank 0 warns" ||
  fail "a fallback core is not in the blas core row"
if command -v mpirun >/dev/null && mpirun --version 2>/dev/null | grep -q 'Open MPI'; then
  mv=$(mpirun --version | sed -n 's/.*(Open MPI) \([0-9.]*\).*/\1/p' | head -1)
  row mpi | grep -q "Open MPI v$mv" || fail "mpi row '$(row mpi)' does not name Open MPI v$mv"
fi
row mpi | grep -Eq "MPI standard [3-9]\.[0-9]" || fail "mpi row: '$(row mpi)'"
row cuda | grep -Eq "no CUDA driver|driver libcuda" || fail "cuda row: '$(row cuda)'"
row nccl > /dev/null || fail "no nccl row"
for p in libzstd jansson; do
  if pv=$(pkg-config --modversion $p 2>/dev/null); then
    row features | grep -q "$(echo $p | sed 's/^lib//') $pv" || fail "features row lacks $p $pv: '$(row features)'"
  fi
done
row features | grep -q "io_uring" || fail "features row lacks io_uring"
finish
