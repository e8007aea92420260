// qkv/core/print.h - tensors printed as PyTorch prints them.
//
// The notebooks call torch.set_printoptions(precision=4, sci_mode=False); the defaults here are
// those, so `to_string(t)` gives what the notebooks show, for example
//   tensor([[0.4300, 0.1500, 0.8900],
//           [0.5500, 0.8700, 0.6600]])
// PyTorch's rules are followed: one width for every element (from the non-zero finite values),
// integer-valued tensors printed as "1., 0.", lines wrapped at `linewidth`, and tensors of more
// than `threshold` elements summarised with "..." keeping `edgeitems` at each edge. An undefined
// (absent) tensor prints as "tensor(undefined)".
#pragma once

#include <ostream>
#include <string>

#include "qkv/core/tensor.h"

namespace qkv {

struct PrintOptions {
  int precision = 4;
  int linewidth = 80;
  int64_t threshold = 1000;
  int edgeitems = 3;
};

std::string to_string(const Tensor& t, const PrintOptions& options = {});
std::ostream& operator<<(std::ostream& out, const Tensor& t);

}  // namespace qkv
