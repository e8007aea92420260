// qkv/core/error.h - the one exception type, and checks that say what was expected and what came.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace qkv {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// str("d_out (", 10, ") must be divisible by num_heads (", 4, ")")
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
  throw Error(str(args...));
}

}  // namespace qkv

// Always-on check at an API boundary: QKV_CHECK(d_out % h == 0, "d_out (", d_out, ") ...").
#define QKV_CHECK(cond, ...)          \
  do {                                \
    if (!(cond)) ::qkv::fail(__VA_ARGS__); \
  } while (0)
