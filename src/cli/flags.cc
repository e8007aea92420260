// Byte-count flags, the limit flags and the size checks of flags that multiply. See flags.h.
#include "flags.h"

#include "qkv/core/checked.h"
#include "qkv/core/error.h"
#include "qkv/core/limits.h"

namespace qkv::cli {

int64_t parse_bytes(const std::string& flag, const std::string& text) {
  std::string digits = text;
  int shift = 0;
  if (!digits.empty()) {
    switch (digits.back()) {
      case 'K': case 'k': shift = 10; break;
      case 'M': case 'm': shift = 20; break;
      case 'G': case 'g': shift = 30; break;
      case 'T': case 't': shift = 40; break;
      default: break;
    }
    if (shift > 0) digits.pop_back();
  }
  const int64_t max = std::numeric_limits<int64_t>::max();
  int64_t n = 0;
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (digits.empty() || ec != std::errc() || ptr != digits.data() + digits.size() || n < 1 || n > (max >> shift))
    throw CLI::ValidationError(flag + ": " + excerpt(text) + " is not a byte count in [1, " + std::to_string(max) +
                               "] (digits, optionally followed by K, M, G or T for powers of 1024)");
  return n << shift;
}

void check_sizes(std::initializer_list<int64_t> sizes, int64_t element_size, const char* what) {
  check_memory_request(checked_bytes(checked_product(sizes, what), element_size, what), what);
}

void add_limit_flags(CLI::App* sub) {
  const Limits d = limits();
  sub->add_option_function<std::string>(
         "--max-memory",
         [](const std::string& s) {
           Limits l = limits();
           l.max_memory_bytes = parse_bytes("--max-memory", s);
           set_limits(l);
         },
         "The most memory one request (a tensor, a model, a file read) may ask for; suffixes K M G T")
      ->type_name("BYTES")
      ->default_str(std::to_string(d.max_memory_bytes) + " (half the physical memory)");
  sub->add_option_function<std::string>(
         "--max-file-size",
         [](const std::string& s) {
           Limits l = limits();
           l.max_file_bytes = parse_bytes("--max-file-size", s);
           set_limits(l);
         },
         "The largest input file read whole; suffixes K M G T")
      ->type_name("BYTES")
      ->default_str(std::to_string(d.max_file_bytes));
}

void check_threads(int64_t threads, const char* flag) {
  const int max = limits().max_threads;
  QKV_CHECK(threads <= max, flag, " ", threads, " is more than the ", max,
            " threads one command may start (8 per core, at least 64)");
}

std::string limit_hint(const std::string& message) {
  if (message.find("max_memory_bytes") != std::string::npos) return "; raise it with --max-memory BYTES";
  if (message.find("max_file_bytes") != std::string::npos) return "; raise it with --max-file-size BYTES";
  return "";
}

}  // namespace qkv::cli
