# Cross-compiling qkv for 64-bit ARM (aarch64) on an x86-64 Debian with Debian's cross toolchain
# and arm64 libraries (multiarch); the tests run under qemu-user. scripts/test-arm.sh installs what
# this needs and uses it:
#   cmake -S . -B build-arm -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake ...
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Debian's multiarch layout: arm64 libraries and their CMake / pkg-config files under
# /usr/lib/aarch64-linux-gnu, architecture-independent ones (nlohmann/json, CLI11) under /usr/share.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
# Test binaries (and GoogleTest's test discovery at build time) run through qemu-user; the arm64
# loader and libraries come from the multiarch packages, so no sysroot is needed.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
