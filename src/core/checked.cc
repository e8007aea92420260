// Size arithmetic that cannot wrap. See include/qkv/core/checked.h.
#include "qkv/core/checked.h"

#include <limits>

#include "qkv/core/error.h"

namespace qkv {

namespace {
// a op b for sizes a, b >= 0, refused when it does not fit; `overflows` computes it as the
// __builtin_*_overflow functions do.
template <typename Overflows>
int64_t checked_op(int64_t a, int64_t b, const char* what, const char* op, Overflows overflows) {
  QKV_CHECK(a >= 0 && b >= 0, what, ": sizes must not be negative, got ", a, " and ", b);
  int64_t r = 0;
  QKV_CHECK(!overflows(a, b, &r), what, ": ", a, op, b, " exceeds the largest size (",
            std::numeric_limits<int64_t>::max(), ")");
  return r;
}
}  // namespace

int64_t checked_add(int64_t a, int64_t b, const char* what) {
  return checked_op(a, b, what, " + ", [](int64_t x, int64_t y, int64_t* r) { return __builtin_add_overflow(x, y, r); });
}

int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  return checked_op(a, b, what, " x ", [](int64_t x, int64_t y, int64_t* r) { return __builtin_mul_overflow(x, y, r); });
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
