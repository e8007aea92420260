#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite twice: in the release build,
# and in a build with AddressSanitizer + UndefinedBehaviorSanitizer. Warnings are errors in both.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
jobs=$(nproc 2>/dev/null || echo 2)

echo "== release build (warnings as errors): ctest" >&2
(cd build && ctest --output-on-failure -j"$jobs")

# The MPI layer is left out of it until its mpirun tests have been run under the sanitizers (README).
echo "== sanitizer build (ASan + UBSan): ctest" >&2
cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=ON -DQKV_WERROR=ON -DQKV_SANITIZE=ON -DQKV_MPI=OFF >/dev/null
cmake --build build-sanitize -j"$jobs" >&2
(cd build-sanitize && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
   ctest --output-on-failure -j"$jobs")
