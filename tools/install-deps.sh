#!/usr/bin/env bash
# Installs what symcomm needs to build, test and benchmark on a Debian machine (idempotent; quick when all is
# present). The CUDA toolkit and NCCL are expected under /usr/local/cuda where GPUs are used; without them
# the CUDA backend is simply not built.
set -euo pipefail
packages=(cmake ninja-build g++ git libgtest-dev libgmock-dev libfmt-dev libcli11-dev nlohmann-json3-dev
          libopenmpi-dev openmpi-bin clang-format clang libclang-rt-14-dev
          libopenblas-dev libdlpack-dev python3 python3-dev python3-pybind11 python3-numpy python3-pytest python3-torch)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
