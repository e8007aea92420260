// qkv/kernels/philox.h - the counter-based generator behind the fused kernels' dropout.
//
// Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3",
// SC 2011; the generator of Random123, cuRAND and JAX). It maps a 128-bit counter and a 64-bit
// key to four 32-bit words with no state, so any element's draw is computed on its own: the
// fused attention kernels get the same dropout mask whatever the thread count, block sizes or
// SIMD width, and the reference applies exactly that mask. Known answers (Random123's kat_vectors):
//   philox4x32_10({0, 0, 0, 0}, {0, 0})  = {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}
//   philox4x32_10({~0 x 4}, {~0, ~0})    = {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}
//
// The attention dropout draw for element (b, h, i, j) of the (B, H, T, S) weights, seed s:
//   words = philox4x32_10({j / 4, i, b, h}, {s & 0xffffffff, s >> 32}), word = words[j % 4]
//   kept  = (word >> 8) >= ceil(p * 2^24)   i.e. a 24-bit uniform u = (word >> 8) / 2^24 >= p
// so P(dropped) = p up to 2^-24. Kept weights are scaled by 1 / (1 - p), as nn.Dropout does.
// This is NOT PyTorch's mask: qkv's PyTorch-exact dropout (Generator::bernoulli, used by the
// modules' textbook path and by --seed reproduction) is a different, sequential generator.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

namespace qkv::kernels {

inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u;  // multipliers
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;  // key bumps

inline std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * c[2];
    const auto hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const auto hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k[0] += kPhiloxW0;
    k[1] += kPhiloxW1;
  }
  return c;
}

// The integer threshold on the top 24 bits: an element is kept when (word >> 8) >= threshold.
inline uint32_t dropout_threshold(double p) {
  return static_cast<uint32_t>(std::ceil(p * 16777216.0));
}

// The 32-bit draw of weight (b, h, i, j) (see above).
inline uint32_t dropout_word(uint64_t seed, int64_t b, int64_t h, int64_t i, int64_t j) {
  const std::array<uint32_t, 4> w =
      philox4x32_10({static_cast<uint32_t>(j >> 2), static_cast<uint32_t>(i), static_cast<uint32_t>(b),
                     static_cast<uint32_t>(h)},
                    {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  return w[static_cast<size_t>(j & 3)];
}

inline bool dropout_kept(uint64_t seed, uint32_t threshold, int64_t b, int64_t h, int64_t i, int64_t j) {
  return (dropout_word(seed, b, h, i, j) >> 8) >= threshold;
}

}  // namespace qkv::kernels
