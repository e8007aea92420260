// What every fuzz target shares: the libFuzzer entry point's signature, and the rule that a
// qkv::Error is a normal answer to any input while everything else (another exception, a crash, a
// sanitizer report, a failed expectation) is a finding.
//
//   QKV_FUZZ_TARGET(data) { qkv::parse_safetensors(std::string(data), "fuzz.safetensors"); }
//
// The body runs on the input as a std::string_view; a qkv::Error it throws is swallowed, any other
// exception escapes LLVMFuzzerTestOneInput, which terminates the process (libFuzzer reports it
// with the input; the replay test fails).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "qkv/core/error.h"

// A property the target checks on top of "no crash": abort (a finding) with a message if it fails.
#define QKV_FUZZ_EXPECT(cond)                                                                   \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      std::fprintf(stderr, "%s:%d: fuzz expectation failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                             \
    }                                                                                           \
  } while (0)

#define QKV_FUZZ_TARGET(data)                                                       \
  static void qkv_fuzz_body(std::string_view data);                                 \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {        \
    try {                                                                           \
      qkv_fuzz_body(std::string_view(reinterpret_cast<const char*>(bytes), size)); \
    } catch (const qkv::Error&) {                                                   \
    }                                                                               \
    return 0;                                                                       \
  }                                                                                 \
  static void qkv_fuzz_body(std::string_view data)
