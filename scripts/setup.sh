#!/usr/bin/env bash
# Installs what qkv needs and is missing (Debian 12, as root or with sudo), then builds it.
#   scripts/setup.sh           what the library and the qkv command need; builds build/
#   scripts/setup.sh --test    also what the tests need (PyTorch as the oracle, GoogleTest)
set -euo pipefail
cd "$(dirname "$0")/.."

want_tests=0
[ "${1:-}" = "--test" ] && want_tests=1

packages=(g++ cmake make pkg-config nlohmann-json3-dev libcli11-dev)
if [ "$want_tests" = 1 ]; then
  packages+=(googletest libgtest-dev libgmock-dev python3 python3-torch python3-numpy)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q >&2
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi

jobs=$(nproc 2>/dev/null || echo 2)
if [ "$want_tests" = 1 ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=ON -DQKV_WERROR=ON >/dev/null
else
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF >/dev/null
fi
cmake --build build -j"$jobs" >&2
