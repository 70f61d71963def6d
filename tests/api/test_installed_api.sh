#!/usr/bin/env bash
# Installs the built project into a temporary prefix, then builds the user
# program tests/api/example_train.c with nothing but the installed header and
# `pkg-config --cflags --libs zero-engine`, and runs it at 1 and 2 ranks.
set -euo pipefail
build_dir=$1
src_dir=$2
mpirun_flags=${3:-}
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build_dir" --prefix "$prefix" >/dev/null
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig:$prefix/lib/x86_64-linux-gnu/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -Werror "$src_dir/tests/api/example_train.c" \
   $(pkg-config --cflags --libs zero-engine) -o "$prefix/example_train"
OMP_NUM_THREADS=1 "$prefix/example_train"
# shellcheck disable=SC2086
OMP_NUM_THREADS=1 mpirun $mpirun_flags -np 2 "$prefix/example_train"
