#!/usr/bin/env bash
# Installs the built symcomm into a scratch prefix, builds examples/hello against it with find_package, and
# runs it on 2 ranks with the installed launcher.
set -euo pipefail
build_dir=$1
src_dir=$2
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build_dir" --prefix "$prefix" >/dev/null
cmake -G Ninja -S "$src_dir/examples/hello" -B "$prefix/hello-build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$prefix/hello-build" >/dev/null
LD_LIBRARY_PATH="$prefix/lib:${LD_LIBRARY_PATH:-}" "$prefix/bin/symcomm-run" -n 2 -- "$prefix/hello-build/hello"
# The NCCL drop-in library, where it was built: in a directory of its own, with libnccl.so.2 naming it.
if [ -e "$build_dir/src/nccl_shim/libsymcomm_nccl.so" ]; then
  test -f "$prefix/lib/symcomm-nccl/libsymcomm_nccl.so"
  test "$(readlink "$prefix/lib/symcomm-nccl/libnccl.so.2")" = libsymcomm_nccl.so
fi
