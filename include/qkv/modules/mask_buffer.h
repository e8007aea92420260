// qkv/modules/mask_buffer.h - the causal classes' `mask` buffer, held as what it means.
//
// The book registers `mask = triu(ones(n, n), diagonal=1)` (n = context_length) and reads its
// [:T, :T] corner on every forward. As a dense tensor that is n^2 floats: 16 GiB at n = 65,536,
// for a fact one flag says. A MaskBuffer is that buffer held symbolically:
//   causal  the book's triangle (as constructed, or loaded from a state dict that holds exactly
//           it): no storage; the kernels get "causal" and skip the blocks above the diagonal;
//   dense   any other (n, n) mask loaded from a state dict (non-zero = blocked), kept as given.
// In a state dict it is still PyTorch's `mask` buffer: to_tensor() writes the (n, n) tensor
// PyTorch saves, and load() accepts any (n, n) tensor, recognising the triangle.
#pragma once

#include <cstdint>

#include "qkv/core/tensor.h"

namespace qkv {

class MaskBuffer {
 public:
  explicit MaskBuffer(int64_t context_length);  // the causal triangle, n = context_length

  int64_t size() const { return n_; }             // n: the buffer is (n, n)
  bool is_causal() const { return !has_dense_; }  // exactly triu(ones(n, n), 1)
  Shape shape() const { return {n_, n_}; }

  // The (n, n) buffer as PyTorch holds it: triu(ones, 1) when causal (built on each call).
  Tensor to_tensor() const;
  // The (T, T) corner a T-token forward uses, T <= n (built on each call when causal).
  Tensor corner(int64_t T) const;
  // The dense mask, (n, n) contiguous; only when !is_causal().
  const Tensor& dense() const;

  // Takes an (n, n) tensor: the causal triangle becomes symbolic again, anything else is kept as
  // a dense copy. A tensor of another shape is an error naming both shapes.
  void load(const Tensor& mask);

 private:
  int64_t n_;
  bool has_dense_ = false;
  Tensor dense_;  // (n, n) when has_dense_
};

// Whether `mask` (n, n) is exactly triu(ones(n, n), 1): zero on and below the diagonal, non-zero
// above it.
bool is_causal_triangle(const Tensor& mask);

}  // namespace qkv
