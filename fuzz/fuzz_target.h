// What every fuzz target shares: the libFuzzer entry point's signature, and the rule that a
// qkv::Error is a normal answer to any input while everything else (another exception, a crash, a
// sanitizer report, a failed expectation) is a finding.
//
//   QKV_FUZZ_TARGET(data) { qkv::parse_safetensors(std::string(data), "fuzz.safetensors"); }
//
// The body runs on the input as a std::string_view; a qkv::Error it throws is swallowed, any other
// exception escapes LLVMFuzzerTestOneInput, which terminates the process (libFuzzer reports it
// with the input; the replay test fails). Before the first input, the memory qkv may be asked for
// is limited to 1 GiB (limits.h), under the -rss_limit_mb=2048 the fuzzers run with: an input that
// asks for more must be refused with an Error, not run out of memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "qkv/core/error.h"
#include "qkv/core/limits.h"

inline bool qkv_fuzz_set_limits() {
  qkv::Limits l = qkv::limits();
  l.max_memory_bytes = int64_t{1} << 30;
  l.max_file_bytes = int64_t{1} << 30;
  qkv::set_limits(l);
  return true;
}

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
    static const bool limited = qkv_fuzz_set_limits();                              \
    (void)limited;                                                                  \
    try {                                                                           \
      qkv_fuzz_body(std::string_view(reinterpret_cast<const char*>(bytes), size)); \
    } catch (const qkv::Error&) {                                                   \
    }                                                                               \
    return 0;                                                                       \
  }                                                                                 \
  static void qkv_fuzz_body(std::string_view data)
