#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite twice: in the release build,
# and in a build with AddressSanitizer + UndefinedBehaviorSanitizer. Warnings are errors in both.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
jobs=$(nproc 2>/dev/null || echo 2)

echo "== release build (warnings as errors): ctest" >&2
(cd build && ctest --output-on-failure -j"$jobs")

echo "== sanitizer build (ASan + UBSan): ctest" >&2
# Everything the release build tests, the Python package and the MPI layer included, with four
# differences that only save time: line tables instead of full debug information (enough for the
# sanitizers' reports), no Google Benchmark programs (bench/: no test runs them), on a CPU without
# AVX-512 no AVX-512 kernels (code this CPU cannot run, the sanitizers cannot check; the release
# build compiles and tests every SIMD target), and the kernels' SIMD files without the check for
# a use after scope (it took decode.cc 580 s to compile: CMakeLists.txt says where).
sanitize=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" -DBUILD_TESTING=ON
          -DQKV_WERROR=ON -DQKV_SANITIZE=ON -DQKV_BENCH=OFF)
grep -qw avx512f /proc/cpuinfo || sanitize+=("-DQKV_HWY_DISABLED_TARGETS=HWY_SSSE3|HWY_SSE4|HWY_AVX3")
[ -f build-sanitize/CMakeCache.txt ] || sanitize+=(-G Ninja)  # as setup.sh's build (a tree keeps its generator)
cmake -S . -B build-sanitize "${sanitize[@]}" >/dev/null
cmake --build build-sanitize -j"$jobs" >&2
(cd build-sanitize && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
   ctest --output-on-failure -j"$jobs")
