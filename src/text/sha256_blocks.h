// SHA-256's compression function over whole 64-byte blocks, in two variants (private to src/text):
// the portable one (sha256.cc) and one with the x86 SHA extensions (sha256_x86.cc), chosen once.
#pragma once

#include <cstddef>
#include <cstdint>

namespace qkv::sha256_detail {

void blocks_portable(uint32_t state[8], const uint8_t* p, size_t n_blocks);
// nullptr when the CPU (or the compiler) has no SHA extensions.
using BlocksFn = void (*)(uint32_t state[8], const uint8_t* p, size_t n_blocks);
BlocksFn blocks_x86_sha();

}  // namespace qkv::sha256_detail
