// qkv/core/random_tensor.h - torch.rand / torch.randn as tensors, drawn from a Generator.
#pragma once

#include "qkv/core/generator.h"
#include "qkv/core/tensor.h"

namespace qkv {

inline Tensor rand(const Shape& shape, Generator& gen) {  // torch.rand(*shape)
  Tensor t = Tensor::empty(shape);
  gen.uniform(t.data(), t.numel());
  return t;
}

inline Tensor randn(const Shape& shape, Generator& gen) {  // torch.randn(*shape)
  Tensor t = Tensor::empty(shape);
  gen.normal(t.data(), t.numel());
  return t;
}

}  // namespace qkv
