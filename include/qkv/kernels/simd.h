// qkv/kernels/simd.h - which SIMD code the kernels run (Google Highway's run-time dispatch).
//
// The kernels are compiled for AVX-512 ("AVX3"), AVX2 and a portable fallback ("EMU128") and
// pick the best one the CPU supports at their first call. Tests can force each in turn.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qkv::kernels {

std::string simd_target();  // the target the kernels dispatch to now, e.g. "AVX3"
int simd_vector_bits();     // its vector width: 512 (AVX3), 256 (AVX2), else 128

// The compiled targets this CPU can run, best first, as Highway's target bits.
std::vector<int64_t> available_simd_targets();
std::string simd_target_name(int64_t target);
int simd_target_vector_bits(int64_t target);
// Makes the kernels dispatch to `target` (one of the above) from their next call; 0 restores the
// default. For tests and `qkv bench` (a product measured at a narrower width): not thread-safe
// against kernels running at the same time.
void force_simd_target(int64_t target);

// $QKV_SIMD: the best SIMD target the kernels may use, by name - avx2, avx3 (or avx512), avx3_dl
// (AVX-512 with VNNI: the quantized products' target), sse4, emu128; any case - so that each path
// can be measured on one machine: every kernel then runs its best target no better than that one,
// and the bf16 dot-product paths (AVX512_BF16) only under an AVX-512 target. Unset or empty: the
// CPU's best. A name this build or this CPU does not run is a qkv::Error listing those it does.
// Call before any kernel runs (the command line and the Python module do); returns the target
// forced, or "" when none.
std::string apply_simd_environment();
// The same for a name given elsewhere (`what` names it in the error: "--simd"); "" restores the
// CPU's best.
std::string apply_simd_target(const std::string& name, const std::string& what);

}  // namespace qkv::kernels
