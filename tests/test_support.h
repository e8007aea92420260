// Small helpers the GoogleTest suites share.
#pragma once

#include <functional>
#include <string>

#include "qkv/core/error.h"
#include "qkv/core/limits.h"

namespace qkv::testing_support {

// The message of the qkv::Error that f throws, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// The limits in force when it was made, put back when it goes out of scope; with an argument,
// those limits are set for the scope.
class ScopedLimits {
 public:
  ScopedLimits() : saved_(limits()) {}
  explicit ScopedLimits(const Limits& l) : saved_(limits()) { set_limits(l); }
  ~ScopedLimits() { set_limits(saved_); }
  ScopedLimits(const ScopedLimits&) = delete;
  ScopedLimits& operator=(const ScopedLimits&) = delete;

 private:
  Limits saved_;
};

}  // namespace qkv::testing_support
