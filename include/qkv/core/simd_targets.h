// qkv/core/simd_targets.h - the SIMD targets this process may run (Highway's mask of them), read
// once instead of at every call.
//
// hwy::SupportedTargets() asks the CPU again at each call (CPUID, unless a mask is set), and on a
// virtual machine every CPUID traps to the hypervisor: on an EPYC guest it was 5.7% of a bf16
// decoding step, asked once per matrix-vector product. The mask changes only through
// kernels::force_simd_target ($QKV_SIMD, --simd, tests), which calls
// refresh_supported_simd_targets() after it.
#pragma once

#include <cstdint>

namespace qkv {

int64_t supported_simd_targets();         // hwy::SupportedTargets(), as last read
void refresh_supported_simd_targets();    // reads it again

}  // namespace qkv
