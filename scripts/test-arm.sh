#!/usr/bin/env bash
# Builds qkv for 64-bit ARM (aarch64) and runs its tests there, on an x86-64 Debian 12 machine:
# Debian's cross compiler and arm64 libraries (multiarch), and the tests under qemu-user.
#   scripts/test-arm.sh     installs what is missing (as root or with sudo), builds build-arm/,
#                           runs ctest in it
# What runs: the library's tests of every layer but the command line's (tests/cli start the qkv
# binary as a child process, which the host cannot execute), the allocation counts and the fuzz
# replays; each SIMD kernel on both of the build's targets, NEON and the portable one
# (cmake/aarch64-linux-gnu.cmake; docs/developing.md). Highway's SVE targets are not compiled (the
# top CMakeLists.txt says why). Not in .ci/run: see the README.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive

# Host tools, then the arm64 libraries the build links (Multi-Arch: same, beside the amd64 ones).
packages=(cmake ninja-build pkg-config g++-aarch64-linux-gnu qemu-user nlohmann-json3-dev libcli11-dev)
packages+=(libopenblas-dev:arm64 libsleef-dev:arm64 libhwy-dev:arm64 libpcre2-dev:arm64 libutf8proc-dev:arm64)
packages+=(libgtest-dev:arm64 libgmock-dev:arm64)
need_update=0
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  echo "test-arm: adding Debian's arm64 architecture (dpkg --add-architecture arm64)" >&2
  $SUDO dpkg --add-architecture arm64
  need_update=1
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "test-arm: installing ${missing[*]}" >&2
  need_update=1
fi
[ "$need_update" = 1 ] && $SUDO apt-get update -q >&2
[ "${#missing[@]}" -gt 0 ] && $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
# The vocabularies the tokenizer and model tests read (the same files as on x86).
bash scripts/setup.sh --data

jobs=$(nproc 2>/dev/null || echo 2)
config=(-DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/aarch64-linux-gnu.cmake" -DCMAKE_BUILD_TYPE=Release
        -DBUILD_TESTING=ON -DQKV_WERROR=ON -DQKV_MPI=OFF -DQKV_PYTHON=OFF -DQKV_BENCH=OFF)
[ -f build-arm/CMakeCache.txt ] || config+=(-G Ninja)
cmake -S . -B build-arm "${config[@]}" >/dev/null
cmake --build build-arm -j"$jobs" >&2
echo "== aarch64 build under qemu-user: ctest" >&2
qemu-aarch64 build-arm/qkv --version >&2
# qemu-user takes madvise as a hint it may drop (it returns success without asking the host), so
# the tests that a buffer (or weights packed together) advised onto 2 MiB pages is backed by them,
# and that one whose pages were asked for (MADV_POPULATE_WRITE: a mapping, a large weight) has them
# resident, cannot hold under it.
skip='^HugePages\.(AnAdvisedBuffer|WeightsSmallerThanAPage)|^Prefault\.AFreshMappingIsResident'
skip+='|^WeightMemory\.ALargeWeightsPagesAreMapped'
(cd build-arm && ctest --output-on-failure -j"$jobs" --timeout 1500 -E "$skip")
echo "== the main job on aarch64: qkv walkthrough" >&2
(cd build-arm && qemu-aarch64 ./qkv walkthrough)
