#!/usr/bin/env bash
# Installs the built symcomm into a scratch prefix, builds examples/hello against it with find_package, and
# runs it on 2 ranks with the installed launcher; where the Python module was built, runs an all-reduce on 2 ranks
# through the installed package alone.
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
# The Python package, where it was built: imported from the prefix only (no build tree on the path).
core=$(find "$prefix" -name '_core*.so' | head -n 1)
if ls "$build_dir"/python/symcomm/_core*.so >/dev/null 2>&1; then
  test -n "$core"
  site=$(dirname "$(dirname "$core")")
  python=$(sed -n 's/^Python3_EXECUTABLE:[A-Z]*=//p' "$build_dir/CMakeCache.txt")
  test -f "$site/symcomm/__init__.py" -a -f "$site/symcomm/torch.py"
  env -u LD_LIBRARY_PATH PYTHONPATH="$site" "$prefix/bin/symcomm-run" -n 2 -- "${python:-python3}" -c "
import numpy as np, symcomm
assert symcomm._core.__file__.startswith('$site'), symcomm._core.__file__
with symcomm.Communicator.from_env() as comm:
    got = comm.all_reduce(np.full(3, comm.rank + 1, np.int32))
    assert (got == 3).all(), got
print('installed python package: ok')"
fi
