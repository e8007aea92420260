// Size arithmetic that cannot wrap. See include/qkv/core/checked.h.
#include "qkv/core/checked.h"

#include <limits>

#include "qkv/core/error.h"

namespace qkv {

int64_t checked_add(int64_t a, int64_t b, const char* what) {
  QKV_CHECK(a >= 0 && b >= 0, what, ": sizes must not be negative, got ", a, " and ", b);
  int64_t r = 0;
  QKV_CHECK(!__builtin_add_overflow(a, b, &r), what, ": ", a, " + ", b, " exceeds the largest size (",
            std::numeric_limits<int64_t>::max(), ")");
  return r;
}

int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  QKV_CHECK(a >= 0 && b >= 0, what, ": sizes must not be negative, got ", a, " and ", b);
  int64_t r = 0;
  QKV_CHECK(!__builtin_mul_overflow(a, b, &r), what, ": ", a, " x ", b, " exceeds the largest size (",
            std::numeric_limits<int64_t>::max(), ")");
  return r;
}

int64_t checked_product(std::span<const int64_t> sizes, const char* what) {
  for (int64_t s : sizes) QKV_CHECK(s >= 0, what, ": a size of ", s, " (sizes must not be negative)");
  for (int64_t s : sizes)
    if (s == 0) return 0;  // an empty tensor, whatever its other sizes
  int64_t n = 1;
  for (int64_t s : sizes) n = checked_mul(n, s, what);
  return n;
}

int64_t checked_bytes(int64_t count, int64_t element_size, const char* what) {
  QKV_CHECK(count >= 0 && element_size >= 0, what, ": sizes must not be negative, got ", count, " elements of ",
            element_size, " bytes");
  int64_t r = 0;
  QKV_CHECK(!__builtin_mul_overflow(count, element_size, &r), what, ": ", count, " elements of ", element_size,
            " bytes each: the byte count exceeds the largest size (", std::numeric_limits<int64_t>::max(), ")");
  return r;
}

}  // namespace qkv
