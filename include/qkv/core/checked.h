// qkv/core/checked.h - size arithmetic that cannot wrap: the one place where a size that came from
// outside (a flag, a file's header, a checkpoint's options) is multiplied or added.
//
//   int64_t n = checked_mul(rows, cols, "tensor 'W_query'");      // throws instead of wrapping
//   int64_t bytes = checked_bytes(n, sizeof(float), "tensor 'W_query'");
//   int64_t e = checked_numel(shape, "input");                    // product of a shape's sizes
//
// Every function throws qkv::Error naming `what`, the operands and the limit when the exact result
// is negative or does not fit in int64_t; sizes themselves must be >= 0.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>

namespace qkv {

int64_t checked_add(int64_t a, int64_t b, const char* what);
int64_t checked_mul(int64_t a, int64_t b, const char* what);
// The product of `sizes` (each >= 0); 1 for none.
int64_t checked_product(std::span<const int64_t> sizes, const char* what);
inline int64_t checked_product(std::initializer_list<int64_t> sizes, const char* what) {
  return checked_product(std::span<const int64_t>(sizes.begin(), sizes.size()), what);
}
// count * element_size, as bytes.
int64_t checked_bytes(int64_t count, int64_t element_size, const char* what);

}  // namespace qkv
