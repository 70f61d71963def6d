#!/usr/bin/env bash
# tools/bundle.sh: a build and every library it needs beyond glibc and CUDA,
# as one folder (or tarball) that runs on a Linux machine without Debian's
# packages: a GPU node of another distribution, a cluster where nothing can be
# installed. Built where the project builds (Debian 12), run anywhere with a
# glibc at least as new.
#
#   tools/bundle.sh BUILD_DIR OUT       OUT: a folder, or OUT.tar.xz / OUT.tar
#
# What goes in:
#   bin/     the programs (engine-run, train_cls, train_lm, zero_to_fp32, ...)
#   bench/   bench_train and bench_kernels, where the build has them
#   tests/   the cuda tests and test_sparse_grads, where the build has them (DS_CUDA=ON)
#   lib/     libzero-engine, the CUDA module, and the shared libraries any of
#            these or Open MPI's components load (OpenBLAS, jansson, zstd,
#            liburing, Open MPI, PMIx, hwloc, libevent, libfabric, UCX, ...)
#   ompi/    Open MPI's runtime (mpirun, orted, its components and help
#            files), laid out as under /usr, so that OPAL_PREFIX relocates it
#   env.sh   to source: PATH, LD_LIBRARY_PATH, OPAL_PREFIX, and two settings
#            that keep the target's own plugins of hwloc and PMIx out (their
#            plugin folders are compiled into Debian's libraries: hwloc then
#            runs without its optional plugins; PMIx's, which only compress,
#            are not found or fail to load, and its warning about that is
#            silenced)
#
# Not in it: glibc and the dynamic loader (the target's own), and the CUDA
# libraries (the driver's libcuda, and cudart, cuBLAS, cuRAND and NCCL,
# which a GPU machine has in its toolkit; add their folder to
# LD_LIBRARY_PATH after sourcing env.sh where the loader does not find them).
#
# Then on the target:
#   tar xJf OUT.tar.xz && . OUT/env.sh
#   engine-run --report
#   engine-run --np 2 --config ds_config.json train_cls --data DATA.tsv
# The programs' own search path (RUNPATH) still names BUILD_DIR; LD_LIBRARY_PATH
# comes first, and the library opens the CUDA module beside itself.
set -euo pipefail
if [ $# -ne 2 ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 2
fi
build=$1 out=$2
fail() { echo "bundle: $*" >&2; exit 1; }
[ -x "$build/bin/engine-run" ] || fail "$build/bin/engine-run not found: build $build first"
case $out in
  *.tar.xz) dir=${out%.tar.xz} ;;
  *.tar) dir=${out%.tar} ;;
  *) dir=$out ;;
esac
[ -e "$dir" ] && fail "$dir exists: give a new folder"
mkdir -p "$dir"/{bin,lib,ompi/usr/bin,ompi/usr/share}

cp -P "$build"/bin/* "$dir/bin/"
cp -P "$build"/libzero-engine*.so* "$dir/lib/"
for b in bench_train bench_kernels; do
  [ -x "$build/bench/$b" ] && { mkdir -p "$dir/bench"; cp "$build/bench/$b" "$dir/bench/"; }
done
# the cuda tests, and test_sparse_grads, which gpu_check.sh runs on cuda too
if [ -x "$build/tests/test_backend_cuda" ]; then
  for t in test_backend_cuda test_nn_cuda test_comm_nccl test_comm_staged_cuda test_sparse_grads; do
    [ -x "$build/tests/$t" ] && { mkdir -p "$dir/tests"; cp "$build/tests/$t" "$dir/tests/"; }
  done
fi

# Open MPI's runtime where Debian keeps it: libdir .../openmpi/lib with the
# components in openmpi3/, the help files in /usr/share/openmpi. OPAL_PREFIX
# moves the whole prefix, so the layout below /usr is kept.
mpirun=$(command -v orterun || command -v mpirun) || fail "Open MPI's mpirun not found"
mpirun=$(readlink -f "$mpirun")
multiarch=$(dirname "$(ldd "$build/bin/engine-run" | awk '/libmpi\.so/ {print $3}')")
[ -d "$multiarch/openmpi/lib" ] || fail "Open MPI's libdir $multiarch/openmpi/lib not found"
mkdir -p "$dir/ompi/usr/lib/$(basename "$multiarch")"
ompi_lib=$dir/ompi/usr/lib/$(basename "$multiarch")
cp -a "$multiarch/openmpi" "$ompi_lib/"
rm -rf "$ompi_lib/openmpi/include"
cp -a /usr/share/openmpi "$dir/ompi/usr/share/"
cp "$mpirun" "$dir/ompi/usr/bin/orterun"
cp "$(readlink -f "$(dirname "$mpirun")/orted")" "$dir/ompi/usr/bin/orted"
ln -s orterun "$dir/ompi/usr/bin/mpirun"
ln -s orterun "$dir/ompi/usr/bin/mpiexec"

# Every shared library the ELF files load, but glibc's own, CUDA's, and
# libstdc++ / libgcc_s (on every Linux, backward compatible; a copy of
# Debian's older ones would shadow what the target's CUDA libraries need).
skip='/(ld-linux[^/]*|libc|libm|libdl|libpthread|librt|libresolv|libutil|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libcurand|libnccl|libnvidia-[^/]*)\.so'
find "$dir" -type f \( -perm -u+x -o -name '*.so*' \) -print0 |
  xargs -0 ldd 2>/dev/null | awk '/=> \// {print $3}' | sort -u |
  grep -v -E "$skip" | while read -r l; do
    case $l in "$multiarch"/openmpi/*|*/libzero-engine*) continue ;; esac
    [ -e "$dir/lib/$(basename "$l")" ] || cp -L "$l" "$dir/lib/"
  done

cat > "$dir/env.sh" <<'EOF'
# Source this file (. env.sh) to run the bundle's programs from any folder.
_b=$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)
export PATH="$_b/bin:$_b/ompi/usr/bin${PATH:+:$PATH}"
export OPAL_PREFIX="$_b/ompi/usr"
export LD_LIBRARY_PATH="$_b/lib:$(ls -d "$_b"/ompi/usr/lib/*/openmpi/lib)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export HWLOC_PLUGINS_PATH="$_b/lib/no-hwloc-plugins" PMIX_MCA_pcompress_base_silence_warning=1
unset _b
EOF

case $out in
  *.tar.xz) tar cf - -C "$(dirname "$dir")" "$(basename "$dir")" | xz -6 -T0 > "$out" ;;
  *.tar) tar cf "$out" -C "$(dirname "$dir")" "$(basename "$dir")" ;;
esac
echo "bundle: $out ($(du -sh "$dir" | cut -f1) unpacked, $(ls "$dir/lib" | wc -l) libraries)"
