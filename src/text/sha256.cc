// SHA-256 as FIPS 180-4 specifies it; see qkv/text/sha256.h.
#include "qkv/text/sha256.h"

#include "sha256_blocks.h"

#include <algorithm>
#include <cstring>

#include "qkv/text/hex.h"

namespace qkv {
namespace {

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

// The variant chosen once: the CPU's SHA extensions when it has them.
sha256_detail::BlocksFn chosen_blocks() {
  static const sha256_detail::BlocksFn fn = [] {
    const sha256_detail::BlocksFn hw = sha256_detail::blocks_x86_sha();
    return hw ? hw : sha256_detail::blocks_portable;
  }();
  return fn;
}

}  // namespace

namespace sha256_detail {

void blocks_portable(uint32_t state[8], const uint8_t* p, size_t n_blocks) {
  for (; n_blocks > 0; --n_blocks, p += 64) {
    uint32_t w[64];
    for (int t = 0; t < 16; ++t)
      w[t] = uint32_t(p[4 * t]) << 24 | uint32_t(p[4 * t + 1]) << 16 | uint32_t(p[4 * t + 2]) << 8 | p[4 * t + 3];
    for (int t = 16; t < 64; ++t) {
      const uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
      const uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
      w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
    uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
    for (int t = 0; t < 64; ++t) {
      const uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kRound[t] + w[t];
      const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    state[0] += a;
    state[1] += b;
    state[2] += c;
    state[3] += d;
    state[4] += e;
    state[5] += f;
    state[6] += g;
    state[7] += h;
  }
}

}  // namespace sha256_detail

Sha256::Sha256(bool portable)
    : h_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19},
      blocks_(portable ? sha256_detail::blocks_portable : chosen_blocks()) {}

bool Sha256::cpu_extensions() { return chosen_blocks() != sha256_detail::blocks_portable; }

void Sha256::update(std::string_view bytes) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  size_t n = bytes.size();
  total_ += n;
  if (buffered_ > 0) {
    const size_t take = std::min(n, 64 - buffered_);
    std::memcpy(buf_.data() + buffered_, p, take);
    buffered_ += take;
    p += take;
    n -= take;
    if (buffered_ < 64) return;
    blocks_(h_.data(), buf_.data(), 1);
    buffered_ = 0;
  }
  if (n >= 64) {
    blocks_(h_.data(), p, n / 64);
    p += n / 64 * 64;
    n %= 64;
  }
  if (n > 0) std::memcpy(buf_.data(), p, n);
  buffered_ = n;
}

std::array<uint8_t, 32> Sha256::digest() {
  const uint64_t bits = total_ * 8;
  uint8_t pad[72] = {0x80};
  const size_t pad_len = (buffered_ < 56 ? 56 : 120) - buffered_;
  for (int i = 0; i < 8; ++i) pad[pad_len + i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
  update(std::string_view(reinterpret_cast<const char*>(pad), pad_len + 8));
  std::array<uint8_t, 32> out;
  for (int i = 0; i < 8; ++i)
    for (int k = 0; k < 4; ++k) out[4 * i + k] = static_cast<uint8_t>(h_[i] >> (24 - 8 * k));
  return out;
}

std::string sha256_hex(std::string_view bytes, bool portable) {
  Sha256 s(portable);
  s.update(bytes);
  return hex_encode(s.digest());
}

}  // namespace qkv
