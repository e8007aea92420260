// qkv/text/sha256.h - SHA-256 (FIPS 180-4), to verify the vocabulary files before trusting them.
//   sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace qkv {

// Uses the CPU's SHA extensions when it has them (x86 SHA-NI), else portable C++; `portable`
// forces the latter (the tests compare the two).
class Sha256 {
 public:
  explicit Sha256(bool portable = false);
  void update(std::string_view bytes);
  std::array<uint8_t, 32> digest();  // finishes; the object is spent afterwards
  static bool cpu_extensions();      // whether the default path uses them here

 private:
  std::array<uint32_t, 8> h_;
  void (*blocks_)(uint32_t*, const uint8_t*, size_t);
  std::array<uint8_t, 64> buf_{};
  size_t buffered_ = 0;
  uint64_t total_ = 0;  // bytes
};

// The digest of bytes as 64 lower-case hex digits.
std::string sha256_hex(std::string_view bytes, bool portable = false);

}  // namespace qkv
