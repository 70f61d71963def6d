#!/usr/bin/env bash
# CPU programs carry no CUDA: no program in BUILD_DIR/bin and not
# libzero-engine.so links libcudart, libcublas, libcurand, libnccl or
# libcuda; only the CUDA module (libzero-engine-cuda.so, opened at run time
# when a GPU is asked for) does, and where it was built it must link cuBLAS
# (so this check is seen to read what a CUDA library looks like in ldd).
#
#   test_no_cuda_linked.sh BUILD_DIR
#
# A ctest (the quickstart's build is DS_CUDA=ON where nvcc exists, and
# tools/test.sh then checks it) and .ci/run's check of its DS_CUDA=ON build.
# The run-time half, what a CPU process maps, is test_no_cuda_mapped.
set -euo pipefail
build=$1
cuda_libs='lib(cudart|cublas|curand|nccl|cuda)\.so'
bad=0 n=0
for f in "$build"/bin/* "$build"/libzero-engine.so; do
    [ -f "$f" ] && [ -x "$f" ] || continue
    # ldd's output is read whole first: with pipefail, `ldd | grep -q` fails
    # when grep stops at its first match and ldd then dies of SIGPIPE
    deps=$(ldd "$f" 2>&1) || { echo "test_no_cuda_linked: ldd $f failed: $deps"; bad=1; continue; }
    n=$((n + 1))
    if grep -Eq "$cuda_libs" <<<"$deps"; then
        echo "test_no_cuda_linked: FAILED: $f links CUDA libraries:"
        grep -E "$cuda_libs" <<<"$deps" | sed 's/^/    /'
        bad=1
    fi
done
if [ "$n" -eq 0 ]; then
    echo "test_no_cuda_linked: FAILED: no program found in $build/bin"
    exit 1
fi
module=$build/libzero-engine-cuda.so
if [ -e "$module" ]; then
    deps=$(ldd "$module")
    if ! grep -q libcublas <<<"$deps"; then
        echo "test_no_cuda_linked: FAILED: the CUDA module $module does not link cuBLAS"
        bad=1
    fi
    echo "test_no_cuda_linked: the CUDA module links $(grep -Eo "$cuda_libs" <<<"$deps" | sort -u | tr '\n' ' ')"
else
    echo "test_no_cuda_linked: no CUDA module in $build (a DS_CUDA=OFF build)"
fi
[ "$bad" -eq 0 ] || exit 1
echo "test_no_cuda_linked: $n programs and libraries, none links a CUDA library"
